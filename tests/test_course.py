"""The nbgrader course as an instructor runs it: ``adapterlab course`` writes the folder, then nbgrader's own
commands release lab 3, autograde two submissions, write feedback and export the grades.

One submission holds the lab's own solutions; the other a wrong answer to the first exercise (the fold that
forgets the adapter's identity path, a mistake the check names), the second exercise left as released, and
the first check's locked cell rewritten to print a ✔ line. The gradebook must give the first every point
and the second none, with the check restored from the release, and the feedback must show the course's
one-line messages. About a minute and a half a submission on 2 cores: lab 3 runs top to bottom in the ci
profile.
"""

from __future__ import annotations

import copy
import csv
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from adapterlab.teaching.instructor.course import CODE_STUB, POINTS, course_cell_source, write_course

LAB = "03_collapse_to_lora"
BIN = Path(sys.executable).parent
TAMPERED = 'print("✔ the fold is exact")'


def nbgrader(course: Path, *args: str) -> str:
    """Run one nbgrader command in the course folder (its alembic is found on PATH beside it)."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run([str(BIN / "nbgrader"), *args], cwd=course, env=env, capture_output=True, text=True,
                            timeout=1200)
    assert result.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout + result.stderr


def exercise_cells(nb) -> list[int]:
    return [i for i, cell in enumerate(nb.cells) if cell.metadata.get("nbgrader", {}).get("solution")]


def check_cells(nb) -> list[int]:
    return [i for i, cell in enumerate(nb.cells) if cell.metadata.get("nbgrader", {}).get("grade")]


def submit(course: Path, student: str, nb) -> None:
    folder = course / "submitted" / student / LAB
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{LAB}.ipynb")


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Path:
    course = tmp_path_factory.mktemp("course")
    write_course(course, ["3"])
    nbgrader(course, "generate_assignment", LAB)
    source = nbformat.read(course / "source" / LAB / f"{LAB}.ipynb", as_version=4)
    release = nbformat.read(course / "release" / LAB / f"{LAB}.ipynb", as_version=4)
    first, second = exercise_cells(release)

    right = copy.deepcopy(release)
    for index in (first, second):
        right.cells[index].source = source.cells[index].source
    submit(course, "right", right)

    wrong = copy.deepcopy(release)
    written = source.cells[first].source.replace("M = torch.eye(adapter.d_model) + adapter.up.weight", "M = adapter.up.weight")
    assert written != source.cells[first].source, "lab 3's fold is written differently: update the wrong answer"
    wrong.cells[first].source = written
    wrong.cells[check_cells(release)[0]].source = TAMPERED
    submit(course, "wrong", wrong)

    nbgrader(course, "autograde", LAB, "--create")
    nbgrader(course, "generate_feedback", LAB)
    nbgrader(course, "export")
    return course


def test_the_release_shows_the_course_s_stub_and_keeps_the_hints_and_the_lab_s_outputs(graded):
    release = nbformat.read(graded / "release" / LAB / f"{LAB}.ipynb", as_version=4)
    source = nbformat.read(graded / "source" / LAB / f"{LAB}.ipynb", as_version=4)
    for index in exercise_cells(release):
        cell = release.cells[index].source
        assert CODE_STUB in cell and "NotImplementedError" not in cell and "### BEGIN SOLUTION" not in cell
        assert "# HINT:" in cell and "stop_unless_written(" in cell
    shown = [i for i, cell in enumerate(source.cells) if cell.cell_type == "code" and cell.outputs]
    assert shown and all(release.cells[i].outputs == source.cells[i].outputs for i in shown)
    assert all(not release.cells[i].outputs for i in exercise_cells(release) + check_cells(release))
    editable = [i for i, cell in enumerate(release.cells) if not cell.metadata.get("nbgrader", {}).get("locked")]
    assert editable == sorted(exercise_cells(release) + [i for i, cell in enumerate(release.cells)
                                                         if cell.cell_type == "code" and "prediction" in cell.metadata.get("tags", [])])
    assert "answer_phrases" not in str([cell.metadata for cell in source.cells])  # the question's answer stays hidden


def test_the_lab_s_own_solutions_get_every_point_and_a_wrong_or_missing_answer_none(graded):
    with open(graded / "grades.csv", newline="") as handle:
        grades = {row["student_id"]: row for row in csv.DictReader(handle)}
    checks = len(check_cells(nbformat.read(graded / "source" / LAB / f"{LAB}.ipynb", as_version=4)))
    assert float(grades["right"]["max_score"]) == checks * POINTS
    assert float(grades["right"]["score"]) == checks * POINTS
    assert float(grades["wrong"]["score"]) == 0
    with Gradebook(f"sqlite:///{graded / 'gradebook.db'}") as gradebook:
        for student, expected in (("right", POINTS), ("wrong", 0)):
            submission = gradebook.find_submission_notebook(LAB, LAB, student)
            assert [grade.score for grade in sorted(submission.grades, key=lambda g: g.name)] == [expected] * checks


def test_a_locked_check_a_student_rewrote_runs_as_released(graded):
    autograded = nbformat.read(graded / "autograded" / "wrong" / LAB / f"{LAB}.ipynb", as_version=4)
    release = nbformat.read(graded / "release" / LAB / f"{LAB}.ipynb", as_version=4)
    first_check = check_cells(release)[0]
    assert autograded.cells[first_check].source == release.cells[first_check].source != TAMPERED


def test_the_feedback_shows_each_failure_as_the_course_s_one_line_message(graded):
    page = html.unescape(re.sub(r"<[^>]+>", "", (graded / "feedback" / "wrong" / LAB / f"{LAB}.html").read_text()))
    autograded = nbformat.read(graded / "autograded" / "wrong" / LAB / f"{LAB}.ipynb", as_version=4)
    first, second = check_cells(autograded)
    [wrong] = [output for output in autograded.cells[first].outputs if output.output_type == "error"]
    [missing] = [output for output in autograded.cells[second].outputs if output.output_type == "error"]
    assert wrong.ename == missing.ename == "CheckFailed" and len(wrong.traceback) == len(missing.traceback) == 1
    assert "missing" not in wrong.traceback[0] and "The answer is missing" in missing.traceback[0]
    for line in (wrong.traceback[0], missing.traceback[0]):
        assert line in page, line
    [unwritten] = [output for output in autograded.cells[exercise_cells(autograded)[1]].outputs
                   if output.output_type == "error"]
    assert unwritten.traceback[0].startswith("The answer is missing") and "Graded as missing" in unwritten.traceback[0]
    assert "did not run" not in unwritten.traceback[0]  # autograde runs every cell


def test_an_exercise_cell_keeps_its_hints_above_the_region_nbgrader_clears():
    source = ("def f(x):\n    ### BEGIN SOLUTION\n    # HINT: square it\n    #       then add one\n"
              "    return x * x + 1\n    ### END SOLUTION\n\n\nprint(f(2))")
    course = course_cell_source(source)
    lines = course.splitlines()
    assert lines.index("    # HINT: square it") < lines.index("    ### BEGIN SOLUTION") < lines.index("    return x * x + 1")
    assert lines.index("stop_unless_written(f)") < lines.index("print(f(2))")
    assert course.startswith("# Run All stops in this cell")
