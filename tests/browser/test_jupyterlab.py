"""The SST-2 lab's training panel, driven in a real JupyterLab by headless Chromium.

JupyterLab runs on 127.0.0.1 (random free port, a token, the CI profile) on a copy of labs/, so
the run never writes into the committed notebooks. The test runs the lab's setup cell (its first
code cell: imports and profile) and the panel's cell, as a student who jumps to the panel would
(the training runs in between would only cost time), moves the bottleneck slider, presses Train
and waits until the chart and the results table change. No widget may show "Error displaying
widget" (the ipywidgets / jupyterlab_widgets mismatch pitfall).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from adapterlab.labfiles import LABS_DIR

TRAIN_LAB = "06_*.ipynb"
START_TIMEOUT_S = 90
TRAIN_TIMEOUT_MS = 600_000  # setup, the panel and one training run, CI profile, on a busy 2-core machine


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
def jupyter_lab(tmp_path, request):
    """(base url, token) of a JupyterLab serving a copy of labs/; stopped at the end."""
    root = tmp_path / "labs"
    shutil.copytree(LABS_DIR, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    port, token = free_port(), os.urandom(16).hex()
    home = tmp_path / "jupyter"  # settings, workspaces and runtime files of this server only
    env = {
        **os.environ,
        "ADAPTERLAB_PROFILE": "ci",
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
    }
    settings = {
        # no news feed or update check (they would ask the internet)
        "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
        # every cell in the page, so the n-th .jp-Cell is the n-th cell
        "notebook-extension/tracker": {"windowingMode": "none"},
    }
    for name, values in settings.items():
        path = home / "settings" / "@jupyterlab" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    log = open(tmp_path / "jupyterlab.log", "wb")
    server = subprocess.Popen(
        [
            sys.executable, "-m", "jupyterlab", "--no-browser",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
            "--ServerApp.allow_root=True",  # CI runs as root
            "--LabApp.expose_app_in_browser=True",  # window.jupyterapp, to run cells by command
            "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",  # no extension index from PyPI
        ],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )

    def stop():
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()

    request.addfinalizer(stop)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {server.returncode}:\n{(tmp_path / 'jupyterlab.log').read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as response:
                json.load(response)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"jupyter lab did not answer on {url} within {START_TIMEOUT_S} s")
            time.sleep(0.5)
    return url, token


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
