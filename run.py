"""One command for each job, with all setup done on the way: `python3 run.py lab --student`, `lab` or `test`.

Creates a virtual environment in .venv (once, and again whenever pyproject.toml changes), installs
PyTorch first and then adapterlab with its test extras (each step announced with how long it usually
takes, pip's own progress shown), and then:

* ``lab --student`` — for students: writes their copies of the labs (solutions stubbed out) into
  build/student/ and opens JupyterLab there. The copies are refreshed when a lab changes; a copy the
  student has edited is never overwritten (``python -m adapterlab student`` keeps it and says so);
* ``lab``  — for instructors: opens JupyterLab on labs/, the notebooks with their solutions
  (extra arguments go to ``jupyter lab``);
* ``test`` — runs the package tests, the browser tests and every lab under nbval in the fast CI profile, on
  two workers (each notebook in one kernel); ``test --full`` adds the exhaustive variants (a second screen
  size, every student copy run to its last check); other extra arguments go to pytest, e.g.
  ``python3 run.py test tests/test_adapter.py``, which runs all of that file. It first makes the
  reference adapter library's own environment, .venv-library (AdapterHub's ``adapters``, which pins another
  transformers than .venv holds), for the tests that load exported adapters in it; where that cannot be made,
  those tests are skipped and say why.

Only the standard library is used here, so it runs on any Python ≥ 3.10 before anything is installed;
everything else is done by the package, through the virtual environment's Python.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
STAMP = VENV / "adapterlab-installed.txt"
STUDENT_DIR = ROOT / "build" / "student"
START_PAGE = "README.md"  # the student copies' start page, written with them by `adapterlab student`
#: JupyterLab settings layered under the user's own for the student copies: a markdown file opens rendered,
#: so that the start page reads as a page rather than as its source.
START_SETTINGS = {"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"markdown": "Markdown Preview"}}}
#: ... and nbgrader's menu and assignment panel, which are the instructor's (the environment that runs the tests
#: has nbgrader installed), are not shown to students.
STUDENT_PAGE_CONFIG = {"disabledExtensions": {"@jupyter/nbgrader": True}}
USAGE = """usage: python3 run.py lab --student   your copies of the labs, exercises to do (in build/student/)
       python3 run.py lab             the instructor's labs, with solutions (in labs/)
       python3 run.py test            the tests (--full: with their exhaustive variants)
Extra arguments go to jupyter lab or to pytest."""
# The CPU build of this version lies on the build machines' disk; elsewhere pip takes the normal build.
TORCH = "torch==2.13.0"
# The reference adapter library in an environment of its own (benchmarks/library_env.sh makes the same one).
LIBRARY_VENV = ROOT / ".venv-library"
LIBRARY = ["adapters==1.3.0", "accelerate>=0.26"]
LIBRARY_STAMP = LIBRARY_VENV / "adapterlab-library.txt"


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


# What a first start installs, in order, and how long each step usually takes: pip's own output (each package
# as it is collected, a progress bar per download) follows each line, so a long step is never silent.
TORCH_STEP = f"PyTorch ({TORCH}), the largest download: usually 2-10 minutes, depending on the connection"
PACKAGE_STEP = "adapterlab and its dependencies (transformers, JupyterLab, plotly, ...): usually 1-3 minutes"


def pip(python: Path, *args: str, log=None) -> None:
    """Install into ``python``'s environment with uv where it can be had (it installs the whole course in well
    under a minute, where pip takes four), else with pip, with the same indexes, links and constraints."""
    output = {"stdout": log, "stderr": subprocess.STDOUT if log else None}
    uv = fast_installer(python, log)
    if uv is not None:
        command = [str(uv), "pip", "install", "--python", str(python), *uv_settings(python), *args]
        if subprocess.run(command, **output).returncode == 0:
            return
        print(f"uv could not install {' '.join(args)}; trying again with pip.", file=log or sys.stdout, flush=True)
    subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", *args], check=True, **output)


def fast_installer(python: Path, log=None) -> Path | None:
    """uv, installed into the environment itself by its pip (a few seconds); None where it cannot be."""
    uv = python.parent / ("uv.exe" if os.name == "nt" else "uv")
    if not uv.exists():
        subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--quiet", "uv>=0.4"],
                       stdout=log, stderr=subprocess.STDOUT if log else subprocess.DEVNULL)
    return uv if uv.exists() else None


@functools.lru_cache
def uv_settings(python: Path) -> tuple[str, ...]:
    """pip's configuration (its files and PIP_* variables, as ``pip config list`` shows them) as uv's options:
    uv reads neither, and a machine whose packages come from a local index or a wheel folder needs them. Every
    index is searched for the best version, as pip does. Read once a run: both install steps use it."""
    listed = subprocess.run([str(python), "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    options = ["--index-strategy", "unsafe-best-match"]
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        key, value = key.rpartition(".")[2], value.strip().strip("'\"")
        flag = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
                "constraint": "--constraint"}.get(key)
        if flag and value:
            options += [part for item in value.split() for part in (flag, item)]
        elif key == "no-index" and value.lower() in ("1", "true", "yes", "on"):
            options.append("--no-index")
        elif key == "cert" and value:
            os.environ.setdefault("SSL_CERT_FILE", value)
    return tuple(options)


def install_step(number: int, python: Path, what: str, *args: str, log=None, label: str = "") -> None:
    """Install (:func:`pip`), announced as step `number` of 2 with what it installs and how long it takes, and
    closed with the time it took (pip's own output goes to ``log`` where one is given; ``label`` names the
    environment when two install at once)."""
    print(f"{label}[{number}/2] Installing {what} ...", flush=True)
    start = time.monotonic()
    pip(python, *args, log=log)
    minutes, seconds = divmod(round(time.monotonic() - start), 60)
    print(f"{label}[{number}/2] Done in {minutes} min {seconds:02d} s.", flush=True)


def install_torch(python: Path, log=None, label: str = "") -> None:
    """Step 1: the pinned PyTorch, or the newest one where the pinned version has no build for this platform."""
    try:
        install_step(1, python, TORCH_STEP, TORCH, log=log, label=label)
    except subprocess.CalledProcessError:
        print(f"{TORCH} is not available for this platform; installing the newest PyTorch instead.", flush=True)
        install_step(1, python, TORCH_STEP.replace(TORCH, "torch>=2.2"), "torch>=2.2", log=log, label=label)


def ensure_environment(extras: tuple[str, ...] = ("test",)) -> None:
    """Create and fill .venv unless it already matches pyproject.toml and holds ``extras`` (the tests add
    ``course``, nbgrader, which students never need)."""
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    stamped = STAMP.read_text().split() if STAMP.exists() else []
    if stamped[:1] == [wanted] and set(extras) <= set(stamped[1:]) and venv_python().exists():
        return
    if not venv_python().exists():
        print(f"Creating a virtual environment in {VENV} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    missing = sorted(set(extras) - set(stamped[1:]))
    why = ("First start" if not stamped else "pyproject.toml changed" if stamped[0] != wanted
           else f"Adding the {', '.join(missing)} extra{'s' if len(missing) > 1 else ''}")
    print(f"{why}: installing in two steps.", flush=True)
    install_torch(venv_python())
    install_step(2, venv_python(), PACKAGE_STEP, "-e", f"{ROOT}[{','.join(extras)}]")
    STAMP.write_text(" ".join([wanted, *extras]) + "\n")


def ensure_library_environment() -> None:
    """Create .venv-library with AdapterHub's adapters unless it is there already; on failure say so and go on
    (the tests that need it are skipped, naming it). pip's output goes to install.log in it, since this runs
    beside the main environment's install."""
    wanted = " ".join([TORCH, *LIBRARY])
    python = LIBRARY_VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if LIBRARY_STAMP.exists() and LIBRARY_STAMP.read_text().strip() == wanted and python.exists():
        return
    print(f"Creating the reference adapter library's environment in {LIBRARY_VENV} (first time only; pip's output "
          f"in {LIBRARY_VENV / 'install.log'}) ...", flush=True)
    try:
        if not python.exists():
            venv.EnvBuilder(with_pip=True).create(LIBRARY_VENV)
        with open(LIBRARY_VENV / "install.log", "w") as log:
            install_torch(python, log=log, label=".venv-library ")
            install_step(2, python, f"AdapterHub's {LIBRARY[0]}: usually 1-2 minutes", *LIBRARY, log=log,
                         label=".venv-library ")
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"Could not make {LIBRARY_VENV} ({error}); the tests against AdapterHub will be skipped.", flush=True)
        return
    LIBRARY_STAMP.write_text(wanted + "\n")


def pytest_workers() -> list[str]:
    """Two pytest-xdist workers where the machine has two cores or more. Each file stays on one worker
    (``--dist loadfile``): a notebook's cells run top to bottom in one kernel, a test file's fixtures are made
    once. (``loadgroup`` would group across files, but pytest-xdist 3.8 marks a group by rewriting a test's id,
    which pytest 9 no longer reads, so its groups fall apart.)"""
    return ["-n", "2", "--dist", "loadfile"] if (os.cpu_count() or 1) >= 2 else []


def write_student_copies(python: str) -> int:
    """Write or refresh the student copies in build/student/; the package keeps any copy the student edited."""
    return subprocess.call([python, "-m", "adapterlab", "student", "--out", os.path.relpath(STUDENT_DIR, ROOT)], cwd=ROOT,
                           env=venv_environment())


def venv_environment() -> dict:
    """The environment the virtual environment's processes run in: this one, with Python's compiled modules kept
    in .venv/pycache. uv installs without compiling them, and where ``PYTHONDONTWRITEBYTECODE`` is set (CI images
    often set it) every process (each kernel, each command a test starts) would compile torch and transformers
    from source again: 18 s to import them, against 8 s from the cache. Kept in .venv, the cache writes nothing
    into the labs' or the package's folders."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PYTHONPYCACHEPREFIX", str(VENV / "pycache"))
    return env


def jupyter_environment(extra: list[str], student: bool = False) -> dict:
    """The environment JupyterLab starts in (:func:`venv_environment`), with config folders put first on
    ``JUPYTER_CONFIG_PATH`` (the user's own configuration is still read after them). For the student copies,
    one holds :data:`START_SETTINGS` and :data:`STUDENT_PAGE_CONFIG`. As root (a container, a lab machine's admin account) JupyterLab refuses to
    start unless allowed to: another allows it, and one line says so."""
    env = venv_environment()
    folders = []
    if student:
        folder = ROOT / "build" / "jupyter-student"
        (folder / "labconfig").mkdir(parents=True, exist_ok=True)
        (folder / "labconfig" / "default_setting_overrides.json").write_text(json.dumps(START_SETTINGS) + "\n")
        (folder / "labconfig" / "page_config.json").write_text(json.dumps(STUDENT_PAGE_CONFIG) + "\n")
        folders.append(str(folder))
    if getattr(os, "geteuid", lambda: 1)() == 0 and "--allow-root" not in extra:
        folder = ROOT / "build" / "jupyter-as-root"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "jupyter_server_config.json").write_text('{"ServerApp": {"allow_root": true}}\n')
        folders.append(str(folder))
        print("run.py: running as root, so JupyterLab is started with root allowed (as --allow-root would)", flush=True)
    if folders:
        env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [*folders, env.get("JUPYTER_CONFIG_PATH")]))
    return env


def on_start_page(extra: list[str]) -> list[str]:
    """JupyterLab's arguments for the student copies: open on their start page, unless the user named a page."""
    if any(argument.lstrip("-").split("=")[0].endswith("default_url") for argument in extra):
        return extra
    return [f"--LabApp.default_url=/lab/tree/{START_PAGE}", *extra]


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if not argv or argv[0] not in ("lab", "test"):
        said = f"unknown command {argv[0]!r}" if argv else "no command given"
        print(f"run.py: {said}; use one of lab --student, lab, test\n{USAGE}", file=sys.stderr)
        return 2
    job, extra = argv[0], argv[1:]
    library = threading.Thread(target=ensure_library_environment) if job == "test" else None
    if library is not None:  # the library's environment installs beside the main one: neither waits for the other
        library.start()
    ensure_environment(("test", "course") if job == "test" else ("test",))
    python = str(venv_python())
    if job == "lab":
        folder, student = ROOT / "labs", "--student" in extra
        if student:
            extra.remove("--student")
            status = write_student_copies(python)
            if status != 0:
                return status
            folder, extra = STUDENT_DIR, on_start_page(extra)
        return subprocess.call([python, "-m", "jupyter", "lab", str(folder), *extra], cwd=ROOT,
                               env=jupyter_environment(extra, student))
    library.join()
    env = venv_environment()
    env.setdefault("ADAPTERLAB_PROFILE", "ci")
    if pytest_workers():  # one torch thread a worker: two workers of two threads each on two cores slow the
        env.setdefault("OMP_NUM_THREADS", "1")  # labs 2.4-fold (their cells: 20 min summed, against 8 min)
    # The slowest tests are named at the end, and the time of each group (tests/conftest.py), so that a CI run that
    # grows shows where its time went.
    pytest = [python, "-m", "pytest", "--nbval-lax", "--durations=20"]
    full = "--full" in extra
    if full:
        extra.remove("--full")
    if extra:
        return subprocess.call([*pytest, *extra], cwd=ROOT, env=env)
    # The package tests, the browser tests and the labs under nbval in one session on two workers: each notebook
    # runs top to bottom in one kernel on one worker, and the files fill both cores. The exhaustive variants
    # (marked full) only with --full.
    selection = [] if full else ["-m", "not full"]
    return subprocess.call([*pytest, *pytest_workers(), *selection, "tests", "labs"], cwd=ROOT, env=env)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
