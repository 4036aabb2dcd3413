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

import base64
import copy
import math
import re
import struct

from nbconvert.preprocessors import Preprocessor

PLOTLY_MIME = "application/vnd.plotly.v1+json"
SKIP_TAG = "deck-skip"
HIDE_INPUT_TAG = "deck-hide-input"
PREDICTION_TAG = "prediction"

# Slide geometry in reveal.js units (the deck is 960 × 700, scaled to the screen).
SLIDE_BUDGET_PX = 600  # the slide's height less reveal's margin and the cells' padding
FIGURE_HEIGHT_PX = 420
TEXT_LINE_PX, TEXT_CHARS = 30, 72  # markdown at 20 px
CODE_LINE_PX, CODE_CHARS = 24, 66  # code and text outputs at 19 px, beside the prompt
HEADING_PX = 70
CELL_GAP_PX = 24

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
        cells = _carry_slide_starts(_predictions_as_slides(cells))
        leading_notes = []
        while cells and slide_type(cells[0]) == "notes":
            leading_notes.append(cells.pop(0).source)
        if title_cell is not None and all(slide_type(cell) == "notes" for cell in cells):  # only the title: keep its cell
            title_cell.source = heading
            set_slide_type(title_cell, "slide")
            cells.insert(0, title_cell)
        nb.cells = _fit_to_slides(cells)
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
    kept = []
    for output in cell.get("outputs", []):
        if output.get("name") == "stderr":
            continue
        if "text" in output:
            output["text"] = relative_paths(output["text"])
        data = output.get("data", {})
        for mime in ("text/plain", "text/html", "text/markdown"):
            if mime in data:
                data[mime] = relative_paths("".join(data[mime]))
        if PLOTLY_MIME in data:
            layout = data[PLOTLY_MIME].setdefault("layout", {})
            layout["height"] = min(layout.get("height") or FIGURE_HEIGHT_PX, FIGURE_HEIGHT_PX)
            layout.pop("width", None)
            layout["autosize"] = True
        kept.append(output)
    cell.outputs = kept


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
        for piece in pieces:
            height = cell_height(piece)
            keep = piece.metadata.get("deck_keep_with_previous")
            if used and used + height > SLIDE_BUDGET_PX and slide_type(piece) in ("-", "fragment") and not keep:
                set_slide_type(piece, "subslide")
                used = 0
            used += height
            fitted.append(piece)
    return fitted


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
            piece = copy.deepcopy(cell)
            piece.outputs = []
            if "id" in piece:
                piece["id"] = f"{cell['id']}-{len(pieces)}"[:64]
            piece.metadata.setdefault("transient", {})["remove_source"] = True
            piece.metadata.pop("deck_keep_with_previous", None)
            set_slide_type(piece, "subslide")
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
    """What the title slide shows: the lab's title, its objectives (notebook metadata
    ``adapterlab.objectives``), one line on the backbone and data behind the numbers, and the
    stand-in notice, once."""
    backbones, data, sources = [], [], []
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            text = output.get("text", "") or "".join(output.get("data", {}).get("text/plain", ""))
            for backbone in _BACKBONE_LINE.findall(text):
                if backbone.strip() not in backbones:
                    backbones.append(backbone.strip())
            for name, source in _DATA_LINE.findall(text):
                source = "GLUE" if source.startswith("GLUE") else source.strip()
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
    return {"title": title or nb.metadata.get("title", ""), "objectives": objectives, "provenance": provenance, "notice": notice}
