"""The student copies' start page: every lab in order, linked to its copy, with its objectives and its running
time read from the times Jupyter recorded; written with the whole course and kept like a copy once edited."""

from __future__ import annotations

import json
import re

import nbformat
import pytest

from adapterlab.labfiles import all_labs
from adapterlab.student import make_student_copies
from adapterlab.teaching.instructor.start_page import START_PAGE, running_minutes, start_page, title_of


def timed_cell(start: str, end: str):
    cell = nbformat.v4.new_code_cell("pass")
    cell.metadata["execution"] = {"iopub.execute_input": start, "iopub.status.busy": start,
                                  "iopub.status.idle": end, "shell.execute_reply": end}
    return cell


def test_running_minutes_add_each_cell_s_recorded_time_and_round_up():
    nb = nbformat.v4.new_notebook(cells=[
        timed_cell("2026-12-01T10:00:00.000Z", "2026-12-01T10:00:50.000Z"),  # 50 s
        nbformat.v4.new_code_cell("pass"),  # never run: no time
        timed_cell("2026-12-01T11:59:30.500Z", "2026-12-01T12:00:41.000Z"),  # 70.5 s, across the hour
    ])
    assert running_minutes(nb) == 3  # 120.5 s
    assert running_minutes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("pass")])) is None
    assert running_minutes(nbformat.v4.new_notebook(cells=[timed_cell("2026-12-01T10:00:00Z", "2026-12-01T10:00:01Z")])) == 1


def test_the_title_is_the_first_heading():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("# a comment"),
                                         nbformat.v4.new_markdown_cell("Some words\n\n## Lab 9 — Serving\n\nmore")])
    assert title_of(nb) == "Lab 9 — Serving"


def test_the_start_page_lists_every_lab_in_order_with_its_objectives():
    labs = all_labs()
    page = start_page(labs)
    links = re.findall(r"^\| \[([^]]+)\]\(([^)]+)\) \| (.*) \| (about \d+ min|not recorded) \|$", page, flags=re.M)
    assert [link for _, link, _, _ in links] == [lab.name for lab in labs]
    for lab, (title, _, objectives, _) in zip(labs, links):
        nb = json.loads(lab.read_text())
        assert title.startswith(f"Lab {int(lab.name[:2])} ")
        assert objectives.split("<br>") == ["• " + objective for objective in nb["metadata"]["adapterlab"]["objectives"]]


def test_the_whole_course_gets_a_start_page_which_a_student_s_edit_does_not_lose(tmp_path):
    copies = make_student_copies(None, tmp_path)
    assert [copy.path.name for copy in copies] == [lab.name for lab in all_labs()]  # the page is not a lab
    page = tmp_path / START_PAGE
    assert page.read_text() == start_page(all_labs())
    page.write_text(page.read_text() + "\nmy notes\n")
    make_student_copies(None, tmp_path)
    assert page.read_text().endswith("my notes\n")


@pytest.mark.parametrize("labs", [["03"], ["01", "11"]])
def test_copies_of_some_labs_leave_the_start_page_alone(tmp_path, labs):
    make_student_copies(labs, tmp_path)
    assert not (tmp_path / START_PAGE).exists()
