"""The reference solution of every lab's exercise passes the self-check the lab runs after it.

Nothing of the notebook runs but its definitions: the imports and the functions and classes of the code cells up
to the exercise (so lab 2's f_prime helper comes along), executed in one namespace; then the check named in the
cell after the exercise is called on the names it is given there. A check that rejected the lab's own answer would
tell every student who got it right that they are wrong.
"""

from __future__ import annotations

import ast

import nbformat
import pytest

from adapterlab.labfiles import LABS_DIR
from adapterlab.teaching import checks, checks_anatomy, checks_training

LAB_NUMBERS = range(1, 12)
DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)


def _exercises(number: int):
    """(namespace, check call) for each exercise of a lab: the definitions so far, and the next cell's check."""
    [path] = sorted(LABS_DIR.glob(f"{number:02d}_*.ipynb"))
    cells = nbformat.read(path, as_version=4).cells
    namespace: dict = {}
    for index, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        tree = ast.parse(_python_only(cell.source))
        kept = ast.Module(body=[node for node in tree.body if isinstance(node, DEFINITIONS)], type_ignores=[])
        exec(compile(kept, f"{path.name}, cell {index}", "exec"), namespace)
        if "### BEGIN SOLUTION" in cell.source:
            following = next(c for c in cells[index + 1 :] if c.cell_type == "code")  # a heading may come between
            yield namespace, _check_call(following.source)


def _python_only(source: str) -> str:
    """The cell without IPython's magics and shell lines, which ast cannot read."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def _check_call(source: str) -> ast.Call:
    calls = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
             and getattr(node.func, "attr", getattr(node.func, "id", "")).startswith("check_")]
    assert len(calls) == 1, f"want one check_ call after the exercise, got {len(calls)}: {source!r}"
    return calls[0]


@pytest.mark.parametrize("number", LAB_NUMBERS, ids=lambda n: f"lab{n:02d}")
def test_the_lab_s_own_solution_passes_its_check(number, capsys):
    ran = 0
    for namespace, call in _exercises(number):
        name = getattr(call.func, "attr", getattr(call.func, "id", None))
        check = getattr(checks, name, None) or getattr(checks_training, name, None) or getattr(checks_anatomy, name)
        check(*(namespace[argument.id] for argument in call.args))
        ran += 1
    out = capsys.readouterr().out
    assert ran and out.count("✔") == ran, out
