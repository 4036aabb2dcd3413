"""One command for each job, with all setup done on the way: `python3 run.py lab` or `python3 run.py test`.

Creates a virtual environment in .venv (once, and again whenever pyproject.toml changes), installs
PyTorch first and then adapterlab with its test extras, and then:

* ``lab``  — opens JupyterLab on labs/ (extra arguments go to ``jupyter lab``);
* ``test`` — runs the package tests and every lab under nbval in the fast CI profile
  (extra arguments go to pytest, e.g. ``python3 run.py test tests/test_adapter.py``).

Only the standard library is used here, so it runs on any Python ≥ 3.10 before anything is installed.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
STAMP = VENV / "adapterlab-installed.txt"
# The CPU build of this version lies on the build machines' disk; elsewhere pip takes the normal build.
TORCH = "torch==2.13.0"


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def pip(*args: str) -> None:
    subprocess.run([str(venv_python()), "-m", "pip", "install", "--disable-pip-version-check", *args], check=True)


def ensure_environment() -> None:
    """Create and fill .venv unless it already matches pyproject.toml."""
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text().strip() == wanted and venv_python().exists():
        return
    if not venv_python().exists():
        print(f"Creating a virtual environment in {VENV} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("Installing PyTorch, then adapterlab and its dependencies (first time only) ...", flush=True)
    try:
        pip("--quiet", TORCH)
    except subprocess.CalledProcessError:
        print(f"{TORCH} is not available for this platform; installing the newest PyTorch instead.", flush=True)
        pip("--quiet", "torch>=2.2")
    pip("--quiet", "-e", f"{ROOT}[test]")
    STAMP.write_text(wanted + "\n")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("lab", "test"):
        print("usage: python3 run.py lab [jupyter lab args]   |   python3 run.py test [pytest args]", file=sys.stderr)
        return 2
    job, extra = argv[0], argv[1:]
    ensure_environment()
    python = str(venv_python())
    if job == "lab":
        return subprocess.call([python, "-m", "jupyter", "lab", str(ROOT / "labs"), *extra], cwd=ROOT)
    env = dict(os.environ)
    env.setdefault("ADAPTERLAB_PROFILE", "ci")
    targets = extra or ["tests", "labs"]
    return subprocess.call([python, "-m", "pytest", "--nbval-lax", *targets], cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
