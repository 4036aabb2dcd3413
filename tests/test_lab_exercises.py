"""Every lab makes the student act: an exercise with its self-check, and predictions asked before the result.

These tests read the committed notebooks (nothing is executed). They hold the teaching standard of
the labs (DESIGN.md §6): each of labs 1–11 has an exercise — a `### BEGIN SOLUTION` region — whose
next cell calls a self-check from `adapterlab.checks` or `adapterlab.checks_training`; and the labs
ask at least twelve "predict, then run" questions in all, at least one in each of labs 1–11, each
laid out as the labs lay them out: the question with its lettered options, the cell for the
student's answer, a result that reveals it, and what it teaches.
"""

from __future__ import annotations

import importlib
import re

import nbformat
import pytest

from adapterlab.labfiles import LABS_DIR

LAB_NUMBERS = range(1, 12)
MIN_PREDICTIONS = 12
#: A check_ function called on a line that is not a comment.
CHECK_CALL = re.compile(r"^[^#\n]*?\b(?P<name>check_\w+)\s*\(", re.M)
OPTION = re.compile(r"^\s*(?:[-*]\s*)?\(?(?P<letter>[a-d])\)\s+\S", re.M)
LESSON = "<details><summary>What this teaches</summary>"  # folded until the student opens it
ANSWER_CELL = re.compile(r'^my_prediction = ""  # write (?P<letters>"a"(?:, "[b-d]")* or "[b-d]"), then run the cells below$')


def lab(number: int):
    [path] = sorted(LABS_DIR.glob(f"{number:02d}_*.ipynb"))
    return nbformat.read(path, as_version=4)


def is_exercise(cell) -> bool:
    return cell.cell_type == "code" and any(line.strip() == "### BEGIN SOLUTION" for line in cell.source.splitlines())


def called_checks(cell) -> list[str]:
    return [match["name"] for match in CHECK_CALL.finditer(cell.source)] if cell.cell_type == "code" else []


def known_checks() -> set[str]:
    """The check_ functions of the self-check modules that exist."""
    names = set()
    for module in ("adapterlab.checks", "adapterlab.checks_training", "adapterlab.teaching.checks_anatomy"):
        try:
            names |= {name for name in dir(importlib.import_module(module)) if name.startswith("check_")}
        except ModuleNotFoundError:
            pass
    return names


def tags(cell) -> list[str]:
    return cell.metadata.get("tags", [])


def slide_type(cell) -> str | None:
    return cell.metadata.get("slideshow", {}).get("slide_type")


def is_question(cell) -> bool:
    return cell.cell_type == "markdown" and "prediction" in tags(cell) and cell.source.startswith("**Predict.**")


@pytest.mark.parametrize("number", LAB_NUMBERS, ids=lambda n: f"lab{n:02d}")
def test_every_lab_has_an_exercise_followed_by_its_self_check(number):
    nb = lab(number)
    exercises = [index for index, cell in enumerate(nb.cells) if is_exercise(cell)]
    assert exercises, f"lab {number:02d} has no exercise (a code cell with ### BEGIN SOLUTION ... ### END SOLUTION)"
    known = known_checks()
    for index in exercises:
        # the next code cell (a heading may stand between them: the check is a slide of its own)
        following = next((cell for cell in nb.cells[index + 1 :] if cell.cell_type == "code"), None)
        names = called_checks(following) if following is not None else []
        assert names, f"lab {number:02d}: the code cell after exercise cell {index} calls no check_... self-check"
        unknown = [name for name in names if name not in known]
        assert not unknown, f"lab {number:02d}, after cell {index}: {unknown} is not in adapterlab.checks or adapterlab.checks_training"


def test_the_labs_ask_enough_predictions_and_every_lab_asks_one():
    counts = {number: sum(is_question(cell) for cell in lab(number).cells) for number in LAB_NUMBERS}
    missing = [f"{number:02d}" for number, count in counts.items() if count == 0]
    assert not missing, f"labs without a prediction: {missing} (counts {counts})"
    assert sum(counts.values()) >= MIN_PREDICTIONS, f"{sum(counts.values())} predictions in all, want {MIN_PREDICTIONS}: {counts}"


@pytest.mark.parametrize("number", LAB_NUMBERS, ids=lambda n: f"lab{n:02d}")
def test_each_prediction_is_question_answer_reveal_and_lesson(number):
    nb = lab(number)
    cells = nb.cells
    questions = [index for index, cell in enumerate(cells) if is_question(cell)]
    for index in questions:
        where = f"lab {number:02d}, prediction at cell {index}"
        question = cells[index]
        assert slide_type(question) == "slide", f"{where}: the question starts a slide"
        letters = [match["letter"] for match in OPTION.finditer(question.source)]
        assert letters == list("abcd"[: len(letters)]) and 2 <= len(letters) <= 4, f"{where}: want options (a), (b)[, (c), (d)], got {letters}"

        answer = cells[index + 1]
        assert answer.cell_type == "code" and "prediction" in tags(answer), f"{where}: the next cell holds the student's answer"
        assert slide_type(answer) == "skip" and not answer.get("outputs"), f"{where}: the answer cell is skipped and prints nothing"
        match = ANSWER_CELL.match(answer.source)
        assert match, f"{where}: the answer cell holds only my_prediction = \"\" and its comment, got {answer.source!r}"
        assert re.findall(r'"([a-d])"', match["letters"]) == letters, f"{where}: the comment names other letters than the options"

        later = [i for i in questions if i > index] + [len(cells)]
        lessons = [i for i in range(index + 2, later[0]) if cells[i].cell_type == "markdown"
                   and cells[i].source.startswith(LESSON)]
        assert lessons, f"{where}: no folded What this teaches cell before the next prediction"
        reveals = [i for i in range(index + 2, lessons[0]) if cells[i].cell_type == "code" and cells[i].get("outputs")]
        assert reveals, f"{where}: no result with an output between the answer cell and What this teaches"
