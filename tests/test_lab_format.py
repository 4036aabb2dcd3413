"""The labs' code fits 88 columns, as ruff formats it, so the slides can show it as the students have it.

ruff formats notebooks natively (only the code cells' source; outputs are left alone); its
settings are in pyproject.toml (`[tool.ruff]`). ruff does not wrap comments or strings, so the
column limit is checked here on its own, line by line.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from adapterlab.labfiles import all_labs

ROOT = Path(__file__).resolve().parents[1]
LINE_LENGTH = 88


def test_the_lab_code_is_ruff_formatted():
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "labs"],
        cwd=ROOT, capture_output=True, text=True,
    )
    unformatted = sorted(set(re.findall(r"labs/[^\s:]+\.ipynb", done.stdout)))  # the listing varies by version
    assert done.returncode == 0, f"not formatted as pyproject.toml says: {unformatted or done.stderr}; run `ruff format labs`"


@pytest.mark.parametrize("lab", all_labs(), ids=lambda lab: lab.stem)
def test_no_code_line_is_wider_than_88_columns(lab):
    nb = nbformat.read(lab, as_version=4)
    wide = [
        f"cell {index}: {line.strip()[:50]}… ({len(line)} columns)"
        for index, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for line in cell.source.splitlines()
        if len(line) > LINE_LENGTH
    ]
    assert not wide, f"{lab.name}: rewrap these lines by hand (ruff leaves comments and strings): {wide}"


@pytest.mark.parametrize("lab", all_labs(), ids=lambda lab: lab.stem)
def test_every_cell_id_is_unique(lab):
    """A repeated id is rewritten at random by nbformat when the lab is read, so a deck's cells and the tests that
    find cells by id would no longer agree with the file."""
    ids = [cell["id"] for cell in json.loads(lab.read_text(encoding="utf-8"))["cells"]]
    assert len(set(ids)) == len(ids), f"repeated cell ids: {sorted({i for i in ids if ids.count(i) > 1})}"


@pytest.mark.parametrize("lab", all_labs(), ids=lambda lab: lab.stem)
def test_no_wrapped_line_of_prose_starts_with_a_number_and_a_full_stop(lab):
    """A paragraph wrapped so that a line starts "0. r = 256's interval …" reads as prose in JupyterLab (a list
    that does not start at 1 cannot interrupt a paragraph) but as a list item on its slide, which showed "0." as
    a list of one. A line inside a paragraph that is no list must not start like a list item."""
    nb = nbformat.read(lab, as_version=4)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        for block in re.split(r"\n\s*\n", cell.source):
            lines = block.strip("\n").split("\n")
            if re.match(r"\s*([*+-]|\d+\.) |#|<|\|", lines[0]):
                continue  # a list, a heading, HTML or a table
            wrapped = [line for line in lines[1:] if re.match(r"\d+\. ", line)]
            assert not wrapped, f"cell {index}: a line starts like a list item: {wrapped[0][:60]!r}"
