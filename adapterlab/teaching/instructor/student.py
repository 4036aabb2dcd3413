"""Student copies of the labs: every solution replaced by a stub, every output that gives it away cleared.

The labs mark a solution the way nbgrader does::

    def forward(self, h):
        ### BEGIN SOLUTION
        # HINT: the residual carries h through untouched
        return h + self.up(self.act(self.down(h)))
        ### END SOLUTION

(a `# HINT:` comment may also stand right above the BEGIN marker, and a long hint goes on in
comment lines indented under its text), and the student copy keeps the cell but not the answer::

    def forward(self, h):
        # HINT: the residual carries h through untouched
        raise NotImplementedError("Exercise: write your answer here. Hint: The residual carries h through untouched.")

In the copy the stub raises :class:`AnswerMissing`, a NotImplementedError that Jupyter shows as one
line ("The answer is missing …") instead of a traceback, and the cell imports it first. Right after the
functions and classes that hold stubs, the cell calls :func:`stop_unless_written` on them, so that Run All
stops at the exercise itself, saying which answer is unwritten, that the cells below did not run, and how
to go on from there, instead of stopping later, at a cell that only uses the answer.

An answer can also leak through an output, so the copy clears the outputs of the exercise cells,
of every cell that calls a self-check (its ✔ line prints the right result), of every cell tagged
`answer`, of every later cell that uses what an exercise defines (its output is the instructor's
solution at work), and of every code cell between a prediction's question and its lesson (the result that
reveals the answer), whatever its tags; the lesson itself is folded in the lab (a `<details>` block
whose summary is "What this teaches"), so it stays closed until the student opens it; a prediction cell gets its empty answer
back and loses the phrases that state its answer (`ANSWER_PHRASES` in the question's metadata, which a
student can open). Speaker notes (markdown cells of slide type `notes`, which name the answers) are left out, and a
widget's saved output, which shows only its text form before the cell runs, becomes a one-line hint.
Every other cell, its outputs and all metadata stay as they are, so students see the same lab their
instructor ran.

Copies are written so that students can rebuild them at any time (`python3 run.py lab --student`):
nothing is written over the instructor's notebooks, a broken lab stops the run before any file is
written, each file appears whole or not at all, and a copy the student has edited is never lost —
it stays as it is while its lab is unchanged, and is kept beside the new copy when the lab changes,
even when JupyterLab saves it while the copies are being written. Two notebooks whose copies would
share a file name are refused, naming both.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from . import labfiles
from .start_page import START_PAGE, start_page
from .labfiles import LabNotFoundError, find_labs

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
HINT = re.compile(r"^\s*#\s*HINT:\s*(?P<hint>.*?)\s*$")
#: A hint's next line: a comment indented under the hint's text (one space after `#` is an ordinary comment).
HINT_MORE = re.compile(r"^\s*#\s{2,}(?P<more>\S.*?)\s*$")
GENERIC_HINT = "replace this line with your code, run the cell, then run the check below it"
#: A check call seen in text, for a cell that is not Python even after IPython's own rewriting.
CHECK_CALL_TEXT = re.compile(r"\bcheck_\w*\s*\(")
PREDICTION_ANSWER = re.compile(r"""^(?P<left>\s*my_prediction\s*=\s*)(?P<quote>["']).*?(?P=quote)""", re.M)
#: The markdown cell that ends a prediction: what its result teaches.
LESSON = "<details><summary>What this teaches</summary>"
QUESTION = "**Predict.**"
WIDGET = "application/vnd.jupyter.widget-view+json"
#: What a widget's output shows in the copy until the cell is run (its saved text form says nothing useful).
WIDGET_HINT = "(run this cell to show the interactive panel)"
#: The line a student copy puts above the stubs of an exercise cell.
STUB_IMPORT = (
    "# Run All stops in this cell until your answer replaces each `raise AnswerMissing` line\n"
    "from adapterlab.student import AnswerMissing, stop_unless_written"
)
#: How to go on once an exercise is written: Run All stopped there, so nothing below it ran.
GO_ON = "The cells below it did not run: once it is written, use Run → Run Selected Cell and All Below."
#: Set by the nbgrader course's configuration (:mod:`.course`) while it grades: every cell then runs, so the
#: message says what grading did instead of how to go on.
GRADING_ENV = "ADAPTERLAB_GRADING"
GRADED = "Graded as missing: the checks that use it score no points."
#: A prediction question's metadata, ``{"adapterlab": {"answer_phrases": [...]}}``: the phrases that state its
#: answer, which no cell before the question may contain (tests/test_predictions.py).
ANSWER_PHRASES = ("adapterlab", "answer_phrases")
#: Where the copies remember what they last wrote, to tell a student's edits from an older build.
RECORD = ".student-copies.json"


class AnswerMissing(NotImplementedError):
    """What an unwritten exercise raises in a student copy: Jupyter shows it as one line, not a traceback,
    naming the exercise (`exercise`, where known), saying that the cells below did not run and how to go on."""

    def __init__(self, message: str = "", exercise: str = ""):
        super().__init__(message)
        self.exercise = exercise

    def _render_traceback_(self) -> list[str]:  # IPython's hook for an exception's own short display
        what = f"{self.exercise} is not written yet" if self.exercise else "this cell's exercise is not written yet"
        hint = str(self).removeprefix("Exercise: write your answer here. ").strip()
        go_on = GRADED if os.environ.get(GRADING_ENV) else GO_ON
        return [
            f"The answer is missing: {what}; write it in this cell in place of each `raise AnswerMissing(...)` "
            f"line. {hint + ' ' if hint else ''}{go_on}"
        ]


def stop_unless_written(*answers) -> None:
    """Raise :class:`AnswerMissing` naming every function or class in `answers` that still holds its stub.

    The student copy of an exercise cell calls it after the definitions, so that Run All stops at the
    exercise (which only defines them) rather than at the first cell that calls them.
    """
    unwritten = [answer.__name__ for answer in answers if _holds_stub(answer)]
    if unwritten:
        raise AnswerMissing(exercise=" and ".join(f"`{name}`" for name in unwritten))


def _holds_stub(answer) -> bool:
    """Whether a function, or any function of a class, still names AnswerMissing (its stub's raise)."""
    functions = [answer] if callable(answer) and not isinstance(answer, type) else list(vars(answer).values())
    codes = [getattr(inspect.unwrap(getattr(f, "__func__", f)), "__code__", None) for f in functions]
    while codes:
        code = codes.pop()
        if code is None:
            continue
        if AnswerMissing.__name__ in code.co_names:
            return True
        codes += [const for const in code.co_consts if inspect.iscode(const)]
    return False


class SolutionMarkerError(ValueError):
    """A BEGIN SOLUTION without its END, or the other way round."""


class StudentCopyError(Exception):
    """The copies cannot be made; the message says why and what to do, in one line."""

    exit_code = 1


class RefusedOutput(StudentCopyError):
    """An output folder that would overwrite the instructor's notebooks (a usage error)."""

    exit_code = 2


class BrokenNotebookError(StudentCopyError):
    """A lab that is not a readable notebook, or whose solution markers do not pair up."""


class UnwritableOutput(StudentCopyError):
    """An output folder that cannot be created or written to."""


class SameCopyName(StudentCopyError):
    """Two notebooks whose copies would have one file name (a usage error): one would silently replace the other."""

    exit_code = 2


def stub_solutions(source: str, where: str = "cell", error: str = "NotImplementedError") -> str:
    """`source` with each solution region replaced by its hints and a `raise NotImplementedError`
    (or `raise <error>(...)`, for an exception class the cell imports).

    The stub takes the indentation of the BEGIN marker, so a region inside a function body
    stays inside it. `where` names the cell in error messages.
    """
    kept: list[str] = []
    region: tuple[str, list[str]] | None = None  # (indentation, its lines) while inside a solution
    lines = source.splitlines()
    for number, line in enumerate(lines, start=1):
        marker = line.strip()
        if marker == BEGIN:
            if region is not None:
                raise SolutionMarkerError(f"{where}, line {number}: {BEGIN} inside another solution; add {END} before it")
            region = (line[: len(line) - len(line.lstrip())], [])
        elif marker == END:
            if region is None:
                raise SolutionMarkerError(f"{where}, line {number}: {END} without a {BEGIN} before it")
            indent, inside = region
            shown, hints = hints_in(inside)
            kept += [f"{indent}{line.strip()}" for line in shown]
            hint = " ".join(_as_sentence(hint) for hint in hints or _hints_above(kept)) or GENERIC_HINT
            kept.append(f"{indent}raise {error}({f'Exercise: write your answer here. Hint: {hint}'!r})")
            region = None
        elif region is not None:
            region[1].append(line)
        else:
            kept.append(line)
    if region is not None:
        raise SolutionMarkerError(f"{where}: {BEGIN} is never closed; add {END} after the solution")
    return "\n".join(kept) + ("\n" if source.endswith("\n") else "")


def hints_in(lines: list[str]) -> tuple[list[str], list[str]]:
    """(the hint lines among `lines`, each hint's text with its continuation lines joined)."""
    shown: list[str] = []
    hints: list[str] = []
    going_on = False  # whether the line before was part of a hint
    for line in lines:
        match, more = HINT.match(line), HINT_MORE.match(line)
        if match and match["hint"]:
            shown.append(line)
            hints.append(match["hint"])
            going_on = True
        elif going_on and more:
            shown.append(line)
            hints[-1] += f" {more['more']}"
        else:
            going_on = False
    return shown, hints


def _as_sentence(hint: str) -> str:
    """A hint as a sentence of its own, so that two hints joined in one line read as two."""
    hint = hint[:1].upper() + hint[1:]
    return hint if hint.endswith((".", "?", "!")) else hint + "."


def _hints_above(lines: list[str]) -> list[str]:
    """The `# HINT:` comments right above a solution (a hint may also be written there)."""
    start = len(lines)
    while start and (HINT.match(lines[start - 1]) or HINT_MORE.match(lines[start - 1])):
        start -= 1
    return hints_in(lines[start:])[1]


def is_exercise(cell) -> bool:
    """A code cell holding at least one solution region."""
    return cell.cell_type == "code" and any(line.strip() == BEGIN for line in cell.source.splitlines())


def calls_check(source: str) -> bool:
    """Whether code calls a self-check: `check_fold(...)`, `checks.check_fold(...)`, `checks_training.check_mcc(...)`.

    The source is read as Python, after IPython turns `%magic` and `!shell` lines into calls (the
    code a magic such as `%time` runs is read in turn), so a check named in a comment or a string
    does not count; a cell that is still not Python is searched as text, which errs on the side of
    clearing its output.
    """
    tree = _python(source)
    if tree is None:
        return bool(CHECK_CALL_TEXT.search(source))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called_name(node.func).startswith("check_"):
            return True
        code = _magic_code(node)
        if code is not None and calls_check(code):
            return True
    return False


def _magic_code(node: ast.AST) -> str | None:
    """The code a `%magic` or `%%magic` line runs: IPython's rewriting hands it over as a string."""
    if isinstance(node, ast.Call) and _called_name(node.func) in ("run_line_magic", "run_cell_magic") and node.args:
        code = node.args[-1]
        if isinstance(code, ast.Constant) and isinstance(code.value, str):
            return code.value
    return None


def _python(source: str) -> ast.Module | None:
    """A cell as Python, after IPython turns `%magic` and `!shell` lines into calls; None when it is not Python."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return ast.parse(TransformerManager().transform_cell(source))
    except SyntaxError:
        return None


def defined_names(source: str) -> set[str]:
    """The functions and classes a cell defines at its top level (an exercise's answers)."""
    tree = _python(source)
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in tree.body if isinstance(node, kinds)} if tree else set()


def uses_any(source: str, names: set[str]) -> bool:
    """Whether a cell reads one of `names`; a cell that is not Python is searched as text."""
    tree = _python(source)
    if tree is None:
        return any(re.search(rf"\b{re.escape(name)}\b", source) for name in names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in names:
            return True
        code = _magic_code(node)
        if code is not None and uses_any(code, names):
            return True
    return False


def _called_name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def tags_of(cell) -> list[str]:
    return cell.metadata.get("tags", [])


def is_notes(cell) -> bool:
    """A speaker-notes cell (slide type `notes`): for the instructor's deck only."""
    return cell.metadata.get("slideshow", {}).get("slide_type") == "notes"


def is_question(cell) -> bool:
    """The markdown cell that asks a prediction."""
    return cell.cell_type == "markdown" and ("prediction" in tags_of(cell) or cell.source.lstrip().startswith(QUESTION))


def before_reveal(cells) -> set[int]:
    """Indexes of the code cells between each prediction's question and its lesson (a `LESSON` block):
    their outputs are the answer. Without a lesson cell the span ends at the next markdown cell after the
    student's answer cell."""
    hidden: set[int] = set()
    for start, cell in enumerate(cells):
        if not is_question(cell):
            continue
        rest = cells[start + 1:]
        lesson = next((k for k, later in enumerate(rest) if later.cell_type == "markdown"
                       and later.source.lstrip().startswith(LESSON)), None)
        if lesson is None or any(is_question(later) for later in rest[:lesson]):
            lesson = next((k for k, later in enumerate(rest) if k > 1 and later.cell_type == "markdown"), len(rest))
        hidden |= {start + 1 + k for k in range(lesson) if rest[k].cell_type == "code"}
    return hidden


def _quiet_widgets(cell) -> None:
    """A widget output without its live model shows only its text form (`VBox(children=…`): a hint instead."""
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        if WIDGET in data and re.match(r"^\w+\(children=", "".join(data.get("text/plain", ""))):
            data["text/plain"] = WIDGET_HINT


def _drop_answer_phrases(cell) -> None:
    """A question's answer phrases stay in the instructor's lab: a student can open a cell's metadata."""
    ours = cell.metadata.get(ANSWER_PHRASES[0])
    if isinstance(ours, dict):
        ours.pop(ANSWER_PHRASES[1], None)
        if not ours:
            del cell.metadata[ANSWER_PHRASES[0]]


def _stub_cell(source: str, where: str) -> str:
    """An exercise cell's student version: AnswerMissing imported at the top, a stub in each solution, and
    `stop_unless_written(...)` right after the last definition that holds a stub."""
    lines = stub_solutions(source, where=where, error="AnswerMissing").split("\n")
    return guarded(lines, lambda node: any(_raises_missing(inner) for inner in ast.walk(node)))


def guarded(lines: list[str], holds_answer) -> str:
    """An exercise cell's ``lines`` with AnswerMissing imported at the top and ``stop_unless_written(...)``
    right after the last top-level definition for which ``holds_answer(node)`` is true, so that Run All stops at
    the exercise while its answer is unwritten (student copies and the nbgrader course alike)."""
    tree = _python("\n".join(lines))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    answers = [node for node in (tree.body if tree else []) if isinstance(node, kinds) and holds_answer(node)]
    if answers:
        guard = f"stop_unless_written({', '.join(node.name for node in answers)})"
        at = answers[-1].end_lineno
        while at < len(lines) and lines[at][:1] in (" ", "\t") and lines[at].lstrip().startswith("#"):
            at += 1  # the definition's own trailing comments, an END SOLUTION marker among them, stay in it
        lines[at:at] = ["", "", guard]
    return f"{STUB_IMPORT}\n\n" + "\n".join(lines)


def _raises_missing(node: ast.AST) -> bool:
    """`raise AnswerMissing(...)`: a stub."""
    return (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
            and _called_name(node.exc.func) == AnswerMissing.__name__)


def student_notebook(nb, name: str = "notebook"):
    """The student version of `nb` (changed in place and returned): stubs in, give-away outputs and
    speaker notes out."""
    hidden = before_reveal(nb.cells)
    answers: set[str] = set()  # what the exercises so far define: the instructor's solutions
    for index, cell in enumerate(nb.cells):
        _drop_answer_phrases(cell)
        if cell.cell_type != "code":
            continue
        where = f"{name}, cell {index}"
        stub_solutions(cell.source, where=where)  # rejects a stray END in any cell
        exercise, prediction = is_exercise(cell), "prediction" in tags_of(cell)
        uses_answer = bool(answers) and uses_any(cell.source, answers)
        if exercise:
            answers |= defined_names(cell.source)
            cell.source = _stub_cell(cell.source, where)
        if prediction:
            cell.source = PREDICTION_ANSWER.sub(r'\g<left>""', cell.source)
        if exercise or prediction or uses_answer or index in hidden or "answer" in tags_of(cell) or calls_check(cell.source):
            cell.outputs = []
            cell.execution_count = None
        _quiet_widgets(cell)
    nb.cells = [cell for cell in nb.cells if not is_notes(cell)]
    return nb


# --------------------------------------------------------------------------------------------------
# Writing the copies
# --------------------------------------------------------------------------------------------------

NEW, UP_TO_DATE, YOURS, UPDATED, REPLACED = "new", "up to date", "yours", "updated", "replaced"


@dataclass(frozen=True)
class StudentCopy:
    """One student copy and what this run did to it; `kept` is where a student's edited copy was moved."""

    path: Path
    status: str
    kept: Path | None = None

    def describe(self) -> str:
        return {
            NEW: "written",
            UP_TO_DATE: "up to date",
            YOURS: "your edited copy, left as it is (the lab has not changed)",
            UPDATED: "updated (the lab changed)",
            REPLACED: f"written afresh from the lab; the copy that was here (your edits) is kept as {self.kept}",
        }[self.status]


def make_student_copies(labs: list[str] | None = None, out_dir: Path | str = "build/student") -> list[StudentCopy]:
    """Write the student copy of the named labs (all when None) into `out_dir`; say what happened to each.
    The whole course also gets its start page (:mod:`.start_page`), written and kept the way a copy is.

    Every lab is read and stubbed before anything is written, so a broken one stops the run with
    nothing changed. The command-line entry is `python -m adapterlab student`; `python3 run.py lab
    --student` calls it before opening the copies.
    """
    notebooks = list(dict.fromkeys(path.resolve() for path in find_labs(labs)))  # a lab named twice is one lab
    out_dir = Path(out_dir)
    _refuse_same_names(notebooks, out_dir)
    _refuse_instructor_files(notebooks, out_dir)
    texts = {notebook.name: student_text(notebook) for notebook in notebooks}
    if not labs:  # the whole course: its start page too, kept like a copy (a student's notes in it are theirs)
        texts[START_PAGE] = start_page(notebooks)
    return [copy for copy in _write_copies(texts, out_dir) if copy.path.name != START_PAGE]


def student_text(notebook: Path) -> str:
    """The student copy of one notebook file, as the text to write."""
    shown = _shown(notebook)
    try:
        nb = nbformat.read(notebook, as_version=4)
        nbformat.validate(nb)
    except OSError as error:
        raise BrokenNotebookError(f"cannot read {shown} ({error.strerror or error}): check the file exists and is readable") from error
    except (ValueError, TypeError, KeyError, AttributeError, nbformat.ValidationError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:120]
        raise BrokenNotebookError(
            f"{shown} is not a valid notebook ({reason}): restore it from git or re-save it from JupyterLab"
        ) from error
    try:
        student_notebook(nb, name=str(shown))
    except SolutionMarkerError as error:
        raise BrokenNotebookError(str(error)) from error
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def _shown(path: Path) -> Path:
    """`path` relative to the working folder where it lies below it (messages stay short)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def _refuse_instructor_files(notebooks: list[Path], out_dir: Path) -> None:
    """Stop before a copy could land on a source notebook: its folder, the labs folder or the file itself."""
    target = out_dir.resolve()
    labs = labfiles.LABS_DIR.resolve()
    if target == labs or labs in target.parents or target in {notebook.resolve().parent for notebook in notebooks}:
        raise RefusedOutput(
            f"--out {out_dir} would put the student copies beside the instructor notebooks (they hold the solutions); "
            "choose another folder, e.g. --out build/student"
        )
    for notebook in notebooks:
        copy = out_dir / notebook.name
        if copy.exists() and os.path.samefile(copy, notebook):
            raise RefusedOutput(
                f"{copy} is the instructor notebook {notebook.name} itself; choose another folder, e.g. --out build/student"
            )


def _refuse_same_names(notebooks: list[Path], out_dir: Path) -> None:
    """Stop before two different notebooks are copied to one file name (the second would replace the first)."""
    first: dict[str, Path] = {}
    for notebook in notebooks:
        other = first.setdefault(notebook.name, notebook)
        if other != notebook:
            raise SameCopyName(
                f"{_shown(other)} and {_shown(notebook)} would both be copied to {out_dir / notebook.name}: "
                "make their copies in two runs, each with its own --out DIR"
            )


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _digest_on_disk(path: Path) -> str | None:
    """The digest of the file at `path`, or None where there is none."""
    try:
        return _digest(path.read_bytes())
    except FileNotFoundError:
        return None


def _read_record(out_dir: Path) -> dict[str, str]:
    """Digest of the copy last written, per file name; empty when unknown (then every difference counts as an edit)."""
    try:
        record = json.loads((out_dir / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _status(current: str | None, fresh: str, recorded: str | None) -> str:
    """What to do with one copy, from the digests of the one on disk (None: no file), the fresh copy and the one
    last written."""
    if current is None:
        return NEW
    if current == fresh:
        return UP_TO_DATE
    if recorded == fresh:
        return YOURS  # the lab is as it was when this copy was written: the difference is the student's work
    if recorded == current:
        return UPDATED  # the lab changed and the student never touched the copy
    return REPLACED  # the lab changed and so did the copy (or nothing is known about it): keep the student's


def _kept_name(copy: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    kept, n = copy.with_name(f"{copy.stem}.mine-{stamp}{copy.suffix}"), 1
    while kept.exists():
        kept, n = copy.with_name(f"{copy.stem}.mine-{stamp}-{n}{copy.suffix}"), n + 1
    return kept


def _stage(out_dir: Path, name: str, text: str) -> Path:
    """Write `text` to a hidden temporary file in `out_dir`, to be renamed into place once all are written."""
    handle, temporary = tempfile.mkstemp(dir=out_dir, prefix=f".{name}.", suffix=".tmp")
    try:
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes it private (0600); a copy is an ordinary file
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as file:
            handle = None
            file.write(text)
    except BaseException:
        if handle is not None:
            os.close(handle)
        Path(temporary).unlink(missing_ok=True)  # a full disk must not leave a hidden .tmp behind
        raise
    return Path(temporary)


def _umask() -> int:
    """The process's umask (reading it means setting it, so it is put back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_copies(texts: dict[str, str], out_dir: Path) -> list[StudentCopy]:
    staged: dict[Path, Path] = {}  # final path -> temporary file
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        record = _read_record(out_dir)
        planned = []  # (copy, status, digest of the file there when the status was taken)
        for name, text in texts.items():
            fresh, seen = _digest(text.encode("utf-8")), _digest_on_disk(out_dir / name)
            status = _status(seen, fresh, record.get(name))
            planned.append((out_dir / name, status, seen))
            if status in (NEW, UPDATED, REPLACED):
                staged[out_dir / name] = _stage(out_dir, name, text)
            record[name] = fresh
        staged[out_dir / RECORD] = _stage(out_dir, RECORD, json.dumps(record, indent=1, sort_keys=True) + "\n")
        copies = [_put_in_place(copy, staged[copy], status, seen) if copy in staged else StudentCopy(copy, status)
                  for copy, status, seen in planned]
        os.replace(staged[out_dir / RECORD], out_dir / RECORD)
    except OSError as error:
        for temporary in staged.values():
            temporary.unlink(missing_ok=True)
        raise UnwritableOutput(
            f"cannot write the student copies to {out_dir} ({error.strerror or error}): "
            "choose a folder you can write to with --out DIR"
        ) from error
    return copies


def _put_in_place(copy: Path, temporary: Path, status: str, seen: str | None) -> StudentCopy:
    """Move a fresh copy into place without ever writing over what the student saved, even a moment ago.

    Whatever file is at `copy` is first moved aside in one rename and only then read: the copy last written,
    untouched since the status was taken (`seen`, status UPDATED), is deleted; anything else (the student's
    edits, or a JupyterLab autosave that landed after the status was taken) is kept beside the new copy.
    The new copy is then linked in only where no file is, so an autosave in between is kept too.
    """
    kept = None
    while True:
        if os.path.lexists(copy):
            aside = _kept_name(copy)
            os.replace(copy, aside)
            if status == UPDATED and kept is None and _digest_on_disk(aside) == seen:
                aside.unlink()  # the copy as it was written, nothing of the student's in it
            else:
                kept = aside
        try:
            os.link(temporary, copy)
        except FileExistsError:
            continue  # an autosave landed after the move: it goes aside too
        except OSError:  # a file system without hard links: replace what was moved aside just now
            os.replace(temporary, copy)
            break
        temporary.unlink()
        break
    return StudentCopy(copy, REPLACED if kept else status, kept)


def student_command(args) -> int:
    """`adapterlab student [LAB ...] [--out DIR]`: exit 0 when written, 1 when a lab or the folder is broken, 2 on usage errors."""
    try:
        copies = make_student_copies(args.labs or None, args.out)
    except LabNotFoundError as error:
        print(f"adapterlab student: {error}", file=sys.stderr)
        return 2
    except StudentCopyError as error:
        print(f"adapterlab student: {error}", file=sys.stderr)
        return error.exit_code
    for copy in copies:
        if copy.status != UP_TO_DATE:
            print(f"{copy.path}: {copy.describe()}")
    unchanged = sum(copy.status == UP_TO_DATE for copy in copies)
    print(f"{len(copies)} student cop{'y' if len(copies) == 1 else 'ies'} in {Path(args.out)} ({unchanged} already up to date)")
    return 0
