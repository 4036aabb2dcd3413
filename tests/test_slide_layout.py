"""The lecture layout of a deck, read back from the exported HTML of small notebooks built here.

Each test builds a notebook with one feature (a test marker, a stderr notice, a tag, a prediction,
a long output, an absolute path, a tall figure), exports it with `export_slides` and checks the
deck's structure with an HTML parser; the real labs' decks are checked for absolute paths.
tests/browser checks in Chromium that every slide of every lab fits the screen.
"""

from __future__ import annotations

import html
import math
import re
from html.parser import HTMLParser

import nbformat
import plotly.graph_objects as go
import pytest

from adapterlab.labfiles import all_labs
from adapterlab.slide_layout import deck_outline, relative_paths
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
        if "deck-continued" in classes and self.slides:
            self.slides[-1]["marked_continued"] = True
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
    assert "stand-in" not in "".join(slide["text"] for slide in deck.slides[2:]), "the backbone line once, on the title slides"


def test_a_line_that_only_prints_the_stripped_backbone_line_leaves_with_it(tmp_path):
    printing = "opened = open_set()\nprint(opened.backbone.describe())\nprint(rows.describe())"
    deck = export(tmp_path, [
        cell("code", "load()", "slide", [stream("Backbone: tiny (stand-in)\n")]),
        cell("code", printing, "slide", [stream("Backbone: tiny (stand-in)\nSST-2 dev: 872 rows\n")]),
        cell("code", "print(model.backbone.describe())", "slide", [stream("Backbone: bert-base-uncased\n")]),
    ])
    [opened] = [slide for slide in deck.slides if "open_set" in slide["text"]]
    assert "backbone.describe" not in opened["text"], "a print whose line the deck removed would print nothing"
    assert "rows.describe()" in opened["text"] and "872 rows" in opened["text"], "the rest of the cell stays"
    assert "model.backbone.describe()" in deck.text, "a backbone line that is not the stand-in's stays, with its code"


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
    assert heights and max(heights) <= 560 and '"width":1600' not in html.replace(" ", "")
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

from adapterlab.slide_layout import (PROSE_WORDS, _legible_text, legible_figure, prose_words,  # noqa: E402
                                     text_tables_as_html, wrap_output_line)

CODE = '''def report(points, majority):
    """The trained parameters of one task: its adapters, the LayerNorms, the head."""
    total = sum(p.numel() for p in model.parameters() if p.requires_grad)  # trained
    print("Houlsby r = 2 and r = 8 below r = 64 by more than a spread, as lab 7 showed:", total)
    return tradeoff_figure(points, f"SST-2 dev accuracy ({points.backbone})", note=paper)'''


def test_a_code_cell_is_shown_exactly_as_written(tmp_path):
    deck = export(tmp_path, [cell("code", "# NBVAL_IGNORE_OUTPUT\n" + CODE, "slide")])
    [slide] = [slide for slide in deck.slides if "def report" in slide["text"]]
    assert CODE in slide["text"], "every line, its breaks and its indentation as in the notebook"


def test_a_printed_source_listing_is_shown_as_written():
    listing = CODE + "\n"
    output = {"output_type": "stream", "name": "stdout", "text": listing}
    assert _legible_text(output)["text"] == listing


def test_a_folded_explanation_is_the_next_key_press_headed_by_its_summary(tmp_path):
    folded = ("Run the cell and compare.\n\n<details><summary>What this teaches</summary>\n\n"
              "THE-EXPLANATION stays hidden.\n\n</details>\n\nAFTER-THE-FOLD")
    deck = export(tmp_path, [cell("md", "## Fold", "slide"), cell("md", folded)])
    [slide] = [slide for slide in deck.slides if "Fold" in slide["text"]]
    [fragment] = [fragment for fragment in slide["fragments"] if "THE-EXPLANATION" in fragment]
    assert "What this teaches" in fragment, "the summary heads its body, revealed together"
    assert "Run the cell and compare" not in "".join(slide["fragments"]), "the text before the fold shows at once"
    assert "<details>" not in slide["text"] and "AFTER-THE-FOLD" in deck.text


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


TUNED = """point               selected lr     trained  dev accuracy ×100 (seeds)  paper
Houlsby r=64              0.001     753,794             85.0 ± 1.0 (3)   94.0
Houlsby r=2              0.001*     181,658             83.3 ± 0.7 (3)
top-1 layers            0.0008*   1,923,074             82.2 ± 1.4 (3)
full fine-tuning         0.0002  22,713,986             87.0 ± 0.2 (3)   94.9
* a shared rate   ! best rate at the grid's edge   paper: Table 1, BERT-large, GLUE test
"""


def _table_cells(shown: str, tag: str) -> list[list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", shown)
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(rf"<{tag}[^>]*>.*?</{tag}>", row)]
            for row in rows if f"<{tag}" in row]


def test_a_table_with_a_footer_line_keeps_its_columns_and_the_footer_is_text():
    shown = text_tables_as_html(TUNED)
    lines = TUNED.splitlines()
    assert _table_cells(shown, "th") == [re.split(r"\s{2,}", lines[0].strip())]
    assert _table_cells(shown, "td") == [re.split(r"\s{2,}", line.strip()) + [""] * (5 - len(re.split(r"\s{2,}", line.strip())))
                                         for line in lines[1:5]]
    assert html.unescape(shown).rstrip().endswith(f"<pre>{lines[5]}</pre>")


def test_a_data_row_is_never_a_header():
    text = ("sst2   positive      41.6 ms   a gripping, beautifully acted film\n"
            "cola   acceptable    42.8 ms   The book was written by her.\n"
            "sst2   negative      40.9 ms   a dull, lifeless remake\n")
    shown = text_tables_as_html(text)
    assert "<th" not in shown and len(_table_cells(shown, "td")) == 3


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


@pytest.mark.parametrize(("low", "high"), [(1e-3, 1e2), (1e-30, 1e2), (1e-17, 1.0)])
def test_a_log_axis_shows_few_enough_labels_not_to_overlap(low, high):
    figure = {"data": [{"type": "scatter", "x": [1, 2], "y": [low, high]}], "layout": {"yaxis": {"type": "log"}}}
    dtick = legible_figure(figure)["layout"]["yaxis"]["dtick"]
    labels = math.floor(math.log10(high) / dtick) - math.ceil(math.log10(low) / dtick) + 1
    assert dtick >= 1 and 2 <= labels <= 6


def test_long_prose_keeps_about_sixty_words_on_the_slide_and_the_rest_in_its_notes(tmp_path):
    words = [f"word{i}" for i in range(140)]
    paragraph = " ".join("Then " + " ".join(words[i:i + 20]) + "." for i in range(0, 140, 20))
    deck = export(tmp_path, [cell("md", "## Many words\n\n" + paragraph, "slide")])
    [slide] = [slide for slide in deck.slides if "Many words" in slide["text"]]
    shown = re.findall(r"word\d+", slide["text"])
    assert slide["notes"], "the rest is in the notes"
    assert 0 < len(shown) <= PROSE_WORDS + 10 and prose_words(slide["text"]) <= PROSE_WORDS + 10
    assert shown + re.findall(r"word\d+", slide["notes"]) == words, "every word once, in order"


def test_an_output_moved_to_its_own_slide_says_what_it_is_and_gets_no_made_up_notes(tmp_path):
    """The slides the layout splits off name what they show; the notebook's notes sit on one of them, and the
    others get none: no generated filler ("Part 2 of ...") that names a heading or reads out the code."""
    lines = "".join(f"row {i}\n" for i in range(60))
    deck = export(tmp_path, [cell("md", "## The rows", "slide"), cell("code", "print_rows()", "-", [stream(lines)]),
                             cell("md", "POINT-AT-THE-ROWS", "notes")])
    shown = [slide for slide in deck.slides if re.search(r"row \d", slide["text"])]
    assert len(shown) >= 2 and all("The rows" in slide["text"] for slide in shown), "each slide names what it shows"
    notes = [" ".join(slide["notes"].split()) for slide in shown]
    assert sorted(notes) == sorted(["POINT-AT-THE-ROWS"] + [""] * (len(shown) - 1)), notes


def test_no_two_slides_of_a_lab_deck_have_the_same_notes(tmp_path):
    for deck in export_slides(all_labs()[:3], tmp_path):
        notes = [" ".join(slide["notes"].split()) for slide in Deck(deck.read_text(encoding="utf-8")).slides]
        repeated = {note[:60] for note in notes if note and notes.count(note) > 1}
        assert not repeated, f"{deck.name}: {len(repeated)} notes on more than one slide, e.g. {sorted(repeated)[:1]}"
    for lab in all_labs():  # every lab, from the layout's outline (checked against the export below)
        notes = [" ".join(slide["notes"].split()) for slide in deck_outline(nbformat.read(lab, as_version=4))]
        repeated = {note[:60] for note in notes if note and notes.count(note) > 1}
        assert not repeated, f"{lab.stem}: notes on more than one slide, e.g. {sorted(repeated)[:1]}"


def test_the_outline_has_the_exported_deck_s_slides_and_continuations(tmp_path):
    for lab, deck in zip(all_labs()[:4], export_slides(all_labs()[:4], tmp_path)):
        exported = [slide for slide in Deck(deck.read_text(encoding="utf-8")).slides if not slide["title"]]
        outline = deck_outline(nbformat.read(lab, as_version=4))
        assert len(outline) == len(exported), lab.stem
        assert [s["continued"] for s in outline] == ["(continued)" in s["text"].split("¶")[0] for s in exported], lab.stem


def test_a_summary_list_stays_on_one_slide_and_its_notes_hold_every_word(tmp_path):
    items = [f"- Point {i} is the first sentence of item {i}. Then come details {i} that a hall need not read "
             "from the slide, since the speaker says them while the list stays up." for i in range(5)]
    deck = export(tmp_path, [cell("md", "## What you saw\n\n" + "\n".join(items), "slide")])
    slides = [slide for slide in deck.slides if "Point" in slide["text"]]
    assert len(slides) == 1 and all(f"Point {i} is the first" in slides[0]["text"] for i in range(5))
    assert all(f"details {i}" in slides[0]["notes"] for i in range(5)), "what the slide leaves out is in its notes"
    assert prose_words(slides[0]["text"]) <= PROSE_WORDS + 10


def test_every_lab_s_summary_is_one_slide():
    """A lab's "What you saw" is read as one list: each item opens with a sentence short enough that all the
    items' first sentences share one slide, the details going to its notes."""
    for lab in all_labs():
        titles = [slide["title"] for slide in deck_outline(nbformat.read(lab, as_version=4))]
        summary = [title for title in titles if re.sub(r"<[^>]+>", "", title).lstrip("# ").startswith("What you saw")]
        assert len(summary) <= 1, f"{lab.stem}: the summary runs over {len(summary)} slides"


def test_a_list_that_does_not_fit_goes_on_over_slides_with_every_item_whole(tmp_path):
    """A list right under its lead line whose items do not fit beside it is never cut mid-phrase: the items
    that fit stay under the lead, the others continue on the next slide, each item whole and in order."""
    lead = "An adapter is inserted into every layer. If it starts far from the identity, it scrambles what was learned."
    items = [f"- ITEM-{i} says what part {i} of the lab does, in a sentence of words that run on and on and on."
             for i in range(4)]
    deck = export(tmp_path, [cell("md", "## Plan", "slide"), cell("md", lead + "\nIn this lab:\n" + "\n".join(items))])
    slides = [slide for slide in deck.slides if "Plan" in slide["text"]]
    shown = " ".join(" ".join(slide["text"].split()) for slide in slides)
    assert "…" not in shown and len(slides) >= 2 and "(continued)" in slides[1]["text"]
    assert re.findall(r"ITEM-\d", shown) == [f"ITEM-{i}" for i in range(4)], shown
    assert all(" ".join(item[2:].split()) in shown for item in items), "every item whole"
    assert all(prose_words(slide["text"]) <= PROSE_WORDS + 10 for slide in slides)


def test_no_slide_of_a_lab_deck_cuts_its_text_with_an_ellipsis(tmp_path):
    """A deck never drops words: every "…" a slide shows is one the notebook has (a source or an output)."""
    def words(text):  # the words and ellipses, without the markup a slide renders away (tables, code, bold)
        return " ".join(re.findall(r"\w+|…", text.replace("\\n", " ")))

    for deck, lab in zip(export_slides(all_labs(), tmp_path), all_labs()):
        notebook = words(lab.read_text(encoding="utf-8"))
        for slide in Deck(deck.read_text(encoding="utf-8")).slides:
            for cut in re.finditer(r"(\w+ ){0,3}…", words(slide["text"])):
                assert cut[0] in notebook, f"{lab.stem}: a slide cuts its text at “{cut[0]}”"


def test_a_cell_joins_its_slide_while_there_is_room_the_rest_going_to_the_notes(tmp_path):
    first = "FIRST " + "The first paragraph says one thing in plain words. " * 3
    second = "SECOND " + "The second paragraph adds a sentence worth reading aloud. " * 4
    deck = export(tmp_path, [cell("md", "## Room", "slide"), cell("md", first), cell("md", second)])
    shown = [slide for slide in deck.slides if "FIRST" in slide["text"] or "SECOND" in slide["text"]]
    assert len(shown) == 1 and "SECOND" in shown[0]["text"], "no slide split while the slide has room"
    assert "(continued)" not in deck.text
    assert "second paragraph" in shown[0]["notes"]


def test_code_taller_than_a_slide_is_shown_over_slides_cut_between_statements(tmp_path):
    """Every line as written, in order, each part within a slide, cut only where a top-level statement
    starts (never inside a call or a def), and the outputs after the last part."""
    body = "\n".join(f"    total += {i}  # line {i} of the body" for i in range(12))
    source = "\n\n".join(f"def part_{n}(total=0):\n{body}\n    return total" for n in range(3)) + "\nprint('DONE-PRINTED')"
    deck = export(tmp_path, [cell("md", "## Long code", "slide"),
                             cell("code", source, outputs=[stream("DONE-PRINTED\n")])])
    parts = [slide for slide in deck.slides if "def part_" in slide["text"]]
    assert len(parts) >= 2, "a 45-line cell does not fit one slide"
    for part in parts:  # each part holds whole functions: as many `def` lines as `return` lines
        assert part["text"].count("def part_") == part["text"].count("return total") >= 1
    shown = [line.strip() for part in parts for line in part["text"].splitlines() if "total" in line]
    assert shown == [line.strip() for line in source.splitlines() if "total" in line], "lines as written, in order"
    assert "DONE-PRINTED" in parts[-1]["text"].split("print(")[-1] and all("DONE" not in p["text"] for p in parts[:-1])


def test_a_reveal_too_long_for_its_prediction_slide_is_the_next_slide(tmp_path):
    question = "**Predict.** " + " ".join(["Which way will the number go?"] * 7) + "\n\n* (a) up\n* (b) down"
    lesson = "<details><summary>What this teaches</summary>\n\n" + "THE-LESSON " * 40 + "\n\n</details>"
    deck = export(tmp_path, [cell("md", "## Guess", "slide"), cell("md", question, "slide", tags=["prediction"]),
                             cell("code", 'my_prediction = ""', "skip", tags=["prediction"]), cell("md", lesson)])
    [asked] = [slide for slide in deck.slides if "Which way" in slide["text"]]
    [told] = [slide for slide in deck.slides if "THE-LESSON" in slide["text"]]
    assert asked is not told and "THE-LESSON" not in asked["text"]
    assert "result" in told["text"].lower() and "continued" not in told["text"]


def test_a_result_slide_under_a_heading_with_a_colon_reads_as_one_heading(tmp_path):
    """"Later: the sizes" gets "Later: the sizes — the result", never a second colon ("…: the sizes: the
    result" reads as a list)."""
    question = "**Predict.** " + " ".join(["Which way will the number go?"] * 7) + "\n\n* (a) up\n* (b) down"
    lesson = "<details><summary>What this teaches</summary>\n\n" + "THE-LESSON " * 40 + "\n\n</details>"
    deck = export(tmp_path, [cell("md", "## Later: the sizes", "slide"),
                             cell("md", question, "slide", tags=["prediction"]),
                             cell("code", 'my_prediction = ""', "skip", tags=["prediction"]), cell("md", lesson)])
    [told] = [slide for slide in deck.slides if "THE-LESSON" in slide["text"]]
    heading = told["text"].strip().splitlines()[0]
    assert heading.count(":") == 1 and heading.startswith("Later: the sizes") and "the result" in heading


@pytest.mark.parametrize("kind, slides", [("deck-table", 1), ("deck-table verdict-table", 2)])
def test_a_table_is_paged_by_the_height_its_rows_take(tmp_path, kind, slides):
    """Rows whose cells never wrap take 27 px at 21 px (measured in Chromium): seventeen fit one slide under a
    heading. A verdict table's names and verdicts wrap, so its rows count for more and it goes over two."""
    rows = "".join(f"<tr><td>TABLE-ROW-{i}-END</td><td>0.{i:03d}</td></tr>" for i in range(17))
    table = f'<table class="{kind}"><thead><tr><th>point</th><th>score</th></tr></thead><tbody>{rows}</tbody></table>'
    output = nbformat.v4.new_output("display_data", data={"text/html": table})
    deck = export(tmp_path, [cell("md", "## The rows", "slide"), cell("code", "show()", "-", [output])])
    shown = [slide for slide in deck.slides if "TABLE-ROW-" in slide["text"]]
    assert len(shown) == slides
    assert sorted(int(n) for slide in shown for n in re.findall(r"TABLE-ROW-(\d+)-END", slide["text"])) == list(range(17))


def test_a_reveal_s_outputs_that_leave_its_code_under_the_question_are_headed_as_its_result(tmp_path):
    """The code that answers a prediction stays under the question; its outputs, too tall for that slide, go
    on the next one, which says it shows the result, not that something was continued."""
    question = "**Predict.** Which way will the number go?\n\n* (a) up\n* (b) down"
    rows = "".join(f"ROW-{i} " + "x " * 10 + "\n" for i in range(20))  # taller than the slide less its code
    deck = export(tmp_path, [cell("md", "## The sizes", "slide"), cell("md", question, "slide", tags=["prediction"]),
                             cell("code", 'my_prediction = ""', "skip", tags=["prediction"]),
                             cell("code", "print(ROWS)", "fragment", [stream(rows)])])
    [asked] = [slide for slide in deck.slides if "Which way" in slide["text"]]
    [told] = [slide for slide in deck.slides if "ROW-0" in slide["text"]]
    assert asked is not told and "print" in asked["text"] and "print" not in told["text"]
    heading = told["text"].strip().splitlines()[0]
    assert heading.startswith("The sizes") and "the result" in heading and "continued" not in heading


@pytest.mark.parametrize("note", [None, "NOTE-UNDER-TITLE"])
def test_a_figure_moved_to_its_own_slide_is_headed_by_its_title_drawn_once(tmp_path, note):
    title = {"text": "FIGURE-TITLE<br>on two lines"} | ({"subtitle": {"text": note}} if note else {})
    figure = go.Figure(go.Scatter(x=[1, 2], y=[2, 1]), layout={"title": title, "height": 500}).to_dict()
    output = nbformat.v4.new_output("display_data", data={"application/vnd.plotly.v1+json": figure})
    code = "\n".join(f"x{i} = {i}" for i in range(12))
    deck = export(tmp_path, [cell("md", "## The section", "slide"), cell("code", code, "-", [output])])
    [figure_slide] = [slide for slide in deck.slides if "FIGURE-TITLE" in slide["text"]]
    assert "x11 = 11" not in figure_slide["text"], "the figure is on a slide of its own"
    assert figure_slide["text"].strip().startswith("FIGURE-TITLE on two lines")
    assert "(continued)" not in figure_slide["text"]
    html = (tmp_path / "out" / "42_small.slides.html").read_text(encoding="utf-8")
    drawn = re.findall(r'"title":\s*\{"text":\s*"([^"]*)"', html)
    assert not any("FIGURE-TITLE" in text for text in drawn), "the figure does not draw its title again"
    assert (note in drawn) if note else not drawn, "a note under the title becomes the figure's title"


def test_a_line_printed_before_a_figure_goes_with_it_to_the_figure_s_slide(tmp_path):
    """Lab 8 printed which dev rows its heatmap scores, then the heatmap: the line stood alone under the code, a
    result slide without notes, the heatmap on the next. Where both fit, the line goes with the figure."""
    figure = go.Figure(go.Heatmap(z=[[1, 2], [3, 4]]), layout={"title": {"text": "THE-HEATMAP"}, "height": 500})
    outputs = [stream("DATA-LINE: 300 of 872 rows\n"),
               nbformat.v4.new_output("display_data", data={"application/vnd.plotly.v1+json": figure.to_dict()})]
    code = "\n".join(f"x{i} = {i}" for i in range(12))
    deck = export(tmp_path, [cell("md", "## Every span", "slide"), cell("code", code, "-", outputs),
                             cell("md", "POINT-AT-THE-DIAGONAL", "notes")])
    [code_slide] = [slide for slide in deck.slides if "x11 = 11" in slide["text"]]
    [figure_slide] = [slide for slide in deck.slides if "DATA-LINE" in slide["text"]]
    assert code_slide is not figure_slide and "DATA-LINE" not in code_slide["text"]
    assert "POINT-AT-THE-DIAGONAL" in figure_slide["notes"]


def test_lines_a_loop_printed_as_several_outputs_are_one_table(tmp_path):
    """A kernel may store a print loop's lines as several outputs (lab 9's requests, once re-executed): the deck
    shows them as one block, not the first line as text and the rest as a table cut over two slides."""
    rows = [f"sst2  positive   {10 + i:4.1f} ms   ROW-{i} a sentence\n" for i in range(6)]
    outputs = [stream(rows[0]), stream("".join(rows[1:]))]
    deck = export(tmp_path, [cell("md", "## Each request", "slide"), cell("code", "serve()", "-", outputs)])
    [slide] = [slide for slide in deck.slides if "ROW-0" in slide["text"]]
    assert all(f"ROW-{i}" in slide["text"] for i in range(6))
    html = (tmp_path / "out" / "42_small.slides.html").read_text(encoding="utf-8")
    assert html.count("ROW-0") == 1 and len(re.findall(r"<table[^>]*>(?:(?!</table>).)*ROW-0", html, re.S)) == \
        len(re.findall(r"<table[^>]*>(?:(?!</table>).)*ROW-5", html, re.S)), "all six rows in one block"


def test_a_slide_never_opens_on_its_heading_alone(tmp_path):
    """A fragment right under a slide's heading shows with it: lab 3's "Counting floating-point operations" showed
    only its heading until a key press, which looks broken on a projector. A fragment after words on its slide (a
    question and its reveal) stays a fragment."""
    deck = export(tmp_path, [cell("md", "### Counting", "subslide"), cell("code", "COUNT-CODE = 1", "fragment"),
                             cell("md", "### Asking\n\nWhich way will it go?", "subslide"),
                             cell("code", "REVEAL-CODE = 2", "fragment")])
    [counting] = [slide for slide in deck.slides if "COUNT-CODE" in slide["text"]]
    [asking] = [slide for slide in deck.slides if "REVEAL-CODE" in slide["text"]]
    assert not any("COUNT-CODE" in fragment for fragment in counting["fragments"])
    assert any("REVEAL-CODE" in fragment for fragment in asking["fragments"])


def test_a_slide_that_opens_on_code_is_headed_by_its_section_and_says_it_continues_it(tmp_path):
    """Two slides in a row under one heading read as a slip when paging: the second says it continues the first."""
    deck = export(tmp_path, [cell("md", "## The section", "slide"), cell("md", "Some words."),
                             cell("code", "first_part()", "subslide"), cell("code", "second_part()", "-")])
    [code_slide] = [slide for slide in deck.slides if "first_part" in slide["text"]]
    assert code_slide["text"].strip().startswith("The section (continued)"), code_slide["text"][:80]
    assert "second_part" in code_slide["text"]


def test_a_slide_of_outputs_is_headed_by_the_latest_heading_not_the_section_s(tmp_path):
    deck = export(tmp_path, [cell("md", "## The section", "slide"), cell("md", "Some words."),
                             cell("md", "### The next part", "subslide"), cell("md", "More words."),
                             cell("code", "first_part()", "subslide")])
    [code_slide] = [slide for slide in deck.slides if "first_part" in slide["text"]]
    assert code_slide["text"].strip().startswith("The next part"), code_slide["text"][:80]
    assert "(continued)" in code_slide["text"] and "The section" not in code_slide["text"]


def test_a_lesson_that_does_not_fit_under_its_table_continues_the_slide_and_is_no_result(tmp_path):
    """A folded "What this teaches" answers no prediction: moved to a slide of its own it continues its slide
    (it was headed "… — the result" under a section with no prediction at all)."""
    rows = "".join(f"ROW-{i} " + "x " * 10 + "\n" for i in range(16))
    lesson = "<details><summary>What this teaches</summary>\n\n" + "THE-LESSON " * 40 + "\n\n</details>"
    deck = export(tmp_path, [cell("md", "## The rows", "slide"), cell("code", "print(ROWS)", "-", [stream(rows)]),
                             cell("md", lesson, "fragment")])
    [told] = [slide for slide in deck.slides if "THE-LESSON" in slide["text"]]
    assert "ROW-0" not in told["text"], "the lesson is on a slide of its own"
    heading = told["text"].strip().splitlines()[0]
    assert heading.startswith("The rows") and "continued" in heading and "result" not in heading


def test_a_prediction_can_name_the_heading_its_result_is_shown_under(tmp_path):
    """The section's heading may name another topic than the question ("The library is the lesson — the result"
    over a question on zero weights): a prediction's metadata names its result's heading."""
    question = "**Predict.** " + " ".join(["Which way will the number go?"] * 7) + "\n\n* (a) up\n* (b) down"
    lesson = "<details><summary>What this teaches</summary>\n\n" + "THE-LESSON " * 40 + "\n\n</details>"
    asked = cell("md", question, "slide", tags=["prediction"])
    asked.metadata["adapterlab"] = {"result_heading": "Both at zero"}
    deck = export(tmp_path, [cell("md", "## Another topic", "slide"), asked,
                             cell("code", 'my_prediction = ""', "skip", tags=["prediction"]), cell("md", lesson)])
    [told] = [slide for slide in deck.slides if "THE-LESSON" in slide["text"]]
    heading = told["text"].strip().splitlines()[0]
    assert heading.startswith("Both at zero") and "the result" in heading and "Another topic" not in heading


def test_notes_that_fall_past_their_output_move_onto_it_and_a_split_off_slide_is_marked(tmp_path):
    """An output whose explanation (and notes) the layout puts on the next slide keeps the notes: they point
    at the output. The slide split off for want of room is marked as a continuation and gets no notes."""
    lines = "".join(f"row {i}\n" for i in range(22))
    explanation = "EXPLAIN " + "The rows above show one thing that a student should see at once. " * 5
    deck = export(tmp_path, [cell("md", "## The rows", "slide"), cell("code", "print_rows()", "-", [stream(lines)]),
                             cell("md", explanation), cell("md", "POINT-AT-THE-ROWS", "notes")])
    [output] = [slide for slide in deck.slides if "row 21" in slide["text"]]
    [explained] = [slide for slide in deck.slides if "EXPLAIN" in slide["text"]]
    assert output is not explained, "the layout puts the explanation on a slide of its own"
    assert "POINT-AT-THE-ROWS" in output["notes"] and "POINT-AT-THE-ROWS" not in explained["notes"]
    assert explained["notes"].strip(), "the explanation's words the slide had no room for stay in its notes"
    [code] = [slide for slide in deck.slides if "print_rows()" in slide["text"]]
    assert output.get("marked_continued") and explained.get("marked_continued") and not code.get("marked_continued")


def test_a_numbered_item_shows_its_words_not_only_its_number(tmp_path):
    """A numbered item's "2." is its marker, not a sentence: the item shows its first sentence after it."""
    lead = "Counting is a claim about numbers. Here we count every one of them, module by module, in real models. "
    items = ["1. one adapter, and everything a task trains", "2. BERT-base and BERT-large: closed form beside a count. It is exact to the last "
             "parameter in every model that this lab builds, from one adapter up to BERT-large with its head.",
             "3. what a task costs on disk. Then the optimizer memory it needs for every parameter it trains."]
    deck = export(tmp_path, [cell("md", "## Plan\n\n" + lead + "\n\n" + "\n".join(items), "slide")])
    shown = " ".join(" ".join(slide["text"].split()) for slide in deck.slides if "Plan" in slide["text"])
    assert "BERT-base and BERT-large" in shown and "what a task costs on disk" in shown, shown


def test_a_lab_that_loads_a_model_or_data_never_says_on_its_title_slides_that_it_loads_none():
    """The provenance line is read from what the lab prints; a lab whose code loads a backbone, a trained set or
    a data split prints what it loaded, so its title slides never fall back to "no backbone or data set"."""
    from adapterlab.slide_layout import deck_title

    loaders = ("load_backbone(", "open_set(", "run_experiment(", "load_experiment(", "load_split(")
    for lab in all_labs():
        nb = nbformat.read(lab, as_version=4)
        if any(loader in cell.source for cell in nb.cells if cell.cell_type == "code" for loader in loaders):
            provenance = deck_title(nb, None, [])["provenance"]
            assert provenance.startswith("Numbers from: backbone"), f"{lab.stem}: {provenance}"


def test_a_list_item_on_a_full_slide_shows_its_whole_first_sentence_not_a_clause(tmp_path):
    """An item cut for room keeps its first sentence to the full stop: a clause that ends in ";" or ":" leaves
    the point in the notes (a summary showed "accuracy flatters;" and lost what it flatters)."""
    items = [f"- Point {i}: the measure flatters; TAIL-{i} says what it flatters. Then details {i} that run on and "
             "on for the speaker to say aloud while the list stays up." for i in range(3)]
    deck = export(tmp_path, [cell("md", "## What you saw\n\n" + "\n".join(items), "slide")])
    shown = " ".join(" ".join(slide["text"].split()) for slide in deck.slides if "Point" in slide["text"])
    assert all(f"TAIL-{i} says what it flatters." in shown for i in range(3)), shown
    assert "details 0" not in shown


def test_a_paragraph_cut_for_room_ends_at_a_full_stop_not_at_a_semicolon(tmp_path):
    """The words that fit end a whole sentence: lab 7's summary showed "all fifteen runs end at MCC 0;" and left
    the other half of its sentence, the point, in the notes."""
    lead = " ".join(["Words of a long first sentence that fills the slide,"] * 4) + " so it ends here."
    second = "With the pooler frozen all runs end at MCC 0; HALF-TWO with it trained they end above 0."
    deck = export(tmp_path, [cell("md", "## A summary\n\n" + lead + " " + second + " " + lead, "slide")])
    [slide] = [slide for slide in deck.slides if "A summary" in slide["text"]]
    shown = " ".join(slide["text"].split())
    assert not shown.rstrip().endswith(";") and ("HALF-TWO" in shown) == ("MCC 0;" in shown), shown
    assert "HALF-TWO" in " ".join(slide["notes"].split()) or "HALF-TWO" in shown


def test_a_folded_lesson_is_never_shown_as_its_label_alone(tmp_path):
    """A "What this teaches" block revealed where its slide has little room shows its label with the lesson's first
    sentence: lab 9's latency result showed "What this teaches." alone, its lesson in the notes."""
    lead = " ".join(["Words that fill most of the slide before the reveal,"] * 5) + " so it ends here."
    lesson = ("<details><summary>What this teaches</summary>\n\nLESSON-START adapters are cheap to store and to "
              "train, but not free to run: every token passes through them, so an adapter model pays a few percent "
              "on every request (the rows houlsby and pfeiffer above, on a quiet machine; the operation counts below "
              "on any machine), while a merged LoRA or a folded linear adapter pays nothing, at the price of "
              "serving one task.\n\n</details>")
    deck = export(tmp_path, [cell("md", "## A result\n\n" + lead, "slide"), cell("md", lesson, "fragment")])
    shown = [" ".join(slide["text"].split()) for slide in deck.slides if "What this teaches" in slide["text"]]
    assert shown and all("LESSON-START" in text for text in shown), shown


def test_a_figure_whose_title_heads_its_slide_keeps_the_room_for_a_note_above_its_plot():
    """Lab 7's init-scale figures set the paper's finding above the plot; when the layout takes the figure's
    title out to head the slide it used to shrink the top margin to 30 px, and the note vanished off the top."""
    from adapterlab.teaching.instructor.slide_layout import _figure_title_as_heading

    def figure_cell(annotations):
        layout = {"title": {"text": "SST-2 vs init scale"}, "margin": {"t": 100}, "annotations": annotations}
        output = nbformat.v4.new_output("display_data", data={"application/vnd.plotly.v1+json": {"data": [],
                                                                                                "layout": layout}})
        return nbformat.v4.new_code_cell("fig", outputs=[output], metadata={"transient": {"remove_source": True}})

    marks = [{"text": "1e-2: paper", "yref": "paper", "y": 1}]
    noted, plain = figure_cell(marks + [{"text": "paper Fig. 6", "yref": "paper", "y": 1.09}]), figure_cell(marks)
    for cell, top in ((noted, 100), (plain, 30)):
        assert _figure_title_as_heading([cell]) == "SST-2 vs init scale"
        layout = cell.outputs[0]["data"]["application/vnd.plotly.v1+json"]["layout"]
        assert "title" not in layout and layout["margin"]["t"] == top


def test_a_long_prediction_keeps_the_sentences_before_its_question_that_fit():
    """A bare "What happens?" asks nothing: the sentence that says what is asked about stays on the slide when it
    fits beside the question and the choices; only what does not fit goes to the notes."""
    from adapterlab.slide_layout import PROSE_WORDS, _split_prose, prose_words

    choices = "\n\n* (a) within a point of its best rate\n* (b) a few points below its best\n* (c) at the majority class"
    context = "Full fine-tuning at the adapters' rate, 1e-3, for the same 300 steps."
    history = " ".join(["Earlier labs trained the adapters at many rates and kept the best one."] * 4)
    shown, notes, rest = _split_prose(f"**Predict.** {history} {context} What happens?{choices}", PROSE_WORDS, True)
    assert shown.startswith("**Predict.** ") and f"{context} What happens?" in shown and shown.endswith(choices.strip())
    assert rest == "" and prose_words(shown) <= PROSE_WORDS
    assert notes and history.startswith(notes) and notes + " " + shown.removeprefix("**Predict.** ").split(
        f" {context}")[0] == history  # the earliest sentences moved, none lost, none twice
    whole = f"**Predict.** {context} What happens?{choices}"
    tight = prose_words(choices) + 4  # room for the question and the choices, not for the sentence before them
    assert _split_prose(whole, tight, True)[:2] == (f"**Predict.** What happens?{choices}", context)


def test_a_summary_item_runs_past_its_bold_lead_in():
    from adapterlab.slide_layout import _first_sentence_of_item

    item = "* **The map.** Adapters leave the backbone alone. Merged LoRA writes into it."
    assert _first_sentence_of_item(item) == "* **The map.** Adapters leave the backbone alone."


def test_the_stand_in_notice_on_the_slide_says_what_it_means_and_the_notes_keep_it_whole(tmp_path):
    """A lecture hall needs "whose numbers these are", not the hub's settings ("HF_HUB_OFFLINE is set" on slide 2
    of three decks): where the backbone line names the model the stand-in replaced, the slide says so in words."""
    notice = ("NOTICE: bert-base-uncased is not in the local Hugging Face cache and HF_HUB_OFFLINE is set, so the "
              "offline stand-in all-MiniLM-L6-v2 (6 layers, d=384) was loaded instead. Connect once to use it.")
    line = "Backbone: all-MiniLM-L6-v2 (offline stand-in for bert-base-uncased: 6 layers, d=384)\n"
    deck = export(tmp_path, [cell("code", "load()", "slide", [stream(notice + "\n", "stderr"), stream(line)])])
    source = deck.slides[1]
    shown = " ".join(source["text"].split())
    assert "HF_HUB_OFFLINE" not in shown and "bert-base-uncased was not available" in shown and "stand-in's" in shown
    assert " ".join(notice.split()) in " ".join(source["notes"].split())


def test_a_reveal_whose_code_fills_a_slide_shows_its_result_on_the_slide_of_its_outputs(tmp_path):
    """A reveal too tall for its question's slide goes on slides of its own; where its outputs go on past its
    code, the code's slide continues the question and the outputs' slide is the result (it was the code's)."""
    question = "**Predict.** Which way will the number go?\n\n* (a) up\n* (b) down"
    code = "\n".join(f"step_{i} = {i}" for i in range(19))
    rows = "".join(f"ROW-{i} " + "x " * 10 + "\n" for i in range(18))
    deck = export(tmp_path, [cell("md", "## The sizes", "slide"), cell("md", question, "slide", tags=["prediction"]),
                             cell("code", 'my_prediction = ""', "skip", tags=["prediction"]),
                             cell("code", code, "fragment", [stream(rows)]), cell("md", "The reveal: up.", "notes")])
    [coded] = [slide for slide in deck.slides if "step_18" in slide["text"]]
    [told] = [slide for slide in deck.slides if "ROW-0" in slide["text"]]
    assert coded is not told
    assert coded["text"].strip().startswith("The sizes (continued)") and "result" not in coded["text"]
    assert told["text"].strip().startswith("The sizes — the result") and "The reveal" in told["notes"]


def test_a_prediction_can_name_a_later_heading_of_its_section_as_its_result(tmp_path):
    """Means first, verdicts a slide later: the question names the verdicts' heading; the means continue the
    question's slide, and the verdicts' own heading says it shows the result."""
    question = "**Predict.** What will the rule say?\n\n* (a) ahead\n* (b) undecided"
    asked = cell("md", question, "slide", tags=["prediction"])
    asked.metadata["adapterlab"] = {"result_heading": "The verdicts"}
    deck = export(tmp_path, [cell("md", "## The means", "slide"), asked,
                             cell("code", 'my_prediction = ""', "skip", tags=["prediction"]),
                             cell("code", "print(MEANS)", "fragment", [stream("MEANS-TABLE\n")]),
                             cell("md", "### The verdicts", "subslide"),
                             cell("code", "print(VERDICTS)", "fragment", [stream("VERDICT-TABLE\n")])])
    [asked_slide] = [slide for slide in deck.slides if "What will the rule say" in slide["text"]]
    [means] = [slide for slide in deck.slides if "MEANS-TABLE" in slide["text"]]
    [verdicts] = [slide for slide in deck.slides if "VERDICT-TABLE" in slide["text"]]
    assert "MEANS-TABLE" not in asked_slide["text"] and means is not verdicts
    assert means["text"].strip().startswith("The means (continued)") and "result" not in means["text"]
    assert verdicts["text"].strip().startswith("The verdicts — the result")


def test_a_short_list_that_does_not_fit_beside_its_paragraph_moves_whole(tmp_path):
    """Two or three items are read as one: cut between slides, a list of two showed one item per slide."""
    paragraph = " ".join(["The module goes into every layer of a pretrained network."] * 4) + " It must:"
    items = "* **ITEM-ONE.** It changes h by less than five percent.\n* **ITEM-TWO.** A step can change more."
    deck = export(tmp_path, [cell("md", f"## Exercise\n\n{paragraph}\n\n{items}", "slide")])
    holding = [slide for slide in deck.slides if "ITEM-ONE" in slide["text"] or "ITEM-TWO" in slide["text"]]
    assert len(holding) == 1 and "ITEM-TWO" in holding[0]["text"], [slide["text"][:60] for slide in holding]


def test_a_run_summary_that_repeats_what_the_run_printed_first_shows_those_lines_once(tmp_path):
    started = "Precision: fp32\ntrain: SST-2 train: 40 rows [a 20 / b 20] from the GLUE folder (SST-2/train.tsv)\n"
    summary = started + "best at step 300: accuracy 0.84\n"
    deck = export(tmp_path, [cell("md", "## A run", "slide"),
                             cell("code", "run()\nprint(run.summary())", "-", [stream(started), stream(summary)])])
    assert deck.text.count("Precision: fp32") == 1 and deck.text.count("best at step 300") == 1


def test_a_question_with_its_choices_keeps_the_sentence_before_it_up_to_the_prediction_budget(tmp_path):
    """Four short choices read at a glance: a question a few words over a prose slide's budget keeps the sentence
    that says what it asks about (lab 7's "In 300 steps r = 2 stayed at MCC 0" went to the notes)."""
    from adapterlab.slide_layout import WHOLE_WORDS, PROSE_WORDS, prose_words

    context = "CONTEXT-SENTENCE in three hundred steps the small adapter stayed at zero in every seed."
    question = "Tuned and trained three epochs, where does it end, by the course's rule?"
    choices = "\n\n" + "\n".join(f"* ({letter}) ahead of it and level with it" for letter in "abcd")
    source = f"**Predict.** {context} {question}{choices}"
    assert PROSE_WORDS < prose_words(source) <= WHOLE_WORDS
    deck = export(tmp_path, [cell("md", "## Later", "slide"), cell("md", source, "slide", tags=["prediction"]),
                             cell("code", 'my_prediction = ""', "skip", tags=["prediction"])])
    [asked] = [slide for slide in deck.slides if "course's rule" in slide["text"]]
    assert "CONTEXT-SENTENCE" in asked["text"] and "CONTEXT-SENTENCE" not in asked["notes"]


def test_a_short_list_that_moves_takes_the_sentence_that_leads_into_it(tmp_path):
    """"… so it must meet two rules:" at the foot of one slide and the rules on the next read as a slip: the
    sentence that leads into a list that moves goes with it; a list that fits beside its lead stays."""
    paragraph = " ".join(["The module goes into every layer of a pretrained network."] * 3) + " LEAD-IN it must meet three rules:"
    items = "\n".join(f"* **ITEM-{n}.** It changes the hidden state by less than five percent of its norm." for n in range(3))
    deck = export(tmp_path, [cell("md", f"## Exercise\n\n{paragraph}\n\n{items}", "slide")])
    [listed] = [slide for slide in deck.slides if "ITEM-0" in slide["text"]]
    assert all(f"ITEM-{n}" in listed["text"] for n in range(3)) and "LEAD-IN" in listed["text"]
    [opened] = [slide for slide in deck.slides if "every layer" in slide["text"]]
    assert opened is not listed and "LEAD-IN" not in opened["text"] + opened["notes"]


def test_a_long_source_listing_is_paged_between_statements_never_inside_one():
    """A listing cut by height alone left "fused=…))" alone at the top of a slide, its call on the slide before:
    pages end where a statement does (a comment stays with the code under it)."""
    from adapterlab.slide_layout import _stream_pages

    body = "".join(f"    value_{i} = compute(\n        first_{i},\n        second_{i},\n    )\n" for i in range(12))
    listing = "def long_function(argument):\n    # the comment that explains the call below it\n" + body
    pages = [page["text"] for page in _stream_pages(nbformat.v4.new_output("stream", name="stdout", text=listing))]
    assert len(pages) > 1 and "".join(pages) == listing, "every line once, in order"
    for page in pages[1:]:
        first = page.splitlines()[0]
        assert first.lstrip().startswith(("value_", "#")), f"a page opens inside a statement: {first!r}"
    assert all(not page.rstrip("\n").splitlines()[-1].lstrip().startswith("#") for page in pages)


def test_a_lead_in_moved_to_the_notes_ends_as_a_sentence_there(tmp_path):
    """"… The stored runs of these five methods:" as the last words of a note read as cut off mid-thought: the
    slide shows what it introduces, so in the notes it ends with a full stop."""
    paragraph = " ".join(["The protocol chooses each rate on sentences kept out of training."] * 5)
    deck = export(tmp_path, [cell("md", f"## The runs\n\n{paragraph}\n\nLEAD-IN the stored runs of these five methods:",
                                  "slide"), cell("code", "show()", "-", [stream("TABLE\n")])])
    [slide] = [slide for slide in deck.slides if "TABLE" in slide["text"]]
    notes = " ".join(slide["notes"].split())
    assert "LEAD-IN the stored runs of these five methods." in notes and not notes.endswith(":")
