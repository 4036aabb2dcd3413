"""The lecture layout of a deck, read back from the exported HTML of small notebooks built here.

Each test builds a notebook with one feature (a test marker, a stderr notice, a tag, a prediction,
a long output, an absolute path, a tall figure), exports it with `export_slides` and checks the
deck's structure with an HTML parser; the real labs' decks are checked for absolute paths.
tests/browser checks in Chromium that every slide of every lab fits the screen.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import nbformat
import plotly.graph_objects as go
import pytest

from adapterlab.labfiles import all_labs
from adapterlab.slide_layout import relative_paths
from adapterlab.slides import export_slides


class Deck(HTMLParser):
    """The slides of a deck: for each innermost <section>, its visible text, its notes and the text of
    its fragments; plus the text of the title slide."""

    def __init__(self, html: str):
        super().__init__()
        self.slides: list[dict] = []  # {"text", "notes", "fragments", "top"}: top = starts a top-level slide
        self.depth = 0
        self.skip = 0  # inside <script> or <style>
        self.stack: list[str] = []  # "notes" / "fragment" / other, for the open elements that matter
        self.new_top = False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("script", "style"):
            self.skip += 1
        if tag == "section":
            self.depth += 1
            if self.depth == 1:
                self.new_top = True
            if self.depth == 2:
                self.slides.append({"text": "", "notes": "", "fragments": [], "top": self.new_top,
                                    "title": "deck-title" in (attrs.get("class") or "")})
                self.new_top = False
        classes = (attrs.get("class") or "").split()
        if tag == "aside" and "notes" in classes:
            self.stack.append("notes")
        elif tag == "div" and "fragment" in classes:
            self.stack.append("fragment")
            self.slides[-1]["fragments"].append("")
        elif tag in ("aside", "div"):
            self.stack.append("other")

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self.skip -= 1
        if tag == "section":
            self.depth -= 1
        if tag in ("aside", "div") and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if self.skip or not self.slides or self.depth < 2:
            return
        slide = self.slides[-1]
        if "notes" in self.stack:
            slide["notes"] += data
            return
        slide["text"] += data
        if "fragment" in self.stack:
            slide["fragments"][-1] += data

    @property
    def text(self) -> str:
        return "".join(slide["text"] for slide in self.slides)


def cell(kind, source, slide_type="-", outputs=(), tags=()):
    new = nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell
    metadata = {"slideshow": {"slide_type": slide_type}}
    if tags:
        metadata["tags"] = list(tags)
    made = new(source, metadata=metadata)
    if kind == "code":
        made.outputs = list(outputs)
    return made


def stream(text, name="stdout"):
    return nbformat.v4.new_output("stream", name=name, text=text)


def export(tmp_path, cells, metadata=None) -> Deck:
    nb = nbformat.v4.new_notebook()
    nb.cells = [cell("md", "# Lab 42 — A small lab\n\nWhat it is about.", "slide")] + cells
    nb.metadata.update(metadata or {})
    tmp_path.mkdir(parents=True, exist_ok=True)
    lab = tmp_path / "42_small.ipynb"
    nbformat.write(nb, lab)
    [deck] = export_slides([str(lab)], tmp_path / "out")
    return Deck(deck.read_text(encoding="utf-8"))


def test_test_markers_and_solution_markers_leave_the_code(tmp_path):
    deck = export(tmp_path, [cell("code", "# NBVAL_CHECK_OUTPUT\nanswer = 6 * 7\n### BEGIN SOLUTION\nx = 1\n### END SOLUTION", "slide")])
    assert "answer" in deck.text and "x = 1" in re.sub(r"\s+", " ", deck.text)
    assert "NBVAL" not in deck.text and "SOLUTION" not in deck.text


def test_stderr_leaves_the_slides_and_the_notice_is_on_the_title_slide_once(tmp_path):
    notice = "NOTICE: the stand-in was loaded instead."
    deck = export(tmp_path, [
        cell("code", "load()", "slide", [stream(notice + "\n", "stderr"), stream("Backbone: tiny (stand-in)\n")]),
        cell("code", "load()", "slide", [stream(notice + "\n", "stderr"), stream("SST-2 dev: 32 of 872 rows [a 1 / b 2] from GLUE folder /x/glue/SST-2/dev.tsv\n")]),
    ])
    title, source = deck.slides[0], deck.slides[1]
    assert title["title"] and "Lab 42 — A small lab" in title["text"]
    assert source["text"].count(notice) == 1 and deck.text.count(notice) == 1, "the notice once, after the title"
    assert "backbone tiny (stand-in)" in source["text"] and "SST-2 dev" in source["text"] and "GLUE" in source["text"]
    assert "Lab 42" not in "".join(slide["text"] for slide in deck.slides[1:]), "the title is shown once, on the title slide"


def test_a_long_notice_shows_its_first_sentence_and_the_notes_hold_all_of_it(tmp_path):
    notice = ("NOTICE: bert-base-uncased is not in the cache, so the stand-in was loaded instead. "
              "Every number that follows comes from the stand-in. Connect once to use bert-base-uncased.")
    deck = export(tmp_path, [cell("code", "load()", "slide", [stream(notice + "\n", "stderr"), stream("Backbone: tiny\n")])])
    source = deck.slides[1]
    assert "the stand-in was loaded instead." in source["text"] and "Connect once" not in source["text"]
    assert " ".join(notice.split()) in " ".join(source["notes"].split())


def test_a_skipped_loading_cell_still_names_backbone_and_data_on_the_title_slide(tmp_path):
    loading = cell("code", "load()", "slide", [stream("Backbone: tiny (stand-in)\nSST-2 dev: 32 of 872 rows [a 1 / b 2] "
                                                   "from the GLUE folder (SST-2/dev.tsv)\n")], tags=["deck-skip"])
    deck = export(tmp_path, [loading, cell("md", "## Next", "slide")])
    title = deck.slides[1]["text"]
    assert "backbone tiny (stand-in)" in title and "SST-2 dev" in title
    assert "load()" not in deck.text


def test_title_slide_lists_the_objectives_or_none(tmp_path):
    goals = ["write the adapter from memory", "say which matrix is zero"]
    with_goals = export(tmp_path / "a", [], {"adapterlab": {"objectives": goals}})
    assert all(goal in with_goals.slides[0]["text"] for goal in goals)
    without = export(tmp_path / "b", [])
    assert "After this lab" not in without.slides[0]["text"]
    assert "No pretrained backbone or data set" in without.slides[1]["text"]


def test_deck_skip_leaves_a_cell_out_and_keeps_its_slide_start(tmp_path):
    deck = export(tmp_path, [
        cell("code", "import secret_plumbing", "slide", tags=["deck-skip"]),
        cell("md", "AFTER-THE-SKIPPED-CELL"),
    ])
    assert "secret_plumbing" not in deck.text
    [slide] = [slide for slide in deck.slides if "AFTER-THE-SKIPPED-CELL" in slide["text"]]
    assert slide["top"] and "What it is about" not in slide["text"], "the skipped cell's slide start moved to the next cell"


def test_deck_hide_input_shows_only_the_output(tmp_path):
    deck = export(tmp_path, [cell("code", "config = make_config()", "slide", [stream("the output line\n")], tags=["deck-hide-input"])])
    assert "make_config" not in deck.text and "the output line" in deck.text


def test_notes_cells_become_speaker_notes(tmp_path):
    deck = export(tmp_path, [cell("md", "## A slide", "slide"), cell("md", "SAY-THIS-ALOUD", "notes")])
    [slide] = [slide for slide in deck.slides if "A slide" in slide["text"]]
    assert "SAY-THIS-ALOUD" in slide["notes"] and "SAY-THIS-ALOUD" not in deck.text


def test_a_prediction_is_a_slide_of_its_own_with_the_reveal_as_its_fragment(tmp_path):
    deck = export(tmp_path, [
        cell("md", "## Before", "slide"),
        cell("md", "**Predict.** Which one? (a) this (b) that", "-", tags=["prediction"]),
        cell("code", 'my_prediction = ""  # write "a", "b" or "c", then run the cells below', "skip", tags=["prediction"]),
        cell("code", "reveal()", "subslide", [stream("THE-ANSWER\n")]),
        cell("md", "**What this teaches.** Something.", "fragment"),
    ])
    assert "my_prediction" not in deck.text
    [slide] = [slide for slide in deck.slides if "Predict." in slide["text"]]
    assert slide["top"] and "Before" not in slide["text"]
    assert "THE-ANSWER" in slide["fragments"][0] and "Predict." not in slide["fragments"][0]


def test_a_prediction_answered_on_a_later_slide_keeps_that_slide(tmp_path):
    deck = export(tmp_path, [
        cell("md", "**Predict.** Which one? (a) this (b) that", "slide", tags=["prediction"]),
        cell("code", 'my_prediction = ""', "skip", tags=["prediction"]),
        cell("md", "## A NEW SECTION", "slide"),
    ])
    [prompt] = [slide for slide in deck.slides if "Predict." in slide["text"]]
    [section] = [slide for slide in deck.slides if "A NEW SECTION" in slide["text"]]
    assert prompt is not section and section["top"] and not prompt["fragments"]


def test_a_long_output_moves_to_a_subslide_of_its_own(tmp_path):
    lines = "".join(f"row {i}\n" for i in range(60))
    deck = export(tmp_path, [cell("code", "print_rows()", "slide", [stream("short line\n"), stream(lines)])])
    [code_slide] = [slide for slide in deck.slides if "print_rows" in slide["text"]]
    [rows_slide] = [slide for slide in deck.slides if "row 59" in slide["text"]]
    assert code_slide is not rows_slide and not rows_slide["top"], "the rows continue on a subslide"
    assert "print_rows" not in rows_slide["text"] and "short line" in code_slide["text"]


def test_a_text_output_taller_than_a_slide_is_cut_over_subslides(tmp_path):
    listing = "".join(f"line-{i:03d}\n" for i in range(100))
    deck = export(tmp_path, [cell("code", "print(source)", "slide", [stream(listing)])])
    shown = [re.findall(r"line-\d{3}", slide["text"]) for slide in deck.slides]
    assert sorted(sum(shown, [])) == [f"line-{i:03d}" for i in range(100)], "every line, once"
    assert sum(bool(lines) for lines in shown) >= 4 and max(len(lines) for lines in shown) <= 30


def test_cells_that_overflow_a_slide_continue_on_a_subslide(tmp_path):
    paragraph = "A sentence that fills a line of the slide with words. " * 4
    deck = export(tmp_path, [cell("md", "## Long", "slide")] + [cell("md", f"PARAGRAPH-{i} {paragraph}") for i in range(8)])
    slides = [slide for slide in deck.slides if "PARAGRAPH-" in slide["text"]]
    assert len(slides) >= 2 and all(not slide["top"] for slide in slides[1:])
    assert sum(slide["text"].count("PARAGRAPH-") for slide in slides) == 8


def test_figures_get_a_height_that_fits_a_slide(tmp_path):
    tall = go.Figure(go.Scatter(x=[1, 2], y=[2, 1]), layout={"height": 1200, "width": 1600}).to_dict()
    output = nbformat.v4.new_output("display_data", data={"application/vnd.plotly.v1+json": tall})
    exported = export(tmp_path, [cell("code", "fig", "slide", [output])])
    html = (tmp_path / "out" / "42_small.slides.html").read_text(encoding="utf-8")
    heights = [int(h) for h in re.findall(r'"height":\s*(\d+)', html)]
    assert heights and max(heights) <= 450 and '"width":1600' not in html.replace(" ", "")
    assert exported.slides


@pytest.mark.parametrize(("text", "shown"), [
    ("SST-2 train: 10 rows from GLUE folder /any/abs/path/SST-2/train.tsv", "SST-2 train: 10 rows from GLUE SST-2/train.tsv"),
    ("GLUE folder: /work/shared/data/glue", "GLUE folder: glue"),
    ("saved to /home/ada/runs/sst2 and C:\\Users\\ada\\runs\\cola", "saved to sst2 and cola"),
    ("[negative 16 / positive 16], tokens/s, W_up/W_down", "[negative 16 / positive 16], tokens/s, W_up/W_down"),
])
def test_absolute_paths_are_shortened(text, shown):
    assert relative_paths(text) == shown


ABSOLUTE_PATH = re.compile(r"(?<![\w.])(?:/(?:home|root|work|tmp|usr|Users|mnt|opt|var)\b[^\s\"'<]*|[A-Za-z]:\\\w)")


@pytest.mark.skipif(not all_labs(), reason="no lab notebooks in labs/ yet")
def test_no_deck_shows_an_absolute_path(tmp_path):
    for deck in export_slides(None, tmp_path):
        text = Deck(deck.read_text(encoding="utf-8"))
        shown = text.text + "".join(slide["notes"] for slide in text.slides)
        assert not ABSOLUTE_PATH.findall(shown), f"{deck.name} shows {ABSOLUTE_PATH.findall(shown)[:3]}"


# --------------------------------------------------------------------------------------------------
# legible at the back of the room: lines that fit, tables, figure fonts, prose within a slide
# --------------------------------------------------------------------------------------------------

import ast  # noqa: E402

from adapterlab.slide_layout import (CODE_WIDTH, PROSE_WORDS, legible_figure, prose_words,  # noqa: E402
                                     reflow_code, text_tables_as_html, wrap_output_line)

LONG_CODE = '''def report(points, majority):
    """The trained parameters of one task: its adapters, the LayerNorms when trained, and the classifier head."""
    paper = (f"Paper, BERT-base on MNLI-m (Fig. 4): top layer only (~9M trained) {points['top'].value} %, "
             f"adapters r = 64 (~2M) {points['adapters'].value} %, full fine-tuning {points['full'].value} %.")
    print("Houlsby r = 2 and r = 8 below r = 64 by more than one spread:", below_by(points[2], points[64]) and below_by(points[8], points[64]))
    total = sum(p.numel() for p in model.parameters() if p.requires_grad)  # the parameters one task trains and saves
    return tradeoff_figure(points, f"SST-2 dev accuracy against trained parameters ({points.backbone}, 3 seeds)", baseline=("majority", majority), note=paper)
'''


def _docstrings_as_words(source: str) -> str:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body[0].value.value = " ".join(str(body[0].value.value).split())
    return ast.dump(tree)


def test_long_code_lines_are_reflowed_into_the_same_program():
    shown = reflow_code(LONG_CODE)
    assert max(len(line) for line in shown.splitlines()) <= CODE_WIDTH
    assert _docstrings_as_words(shown) == _docstrings_as_words(LONG_CODE), "the program (and docstring words) unchanged"
    assert "# the parameters one task trains and saves" in shown, "a trailing comment keeps its words"
    continued = [line for line in shown.splitlines()[1:] if line.strip() and not line.startswith("    ")]
    assert not continued, f"a continuation line starts at the left margin: {continued}"


def test_code_that_does_not_parse_is_shown_as_written():
    magic = "%timeit " + "x" * 120
    assert reflow_code(magic) == magic


def test_a_text_table_becomes_an_html_table_with_the_same_cells():
    text = ("runs on the stand-in, seeds 0, 1, 2\n"
            "method                  trained  % of backbone   dev accuracy, mean ± spread   paper (Table 1, test)\n"
            "Houlsby adapters        753,794          3.32%   0.838 ± 0.004 (3 seeds)       94.0\n"
            "head only               148,610          0.65%   0.710 ± 0.003 (3 seeds)       —\n"
            "full fine-tuning     22,713,986        100.00%   0.842 ± 0.003 (3 seeds)       94.9\n"
            "all 9 runs stored\n")
    shown = text_tables_as_html(text)
    rows = re.findall(r"<tr>(.*?)</tr>", shown)
    cells = [[re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<t[hd][^>]*>.*?</t[hd]>", row)] for row in rows]
    expected = [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()[1:5]]
    assert [[c.replace("&amp;", "&") for c in row] for row in cells] == expected
    assert "<pre>runs on the stand-in, seeds 0, 1, 2</pre>" in shown and "all 9 runs stored" in shown
    assert text_tables_as_html("one line\nanother line of text\nand a third one\n") is None


def test_a_long_output_line_wraps_at_spaces_with_a_hanging_indent():
    line = "  largest spread: " + ", ".join(f"{i * 0.0137:.4f} at σ = {10.0 ** -i:.0e}" for i in range(8))
    pieces = wrap_output_line(line, 60)
    assert len(pieces) > 1 and all(len(piece) <= 60 for piece in pieces)
    assert pieces[0].startswith("  l") and all(piece.startswith("      ") for piece in pieces[1:])
    assert " ".join(piece.strip() for piece in pieces).split() == line.split(), "no word or number cut"


def test_every_figure_font_is_at_least_the_minimum():
    figure = {"data": [{"type": "scatter", "textfont": {"size": 9}}],
              "layout": {"xaxis": {"type": "log", "tickfont": {"size": 10}}, "legend": {"font": {"size": 24}},
                         "annotations": [{"text": "note", "font": {"size": 11}}]}}
    shown = legible_figure(figure, 18)
    sizes = re.findall(r"'size': (\d+)", str(shown))
    assert sizes and min(map(int, sizes)) >= 18 and shown["layout"]["legend"]["font"]["size"] == 24
    assert shown["layout"]["font"]["size"] == 18 and shown["layout"]["xaxis"]["dtick"] == 1


def test_long_prose_keeps_about_sixty_words_on_the_slide_and_the_rest_in_its_notes(tmp_path):
    words = [f"word{i}" for i in range(140)]
    paragraph = " ".join("Then " + " ".join(words[i:i + 20]) + "." for i in range(0, 140, 20))
    deck = export(tmp_path, [cell("md", "## Many words\n\n" + paragraph, "slide")])
    [slide] = [slide for slide in deck.slides if "Many words" in slide["text"]]
    shown = re.findall(r"word\d+", slide["text"])
    assert slide["notes"], "the rest is in the notes"
    assert 0 < len(shown) <= PROSE_WORDS + 10 and prose_words(slide["text"]) <= PROSE_WORDS + 10
    assert shown + re.findall(r"word\d+", slide["notes"]) == words, "every word once, in order"


def test_an_output_moved_to_its_own_slide_says_what_it_is_and_has_the_notes(tmp_path):
    lines = "".join(f"row {i}\n" for i in range(60))
    deck = export(tmp_path, [cell("md", "## The rows", "slide"), cell("code", "print_rows()", "-", [stream(lines)]),
                             cell("md", "POINT-AT-THE-ROWS", "notes")])
    shown = [slide for slide in deck.slides if "row 59" in slide["text"] or "row 0\n" in slide["text"]]
    assert shown and all("The rows" in slide["text"] for slide in shown), "each slide names what it shows"
    assert all("POINT-AT-THE-ROWS" in slide["notes"] for slide in shown)
