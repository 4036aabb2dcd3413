"""A JupyterLab for the browser tests: on 127.0.0.1, a random free port, a token, the CI profile, its settings,
workspaces and runtime files in a folder of its own, and nothing that asks the internet (news, update check,
extension index). Started, waited for until it answers, and stopped by :func:`running_jupyterlab`."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

START_TIMEOUT_S = 120
#: No news feed or update check (they would ask the internet); every cell in the page, so the n-th .jp-Cell
#: is the n-th cell.
SETTINGS = {"apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
            "notebook-extension/tracker": {"windowingMode": "none"}}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running_jupyterlab(root: Path, home: Path, *extra_args: str, env: dict | None = None):
    """(base url, token) of a JupyterLab serving `root`, its own files under `home`; stopped on leaving. `env`
    is the environment to start it in (default: this process's)."""
    port, token = free_port(), os.urandom(16).hex()
    env = {**(os.environ if env is None else env), "ADAPTERLAB_PROFILE": "ci", "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces")}
    for name, values in SETTINGS.items():
        path = home / "settings" / "@jupyterlab" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    log_path = home / "jupyterlab.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
             f"--ServerApp.root_dir={root}", "--ServerApp.allow_root=True",  # CI runs as root
             "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
             "--LabApp.extension_manager=readonly", *extra_args],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                if server.poll() is not None:
                    raise RuntimeError(f"jupyter lab exited with {server.returncode}:\n{log_path.read_text()}")
                try:
                    with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as response:
                        json.load(response)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"jupyter lab did not answer on {url} within {START_TIMEOUT_S} s")
                    time.sleep(0.5)
            yield url, token
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
