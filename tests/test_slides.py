"""Slide export: decks whose every script and style sheet is a local file, figures drawn by one plotly.js.

A small notebook with a known slide structure (3 slides, 5 subslides, a fragment, notes, a skipped
cell, two plotly figures, a widget) is exported and its HTML read back; the real labs are checked
for the same offline property. tests/browser opens the decks in Chromium.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import nbformat
import plotly.graph_objects as go
import pytest

from adapterlab.labfiles import LabNotFoundError, all_labs
from adapterlab.cli import main
from adapterlab.slides import OutputFolderError, SlidesError, export_slides

FIGURE = go.Figure(go.Scatter(x=[1, 2, 3], y=[3, 1, 2]), layout={"title": {"text": "loss"}}).to_dict()


class DeckParser(HTMLParser):
    """Collects what the offline and structure checks need from a deck."""

    def __init__(self):
        super().__init__()
        self.references: list[str] = []  # src of scripts, href of style sheets
        self.scripts: list[str] = []  # src of scripts
        self.sections: list[int] = []  # nesting depth of each <section>
        self.depth = 0
        self.in_notes = False
        self.notes: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script" and attrs.get("src"):
            self.scripts.append(attrs["src"])
            self.references.append(attrs["src"])
        if tag == "link" and attrs.get("href"):
            self.references.append(attrs["href"])
        if tag == "section":
            self.depth += 1
            self.sections.append(self.depth)
        if tag == "aside" and "notes" in attrs.get("class", ""):
            self.in_notes = True

    def handle_endtag(self, tag):
        if tag == "section":
            self.depth -= 1
        if tag == "aside":
            self.in_notes = False

    def handle_data(self, data):
        if self.in_notes:
            self.notes.append(data)


def parse(deck: Path) -> DeckParser:
    parser = DeckParser()
    parser.feed(deck.read_text(encoding="utf-8"))
    return parser


def assert_offline(deck: Path) -> None:
    """Every script and style sheet of the deck is a relative path to a file that exists."""
    html = deck.read_text(encoding="utf-8")
    parser = parse(deck)
    assert parser.references, f"{deck.name} references no scripts at all"
    for reference in parser.references:
        parts = urlsplit(reference)
        assert not parts.scheme and not parts.netloc, f"{deck.name} loads {reference} from the network"
        local = deck.parent / parts.path
        assert local.is_file(), f"{deck.name} references {reference}, which is not in {deck.parent}"
        if local.suffix == ".css":  # a theme may @import web fonts
            assert not re.search(r"url\(\s*['\"]?https?:", local.read_text(encoding="utf-8")), f"{reference} loads from the network"
    assert "import mermaid" not in html and "embed-amd.js" not in html, f"{deck.name} still loads a CDN module"
    assert "require.js" not in " ".join(parser.scripts)


def cell(kind, source, slide_type, outputs=()):
    new = nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell
    made = new(source, metadata={"slideshow": {"slide_type": slide_type}})
    if kind == "code":
        made.outputs = list(outputs)
    return made


def display(data):
    return nbformat.v4.new_output("display_data", data=data)


@pytest.fixture(scope="module")
def small_deck(tmp_path_factory):
    folder = tmp_path_factory.mktemp("slides")
    nb = nbformat.v4.new_notebook()
    widget = {"text/plain": "IntSlider(value=8)", "application/vnd.jupyter.widget-view+json": {"model_id": "m1", "version_major": 2, "version_minor": 0}}
    nb.cells = [
        cell("md", "# Title slide", "slide"),
        cell("md", "SPEAKER-NOTE-TEXT", "notes"),
        cell("md", "## Formula $h + W_{up} f(W_{down} h)$\n\nRead it from the inside out.", "slide"),
        cell("md", "FRAGMENT-TEXT", "fragment"),
        cell("code", "print(1)", "subslide"),
        cell("code", "SKIPPED_CELL = 1", "skip"),
        cell("code", "fig.show()", "slide", [display({"application/vnd.plotly.v1+json": FIGURE})]),
        cell("code", "panel", "subslide", [display(widget)]),
        cell("code", "snapshot.show()", "-", [display({"application/vnd.plotly.v1+json": FIGURE})]),
    ]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2, "version_minor": 0}}
    lab = folder / "01_small.ipynb"
    nbformat.write(nb, lab)
    [deck] = export_slides([str(lab)], folder / "out")
    return deck


def test_deck_is_named_after_the_lab_and_is_offline(small_deck):
    assert small_deck.name == "01_small.slides.html"
    assert_offline(small_deck)


def test_deck_keeps_the_slide_structure(small_deck):
    parser = parse(small_deck)
    html = small_deck.read_text(encoding="utf-8")
    assert parser.sections.count(1) == 3, "three cells start a slide"
    assert parser.sections.count(2) == 6, ("each slide has a first subslide, the title slide one more (where the "
                                           "numbers come from), plus two subslide cells")
    assert "SPEAKER-NOTE-TEXT" in "".join(parser.notes)
    assert html.count('class="fragment"') == 1
    assert "SKIPPED_CELL" not in html


def test_plotly_js_once_and_one_plot_per_figure(small_deck):
    parser = parse(small_deck)
    html = small_deck.read_text(encoding="utf-8")
    assert [src for src in parser.scripts if "plotly" in src] == ["lib/plotly.min.js"]
    assert html.count("Plotly.newPlot(") == 2
    assert html.count('"title":{"text":"loss"}') == 2, "each figure's data is embedded"


def test_widget_views_are_dropped(small_deck):
    html = small_deck.read_text(encoding="utf-8")
    assert "widget-view+json" not in html and "widget-state+json" not in html
    assert "IntSlider" not in html  # nor shown as the widget's text repr


def test_deck_without_figures_does_not_load_plotly(tmp_path):
    lab = tmp_path / "02_text.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [cell("md", "# Only text", "slide")]
    nbformat.write(nb, lab)
    [deck] = export_slides([str(lab)], tmp_path / "out")
    assert not [src for src in parse(deck).scripts if "plotly" in src]


def test_unknown_lab_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(LabNotFoundError, match="'nope' not found"):
        export_slides(["nope"], tmp_path)
    assert main(["slides", "nope", "--out", str(tmp_path)]) == 2
    assert "nope" in capsys.readouterr().err


@pytest.mark.parametrize("content", ["{ this is not json", '{"cells": 3, "metadata": {}, "nbformat": 4}'])
def test_a_broken_notebook_is_one_line_naming_it(tmp_path, capsys, content):
    lab = tmp_path / "01_broken.ipynb"
    lab.write_text(content, encoding="utf-8")
    with pytest.raises(SlidesError, match="01_broken.ipynb is not a notebook that can be read"):
        export_slides([str(lab)], tmp_path / "out")
    assert main(["slides", str(lab), "--out", str(tmp_path / "out")]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"adapterlab slides: {lab} is not a notebook") and "restore it" in line
    assert not list((tmp_path / "out").glob("*.html"))


def test_an_unwritable_out_folder_is_one_line_saying_what_to_do(tmp_path, capsys):
    lab = tmp_path / "01_small.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [cell("md", "# Only text", "slide")]
    nbformat.write(nb, lab)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(OutputFolderError, match="pass --out a folder you can write to"):
        export_slides([str(lab)], blocker / "decks")
    assert main(["slides", str(lab), "--out", str(blocker / "decks")]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"adapterlab slides: cannot write slides to {blocker / 'decks'}")


@pytest.mark.skipif(not all_labs(), reason="no lab notebooks in labs/ yet")
def test_every_lab_exports_to_an_offline_deck(tmp_path):
    decks = export_slides(None, tmp_path)
    assert [deck.name for deck in decks] == [f"{lab.stem}.slides.html" for lab in all_labs()]
    for deck in decks:
        assert_offline(deck)
        assert "Error displaying widget" not in deck.read_text(encoding="utf-8")


def test_a_copy_that_fails_for_many_files_names_a_few_one_line_each(tmp_path, capsys, monkeypatch):
    """shutil.copytree reports every file it could not write as a (source, destination, reason) tuple; the
    command shows a line for each of the first few, the count of the rest, and one summary line."""
    import shutil

    from adapterlab.teaching import slides

    lab = tmp_path / "01_small.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [cell("md", "# Only text", "slide")]
    nbformat.write(nb, lab)
    out = tmp_path / "out"
    failures = [(f"/src/mathjax/file{i}.js", str(out / "lib" / "mathjax" / f"file{i}.js"),
                 f"[Errno 28] No space left on device: '{out}/lib/mathjax/file{i}.js'") for i in range(40)]

    def full_disk(*args, **kwargs):
        raise shutil.Error(failures)

    monkeypatch.setattr(slides.shutil, "copytree", full_disk)
    assert main(["slides", str(lab), "--out", str(out)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[:3] == [f"  cannot write {out / 'lib' / 'mathjax' / f'file{i}.js'} (no space left on device)" for i in range(3)]
    assert lines[3] == "  ... and 37 more" and len(lines) == 5
    assert lines[4].startswith(f"adapterlab slides: cannot write slides to {out}: 40 files failed (no space left")
    assert "Errno" not in lines[4] and "(" not in lines[4].split("failed", 1)[0] and len(lines[4]) < 200


#: The package's readers of stored runs (a lab that calls one shows numbers trained before the lecture).
_STORED_READERS = r"seed_rows|lab_rows|stored_runs|tuned_rows|budget_rows|stored_lookup|tradeoff_points|open_set"
_TASK_NAMES = {"sst2": "SST-2", "cola": "CoLA"}


@pytest.mark.parametrize("lab", all_labs(), ids=lambda path: path.stem)
def test_the_title_slides_name_every_task_whose_stored_runs_the_lab_reads(lab):
    """Lab 7's slide 2 named only CoLA's data while half the deck showed stored SST-2 runs: a lab declares the
    tasks of the stored runs it reads, and the title slides name them."""
    from adapterlab.slide_layout import deck_title

    nb = nbformat.read(lab, as_version=4)
    code = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")
    read = {_TASK_NAMES[task] for task in re.findall(rf'\b(?:{_STORED_READERS})\(\s*"(sst2|cola)"', code)}
    if "read_stored_ablations(" in code:
        read.add("SST-2")  # lab 8's span ablations, made at the reference settings on SST-2
    reads_any = bool(re.search(rf"\b(?:{_STORED_READERS}|read_stored_ablations)\(", code))
    declared = set(nb.metadata.get("adapterlab", {}).get("stored_runs", []))
    assert read <= declared and bool(declared) == reads_any, \
        f"{lab.name} reads stored runs of {sorted(read)} and declares {sorted(declared)}"
    provenance = deck_title(nb, "", [])["provenance"]
    assert all(task in provenance.split("stored runs on", 1)[-1] for task in read), provenance
