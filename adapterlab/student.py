"""Student copies of the labs: every solution replaced by a stub that raises NotImplementedError.

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

The outputs of an exercise cell (they would show the answer) are cleared; every other cell, its
outputs and all metadata stay as they are, so students see the same lab their instructor ran.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

from .labfiles import LabNotFoundError, find_labs

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
HINT = re.compile(r"^\s*#\s*HINT:\s*(?P<hint>.*?)\s*$")
GENERIC_HINT = "replace this line with your code, run the cell, then run the check below it"


class SolutionMarkerError(ValueError):
    """A BEGIN SOLUTION without its END, or the other way round."""


def stub_solutions(source: str, where: str = "cell") -> str:
    """`source` with each solution region replaced by its hints and a `raise NotImplementedError`.

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
            kept.append(f"{indent}raise NotImplementedError({f'Exercise: write your answer here. Hint: {hint}'!r})")
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


def student_notebook(nb, name: str = "notebook"):
    """The student version of `nb` (changed in place and returned): stubs in, exercise outputs out."""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        stubbed = stub_solutions(cell.source, where=f"{name}, cell {index}")  # also rejects a stray END
        if is_exercise(cell):
            cell.source = stubbed
            cell.outputs = []
            cell.execution_count = None
    return nb


def make_student_copies(labs: list[str] | None = None, out_dir: Path | str = "build/student") -> list[Path]:
    """Write the student copy of the named labs (all when None) into `out_dir`; return their paths."""
    notebooks = find_labs(labs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    copies = []
    for notebook in notebooks:
        nb = student_notebook(nbformat.read(notebook, as_version=4), name=notebook.name)
        copy = out_dir / notebook.name
        nbformat.write(nb, copy)
        copies.append(copy)
    return copies


def student_command(args) -> int:
    """`adapterlab student [LAB ...] [--out DIR]`."""
    try:
        copies = make_student_copies(args.labs or None, args.out)
    except (LabNotFoundError, SolutionMarkerError) as error:
        print(f"adapterlab student: {error}", file=sys.stderr)
        return 2
    for copy in copies:
        print(copy)
    print(f"{len(copies)} student cop{'y' if len(copies) == 1 else 'ies'} in {Path(args.out)}")
    return 0
