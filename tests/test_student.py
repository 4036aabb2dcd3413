"""Student copies: solutions become NotImplementedError stubs, nothing gives an answer away, and the labs' self-checks notice.

The first tests run the stubbing and the output clearing on small hand-written notebooks, then
the writing of copies: what it refuses, what it does with a broken lab or folder, and how it keeps
a student's edited copy. `run.py lab --student` is tried with JupyterLab replaced by a recorder.
Then every real lab's student copy is scanned for anything the instructor's notebook would give
away, with the secrets read from the instructor's notebook itself. The last tests execute each lab
that has exercises (CI profile) as the student copy: up to its last self-check cell, reading the
outputs (the instructor's self-checks are compared by nbval, which a test here makes sure of), and as
Run All does, up to the first failing cell, which must be the first exercise saying how to go on. (Lab 0
has no exercise: its copy is the lab, which nbval runs to the end.)
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager
from nbclient import NotebookClient

from adapterlab import labfiles, student
from adapterlab.labfiles import LabNotFoundError, all_labs
from adapterlab.student import (
    GENERIC_HINT,
    RECORD,
    SolutionMarkerError,
    calls_check,
    make_student_copies,
    stub_solutions,
    student_command,
    student_notebook,
)

ROOT = Path(__file__).resolve().parents[1]

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
    with pytest.raises(NotImplementedError, match="Multiply by two"):
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
    with pytest.raises(NotImplementedError, match="Return forty-two"):
        run_source(stubbed)["f"]()


def test_two_hints_read_as_two_sentences_in_the_stub_s_message():
    source = ("def f():\n    ### BEGIN SOLUTION\n    # HINT: picture the figure: which point wins?\n"
              "    # HINT: before you run the check, try a tie\n    return 42\n    ### END SOLUTION\n")
    with pytest.raises(NotImplementedError) as raised:
        run_source(stub_solutions(source))["f"]()
    assert str(raised.value).endswith("Hint: Picture the figure: which point wins? Before you run the check, try a tie.")


def test_a_long_hint_goes_on_in_comments_indented_under_it_and_other_comments_stay_secret():
    source = (
        "def f():\n"
        "    ### BEGIN SOLUTION\n"
        "    # HINT: think of the answer\n"
        "    #       to everything\n"
        "    # the answer is forty-two\n"
        "    #       as the book says\n"
        "    return 42\n"
        "    ### END SOLUTION\n"
    )
    stubbed = stub_solutions(source)
    assert "    # HINT: think of the answer\n    #       to everything\n    raise" in stubbed
    assert "forty-two" not in stubbed and "book" not in stubbed
    with pytest.raises(NotImplementedError, match="Think of the answer to everything"):
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


# --------------------------------------------------------------------------------------------------
# Which outputs a student copy clears
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "checks.check_fold(my_fold)",
        "check_fold(my_fold)",
        "checks_training.check_mcc(my_mcc)",
        "from adapterlab import checks as c\nresult = c.check_param_count(\n    my_count,\n)",
        "%time checks.check_fold(my_fold)",  # IPython magics: not Python until IPython rewrites them
        "%%capture shown\nchecks.check_fold(my_fold)",
        "if True:\n    [adapterlab.checks.check_adapter_class(MyAdapter)]",
    ],
)
def test_a_check_call_is_recognised_however_it_is_written(source):
    assert calls_check(source)


@pytest.mark.parametrize(
    "source",
    [
        "# now run checks.check_fold(my_fold) below",
        "print('call check_fold(my_fold) next')",
        "def check_mine(x):\n    return x",
        "recheck_all(x)",
        "from adapterlab.checks import check_fold",
        "%time train(model)",
        "!echo check_fold(x)",
    ],
)
def test_a_check_only_named_in_a_comment_string_or_definition_is_not_a_call(source):
    assert not calls_check(source)


def code_cell(source, output_text, tags=None, slide="-"):
    metadata = {"slideshow": {"slide_type": slide}, **({"tags": tags} if tags else {})}
    cell = nbformat.v4.new_code_cell(source, execution_count=1, metadata=metadata)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=output_text)]
    return cell


def small_lab():
    """A lab with a plain cell, an exercise, its check, an answer-tagged result, a prediction with its untagged
    result and its lesson, a later cell and a speaker-notes cell."""
    nb = nbformat.v4.new_notebook(metadata={"title": "a lab"})
    exercise = nbformat.v4.new_code_cell(EXERCISE + "print(double(3))\n", execution_count=2, metadata={"tags": ["exercise"]})
    exercise.outputs = [nbformat.v4.new_output("stream", name="stdout", text="6\n")]
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Lab\n### BEGIN SOLUTION is text here"),
        code_cell("print('hello')", "hello\n", slide="slide"),
        exercise,
        code_cell("checks.check_double(double)", "✔ double(3) = 6\n"),
        code_cell("print(double(21))", "42\n", tags=["answer"]),
        nbformat.v4.new_markdown_cell("**Predict.** Is double(0) zero?\n\n(a) yes (b) no", metadata={"tags": ["prediction"]}),
        code_cell('my_prediction = "a"  # write "a", "b" or "c", then run the cells below', "", tags=["prediction"], slide="skip"),
        code_cell("print(double(0) == 0)", "True\n", slide="fragment"),  # the reveal, with no tag at all
        nbformat.v4.new_markdown_cell(f"{student.LESSON}\n\nZero stays zero.\n\n</details>", metadata={"slideshow": {"slide_type": "fragment"}}),
        code_cell("# the check_double(double) above ran\nprint(torch.ones(2).sum())", "tensor(2.)\n"),
        nbformat.v4.new_markdown_cell("Answer (a): point at True.", metadata={"slideshow": {"slide_type": "notes"}}),
    ]
    return nb


def test_student_notebook_clears_every_output_that_gives_the_answer_away():
    original = small_lab()
    copy_ = student_notebook(copy.deepcopy(original))
    assert copy_.metadata == original.metadata
    assert len(copy_.cells) == len(original.cells) - 1 and "Answer (" not in nbformat.writes(copy_)  # the notes are out
    for index in (0, 1, 5, 8, 9):  # markdown, a plain cell, the question, the lesson, a cell that only mentions a check
        assert copy_.cells[index] == original.cells[index]
    for index in (2, 3, 4, 6, 7):  # the exercise, its check, the answer-tagged cell, the prediction answer, the reveal
        assert copy_.cells[index].outputs == [] and copy_.cells[index].execution_count is None
        assert copy_.cells[index].metadata == original.cells[index].metadata
    assert "raise AnswerMissing" in copy_.cells[2].source and "2 * x" not in copy_.cells[2].source
    assert copy_.cells[3].source == original.cells[3].source and copy_.cells[4].source == original.cells[4].source
    assert copy_.cells[6].source == 'my_prediction = ""  # write "a", "b" or "c", then run the cells below'
    assert copy_.cells[7].source == original.cells[7].source


def test_a_later_cell_that_runs_the_instructor_s_answer_loses_its_output():
    nb = nbformat.v4.new_notebook()
    exercise = nbformat.v4.new_code_cell(EXERCISE)
    nb.cells = [
        exercise,
        code_cell("print('double(21) is 42:', double(21) == 42)", "double(21) is 42: True\n"),
        code_cell("%time print(double(1))", "2\n"),
        code_cell("doubled = 'double'  # only the word\nprint(doubled)", "double\n"),
    ]
    copied = student_notebook(copy.deepcopy(nb))
    assert copied.cells[1].outputs == [] and copied.cells[1].execution_count is None
    assert copied.cells[2].outputs == []
    assert copied.cells[3].outputs == nb.cells[3].outputs


# --------------------------------------------------------------------------------------------------
# Writing copies: refusals, broken input, atomic writes, a student's own edits
# --------------------------------------------------------------------------------------------------


def write_lab(folder: Path, name: str = "01_small.ipynb", nb=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb or small_lab(), folder / name)
    return folder / name


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def labs_dir(tmp_path, monkeypatch):
    """A labs/ folder of two small labs standing in for the repository's, so no test can touch the real ones."""
    folder = tmp_path / "repo" / "labs"
    write_lab(folder, "01_small.ipynb")
    write_lab(folder, "02_other.ipynb")
    monkeypatch.setattr(labfiles, "LABS_DIR", folder)
    return folder


def student_run(labs, out, capsys) -> tuple[int, str, str]:
    code = student_command(argparse.Namespace(labs=labs, out=str(out)))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_make_student_copies_writes_copies_and_leaves_the_lab_alone(tmp_path):
    lab = write_lab(tmp_path / "src")
    before = lab.read_bytes()
    [written] = make_student_copies([str(lab)], tmp_path / "student")
    assert written.path == tmp_path / "student" / "01_small.ipynb" and written.status == student.NEW
    assert lab.read_bytes() == before
    assert "raise AnswerMissing(" in nbformat.read(written.path, as_version=4).cells[2].source
    assert sorted(os.listdir(tmp_path / "student")) == sorted([RECORD, "01_small.ipynb"])  # no temporary file left


def test_the_command_lists_what_it_wrote_and_counts_the_rest(tmp_path, capsys):
    labs = [str(write_lab(tmp_path / "src", name)) for name in ("01_a.ipynb", "02_b.ipynb")]
    out = tmp_path / "out"
    code, printed, _ = student_run(labs, out, capsys)
    assert code == 0
    assert printed.splitlines() == [f"{out / '01_a.ipynb'}: written", f"{out / '02_b.ipynb'}: written",
                                    f"2 student copies in {out} (0 already up to date)"]
    edit(out / "02_b.ipynb", "mine")
    code, printed, _ = student_run(labs, out, capsys)
    assert printed.splitlines() == [f"{out / '02_b.ipynb'}: your edited copy, left as it is (the lab has not changed)",
                                    f"2 student copies in {out} (1 already up to date)"]


def test_unknown_lab_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(LabNotFoundError, match="'99_nope' not found"):
        make_student_copies(["99_nope"], tmp_path)
    code, _, err = student_run(["99_nope"], tmp_path, capsys)
    assert code == 2 and "99_nope" in err


@pytest.mark.parametrize(
    "out",
    [
        lambda labs: labs,
        lambda labs: labs / ".." / "labs",
        lambda labs: labs / "student",
    ],
    ids=["labs", "labs-by-another-path", "inside-labs"],
)
def test_copies_are_never_written_into_the_instructor_labs_folder(labs_dir, out, capsys):
    before = files_under(labs_dir)
    code, printed, err = student_run([], out(labs_dir), capsys)
    assert code == 2 and printed == ""
    assert err.count("\n") == 1 and "instructor notebooks" in err and "--out" in err
    assert files_under(labs_dir) == before


def test_the_command_line_refuses_the_labs_folder_with_exit_2(labs_dir, capsys):
    from adapterlab.cli import main

    before = files_under(labs_dir)
    assert main(["student", "01", "--out", str(labs_dir)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert files_under(labs_dir) == before


def test_a_link_to_the_labs_folder_is_refused_too(labs_dir, tmp_path, capsys):
    (tmp_path / "link").symlink_to(labs_dir, target_is_directory=True)
    before = files_under(labs_dir)
    assert student_run(["01"], tmp_path / "link", capsys)[0] == 2
    assert files_under(labs_dir) == before


def test_the_folder_of_a_notebook_given_by_path_is_refused(tmp_path, capsys):
    lab = write_lab(tmp_path / "course")
    before = lab.read_bytes()
    code, _, err = student_run([str(lab)], tmp_path / "course", capsys)
    assert code == 2 and err.count("\n") == 1
    assert lab.read_bytes() == before


def test_an_output_that_is_the_source_file_itself_is_refused(tmp_path, capsys):
    lab = write_lab(tmp_path / "src")
    (tmp_path / "out").mkdir()
    os.link(lab, tmp_path / "out" / lab.name)  # the same file under another folder
    before = lab.read_bytes()
    code, _, err = student_run([str(lab)], tmp_path / "out", capsys)
    assert code == 2 and "instructor notebook 01_small.ipynb itself" in err and err.count("\n") == 1
    assert lab.read_bytes() == before and os.listdir(tmp_path / "out") == [lab.name]


def unbalanced_lab():
    nb = small_lab()
    nb.cells[2].source = "### BEGIN SOLUTION\ny = 2\n"
    return nb


@pytest.mark.parametrize(
    "content, fix",
    [
        ("{ this is not json", "not a valid notebook"),
        ("[1, 2]", "not a valid notebook"),
        ('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code"}]}', "not a valid notebook"),
        (nbformat.writes(unbalanced_lab()), "add ### END SOLUTION"),
    ],
    ids=["not-json", "json-but-no-notebook", "a-cell-without-source", "unbalanced-markers"],
)
def test_a_broken_lab_is_named_with_its_fix_and_nothing_is_written(tmp_path, capsys, content, fix):
    good = write_lab(tmp_path / "src", "01_good.ipynb")
    broken = tmp_path / "src" / "02_broken.ipynb"
    broken.write_text(content)
    code, printed, err = student_run([str(good), str(broken)], tmp_path / "out", capsys)
    assert code == 1 and printed == ""
    assert err.count("\n") == 1 and "02_broken.ipynb" in err and fix in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()  # the good lab was not written either


def test_an_output_folder_that_cannot_be_made_is_one_line(tmp_path, capsys):
    lab = write_lab(tmp_path / "src")
    (tmp_path / "a_file").write_text("not a folder")
    for out in (tmp_path / "a_file", tmp_path / "a_file" / "student"):
        code, printed, err = student_run([str(lab)], out, capsys)
        assert code == 1 and printed == ""
        assert err.count("\n") == 1 and str(out) in err and "--out" in err
    assert (tmp_path / "a_file").read_text() == "not a folder"


def test_a_failure_while_writing_leaves_no_copy_and_no_temporary_file(tmp_path, monkeypatch, capsys):
    labs = [write_lab(tmp_path / "src", f"0{n}_lab.ipynb") for n in (1, 2, 3)]
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("the student's own file")
    real_stage, calls = student._stage, []

    def stage_then_fail(*args):
        calls.append(args[1])
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_stage(*args)

    monkeypatch.setattr(student, "_stage", stage_then_fail)
    code, _, err = student_run([str(lab) for lab in labs], out, capsys)
    assert code == 1 and "No space left on device" in err and err.count("\n") == 1
    assert files_under(out) == {"notes.txt": b"the student's own file"}


def test_copies_are_ordinary_files_that_follow_the_umask(tmp_path):
    lab = write_lab(tmp_path / "src")
    for mask, mode in ((0o022, 0o644), (0o027, 0o640)):
        previous = os.umask(mask)
        try:
            [written] = make_student_copies([str(lab)], tmp_path / f"out-{mask:o}")
        finally:
            os.umask(previous)
        assert written.path.stat().st_mode & 0o777 == mode
        assert (written.path.parent / RECORD).stat().st_mode & 0o777 == mode


def test_a_full_disk_halfway_through_a_file_leaves_no_hidden_temporary(tmp_path, monkeypatch, capsys):
    lab = write_lab(tmp_path / "src")
    out = tmp_path / "out"
    out.mkdir()
    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, file):
            self.file = file

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def write(self, text):
            self.file.write(text[:10])
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(student.os, "fdopen", lambda *a, **k: FullDisk(real_fdopen(*a, **k)))
    code, _, err = student_run([str(lab)], out, capsys)
    monkeypatch.undo()
    assert code == 1 and "No space left on device" in err
    assert os.listdir(out) == []  # not even a hidden .tmp


def test_a_stub_shows_one_plain_line_in_jupyter_not_a_traceback():
    source = "def f():\n    ### BEGIN SOLUTION\n    # HINT: think of forty-two\n    return 42\n    ### END SOLUTION\n"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    stubbed = student_notebook(nb).cells[0].source
    with pytest.raises(NotImplementedError) as stopped:  # Run All stops at the exercise cell itself
        run_source(stubbed)  # the copy's cell imports what its stub raises
    [line] = stopped.value._render_traceback_()  # what IPython shows instead of the traceback
    assert line.startswith("The answer is missing: `f` is not written yet") and "Run Selected Cell and All Below" in line

    namespace = run_source(stubbed.replace("stop_unless_written(f)", ""))
    with pytest.raises(NotImplementedError) as caught:  # calling the stub itself, as a check does
        namespace["f"]()
    assert type(caught.value).__name__ == "AnswerMissing"
    [line] = caught.value._render_traceback_()
    assert line.startswith("The answer is missing") and "Think of forty-two" in line

    namespace["f"] = lambda: 42  # written: the exercise no longer stops anything
    exec(compile("stop_unless_written(f)", "<cell>", "exec"), namespace)


def test_a_widget_s_saved_text_form_becomes_a_one_line_hint():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("panel = TrainingPanel('sst2')\npanel", execution_count=3)
    cell.outputs = [nbformat.v4.new_output("execute_result", execution_count=3, data={
        "application/vnd.jupyter.widget-view+json": {"model_id": "abc", "version_major": 2, "version_minor": 0},
        "text/plain": "VBox(children=(HBox(children=(Dropdown(description='placement', options=('houlsby',"})]
    nb.cells = [cell]
    [shown] = student_notebook(nb).cells[0].outputs
    assert shown.data["text/plain"] == student.WIDGET_HINT and "\n" not in student.WIDGET_HINT
    assert shown.data["application/vnd.jupyter.widget-view+json"]["model_id"] == "abc"  # runs as before


def edit(path: Path, text: str) -> None:
    nb = nbformat.read(path, as_version=4)
    nb.cells[2].source += f"\n# {text}\n"
    nbformat.write(nb, path)


def test_a_student_s_edited_copy_is_never_lost(tmp_path, capsys):
    lab = write_lab(tmp_path / "src")
    out = tmp_path / "out"
    [first] = make_student_copies([str(lab)], out)
    assert first.status == student.NEW

    [again] = make_student_copies([str(lab)], out)
    assert again.status == student.UP_TO_DATE

    edit(first.path, "my work in progress")
    mine = first.path.read_bytes()
    [kept] = make_student_copies([str(lab)], out)  # the lab has not changed: the student's copy stays as it is
    assert kept.status == student.YOURS and first.path.read_bytes() == mine

    edit(lab, "the instructor fixed a typo")  # the lab changed too: a fresh copy, and the student's beside it
    [replaced] = make_student_copies([str(lab)], out)
    assert replaced.status == student.REPLACED and replaced.kept.parent == out
    assert replaced.kept.read_bytes() == mine
    assert "fixed a typo" in first.path.read_text() and "my work in progress" not in first.path.read_text()
    assert str(replaced.kept) in replaced.describe()

    edit(lab, "and another")  # the student has not touched the new copy: it is simply updated
    [updated] = make_student_copies([str(lab)], out)
    assert updated.status == student.UPDATED and updated.kept is None
    assert "and another" in first.path.read_text()
    assert sorted(p.name for p in out.glob("*.ipynb")) == sorted([first.path.name, replaced.kept.name])


def test_an_autosave_after_the_status_is_taken_is_kept(tmp_path, monkeypatch):
    """JupyterLab saves the open copy between the status check (the copy untouched, so to be updated) and the
    replacement: the save is kept beside the new copy, not written over."""
    lab = write_lab(tmp_path / "src")
    out = tmp_path / "out"
    [first] = make_student_copies([str(lab)], out)
    edit(lab, "the instructor fixed a typo")
    real_stage = student._stage

    def stage_then_autosave(folder, name, text):
        staged = real_stage(folder, name, text)
        if name == lab.name:
            edit(first.path, "saved by JupyterLab just now")
        return staged

    monkeypatch.setattr(student, "_stage", stage_then_autosave)
    [result] = make_student_copies([str(lab)], out)
    assert result.status == student.REPLACED and result.kept is not None
    assert "saved by JupyterLab just now" in result.kept.read_text()
    assert "fixed a typo" in first.path.read_text() and "just now" not in first.path.read_text()


def test_an_autosave_while_the_new_copy_moves_in_is_kept(tmp_path, monkeypatch):
    """A save that lands after the old copy is moved aside and before the new one is in place is kept too."""
    lab = write_lab(tmp_path / "src")
    out = tmp_path / "out"
    [first] = make_student_copies([str(lab)], out)
    edit(lab, "the instructor fixed a typo")
    real_link, saves = os.link, []

    def autosave_then_link(source, target):
        if not saves:
            saves.append(Path(target).write_text("saved by JupyterLab in between\n"))
        return real_link(source, target)

    monkeypatch.setattr(student.os, "link", autosave_then_link)
    [result] = make_student_copies([str(lab)], out)
    monkeypatch.undo()
    assert result.status == student.REPLACED and result.kept.read_text() == "saved by JupyterLab in between\n"
    assert "fixed a typo" in first.path.read_text()
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == sorted([first.path.name, result.kept.name])


def test_two_notebooks_with_one_copy_name_are_refused_naming_both(tmp_path, capsys):
    one, other = write_lab(tmp_path / "a"), write_lab(tmp_path / "b")
    code, printed, err = student_run([str(one), str(other)], tmp_path / "out", capsys)
    assert code == 2 and printed == "" and err.count("\n") == 1
    assert "a/01_small.ipynb" in err and "b/01_small.ipynb" in err and "--out" in err
    assert not (tmp_path / "out").exists()
    [result] = make_student_copies([str(one), str(one)], tmp_path / "out")  # one lab named twice is one lab
    assert result.status == student.NEW


def test_a_copy_nothing_is_known_about_is_kept_when_it_differs(tmp_path):
    lab = write_lab(tmp_path / "src")
    out = tmp_path / "out"
    out.mkdir()
    (out / lab.name).write_text("a notebook the student made\n")
    [result] = make_student_copies([str(lab)], out)
    assert result.status == student.REPLACED
    assert result.kept.read_text() == "a notebook the student made\n"
    assert json.loads((out / RECORD).read_text()).keys() == {lab.name}


# --------------------------------------------------------------------------------------------------
# run.py: the student's command
# --------------------------------------------------------------------------------------------------


def load_run_py():
    spec = importlib.util.spec_from_file_location("run_py", ROOT / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_run_py_uses_only_the_standard_library():
    tree = ast.parse((ROOT / "run.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 0}
    assert imported - {"__future__"} <= sys.stdlib_module_names


@pytest.fixture
def run_py(tmp_path, monkeypatch):
    """run.py with the environment taken as ready and JupyterLab replaced by a recorder; the package runs for real."""
    run = load_run_py()
    monkeypatch.setattr(run, "ensure_environment", lambda *extras: None)
    monkeypatch.setattr(run, "venv_python", lambda: Path(sys.executable))
    monkeypatch.setattr(run, "STUDENT_DIR", tmp_path / "build" / "student")
    real_call, run.opened = subprocess.call, []

    def call(command, **kwargs):
        if command[1:3] == ["-m", "jupyter"]:
            run.opened.append(command[3:])
            return 0
        return real_call(command, **kwargs)

    monkeypatch.setattr(run.subprocess, "call", call)
    return run


def test_run_py_lab_student_writes_the_copies_and_opens_them(run_py, capsys):
    assert run_py.main(["lab", "--student", "--no-browser"]) == 0
    assert run_py.opened == [["lab", str(run_py.STUDENT_DIR), "--LabApp.default_url=/lab/tree/README.md", "--no-browser"]]
    assert (run_py.STUDENT_DIR / "README.md").read_text().startswith("# Adapter labs: start here")
    copies = sorted(p.name for p in run_py.STUDENT_DIR.glob("*.ipynb"))
    assert copies == [lab.name for lab in all_labs()]
    for lab in all_labs():
        assert "### BEGIN SOLUTION" not in (run_py.STUDENT_DIR / lab.name).read_text()

    edit(run_py.STUDENT_DIR / copies[1], "the student's answer")
    mine = (run_py.STUDENT_DIR / copies[1]).read_bytes()
    assert run_py.main(["lab", "--student"]) == 0  # a second start keeps the student's work
    kept = run_py.STUDENT_DIR.glob(f"{Path(copies[1]).stem}*.ipynb")  # beside a new copy, if the lab changed meanwhile
    assert mine in [path.read_bytes() for path in kept]


def test_run_py_lab_student_opens_the_page_a_student_names_instead_of_the_start_page(run_py):
    assert run_py.main(["lab", "--student", "--ServerApp.default_url=/lab/tree/03_collapse_to_lora.ipynb"]) == 0
    assert run_py.opened == [["lab", str(run_py.STUDENT_DIR), "--ServerApp.default_url=/lab/tree/03_collapse_to_lora.ipynb"]]


def test_run_py_lab_without_student_is_the_instructor_view(run_py):
    assert run_py.main(["lab"]) == 0
    assert run_py.opened == [["lab", str(ROOT / "labs")]]
    assert not run_py.STUDENT_DIR.exists()


def test_run_py_help_and_usage(run_py, capsys):
    assert run_py.main(["--help"]) == 0
    assert "lab --student" in capsys.readouterr().out
    assert run_py.main(["nonsense"]) == 2
    assert "lab --student" in capsys.readouterr().err


def test_readme_shows_students_their_copies_first():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"^\s+(python3 run\.py [^\n]*)$", readme, flags=re.M)
    assert commands[0].strip() == "python3 run.py lab --student"
    assert "python3 run.py lab" in [c.strip() for c in commands]


# --------------------------------------------------------------------------------------------------
# The real labs, scanned: the student copy gives nothing away
# --------------------------------------------------------------------------------------------------

#: A call of a check_ function on a line that is not a comment (independent of calls_check's parser).
CHECK_LINE = re.compile(r"^[^#\n]*\bcheck_\w+\s*\(", re.M)


def is_check(cell) -> bool:
    """A code cell that calls one of the self-checks' check_* functions."""
    return cell.cell_type == "code" and bool(CHECK_LINE.search(cell.source))


def has_solution(cell) -> bool:
    return cell.cell_type == "code" and "### BEGIN SOLUTION" in cell.source


def solution_regions(source: str) -> list[list[str]]:
    """The lines inside each BEGIN/END SOLUTION pair of a cell."""
    regions, inside = [], None
    for line in source.splitlines():
        if line.strip() == "### BEGIN SOLUTION":
            inside = []
        elif line.strip() == "### END SOLUTION":
            regions.append(inside)
            inside = None
        elif inside is not None:
            inside.append(line)
    return regions


def without_hints(region: list[str]) -> list[str]:
    """A solution's lines less its hints: `# HINT:` lines and the comment lines indented under them."""
    kept, in_hint = [], False
    for line in region:
        in_hint = line.strip().startswith("# HINT:") or (in_hint and re.match(r"\s*#\s{2,}\S", line) is not None)
        if not in_hint:
            kept.append(line)
    return kept


def secret_lines(nb) -> set[str]:
    """Solution lines (not hints, not blank) that the instructor's code shows nowhere outside a solution."""
    inside = {line.strip() for cell in nb.cells if has_solution(cell)
              for region in solution_regions(cell.source) for line in without_hints(region)}
    outside = set()
    for cell in nb.cells:
        if cell.cell_type == "code":
            region_lines = {line for region in solution_regions(cell.source) for line in region}
            outside |= {line.strip() for line in cell.source.splitlines() if line not in region_lines}
    return {line for line in inside - outside if line}


def output_lines(cell) -> list[str]:
    lines = []
    for output in cell.get("outputs", []):
        text = output.get("text") or "".join(output.get("data", {}).get("text/plain", "")) or output.get("evalue", "")
        lines += text.splitlines()
    return lines


def raises_missing(node) -> bool:
    """`raise AnswerMissing(...)`, the student copies' stub (a NotImplementedError shown as one line)."""
    return (
        isinstance(node, ast.Raise)
        and isinstance(node.exc, ast.Call)
        and getattr(node.exc.func, "id", None) == "AnswerMissing"
    )


@pytest.fixture(scope="module")
def student_copies(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    return {result.path.name: nbformat.read(result.path, as_version=4) for result in make_student_copies(None, out)}


def is_notes(cell) -> bool:
    return cell.metadata.get("slideshow", {}).get("slide_type") == "notes"


def without_notes(nb):
    """The instructor's notebook without its speaker notes: cell for cell what the copy holds."""
    nb = copy.deepcopy(nb)
    nb.cells = [cell for cell in nb.cells if not is_notes(cell)]
    return nb


def outputs_before_a_reveal(cells) -> list[int]:
    """Code cells with an output between a prediction's question and its folded What this teaches cell."""
    shown = []
    for start, cell in enumerate(cells):
        if cell.cell_type == "markdown" and cell.source.startswith("**Predict.**"):
            for index in range(start + 1, len(cells)):
                if cells[index].cell_type == "markdown" and cells[index].source.startswith("<details><summary>What this teaches</summary>"):
                    break
                if cells[index].cell_type == "code" and cells[index].get("outputs"):
                    shown.append(index)
    return shown


@pytest.mark.parametrize("lab", all_labs(), ids=lambda lab: lab.stem)
def test_the_student_copy_gives_nothing_away(lab, student_copies):
    instructor = without_notes(nbformat.read(lab, as_version=4))
    copy_ = student_copies[lab.name]
    assert len(copy_.cells) == len(instructor.cells)
    assert not [index for index, cell in enumerate(copy_.cells) if is_notes(cell)], "a speaker-notes cell is left"
    text = [index for index, cell in enumerate(copy_.cells)
            if "Answer (" in cell.source or "Answer (" in "\n".join(output_lines(cell))]
    assert not text, f"cells {text} say which answer is right"
    assert not outputs_before_a_reveal(copy_.cells), "an output under a prediction shows the result before its lesson"
    widgets = [line for cell in copy_.cells for line in output_lines(cell) if re.match(r"^\w+\(children=", line)]
    assert not widgets, f"a widget's raw text form is shown: {widgets[0][:60]}"

    copy_sources = {line.strip() for cell in copy_.cells for line in cell.source.splitlines()}
    survivors = secret_lines(instructor) & copy_sources
    assert not survivors, f"solution lines left in the student copy: {sorted(survivors)}"

    success_lines = {line for cell in instructor.cells if is_check(cell) for line in output_lines(cell) if line.startswith("✔")}
    for index, cell in enumerate(copy_.cells):
        shown = output_lines(cell)
        assert not success_lines & set(shown), f"cell {index} shows a check's ✔ line"
        if is_check(cell):
            assert not [line for line in shown if line.lstrip().startswith("✔")], f"check cell {index} keeps its ✔ line"
        if "answer" in cell.metadata.get("tags", []):
            assert cell.get("outputs") == [], f"cell {index} is tagged answer but keeps its output"

    for index, cell in enumerate(instructor.cells):
        if has_solution(cell):
            stubbed = copy_.cells[index]
            assert stubbed.outputs == [] and stubbed.execution_count is None
            python = TransformerManager().transform_cell(stubbed.source)  # IPython's own reading of %magic lines
            stubs = [node for node in ast.walk(ast.parse(python)) if raises_missing(node)]
            assert len(stubs) == len(solution_regions(cell.source)), f"exercise cell {index}: one stub per solution"


def bound_at_top_level(statements) -> set[str]:
    """Names the statements themselves bind (assignments, loops, with, definitions, imports), not those bound
    inside a comprehension or a function."""
    names = set()
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        else:
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For))
                       else [item.optional_vars for item in node.items if item.optional_vars]
                       if isinstance(node, ast.With) else [])
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


@pytest.mark.parametrize("lab", all_labs(), ids=lambda lab: lab.stem)
def test_no_cell_below_an_exercise_needs_what_its_guard_keeps_from_running(lab, student_copies):
    """In a graded run every cell runs, so a name bound after ``stop_unless_written`` in an unanswered exercise
    would fail later cells with a NameError instead of the exercise's one line: bind it above the guard."""
    cells = student_copies[lab.name].cells
    for index, cell in enumerate(cells):
        if cell.cell_type != "code" or "stop_unless_written(" not in cell.source:
            continue
        tree = ast.parse(TransformerManager().transform_cell(cell.source))
        guard = next(node.lineno for node in tree.body if "stop_unless_written(" in ast.unparse(node))
        kept_back = bound_at_top_level([node for node in tree.body if node.lineno > guard])
        for later in range(index + 1, len(cells)):
            if cells[later].cell_type != "code" or not kept_back:
                continue
            code = ast.parse(TransformerManager().transform_cell(cells[later].source))
            read = {n.id for n in ast.walk(code) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            needed = (read - bound_at_top_level(code.body)) & kept_back
            assert not needed, f"cell {later} reads {sorted(needed)}, bound after the guard of exercise cell {index}"
            kept_back -= bound_at_top_level(code.body)


# --------------------------------------------------------------------------------------------------
# The real labs, executed
# --------------------------------------------------------------------------------------------------


def labs_with_exercises():
    return [lab for lab in all_labs() if any(has_solution(c) for c in nbformat.read(lab, as_version=4).cells)]


def exercises_and_checks(nb) -> list[tuple[int, int]]:
    """(exercise cell, first check cell after it) for every exercise."""
    pairs = []
    for index, cell in enumerate(nb.cells):
        if has_solution(cell):
            following = [j for j in range(index + 1, len(nb.cells)) if is_check(nb.cells[j])]
            assert following, f"exercise cell {index} has no self-check cell after it"
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
def test_every_instructor_check_passes_and_is_compared_by_nbval(lab):
    nb = nbformat.read(lab, as_version=4)
    for _, check in exercises_and_checks(nb):
        cell = nb.cells[check]
        assert "nbval-check-output" in cell.metadata.get("tags", []), f"check cell {check} is not compared by nbval"
        assert "✔" in stdout(cell), f"check cell {check} of the committed lab printed no ✔: {stdout(cell)!r}"


_RAN: dict = {}  # lab -> its fresh student copy and the cells executed (errors allowed), once a session


def student_copy_run(lab, tmp_path_factory, monkeypatch, *, through: str = "last check"):
    """(the fresh student copy, its cells executed with errors allowed) in the CI profile, ``through`` its last
    check or its first exercise. The tests below read the same run: a cell that raised is one where Run All
    would have stopped. A run through the last check serves a test that needs only the first exercise."""
    monkeypatch.setenv("ADAPTERLAB_PROFILE", "ci")
    instructor = without_notes(nbformat.read(lab, as_version=4))  # cell for cell the copy
    pairs = exercises_and_checks(instructor)
    last = max(check for _, check in pairs) if through == "last check" else min(exercise for exercise, _ in pairs)
    if lab not in _RAN or len(_RAN[lab][1]) <= last:
        [result] = make_student_copies([str(lab)], tmp_path_factory.mktemp(lab.stem))
        student_copy = nbformat.read(result.path, as_version=4)
        _RAN[lab] = (student_copy, execute_until(student_copy, last, lab.parent))
    return _RAN[lab]


@pytest.mark.full  # runs each copy through its last check, training cells included: python3 run.py test --full
@pytest.mark.parametrize("lab", labs_with_exercises(), ids=lambda lab: lab.stem)
def test_student_copy_reports_every_answer_missing(lab, tmp_path_factory, monkeypatch):
    """Run the student copy up to its last check: every stubbed exercise makes its check say, in plain words,
    that the answer is missing. (The instructor copy's checks pass under nbval, which compares their ✔ lines.)"""
    pairs = exercises_and_checks(without_notes(nbformat.read(lab, as_version=4)))
    _, ran = student_copy_run(lab, tmp_path_factory, monkeypatch)
    for exercise, check in pairs:
        stub_errors = [e.ename for e in errors(ran[exercise])]
        assert stub_errors in ([], ["AnswerMissing"]), f"exercise cell {exercise} failed with {stub_errors}"
        for error in errors(ran[exercise]):  # one plain line, no traceback through the package
            assert len(error.traceback) == 1 and error.traceback[0].startswith("The answer is missing"), error.traceback
        [failure] = errors(ran[check]) or [None]
        assert failure is not None, f"check cell {check} passed in the student copy: {stdout(ran[check])!r}"
        assert failure.ename == "CheckFailed", f"check cell {check} crashed instead of reporting: {failure.ename}: {failure.evalue}"
        assert "missing" in failure.evalue, failure.evalue
        assert stub_errors == ["AnswerMissing"] or "NotImplementedError" in failure.evalue, failure.evalue


def unwritten_answers(source: str) -> list[str]:
    """The top-level functions and classes of an instructor's exercise cell that hold a solution, read as text."""
    blocks = re.split(r"^(?=\S)", source, flags=re.M)  # a block starts at each unindented line
    names = [re.match(r"(?:async\s+)?(?:def|class)\s+(\w+)", block) for block in blocks if "### BEGIN SOLUTION" in block]
    return [name[1] for name in names if name]


#: The labs whose Run All the default run makes: lab 1 (one exercise, a class) and lab 3 (two exercises, the
#: first a function). Every other lab's runs with --full (30-110 s each in the CI profile on 2 cores, the four
#: from lab 8 on training or timing models before their first exercise): the test below shows, for every lab,
#: that the cells before the first exercise are the instructor's own, which nbval runs in the same profile, and
#: the stub and its stop are written by one function for every lab (the tests above).
RUN_ALL_BY_DEFAULT = {"01_build_the_adapter", "03_collapse_to_lora"}


@pytest.mark.parametrize("lab", labs_with_exercises(), ids=lambda lab: lab.stem)
def test_the_copy_runs_the_instructor_s_own_cells_up_to_its_first_exercise(lab, student_copies):
    """Cell for cell, the student copy's code before its first exercise is the instructor's: what nbval runs of
    the instructor's lab is what Run All runs of the copy up to there."""
    instructor = without_notes(nbformat.read(lab, as_version=4))
    copy_ = student_copies[lab.name]
    first = next(index for index, cell in enumerate(copy_.cells) if "raise AnswerMissing(" in cell.source)
    assert has_solution(instructor.cells[first]), f"cell {first} of the copy is not the instructor's exercise cell"
    changed = [index for index in range(first) if copy_.cells[index].cell_type == "code"
               and copy_.cells[index].source != instructor.cells[index].source]
    assert not changed, f"cells {changed} before the first exercise differ from the instructor's"


@pytest.mark.parametrize("lab", [lab if lab.stem in RUN_ALL_BY_DEFAULT else pytest.param(lab, marks=pytest.mark.full)
                                 for lab in labs_with_exercises()], ids=lambda lab: lab.stem)
def test_run_all_stops_only_at_an_exercise_and_says_how_to_go_on(lab, tmp_path_factory, monkeypatch):
    """Run All on a fresh student copy (CI profile): the first cell that fails is the first exercise, and it says
    in one line which answer is missing, that the cells below did not run, and how to go on from there. (Read
    from the run above: Run All stops at the first cell that raises, so no cell before it may raise.)"""
    student_copy, ran = student_copy_run(lab, tmp_path_factory, monkeypatch, through="first exercise")
    first = next(index for index, cell in enumerate(student_copy.cells) if "raise AnswerMissing(" in cell.source)
    instructor = without_notes(nbformat.read(lab, as_version=4)).cells[first]
    assert has_solution(instructor), f"cell {first} of the copy is not the instructor's exercise cell"

    failed = [index for index, cell in enumerate(ran) if errors(cell)]
    assert failed and failed[0] == first, f"Run All stopped at cell {failed[0] if failed else None}, not at the " \
                                          f"exercise at cell {first}"
    [error] = errors(ran[first])
    [line] = error.traceback  # one line, no traceback
    assert line.startswith("The answer is missing"), line
    for name in unwritten_answers(instructor.source):
        assert f"`{name}`" in line, f"the message does not name {name}: {line}"
    assert "cells below it did not run" in line and "Run → Run Selected Cell and All Below" in line, line
