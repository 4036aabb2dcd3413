"""Student copies: solutions become NotImplementedError stubs, and the labs' self-checks notice.

The first tests run the stubbing on small hand-written cells. The last one executes each lab that
has exercises (CI profile), once as the student copy and once as the instructor's notebook, up to
its last self-check cell, and reads the outputs.
"""

from __future__ import annotations

import argparse
import copy
import re
import textwrap

import nbformat
import pytest
from nbclient import NotebookClient

from adapterlab import checks
from adapterlab.labfiles import LabNotFoundError, all_labs
from adapterlab.student import (
    GENERIC_HINT,
    SolutionMarkerError,
    make_student_copies,
    stub_solutions,
    student_command,
    student_notebook,
)

EXERCISE = textwrap.dedent(
    """\
    import torch

    def double(x):
        y = x
        ### BEGIN SOLUTION
        # HINT: multiply by two
        y = 2 * x
        ### END SOLUTION
        return y
    """
)


def run_source(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "<cell>", "exec"), namespace)
    return namespace


def test_stub_raises_with_the_hint_and_keeps_the_code_around_it():
    stubbed = stub_solutions(EXERCISE)
    assert "2 * x" not in stubbed
    assert "BEGIN SOLUTION" not in stubbed and "END SOLUTION" not in stubbed
    # everything outside the region is untouched, line for line
    assert stubbed.splitlines()[:4] == EXERCISE.splitlines()[:4]
    assert stubbed.splitlines()[-1] == "    return y"
    double = run_source(stubbed)["double"]  # the cell itself still runs: the stub sits in the function body
    with pytest.raises(NotImplementedError, match="multiply by two"):
        double(3)
    assert run_source(EXERCISE)["double"](3) == 6


def test_stub_without_a_hint_gets_the_generic_one():
    source = "### BEGIN SOLUTION\nanswer = 42\n### END SOLUTION\nprint(answer)\n"
    stubbed = stub_solutions(source)
    with pytest.raises(NotImplementedError, match=re.escape(GENERIC_HINT)):
        run_source(stubbed)
    assert stubbed.endswith("print(answer)\n")


def test_a_hint_right_above_the_solution_is_used_and_kept_once():
    source = "def f():\n    # HINT: return forty-two\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION\n"
    stubbed = stub_solutions(source)
    assert stubbed.count("# HINT: return forty-two") == 1
    with pytest.raises(NotImplementedError, match="return forty-two"):
        run_source(stubbed)["f"]()


def test_every_region_of_a_cell_is_stubbed():
    source = "a = 1\n### BEGIN SOLUTION\nb = 2\n### END SOLUTION\nc = 3\n  ### BEGIN SOLUTION\n  # HINT: second\n  d = 4\n  ### END SOLUTION\n"
    stubbed = stub_solutions(source)
    assert stubbed.count("raise NotImplementedError") == 2
    assert "b = 2" not in stubbed and "d = 4" not in stubbed
    assert "a = 1" in stubbed and "c = 3" in stubbed
    assert "  # HINT: second\n  raise NotImplementedError(" in stubbed


@pytest.mark.parametrize(
    "source, complaint",
    [
        ("### BEGIN SOLUTION\nx = 1\n", "never closed"),
        ("x = 1\n### END SOLUTION\n", "without a ### BEGIN SOLUTION"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", "inside another solution"),
    ],
)
def test_unbalanced_markers_are_reported_with_the_cell(source, complaint):
    with pytest.raises(SolutionMarkerError, match=complaint) as error:
        stub_solutions(source, where="lab.ipynb, cell 7")
    assert "lab.ipynb, cell 7" in str(error.value)


def small_lab():
    nb = nbformat.v4.new_notebook(metadata={"title": "a lab"})
    intro = nbformat.v4.new_code_cell("print('hello')", execution_count=1, metadata={"slideshow": {"slide_type": "slide"}})
    intro.outputs = [nbformat.v4.new_output("stream", name="stdout", text="hello\n")]
    exercise = nbformat.v4.new_code_cell(EXERCISE, execution_count=2, metadata={"tags": ["exercise"]})
    exercise.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "6"}, execution_count=2)]
    check = nbformat.v4.new_code_cell("print(double(3) == 6)", execution_count=3)
    check.outputs = [nbformat.v4.new_output("stream", name="stdout", text="True\n")]
    nb.cells = [nbformat.v4.new_markdown_cell("# Lab\n### BEGIN SOLUTION is text here"), intro, exercise, check]
    return nb


def test_student_notebook_clears_only_the_exercise_outputs():
    original = small_lab()
    student = student_notebook(copy.deepcopy(original))
    assert student.metadata == original.metadata
    for index in (0, 1, 3):
        assert student.cells[index] == original.cells[index]
    exercise = student.cells[2]
    assert exercise.outputs == [] and exercise.execution_count is None
    assert exercise.metadata == original.cells[2].metadata
    assert "raise NotImplementedError" in exercise.source


def test_make_student_copies_writes_copies_and_leaves_the_lab_alone(tmp_path):
    lab = tmp_path / "01_small.ipynb"
    nbformat.write(small_lab(), lab)
    before = lab.read_bytes()
    [written] = make_student_copies([str(lab)], tmp_path / "student")
    assert written == tmp_path / "student" / "01_small.ipynb"
    assert lab.read_bytes() == before
    assert "NotImplementedError" in nbformat.read(written, as_version=4).cells[2].source


def test_unknown_lab_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(LabNotFoundError, match="'99_nope' not found"):
        make_student_copies(["99_nope"], tmp_path)
    assert student_command(argparse.Namespace(labs=["99_nope"], out=str(tmp_path))) == 2
    assert "99_nope" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# The real labs, executed
# --------------------------------------------------------------------------------------------------

CHECK_FUNCTIONS = sorted(name for name in dir(checks) if name.startswith("check_") and callable(getattr(checks, name)))
CHECK_CALL = re.compile(r"\b(" + "|".join(CHECK_FUNCTIONS) + r")\s*\(")


def is_check(cell) -> bool:
    """A code cell that calls one of adapterlab.checks' check_* functions."""
    return cell.cell_type == "code" and bool(CHECK_CALL.search(cell.source))


def has_solution(cell) -> bool:
    return cell.cell_type == "code" and "### BEGIN SOLUTION" in cell.source


def labs_with_exercises():
    return [lab for lab in all_labs() if any(has_solution(c) for c in nbformat.read(lab, as_version=4).cells)]


def exercises_and_checks(nb) -> list[tuple[int, int]]:
    """(exercise cell, first check cell after it) for every exercise."""
    pairs = []
    for index, cell in enumerate(nb.cells):
        if has_solution(cell):
            following = [j for j in range(index + 1, len(nb.cells)) if is_check(nb.cells[j])]
            assert following, f"exercise cell {index} has no self-check cell (adapterlab.checks) after it"
            pairs.append((index, following[0]))
    return pairs


def execute_until(nb, last: int, cwd) -> list:
    """Run cells 0..last in a fresh kernel, errors allowed; return the executed cells."""
    part = copy.deepcopy(nb)
    part.cells = part.cells[: last + 1]
    NotebookClient(part, timeout=900, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": str(cwd)}}).execute()
    return part.cells


def errors(cell) -> list:
    return [o for o in cell.get("outputs", []) if o.output_type == "error"]


def stdout(cell) -> str:
    return "".join(o.text for o in cell.get("outputs", []) if o.output_type == "stream")


@pytest.mark.parametrize("lab", labs_with_exercises(), ids=lambda lab: lab.stem)
def test_student_copy_fails_plainly_and_instructor_copy_passes(lab, tmp_path, monkeypatch):
    monkeypatch.setenv("ADAPTERLAB_PROFILE", "ci")
    instructor = nbformat.read(lab, as_version=4)
    pairs = exercises_and_checks(instructor)
    last = max(check for _, check in pairs)
    [student_file] = make_student_copies([str(lab)], tmp_path)
    student = nbformat.read(student_file, as_version=4)

    ran = execute_until(student, last, lab.parent)
    for exercise, check in pairs:
        stub_errors = [e.ename for e in errors(ran[exercise])]
        assert stub_errors in ([], ["NotImplementedError"]), f"exercise cell {exercise} failed with {stub_errors}"
        [failure] = errors(ran[check]) or [None]
        assert failure is not None, f"check cell {check} passed in the student copy: {stdout(ran[check])!r}"
        assert failure.ename == "CheckFailed", f"check cell {check} crashed instead of reporting: {failure.ename}: {failure.evalue}"
        assert "missing" in failure.evalue, failure.evalue
        assert stub_errors == ["NotImplementedError"] or "NotImplementedError" in failure.evalue, failure.evalue

    ran = execute_until(instructor, last, lab.parent)
    for index, cell in enumerate(ran):
        assert not errors(cell), f"cell {index} of the instructor copy failed: {errors(cell)[0].ename}: {errors(cell)[0].evalue}"
    for _, check in pairs:
        assert "✔" in stdout(ran[check]), f"check cell {check} printed no ✔: {stdout(ran[check])!r}"
