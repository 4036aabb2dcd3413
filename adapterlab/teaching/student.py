"""Student copies of the labs: every solution replaced by a stub, every output that gives it away cleared.

The labs mark a solution the way nbgrader does::

    def forward(self, h):
        ### BEGIN SOLUTION
        # HINT: the residual carries h through untouched
        return h + self.up(self.act(self.down(h)))
        ### END SOLUTION

(a `# HINT:` comment may also stand right above the BEGIN marker), and the student copy keeps
the cell but not the answer::

    def forward(self, h):
        # HINT: the residual carries h through untouched
        raise NotImplementedError("Exercise: write your answer here. Hint: the residual carries h through untouched")

In the copy the stub raises :class:`AnswerMissing`, a NotImplementedError that Jupyter shows as one
line ("The answer is missing …") instead of a traceback, and the cell imports it first.

An answer can also leak through an output, so the copy clears the outputs of the exercise cells,
of every cell that calls a self-check (its ✔ line prints the right result), of every cell tagged
`answer`, and of every code cell between a prediction's question and its "**What this teaches.**"
cell (the result that reveals the answer), whatever its tags; a prediction cell gets its empty answer
back. Speaker notes (markdown cells of slide type `notes`, which name the answers) are left out, and a
widget's saved output, which shows only its text form before the cell runs, becomes a one-line hint.
Every other cell, its outputs and all metadata stay as they are, so students see the same lab their
instructor ran.

Copies are written so that students can rebuild them at any time (`python3 run.py lab --student`):
nothing is written over the instructor's notebooks, a broken lab stops the run before any file is
written, each file appears whole or not at all, and a copy the student has edited is never lost —
it stays as it is while its lab is unchanged, and is kept beside the new copy when the lab changes.
"""

from __future__ import annotations

import ast
import hashlib
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
from .labfiles import LabNotFoundError, find_labs

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
HINT = re.compile(r"^\s*#\s*HINT:\s*(?P<hint>.*?)\s*$")
GENERIC_HINT = "replace this line with your code, run the cell, then run the check below it"
#: A check call seen in text, for a cell that is not Python even after IPython's own rewriting.
CHECK_CALL_TEXT = re.compile(r"\bcheck_\w*\s*\(")
PREDICTION_ANSWER = re.compile(r"""^(?P<left>\s*my_prediction\s*=\s*)(?P<quote>["']).*?(?P=quote)""", re.M)
#: The markdown cell that ends a prediction: what its result teaches.
LESSON = "**What this teaches.**"
QUESTION = "**Predict.**"
WIDGET = "application/vnd.jupyter.widget-view+json"
#: What a widget's output shows in the copy until the cell is run (its saved text form says nothing useful).
WIDGET_HINT = "(run this cell to show the interactive panel)"
#: The line a student copy puts above the stubs of an exercise cell.
STUB_IMPORT = "from adapterlab.student import AnswerMissing  # the stubs below raise it until you write your answer"
#: Where the copies remember what they last wrote, to tell a student's edits from an older build.
RECORD = ".student-copies.json"


class AnswerMissing(NotImplementedError):
    """What a stubbed exercise raises in a student copy: Jupyter shows it as one line, not a traceback."""

    def _render_traceback_(self) -> list[str]:  # IPython's hook for an exception's own short display
        hint = str(self).removeprefix("Exercise: write your answer here. ").strip()
        return [f"The answer is missing: write it in this cell in place of the `raise AnswerMissing(...)` line. {hint}".rstrip()]


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


def stub_solutions(source: str, where: str = "cell", error: str = "NotImplementedError") -> str:
    """`source` with each solution region replaced by its hints and a `raise NotImplementedError`
    (or `raise <error>(...)`, for an exception class the cell imports).

    The stub takes the indentation of the BEGIN marker, so a region inside a function body
    stays inside it. `where` names the cell in error messages.
    """
    kept: list[str] = []
    region: tuple[str, list[str]] | None = None  # (indentation, hints) while inside a solution
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
            indent, hints = region
            kept += [f"{indent}# HINT: {hint}" for hint in hints]
            hint = " ".join(hints or _hints_above(kept)) or GENERIC_HINT
            kept.append(f"{indent}raise {error}({f'Exercise: write your answer here. Hint: {hint}'!r})")
            region = None
        elif region is not None:
            match = HINT.match(line)
            if match and match["hint"]:
                region[1].append(match["hint"])
        else:
            kept.append(line)
    if region is not None:
        raise SolutionMarkerError(f"{where}: {BEGIN} is never closed; add {END} after the solution")
    return "\n".join(kept) + ("\n" if source.endswith("\n") else "")


def _hints_above(lines: list[str]) -> list[str]:
    """The `# HINT:` comments right above a solution (a hint may also be written there)."""
    hints = []
    for line in reversed(lines):
        match = HINT.match(line)
        if not match:
            break
        hints.insert(0, match["hint"])
    return [hint for hint in hints if hint]


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
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        tree = ast.parse(TransformerManager().transform_cell(source))
    except SyntaxError:
        return bool(CHECK_CALL_TEXT.search(source))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _called_name(node.func)
        if name.startswith("check_"):
            return True
        code = node.args[-1] if node.args else None
        if name in ("run_line_magic", "run_cell_magic") and isinstance(code, ast.Constant) and isinstance(code.value, str):
            if calls_check(code.value):
                return True
    return False


def _called_name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _tags(cell) -> list[str]:
    return cell.metadata.get("tags", [])


def is_notes(cell) -> bool:
    """A speaker-notes cell (slide type `notes`): for the instructor's deck only."""
    return cell.metadata.get("slideshow", {}).get("slide_type") == "notes"


def is_question(cell) -> bool:
    """The markdown cell that asks a prediction."""
    return cell.cell_type == "markdown" and ("prediction" in _tags(cell) or cell.source.lstrip().startswith(QUESTION))


def before_reveal(cells) -> set[int]:
    """Indexes of the code cells between each prediction's question and its lesson ("**What this teaches.**"):
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


def _stub_cell(source: str, where: str) -> str:
    """An exercise cell's student version: AnswerMissing imported at the top, a stub in each solution."""
    return f"{STUB_IMPORT}\n{stub_solutions(source, where=where, error='AnswerMissing')}"


def student_notebook(nb, name: str = "notebook"):
    """The student version of `nb` (changed in place and returned): stubs in, give-away outputs and
    speaker notes out."""
    hidden = before_reveal(nb.cells)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        where = f"{name}, cell {index}"
        stub_solutions(cell.source, where=where)  # rejects a stray END in any cell
        exercise, prediction = is_exercise(cell), "prediction" in _tags(cell)
        if exercise:
            cell.source = _stub_cell(cell.source, where)
        if prediction:
            cell.source = PREDICTION_ANSWER.sub(r'\g<left>""', cell.source)
        if exercise or prediction or index in hidden or "answer" in _tags(cell) or calls_check(cell.source):
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

    Every lab is read and stubbed before anything is written, so a broken one stops the run with
    nothing changed. The command-line entry is `python -m adapterlab student`; `python3 run.py lab
    --student` calls it before opening the copies.
    """
    notebooks = find_labs(labs)
    out_dir = Path(out_dir)
    _refuse_instructor_files(notebooks, out_dir)
    texts = {notebook.name: student_text(notebook) for notebook in notebooks}
    return _write_copies(texts, out_dir)


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


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_record(out_dir: Path) -> dict[str, str]:
    """Digest of the copy last written, per file name; empty when unknown (then every difference counts as an edit)."""
    try:
        record = json.loads((out_dir / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _status(copy: Path, fresh: str, recorded: str | None) -> str:
    """What to do with one copy, from the digests of the fresh copy, the one on disk and the one last written."""
    if not copy.exists():
        return NEW
    current = _digest(copy.read_bytes())
    if current == fresh:
        return UP_TO_DATE
    if recorded == fresh:
        return YOURS  # the lab is as it was when this copy was written: the difference is the student's work
    if recorded == current:
        return UPDATED  # the lab changed and the student never touched the copy
    return REPLACED  # the lab changed and so did the copy (or nothing is known about it): keep the student's


def _kept_name(copy: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    kept, n = copy.with_name(f"{copy.stem}.mine-{stamp}.ipynb"), 1
    while kept.exists():
        kept, n = copy.with_name(f"{copy.stem}.mine-{stamp}-{n}.ipynb"), n + 1
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
        copies = []
        for name, text in texts.items():
            fresh = _digest(text.encode("utf-8"))
            status = _status(out_dir / name, fresh, record.get(name))
            copies.append(StudentCopy(out_dir / name, status, _kept_name(out_dir / name) if status == REPLACED else None))
            if status in (NEW, UPDATED, REPLACED):
                staged[out_dir / name] = _stage(out_dir, name, text)
            record[name] = fresh
        staged[out_dir / RECORD] = _stage(out_dir, RECORD, json.dumps(record, indent=1, sort_keys=True) + "\n")
        for copy in copies:
            if copy.kept is not None:
                os.replace(copy.path, copy.kept)
        for final, temporary in staged.items():
            os.replace(temporary, final)
    except OSError as error:
        for temporary in staged.values():
            temporary.unlink(missing_ok=True)
        raise UnwritableOutput(
            f"cannot write the student copies to {out_dir} ({error.strerror or error}): "
            "choose a folder you can write to with --out DIR"
        ) from error
    return copies


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
