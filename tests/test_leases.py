"""Leases: one process trains a run at a time, a lease dies with its process however it dies (so nothing
waits on a dead process), concurrent takers never get one run twice, and a shard with nothing of its own
helps the others without any run trained twice."""

from __future__ import annotations

import errno
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading

import lease_race
import pytest

from adapterlab.runs import leases as leases_module
from adapterlab.runs import tuning
from adapterlab.runs.leases import LeaseError, Leases
from adapterlab.runs.store import RunStore
from adapterlab.runs.tuning import PROTOCOLS, Point, Protocol, owner, tuned_rows
from adapterlab.training.backbones import TINY

# A process that takes a lease and stops at one step of taking it (or after it), as a Ctrl-C or a kill
# would find it. It loads leases.py alone, so it starts in a fraction of a second.
HOLDER = textwrap.dedent("""
    import importlib.util, os, signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal, even where the parent ignores Ctrl-C
    spec = importlib.util.spec_from_file_location("leases", sys.argv[1])
    leases = sys.modules["leases"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(leases)
    folder, identity, step = sys.argv[2:5]

    def pause(*_):
        print("paused", flush=True)
        time.sleep(600)

    if step == "opened":       # the file is open, the lock not yet taken
        leases._lock = pause
    elif step == "locked":     # locked, nothing written yet
        leases.Leases._describe = staticmethod(pause)
    elif step == "truncated":  # locked and emptied, the description not written
        write = os.write
        os.write = lambda descriptor, data: pause()
    elif step == "disk-full":  # the description cannot be written
        def full(descriptor, data):
            raise OSError(28, "No space left on device")
        os.write = full
    taken = leases.Leases(folder).take(identity, "houlsby lr 0.001 seed 0")
    pause()
""")
STEPS = ("opened", "locked", "truncated", "described", "disk-full")


def _holder(folder, identity, step):
    """Start a process that stops at ``step`` of taking the lease; return it once it got there."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, leases_module.__file__, str(folder), identity, step],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "paused"
    return process


def _stop(process, how):
    process.send_signal(how)
    process.wait(timeout=30)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "Ctrl-C"])
@pytest.mark.parametrize("step", STEPS)
def test_a_process_stopped_at_any_step_of_a_take_leaves_the_run_free_at_once(tmp_path, step, how):
    process = _holder(tmp_path, "run a", step)
    leases = Leases(tmp_path)
    if step in ("described", "disk-full", "locked", "truncated"):
        assert not leases.take("run a")                         # held while its process lives
        assert leases.holder("run a") is not None
    _stop(process, how)
    assert leases.holder("run a") is None                       # no stale lease: nothing to wait for
    assert leases.take("run a")
    leases.release("run a")
    assert not any(tmp_path.iterdir())


def test_a_waiting_process_is_told_who_holds_the_run_and_since_when(tmp_path):
    process = _holder(tmp_path, "run a", "described")
    try:
        said = Leases(tmp_path).holder("run a")
        assert said.startswith(f"pid {process.pid} on ") and " since " in said and "seed 0" in said
    finally:
        _stop(process, signal.SIGKILL)


@pytest.mark.parametrize("content", [b"", b"garbage", b"0", b"-1", b"1", str(2**80).encode(), b'{"pid": "x"}'])
def test_a_hand_made_lease_file_blocks_nothing_and_breaks_nothing(tmp_path, content):
    leases = Leases(tmp_path)
    leases._path("run a").parent.mkdir(parents=True, exist_ok=True)
    leases._path("run a").write_bytes(content)
    assert leases.holder("run a") is None
    assert leases.take("run a")
    assert Leases(tmp_path).holder("run a").startswith(f"pid {os.getpid()}")
    leases.release("run a")


def test_a_folder_or_a_link_in_a_leases_place_is_named_with_the_fix(tmp_path):
    leases = Leases(tmp_path)
    leases._path("run a").mkdir(parents=True)
    with pytest.raises(LeaseError, match="is a folder, not a lease file: remove it"):
        leases.take("run a")
    target = tmp_path / "elsewhere"
    target.write_text("keep me")
    leases._path("run b").symlink_to(target)
    with pytest.raises(LeaseError, match="is a symbolic link, not a lease file: remove it"):
        leases.take("run b")
    assert target.read_text() == "keep me"


def test_a_hard_link_a_named_pipe_or_a_linked_leases_folder_is_refused_and_nothing_is_written(tmp_path):
    leases = Leases(tmp_path / "store" / ".leases")
    leases.folder.mkdir(parents=True)
    target = tmp_path / "elsewhere"
    target.write_text("keep me")
    os.link(target, leases._path("run a"))
    with pytest.raises(LeaseError, match="is a hard link to another file, which a lease never writes: remove it"):
        leases.take("run a")
    assert target.read_text() == "keep me"

    os.mkfifo(leases._path("run b"))
    outcome = []
    for call in (leases.take, leases.holder):  # the holder's read would wait for a writer for ever
        worker = threading.Thread(target=lambda call=call: outcome.append(_raised(call, "run b")), daemon=True)
        worker.start()
        worker.join(timeout=20)
        assert not worker.is_alive(), f"{call.__name__} blocked on a named pipe"
    assert outcome == ["not a regular file"] * 2

    linked = Leases(tmp_path / "linked")
    linked.folder.symlink_to(tmp_path / "store", target_is_directory=True)
    with pytest.raises(LeaseError, match="is a link or a file, not the store's leases folder"):
        linked.take("run c")
    assert not list((tmp_path / "store").glob("*.lock"))


def _raised(call, identity):
    try:
        call(identity)
    except LeaseError as error:
        return "not a regular file" if "not a regular file" in str(error) else str(error)
    return "no error"


def test_a_full_disk_during_a_take_still_leases_the_run_and_frees_it_after(tmp_path, monkeypatch):
    leases = Leases(tmp_path)

    def full(descriptor, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(leases_module.os, "write", full)
        assert leases.take("run a")
    other = Leases(tmp_path)
    assert other.holder("run a") == "another process" and not other.take("run a")
    leases.release("run a")                                     # the disk freed: the protocol goes on
    assert other.take("run a")
    other.release("run a")


def test_a_lease_released_between_another_process_s_open_and_its_check_is_taken_not_refused(tmp_path, monkeypatch):
    """The holder removes the file while the taker has it open (its link count is then 0): the taker opens the
    new file and takes it; a removed file is not a hard link to refuse."""
    holder, taker = Leases(tmp_path), Leases(tmp_path)
    assert holder.take("run a")
    real_open = os.open

    def open_then_released(path, *args, **kwargs):
        descriptor = real_open(path, *args, **kwargs)
        holder.release("run a")
        return descriptor

    with monkeypatch.context() as patch:
        patch.setattr(leases_module.os, "open", open_then_released)
        assert taker.take("run a")
    assert taker.holder("run a") is not None
    taker.release("run a")
    assert not any((tmp_path).iterdir())


def test_concurrent_shards_never_train_one_run_twice(tmp_path):
    """3 processes, 20 trials, 6 runs each, every lease file left behind by a dead process beforehand. The
    processes are spawned, not forked: a fork copies the test process's threads' locks (pytest-xdist's, a
    browser test's event loop) in whatever state they are, and a copy that deadlocks on one holds the others
    at the barrier for good."""
    context = multiprocessing.get_context("spawn")
    identities = [f"run {i}" for i in range(6)]
    for trial in range(20):
        stale = Leases(tmp_path / str(trial) / ".leases")
        for identity in identities:
            stale._path(identity).parent.mkdir(parents=True, exist_ok=True)
            stale._path(identity).write_text("99999")
    barrier, problems = context.Barrier(3), context.Queue()
    workers = [context.Process(target=lease_race.race, args=(tmp_path, identities, barrier, 20, problems))
               for _ in range(3)]
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=120)
            assert worker.exitcode == 0
    finally:  # a failed or stuck worker is never left behind holding the others at the barrier
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join()
    found = []
    while not problems.empty():
        found.append(problems.get())
    assert found == []
    assert all((tmp_path / str(trial) / f"{identity}.done").exists() for trial in range(20) for identity in identities)


@pytest.fixture
def small_protocol(monkeypatch, tmp_path, toy_data_only):
    """One point (the head alone) on the toy data, a few steps per run, and an empty store."""
    monkeypatch.setitem(PROTOCOLS, "sst2", Protocol("sst2", validation_rows=40, max_train=64, epochs=1.0, eval_every=2))
    return (Point("head only", "head"),), RunStore(tmp_path / "store")


def test_a_shard_with_nothing_of_its_own_trains_the_other_shards_runs_once(small_protocol):
    points, store = small_protocol
    logs = []
    # Shard 2 of 2 alone: it trains its own runs and, with none left, shard 1's (which no process holds).
    tuning.run_protocol("sst2", stores=[store], shard=(2, 2), backbone=TINY, points=points, poll_seconds=0.01,
                        log=logs.append)
    records = store.records()
    assert len(records) == len({r["id"] for r in records}) == len(logs)   # each run trained once
    assert any("helping shard 1" in line for line in logs)
    row, = tuned_rows("sst2", [store], TINY, points=points)
    # the grid at seed 0, four more seeds, and seed 1 of the runner-up where seed 0 left a near tie
    assert row["n"] == 5 and len(records) == len(row["grid"]) + 4 + bool(row["tie"])
    assert not any((store.folder / ".leases").iterdir())                  # every lease released
    tuning.run_protocol("sst2", stores=[store], shard=(1, 2), backbone=TINY, points=points, poll_seconds=0.01,
                        log=logs.append)
    assert len(store.records()) == len(records)                           # shard 1 finds all of it done


def test_a_run_held_elsewhere_sends_the_shard_to_the_next_run_and_a_killed_holder_costs_no_wait(small_protocol):
    points, store = small_protocol
    lookup = tuning.stored_lookup("sst2", [store], TINY)
    first, second, *_ = tuning.plan(PROTOCOLS["sst2"], lookup, points)[0]
    identity = tuning._lease("sst2", TINY, first)
    process = _holder(store.folder / ".leases", identity, "described")
    trained = []

    def stop_after_one(result):
        trained.append(result)
        raise StopIteration

    try:
        with pytest.raises(StopIteration):
            tuning.run_protocol("sst2", stores=[store], backbone=TINY, points=points, poll_seconds=0.01,
                                on_run=stop_after_one, log=lambda *a: None)
    finally:
        _stop(process, signal.SIGKILL)
    assert len(trained) == 1 and lookup(first) is None and lookup(second) is not None
    assert owner(first, 1) == owner(second, 1) == 1
    logs = []                                  # the holder was killed mid-run: the next tune takes its run at once
    tuning.run_protocol("sst2", stores=[store], backbone=TINY, points=points, poll_seconds=0.01, log=logs.append)
    assert lookup(first) is not None and not any("waiting" in line for line in logs)


def test_a_shard_waiting_on_a_held_run_says_once_who_holds_it(small_protocol, monkeypatch):
    points, store = small_protocol
    lookup = tuning.stored_lookup("sst2", [store], TINY)
    ready = tuning.plan(PROTOCOLS["sst2"], lookup, points)[0]
    processes = [_holder(store.folder / ".leases", tuning._lease("sst2", TINY, config), "described")
                 for config in ready]
    logs, polls = [], []

    def poll(seconds):
        polls.append(seconds)
        if len(polls) == 5:                    # five looks at the same held runs, then their holders die
            for process in processes:
                _stop(process, signal.SIGKILL)

    monkeypatch.setattr(tuning.time, "sleep", poll)
    try:
        tuning.run_protocol("sst2", stores=[store], backbone=TINY, points=points, log=logs.append)
    finally:
        for process in processes:
            if process.poll() is None:
                _stop(process, signal.SIGKILL)
    waiting = [line for line in logs if "waiting" in line]
    assert len(waiting) == 1                                  # said once, not at every look
    assert f"held by pid {processes[0].pid} on " in waiting[0] and " since " in waiting[0]
    assert tuned_rows("sst2", [store], TINY, points=points)[0]["n"] == 5
