"""Sweeps: a grid of settings × seeds, every run stored, split into shards, resumed where it stopped.

``adapterlab sweep`` (and :func:`run_sweep`) expands a grid such as ``bottleneck=2,8,64`` ×
``init_scale=1e-3,1e-2`` × seeds 0–2 into a fixed list of runs. ``--shard I/N`` takes every N-th run
starting at the I-th (counting from 1), so N processes, machines or GPUs of a batch scheduler share one
grid without talking to each other; each run is stored in the run store as it finishes
(:mod:`adapterlab.runstore`), the store merges the shards' results, and a sweep started again skips every
run already stored — an interrupted sweep resumes where it stopped.

Every run trains in its config's precision (:mod:`adapterlab.precision`). ``adapterlab sweep`` defaults to
fp32: the reference runs are fp32, and "auto" could resolve to bf16 on one shard's machine and fp32 on
another's, splitting one grid into two precisions that never stand in for each other. ``--precision bf16``
(or ``--grid precision=fp32,bf16`` to compare the two) is for a machine that computes bf16 fast.
"""

from __future__ import annotations

import dataclasses
import itertools
import json

from tqdm.auto import tqdm

from ..training.config import settings
from .store import RunStore, key_settings, run_or_load


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` (1 ≤ I ≤ N) as (I, N)."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard must look like I/N, e.g. 1/2 for the first of two shards; got {text!r}") from None
    if not 1 <= index <= count:
        raise ValueError(f"--shard I/N needs 1 <= I <= N; got {text!r}")
    return index, count


def parse_grid(options: list[str], config_class=None) -> dict[str, list]:
    """``["bottleneck=2,8", "init_scale=1e-3,1e-2"]`` as ``{"bottleneck": [2, 8], ...}``, each value parsed and
    checked by its declared setting (:mod:`adapterlab.settings`); the error names the option."""
    declared = {name: setting for name, setting in settings().items() if name not in ("seed", "progress", "device")}
    grid: dict[str, list] = {}
    for option in options:
        name, _, values = option.partition("=")
        name = name.strip().replace("-", "_")
        if name not in declared:
            raise ValueError(f"--grid {option!r}: no training setting {name!r}; one of {', '.join(declared)} "
                             "(seeds: --seeds)")
        if not values:
            raise ValueError(f"--grid {option!r} has no values: write {name}=V1,V2,...")
        if name in grid:
            raise ValueError(f"--grid names {name!r} twice: give all its values in one option")
        try:
            grid[name] = [declared[name].parse(value.strip()) for value in values.split(",")]
        except ValueError as error:
            raise ValueError(f"--grid {option!r}: {error}") from None
    return grid


def expand(base, grid: dict[str, list], seeds) -> list:
    """Every combination of the grid's values, for every seed, as TrainConfigs (validated), in a fixed order:
    the grid's last setting varies fastest, then the seed. Values that make the same run (equal numbers written
    twice, or values of a setting the method does not read) give it once."""
    names = list(grid)
    configs, seen = [], set()
    for values in itertools.product(*(grid[name] for name in names)):
        for seed in seeds:
            config = dataclasses.replace(base, **dict(zip(names, values)), seed=seed).validate()
            same = json.dumps([config.precision, key_settings(config)], sort_keys=True)
            if same not in seen:  # bottleneck=8,8, init_scale=0.01,1e-2 or a setting the method ignores: one run
                seen.add(same)
                configs.append(config)
    return configs


def run_sweep(task: str, configs: list, *, stores: list[RunStore], shard: tuple[int, int] = (1, 1),
              backbone: str = "bert-base-uncased", data_dir=None, max_train: int | None = None,
              max_eval: int | None = None, fallback: bool = True, progress: bool = True, on_run=None) -> list:
    """Run this shard's share of ``configs`` (see the module docstring); return a Lookup per run.

    A run already in one of ``stores`` is not trained again; new runs go into the first writable store.
    ``on_run(lookup)`` is called after each run (a caller interrupted part-way still has those). Ctrl-C
    (or SIGTERM) stops the sweep: the run it cut short is neither stored nor handed to ``on_run``, and
    KeyboardInterrupt reaches the caller, as in :func:`adapterlab.ablation_runs.compute_ablation`.
    """
    index, count = shard
    mine = configs[index - 1::count]
    lookups = []
    bar = tqdm(mine, desc=f"sweep {task} shard {index}/{count}", unit="run", disable=not progress)
    for config in bar:
        lookup = run_or_load(task, dataclasses.replace(config, progress=False), backbone=backbone,
                             data_dir=data_dir, max_train=max_train, max_eval=max_eval, fallback=fallback,
                             stores=stores)
        if lookup.result is not None and lookup.result.interrupted:
            raise KeyboardInterrupt  # a run stopped early would stand in for a full one: it is not a result
        lookups.append(lookup)
        if on_run is not None:
            on_run(lookup)
        bar.set_postfix(stored=sum(item.stored for item in lookups), trained=sum(not item.stored for item in lookups))
    return lookups
