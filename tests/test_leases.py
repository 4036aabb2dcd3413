"""Leases: one process trains a run at a time, a dead process's lease is taken over, and a shard with
nothing of its own helps the others without any run trained twice."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from adapterlab.runs import tuning
from adapterlab.runs.leases import Leases
from adapterlab.runs.store import RunStore
from adapterlab.runs.tuning import PROTOCOLS, Point, Protocol, owner, tuned_rows
from adapterlab.training.backbones import TINY


def _held_by(folder, identity, pid):
    """Write the lease file another process would have written."""
    leases = Leases(folder)
    assert leases.take(identity)
    leases._path(identity).write_text(str(pid))


def test_a_run_leased_by_a_live_process_is_refused_and_a_dead_ones_is_taken_over(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _held_by(tmp_path, "run a", other.pid)
        leases = Leases(tmp_path)
        assert not leases.take("run a")
        assert leases.take("run b") and leases.take("run b")   # another run; this process's own lease again
        leases.release("run a")                                  # not ours: left alone
        assert leases._path("run a").read_text() == str(other.pid)
    finally:
        other.kill()
        other.wait()
    assert leases.take("run a")                                  # its holder died: stale
    assert leases._path("run a").read_text() == str(os.getpid())
    leases.release("run a")
    assert not leases._path("run a").exists()


@pytest.fixture
def small_protocol(monkeypatch, tmp_path):
    """One point (the head alone) on the toy data, a few steps per run, and an empty store."""
    monkeypatch.delenv("ADAPTERLAB_DATA", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
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
    assert row["n"] == 3 and len(records) == len(row["grid"]) + 2         # the grid at seed 0, two more seeds
    assert not any((store.folder / ".leases").iterdir())                  # every lease released
    tuning.run_protocol("sst2", stores=[store], shard=(1, 2), backbone=TINY, points=points, poll_seconds=0.01,
                        log=logs.append)
    assert len(store.records()) == len(records)                           # shard 1 finds all of it done


def test_a_lease_held_elsewhere_sends_the_shard_to_the_next_run(small_protocol):
    points, store = small_protocol
    lookup = tuning.stored_lookup("sst2", [store], TINY)
    first, second, *_ = tuning.plan(PROTOCOLS["sst2"], lookup, points)[0]
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _held_by(store.folder / ".leases", tuning._lease("sst2", TINY, first), other.pid)
        trained = []

        def stop_after_one(result):
            trained.append(result)
            raise StopIteration

        try:
            tuning.run_protocol("sst2", stores=[store], backbone=TINY, points=points, poll_seconds=0.01,
                                on_run=stop_after_one, log=lambda *a: None)
        except StopIteration:
            pass
    finally:
        other.kill()
        other.wait()
    assert len(trained) == 1 and lookup(first) is None and lookup(second) is not None
    assert owner(first, 1) == owner(second, 1) == 1
