"""A number in a lab's text that describes the output above it appears in that output.

The slip this catches: notes written against one run ("Point at 6.3e-03") beside an output that, re-executed,
prints another (4.1e-03). A markdown cell that follows a code cell on the same slide (notes, a fragment) is read sentence by sentence; each measured
number in it (a decimal, a percentage, a thousands-separated count, a power of ten) must be one of the numbers
the code cells just above print or plot, to the precision it is written with (0.842 matches 0.8417; 861 %
matches 8.61). Exempt, because they do not describe the output: the paper's numbers (a sentence naming the
paper, a table or a figure), questions and "Ask" lines, the settings a run was made with (σ, learning rates,
r, k, d, ε), approximations ("about 0.8"), and zero.
"""

from __future__ import annotations

import json
import re

import pytest

from adapterlab.labfiles import all_labs

NUMBER = re.compile(r"(?<![\w.])[-+−]?(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?(?:e[-+]?\d+)?)(\s?%)?(?![\w])(?!\.\d)")
PAPER = re.compile(r"\bpaper|\bTable\b|\bFig(?:ure|\.)|\bSection\b", re.IGNORECASE)
#: A setting names the number right after it: σ = 1e-2, a learning rate of 1e-3, r = 64.
SETTING = re.compile(r"(?:σ|ε|\blr\b|\brates?\b|\br\b|\bk\b|\bd\b|\bsteps?\b|\bbatch\b)(?:\s*(?:=|of|up to|from|to|is|and|at|\())*\s*$")
APPROXIMATE = re.compile(r"(?:about|near|nearly|around|roughly|almost|~|≈)\s*$", re.IGNORECASE)
#: How far up a lab's text may point: the code cells since the slide began, at most this many.
CODE_CELLS_ABOVE = 3
SENTENCE_END = re.compile(r"(?<=[.;!?])\s+(?=\S)|\n\s*\n")


def _value(digits: str) -> tuple[float, float]:
    """A written number's value and half a unit of its last digit (the precision it is written with)."""
    mantissa, _, exponent = digits.replace(",", "").partition("e")
    decimals = len(mantissa.partition(".")[2])
    return float(digits.replace(",", "")), 0.5 * 10.0 ** (int(exponent or 0) - decimals)


def _numbers_in(value, found: list[float]) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        found.append(float(value))
    elif isinstance(value, str):
        found += [float(match.group(1).replace(",", "")) for match in NUMBER.finditer(value)]
    elif isinstance(value, dict):
        for item in value.values():
            _numbers_in(item, found)
    elif isinstance(value, list):
        for item in value:
            _numbers_in(item, found)


def printed_numbers(cell: dict) -> list[float]:
    """Every number a code cell's outputs print or plot (a figure's data included; images left out)."""
    found: list[float] = []
    for output in cell.get("outputs", []):
        _numbers_in("".join(output.get("text", "")), found)
        for kind, data in output.get("data", {}).items():
            if not kind.startswith("image/"):
                _numbers_in("".join(data) if isinstance(data, list) else data, found)
    return found


def described_numbers(markdown: str):
    """(written, value, precision, sentence) for each measured number of the text that must be in the output."""
    for sentence in SENTENCE_END.split(markdown):
        stripped = sentence.strip()
        if PAPER.search(stripped) or stripped.endswith("?") or stripped.startswith("Ask"):
            continue
        for match in NUMBER.finditer(stripped):
            digits, percent = match.group(1), match.group(2)
            if not (percent or re.search(r"[.,e]", digits)):
                continue  # a small whole number counts things (3 seeds, layer 2), it measures nothing
            before = stripped[:match.start()]
            if SETTING.search(before) or APPROXIMATE.search(before):
                continue
            value, precision = _value(digits)
            if value == 0:
                continue
            yield match.group(0), value, precision, stripped


def shows(value: float, precision: float, printed: list[float]) -> bool:
    """Whether `value`, at its written precision, is among the printed numbers (or is one as a percentage)."""
    return any(abs(candidate - number) <= tolerance + 1e-12
               for number in printed
               for candidate, tolerance in ((value, precision), (value / 100, precision / 100), (value * 100, precision * 100)))


def unprinted_numbers(cells: list[dict]) -> list[str]:
    """'cell N: "written" in "sentence"' for each described number its output above does not show."""
    problems = []
    for index, cell in enumerate(cells):
        starts_a_slide = cell.get("metadata", {}).get("slideshow", {}).get("slide_type") in ("slide", "subslide")
        if cell["cell_type"] != "markdown" or starts_a_slide or index == 0 or cells[index - 1]["cell_type"] != "code":
            continue  # a new slide's text introduces what comes next; it does not describe the output above
        printed: list[float] = []
        above, code_cells = index - 1, 0
        while above >= 0 and code_cells < CODE_CELLS_ABOVE:
            if cells[above]["cell_type"] == "code":
                printed += printed_numbers(cells[above])
                code_cells += 1
            elif cells[above].get("metadata", {}).get("slideshow", {}).get("slide_type") == "slide":
                break
            above -= 1
        if not printed:
            continue
        for written, value, precision, sentence in described_numbers("".join(cell["source"])):
            if not shows(value, precision, printed):
                problems.append(f'cell {index}: "{written}" in "{sentence[:160]}"')
    return problems


def _code(*texts, data=None):
    outputs = [{"output_type": "stream", "name": "stdout", "text": text} for text in texts]
    if data is not None:
        outputs.append({"output_type": "display_data", "data": data, "metadata": {}})
    return {"cell_type": "code", "source": "", "outputs": outputs, "metadata": {}}


def _notes(text):
    return {"cell_type": "markdown", "source": text, "metadata": {"slideshow": {"slide_type": "notes"}}}


@pytest.mark.parametrize("lab", all_labs(), ids=lambda lab: lab.stem)
def test_the_text_quotes_only_numbers_its_output_shows(lab):
    problems = unprinted_numbers(json.loads(lab.read_text(encoding="utf-8"))["cells"])
    assert not problems, f"{lab.stem}: numbers its output does not print:\n" + "\n".join(problems)


def test_a_number_from_another_run_is_caught():
    """The slip itself: the notes quote 6.3e-03, the output above prints 4.1e-03."""
    cells = [_code("the adapters change the logits by up to 4.1e-03\n"),
             _notes("Point at 6.3e-03: the linear adapters really change the logits.")]
    assert unprinted_numbers(cells) == ['cell 1: "6.3e-03" in "Point at 6.3e-03: the linear adapters really change the logits."']
    cells[1] = _notes("Point at 4.1e-03: the linear adapters really change the logits.")
    assert unprinted_numbers(cells) == []


@pytest.mark.parametrize("text", [
    "Point at 0.842: the accuracy after 300 steps.",        # rounded from 0.8417
    "Padding computes 861 % extra.",                          # 8.61 as a percentage
    "The paper reports 2.1 % for r = 64.",                    # the paper's number
    "At σ = 0.1 the seeds end lower.",                        # a setting
    "Ask: would 0.95 be enough?",                             # a question
    "Both land about 0.9 of the way up.",                     # an approximation
])
def test_what_describes_the_output_or_is_exempt_passes(text):
    assert unprinted_numbers([_code("accuracy 0.8417, padding waste 8.61\n"), _notes(text)]) == []


@pytest.mark.parametrize("text", [
    "Point at 0.85: the accuracy after 300 steps.",          # 0.8417 is not 0.85 at two decimals
    "The folded logits differ by 3.2e-07.",                   # not printed at all
    "Padding computes 86 % extra.",                           # neither 86 nor 0.86
])
def test_a_number_the_output_does_not_show_fails(text):
    assert len(unprinted_numbers([_code("accuracy 0.8417, padding waste 8.61\n"), _notes(text)])) == 1


def test_a_figures_data_counts_as_printed():
    figure = {"application/vnd.plotly.v1+json": {"data": [{"x": [2, 64], "y": [0.8213, 0.8571]}], "layout": {}}}
    assert unprinted_numbers([_code(data=figure), _notes("Point at 0.857 for r = 64.")]) == []
    assert len(unprinted_numbers([_code(data=figure), _notes("Point at 0.861 for r = 64.")])) == 1
