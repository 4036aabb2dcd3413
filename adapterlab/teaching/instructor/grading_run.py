"""How nbgrader runs a submission of the course: every cell down to the lab's last graded one, nothing below it.

The course's ``nbgrader_config.py`` puts :class:`GradingRun` first among autograde's preprocessors (after nbgrader
has put the released source back into every locked cell). Below a lab's last exercise or check, no cell can change
a grade, and those cells are where labs 6, 8, 10 and 11 spend most of their minutes (a placement sweep, a span
ablation, a PEFT map, a live re-measure): grading leaves them out and says so in their output.

nbgrader keeps a cell's tags as the student left them, and the kernel skips any cell tagged with nbclient's
``skip_cells_with_tag``; a check it skipped has no error and would get every point. So the tag is one of the
course's own, and this preprocessor takes it off every cell before it puts it on those below the last graded one:
a student cannot skip a check by tagging it.
"""

from __future__ import annotations

from nbconvert.preprocessors import Preprocessor
from nbformat.v4 import new_output
from traitlets import Bool

#: The tag grading skips (the course's nbgrader_config.py sets nbclient's ``Execute.skip_cells_with_tag`` to it).
NOT_GRADED_TAG = "adapterlab-not-run-when-grading"
NOT_RUN = "Not run while grading: no exercise or check comes after this cell, so nothing it computes is graded.\n"
#: The cells after the first one not run say less: the feedback shows them one under the other.
NOT_RUN_AGAIN = "Not run while grading.\n"


def is_graded(cell) -> bool:
    """An exercise (nbgrader's solution cell) or a check (its autograded test cell)."""
    grader = cell.metadata.get("nbgrader", {})
    return bool(grader.get("solution") or grader.get("grade"))


class GradingRun(Preprocessor):
    """Tags the code cells below the last graded cell (and only those) with :data:`NOT_GRADED_TAG`, and shows
    :data:`NOT_RUN` (the first) or :data:`NOT_RUN_AGAIN` as their output in place of whatever the submission held."""

    enabled = Bool(True, help="nbconvert runs a preprocessor only when it is enabled").tag(config=True)

    def preprocess(self, nb, resources):
        last = max((index for index, cell in enumerate(nb.cells) if is_graded(cell)), default=len(nb.cells))
        said = False
        for index, cell in enumerate(nb.cells):
            tags = [tag for tag in cell.metadata.get("tags", []) if tag != NOT_GRADED_TAG]
            if cell.cell_type == "code" and index > last:
                tags.append(NOT_GRADED_TAG)
                cell.outputs = [new_output("stream", name="stdout", text=NOT_RUN_AGAIN if said else NOT_RUN)]
                cell.execution_count = None
                said = True
            if tags or "tags" in cell.metadata:
                cell.metadata["tags"] = tags
        return nb, resources
