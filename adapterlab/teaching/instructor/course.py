"""An nbgrader course made from the labs, so that an instructor can release, collect and autograde them.

nbgrader (https://nbgrader.readthedocs.io) reads a course folder: ``nbgrader_config.py`` and one source
notebook per assignment in ``source/<assignment>/``. Its cell metadata says what each cell is, and this module
writes it from what the labs already mark:

* an exercise cell (a ``### BEGIN SOLUTION`` region, nbgrader's own marker) is a *solution* cell, which the
  student edits. Its hints move above the region, so that they survive nbgrader's clearing, and nbgrader
  replaces the region with the course's stub (:data:`CODE_STUB`), which raises the student copies'
  ``AnswerMissing``: Jupyter shows it as one line, not a traceback. As in the student copies, the cell imports
  it first and calls ``stop_unless_written`` after the definitions, so that Run All stops at the exercise;
* a self-check cell (one that calls a ``check_*`` function) is a locked *autograded test* cell worth
  :data:`POINTS`: it passes on a right answer and raises ``CheckFailed``, naming the mistake, on a wrong one.
  The checks compare with the package's own reference, never with the notebook's solution, so grading needs
  no solution at run time;
* a prediction cell (a code cell tagged ``prediction``) is the student's to edit and is not graded (its
  question is locked);
* every other cell is locked: nbgrader restores its source from the gradebook before grading, so an edit
  of the course's own code cannot change a grade.

The source is the student copy (:func:`~.student.student_notebook`: no speaker notes, no output or metadata that
gives an answer away) with the instructor's solutions inside nbgrader's markers; the rest of the outputs stay, so the
release shows students the lab their instructor ran (the course's configuration turns nbgrader's own
clearing of all outputs off). Grading runs each lab from the top down to its last exercise or check (the cells
below it cannot change a grade: :mod:`.grading_run`) in the ``ci`` profile (the offline stand-in on a few hundred
rows of the real data): the checks test the code a student wrote, not how far a model trained, and the training
cells the profile shortens are the ones grading does not need.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import nbformat

from .labfiles import LabNotFoundError, find_labs
from .student import BEGIN, END, calls_check, guarded, hints_in, is_exercise, is_notes, student_notebook, tags_of

#: Points of one self-check: each check tests one exercise's idea, so each is worth the same. An instructor
#: changes them in the source notebook's cell metadata (nbgrader's "Create Assignment" toolbar), then
#: generates the release again.
POINTS = 1
#: What nbgrader writes in place of each solution region (indented as the region was).
CODE_STUB = 'raise AnswerMissing("Exercise: write your answer here.")'
#: The profile grading runs the labs in (see the module docstring).
GRADING_PROFILE = "ci"
#: Where the feedback page's template is (nbgrader's, with outputs wrapped), for the course's nbgrader_config.py.
FEEDBACK_TEMPLATES = str(Path(__file__).parent / "templates")
#: The only tag a released cell keeps: it marks the cells that are the student's to edit besides the exercises.
STUDENT_TAGS = ("prediction",)
SCHEMA_VERSION = 3

CONFIG = f'''"""nbgrader's configuration for the adapterlab course (written by `python -m adapterlab course`)."""

import os

import nbgrader
from nbgrader.converters import Autograde

from adapterlab.teaching.instructor.course import FEEDBACK_TEMPLATES
from adapterlab.teaching.instructor.grading_run import NOT_GRADED_TAG, GradingRun

c = get_config()  # noqa: F821 (nbgrader defines it)
c.CourseDirectory.course_id = "adapterlab"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
# Collected and released files go through this folder (nbgrader's exchange); on a shared server, point it at
# a folder every student can write to.
c.Exchange.root = os.path.join(c.CourseDirectory.root, "exchange")
# The stub a student sees in place of each solution: the course's one-line message, not a traceback.
c.ClearSolutions.code_stub = {{"python": {CODE_STUB!r}}}
# The source keeps the outputs that give nothing away (figures, printed results); the release shows them.
c.ClearOutput.enabled = False
# Grading runs each lab from the top down to its last exercise or check in the {GRADING_PROFILE} profile, offline:
# a minute or so a lab (a profile set in the shell, ADAPTERLAB_PROFILE, wins). The cells below the last exercise
# or check cannot change a grade; they are not run, and say so in the feedback. ADAPTERLAB_GRADING makes an
# unwritten exercise's message fit a graded run, which goes on past it.
os.environ.setdefault("ADAPTERLAB_PROFILE", "{GRADING_PROFILE}")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ["ADAPTERLAB_GRADING"] = "1"
c.Execute.timeout = 1800
c.Execute.skip_cells_with_tag = NOT_GRADED_TAG
c.Autograde.autograde_preprocessors = [GradingRun, *Autograde.class_traits()["autograde_preprocessors"].default()]
# The feedback is nbgrader's page with its outputs wrapped, so that a check's one-line message is read whole.
c.HTMLExporter.template_name = "course_feedback"
c.HTMLExporter.template_file = "course_feedback.html.j2"  # it extends nbgrader's index.html.j2
c.HTMLExporter.extra_template_basedirs = [
    FEEDBACK_TEMPLATES,
    os.path.join(os.path.dirname(nbgrader.__file__), "server_extensions", "formgrader", "templates"),
]
'''


class CourseError(Exception):
    """A course folder that cannot be written: the message says why and what to do."""


def assignment_name(lab: Path) -> str:
    """The assignment's name in nbgrader: the lab's file name without .ipynb (``03_collapse_to_lora``)."""
    return lab.stem


def course_cell_source(source: str) -> str:
    """An exercise cell as the course's source holds it: each region's hints above its BEGIN marker (nbgrader
    clears the region), AnswerMissing imported first and ``stop_unless_written`` after the last definition
    that holds a solution, as in the student copies."""
    lines, kept, region = source.split("\n"), [], None
    for line in lines:
        marker = line.strip()
        if marker == BEGIN:
            region = (line, [])
        elif marker == END and region is not None:
            begin, inside = region
            indent = begin[: len(begin) - len(begin.lstrip())]
            shown, _ = hints_in(inside)
            kept += [f"{indent}{hint.strip()}" for hint in shown]
            kept += [begin, *[line for line in inside if line not in shown], line]
            region = None
        elif region is not None:
            region[1].append(line)
        else:
            kept.append(line)
    return guarded(kept, lambda node: any(kept[number - 1].strip() == BEGIN
                                          for number in range(node.lineno, node.end_lineno + 1)))


def _grader(cell_id: str, *, solution: bool = False, grade: bool = False, locked: bool = False, points=None) -> dict:
    metadata = {"grade": grade, "grade_id": cell_id, "locked": locked, "schema_version": SCHEMA_VERSION,
                "solution": solution}
    if grade:
        metadata["points"] = points
    return metadata


def course_notebook(nb, name: str):
    """The nbgrader source notebook of a lab (a new notebook; ``nb`` is left as it was): the student copy's
    cells (give-away outputs cleared, predictions' answers and answer phrases gone), except that each exercise
    holds the instructor's solution inside nbgrader's markers."""
    instructor = copy.deepcopy(nb)
    instructor.cells = [cell for cell in instructor.cells if not is_notes(cell)]
    course = student_notebook(copy.deepcopy(instructor), name)
    exercises = checks = 0
    for index, (cell, solved) in enumerate(zip(course.cells, instructor.cells)):
        if is_exercise(solved):
            exercises += 1
            cell.source = course_cell_source(solved.source)
            cell.metadata["nbgrader"] = _grader(f"exercise-{exercises}", solution=True)
        elif cell.cell_type == "code" and calls_check(cell.source):
            checks += 1
            cell.metadata["nbgrader"] = _grader(f"check-{checks}", grade=True, locked=True, points=POINTS)
        elif not (cell.cell_type == "code" and "prediction" in tags_of(cell)):  # a prediction is the student's
            cell.metadata["nbgrader"] = _grader(f"cell-{index}", locked=True)
        # the tags of the course's own tooling mean nothing to a student ("answer" on a locked cell misleads)
        kept = [tag for tag in tags_of(cell) if tag in STUDENT_TAGS]
        if kept:
            cell.metadata["tags"] = kept
        else:
            cell.metadata.pop("tags", None)
    return course


def write_course(out: Path | str, labs: list[str] | None = None) -> list[Path]:
    """Write the course folder ``out``: its nbgrader_config.py and ``source/<lab>/<lab>.ipynb`` for each lab
    with an exercise (every lab by default). Returns the source notebooks written."""
    out = Path(out)
    chosen = [lab for lab in find_labs(labs) if any(is_exercise(cell) for cell in nbformat.read(lab, as_version=4).cells)]
    if not chosen:
        raise CourseError(f"none of {', '.join(labs or [])} has an exercise to grade; name labs 1-11")
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "nbgrader_config.py").write_text(CONFIG, encoding="utf-8")
        written = []
        for lab in chosen:
            folder = out / "source" / assignment_name(lab)
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / lab.name
            nbformat.write(course_notebook(nbformat.read(lab, as_version=4), lab.name), path)
            written.append(path)
    except OSError as error:
        raise CourseError(f"cannot write the course into {out} ({error.strerror or error}); pass --out a folder "
                          "you can write to") from None
    return written


def course_command(args) -> int:
    """`adapterlab course DIR [LAB ...]`: exit 0 when written, 2 when a lab is unknown or the folder unwritable."""
    try:
        written = write_course(args.out, args.labs or None)
    except (LabNotFoundError, CourseError) as error:
        print(f"adapterlab course: {error}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    print(f"{len(written)} assignments in {Path(args.out) / 'source'}; next, in {args.out}: "
          f"nbgrader generate_assignment {assignment_name(written[0].parent)}")
    return 0
