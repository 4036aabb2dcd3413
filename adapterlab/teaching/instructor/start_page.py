"""The page a student's JupyterLab opens on: the labs in order, what each has the student do, how long its
cells ran, and how the exercises, checks and predictions work.

Without it the student copies open on a bare Launcher beside twelve cut-off file names. The page is written
from the labs themselves (each notebook's title, its ``adapterlab.objectives`` metadata and the running times
Jupyter recorded in it when its outputs were made), so that it cannot drift from the course it describes.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

import nbformat

START_PAGE = "README.md"

HOW_A_LAB_WORKS = """\
## How a lab works

* **Run it from the top**: *Run → Run All Cells*. It stops at the first exercise you have not written yet,
  with one line that says what to write; write it, then run all cells again.
* **An exercise** is a code cell that says *Exercise: write your answer here*, with hints above it. The cell
  after it **checks** your answer on inputs of its own: it prints a line starting with ✔ when the answer is
  right; otherwise it names the mistake, or shows an input where your answer and the right one differ.
* **A prediction** asks what will happen before a result you might not expect: write your answer in its
  cell, then run the cells below it. What the result teaches is folded under *What this teaches*: open it
  after you have answered.
* **Your work is kept.** `python3 run.py lab --student` refreshes these copies when a lab changes, and never
  overwrites one you have edited: it stays as it is, or, when its lab changed, it is kept beside the new copy
  as `<lab>.mine-<date>.ipynb`.
"""


def title_of(nb) -> str:
    """The lab's title: the first heading of its first markdown cell, without the '#'s."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return ""


def running_minutes(nb) -> int | None:
    """Whole minutes (rounded up) that the lab's code cells ran when its outputs were made, from the times
    Jupyter recorded in each cell (``metadata.execution``); None when no cell has them."""
    seconds, timed = 0.0, False
    for cell in nb.cells:
        times = cell.get("metadata", {}).get("execution", {})
        if cell.cell_type == "code" and "iopub.execute_input" in times and "iopub.status.idle" in times:
            start, end = (datetime.fromisoformat(times[key].replace("Z", "+00:00"))
                          for key in ("iopub.execute_input", "iopub.status.idle"))
            seconds += (end - start).total_seconds()
            timed = True
    return max(1, math.ceil(seconds / 60)) if timed else None


def start_page(notebooks: list[Path]) -> str:
    """The start page (markdown) for the student copies of `notebooks`, in the order given."""
    rows = []
    for notebook in notebooks:
        nb = nbformat.read(notebook, as_version=4)
        objectives = nb.metadata.get("adapterlab", {}).get("objectives", [])
        minutes = running_minutes(nb)
        rows.append(f"| [{title_of(nb) or notebook.stem}]({notebook.name}) | {'<br>'.join('• ' + objective for objective in objectives)} | "
                    f"{'about %d min' % minutes if minutes else 'not recorded'} |")
    return "\n".join([
        "# Adapter labs: start here",
        "",
        "Work through the labs in order, each in its own notebook: click a lab's name in the table below, or "
        "double-click its file on the left. Lab 0 checks what this machine has: run it first.",
        "",
        HOW_A_LAB_WORKS,
        "## The labs",
        "",
        "The last column is how long the lab's cells ran when its outputs were made (2 CPU cores, the stand-in "
        "backbone); lab 0 measures what a training run costs on your machine.",
        "",
        "| lab | what you will do | running time |",
        "| --- | --- | --- |",
        *rows,
        "",
    ])
