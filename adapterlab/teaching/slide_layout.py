"""Shape a lab notebook into a deck for a lecture hall: every slide fits, no plumbing shows.

A notebook is written to be run and read; the same cells projected at 1280×720 run off the slide,
open with test markers and repeat the stand-in notice on every slide that loads the backbone. The
`LectureLayout` preprocessor rewrites a copy of the notebook before nbconvert's slides exporter
groups it into slides:

- cells tagged ``deck-skip`` are left out; cells tagged ``deck-hide-input`` show only their output;
- ``# NBVAL_...`` lines and nbgrader's solution markers are removed from the code;
- stderr outputs (the stand-in NOTICE) are left out: the title slide carries the notice once;
- absolute paths in outputs become short relative ones (a deck must not show a machine's folders);
- plotly figures get a height that fits a slide;
- a prediction (markdown and code cells tagged ``prediction``) becomes a slide of its own, its code
  cell left out, the next cell revealed as a fragment;
- a slide whose estimated height exceeds the slide continues on a new subslide, and a code cell
  whose outputs do not fit beside its code shows them on subslides of their own.

The estimate is coarse on purpose; the deck's template measures each slide in the browser and
scales down, within a readable limit, what still does not fit. `deck_title` collects what the
title slide shows. Instructors get all of this from ``adapterlab slides``.
"""

from __future__ import annotations

import ast
import base64
import copy
import html
import io
import math
import re
import struct
import textwrap
import tokenize

from nbconvert.preprocessors import Preprocessor

PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
SKIP_TAG = "deck-skip"
HIDE_INPUT_TAG = "deck-hide-input"
PREDICTION_TAG = "prediction"

# Slide geometry in reveal.js units (the deck is 1280 × 720, scaled to the screen; no prompts).
SLIDE_BUDGET_PX = 660  # the slide's height less the cells' padding
FIGURE_HEIGHT_PX = 420
TEXT_LINE_PX, TEXT_CHARS = 36, 92  # markdown at 26 px
CODE_LINE_PX, CODE_CHARS = 28, 96  # code and text outputs at 21 px (DejaVu Sans Mono: 12.6 px a character)
CODE_WIDTH = 90  # longer code lines are reflowed for the deck, longer output lines wrapped (a hanging indent)
FIGURE_FONT_PX = 18  # the smallest text in a figure (axis titles, ticks, legend)
HEADING_PX = 60
PROSE_WORDS = 55  # words of prose a slide shows (the browser tests allow about 60); the rest goes to its notes
CELL_GAP_PX = 16

_MARKER_LINE = re.compile(r"^\s*(#\s*NBVAL_\w*|###\s*(BEGIN|END)\s+SOLUTION)\b.*$")
# "GLUE folder /any/abs/path/SST-2/train.tsv" → "GLUE SST-2/train.tsv"
_GLUE_PATH = re.compile(r"GLUE folder:? (?:/|[A-Za-z]:\\)\S*?[/\\]([\w.-]+[/\\][\w.-]+\.\w+)\b")
# any other absolute path (POSIX with two or more parts, home-relative, or Windows) → its last part
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/\\~-])(?:~|(?:[A-Za-z]:)?)(?:[/\\][\w.+-]+){2,}[/\\]?")
_BACKBONE_LINE = re.compile(r"\bBackbone: ([^|\n]+)")
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


def output_height(output) -> int:
    """Estimated height of one output on a slide, in reveal.js pixels."""
    if output.get("output_type") == "stream":
        return _wrapped_lines(output.get("text", ""), CODE_CHARS) * CODE_LINE_PX + 8
    data = output.get("data", {})
    if PLOTLY_MIME in data:
        return data[PLOTLY_MIME].get("layout", {}).get("height", FIGURE_HEIGHT_PX) + 8
    if "image/png" in data:
        return _png_height(data["image/png"]) + 8
    if "text/html" in data:
        html = "".join(data["text/html"])
        return max(1, html.count("<tr")) * TEXT_LINE_PX + 8
    if "text/markdown" in data:
        return _wrapped_lines("".join(data["text/markdown"]), TEXT_CHARS) * TEXT_LINE_PX
    if "text/plain" in data:
        return _wrapped_lines("".join(data["text/plain"]), CODE_CHARS) * CODE_LINE_PX + 8
    return 0


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
        nb.cells = _label_continuations(_fit_to_slides(cells))
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
    else:
        cell.source = reflow_code(cell.source)
    kept = []
    for output in cell.get("outputs", []):
        if output.get("name") == "stderr" or WIDGET_VIEW_MIME in output.get("data", {}):
            continue  # the notice is on the title slides; a widget needs a kernel (the deck drops it)
        if "text" in output:
            output["text"] = relative_paths(output["text"])
        data = output.get("data", {})
        for mime in ("text/plain", "text/html", "text/markdown"):
            if mime in data:
                data[mime] = relative_paths("".join(data[mime]))
        output = _legible_text(output)
        data = output.get("data", {})
        if PLOTLY_MIME in data:
            legible_figure(data[PLOTLY_MIME])
            layout = data[PLOTLY_MIME].setdefault("layout", {})
            layout["height"] = min(layout.get("height") or FIGURE_HEIGHT_PX, FIGURE_HEIGHT_PX)
            layout.pop("width", None)
            layout["autosize"] = True
        kept.append(output)
    cell.outputs = kept


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
    listing = reflow_code(text.rstrip("\n"), CODE_CHARS)  # a printed source listing is reflowed as code
    if listing != text.rstrip("\n"):
        text = listing + "\n"
    wrapped = "\n".join(piece for line in text.split("\n") for piece in wrap_output_line(line))
    if output.get("output_type") == "stream":
        output["text"] = wrapped
    else:
        data["text/plain"] = wrapped
    return output


def _predictions_as_slides(cells):
    """A prediction prompt starts a slide; its code cell is left out; the next shown cell, unless it starts
    a slide of its own, is its reveal (a fragment)."""
    revealing = False
    for cell in cells:
        if cell.metadata.get("deck_removed"):
            continue
        if PREDICTION_TAG in tags(cell):
            if cell.cell_type == "markdown":
                set_slide_type(cell, "slide")
                revealing = True
            else:
                _removed(cell)
            continue
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
    for cell in cells:
        kind = slide_type(cell)
        if kind == "notes":
            fitted.append(cell)
            continue
        if kind in ("slide", "subslide"):
            used = 0
        pieces = _split_outputs(cell) if cell.cell_type == "code" else [cell]
        while pieces:
            piece = pieces.pop(0)
            height = cell_height(piece)
            keep = piece.metadata.get("deck_keep_with_previous")
            if keep and used + height > SLIDE_BUDGET_PX and piece.cell_type == "code" and piece.get("outputs") \
                    and piece.source and not piece.metadata.get("transient", {}).get("remove_source"):
                # a reveal that does not fit under its prediction: its code there, its outputs on a subslide
                rest = _continued_outputs(piece, "out")
                rest.outputs = piece.outputs
                piece.outputs = []
                pieces.insert(0, rest)
                height = cell_height(piece)
            if used and used + height > SLIDE_BUDGET_PX and slide_type(piece) in ("-", "fragment") and not keep:
                set_slide_type(piece, "subslide")
                piece.metadata["deck_continued"] = True
                used = 0
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
    """The blocks of `markdown` (paragraphs, lists, headings, fenced code), in order."""
    blocks, current, fenced = [], [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not line.strip() and not fenced:
            if current:
                blocks.append("\n".join(current))
                current = []
            continue
        if line.startswith("#") and not fenced and current:
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


def _split_prose(markdown: str, budget: int, prediction: bool) -> tuple[str, str, str]:
    """(what the slide shows, what moves to its notes, what moves to the next slide) for a markdown cell
    with more than `budget` words. Headings and formulas stay whole; a long paragraph is cut between
    sentences, the rest going to the notes; a list is cut between items, the rest (and what follows it)
    going to the next slide. A prediction keeps
    its question and its choices: the sentences that lead up to the question move to the notes."""
    blocks = _blocks(markdown)
    if prediction:
        first = next((i for i, block in enumerate(blocks) if not block.startswith("#")), None)
        if first is None:
            return markdown, "", ""
        sentences = _sentences(blocks[first])
        if len(sentences) < 2:
            return markdown, "", ""
        lead = sentences[0].split("**", 2)[1] if sentences[0].startswith("**") and sentences[0].count("**") >= 2 else ""
        kept = ([f"**{lead}**"] if lead else []) + [sentences[-1]]
        moved = " ".join(sentences[:-1])
        if lead:
            moved = moved.replace(f"**{lead}**", "", 1).strip()
        return "\n\n".join(blocks[:first] + [" ".join(kept)] + blocks[first + 1 :]), moved, ""
    shown, moved, used = [], [], 0
    for block in blocks:
        words = prose_words(block)
        if moved:
            moved.append(block)
        elif used + words <= budget or block.startswith("#"):
            shown.append(block)
            used += words
        elif _LIST_ITEM.match(block):  # the items that fit; the others, and what follows, on the next slide
            items, kept = re.split(r"\n(?=[*+-] |\d+\. )", block), []
            for item in items:
                if used + prose_words(item) > budget and (kept or used):
                    break
                if used + prose_words(item) > budget:  # one item longer than a slide: its first sentences
                    sentences, first = _sentences(item), []
                    for sentence in sentences:
                        if first and used + prose_words(sentence) > budget:
                            break
                        first.append(sentence)
                        used += prose_words(sentence)
                    item, tail = " ".join(first), " ".join(sentences[len(first):])
                    if tail:
                        moved.append(tail)
                else:
                    used += prose_words(item)
                kept.append(item)
            if kept:
                shown.append("\n".join(kept))
            later = ["\n".join(items[len(kept):])] if items[len(kept):] else []
            return "\n\n".join(shown), "\n\n".join(moved), "\n\n".join(later + blocks[blocks.index(block) + 1 :])
        elif used:
            moved.append(block)
        else:  # one long paragraph: the sentences that fit
            sentences, kept = _sentences(block), []
            for sentence in sentences:
                if kept and used + prose_words(sentence) > budget:
                    break
                kept.append(sentence)
                used += prose_words(sentence)
            shown.append(" ".join(kept))
            rest = " ".join(sentences[len(kept):])
            if rest:
                moved.append(rest)
    return "\n\n".join(shown), "\n\n".join(moved), ""


def _within_words(cells):
    """Keep a slide's prose within PROSE_WORDS: a markdown cell that would pass it starts a slide of its
    own, and a cell longer than that shows its first part, the rest going to the slide's speaker notes
    (a paragraph's tail) or to the next slide (a list's later items and what follows them)."""
    shown, used, started = [], 0, False  # started: the slide already shows something
    queue = list(cells)
    while queue:
        cell = queue.pop(0)
        kind = slide_type(cell)
        if kind in ("slide", "subslide"):
            used, started = 0, False
        if cell.cell_type != "markdown" or kind == "notes":
            shown.append(cell)
            started = started or kind != "notes"
            continue
        words = prose_words(cell.source)
        crowded = used + words > PROSE_WORDS and (used or (words > PROSE_WORDS and started))
        started = True
        if crowded and kind not in ("slide", "subslide") and not cell.metadata.get("deck_keep_with_previous"):
            set_slide_type(cell, "subslide")
            cell.metadata["deck_continued"] = True  # the same slide, continued: same heading, same notes
            used = 0
        shown.append(cell)
        if words > PROSE_WORDS:
            cell.source, moved, later = _split_prose(cell.source, PROSE_WORDS, PREDICTION_TAG in tags(cell))
            if moved:
                shown.append(_markdown_cell(moved, "notes"))
            if later:
                following = _markdown_cell(later, "subslide")
                following.metadata["deck_continued"] = True
                queue.insert(0, following)
            words = prose_words(cell.source)
        used += words
    return shown


_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _label_continuations(cells):
    """Each subslide the layout started, and each slide that shows only outputs, opens with the heading
    before it, marked as continued, and carries that slide's speaker notes when it has none of its own: a slide never shows a
    lone output, and every result slide has notes."""
    groups, heading = [], None
    for cell in cells:
        continued = cell.metadata.pop("deck_continued", False)
        if not groups or (slide_type(cell) in ("slide", "subslide") and groups[-1]["cells"]):
            origin = groups[-1]["origin"] if continued and groups else len(groups)
            groups.append({"cells": [], "origin": origin, "heading": heading, "continued": continued})
        groups[-1]["cells"].append(cell)
        if cell.cell_type == "markdown" and slide_type(cell) != "notes":
            found = _HEADING.findall(cell.source)
            heading = found[-1] if found else heading
    notes = {}
    for group in groups:
        notes.setdefault(group["origin"], []).extend(c for c in group["cells"] if slide_type(c) == "notes")
    shown = []
    for group in groups:
        body = group["cells"]
        says = [c for c in body if c.cell_type == "markdown" and slide_type(c) != "notes" and c.source.strip()]
        results = any(c.cell_type == "code" and c.get("outputs") for c in body)
        if group["heading"] and ((group["continued"] and not any(_HEADING.search(c.source) for c in says))
                                 or (results and not says)):
            starts = slide_type(body[0]) if slide_type(body[0]) in ("slide", "subslide") else "subslide"
            label = _markdown_cell(f"### {group['heading'].rstrip('.:')} (continued)", starts)
            set_slide_type(body[0], "-")
            body = [label] + body
        if not any(slide_type(c) == "notes" for c in body):
            body = body + [copy.deepcopy(c) for c in notes.get(group["origin"], [])]
        shown += body
    for number, cell in enumerate(shown):  # copies share their cell ids; a deck needs them unique
        if "id" in cell and any(cell["id"] == other.get("id") for other in shown[:number]):
            cell["id"] = f"{cell['id'][:56]}-c{number}"
    return shown


def _markdown_cell(source: str, kind: str):
    from nbformat.v4 import new_markdown_cell

    return new_markdown_cell(source, metadata={"slideshow": {"slide_type": kind}})


def _continued_outputs(cell, suffix: str):
    """An empty copy of `cell` for outputs that continue it on a subslide of their own: its code is not shown
    again, its id gets `suffix`, and it is marked as a continuation (the layout labels those)."""
    piece = copy.deepcopy(cell)
    piece.outputs = []
    if "id" in piece:
        piece["id"] = f"{cell['id']}-{suffix}"[:64]
    piece.metadata.setdefault("transient", {})["remove_source"] = True
    piece.metadata.pop("deck_keep_with_previous", None)
    set_slide_type(piece, "subslide")
    piece.metadata["deck_continued"] = True
    return piece


def _split_outputs(cell):
    """The cell, followed by output-only copies holding the outputs that do not fit with what precedes them."""
    if cell_height(cell) <= SLIDE_BUDGET_PX or not cell.get("outputs"):
        return [cell]
    outputs, cell.outputs = [piece for output in cell.outputs for piece in _stream_pages(output)], []
    shows_code = bool(cell.source) and not cell.metadata.get("transient", {}).get("remove_source")
    pieces, used = [cell], cell_height(cell)
    for output in outputs:
        height = output_height(output)
        has_content = pieces[-1].outputs or (pieces[-1] is cell and shows_code)
        if has_content and used + height > SLIDE_BUDGET_PX:
            piece = _continued_outputs(cell, str(len(pieces)))
            pieces.append(piece)
            used = CELL_GAP_PX
        pieces[-1].outputs.append(output)
        used += height
    return pieces


def _stream_pages(output) -> list:
    """A text output taller than a slide, cut into outputs that each fit one (a source listing, a long log)."""
    if output.get("output_type") != "stream" or output_height(output) <= SLIDE_BUDGET_PX:
        return [output]
    room = (SLIDE_BUDGET_PX - CELL_GAP_PX) // CODE_LINE_PX
    pages, lines, used = [], [], 0
    for line in output["text"].splitlines(keepends=True):
        height = _wrapped_lines(line, CODE_CHARS)
        if lines and used + height > room:
            pages.append("".join(lines))
            lines, used = [], 0
        lines.append(line)
        used += height
    pages.append("".join(lines))
    return [_with_text(output, text) for text in pages]


def _with_text(output, text: str):
    page = copy.deepcopy(output)
    page["text"] = text
    return page


def deck_title(nb, title: str | None, notices: list[str]) -> dict:
    """What the title slides show: the lab's title and its objectives (notebook metadata
    ``adapterlab.objectives``); then one line on the backbone and data behind the numbers and the
    stand-in notice, once (its first sentence on the slide, all of it in the notes)."""
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
    if backbones or data:
        parts = [f"backbone {'; '.join(backbones)}" if backbones else "no pretrained backbone"]
        parts.append(f"data {', '.join(data)} ({', '.join(sources)})" if data else "no data set")
        provenance = "Numbers from: " + "; ".join(parts) + "."
    else:
        provenance = "No pretrained backbone or data set is loaded in this lab: its numbers come from the code on the slides."
    notice = relative_paths(" ".join(dict.fromkeys(" ".join(text.split()) for text in notices)))
    metadata = nb.metadata.get("adapterlab", {})
    objectives = [str(item) for item in metadata.get("objectives", [])] if isinstance(metadata, dict) else []
    shown = _sentences(notice)[0] if notice else ""  # the slide shows its first sentence, the notes all of it
    return {"title": title or nb.metadata.get("title", ""), "objectives": objectives, "provenance": provenance,
            "notice": notice, "notice_shown": shown}


# --------------------------------------------------------------------------------------------------
# Lines that fit: code reflowed, text outputs wrapped with a hanging indent, text tables as tables
# --------------------------------------------------------------------------------------------------

_OPENING, _CLOSING = "([{", ")]}"
_BREAK_BEFORE = {"and", "or", "if", "else", "for", "+", "-", "*", "@", "|", "==", "<", ">", "<=", ">="}


def reflow_code(source: str, width: int = CODE_WIDTH) -> str:
    """`source` with every line longer than `width` broken where Python allows it: a trailing comment
    moves onto its own line above, a long comment is wrapped, and code breaks after a comma or an
    opening bracket, or before an operator, inside brackets, continuing under its bracket (or 8 spaces in).
    The result parses to the same program (else `source` comes back unchanged); a line with no place
    to break keeps its length."""
    lines = source.splitlines()
    if all(len(line) <= width for line in lines):
        return source
    try:
        tree = _program(source)
    except (SyntaxError, ValueError):
        return source  # IPython magics and the like: shown as written
    source = "\n".join(_parenthesised_import(line) if len(line) > width else line for line in lines)
    wrapped = _wrapped_docstrings(source, width)
    if _program(wrapped) == tree:  # else a long string that is not a docstring: left as it is
        source = wrapped
    lines = source.splitlines()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (SyntaxError, tokenize.TokenError, IndentationError, ValueError):
        return source  # IPython magics and the like: shown as written
    by_line: dict[int, list] = {}
    depth_at: dict[int, int] = {}  # brackets open where each line starts
    depth = 0
    for token in tokens:
        depth_at.setdefault(token.start[0], depth)
        by_line.setdefault(token.start[0], []).append(token)
        if token.type == tokenize.OP:
            depth += (token.string in _OPENING) - (token.string in _CLOSING)
    split = _split_long_strings(source, tokens, depth_at, width)
    if split != source:
        reflowed = reflow_code(split, width)
        try:
            if _program(reflowed) == tree:
                return reflowed
        except SyntaxError:
            pass
    shown = []
    for number, line in enumerate(lines, start=1):
        if len(line) <= width:
            shown.append(line)
            continue
        shown += _reflow_line(line, by_line.get(number, []), width, depth_at.get(number, 0))
    reflowed = "\n".join(shown)
    try:
        same = _program(reflowed) == tree
    except SyntaxError:
        same = False
    return reflowed if same else source


def _program(source: str) -> str:
    """The program `source` parses to, docstrings compared by their words (the deck may rewrap them)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body[0].value.value = " ".join(body[0].value.value.split())
    return ast.dump(tree)


_IMPORT = re.compile(r"^(\s*from\s+[\w.]+\s+import\s+)([^(#]+?)\s*$")
_DOCSTRING = re.compile(r'^(\s*)("""|\'\'\')(.+)\2\s*$')


def _parenthesised_import(line: str) -> str:
    """`from m import a, b, c` as `from m import (a, b, c)`, which may break after a comma."""
    match = _IMPORT.match(line)
    return f"{match.group(1)}({match.group(2)})" if match else line


def _wrapped_docstrings(source: str, width: int) -> str:
    """One-line docstrings longer than `width` wrapped over lines at the docstring's indent."""
    shown = []
    for line in source.splitlines():
        match = _DOCSTRING.match(line)
        if len(line) <= width or not match:
            shown.append(line)
            continue
        indent, quotes, text = match.groups()
        wrapped = textwrap.wrap(text, width - len(indent) - 3, break_long_words=False, break_on_hyphens=False)
        shown += [indent + quotes + wrapped[0]] + [indent + piece for piece in wrapped[1:]] + [indent + quotes]
    return "\n".join(shown)


def _reflow_line(line: str, tokens, width: int, base: int = 0) -> list[str]:
    indent = len(line) - len(line.lstrip())
    code_tokens = [t for t in tokens if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                                                        tokenize.DEDENT, tokenize.ENDMARKER) and t.start[0] == t.end[0]]
    comments = [t for t in code_tokens if t.type == tokenize.COMMENT]
    if comments and comments[0].start[1] == indent:  # a comment line
        return _wrap_comment(line[indent:], indent, width)
    if comments:  # a trailing comment goes above its code
        code = line[: comments[0].start[1]].rstrip()
        above = _wrap_comment(comments[0].string, indent, width)
        return above + _reflow_line(code, [t for t in code_tokens if t.type != tokenize.COMMENT], width, base)
    # candidate breaks: (original column where the next piece starts, bracket depth, kind: 0 after a
    # comma, 1 before an operator or between two string literals, 2 after an opening bracket)
    stack, breaks, previous = [], [], None
    for token in code_tokens:
        text, col = token.string, token.start[1]
        if token.type == tokenize.STRING and previous is not None and previous.type == tokenize.STRING:
            breaks.append((col, base + len(stack), 1))
        previous = token
        if token.type == tokenize.OP and text in _OPENING:
            stack.append(col)
            breaks.append((token.end[1], base + len(stack), 2))
        elif token.type == tokenize.OP and text in _CLOSING:
            if stack:
                stack.pop()
        elif token.type == tokenize.OP and text == ",":
            breaks.append((token.end[1], base + len(stack), 0))
        elif text in _BREAK_BEFORE and (token.type == tokenize.NAME or token.type == tokenize.OP) and col > indent:
            breaks.append((col, base + len(stack), 1))
    opened = _bracket_columns(code_tokens)
    pieces, start, shift = [], indent, indent
    while shift + len(line) - start > width:
        fitting = [(kind, depth, -col) for col, depth, kind in breaks if col > start and shift + col - start <= width
                   and depth > 0 and line[col:].strip() and not line[col:].lstrip().startswith(tuple(_CLOSING + ",:"))]
        if not fitting:
            break
        # a comma before an operator before an opening bracket, the outermost first, the last that fits;
        # a break that leaves the first piece shorter than 40 % of the room only when nothing else fits
        long_enough = [c for c in fitting if -c[2] - start >= 0.4 * (width - shift)]
        col = -min(long_enough or fitting)[2]
        pieces.append(" " * shift + line[start:col].strip())
        inner = [c for c in opened if c < col and opened[c] >= col]
        bracket = max(inner) if inner else None
        visual = shift + (bracket - start) + 1 if bracket is not None and bracket >= start else shift
        shift = visual if visual <= width // 2 else indent + 8
        start = col + (len(line[col:]) - len(line[col:].lstrip()))
    pieces.append(" " * shift + line[start:].strip())
    return pieces


_STRING_PARTS = re.compile(r"^([rRbBuUfF]{0,2})(['\"])(.*)\2$", re.S)


def _split_long_strings(source: str, tokens, depth_at: dict[int, int], width: int) -> str:
    """`source` with each one-line string literal inside brackets on a line longer than `width` cut at
    spaces into adjacent literals (Python joins them back), so that the line can break between them."""
    lines = source.splitlines()
    depth, edits = 0, []
    for token in tokens:
        if token.type == tokenize.OP:
            depth += (token.string in _OPENING) - (token.string in _CLOSING)
        row, col = token.start
        if (token.type != tokenize.STRING or token.end[0] != row or depth == 0 or len(lines[row - 1]) <= width
                or len(token.string) < 30):
            continue
        match = _STRING_PARTS.match(token.string)
        if not match or token.string[len(match.group(1)):].startswith(match.group(2) * 3):
            continue
        prefix, quote, body = match.groups()
        room = max(24, width - col - 4)
        words, level, word = [], 0, ""
        for char in body:  # words end after a space outside {} (an f-string's fields stay whole)
            word += char
            level += (char == "{") - (char == "}") if "f" in prefix.lower() else 0
            if char == " " and level == 0:
                words.append(word)
                word = ""
        words.append(word)
        chunks = [""]
        for word in words:
            if chunks[-1] and len(chunks[-1]) + len(word) > room:
                chunks.append("")
            chunks[-1] += word
        if len(chunks) > 1 and all(chunks):
            edits.append((row, col, token.end[1], " ".join(f"{prefix}{quote}{c}{quote}" for c in chunks)))
    for row, start, end, text in sorted(edits, reverse=True):
        lines[row - 1] = lines[row - 1][:start] + text + lines[row - 1][end:]
    return "\n".join(lines)


def _bracket_columns(tokens) -> dict[int, int]:
    """{column of an opening bracket on the line: column of its closing bracket (or the line's end)}."""
    stack, pairs = [], {}
    for token in tokens:
        if token.type == tokenize.OP and token.string in _OPENING:
            stack.append(token.start[1])
        elif token.type == tokenize.OP and token.string in _CLOSING and stack:
            pairs[stack.pop()] = token.start[1]
    for col in stack:
        pairs[col] = 10**6
    return pairs


def _wrap_comment(comment: str, indent: int, width: int) -> list[str]:
    text = comment.lstrip("#").strip()
    return textwrap.wrap(text, width, initial_indent=" " * indent + "# ", subsequent_indent=" " * indent + "# ",
                         break_long_words=False, break_on_hyphens=False) or [" " * indent + "#"]


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
_NUMBER_CELL = re.compile(r"^[-+−]?[\d.,]+(?:e[-+]?\d+)?\s*(?:%|[kMG]?B)?(?:,\s*[-+−]?[\d.,]+\s*%?)*$")


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
        rows = text_table_rows(lines[i:end]) if end - i >= 3 else None
        if rows is None:
            plain.append(lines[i])
            i += 1
            continue
        flush()
        rows_seen = True
        digits = [[bool(re.search(r"\d", value)) for value in row] for row in rows]
        headed = digits[0] != digits[1]  # a header row looks unlike the rows under it
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
        if axis.get("type") == "log":
            axis.setdefault("dtick", 1)  # decades only: plotly draws the labels between them smaller
        if axis.get("exponentformat", "power") == "power":
            axis["exponentformat"] = "e"  # 1e-08, as the labs write σ: a superscript exponent is 70 % of the font
    font = layout.setdefault("font", {})
    font["size"] = max(font.get("size") or 0, size)
    return figure
