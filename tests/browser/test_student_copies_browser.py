"""Student copies opened in a real JupyterLab in headless Chromium show no answer before its prediction.

In labs 6 and 10, under each prediction's question every code cell up to its "What this teaches" cell
shows no output, no speaker notes appear, and no check's ✔ line or "Answer (" is on the page. In every
lab, each folded explanation shows only its summary until the summary is clicked, and its text then.

The copies are written by `make_student_copies` into a temporary folder that JupyterLab serves (127.0.0.1,
a random port, a token); no cell is run. A screenshot of each lab's first prediction lands in
build/screenshots/. Skipped, with the reason, where Chromium or Playwright is missing.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

from adapterlab.labfiles import LABS_DIR, all_labs
from adapterlab.student import make_student_copies
from lab_server import running_jupyterlab

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "build" / "screenshots"
LABS = ("06_*.ipynb", "10_*.ipynb")


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> Path:
    """The student copies of every lab, in a folder of their own."""
    if len([path for pattern in LABS for path in LABS_DIR.glob(pattern)]) != len(LABS):
        pytest.skip(f"labs {LABS} are not all there")
    out = tmp_path_factory.mktemp("student-copies")
    make_student_copies(None, out)
    return out


@pytest.fixture(scope="module")
def student_lab_server(copies, tmp_path_factory, chromium_executable):
    """(url, token) of a JupyterLab serving the student copies, started as `run.py lab --student` starts it;
    stopped at the end (skipped without Chromium)."""
    spec = importlib.util.spec_from_file_location("run_py", REPO / "run.py")
    run_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_py)
    with running_jupyterlab(copies, tmp_path_factory.mktemp("jupyter-home"), *run_py.on_start_page([]),
                            env=run_py.jupyter_environment([], student=True)) as server:
        yield server


@pytest.fixture(scope="module")
def student_browser(student_lab_server, chromium):
    """The session's headless Chromium (one Playwright per process: a second one cannot start beside it)."""
    return chromium


@pytest.fixture
def student_page(student_browser):
    page = student_browser.new_page()
    page.set_viewport_size({"width": 1280, "height": 900})
    page.set_default_timeout(90_000)
    yield page
    page.close()


def test_jupyterlab_opens_the_student_copies_on_their_start_page(copies, student_lab_server, student_page):
    """The first page a student sees is the start page, rendered (not its markdown source), linking every lab."""
    url, token = student_lab_server
    student_page.goto(f"{url}/?reset&token={token}")
    page = student_page.locator(".jp-RenderedMarkdown").filter(has=student_page.locator("h1"))
    page.locator("h1").wait_for()
    assert page.locator("h1").inner_text().startswith("Adapter labs: start here")
    assert student_page.get_by_text("Nbgrader", exact=True).count() == 0, "nbgrader's menu is the instructor's"
    links = page.locator("td a")
    named = [re.search(r"/files/([^?]+)", link.get_attribute("href")).group(1) for link in links.all()]
    assert named == [lab.name for lab in all_labs()]
    SHOTS.mkdir(parents=True, exist_ok=True)
    student_page.screenshot(path=SHOTS / "student-start-page.png")
    links.nth(1).click()  # a link opens its lab as a notebook, in JupyterLab
    student_page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").first.wait_for()
    assert student_page.locator('.lm-TabBar-tab.jp-mod-current[data-type="document-title"]').inner_text().strip() == all_labs()[1].name


def predictions(nb) -> list[tuple[int, int]]:
    """(question, lesson) cell indexes of every prediction in a notebook."""
    pairs = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and cell.source.startswith("**Predict.**"):
            lesson = next(k for k in range(index + 1, len(nb.cells)) if nb.cells[k].cell_type == "markdown"
                          and nb.cells[k].source.startswith("<details><summary>What this teaches</summary>"))
            pairs.append((index, lesson))
    return pairs


@pytest.mark.parametrize("pattern", LABS)
def test_a_student_copy_in_jupyterlab_shows_no_answer_before_its_prediction(pattern, copies, student_lab_server,
                                                                           student_page):
    [path] = sorted(copies.glob(pattern))
    nb = nbformat.read(path, as_version=4)
    pairs = predictions(nb)
    assert pairs, f"{path.name} asks no prediction"
    url, token = student_lab_server
    page = student_page
    page.goto(f"{url}/lab/tree/{path.name}?reset&token={token}")  # reset: only this notebook open
    notebook = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"
    cells = page.locator(f"{notebook} .jp-Cell")
    page.wait_for_function(f"() => document.querySelectorAll('{notebook} .jp-Cell').length === {len(nb.cells)}")
    page.wait_for_function(f"() => document.querySelectorAll('{notebook} .jp-OutputArea-output').length > 0")

    for question, lesson in pairs:
        shown = {k: cells.nth(k).locator(".jp-OutputArea-output").count() for k in range(question + 1, lesson)}
        assert not any(shown.values()), f"{path.name}: outputs under the prediction at cell {question}: {shown}"
    text = page.locator(notebook).inner_text()
    assert "Answer (" not in text and "✔" not in text
    assert "Error displaying widget" not in text and "Panel(children=" not in text and "VBox(children=" not in text

    SHOTS.mkdir(parents=True, exist_ok=True)
    question, lesson = pairs[0]
    cells.nth(question).scroll_into_view_if_needed()
    page.evaluate("element => element.scrollIntoView({block: 'start'})", cells.nth(question).element_handle())
    page.wait_for_timeout(500)
    page.screenshot(path=SHOTS / f"student-{path.stem}-prediction.png")


def open_copy(page, server, path: Path, cells: int):
    """The cells of a student copy opened alone in JupyterLab, once every cell is on the page."""
    url, token = server
    page.goto(f"{url}/lab/tree/{path.name}?reset&token={token}")  # reset: only this notebook open
    notebook = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"
    page.wait_for_function(f"() => document.querySelectorAll('{notebook} .jp-Cell').length === {cells}")
    return page.locator(f"{notebook} .jp-Cell")


def folded_text(source: str) -> str:
    """The first words of a folded explanation as it reads on the page (markdown marks left out)."""
    body = source.split("</summary>", 1)[1].rsplit("</details>", 1)[0]
    return " ".join(re.sub(r"[*`$]", "", body).split()[:6])


@pytest.mark.parametrize("lab", [lab.name for lab in all_labs()])
def test_every_explanation_stays_folded_until_its_summary_is_clicked(lab, copies, student_lab_server, student_page):
    path = copies / lab
    nb = nbformat.read(path, as_version=4)
    explanations = [index for index, cell in enumerate(nb.cells) if cell.cell_type == "markdown"
                    and ("What this teaches" in cell.source or cell.source.startswith("<details>"))]
    if not explanations:
        pytest.skip(f"{lab} explains no prediction")
    cells = open_copy(student_page, student_lab_server, path, len(nb.cells))
    for index in explanations:
        cell = cells.nth(index).locator(".jp-RenderedMarkdown")  # not the (hidden) editor holding the source
        cell.scroll_into_view_if_needed()
        summary = cell.locator("details > summary")
        assert summary.count() == 1, f"{lab}, cell {index}: the explanation is not folded: {nb.cells[index].source[:60]!r}"
        summary.wait_for(state="visible")
        text = folded_text(nb.cells[index].source)
        shown = cell.get_by_text(text, exact=False)
        assert shown.count() == 1, f"{lab}, cell {index}: {text!r} is not in the rendered cell"
        assert not shown.is_visible(), f"{lab}, cell {index}: the explanation shows before its summary is clicked"
        summary.click()
        shown.wait_for(state="visible")
