"""What one tuning shard does with each run, for the lease race in test_leases.py: a module of its own, which
imports nothing heavier than the leases, so that the race's spawned processes start in a moment."""

from __future__ import annotations

import os

from adapterlab.runs.leases import Leases


def race(folder, identities, barrier, rounds, problems):
    """One of several processes doing what a shard does with each run: take it, skip it if done, train it
    (a marker file that must not exist yet), release it."""
    for trial in range(rounds):
        leases = Leases(folder / str(trial) / ".leases")
        barrier.wait()
        for identity in identities:
            if not leases.take(identity, "race"):
                continue
            done = folder / str(trial) / f"{identity}.done"
            if not done.exists():
                try:
                    descriptor = os.open(done, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                    os.close(descriptor)
                except FileExistsError:
                    problems.put(f"trial {trial}: {identity} trained twice")
            leases.release(identity)
