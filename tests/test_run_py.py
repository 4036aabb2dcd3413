"""run.py's first start: each install step says what it installs and how long it usually takes before pip
runs, and pip's own progress is shown (no --quiet). pip is replaced by a recorder; nothing is installed."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def run_py(tmp_path, monkeypatch, capsys):
    """run.py with its .venv in tmp_path (taken as existing) and every command it runs replaced by a recorder that
    notes what was printed before each call. ``run.pip_config`` is what ``pip config list`` prints; a file ``uv``
    beside the environment's python stands for uv installed; a command holding ``run.refuse`` fails."""
    spec = importlib.util.spec_from_file_location("run_py_install", ROOT / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    monkeypatch.setattr(run, "VENV", tmp_path / ".venv")
    monkeypatch.setattr(run, "STAMP", tmp_path / ".venv" / "stamp.txt")
    monkeypatch.setattr(run, "venv_python", lambda: tmp_path / "python")
    (tmp_path / "python").write_text("")
    (tmp_path / ".venv").mkdir()
    run.calls, run.pip_config = [], ""

    def record(command, check=False, **_output):
        run.calls.append((command, capsys.readouterr().out))
        if getattr(run, "refuse", None) and run.refuse in command:
            if check:
                raise subprocess.CalledProcessError(1, command)
            return subprocess.CompletedProcess(command, 1, stdout="")
        return subprocess.CompletedProcess(command, 0, stdout=run.pip_config if "config" in command else "")

    monkeypatch.setattr(run.subprocess, "run", record)
    return run


def installs(run_py) -> list:
    """(command, printed before it since the last one) of every install of a step: not the installs of uv, not
    pip's config."""
    steps, printed = [], ""
    for command, said in run_py.calls:
        printed += said
        if "uv>=0.4" not in command and "config" not in command:
            steps.append((command, printed))
            printed = ""
    return steps


def test_each_install_step_says_what_and_how_long_before_pip_runs_and_pip_shows_its_progress(run_py, capsys):
    run_py.ensure_environment()
    (torch, torch_said), (package, package_said) = installs(run_py)
    assert run_py.TORCH in torch and "-e" in package
    assert not [command for command, _ in installs(run_py) if "--quiet" in command or "-q" in command]
    assert re.search(r"\[1/2\] Installing PyTorch .*\d+-\d+ minutes", torch_said)
    assert re.search(r"\[2/2\] Installing adapterlab .*\d+-\d+ minutes", package_said)
    assert "[1/2] Done in" in package_said and "[2/2] Done in" in capsys.readouterr().out


def test_a_platform_without_the_pinned_torch_gets_the_newest_with_the_same_announcement(run_py):
    run_py.refuse = run_py.TORCH
    run_py.ensure_environment()
    commands = [command for command, _ in installs(run_py)]
    assert run_py.TORCH in commands[0] and "torch>=2.2" in commands[1]
    assert "not available for this platform" in installs(run_py)[1][1]
    assert "[1/2] Installing PyTorch (torch>=2.2)" in installs(run_py)[1][1]


def test_uv_installs_where_it_is_had_with_pip_s_indexes_links_and_constraints(run_py, tmp_path):
    (tmp_path / "uv").write_text("")
    run_py.pip_config = ("global.extra-index-url='file:///one/simple file:///two/simple'\n"
                         ":env:.find-links='/wheels'\nglobal.constraint='/etc/constraints.txt'\nglobal.no-index='false'\n")
    run_py.ensure_environment()
    (torch, _), (package, _) = installs(run_py)
    for command in (torch, package):
        assert command[:4] == [str(tmp_path / "uv"), "pip", "install", "--python"]
        pairs = list(zip(command, command[1:]))
        for pair in [("--extra-index-url", "file:///one/simple"), ("--extra-index-url", "file:///two/simple"),
                     ("--find-links", "/wheels"), ("--constraint", "/etc/constraints.txt"),
                     ("--index-strategy", "unsafe-best-match")]:
            assert pair in pairs, (pair, command)
        assert "--no-index" not in command
    assert run_py.TORCH in torch and "-e" in package


def test_an_install_uv_cannot_do_is_done_again_by_pip(run_py, tmp_path, capsys):
    (tmp_path / "uv").write_text("")
    run_py.refuse = str(tmp_path / "uv")
    run_py.ensure_environment()
    commands = [command for command, _ in installs(run_py)]
    assert [command[0] for command in commands] == [str(tmp_path / "uv"), str(tmp_path / "python")] * 2
    assert run_py.TORCH in commands[1] and "-e" in commands[3] and "pip" == commands[1][2]
    assert "trying again with pip" in installs(run_py)[1][1]


@pytest.mark.parametrize("extra, selected", [([], ["-m", "not full"]), (["--full"], [])])
def test_the_tests_run_in_one_session_on_both_cores_and_full_adds_the_exhaustive_ones(run_py, monkeypatch, extra,
                                                                                      selected):
    """`run.py test` runs tests/ and labs/ in one pytest session, each file on one of two workers, leaving out the
    tests marked full; `--full` keeps them. The marker must be one pytest knows (pyproject.toml)."""
    calls, envs = [], []
    monkeypatch.setattr(run_py, "ensure_environment", lambda *extras: None)
    monkeypatch.setattr(run_py, "ensure_library_environment", lambda: None)
    monkeypatch.setattr(run_py.os, "cpu_count", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(run_py.subprocess, "call", lambda command, **kw: calls.append(command) or envs.append(kw["env"]) or 0)
    assert run_py.main(["test", *extra]) == 0
    [command] = calls
    assert command[-2:] == ["tests", "labs"] and "--full" not in command
    assert command[command.index("-n") + 1] == "2" and command[command.index("--dist") + 1] == "loadfile"
    chosen = command.index("not full") - 1 if "not full" in command else None
    assert (command[chosen:chosen + 2] if chosen else []) == selected
    assert "full:" in (ROOT / "pyproject.toml").read_text()  # registered, so -m "not full" cannot match a typo
    assert envs[0]["OMP_NUM_THREADS"] == "1"  # one torch thread a worker, two workers on two cores


def test_pip_s_configuration_is_read_once_for_both_steps(run_py, tmp_path):
    (tmp_path / "uv").write_text("")
    run_py.ensure_environment()
    assert len(installs(run_py)) == 2
    assert [command for command, _ in run_py.calls if "config" in command] == [
        [str(tmp_path / "python"), "-m", "pip", "config", "list"]]


@pytest.mark.parametrize("stamp, why", [(None, "First start"), ("other-hash test", "pyproject.toml changed"),
                                        ("{wanted} test", "Adding the course extra")])
def test_the_first_line_says_why_it_installs(run_py, stamp, why, capsys):
    wanted = run_py.hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if stamp:
        run_py.STAMP.write_text(stamp.format(wanted=wanted) + "\n")
    run_py.ensure_environment(("test", "course"))
    first = run_py.calls[0][1].splitlines()
    assert f"{why}: installing in two steps." in first
    assert run_py.STAMP.read_text().split() == [wanted, "test", "course"]


def test_the_venv_s_processes_keep_their_compiled_modules_in_the_venv_even_where_bytecode_is_off(run_py, monkeypatch,
                                                                                                   tmp_path):
    """With ``PYTHONDONTWRITEBYTECODE`` set (as CI images often do), each kernel and each command a test starts would
    compile torch and transformers from source again. A Python started in run.py's environment (the tests,
    JupyterLab) writes its compiled modules into .venv/pycache and reads them from there; nowhere else."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    folder = tmp_path / "labs"
    folder.mkdir()
    (folder / "some_module.py").write_text("VALUE = 1\n")
    importing = [sys.executable, "-c", "import some_module"]
    for env, compiles in ((dict(run_py.os.environ), False), (run_py.venv_environment(), True),
                          (run_py.jupyter_environment(["--allow-root"]), True)):
        # subprocess.run is the fixture's recorder; Popen is the real thing
        assert subprocess.Popen(importing, cwd=folder, env=env).wait() == 0
        compiled = list(tmp_path.rglob("*.pyc"))
        assert bool(compiled) == compiles
        assert all(path.is_relative_to(tmp_path / ".venv" / "pycache") for path in compiled)
