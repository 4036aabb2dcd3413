"""The nbgrader course as an instructor runs it: ``adapterlab course`` writes the folder, then nbgrader's own
commands release a lab, autograde two submissions, write feedback and export the grades.

One submission holds the lab's own solutions; the other a wrong answer to the first exercise (a mistake the
check names: lab 3's fold that forgets the adapter's identity path, lab 8's ablation that leaves the adapters
off when a score fails, lab 11's effective rank that needs the running sum to pass the share rather than
reach it), any other exercise left as released, and the first check's locked cell rewritten to print a ✔
line. The gradebook must give the first every point and the second none, with the check restored from the
release, and the feedback must show the course's one-line messages. Grading runs each lab down to its last
check (the cells below it are not run: grading_run.py), in the ci profile: about a minute a submission on one
core of a slow 2-core machine. The default run grades lab 3; ``run.py test --full`` grades all three.
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
from adapterlab.teaching.instructor.grading_run import NOT_GRADED_TAG, NOT_RUN, NOT_RUN_AGAIN, GradingRun

#: The first test of each lab waits for two submissions' autograding (minutes each on a loaded machine): the
#: suite's bound for one test is not meant for that.
pytestmark = pytest.mark.timeout(2400)

#: Each lab graded: its number, its assignment name, and the wrong answer written into its first exercise.
WRONG_ANSWERS = {
    "03_collapse_to_lora": ("3", "M = torch.eye(adapter.d_model) + adapter.up.weight", "M = adapter.up.weight"),
    "08_which_layers_matter": ("8", "            try:\n                scores[i, j] = score(model)\n            finally:\n"
                               "                set_adapters_enabled(model, True)",
                               "            scores[i, j] = score(model)\n            set_adapters_enabled(model, True)"),
    "11_what_the_adapter_learned": ("11", "cumulative >= energy", "cumulative > energy"),
}
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


def submit(course: Path, lab: str, student: str, nb) -> None:
    folder = course / "submitted" / student / lab
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{lab}.ipynb")


#: The lab the default run grades: lab 3, the quickest to run (its two submissions take about 40 s each on one
#: core of a slow machine). Labs 8 and 11 (a trained model, six stored sets) take two to three times that, with
#: the same commands and the same checks on another wrong answer: python3 run.py test --full grades them.
GRADED_BY_DEFAULT = "03_collapse_to_lora"


@pytest.fixture(scope="module", params=[lab if lab == GRADED_BY_DEFAULT else pytest.param(lab, marks=pytest.mark.full)
                                        for lab in WRONG_ANSWERS])
def graded(request, tmp_path_factory) -> tuple[Path, str]:
    """(the course folder, the lab) once both submissions of the lab are autograded, with feedback and export."""
    lab = request.param
    number, right_line, wrong_line = WRONG_ANSWERS[lab]
    course = tmp_path_factory.mktemp("course")
    write_course(course, [number])
    nbgrader(course, "generate_assignment", lab)
    source = nbformat.read(course / "source" / lab / f"{lab}.ipynb", as_version=4)
    release = nbformat.read(course / "release" / lab / f"{lab}.ipynb", as_version=4)
    exercises = exercise_cells(release)

    right = copy.deepcopy(release)
    for index in exercises:
        right.cells[index].source = source.cells[index].source
    submit(course, lab, "right", right)

    wrong = copy.deepcopy(release)
    written = source.cells[exercises[0]].source.replace(right_line, wrong_line)
    assert written != source.cells[exercises[0]].source, f"{lab}'s exercise is written differently: update its wrong answer"
    wrong.cells[exercises[0]].source = written
    wrong.cells[check_cells(release)[0]].source = TAMPERED
    wrong.cells[check_cells(release)[0]].metadata["tags"] = ["skip-execution", NOT_GRADED_TAG]  # "don't run my check"
    submit(course, lab, "wrong", wrong)

    nbgrader(course, "autograde", lab, "--create")
    nbgrader(course, "generate_feedback", lab)
    nbgrader(course, "export")
    return course, lab


def test_the_release_shows_the_course_s_stub_and_keeps_the_hints_and_the_lab_s_outputs(graded):
    course, lab = graded
    release = nbformat.read(course / "release" / lab / f"{lab}.ipynb", as_version=4)
    source = nbformat.read(course / "source" / lab / f"{lab}.ipynb", as_version=4)
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
    assert {tag for cell in release.cells for tag in cell.metadata.get("tags", [])} == {"prediction"}


def test_the_lab_s_own_solutions_get_every_point_and_a_wrong_or_missing_answer_none(graded):
    course, lab = graded
    with open(course / "grades.csv", newline="") as handle:
        grades = {row["student_id"]: row for row in csv.DictReader(handle)}
    checks = len(check_cells(nbformat.read(course / "source" / lab / f"{lab}.ipynb", as_version=4)))
    assert float(grades["right"]["max_score"]) == checks * POINTS
    assert float(grades["right"]["score"]) == checks * POINTS
    assert float(grades["wrong"]["score"]) == 0
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student, expected in (("right", POINTS), ("wrong", 0)):
            submission = gradebook.find_submission_notebook(lab, lab, student)
            assert [grade.score for grade in sorted(submission.grades, key=lambda g: g.name)] == [expected] * checks


def test_a_locked_check_a_student_rewrote_runs_as_released(graded):
    course, lab = graded
    autograded = nbformat.read(course / "autograded" / "wrong" / lab / f"{lab}.ipynb", as_version=4)
    release = nbformat.read(course / "release" / lab / f"{lab}.ipynb", as_version=4)
    first_check = check_cells(release)[0]
    assert autograded.cells[first_check].source == release.cells[first_check].source != TAMPERED


def test_grading_runs_every_cell_down_to_the_last_check_and_says_it_ran_none_below(graded):
    course, lab = graded
    release = nbformat.read(course / "release" / lab / f"{lab}.ipynb", as_version=4)
    assert NOT_GRADED_TAG not in str([cell.metadata for cell in release.cells])  # a student's Run All runs them all
    for student in ("right", "wrong"):
        autograded = nbformat.read(course / "autograded" / student / lab / f"{lab}.ipynb", as_version=4)
        last = check_cells(autograded)[-1]
        code = [(index, cell) for index, cell in enumerate(autograded.cells) if cell.cell_type == "code"]
        assert all(cell.execution_count is not None for index, cell in code if index <= last), student
        below = [cell for index, cell in code if index > last]
        assert below and all(cell.execution_count is None for cell in below), student
        assert [[output.get("text") for output in cell.outputs] for cell in below] == [[NOT_RUN]] + [
            [NOT_RUN_AGAIN]] * (len(below) - 1), student


def test_a_tag_a_student_puts_on_a_cell_cannot_skip_it_and_only_the_cells_below_the_last_graded_one_are_skipped():
    cells = [nbformat.v4.new_code_cell("setup()"),
             nbformat.v4.new_code_cell("answer = 1", metadata={"nbgrader": {"solution": True}}),
             nbformat.v4.new_code_cell("check(answer)", metadata={"nbgrader": {"grade": True},
                                                                  "tags": [NOT_GRADED_TAG]}),
             nbformat.v4.new_markdown_cell("What you saw"),
             nbformat.v4.new_code_cell("sweep()", outputs=[nbformat.v4.new_output("stream", text="old\n")]),
             nbformat.v4.new_code_cell("plot()", metadata={"tags": ["slow"]})]
    nb, _ = GradingRun()(nbformat.v4.new_notebook(cells=cells), {})  # as nbconvert calls it
    assert [cell.metadata.get("tags") for cell in nb.cells] == [None, None, [], None, [NOT_GRADED_TAG],
                                                                ["slow", NOT_GRADED_TAG]]
    assert [[output.text for output in cell.outputs] for cell in nb.cells[4:]] == [[NOT_RUN], [NOT_RUN_AGAIN]]


def test_the_feedback_shows_each_failure_as_the_course_s_one_line_message(graded):
    course, lab = graded
    feedback = (course / "feedback" / "wrong" / lab / f"{lab}.html").read_text()
    assert "div.output_subarea pre { white-space: pre-wrap;" in feedback  # the message wraps: read whole, not scrolled
    page = html.unescape(re.sub(r"<[^>]+>", "", feedback))
    autograded = nbformat.read(course / "autograded" / "wrong" / lab / f"{lab}.ipynb", as_version=4)
    first, *others = check_cells(autograded)
    failures = [[output for output in autograded.cells[index].outputs if output.output_type == "error"]
                for index in (first, *others)]
    assert all(len(errors) == 1 and errors[0].ename == "CheckFailed" and len(errors[0].traceback) == 1
               for errors in failures), "each check fails with one CheckFailed line"
    wrong, *missing = (errors[0].traceback[0] for errors in failures)
    assert "missing" not in wrong and all("The answer is missing" in line for line in missing)
    for line in (wrong, *missing):
        assert line in page, line
    for index in exercise_cells(autograded)[1:]:  # the exercises left as released
        [unwritten] = [output for output in autograded.cells[index].outputs if output.output_type == "error"]
        assert unwritten.traceback[0].startswith("The answer is missing") and "Graded as missing" in unwritten.traceback[0]
        assert "did not run" not in unwritten.traceback[0]  # autograde runs every cell


def test_an_exercise_cell_keeps_its_hints_above_the_region_nbgrader_clears():
    source = ("def f(x):\n    ### BEGIN SOLUTION\n    # HINT: square it\n    #       then add one\n"
              "    return x * x + 1\n    ### END SOLUTION\n\n\nprint(f(2))")
    course = course_cell_source(source)
    lines = course.splitlines()
    assert lines.index("    # HINT: square it") < lines.index("    ### BEGIN SOLUTION") < lines.index("    return x * x + 1")
    assert lines.index("    ### END SOLUTION") < lines.index("stop_unless_written(f)") < lines.index("print(f(2))")
    assert course.startswith("# Run All stops in this cell")


def test_every_lab_s_guard_is_outside_the_regions_nbgrader_clears(tmp_path):
    """A guard inside a solution region would be cleared with it, and the release's Run All would not stop at
    the exercise."""
    for path in write_course(tmp_path):
        nb = nbformat.read(path, as_version=4)
        for index in exercise_cells(nb):
            inside, guards = False, 0
            for line in nb.cells[index].source.splitlines():
                inside = (inside or line.strip() == "### BEGIN SOLUTION") and line.strip() != "### END SOLUTION"
                if line.startswith("stop_unless_written("):
                    assert not inside, f"{path.name}, cell {index}: the guard is inside a solution region"
                    guards += 1
            assert guards == 1, f"{path.name}, cell {index}"
