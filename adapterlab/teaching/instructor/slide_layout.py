"""Shape a lab notebook into a deck for a lecture hall: every slide fits, no plumbing shows.

A notebook is written to be run and read; the same cells projected at 1280×720 run off the slide,
open with test markers and repeat the stand-in notice on every slide that loads the backbone. The
`LectureLayout` preprocessor rewrites a copy of the notebook before nbconvert's slides exporter
groups it into slides:

- cells tagged ``deck-skip`` are left out; cells tagged ``deck-hide-input`` show only their output;
- ``# NBVAL_...`` lines and nbgrader's solution markers are removed from the code, which is otherwise
  shown exactly as written (the labs' code fits 88 columns);
- a folded ``<details>`` block shows its summary, then its body as a fragment (the next key press);
- stderr outputs (the stand-in NOTICE) and the printed stand-in backbone line are left out, and so is
  a line of code that only prints that line (it would print nothing on the slide): the title slides
  carry the notice once; lines a cell printed once are not shown again where its summary repeats them;
- absolute paths in outputs become short relative ones (a deck must not show a machine's folders);
- plotly figures get a height that fits a slide;
- a prediction (markdown and code cells tagged ``prediction``) becomes a slide of its own, its code
  cell left out, the next cell revealed as a fragment;
- a slide whose estimated height exceeds the slide continues on a new subslide, a code cell taller
  than a slide shows its code over subslides, cut between top-level statements (every line as
  written), and a code cell whose outputs do not fit beside its code shows them on subslides of
  their own.

The estimate is coarse on purpose; the deck's template measures each slide in the browser and
scales down, within a readable limit, what still does not fit. `deck_title` collects what the
title slide shows. Instructors get all of this from ``adapterlab slides``.
"""

from __future__ import annotations

import ast
import base64
import copy
import html
import math
import re
import struct
import textwrap

from nbconvert.preprocessors import Preprocessor

PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
SKIP_TAG = "deck-skip"
HIDE_INPUT_TAG = "deck-hide-input"
PREDICTION_TAG = "prediction"

# Slide geometry in reveal.js units (the deck is 1280 × 720, scaled to the screen; no prompts).
SLIDE_BUDGET_PX = 660  # the slide's height less the cells' padding
FIGURE_HEIGHT_PX = 420  # a figure's height when it does not ask for one
FIGURE_MAX_PX = 560  # the most a figure may ask for (a legend in rows, a note under its title): a heading fits above
FIGURE_FIT_PX = 360  # a figure counts this high at most: the deck gives it less height where the slide needs it
TEXT_LINE_PX, TEXT_CHARS = 36, 92  # markdown at 26 px
TABLE_ROW_PX = 28  # a row of a table output whose cells never wrap, at 21 px (measured in Chromium: 27 px)
FOOTER_LINE_PX, FOOTER_CHARS = 24, 90  # a verdict table's footer at 19 px, on 86 % of the slide's width (wraps early)
FOOTER_MARGIN_PX = 18  # the paragraph's margin above the footer
CODE_LINE_PX, CODE_CHARS = 28, 96  # code and text outputs at 21 px (DejaVu Sans Mono: 12.6 px a character)
FIGURE_FONT_PX = 18  # the smallest text in a figure (axis titles, ticks, legend)
HEADING_PX = 60
PROSE_WORDS = 55  # words of prose a slide shows (the browser tests allow about 60); the rest goes to its notes
#: A question with its choices, or a short list with the paragraph that leads into it, may run to this many words
#: to stay whole on one slide (short choices and items are read at a glance; the browser tests allow about 60)
WHOLE_WORDS = 60
MIN_ROOM_WORDS = 20  # a markdown cell joining a slide with less room than this starts a slide of its own
SHORT_LIST_ITEMS = 3  # a list this short is never cut between two slides where a slide can show it whole
MIN_ITEM_WORDS = 6  # the room a paragraph leaves for each item of a list after it
MIN_SENTENCE_WORDS = 8  # less room than this on a slide, and a paragraph moves whole to the notes
CELL_GAP_PX = 16
LABEL_PX = HEADING_PX + CELL_GAP_PX  # the heading a split-off slide repeats, with its gap

_MARKER_LINE = re.compile(r"^\s*(#\s*NBVAL_\w*|###\s*(BEGIN|END)\s+SOLUTION)\b.*$")
# "GLUE folder /any/abs/path/SST-2/train.tsv" → "GLUE SST-2/train.tsv"
_GLUE_PATH = re.compile(r"GLUE folder:? (?:/|[A-Za-z]:\\)\S*?[/\\]([\w.-]+[/\\][\w.-]+\.\w+)\b")
# any other absolute path (POSIX with two or more parts, home-relative, or Windows) → its last part
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/\\~-])(?:~|(?:[A-Za-z]:)?)(?:[/\\][\w.+-]+){2,}[/\\]?")
_BACKBONE_LINE = re.compile(r"\bBackbone: ([^|\n]+)")
# the line a lab prints when it loads a backbone: the title slides say it once for the deck
_STANDIN_LINE = re.compile(r"^Backbone: [^\n]*\bstand-in\b[^\n]*(?:\n|$)", re.MULTILINE)
# a line of code that prints nothing but the backbone line (left out with it)
_BACKBONE_PRINT = re.compile(r"^\s*print\([\w.]*backbone\.describe\(\)\)\s*$")
_DATA_LINE = re.compile(r"\b((?:SST-2|CoLA|[A-Z][\w-]+) (?:train|dev|test)): [\d,]+(?: of [\d,]+)? rows.* from (.+)$", re.MULTILINE)


def slide_type(cell) -> str:
    return cell.metadata.get("slideshow", {}).get("slide_type", "-") or "-"


def set_slide_type(cell, kind: str) -> None:
    cell.metadata.setdefault("slideshow", {})["slide_type"] = kind


def tags(cell) -> set[str]:
    return set(cell.metadata.get("tags", []))


def relative_paths(text: str) -> str:
    """`text` with every absolute path shortened: a GLUE file to its task folder and name, any
    other path to its last part."""
    text = _GLUE_PATH.sub(r"GLUE \1", text)
    return _ABSOLUTE_PATH.sub(lambda match: re.split(r"[/\\]", match.group(0).rstrip("/\\"))[-1], text)


def _wrapped_lines(text: str, width: int) -> int:
    return sum(max(1, math.ceil(len(line) / width)) for line in text.splitlines() or [""])


def _png_height(data: str, width_px: int = 860) -> int:
    """Shown height of a base64 PNG scaled down to the slide's width."""
    try:
        raw = base64.b64decode(data[:64])
        width, height = struct.unpack(">II", raw[16:24])
    except (ValueError, struct.error):
        return FIGURE_HEIGHT_PX
    return round(height * min(1.0, width_px / max(width, 1)))


_FOOTER = re.compile(r'<p class="verdict-footer">(.*?)</p>', re.DOTALL)


def output_height(output) -> int:
    """Estimated height of one output on a slide, in reveal.js pixels."""
    if output.get("output_type") == "stream":
        return _wrapped_lines(output.get("text", ""), CODE_CHARS) * CODE_LINE_PX + 8
    data = output.get("data", {})
    if PLOTLY_MIME in data:
        return min(data[PLOTLY_MIME].get("layout", {}).get("height", FIGURE_HEIGHT_PX), FIGURE_FIT_PX) + 8
    if "image/png" in data:
        return _png_height(data["image/png"]) + 8
    if "text/html" in data:
        html = "".join(data["text/html"])
        footers = [re.sub(r"<[^>]+>", "", text) for text in _FOOTER.findall(html)]
        return (max(1, html.count("<tr")) * _row_px(html) + html.count("<caption") * TEXT_LINE_PX
                + sum(math.ceil(len(text) / FOOTER_CHARS) * FOOTER_LINE_PX + FOOTER_MARGIN_PX for text in footers) + 8)
    if "text/markdown" in data:
        return _wrapped_lines("".join(data["text/markdown"]), TEXT_CHARS) * TEXT_LINE_PX
    if "text/plain" in data:
        return _wrapped_lines("".join(data["text/plain"]), CODE_CHARS) * CODE_LINE_PX + 8
    return 0


def _row_px(html: str) -> int:
    """The height a row of an HTML table output counts for: a verdict table's names and verdicts wrap (one or
    two lines, measured 27 or 51 px), so its rows count as a line and a half; other tables' cells never wrap."""
    return TEXT_LINE_PX if "verdict-table" in html else TABLE_ROW_PX


def cell_height(cell) -> int:
    """Estimated height of a cell (input and outputs) on a slide, in reveal.js pixels."""
    if cell.cell_type == "markdown":
        return sum(_markdown_line_height(line) for line in cell.source.splitlines()) + CELL_GAP_PX
    if cell.cell_type != "code":
        return 0
    code = 0 if cell.metadata.get("transient", {}).get("remove_source") else _wrapped_lines(cell.source, CODE_CHARS) * CODE_LINE_PX + 20
    return code + sum(output_height(output) for output in cell.get("outputs", [])) + CELL_GAP_PX


def _markdown_line_height(line: str) -> int:
    if line.startswith("#"):
        return HEADING_PX
    if not line.strip():
        return 12  # the gap between paragraphs
    return _wrapped_lines(line, TEXT_CHARS) * TEXT_LINE_PX


class LectureLayout(Preprocessor):
    """Rewrite a notebook's cells for a deck that fits the screen (see the module's docstring).

    Puts `deck_title` (title, objectives, provenance, notice) into ``resources["deck_title"]``.
    """

    def preprocess(self, nb, resources):
        nb = copy.deepcopy(nb)
        notices = [output.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                   for output in cell.get("outputs", []) if output.get("name") == "stderr"]
        title_cell = next((cell for cell in nb.cells if cell.cell_type == "markdown"), None)
        heading = title_cell.source if title_cell is not None else ""
        title = _take_title(title_cell)
        title_slide = deck_title(nb, title, notices)  # before deck-skip drops the cells that load backbone and data
        cells = []
        for cell in nb.cells:
            if SKIP_TAG in tags(cell):
                cells.append(_removed(cell))
                continue
            if cell.cell_type == "code":
                _clean_code_cell(cell)
                cells.append(cell)
            else:
                cells += unfolded(cell)
        if title is not None and not title_cell.source.strip():
            _removed(title_cell)
        cells = _within_words(_carry_slide_starts(_predictions_as_slides(cells)))
        leading_notes = []
        while cells and slide_type(cells[0]) == "notes":
            leading_notes.append(cells.pop(0).source)
        if title_cell is not None and all(slide_type(cell) == "notes" for cell in cells):  # only the title: keep its cell
            title_cell.source = heading
            set_slide_type(title_cell, "slide")
            cells.insert(0, title_cell)
        nb.cells = _shown_at_once(_label_continuations(_fit_to_slides(cells)))
        resources["deck_title"] = title_slide | {"notes": "\n\n".join(leading_notes)}
        return nb, resources


def _removed(cell):
    """Mark a cell to leave out of the deck (`_carry_slide_starts` drops it)."""
    cell.metadata["deck_removed"] = True
    return cell


def _take_title(cell) -> str | None:
    """The text of the first markdown cell's `# ` heading, removed from the cell (the title slide shows it)."""
    if cell is None:
        return None
    lines = cell.source.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("# "):
            cell.source = "\n".join(lines[:index] + lines[index + 1 :]).strip()
            return line[2:].strip()
    return None


def _clean_code_cell(cell) -> None:
    cell.source = "\n".join(line for line in cell.source.splitlines() if not _MARKER_LINE.match(line)).strip("\n")
    if HIDE_INPUT_TAG in tags(cell):
        cell.metadata.setdefault("transient", {})["remove_source"] = True
    kept, printed = [], []
    for output in cell.get("outputs", []):
        if output.get("name") == "stderr" or WIDGET_VIEW_MIME in output.get("data", {}):
            continue  # the notice is on the title slides; a widget needs a kernel (the deck drops it)
        if "text" in output:
            if _STANDIN_LINE.search(output["text"]):
                cell.source = "\n".join(line for line in cell.source.splitlines() if not _BACKBONE_PRINT.match(line))
            output["text"] = relative_paths(_STANDIN_LINE.sub("", output["text"]))
            for text in printed:  # a run's summary repeats the lines it printed when it started: shown once
                if text.strip() and output["text"].startswith(text):
                    output["text"] = output["text"][len(text):]
            if output.get("output_type") == "stream":
                printed.append(output["text"])
            if not output["text"].strip():
                continue
        data = output.get("data", {})
        for mime in ("text/plain", "text/html", "text/markdown"):
            if mime in data:
                data[mime] = relative_paths("".join(data[mime]))
        if (kept and output.get("output_type") == "stream" and kept[-1].get("output_type") == "stream"
                and output_height({**output, "text": kept[-1]["text"] + output["text"]}) <= SLIDE_BUDGET_PX - LABEL_PX):
            kept[-1]["text"] += output["text"]  # a print loop's lines a kernel stored as several outputs: one block
            continue
        kept.append(output)
    cell.outputs = [_shown(output) for output in kept]


def _shown(output):
    """An output as the deck shows it: text legible (:func:`_legible_text`), a figure fitted to a slide."""
    output = _legible_text(output)
    data = output.get("data", {})
    if PLOTLY_MIME in data:
        legible_figure(data[PLOTLY_MIME])
        layout = data[PLOTLY_MIME].setdefault("layout", {})
        layout["height"] = min(layout.get("height") or FIGURE_HEIGHT_PX, FIGURE_MAX_PX)
        layout.pop("width", None)
        layout["autosize"] = True
    return output


def _legible_text(output):
    """A text output (a stream or a plain-text result) as the deck shows it: a fixed-width table becomes
    an HTML table, a line longer than the slide is wrapped with a hanging indent."""
    data = output.get("data", {})
    if output.get("output_type") == "stream":
        text = output.get("text", "")
    elif "text/plain" in data and set(data) <= {"text/plain"}:
        text = data["text/plain"]
    else:
        return output
    table = text_tables_as_html(text)
    if table is not None:
        return {"output_type": "display_data", "metadata": {}, "data": {"text/html": table}}
    wrapped = "\n".join(piece for line in text.split("\n") for piece in wrap_output_line(line))
    if output.get("output_type") == "stream":
        output["text"] = wrapped
    else:
        data["text/plain"] = wrapped
    return output


_DETAILS = re.compile(r"<details>\s*<summary>(.*?)</summary>(.*?)</details>", re.S)


def unfolded(cell) -> list:
    """A markdown cell with folded ``<details>`` blocks as the deck shows it: the text before each block
    and its summary (in bold) in one cell, the block's body in the next cell as a fragment, revealed
    by the next key press, as a student opens it in JupyterLab."""
    match = _DETAILS.search(cell.source)
    if cell.cell_type != "markdown" or match is None:
        return [cell]
    summary = " ".join(re.sub(r"<[^>]+>", "", match.group(1)).split())
    before = cell.source[: match.start()].strip()
    body = _markdown_cell(f"**{summary.rstrip('.')}.** {match.group(2).strip()}", "fragment")
    body.metadata["deck_keep_with_previous"] = LESSON  # a prediction's reveal is kept with it too, as True
    rest = cell.source[match.end():].strip()
    after = unfolded(_markdown_cell(rest, "-")) if rest else []
    if not before:  # the block alone: it takes the cell's place (and its slide start, if any)
        body.metadata["slideshow"] = cell.metadata.get("slideshow", {"slide_type": "fragment"})
        if slide_type(body) in ("-", "notes"):
            set_slide_type(body, "fragment")
        return [body] + after
    shown = copy.deepcopy(cell)
    shown.source = before
    return [shown, body] + after


def _later_result(cells, at: int):
    """The markdown cell after the prediction at `cells[at]`, within its section, whose heading the
    prediction names as its result's (`RESULT_HEADING_KEY`): a table of verdicts a slide or two after the
    means it reads. None where the heading is not one of the notebook's own (it then heads the reveal)."""
    wanted = cells[at].metadata.get("adapterlab", {}).get(RESULT_HEADING_KEY)
    if not wanted:
        return None
    for cell in cells[at + 1:]:
        if cell.cell_type != "markdown" or slide_type(cell) == "notes" or cell.metadata.get("deck_removed"):
            continue
        if PREDICTION_TAG in tags(cell) or (slide_type(cell) == "slide" and _HEADING.search(cell.source)):
            return None
        if any(found.rstrip(".:") == wanted for found in _HEADING.findall(cell.source)):
            return cell
    return None


def _predictions_as_slides(cells):
    """A prediction prompt starts a slide; its code cell is left out; the next shown cell, unless it starts
    a slide of its own, is its reveal (a fragment), and a folded lesson later on that slide is part of the
    answer too (moved to a slide of its own, it shows the result). A prediction that names a later heading
    of its section as its result's has no reveal under it: the cells up to that heading continue its slide,
    and that heading says it shows the result."""
    revealing = answering = False
    for at, cell in enumerate(cells):
        if cell.metadata.get("deck_removed"):
            continue
        if PREDICTION_TAG in tags(cell):
            if cell.cell_type == "markdown":
                set_slide_type(cell, "slide")
                later = _later_result(cells, at)
                revealing = answering = later is None
                if later is not None:
                    cell.metadata["adapterlab"].pop(RESULT_HEADING_KEY)
                    later.source = _HEADING.sub(lambda found: found.group(0).rstrip() + RESULT_SUFFIX, later.source, count=1)
                    after = next((c for c in cells[at + 1:] if slide_type(c) not in ("skip", "notes")
                                  and not c.metadata.get("deck_removed") and PREDICTION_TAG not in tags(c)), None)
                    if after is not None and slide_type(after) not in ("slide", "subslide"):
                        set_slide_type(after, "subslide")  # the means it reads come after the question
                        after.metadata["deck_continued"] = True
            else:
                _removed(cell)
            continue
        if slide_type(cell) in ("slide", "subslide"):
            answering = False
        elif answering and cell.metadata.get("deck_keep_with_previous") == LESSON:
            cell.metadata["deck_keep_with_previous"] = True
        if revealing and slide_type(cell) not in ("skip", "notes"):
            if slide_type(cell) != "slide":  # a new section is not the answer: the prediction stands alone
                set_slide_type(cell, "fragment")
                cell.metadata["deck_keep_with_previous"] = True
            revealing = False
    return cells


def _carry_slide_starts(cells):
    """Drop the removed cells; a removed cell that started a slide hands that start to the next shown cell."""
    rank = {"slide": 2, "subslide": 1}
    kept, carried = [], None
    for cell in cells:
        kind = slide_type(cell)
        if cell.metadata.get("deck_removed") or kind == "skip":
            if rank.get(kind, 0) > rank.get(carried, 0):
                carried = kind
            continue
        if kind != "notes" and carried:
            if rank.get(carried, 0) > rank.get(kind, 0):
                set_slide_type(cell, carried)
            carried = None
        kept.append(cell)
    return kept


def _fit_to_slides(cells):
    """Start a new subslide where the estimated content would pass the slide's bottom, and move the
    outputs of a code cell that does not fit beside its code onto subslides of their own."""
    fitted, used = [], 0
    revealed = None  # a reveal whose code stays under its prediction: the slide its outputs go on is its result
    for cell in cells:
        kind = slide_type(cell)
        if kind == "notes":
            fitted.append(cell)
            continue
        if kind in ("slide", "subslide"):
            used = LABEL_PX if cell.cell_type == "code" else 0  # a slide opening on code gets its heading above it
        pieces = [out for code in _split_code(cell) for out in _split_outputs(code)] if cell.cell_type == "code" else [cell]
        while pieces:
            piece = pieces.pop(0)
            if piece.metadata.get("deck_continued") is True and revealed is not None and _origin(piece) == revealed:
                piece.metadata["deck_continued"] = RESULT
            revealed = None
            height = cell_height(piece)
            keep = piece.metadata.get("deck_keep_with_previous")
            shows_code = piece.cell_type == "code" and piece.source and not piece.metadata.get("transient", {}).get("remove_source")
            if keep and used + height > SLIDE_BUDGET_PX and shows_code and piece.get("outputs") \
                    and used + cell_height(_without_outputs(piece)) <= SLIDE_BUDGET_PX:
                # a reveal that does not fit under its prediction: its code there, its outputs on a subslide
                rest = _continued_outputs(piece, "out")
                rest.metadata["deck_continued"] = RESULT  # a slide of its own by design, not an overflow
                rest.outputs = piece.outputs
                piece.outputs = []
                pieces.insert(0, rest)
                height = cell_height(piece)
            outputs_follow = False  # a reveal moved off its question whose outputs go on past its code
            if keep and used + height > SLIDE_BUDGET_PX:
                set_slide_type(piece, "subslide")  # a reveal that does not fit under what it answers
                piece.metadata.pop("deck_keep_with_previous")
                used = LABEL_PX
                # its code on this slide, its outputs after: the slide of outputs shows the result
                outputs_follow = keep is True and shows_code and pieces and _origin(pieces[0]) == _origin(piece)
                piece.metadata["deck_continued"] = True if outputs_follow else _spilled(keep)
            elif used and used + height > SLIDE_BUDGET_PX and slide_type(piece) in ("-", "fragment") and not keep:
                set_slide_type(piece, "subslide")
                piece.metadata["deck_continued"] = True
                used = LABEL_PX  # the heading `_label_continuations` repeats above it
            elif piece.metadata.get("deck_continued") and slide_type(piece) == "subslide":
                used = LABEL_PX
            if outputs_follow or (keep and slide_type(piece) not in ("slide", "subslide")):
                revealed = _origin(piece)
            used += height
            fitted.append(piece)
    return fitted


_MATH = re.compile(r"\$\$.+?\$\$|\$[^$\n]+\$", re.S)
# the end of a sentence or clause: . ? ! : before a capital (after a closing ** or bracket), or any ;
_SENTENCE_END = re.compile(r"[.?!:](?:\*\*|[\"')\]])?(?=\s+[A-Z(*\"'\[])|;(?=\s)")


def prose_words(markdown: str) -> int:
    """Words of prose in `markdown` as a slide shows them: headings, code, tables and formulas not counted."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    text = _MATH.sub(" ", text)
    lines = [line for line in text.splitlines() if not line.lstrip().startswith(("#", "|"))]
    return len(re.findall(r"\S*\w\S*", " ".join(lines)))


def _blocks(markdown: str) -> list[str]:
    """The blocks of `markdown` (paragraphs, lists, headings, fenced code), in order; a list that follows its
    paragraph's last line with no blank line between is a block of its own."""
    blocks, current, fenced = [], [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not line.strip() and not fenced:
            if current:
                blocks.append("\n".join(current))
                current = []
            continue
        starts_list = _LIST_ITEM.match(line) and current and not _LIST_ITEM.match(current[0])
        if (line.startswith("#") or starts_list) and not fenced and current:
            blocks.append("\n".join(current))
            current = []
        current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


def _sentences(paragraph: str) -> list[str]:
    """`paragraph` cut into sentences, never inside a formula."""
    hidden = {}

    def hide(match):
        hidden[f"\x00{len(hidden)}\x00"] = match.group(0)
        return f"\x00{len(hidden) - 1}\x00"

    text = _MATH.sub(hide, paragraph)
    pieces, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        before = text[: match.start()]
        if before.count("(") > before.count(")"):
            continue  # inside brackets: the same sentence
        pieces.append(text[start:match.end()].strip())
        start = match.end()
    pieces = [piece for piece in pieces + [text[start:].strip()] if piece]
    for key, value in hidden.items():
        pieces = [piece.replace(key, value) for piece in pieces]
    return pieces


_LIST_ITEM = re.compile(r"[*+-] |\d+\. ")


#: A bold lead-in that is all its sentence holds ("**What this teaches.**"): a label, not a point of its own.
_LEAD_IN = re.compile(r"\*\*[^*]+\*\*")


def _whole_sentences(text: str) -> list[str]:
    """`text` cut into sentences that each run to their full stop: a clause ending in ";" joins the one after it
    (a slide that ended on "all fifteen runs end at MCC 0;" left its point in the notes), and so does a bold
    lead-in (a slide showed "What this teaches." alone, its lesson in the notes)."""
    whole = []
    for piece in _sentences(text):
        if whole and (whole[-1].endswith(";") or _LEAD_IN.fullmatch(whole[-1])):
            whole[-1] += " " + piece
        else:
            whole.append(piece)
    return whole


def _first_sentences(text: str, room: int) -> tuple[str, str]:
    """(the leading whole sentences of `text` within `room` words, at least one; the rest)."""
    sentences, kept, used = _whole_sentences(text), [], 0
    for sentence in sentences:
        if kept and used + prose_words(sentence) > room:
            break
        kept.append(sentence)
        used += prose_words(sentence)
    return " ".join(kept), " ".join(sentences[len(kept):])


def _first_sentence_of_item(item: str) -> str:
    """A list item's marker and its first whole sentence: a marker such as "2." is not a sentence of its own,
    and a clause that ends in ";" or ":", or a bold lead-in ("**The map.**"), leaves the item's point unsaid,
    so the sentence runs on to its full stop."""
    marker = _LIST_ITEM.match(item)
    kept = []
    for piece in _sentences(item[marker.end():]):
        kept.append(piece)
        if not re.search(r"[;:](?:\*\*|[\"')\]])?$", piece) and not _LEAD_IN.fullmatch(piece):
            break
    return marker[0] + " ".join(kept)


def _split_prose(markdown: str, room: int, prediction: bool) -> tuple[str, str, str]:
    """(what the slide shows, what moves to its notes, what continues on a slide of its own) for a markdown
    cell with more than `room` words. Words are never cut: headings and formulas stay whole; a paragraph
    shows the sentences that fit, the rest (and the paragraphs after it) going to the notes; a list shows
    each item's first sentence, the whole items in the notes, and the items whose first sentences do not fit
    (with the blocks after them) continue on the next slide, so a summary keeps every point on the slides.
    A prediction keeps its question, its choices and as many of the sentences just before the question as
    still fit (a bare "What happens?" asks nothing): the earlier ones move to the notes."""
    blocks = _blocks(markdown)
    if prediction:
        first = next((i for i, block in enumerate(blocks) if not block.startswith("#")), None)
        if first is None:
            return markdown, "", ""
        sentences = _sentences(blocks[first])
        if len(sentences) < 2:
            return markdown, "", ""
        lead = sentences[0].split("**", 2)[1] if sentences[0].startswith("**") and sentences[0].count("**") >= 2 else ""
        left = room - sum(prose_words(block) for i, block in enumerate(blocks) if i != first) - prose_words(sentences[-1])
        start = len(sentences) - 1
        while start > 0 and prose_words(sentences[start - 1]) <= left:
            left -= prose_words(sentences[start - 1])
            start -= 1
        kept = ([f"**{lead}**"] if lead and start else []) + sentences[start:]
        moved = " ".join(sentences[:start])
        if lead:
            moved = moved.replace(f"**{lead}**", "", 1).strip()
        return "\n\n".join(blocks[:first] + [" ".join(kept)] + blocks[first + 1 :]), moved, ""
    shown, moved, used = [], [], 0
    items_of = {i: re.split(r"\n(?=[*+-] |\d+\. )", block) for i, block in enumerate(blocks) if _LIST_ITEM.match(block)}
    for i, block in enumerate(blocks):
        words = prose_words(block)
        # the room the lists after this block need at the least: a paragraph before them leaves it to them
        reserve = sum(MIN_ITEM_WORDS * len(items) for later, items in items_of.items() if later > i)
        if block.startswith("#") or (not moved and used + words <= room - reserve):
            shown.append(block)
            used += words
        elif i in items_of and not moved:
            items = items_of[i]
            firsts = [_first_sentence_of_item(item) for item in items]
            fit, before = 0, used
            while fit < len(items) and (used + prose_words(firsts[fit]) <= room or not (fit or used)):
                used += prose_words(firsts[fit])
                fit += 1
            whole = sum(map(prose_words, firsts))
            if before and fit < len(items) <= SHORT_LIST_ITEMS and before + whole <= room + WHOLE_WORDS - PROSE_WORDS:
                fit, used = len(items), before + whole  # a short list is read as one: it stays whole beside its lead
            elif before and fit < len(items) <= SHORT_LIST_ITEMS and whole <= PROSE_WORDS:
                fit, used = 0, before  # ... or it moves whole to the next slide
                lead = _sentences(shown[-1]) if shown and i and shown[-1] == blocks[i - 1] else []
                if len(lead) > 1 and lead[-1].endswith(":") and not blocks[i - 1].startswith("#") \
                        and prose_words(lead[-1]) + whole <= PROSE_WORDS:
                    shown[-1] = " ".join(lead[:-1])  # the sentence that leads into it ("… two rules:") goes too
                    items = [lead[-1] + "\n", *items]
            if fit:
                shown.append("\n".join(firsts[:fit]))
                if firsts[:fit] != items[:fit]:
                    moved.append("\n".join(items[:fit]))
            if fit < len(items):
                return "\n\n".join(shown), "\n\n".join(moved), "\n\n".join(["\n".join(items[fit:]), *blocks[i + 1:]])
        elif not moved and room - reserve - used >= MIN_SENTENCE_WORDS \
                and (not used or prose_words(_sentences(block)[0]) <= room - reserve - used):
            kept, rest = _first_sentences(block, room - reserve - used)
            shown.append(kept)
            used += prose_words(kept)
            if rest:
                moved.append(rest)
        else:
            moved.append(block)
    return "\n\n".join(shown), "\n\n".join(moved), ""


def _within_words(cells):
    """Keep a slide's prose within PROSE_WORDS: a markdown cell shows what fits beside the prose already
    on its slide, the rest going to the slide's speaker notes, or, for a list's items, to a slide of their
    own that continues it (see `_split_prose`). A cell starts a slide of its own, continuing the one before,
    only when its slide has under MIN_ROOM_WORDS words of room left: a slide is split where it is full, not
    wherever a cell ends."""
    shown, used, started = [], 0, False  # started: the slide already shows something
    cells = list(cells)
    while cells:
        cell = cells.pop(0)
        kind = slide_type(cell)
        if kind in ("slide", "subslide"):
            used, started = 0, False
        if cell.cell_type != "markdown" or kind == "notes":
            shown.append(cell)
            started = started or kind != "notes"
            continue
        words = prose_words(cell.source)
        full = used + words > PROSE_WORDS and PROSE_WORDS - used < MIN_ROOM_WORDS and started
        keep = cell.metadata.get("deck_keep_with_previous")
        if keep and started and kind not in ("slide", "subslide") and used + words > PROSE_WORDS:
            set_slide_type(cell, "subslide")  # a reveal that does not fit: the next key press shows it alone
            cell.metadata["deck_continued"] = _spilled(keep)
            cell.metadata.pop("deck_keep_with_previous")
            used = 0
        elif full and kind not in ("slide", "subslide") and not keep:
            set_slide_type(cell, "subslide")
            cell.metadata["deck_continued"] = True
            used = 0
        started = True
        shown.append(cell)
        asks = PREDICTION_TAG in tags(cell)
        budget = WHOLE_WORDS if asks else PROSE_WORDS
        if used + words > budget:
            room = max(budget - used, MIN_SENTENCE_WORDS)
            cell.source, moved, carried = _split_prose(cell.source, room, asks)
            if moved:  # a lead-in moved here ("… show what it costs:") introduces what the slide shows: it ends
                shown.append(_markdown_cell(re.sub(r":\s*$", ".", moved), "notes"))  # as a sentence in the notes
                shown[-1].metadata[OVERFLOW_KEY] = True  # the cell's own words, not notes about a result
            if carried:
                rest = _markdown_cell(carried, "subslide")
                rest.metadata["deck_continued"] = True
                cells.insert(0, rest)
            words = prose_words(cell.source)
        used += words
    return shown


_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
RESULT = "result"  # marks the slide that shows a prediction's result under its own label
LESSON = "lesson"  # a folded lesson ("What this teaches") kept with the slide it closes
#: Set on a prediction cell: the heading its result slides carry, where the section's heading names another topic.
RESULT_HEADING_KEY = "result_heading"
STORED_RUNS_KEY = "stored_runs"  # notebook metadata: the tasks whose stored runs the lab reads (the title slides name them)
RESULT_SUFFIX = " — the result"
#: The class of an empty mark in the heading of a slide the layout split off one that had no room left.
CONTINUED_CLASS = "deck-continued"
ORIGIN_KEY = "deck_origin"  # on a piece of a cell cut over slides: the id of the cell it was cut from
OVERFLOW_KEY = "deck_overflow"  # marks the notes that hold a markdown cell's own words the slide had no room for


def _spilled(keep) -> str | bool:
    """How a cell kept with the one before it, moved to a slide of its own, is labelled: a prediction's reveal
    shows the result; a folded lesson continues its slide (it answers no prediction)."""
    return RESULT if keep is True else True


def _label_continuations(cells):
    """Each subslide the layout started opens with the heading before it, marked as continued, and each
    slide that shows only outputs opens with that heading: a slide never shows a lone output. A slide the
    layout split off for want of room is marked (``CONTINUED_CLASS``) and gets no notes made up: the notes
    stay where the notebook put them, except that notes which fall past their output move onto it
    (:func:`_notes_beside_their_result`)."""
    groups, heading = [], None
    for cell in cells:
        continued = cell.metadata.pop("deck_continued", False)
        if not groups or (slide_type(cell) in ("slide", "subslide") and groups[-1]["cells"]):
            groups.append({"cells": [], "heading": heading, "continued": continued})
        groups[-1]["cells"].append(cell)
        if cell.cell_type == "markdown" and slide_type(cell) != "notes":
            found = _HEADING.findall(cell.source)
            heading = found[-1] if found else heading
            heading = cell.metadata.get("adapterlab", {}).get(RESULT_HEADING_KEY, heading)
    _notes_beside_their_result(groups)
    shown, before = [], None  # before: the title of the slide before, as shown
    for group in groups:
        body = group["cells"]
        says = [c for c in body if c.cell_type == "markdown" and slide_type(c) != "notes" and c.source.strip()]
        own = _HEADING.match(says[0].source.strip()) if says else None
        title_shown = own.group(1).rstrip(".:") if own else None
        results = any(c.cell_type == "code" and (c.get("outputs") or not c.metadata.get("transient", {}).get("remove_source"))
                      for c in body if slide_type(c) != "notes")  # outputs or code: a slide never opens on either bare
        if group["heading"] and ((group["continued"] and not any(_HEADING.search(c.source) for c in says))
                                 or (results and not says)):
            starts = slide_type(body[0]) if slide_type(body[0]) in ("slide", "subslide") else "subslide"
            continued = {RESULT: RESULT_SUFFIX, True: " (continued)"}.get(group["continued"], "")
            title = _figure_title_as_heading(body) if group["continued"] is not RESULT and not says else None
            marker = f'<span class="{CONTINUED_CLASS}"></span>' if group["continued"] is True else ""
            title_shown = title or group["heading"].rstrip(".:") + continued
            if title_shown == before and group["continued"] is not True:
                title_shown += " (continued)"  # the notebook's own next slide: two alike in a row say so
            label = _markdown_cell(f"### {marker}{title_shown}", starts)
            set_slide_type(body[0], "-")
            body = [label] + body
        before = title_shown
        shown += body
    for number, cell in enumerate(shown):  # copies share their cell ids; a deck needs them unique
        if "id" in cell and any(cell["id"] == other.get("id") for other in shown[:number]):
            cell["id"] = f"{cell['id'][:56]}-c{number}"
    return shown


def _shown_at_once(cells):
    """A fragment that would be the first thing under its slide's heading is shown with the heading: a slide that
    opens on its heading alone looks broken when projected (lab 3's "Counting floating-point operations" showed
    its code only at the first key press). A prediction's reveal is no such fragment: its question is on the slide."""
    only_headings = True
    for cell in cells:
        kind = slide_type(cell)
        if kind in ("slide", "subslide"):
            only_headings = True
        if kind in ("notes", "skip") or cell.metadata.get("deck_removed"):
            continue
        if kind == "fragment" and only_headings:
            set_slide_type(cell, "-")
        if cell.cell_type != "markdown" or any(line.strip() and not _HEADING.match(line.strip())
                                               for line in cell.source.splitlines()):
            only_headings = False
    return cells


def _origin(cell) -> str | None:
    """The id of the notebook cell that `cell` is, or is a piece of."""
    return cell.metadata.get(ORIGIN_KEY, cell.get("id"))


def _shows_output(cells) -> bool:
    return any(cell.cell_type == "code" and cell.get("outputs") for cell in cells if slide_type(cell) != "notes")


def _notes_beside_their_result(groups) -> None:
    """Where the layout cut one slide of the notebook in parts so that an output sits on one part without
    notes and the notes fall on a later part that shows no output (the explanation under a result), the
    notes move onto the output's part: they point at what it shows. So do the notes of an output cut over
    parts: they go on its first, unless a later part shows a prediction's result. (The words a cell moved to
    the notes for want of room stay with it.)"""
    for at, group in enumerate(groups):
        if not _shows_output(group["cells"]) or any(slide_type(cell) == "notes" for cell in group["cells"]):
            continue
        shown = {_origin(cell) for cell in group["cells"] if cell.cell_type == "code" and cell.get("outputs")} - {None}
        for later in groups[at + 1:]:
            rest_of_it = any(_origin(cell) in shown for cell in later["cells"] if cell.cell_type == "code")
            if not later["continued"] or (_shows_output(later["cells"]) and not rest_of_it):
                break
            if later["continued"] == RESULT and rest_of_it:
                break  # a reveal's outputs on a slide of their own: its notes stay with that result
            notes = [cell for cell in later["cells"] if slide_type(cell) == "notes" and not cell.metadata.get(OVERFLOW_KEY)]
            if notes:
                later["cells"].remove(notes[0])
                group["cells"].append(notes[0])
                break


def _figure_title_as_heading(cells) -> str | None:
    """The title of the one figure a slide of outputs shows, taken out of the figure to head the slide
    (it names what the slide shows better than "(continued)" does); a note under the title becomes the
    figure's title, in its grey. None when the slide shows code, or other than one titled figure."""
    shown = [cell for cell in cells if slide_type(cell) != "notes"]
    if any(cell.cell_type != "code" or not cell.metadata.get("transient", {}).get("remove_source") for cell in shown):
        return None
    figures = [output["data"][PLOTLY_MIME] for cell in shown for output in cell.get("outputs", [])
               if PLOTLY_MIME in output.get("data", {})]
    layout = figures[0].get("layout", {}) if len(figures) == 1 else {}
    title = layout.get("title")
    text = title.get("text") if isinstance(title, dict) else title
    if not text:
        return None
    subtitle = title.get("subtitle", {}) if isinstance(title, dict) else {}
    if subtitle.get("text"):
        layout["title"] = {"text": subtitle["text"], "font": subtitle.get("font", {})}
    else:
        layout.pop("title")
        above = [note for note in layout.get("annotations", []) if note.get("yref") == "paper" and note.get("y", 0) > 1]
        if not above:  # a note set above the plot (a paper's finding) keeps the room the title left it
            layout.setdefault("margin", {})["t"] = 30
    return " ".join(re.sub(r"<[^>]+>", " ", text).split())


def _markdown_cell(source: str, kind: str):
    from nbformat.v4 import new_markdown_cell

    return new_markdown_cell(source, metadata={"slideshow": {"slide_type": kind}})


def _continued_outputs(cell, suffix: str):
    """An empty copy of `cell` for outputs that continue it on a subslide of their own: its code is not shown
    again, its id gets `suffix`, and it is marked as a continuation (the layout labels those)."""
    piece = copy.deepcopy(cell)
    piece.outputs = []
    piece.metadata[ORIGIN_KEY] = _origin(cell)
    if "id" in piece:
        piece["id"] = f"{cell['id']}-{suffix}"[:64]
    piece.metadata.setdefault("transient", {})["remove_source"] = True
    piece.metadata.pop("deck_keep_with_previous", None)
    set_slide_type(piece, "subslide")
    piece.metadata["deck_continued"] = True
    return piece


def _without_outputs(cell):
    bare = copy.copy(cell)
    bare["outputs"] = []
    return bare


def _split_code(cell):
    """The cell's code cut, where it is taller than a slide under a heading, between top-level statements
    into parts that each fit; the last part keeps the outputs. Every line stays as written: the slides
    show the students' code, only over more than one slide."""
    room = (SLIDE_BUDGET_PX - LABEL_PX - CELL_GAP_PX - 20) // CODE_LINE_PX
    if cell.metadata.get("transient", {}).get("remove_source") or _wrapped_lines(cell.source, CODE_CHARS) <= room:
        return [cell]
    try:
        statements = ast.parse(cell.source).body
    except SyntaxError:  # IPython syntax: shown whole, the deck scales it
        return [cell]
    lines = cell.source.split("\n")
    starts = [min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1 for node in statements]
    bounds = [0, *starts[1:], len(lines)]
    parts, used = [[]], 0
    for first, last in zip(bounds, bounds[1:]):
        block = lines[first:last]
        height = _wrapped_lines("\n".join(block), CODE_CHARS)
        if parts[-1] and used + height > room:
            parts.append([])
            used = 0
        parts[-1] += block
        used += height
    if len(parts) == 1:
        return [cell]
    pieces = []
    for number, part in enumerate(parts):
        piece = copy.deepcopy(cell)
        piece.source = "\n".join(part).strip("\n")
        if number < len(parts) - 1:
            piece.outputs = []
        if number:
            piece.metadata[ORIGIN_KEY] = _origin(cell)
            if "id" in piece:
                piece["id"] = f"{cell['id']}-code{number}"[:64]
            piece.metadata.pop("deck_keep_with_previous", None)
            set_slide_type(piece, "subslide")
            piece.metadata["deck_continued"] = True
        pieces.append(piece)
    return pieces


def _split_outputs(cell):
    """The cell, followed by output-only copies holding the outputs that do not fit with what precedes them
    (on a slide that opens with a heading: a cell split off a slide gets one repeated above it). Text printed
    just before a figure that goes to the next slide goes along where both fit: it says what the figure
    shows (lab 8's "SST-2 dev: 300 of 872 rows" stood alone under the code, its heatmap a slide later)."""
    if cell_height(cell) <= SLIDE_BUDGET_PX - LABEL_PX or not cell.get("outputs"):
        return [cell]
    outputs, cell.outputs = [piece for output in cell.outputs for piece in _table_pages(output) or _stream_pages(output)], []
    shows_code = bool(cell.source) and not cell.metadata.get("transient", {}).get("remove_source")
    pieces, used = [cell], LABEL_PX + cell_height(cell)
    for output in outputs:
        height = output_height(output)
        has_content = pieces[-1].outputs or (pieces[-1] is cell and shows_code)
        if has_content and used + height > SLIDE_BUDGET_PX:
            piece = _continued_outputs(cell, str(len(pieces)))
            used = CELL_GAP_PX + LABEL_PX
            before = pieces[-1].outputs
            while (PLOTLY_MIME in output.get("data", {}) and before and before[-1].get("output_type") == "stream"
                   and (len(before) > 1 or shows_code and pieces[-1] is cell)
                   and used + output_height(before[-1]) + height <= SLIDE_BUDGET_PX):
                piece.outputs.insert(0, before.pop())
                used += output_height(piece.outputs[0])
            pieces.append(piece)
        pieces[-1].outputs.append(output)
        used += height
    return pieces


def _stream_pages(output) -> list:
    """A text output taller than a slide, cut into outputs that each fit one (a source listing, a long log).
    A page ends where a statement does, if one ends in its second half: after a blank line, or before a line
    that opens outside every bracket and docstring (a listing cut inside ``return f(a,`` left ``b)`` alone)."""
    if output.get("output_type") != "stream" or output_height(output) <= SLIDE_BUDGET_PX:
        return [output]
    room = (SLIDE_BUDGET_PX - CELL_GAP_PX) // CODE_LINE_PX
    pages, lines, used = [], [], 0
    for line in output["text"].splitlines(keepends=True):
        height = _wrapped_lines(line, CODE_CHARS)
        if lines and used + height > room:
            cut = _statement_end(lines)
            pages.append("".join(lines[:cut]))
            lines = lines[cut:]
            used = sum(_wrapped_lines(kept, CODE_CHARS) for kept in lines)
        lines.append(line)
        used += height
    pages.append("".join(lines))
    return [_with_text(output, text) for text in pages]


def _statement_end(lines: list[str]) -> int:
    """Where to end a page of `lines`: in its second half, the last place where a block ends (after a blank
    line, or before a line at the margin), else the last where a statement ends (before a line that starts
    outside every bracket and docstring), else after its last line."""
    depth, quoted, blocks, statements = 0, False, [], []
    comment = None  # the indent of the comment the line before belongs to (a comment stays with its code)
    for index, line in enumerate(lines):
        if index and not quoted and depth <= 0 and comment is None and index >= len(lines) // 2:
            statements.append(index)
            if not lines[index - 1].strip() or line[:1].strip() or not line.strip():
                blocks.append(index)
        indent = len(line) - len(line.lstrip())
        if line.lstrip().startswith("#"):
            comment = indent
        elif comment is not None and not (line.strip() and indent > comment):  # deeper: the comment, wrapped
            comment = None
        if line.count('"""') % 2:
            quoted = not quoted
        if not quoted and comment is None:
            depth += sum(line.count(c) for c in "([{") - sum(line.count(c) for c in ")]}")
    return (blocks or statements or [len(lines)])[-1]


_HTML_TABLE = re.compile(r"(?s)^(<table[^>]*>)(<caption>.*?</caption>)?(<thead>.*?</thead>)?<tbody>(.*)</tbody></table>(.*)$")


def _table_pages(output) -> list:
    """An HTML table taller than a slide (a family of verdicts), cut between rows into tables that each fit
    one, as even as can be: each page repeats the header, the caption stays on the first and what follows the
    table (its footer) on the last. A table is never cut inside a row."""
    html = "".join(output.get("data", {}).get("text/html", "")) if output.get("output_type") != "stream" else ""
    found = _HTML_TABLE.match(html)
    if not found or output_height(output) <= SLIDE_BUDGET_PX - LABEL_PX - CELL_GAP_PX:
        return []
    opening, caption, head, body, after = (part or "" for part in found.groups())
    rows = re.findall(r"(?s)<tr>.*?</tr>", body)
    room = max(1, (SLIDE_BUDGET_PX - LABEL_PX - CELL_GAP_PX - 8) // _row_px(html) - 2)  # less a header and a footer
    count = -(-len(rows) // room)
    pages, first = [], 0
    for number in range(count):
        size = len(rows) // count + (number < len(rows) % count)
        page = copy.deepcopy(output)
        page["data"] = {"text/html": opening + (caption if number == 0 else "") + head + "<tbody>"
                        + "".join(rows[first:first + size]) + "</tbody></table>" + (after if number == count - 1 else "")}
        pages.append(page)
        first += size
    return pages


def _with_text(output, text: str):
    page = copy.deepcopy(output)
    page["text"] = text
    return page


def deck_title(nb, title: str | None, notices: list[str]) -> dict:
    """What the title slides show: the lab's title and its objectives (notebook metadata
    ``adapterlab.objectives``); then one line on the backbone, the data and the stored runs (notebook metadata
    ``adapterlab.stored_runs``) behind the numbers and the
    stand-in notice, once (its first sentence on the slide, all of it in the notes; where the backbone line
    names the model the stand-in replaced, the slide says in plain words that every number is the stand-in's,
    rather than how the hub was configured)."""
    backbones, data, sources = [], [], []
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            text = output.get("text", "") or "".join(output.get("data", {}).get("text/plain", ""))
            for backbone in _BACKBONE_LINE.findall(text):
                if backbone.strip() not in backbones:
                    backbones.append(backbone.strip())
            for name, source in _DATA_LINE.findall(text):
                source = "GLUE" if re.match(r"(the )?GLUE\b", source) else source.strip()
                if name not in data:
                    data.append(name)
                if source not in sources:
                    sources.append(source)
    metadata = nb.metadata.get("adapterlab", {})
    metadata = metadata if isinstance(metadata, dict) else {}
    stored = [str(task) for task in metadata.get(STORED_RUNS_KEY, [])]
    if backbones or data:
        parts = [f"backbone {'; '.join(backbones)}" if backbones else "no pretrained backbone"]
        parts.append(f"data {', '.join(data)} ({', '.join(sources)})" if data else "no data set")
        if stored:  # runs trained before the lecture, read from the run store: their tasks, named here too
            parts.append(f"stored runs on {' and '.join(stored)}, trained on this backbone")
        provenance = "Numbers from: " + "; ".join(parts) + "."
    else:
        provenance = "No pretrained backbone or data set is loaded in this lab: its numbers come from the code on the slides."
    notice = relative_paths(" ".join(dict.fromkeys(" ".join(text.split()) for text in notices)))
    objectives = [str(item) for item in metadata.get("objectives", [])]
    shown = _sentences(notice)[0] if notice else ""  # the slide shows its first sentence, the notes all of it
    wanted = re.search(r"\bstand-in for ([^\s:;,)]+)", " ".join(backbones))
    if notice and wanted:  # the line above names the stand-in: the slide says what that means, not how it happened
        shown = f"{wanted.group(1)} was not available where this lab ran: every number in this deck is the stand-in's."
    return {"title": title or nb.metadata.get("title", ""), "objectives": objectives, "provenance": provenance,
            "notice": notice, "notice_shown": shown}


# --------------------------------------------------------------------------------------------------
# Lines that fit: text outputs wrapped with a hanging indent, text tables as tables
# --------------------------------------------------------------------------------------------------

def wrap_output_line(line: str, width: int = CODE_CHARS) -> list[str]:
    """A text output's line cut at spaces into lines of at most `width` characters, the continuations
    indented 4 spaces past the line's own indent (a number or a word is never cut)."""
    line = line.rstrip()
    if len(line) <= width:
        return [line]
    lead = line[: len(line) - len(line.lstrip())]
    return textwrap.wrap(line.strip(), width, initial_indent=lead, subsequent_indent=lead + "    ",
                         break_long_words=False, break_on_hyphens=False, drop_whitespace=True) or [line]


_FIELDS = re.compile(r"\S+(?: \S+)*")
_LEADING_NUMBER = re.compile(r"^[-+−]?\.?\d")
_NUMBER_CELL = re.compile(r"^[-+−]?[\d.,]+(?:e[-+]?\d+)?\s*(?:%|[kMG]?B)?(?:,\s*[-+−]?[\d.,]+\s*%?)*[*!]?(?: ± [\d.]+)?(?: \(\d+\))?$")


def text_table_rows(lines: list[str]) -> list[list[str]] | None:
    """The rows of a fixed-width text table (columns apart by two or more spaces in every line, three
    or more columns), or None when `lines` are not one."""
    if len(lines) < 3 or any(len(_FIELDS.findall(line)) < 3 for line in lines):
        return None
    length = max(len(line) for line in lines)
    padded = [line.ljust(length) for line in lines]
    blank = [all(row[col] == " " for row in padded) for col in range(length)]
    edges, col = [], 0
    while col < length:
        if blank[col]:
            end = col
            while end < length and blank[end]:
                end += 1
            if end - col >= 2 and col > 0 and end < length:
                edges.append((col, end))
            col = end
        else:
            col += 1
    if len(edges) < 2:
        return None
    bounds = [0] + [end for _, end in edges]
    stops = [start for start, _ in edges] + [length]
    return [[row[a:b].strip() for a, b in zip(bounds, stops)] for row in padded]


def _columns(lines: list[str]) -> int:
    rows = text_table_rows(lines)
    return len(rows[0]) if rows else 0


def text_tables_as_html(text: str) -> str | None:
    """`text` as HTML, its fixed-width tables as <table>s and every other line in a <pre> (wrapped as
    `wrap_output_line` does); None when `text` holds no table."""
    lines = text.rstrip("\n").splitlines()
    parts, rows_seen, i = [], False, 0
    plain: list[str] = []

    def flush():
        if plain:
            shown = [piece for line in plain for piece in wrap_output_line(line)]
            parts.append("<pre>" + html.escape("\n".join(shown)) + "</pre>")
            plain.clear()

    while i < len(lines):
        end = i
        while end < len(lines) and len(_FIELDS.findall(lines[end])) >= 3:
            end += 1
        while end - i > 3 and _columns(lines[i:end - 1]) > _columns(lines[i:end]):
            end -= 1  # a footer line that fills the gaps between columns is text under the table
        rows = text_table_rows(lines[i:end]) if end - i >= 3 else None
        if rows is None:
            plain.append(lines[i])
            i += 1
            continue
        flush()
        rows_seen = True
        digits = [[bool(re.search(r"\d", value)) for value in row] for row in rows]
        # a header row looks unlike the rows under it, and no cell of it is a number
        headed = digits[0] != digits[1] and not any(_LEADING_NUMBER.match(value) for value in rows[0])
        head, body = (rows[0], rows[1:]) if headed else (None, rows)
        columns = len(rows[0])
        numeric = [all(_NUMBER_CELL.match(row[c]) or row[c] in ("", "—", "-") for row in body) for c in range(columns)]

        def cell(tag, value, c):
            css = ' class="deck-number"' if numeric[c] and tag == "td" else ""
            return f"<{tag}{css}>{html.escape(value)}</{tag}>"

        header = ("<thead><tr>" + "".join(cell("th", v, c) for c, v in enumerate(head)) + "</tr></thead>") if head else ""
        parts.append('<table class="deck-table">' + header + "<tbody>" + "".join("<tr>" + "".join(cell("td", v, c) for c, v in enumerate(row))
                                                        + "</tr>" for row in body) + "</tbody></table>")
        i = end
    flush()
    return "\n".join(parts) if rows_seen else None


LOG_TICKS = 6  # labels a log axis shows at most (a y axis on a slide has room for about that many)


def _decades(figure: dict, axis_name: str) -> float:
    """How many decades the positive values drawn on the axis `axis_name` ("xaxis", "yaxis2") span."""
    letter, number = axis_name[0], axis_name[5:]
    values = [value for trace in figure.get("data", []) if trace.get(f"{letter}axis", letter) == letter + number
              for value in trace.get(letter) or [] if isinstance(value, (int, float)) and value > 0]
    return math.log10(max(values) / min(values)) if values else 0.0


def legible_figure(figure: dict, size: int = FIGURE_FONT_PX) -> dict:
    """`figure` (plotly JSON) with every font at least `size` px: the default font and each explicit one
    (axis titles, ticks, legend, annotations, trace text)."""

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key.endswith("font") and isinstance(value, dict):
                    if (value.get("size") or size) < size:
                        value["size"] = size
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(figure)
    layout = figure.setdefault("layout", {})
    for name, axis in layout.items():
        if not (re.fullmatch(r"[xy]axis\d*", name) and isinstance(axis, dict)):
            continue
        if axis.get("type") == "log" and "tickvals" not in axis:
            # decades only (plotly draws the labels between them smaller), and few enough not to overlap
            axis.setdefault("dtick", max(1, math.ceil(_decades(figure, name) / LOG_TICKS)))
        if axis.get("exponentformat", "power") == "power":
            axis["exponentformat"] = "e"  # 1e-08, as the labs write σ: a superscript exponent is 70 % of the font
    font = layout.setdefault("font", {})
    font["size"] = max(font.get("size") or 0, size)
    return figure


def deck_outline(nb) -> list[dict]:
    """The slides `LectureLayout` makes of `nb`, in order, each as {"title": its first line, "continued":
    whether the layout split it off the slide before, "notes": its speaker notes, "height": its estimated
    height}: what an instructor would see paging through the deck, without exporting it."""
    laid_out, _ = LectureLayout().preprocess(nb, {})
    slides = []
    for cell in laid_out.cells:
        kind = slide_type(cell)
        if kind in ("slide", "subslide") or not slides:
            slides.append({"title": "", "continued": False, "notes": [], "height": 0})
        slide = slides[-1]
        if kind == "notes":
            slide["notes"].append(cell.source.strip())
            continue
        if not slide["title"] and cell.source.strip():
            slide["title"] = cell.source.strip().splitlines()[0]
            slide["continued"] = slide["title"].startswith("#") and slide["title"].endswith("(continued)")
        slide["height"] += cell_height(cell)
    return [slide | {"notes": "\n\n".join(slide["notes"])} for slide in slides]
