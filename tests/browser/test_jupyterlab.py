"""The SST-2 lab's training panel, driven in a real JupyterLab by headless Chromium.

JupyterLab runs on 127.0.0.1 (random free port, a token, the CI profile) on a copy of labs/, so
the run never writes into the committed notebooks. The test runs the lab's setup cell (its first
code cell: imports and profile) and the panel's cell, as a student who jumps to the panel would
(the training runs in between would only cost time), moves the bottleneck slider, presses Train
and waits until the chart and the results table change. No widget may show "Error displaying
widget" (the ipywidgets / jupyterlab_widgets mismatch pitfall).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest

from adapterlab.labfiles import LABS_DIR
from lab_server import running_jupyterlab

TRAIN_LAB = "06_*.ipynb"
TRAIN_TIMEOUT_MS = 600_000  # setup, the panel and one training run, CI profile, on a busy 2-core machine


@pytest.fixture
def train_lab() -> Path:
    found = sorted(LABS_DIR.glob(TRAIN_LAB))
    if not found:
        pytest.skip(f"the SST-2 training lab labs/{TRAIN_LAB} is not there yet")
    return found[0]


def setup_and_panel_cells(nb) -> tuple[int, int]:
    """The lab's first code cell and the code cell that makes the training panel (TrainingPanel)."""
    code = [index for index, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    panels = [index for index in code if re.search(r"\bTrainingPanel\(", nb.cells[index].source)]
    assert panels, "no code cell makes a TrainingPanel"
    return code[0], panels[0]


@pytest.fixture
def jupyter_lab(tmp_path):
    """(base url, token) of a JupyterLab serving a copy of labs/; stopped at the end."""
    root = tmp_path / "labs"
    shutil.copytree(LABS_DIR, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    # window.jupyterapp, to run cells by command
    with running_jupyterlab(root, tmp_path / "jupyter", "--LabApp.expose_app_in_browser=True") as server:
        yield server


def plots(panel) -> str:
    """The data of every plotly chart in the panel, to tell whether a chart changed."""
    return panel.locator(".js-plotly-plot").evaluate_all("plots => JSON.stringify(plots.map(p => p.data))")


def test_training_panel_in_jupyterlab(train_lab, page, jupyter_lab, screenshots):
    lab = train_lab
    setup, index = setup_and_panel_cells(nbformat.read(lab, as_version=4))
    url, token = jupyter_lab
    page.set_default_timeout(60_000)
    page.set_viewport_size({"width": 1280, "height": 1600})  # room for the whole panel in the screenshot
    page.goto(f"{url}/lab/tree/{lab.name}?token={token}")
    panel = page.locator(".jp-Notebook .jp-Cell").nth(index)
    try:
        moved = drive_panel(page, panel, [setup, index])
    except Exception as error:
        page.screenshot(path=screenshots / f"jupyterlab-{lab.stem}-failed.png")
        raise AssertionError(f"{error}\n--- the panel cell shows:\n{panel.inner_text()[-3000:]}") from error
    panel.locator(".jp-Cell-outputWrapper").screenshot(path=screenshots / f"jupyterlab-{lab.stem}.png")

    results = panel.locator("table").last.inner_text()
    assert moved in results and "diverged" not in results, f"the results table has no finished run with r = {moved}:\n{results}"
    assert page.get_by_text("Error displaying widget").count() == 0


def drive_panel(page, panel, cells: list[int]) -> str:
    """Run `cells` (setup, then the panel), move the bottleneck slider, press Train and wait until
    the results table and the chart change. Returns the slider's new readout."""
    page.wait_for_function(
        """() => {
            const context = window.jupyterapp?.shell.currentWidget?.sessionContext;
            const kernel = context?.session?.kernel;
            return context?.isReady && kernel?.connectionStatus === 'connected' && kernel?.status === 'idle';
        }"""
    )
    # select each cell and "Run Selected Cell", as a student would
    page.evaluate(
        """async cells => {
            const notebook = jupyterapp.shell.currentWidget.content;
            for (const index of cells) {
                notebook.activeCellIndex = index;
                await jupyterapp.commands.execute('notebook:run-cell');
            }
        }""",
        cells,
    )
    slider = panel.locator(".widget-slider").filter(has_text=re.compile("bottleneck", re.I)).first
    slider.wait_for(timeout=TRAIN_TIMEOUT_MS)
    readout = slider.locator(".widget-readout").inner_text()
    slider.locator(".noUi-handle").first.focus()
    page.keyboard.press("ArrowRight")
    if slider.locator(".widget-readout").inner_text() == readout:  # already at the top end
        page.keyboard.press("ArrowLeft")
        page.keyboard.press("ArrowLeft")
    moved = slider.locator(".widget-readout").inner_text()
    assert moved != readout, "the bottleneck slider did not move"

    tables = "cell => [...cell.querySelectorAll('table')].map(t => t.innerText).join()"
    charts_before, tables_before = plots(panel), panel.evaluate(tables)
    panel.get_by_role("button", name=re.compile(r"\bTrain$")).click()  # the name starts with the icon
    page.wait_for_function(
        f"([cell, before]) => ({tables})(cell) !== before",
        arg=[panel.element_handle(), tables_before],
        timeout=TRAIN_TIMEOUT_MS,
    )
    page.wait_for_function(
        "([cell, before]) => JSON.stringify([...cell.querySelectorAll('.js-plotly-plot')].map(p => p.data)) !== before",
        arg=[panel.element_handle(), charts_before],
    )
    return moved
