"""One command for each job, with all setup done on the way: `python3 run.py lab --student`, `lab` or `test`.

Creates a virtual environment in .venv (once, and again whenever pyproject.toml changes), installs
PyTorch first and then adapterlab with its test extras, and then:

* ``lab --student`` — for students: writes their copies of the labs (solutions stubbed out) into
  build/student/ and opens JupyterLab there. The copies are refreshed when a lab changes; a copy the
  student has edited is never overwritten (``python -m adapterlab student`` keeps it and says so);
* ``lab``  — for instructors: opens JupyterLab on labs/, the notebooks with their solutions
  (extra arguments go to ``jupyter lab``);
* ``test`` — runs the package tests and every lab under nbval in the fast CI profile
  (extra arguments go to pytest, e.g. ``python3 run.py test tests/test_adapter.py``). It first makes the
  reference adapter library's own environment, .venv-library (AdapterHub's ``adapters``, which pins another
  transformers than .venv holds), for the tests that load exported adapters in it; where that cannot be made,
  those tests are skipped and say why.

Only the standard library is used here, so it runs on any Python ≥ 3.10 before anything is installed;
everything else is done by the package, through the virtual environment's Python.
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
STUDENT_DIR = ROOT / "build" / "student"
USAGE = """usage: python3 run.py lab --student   your copies of the labs, exercises to do (in build/student/)
       python3 run.py lab             the instructor's labs, with solutions (in labs/)
       python3 run.py test            the tests
Extra arguments go to jupyter lab or to pytest."""
# The CPU build of this version lies on the build machines' disk; elsewhere pip takes the normal build.
TORCH = "torch==2.13.0"
# The reference adapter library in an environment of its own (benchmarks/library_env.sh makes the same one).
LIBRARY_VENV = ROOT / ".venv-library"
LIBRARY = ["adapters==1.3.0", "accelerate>=0.26"]
LIBRARY_STAMP = LIBRARY_VENV / "adapterlab-library.txt"


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


def ensure_library_environment() -> None:
    """Create .venv-library with AdapterHub's adapters unless it is there already; on failure say so and go on
    (the tests that need it are skipped, naming it)."""
    wanted = " ".join([TORCH, *LIBRARY])
    python = LIBRARY_VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if LIBRARY_STAMP.exists() and LIBRARY_STAMP.read_text().strip() == wanted and python.exists():
        return
    print(f"Creating the reference adapter library's environment in {LIBRARY_VENV} (first time only) ...", flush=True)
    try:
        if not python.exists():
            venv.EnvBuilder(with_pip=True).create(LIBRARY_VENV)
        install = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*install, TORCH], check=True)
        subprocess.run([*install, *LIBRARY], check=True)
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"Could not make {LIBRARY_VENV} ({error}); the tests against AdapterHub will be skipped.", flush=True)
        return
    LIBRARY_STAMP.write_text(wanted + "\n")


def write_student_copies(python: str) -> int:
    """Write or refresh the student copies in build/student/; the package keeps any copy the student edited."""
    return subprocess.call([python, "-m", "adapterlab", "student", "--out", os.path.relpath(STUDENT_DIR, ROOT)], cwd=ROOT)


def jupyter_environment(extra: list[str]) -> dict:
    """The environment JupyterLab starts in. As root (a container, a lab machine's admin account) JupyterLab
    refuses to start unless allowed to: a config folder put first on ``JUPYTER_CONFIG_PATH`` allows it, and
    one line says so (the user's own configuration is still read after it)."""
    env = dict(os.environ)
    if getattr(os, "geteuid", lambda: 1)() != 0 or "--allow-root" in extra:
        return env
    folder = ROOT / "build" / "jupyter-as-root"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "jupyter_server_config.json").write_text('{"ServerApp": {"allow_root": true}}\n')
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [str(folder), env.get("JUPYTER_CONFIG_PATH")]))
    print("run.py: running as root, so JupyterLab is started with root allowed (as --allow-root would)", flush=True)
    return env


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if not argv or argv[0] not in ("lab", "test"):
        said = f"unknown command {argv[0]!r}" if argv else "no command given"
        print(f"run.py: {said}; use one of lab --student, lab, test\n{USAGE}", file=sys.stderr)
        return 2
    job, extra = argv[0], argv[1:]
    ensure_environment()
    python = str(venv_python())
    if job == "lab":
        folder = ROOT / "labs"
        if "--student" in extra:
            extra.remove("--student")
            status = write_student_copies(python)
            if status != 0:
                return status
            folder = STUDENT_DIR
        return subprocess.call([python, "-m", "jupyter", "lab", str(folder), *extra], cwd=ROOT,
                               env=jupyter_environment(extra))
    ensure_library_environment()
    env = dict(os.environ)
    env.setdefault("ADAPTERLAB_PROFILE", "ci")
    targets = extra or ["tests", "labs"]
    # The slowest tests are named at the end, so that a CI run that grows shows where its time went.
    return subprocess.call([python, "-m", "pytest", "--nbval-lax", "--durations=20", *targets], cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
