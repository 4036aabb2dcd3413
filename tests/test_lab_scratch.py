"""A lab that writes scratch files keeps them in a ``tempfile.TemporaryDirectory``, removed when its kernel stops.

``mkdtemp`` and ``NamedTemporaryFile(delete=False)`` are never removed: lab 9 once left 14 MB of adapter sets in the
temporary folder on every run, for a student's machine and the test runs alike.
"""

from __future__ import annotations

import re

import nbformat
import pytest

from adapterlab.labfiles import all_labs

LEFT_BEHIND = re.compile(r"\bmkdtemp\(|\bmkstemp\(|delete\s*=\s*False")


@pytest.mark.parametrize("lab", all_labs(), ids=lambda lab: lab.stem)
def test_a_lab_s_scratch_files_go_with_its_kernel(lab):
    nb = nbformat.read(lab, as_version=4)
    kept = [f"cell {index}: {line.strip()}" for index, cell in enumerate(nb.cells) if cell.cell_type == "code"
            for line in cell.source.splitlines() if LEFT_BEHIND.search(line)]
    assert not kept, (f"{lab.name} makes scratch files nothing removes: {kept}; use tempfile.TemporaryDirectory() "
                      "and keep the object in a variable, so the folder goes when the kernel stops")
