"""Never lose work: what --overwrite may replace, two writers, signals, kills, full and read-only disks,
damaged records and files, and the arguments that used to slip through.

Signals, locks and disks are tested on real processes (``python -m adapterlab`` through a small wrapper
that can hold a run at a chosen training batch) and on real file systems (a small tmpfs, where the test
may mount one). Everything trains the 2-layer tiny-random backbone on the toy data for a few steps.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import safetensors.torch
import torch

from adapterlab import backbones, counting
from adapterlab.backbones import TINY, load_backbone
from adapterlab.checkpoints import CheckpointError, load_adapter_set, manifest_checksum, save_adapter_set
from adapterlab.cli import FAILED, INTERRUPTED, OK, USAGE, main
from adapterlab.placement import AdapterConfig, add_adapters
from adapterlab.run_folder import is_run_folder, write_metrics
from adapterlab.runstore import RunStore, default_stores, run_id
from adapterlab.validation import json_safe

ROOT = Path(__file__).resolve().parent.parent
FAST = ["--backbone", TINY, "--bottleneck", "8", "--batch-size", "16", "--max-train", "64", "--max-eval", "32",
        "--no-progress", "--precision", "fp32"]
SWEEP = ["sweep", "--backbone", TINY, "--batch-size", "16", "--max-train", "48", "--max-eval", "32", "--steps", "4",
         "--no-progress"]

#: ``python WRAPPER ARGS`` is ``python -m adapterlab ARGS``, but prints TRAINING when a run starts to train, and
#: with HOLD_RUN=R HOLD_STEP=S prints HELD and waits at batch S of run R while the file HOLD_WHILE exists.
#: With KILL_IN_COMMIT=1 the process kills itself (SIGKILL) between the two renames of a run-folder commit.
WRAPPER = r'''
import os, signal, sys, time
from adapterlab.cli import main
from adapterlab.training import experiment, loop

hold_run, hold_step = int(os.environ.get("HOLD_RUN", "0")), int(os.environ.get("HOLD_STEP", "0"))
gate = os.environ.get("HOLD_WHILE", "")
signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal, even where the parent ignores Ctrl-C
runs, batches = [0], [0]
real_train, real_collate = experiment.train, loop.collate

def train(*args, **kwargs):
    runs[0] += 1
    batches[0] = 0
    print("TRAINING", flush=True)
    return real_train(*args, **kwargs)

def collate(*args):
    batches[0] += 1
    if runs[0] == hold_run and batches[0] == hold_step:
        print("HELD", flush=True)
        while os.path.exists(gate):
            time.sleep(0.02)
    return real_collate(*args)

experiment.train, loop.collate = train, collate

if os.environ.get("KILL_IN_COMMIT"):
    real_replace = os.replace

    def replace(source, target, *args, **kwargs):
        if ".incomplete-" in os.path.basename(str(source)) and not os.path.exists(target):
            os.kill(os.getpid(), signal.SIGKILL)  # the old run is aside, the new one not yet in its place
        return real_replace(source, target, *args, **kwargs)

    os.replace = replace
sys.exit(main(sys.argv[1:]))
'''


pytestmark = pytest.mark.usefixtures("toy_data_only")


@pytest.fixture
def wrapper(tmp_path):
    path = tmp_path / "adapterlab_wrapper.py"
    path.write_text(WRAPPER)
    return path


STARTED: list[subprocess.Popen] = []  # every process a test started, killed at its end if it still runs


@pytest.fixture(autouse=True)
def no_process_outlives_its_test():
    """A process held at a gate that its failed test never opens would sleep on, holding the test worker's pipes
    (and the run's end) with it."""
    yield
    while STARTED:
        process = STARTED.pop()
        if process.poll() is None:
            process.kill()
            process.wait()


def start(wrapper, *args, **env) -> subprocess.Popen:
    environment = {k: v for k, v in os.environ.items() if k != "ADAPTERLAB_DATA"}
    environment.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), **env)
    process = subprocess.Popen([sys.executable, str(wrapper), *map(str, args)], cwd=ROOT, env=environment,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    STARTED.append(process)
    return process


def wait_for(process: subprocess.Popen, word: str, timeout: float = 300) -> str:
    """Read the process's stdout until a line ``word``; fail with its stderr if it ends first."""
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 1)
        if not ready:
            continue
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"the process ended before {word}: {process.wait()} {process.stderr.read()[-3000:]}")
        seen.append(line)
        if line.strip() == word:
            return "".join(seen)
    process.kill()
    raise AssertionError(f"no {word} within {timeout} s; its output: {''.join(seen)[-1000:]!r}; its errors: "
                         f"{process.stderr.read()[-3000:]!r}")


def finish(process: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    """Wait for the process to end; one still running after ``timeout`` is killed and the test fails with what it
    printed."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"still running after {timeout} s; its output: {out[-1000:]!r}; its errors: "
                             f"{err[-3000:]!r}") from None
    return process.returncode, out, err


def error_lines(err: str, command: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(f"adapterlab {command}: ")]


def hidden_beside(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name[:100]}"))


def report(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def no_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a backbone was loaded before the arguments were checked")

    monkeypatch.setattr(backbones, "load_backbone", refuse)


def only_line(capsys, command: str) -> str:
    err = capsys.readouterr().err
    lines = error_lines(err, command)
    assert len(lines) == 1 and len([line for line in err.splitlines() if line.strip()]) == 1, err
    return lines[0]


@contextlib.contextmanager
def small_disk(folder: Path, size: str = "4m"):
    """A real tmpfs of ``size`` mounted at ``folder`` (skips where this process may not mount one)."""
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def read_only(folder: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)


# ------------------------------------------------------------------------ 1. --overwrite replaces only a run


def test_overwrite_never_replaces_a_folder_that_is_not_a_run(tmp_path, capsys, monkeypatch):
    no_loading(monkeypatch)
    labs = tmp_path / "labs"
    labs.mkdir()
    for name in ("01_build.ipynb", "02_init.ipynb", "README.md"):
        (labs / name).write_text("{}")
    before = {p.name: p.read_bytes() for p in labs.iterdir()}
    assert main(["train", "--out", str(labs), *FAST, "--overwrite"]) == USAGE
    line = only_line(capsys, "train")
    assert "3 files (01_build.ipynb, 02_init.ipynb, README.md)" in line and "not a run folder" in line
    assert main(["train", "--out", str(labs), *FAST]) == USAGE
    assert "--overwrite" not in only_line(capsys, "train")  # no hint at a flag that would not help
    assert {p.name: p.read_bytes() for p in labs.iterdir()} == before and not hidden_beside(labs)


def test_a_run_folder_is_known_by_its_metrics_and_nothing_else(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--out", str(run), *FAST]) == OK
    assert is_run_folder(run)
    (run / "notes.txt").write_text("mine")  # a run folder someone put their own file in is not replaced
    assert not is_run_folder(run)
    capsys.readouterr()
    assert main(["train", "--out", str(run), *FAST, "--overwrite"]) == USAGE
    assert "other files (notes.txt)" in only_line(capsys, "train") and (run / "notes.txt").exists()
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "metrics.json").write_text('{"config": "x"}')  # JSON, but not what train writes
    assert not is_run_folder(fake)
    assert main(["train", "--out", str(fake), *FAST, "--overwrite"]) == USAGE
    assert "not in the format adapterlab train writes" in only_line(capsys, "train")
    assert (fake / "metrics.json").read_text() == '{"config": "x"}'


# ------------------------------------------------------------------------ 2. two writers of one --out


def test_a_second_train_into_the_same_out_stops_before_it_trains(tmp_path, wrapper):
    out, gate = tmp_path / "run", tmp_path / "gate"
    gate.touch()
    first = start(wrapper, "train", "--out", out, *FAST, HOLD_RUN="1", HOLD_STEP="2", HOLD_WHILE=str(gate))
    try:
        wait_for(first, "HELD")
        second = start(wrapper, "train", "--out", out, *FAST, "--method", "full", "--overwrite")
        code, stdout, err = finish(second)
        assert code == USAGE and "TRAINING" not in stdout, err
        lines = error_lines(err, "train")
        assert len(lines) == 1 and "is being written by another adapterlab train" in lines[0], err
    finally:
        gate.unlink()
    code, _, err = finish(first)
    assert code == OK, err
    assert report(out)["config"]["method"] == "houlsby" and report(out)["status"] == "complete"
    assert hidden_beside(out) == []  # the lock went with its holder


# ------------------------------------------------------------------------ 3, 4. Ctrl-C and SIGTERM


def test_ctrl_c_stops_a_sweep_and_stores_only_complete_runs(tmp_path, wrapper):
    store, gate = tmp_path / "store", tmp_path / "gate"
    gate.touch()
    sweep = start(wrapper, *SWEEP, "--grid", "bottleneck=2,4,8", "--seeds", "0", "--eval-every", "2",
                  "--store", store, HOLD_RUN="2", HOLD_STEP="3", HOLD_WHILE=str(gate))
    wait_for(sweep, "HELD")
    sweep.send_signal(signal.SIGINT)
    code, stdout, err = finish(sweep)
    gate.unlink()
    assert code == INTERRUPTED, err
    assert "Traceback" not in err and "interrupted after 1 of this shard's runs" in err
    assert stdout.count("TRAINING") == 0  # nothing trained after the interrupt (the HELD line was read already)
    records = RunStore(store).records()
    assert [r["key"]["settings"]["bottleneck"] for r in records] == [2] and records[0]["status"] == "complete"
    assert "mean" not in stdout  # nothing averaged
    assert not list(store.glob("*.tmp")) and not list(store.glob(".*"))


def test_sigterm_during_train_keeps_the_run_so_far_like_ctrl_c(tmp_path, wrapper):
    out, gate = tmp_path / "run", tmp_path / "gate"
    gate.touch()
    train = start(wrapper, "train", "--out", out, *FAST, "--epochs", "3", HOLD_RUN="1", HOLD_STEP="3",
                  HOLD_WHILE=str(gate))
    wait_for(train, "HELD")
    train.send_signal(signal.SIGTERM)
    code, _, err = finish(train)
    gate.unlink()
    assert code == INTERRUPTED, err
    assert any("interrupted (SIGTERM) after 2 steps" in line for line in error_lines(err, "train")), err
    saved = report(out)
    assert saved["status"] == "interrupted" and saved["history"]["steps"] == [1, 2]
    assert hidden_beside(out) == []  # no staging folder, no lock
    model, _, _ = load_backbone(TINY)
    load_adapter_set(model, out)


# ------------------------------------------------------------------------ 5. a kill inside a commit


def test_a_kill_between_the_commit_renames_is_finished_by_the_next_command(tmp_path, wrapper, capsys):
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), *FAST, "--method", "full"]) == OK
    killed = start(wrapper, "train", "--out", out, *FAST, "--seed", "3", "--overwrite", KILL_IN_COMMIT="1")
    code, _, err = finish(killed)
    assert code == -signal.SIGKILL, err
    assert not out.exists()  # the moment the kill came: the old run aside, the new one not in place
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out), "--max-eval", "16"]) == OK
    assert "now holds the run a process killed while writing it had finished" in capsys.readouterr().err
    saved = report(out)
    assert saved["status"] == "complete" and saved["config"]["seed"] == 3 and saved["config"]["method"] == "houlsby"
    assert hidden_beside(out) == []


def test_train_finishes_a_commit_cut_short_and_says_so(tmp_path, wrapper, capsys):
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), *FAST]) == OK
    code, _, err = finish(start(wrapper, "train", "--out", out, *FAST, "--seed", "5", "--overwrite",
                                KILL_IN_COMMIT="1"))
    assert code == -signal.SIGKILL, err
    capsys.readouterr()
    assert main(["train", "--out", str(out), *FAST]) == USAGE  # no --overwrite: the recovered run stays
    err = capsys.readouterr().err
    assert "now holds the run" in err and "already holds a houlsby run on sst2" in err
    assert report(out)["config"]["seed"] == 5 and hidden_beside(out) == []


def test_a_commit_cut_short_whose_staging_folder_was_deleted_keeps_the_old_run(tmp_path, wrapper, capsys):
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), *FAST, "--seed", "1"]) == OK
    code, _, err = finish(start(wrapper, "train", "--out", out, *FAST, "--seed", "5", "--overwrite",
                                KILL_IN_COMMIT="1"))
    assert code == -signal.SIGKILL, err
    for staging in tmp_path.glob(".run.incomplete-*"):  # hidden and, as the docs say, safe to delete
        shutil.rmtree(staging)
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out), "--max-eval", "16"]) == OK
    assert "holds its earlier run again" in capsys.readouterr().err
    assert report(out)["config"]["seed"] == 1 and is_run_folder(out) and hidden_beside(out) == []


def test_a_link_planted_at_the_lock_is_never_followed(tmp_path, capsys, monkeypatch):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / ".run.lock").symlink_to(victim)
    no_loading(monkeypatch)
    assert main(["train", "--out", str(tmp_path / "run"), *FAST]) == USAGE
    assert ".run.lock" in only_line(capsys, "train")
    assert victim.read_text() == "keep me" and not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", [["train", *FAST, "--out"], ["evaluate", "--checkpoint"]])
def test_a_symbolic_link_loop_is_refused_in_one_line(tmp_path, capsys, monkeypatch, command):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    no_loading(monkeypatch)
    assert main([*command, str(tmp_path / "a")]) == USAGE
    assert "leads back to itself" in only_line(capsys, command[0])


def test_train_into_the_root_folder_is_refused_in_one_line(capsys, monkeypatch):
    no_loading(monkeypatch)
    assert main(["train", "--out", "/", *FAST]) == USAGE
    assert "--out / is the current folder or holds it" in only_line(capsys, "train")


def test_export_never_replaces_the_run_it_reads(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--out", str(run), *FAST, "--method", "lora", "--lora-rank", "2"]) == OK
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    capsys.readouterr()
    for out in (run, tmp_path):
        assert main(["export", str(run), "--to", "peft", "--out", str(out), "--overwrite"]) == USAGE
        assert "the folder being read" in only_line(capsys, "export")
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before and hidden_beside(run) == []


def test_what_a_kill_9_left_is_cleared_by_the_next_train(tmp_path, wrapper, capsys):
    out, gate = tmp_path / "run", tmp_path / "gate"
    gate.touch()
    killed = start(wrapper, "train", "--out", out, *FAST, HOLD_RUN="1", HOLD_STEP="2", HOLD_WHILE=str(gate))
    wait_for(killed, "HELD")
    killed.kill()
    finish(killed)
    gate.unlink()
    left = hidden_beside(out)
    assert any(".incomplete-" in name for name in left) and not out.exists()
    assert main(["train", "--out", str(out), *FAST]) == OK  # the dead process's lock does not hold it back
    assert "removed 1 unfinished folder a stopped or killed run" in capsys.readouterr().err
    assert hidden_beside(out) == [] and report(out)["status"] == "complete"


# ------------------------------------------------------------------------ 6. sizes within what a model can be


@pytest.mark.parametrize("arguments, option", [
    (["count", "--num-labels", "1000000000000"], "--num-labels"),
    (["count", "--bottleneck", "10000000"], "--bottleneck"),
    (["count", "--method", "lora", "--lora-rank", "99999999"], "--lora-rank"),
    (["train", "--out", "x", "--batch-size", "100000000"], "--batch-size"),
    (["train", "--out", "x", "--top-k", "5000"], "--top-k"),
    (["sweep", "--steps", "10000000000"], "--steps"),
])
def test_every_size_is_bounded_before_anything_is_built(capsys, monkeypatch, arguments, option):
    no_loading(monkeypatch)

    def refuse(*args, **kwargs):
        raise AssertionError("a model was built before its size was checked")

    monkeypatch.setattr(counting, "compare_counts", refuse)
    monkeypatch.setattr(counting, "compare_method_counts", refuse)
    assert main(arguments) == USAGE
    line = only_line(capsys, arguments[0])
    assert f"{option} must be at most" in line


# ------------------------------------------------------------------------ 7. non-finite weights


def test_an_adapter_set_with_nan_weights_is_refused_naming_the_tensor(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), *FAST]) == OK
    model, _, info = load_backbone(TINY)
    load_adapter_set(model, out)
    manifest = json.loads((out / "adapter_config.json").read_text())
    name = sorted(manifest["tensors"])[0]
    with torch.no_grad():
        dict(model.named_parameters())[name][0].fill_(float("nan"))
    with pytest.raises(CheckpointError, match=f"tensor {name} holds NaN or infinite values; nothing was saved"):
        save_adapter_set(model, out, backbone=info, extra=manifest["extra"])
    tensors = {key: value.contiguous() for key, value in model.state_dict().items() if key in manifest["tensors"]}
    (out / "adapters.safetensors").write_bytes(safetensors.torch.save(tensors))  # a valid file that holds NaN
    manifest["sha256"] = hashlib.sha256((out / "adapters.safetensors").read_bytes()).hexdigest()
    (out / "adapter_config.json").write_text(json.dumps({**manifest, "checksum": manifest_checksum(manifest)}))
    with pytest.raises(CheckpointError, match=f"tensor {name} holds NaN or infinite values"):
        load_adapter_set(load_backbone(TINY)[0], out)
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out)]) == FAILED
    assert name in only_line(capsys, "evaluate")


# ------------------------------------------------------------------------ 8. unwritable, full and read-only disks


def test_a_dangling_symlink_out_is_refused_before_anything_loads(tmp_path, capsys, monkeypatch):
    link = tmp_path / "run"
    link.symlink_to(tmp_path / "nowhere")
    no_loading(monkeypatch)
    assert main(["train", "--out", str(link), *FAST]) == USAGE
    assert "symbolic link" in only_line(capsys, "train") and link.is_symlink()


def test_a_read_only_disk_is_found_before_training(tmp_path, capsys, monkeypatch):
    with small_disk(tmp_path / "disk") as disk:
        (disk / "empty").mkdir()
        read_only(disk)
        no_loading(monkeypatch)
        assert main(["train", "--out", str(disk / "empty"), *FAST]) == USAGE
        assert "read-only" in only_line(capsys, "train")
        assert main(["train", "--out", str(disk / "new"), *FAST]) == USAGE
        assert "read-only" in only_line(capsys, "train")
        assert main([*SWEEP, "--grid", "bottleneck=2", "--seeds", "0", "--store", str(disk / "store")]) == USAGE
        line = only_line(capsys, "sweep")
        assert "cannot be written (the file system is read-only)" in line and "Errno" not in line


def test_a_disk_that_fills_during_training_keeps_the_run_and_says_where(tmp_path, wrapper):
    with small_disk(tmp_path / "disk", "2m") as disk:
        out, gate = disk / "run", tmp_path / "gate"
        gate.touch()
        train = start(wrapper, "train", "--out", out, *FAST, HOLD_RUN="1", HOLD_STEP="2", HOLD_WHILE=str(gate))
        wait_for(train, "HELD")
        with contextlib.suppress(OSError), open(disk / "filler", "wb") as filler:
            while True:
                filler.write(b"\0" * 65536)
        gate.unlink()
        code, _, err = finish(train)
        assert code == FAILED, err
        lines = error_lines(err, "train")
        assert len(lines) == 1 and "the disk is full" in lines[0] and "Errno" not in lines[0], err
        kept = Path(lines[0].split("kept in ")[1].split(". ")[0])
        try:
            assert is_run_folder(kept) and report(kept)["status"] == "complete"
            load_adapter_set(load_backbone(TINY)[0], kept)
        finally:
            shutil.rmtree(kept, ignore_errors=True)
        assert not out.exists()


def test_a_complete_run_whose_commit_fails_is_kept_where_the_message_says(tmp_path, capsys, monkeypatch):
    from adapterlab import run_folder

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_folder, "commit_run_folder", fail)
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), *FAST]) == FAILED
    line = only_line(capsys, "train")
    kept = Path(line.split("kept in ")[1].split(":")[0])
    assert "the disk is full" in line and is_run_folder(kept)


# ------------------------------------------------------------------------ 9. one bad record never breaks a store


def test_bad_records_are_skipped_with_one_warning_each(tmp_path, capsys):
    store = tmp_path / "store"
    sweep = [*SWEEP, "--grid", "bottleneck=2", "--seeds", "0,1,2", "--store", str(store)]
    assert main(sweep) == OK
    paths = sorted(store.glob("*.json"))
    records = [json.loads(path.read_text()) for path in paths]
    paths[0].write_text(json.dumps({**records[0], "best_metric": None}))
    paths[1].write_text(json.dumps({k: v for k, v in records[1].items() if k != "metric"}))
    paths[2].write_text("[" * 100_000 + "]" * 100_000)
    capsys.readouterr()
    with pytest.warns(UserWarning) as caught:
        assert main(sweep) == OK
    out = capsys.readouterr().out
    assert "over 3 seeds" in out and "(3 trained now)" in out  # each damaged run trained again, not trusted
    warned = [str(w.message) for w in caught if "skipping the stored run" in str(w.message)]
    assert sorted(Path(m.split("skipping the stored run ")[1].split(":")[0]) for m in warned) == paths
    assert len(RunStore(store).records()) == 3  # and rewritten whole
    (store / "stray.json").write_text('{"key": {"settings": {"seed": 0}}, "status": "complete"}')
    with pytest.warns(UserWarning, match="stray.json: it names no metric"):
        assert len(RunStore(store).records()) == 3


def test_damaged_metrics_and_configs_are_named_not_reported_missing(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "metrics.json").write_text('{"config": "x"}')
    assert main(["evaluate", "--checkpoint", str(folder)]) == USAGE
    assert "not in the format adapterlab train writes" in only_line(capsys, "evaluate")
    (folder / "metrics.json").write_text('{"status": "compl')
    assert main(["evaluate", "--checkpoint", str(folder)]) == USAGE
    line = only_line(capsys, "evaluate")
    assert "not valid JSON" in line and "no metrics.json" not in line
    (folder / "metrics.json").write_text("[" * 100_000 + "]" * 100_000)
    assert main(["evaluate", "--checkpoint", str(folder)]) == USAGE
    assert "nested too deeply" in only_line(capsys, "evaluate")
    (folder / "metrics.json").unlink()
    (folder / "adapter_config.json").write_text("{" + '"a":{' * 100_000 + "}" * 100_001)
    assert main(["evaluate", "--checkpoint", str(folder)]) == USAGE
    assert "nested too deeply" in only_line(capsys, "evaluate")


# ------------------------------------------------------------------------ 10. identical settings are one point


def test_a_tsv_whose_sentences_are_all_empty_is_refused_in_one_line(tmp_path, capsys):
    glue = tmp_path / "glue" / "SST-2"
    glue.mkdir(parents=True)
    for split in ("train", "dev"):
        (glue / f"{split}.tsv").write_text("sentence\tlabel\n\t0\n  \t1\n\t1\n")
    assert main(["train", "--data", str(tmp_path / "glue"), "--out", str(tmp_path / "run"), *FAST]) == FAILED
    assert "every row's text is empty" in only_line(capsys, "train")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("grid", ["bottleneck=8,8", "init_scale=0.01,1e-2"])
def test_identical_settings_are_one_point(tmp_path, capsys, grid):
    assert main([*SWEEP, "--grid", grid, "--seeds", "0,1", "--store", str(tmp_path)]) == OK
    out = capsys.readouterr().out
    assert "sample sd over 2 seeds" in out and "over 4 seeds" not in out
    assert len(RunStore(tmp_path).records()) == 2


def test_a_grid_value_the_method_ignores_is_one_point_and_said(tmp_path, capsys):
    assert main([*SWEEP, "--method", "head", "--grid", "bottleneck=8,64", "--seeds", "0,1",
                 "--store", str(tmp_path)]) == OK
    captured = capsys.readouterr()
    assert "does not read bottleneck" in captured.err
    assert "over 2 seeds" in captured.out and len(RunStore(tmp_path).records()) == 2


# ------------------------------------------------------------------------ 11. no bare NaN in a file


def test_files_never_hold_a_bare_nan(tmp_path, make_classifier):
    write_metrics(tmp_path, {"status": "diverged", "history": {"loss": [0.7, float("nan"), float("inf")]}})
    text = (tmp_path / "metrics.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["history"]["loss"] == [0.7, None, None]
    model = make_classifier()
    add_adapters(model, AdapterConfig(bottleneck=4))
    save_adapter_set(model, tmp_path / "set", extra={"metrics": {"loss": float("nan"), "accuracy": 0.5}})
    manifest = (tmp_path / "set" / "adapter_config.json").read_text()
    assert "NaN" not in manifest and json.loads(manifest)["extra"]["metrics"] == {"loss": None, "accuracy": 0.5}
    load_adapter_set(make_classifier(), tmp_path / "set")  # its checksum covers the null
    assert json_safe({"a": (float("nan"), 1, True, "x")}) == {"a": [None, 1, True, "x"]}


def test_evaluate_prints_no_score_for_a_nan_metric(tmp_path, capsys, monkeypatch):
    from adapterlab import evaluation

    out = tmp_path / "run"
    assert main(["train", "--out", str(out), *FAST]) == OK
    monkeypatch.setattr(evaluation, "evaluate", lambda *args, **kwargs: {"accuracy": 0.5, "loss": float("nan")})
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out)]) == FAILED
    captured = capsys.readouterr()
    assert "0.5" not in captured.out and "accuracy" not in captured.out
    lines = error_lines(captured.err, "evaluate")
    assert len(lines) == 1 and "loss came out NaN or infinite" in lines[0] and "no score is reported" in lines[0]


# ------------------------------------------------------------------------ 12. arguments: one line, the right code


@pytest.mark.parametrize("arguments, words", [
    (["train", "--out", "x", "--seed", "1e23"], "--seed"),
    (["train", "--out", "x", "--seed", str(2**32)], "--seed must be an integer from 0 to 4294967295"),
    (["train", "--out", "x", "--seed", "-1"], "--seed must be an integer from 0"),
    (["sweep", "--grid", "bottleneck=abc"], "--grid 'bottleneck=abc': bottleneck must be an integer"),
    (["train", "--out", "x", "--method", "prefix"], "--method must be one of houlsby"),
    (["train"], "--out"),
    (["frobnicate"], "'frobnicate'"),
])
def test_bad_arguments_are_one_line_and_exit_2(capsys, monkeypatch, arguments, words):
    no_loading(monkeypatch)
    assert main(arguments) == USAGE
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("adapterlab") and words in lines[0], err
    assert "Traceback" not in err and "Overflow" not in err and "invalid literal" not in err


def test_run_py_names_an_unknown_word():
    done = subprocess.run([sys.executable, str(ROOT / "run.py"), "frobnicate"], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 2 and "'frobnicate'" in done.stderr.splitlines()[0]


# ------------------------------------------------------------------------ 13. paths


def test_a_relative_run_store_is_read_against_the_project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ADAPTERLAB_RUNS", "runs/elsewhere")
    assert default_stores()[0].folder == ROOT / "runs" / "elsewhere"


def test_a_long_legal_out_name_trains(tmp_path, capsys):
    out = tmp_path / ("r" * 250)
    assert main(["train", "--out", str(out), *FAST]) == OK
    assert report(out)["status"] == "complete" and hidden_beside(out) == []
    assert main(["train", "--out", str(out), *FAST, "--overwrite"]) == OK and hidden_beside(out) == []


def test_a_symlinked_out_writes_the_run_into_its_target(tmp_path, capsys):
    target, link = tmp_path / "target", tmp_path / "link"
    target.mkdir()
    link.symlink_to(target)
    assert main(["train", "--out", str(link), *FAST]) == OK
    assert link.is_symlink() and report(target)["status"] == "complete"
    assert main(["train", "--out", str(link), *FAST, "--overwrite", "--seed", "2"]) == OK
    assert link.is_symlink() and report(target)["config"]["seed"] == 2 and hidden_beside(target) == []


def test_temporary_files_of_killed_writes_are_cleared(tmp_path):
    store = RunStore(tmp_path)
    stale, fresh = tmp_path / ".0123.json.abcdef.tmp", tmp_path / ".4567.json.abcdef.tmp"
    stale.write_text("{")
    fresh.write_text("{")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    store.check_writable()  # what a sweep or ablation does before it trains
    assert not stale.exists() and fresh.exists()  # a write in progress elsewhere is left alone


def test_record_ids_are_unchanged():
    for path in sorted((ROOT / "data" / "reference_runs").glob("*.json"))[:20]:
        record = json.loads(path.read_text())
        assert run_id(record["key"]) == record["id"] == path.stem


# ------------------------------------------------------------------------ 14. run.py lab --student as root

RUN_PY_WRAPPER = r'''
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("run_py", sys.argv[1])
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)
run.ensure_environment = lambda *extras: None  # the environment is this one
run.venv_python = lambda: Path(sys.executable)
run.STUDENT_DIR = Path(sys.argv[2])
sys.exit(run.main(sys.argv[3:]))
'''


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs to run as root")
def test_run_py_lab_student_starts_jupyterlab_as_root(tmp_path):
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = tmp_path / "run_py_wrapper.py"
    script.write_text(RUN_PY_WRAPPER)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    environment.update(JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    server = subprocess.Popen([sys.executable, str(script), str(ROOT / "run.py"), str(tmp_path / "student"), "lab",
                               "--student", "--no-browser", f"--port={port}", "--ServerApp.port_retries=0",
                               "--IdentityProvider.token=", "--ServerApp.ip=127.0.0.1"],
                              cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    try:
        deadline, status = time.monotonic() + 240, None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=5) as answer:
                    status = answer.status
                    break
            except OSError:
                time.sleep(0.5)
        assert status == 200, server.poll()
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the group this test started: run.py and its JupyterLab
        output, _ = server.communicate(timeout=60)
    assert "running as root, so JupyterLab is started with root allowed" in output
    assert "Running as root is not recommended" not in output
    assert (tmp_path / "student").is_dir()


def test_train_writes_nothing_outside_out_and_its_parent(tmp_path, monkeypatch, capsys):
    work, parent = tmp_path / "work", tmp_path / "parent"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["train", "--out", str(parent / "run"), *FAST]) == OK
    assert main(["train", "--out", str(parent / "run"), *FAST, "--overwrite"]) == OK
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert written == ["parent", "parent/run", "parent/run/adapter_config.json", "parent/run/adapters.safetensors",
                       "parent/run/metrics.json", "work"]


OPEN_GROUP_THEN_TRAIN = """
import sys, torch.distributed as dist
from adapterlab.cli import main
dist.init_process_group("gloo", store=dist.FileStore(sys.argv[1], 1), rank=0, world_size=1)
code = main(sys.argv[2:])
print("open" if dist.is_initialized() else "closed", code)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="gloo is not supported on Windows")
def test_train_closes_the_process_group_it_trained_in(tmp_path):
    # Left open, gloo's threads may abort a process at exit after it wrote its run (exit -6, now and then):
    # the command closes the group in every process, which this checks every time.
    environment = {k: v for k, v in os.environ.items() if k not in ("ADAPTERLAB_DATA", "WORLD_SIZE", "RANK")}
    environment.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", OPEN_GROUP_THEN_TRAIN, str(tmp_path / "store"), "train", "--out",
                           str(tmp_path / "run"), *FAST], cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == f"closed {OK}"
    assert report(tmp_path / "run")["status"] == "complete"


@pytest.mark.skipif(sys.platform == "win32", reason="torchrun's gloo rendezvous is not supported on Windows")
def test_torchrun_train_writes_one_run_from_the_first_process(tmp_path):
    import shutil as shell_tools

    torchrun = shell_tools.which("torchrun", path=str(Path(sys.executable).parent)) or shell_tools.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not installed")
    environment = {k: v for k, v in os.environ.items() if k not in ("ADAPTERLAB_DATA", "WORLD_SIZE", "RANK")}
    environment.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    out = tmp_path / "run"
    done = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2", "-m", "adapterlab", "train",
                           "--out", str(out), *FAST], cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "being written by another" not in done.stderr
    assert report(out)["status"] == "complete" and hidden_beside(out) == []
