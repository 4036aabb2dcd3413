"""Predict, then run: no cell a student reads before a prediction settles it, and its explanation stays folded.

Each prediction question declares the phrases that state its answer, in its metadata
(``{"adapterlab": {"answer_phrases": [...]}}``). Reading the labs in course order as the student
copies show them (speaker notes left out, give-away outputs cleared; folded text counts, since a
student can open it), none of those phrases may appear before the question — in an earlier lab or
earlier in the same lab (the question itself lists every option, so it does not count). Each phrase must appear in its own lab after the question (in the result
or the lesson), so that a phrase no reveal says cannot make the check pass on its own. And every
explanation a student meets between a prediction and its lesson is folded in a ``<details>`` block.
"""

from __future__ import annotations

import copy
import re

import nbformat
import pytest

from adapterlab.labfiles import all_labs
from adapterlab.student import student_notebook

LESSON = "<details><summary>What this teaches</summary>"
FOLDED = re.compile(r"^<details><summary>[^<]+</summary>\n\n.*\n\n</details>$", re.S)


def normal(text: str) -> str:
    """Text as a reader sees it: markdown emphasis and code marks gone, case and line breaks ignored."""
    return " ".join(re.sub(r"[*`]", "", text).split()).lower()


def is_notes(cell) -> bool:
    return cell.metadata.get("slideshow", {}).get("slide_type") == "notes"


def is_question(cell) -> bool:
    return cell.cell_type == "markdown" and "prediction" in cell.metadata.get("tags", [])


def phrases(cell) -> list[str]:
    return cell.metadata.get("adapterlab", {}).get("answer_phrases", [])


def shown(cell) -> str:
    """A cell's source and the text of its outputs."""
    texts = [cell.source]
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        texts += [output.get("text", ""), "".join(data.get("text/plain", "")), "".join(data.get("text/markdown", ""))]
    return normal("\n".join(texts))


def read_in_order():
    """(lab, instructor cell, what the student copy shows of it) for every cell a student meets, in course order;
    the instructor's cell keeps its outputs, the reveals included."""
    for lab in all_labs():
        instructor = nbformat.read(lab, as_version=4)
        student = student_notebook(copy.deepcopy(instructor), name=lab.name)
        kept = [cell for cell in instructor.cells if not is_notes(cell)]  # cell for cell the copy
        assert len(kept) == len(student.cells)
        for original, seen in zip(kept, student.cells):
            yield lab, original, shown(seen)


def test_every_prediction_declares_its_answer_phrases_and_the_copy_hides_them():
    questions = [(lab, cell) for lab, cell, _ in read_in_order() if is_question(cell)]
    assert len(questions) >= 12
    bare = [f"{lab.name}: {cell.source[:60]}" for lab, cell in questions if not phrases(cell)]
    assert not bare, f"predictions without answer phrases in their metadata: {bare}"
    for lab in all_labs():
        copied = student_notebook(nbformat.read(lab, as_version=4), name=lab.name)
        assert "answer_phrases" not in nbformat.writes(copied), f"{lab.name}: the copy keeps the answer phrases"


def test_no_prediction_is_answered_before_it_is_asked():
    cells = list(read_in_order())
    read: list[tuple[str, str]] = []  # (where, text) of every cell met so far
    settled = []
    for position, (lab, cell, text) in enumerate(cells):
        for phrase in phrases(cell):  # the question itself lists every option, the right one too
            later = [shown(original) for other, original, _ in cells[position:] if other == lab]
            assert any(normal(phrase) in seen for seen in later), (
                f"{lab.name}: answer phrase {phrase!r} appears nowhere after its question: declare what the reveal says"
            )
            settled += [f"{phrase!r} of {lab.stem}'s prediction '{cell.source[12:60]}…' is in {where}"
                        for where, seen in read if normal(phrase) in seen]
        read.append((f"{lab.stem}: {cell.source.splitlines()[0][:50] if cell.source else cell.cell_type}", text))
    assert not settled, "predictions answered before they are asked:\n" + "\n".join(settled)


@pytest.mark.parametrize("lab", all_labs(), ids=lambda lab: lab.stem)
def test_every_explanation_after_a_prediction_is_folded(lab):
    cells = [cell for cell in nbformat.read(lab, as_version=4).cells if not is_notes(cell)]
    for index, cell in enumerate(cells):
        if not is_question(cell):
            continue
        lesson = next((k for k in range(index + 1, len(cells)) if cells[k].source.startswith(LESSON)), None)
        assert lesson is not None, f"{lab.name}: prediction '{cell.source[12:60]}…' has no folded lesson"
        assert not any(is_question(cells[k]) for k in range(index + 1, lesson)), f"{lab.name}: a lesson is missing"
        for k in range(index + 1, lesson + 1):
            text = cells[k].source
            if cells[k].cell_type == "markdown" and not text.startswith("#"):  # a section title is no explanation
                assert FOLDED.match(text), f"{lab.name}: an explanation after '{cell.source[12:60]}…' is not folded: {text[:80]!r}"
