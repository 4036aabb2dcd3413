"""PDF printing of decks: finding Chromium, counting slides and pages, and the errors an instructor sees.

Printing itself needs Chromium and is tested in tests/browser/test_slides_fit.py.
"""

from __future__ import annotations

import nbformat
import pytest

from adapterlab.slides_pdf import PdfError, find_chromium, page_count, slide_count


def test_slide_count_counts_every_vertical_slide():
    deck = ("<div class='slides'><section><section>title</section></section>"
            "<section><section>a</section><section>b</section></section>"
            "<section><section>c<aside class='notes'>n</aside></section></section></div>")
    assert slide_count(deck) == 4


def test_page_count_counts_page_objects_not_the_page_tree(tmp_path):
    pdf = tmp_path / "deck.pdf"
    pdf.write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Pages /Count 2 /Kids [2 0 R 3 0 R] >>\n"
                    b"2 0 obj << /Type /Page /Parent 1 0 R >>\n3 0 obj <</Type/Page/Parent 1 0 R>>\n")
    assert page_count(pdf) == 2


def test_a_named_chromium_that_is_not_there_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("ADAPTERLAB_CHROMIUM", str(tmp_path / "no-such-chromium"))
    with pytest.raises(PdfError, match="ADAPTERLAB_CHROMIUM=.*is not a file; point it at a Chromium"):
        find_chromium()


def test_no_chromium_on_the_path_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.delenv("ADAPTERLAB_CHROMIUM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PdfError, match="install one .*or set ADAPTERLAB_CHROMIUM"):
        find_chromium()


def test_the_slides_command_reports_a_missing_chromium_in_one_line(monkeypatch, tmp_path, capsys):
    from adapterlab.cli import main

    monkeypatch.setenv("ADAPTERLAB_CHROMIUM", str(tmp_path / "no-such-chromium"))
    lab = tmp_path / "01_tiny.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Tiny\n\nText.", metadata={"slideshow": {"slide_type": "slide"}})]
    nbformat.write(nb, lab)
    assert main(["slides", str(lab), "--out", str(tmp_path / "out"), "--pdf"]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "ADAPTERLAB_CHROMIUM" in error


def test_the_slides_command_counts_decks_pdfs_and_contact_sheets_apart(monkeypatch, tmp_path, capsys):
    """Two labs with --pdf and --contact-sheet write two decks, two PDFs and two contact sheets: the summary says
    so, not "6 slide decks"."""
    import adapterlab.slides_pdf as slides_pdf
    import adapterlab.teaching.instructor.slides_preview as slides_preview
    from adapterlab.cli import main

    def fake(suffix, data):  # printing and drawing need Chromium; the count does not
        def make(deck):
            made = deck.with_name(deck.name.removesuffix(".slides.html") + suffix)
            made.write_bytes(data)
            return made
        return make

    monkeypatch.setattr(slides_pdf, "deck_to_pdf", fake(".pdf", b"%PDF-1.4\n"))
    monkeypatch.setattr(slides_preview, "deck_contact_sheet", fake(".contact.png", b"\x89PNG\r\n\x1a\n"))
    labs = []
    for number in (1, 2):
        lab = tmp_path / f"0{number}_tiny.ipynb"
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_markdown_cell(f"# Tiny {number}\n\nText.", metadata={"slideshow": {"slide_type": "slide"}})]
        nbformat.write(nb, lab)
        labs.append(str(lab))
    assert main(["slides", *labs, "--out", str(tmp_path / "out"), "--pdf", "--contact-sheet"]) == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith("2 slide decks, 2 PDFs, 2 contact sheets in "), summary
    assert len(list((tmp_path / "out").glob("*.pdf"))) == 2
    assert len(list((tmp_path / "out").glob("*.contact.png"))) == 2
