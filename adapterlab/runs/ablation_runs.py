"""Span ablations kept in the run store, so that lab 8 shows a mean over seeds instead of one noisy run.

One span ablation (:func:`adapterlab.ablation.span_ablation`) of one trained model is a single draw: a
different seed trains different adapters, and 300 dev sentences carry about ±2 points of sampling noise.
So the ablation is stored like a training run (:mod:`adapterlab.runstore`): its key is the key of the
training run it was cut from plus an ``analysis`` entry naming the ablation and how many dev rows it
scored, so it never stands in for the plain run (nor the plain run for it). Computing one trains the model
afresh with :func:`adapterlab.training.run_experiment` (the store keeps numbers, not weights) and then
switches the adapters off span by span on the first ``eval_rows`` dev rows, drawn with the run's seed as
lab 8 draws them. ``adapterlab ablate`` computes a list of seeds, skipping those already stored;
:func:`summarize_ablations` gives the mean and spread of every cell over the seeds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .ablation import SpanAblation, span_ablation
from ..training.config import command_line
from .store import Lookup, RunStore, default_stores, find, key_for, make_record

ANALYSIS = "span_ablation"


def ablation_key(run_key: dict, eval_rows: int) -> dict:
    """The key of the span ablation of the run with ``run_key``, scored on ``eval_rows`` dev rows."""
    if isinstance(eval_rows, bool) or not isinstance(eval_rows, int) or eval_rows < 1:
        raise ValueError(f"eval_rows must be a number of dev rows >= 1; got {eval_rows!r}")
    return {**run_key, "analysis": {"name": ANALYSIS, "eval_rows": eval_rows}}


def ablation_key_for(task: str, config, eval_rows: int, **load_args) -> dict:
    """The ablation key for the run :func:`adapterlab.runstore.key_for` names (same ``load_args``)."""
    return ablation_key(key_for(task, config, **load_args), eval_rows)


def ablation_of(record: dict) -> SpanAblation:
    """The :class:`SpanAblation` a stored ablation record holds (the store writes NaN as null)."""
    stored = record["ablation"]
    scores = np.array([[np.nan if v is None else v for v in row] for row in stored["scores"]], dtype=float)
    return SpanAblation(scores, float(stored["full"]), stored["metric"])


def compute_ablation(task: str, config, eval_rows: int, *, backbone: str = "bert-base-uncased", data_dir=None,
                     max_train: int | None = None, max_eval: int | None = None, fallback: bool = True,
                     trainer=None, evaluate=None, progress: bool = False) -> tuple[dict, dict]:
    """Train the run, ablate every span on its first ``eval_rows`` dev rows; return (ablation record, run record).

    The run record is the plain training run's (:func:`adapterlab.runstore.make_record`); the ablation
    record is the same plus ``ablation``: the score matrix, the score with every adapter on, the metric,
    and the majority-class score of the rows scored. ``trainer`` replaces ``run_experiment`` and
    ``evaluate`` the scoring of :func:`span_ablation` (tests give a continuous score).
    """
    from ..training.backbones import load_backbone
    from ..training.data import get_task, load_split, majority_baseline, tokenize
    from ..training.evaluation import evaluate as evaluate_model
    from ..training import run_experiment

    trainer = run_experiment if trainer is None else trainer
    load_args = {"backbone": backbone, "data_dir": data_dir, "max_train": max_train, "max_eval": max_eval,
                 "fallback": fallback}
    run_key = key_for(task, config, **load_args)
    key = ablation_key(run_key, eval_rows)
    result = trainer(task, config, **load_args)
    if result.interrupted:
        raise KeyboardInterrupt  # a run stopped early would stand in for a full one: store nothing
    info = result.backbone_info
    # run_experiment keeps the tokenizer to itself; the same backbone's tokenizer is the one it used
    _, tokenizer, _ = load_backbone(info.loaded, num_labels=get_task(task).num_labels, fallback=False,
                                    seed=config.seed)
    rows = load_split(task, "dev", data_dir, max_examples=eval_rows, seed=config.seed)
    ablation = span_ablation(result.model, tokenize(rows, tokenizer), evaluate=evaluate or evaluate_model,
                             progress=progress)
    scores = [[None if np.isnan(v) else float(v) for v in row] for row in ablation.scores]
    run_record = make_record(run_key, result)
    record = make_record(key, result) | {"ablation": {
        "metric": ablation.metric, "full": ablation.full, "scores": scores, "eval_rows": len(rows),
        "majority": majority_baseline(rows)[ablation.metric], "eval_data": rows.describe()}}
    return record, run_record


def ablate_or_load(task: str, config, eval_rows: int, *, stores: list[RunStore] | None = None, trainer=None,
                   evaluate=None, progress: bool = False, **load_args) -> Lookup:
    """The stored ablation with these settings, or compute it now and store it (and its training run,
    when that is not stored yet) in the first writable store."""
    stores = default_stores() if stores is None else list(stores)
    writable = next((store for store in stores if not store.read_only), None)
    if writable is None:
        raise ValueError("no writable run store: give one that is not read-only")
    found = find(ablation_key_for(task, config, eval_rows, **load_args), stores)
    if found is not None:
        return found
    record, run_record = compute_ablation(task, config, eval_rows, trainer=trainer, evaluate=evaluate,
                                          progress=progress, **load_args)
    if find(run_record["key"], stores) is None:
        writable.put(run_record)
    writable.put(record)
    return Lookup(record, False, writable)


def run_ablations(task: str, config, seeds, eval_rows: int, *, stores: list[RunStore] | None = None,
                  on_run=None, **options) -> list[Lookup]:
    """:func:`ablate_or_load` for ``config`` at each seed; ``on_run(lookup)`` after each (`adapterlab ablate`)."""
    lookups = []
    for seed in seeds:
        lookup = ablate_or_load(task, replace(config, seed=seed, progress=False), eval_rows, stores=stores, **options)
        lookups.append(lookup)
        if on_run is not None:
            on_run(lookup)
    return lookups


def stored_ablations(task: str, config, seeds, eval_rows: int, *, stores: list[RunStore] | None = None,
                     **load_args) -> list[dict | None]:
    """The stored ablation record of ``config`` at each seed (None where it is missing), computing nothing (lab 8)."""
    found = (find(ablation_key_for(task, replace(config, seed=seed), eval_rows, **load_args), stores)
             for seed in seeds)
    return [None if lookup is None else lookup.record for lookup in found]


@dataclass
class AblationSummary:
    """Every cell of the span ablation over seeds: ``mean`` and ``std`` (sample standard deviation, NaN
    below the diagonal) of the score with layers i..j off. Per seed: ``full`` (every adapter on) and
    ``majority`` on the rows scored, and ``trained``, the training run's own best metric on its dev set."""

    seeds: list[int]
    metric: str
    scores: np.ndarray  # (seeds, L, L)
    full: np.ndarray  # (seeds,)
    majority: np.ndarray  # (seeds,)
    trained: np.ndarray  # (seeds,)

    @property
    def mean(self) -> np.ndarray:
        return self.scores.mean(axis=0)

    @property
    def std(self) -> np.ndarray:
        return self.scores.std(axis=0, ddof=1)

    @property
    def all_removed(self) -> np.ndarray:
        """Per seed: the score with every adapter off."""
        return self.scores[:, 0, -1]

    def ablation(self) -> SpanAblation:
        """The mean over seeds as a :class:`SpanAblation`, for the heatmap."""
        return SpanAblation(self.mean, float(self.full.mean()), self.metric)


def summarize_ablations(records: list[dict]) -> AblationSummary:
    """Stack stored ablations (of one setting, several seeds) for their mean and spread (lab 8)."""
    if len(records) < 2 or any(record is None for record in records):
        raise ValueError("summarize_ablations needs two or more stored ablations, none missing; "
                         "compute them with `adapterlab ablate`")
    metrics = {record["ablation"]["metric"] for record in records}
    if len(metrics) != 1:
        raise ValueError(f"the ablations score different metrics ({', '.join(sorted(metrics))}): "
                         "summarize one task at a time")
    ablations = [ablation_of(record) for record in records]
    return AblationSummary(seeds=[record["key"]["settings"]["seed"] for record in records], metric=metrics.pop(),
                           scores=np.stack([a.scores for a in ablations]),
                           full=np.array([a.full for a in ablations]),
                           majority=np.array([record["ablation"]["majority"] for record in records], dtype=float),
                           trained=np.array([record["best_metric"] for record in records], dtype=float))


def ablate_command_line(task: str, config, seeds, eval_rows: int, store: str = "data/reference_runs",
                        backbone: str = "bert-base-uncased") -> str:
    """The `adapterlab ablate` command that stores these ablations (lab 8 prints it when they are missing)."""
    parts = ["python -m adapterlab ablate", f"--task {task}", f"--seeds {','.join(str(seed) for seed in seeds)}",
             *command_line(config, defaults={"precision": "fp32"}), f"--eval-rows {eval_rows}"]
    if backbone != "bert-base-uncased":
        parts.append(f"--backbone {backbone}")
    parts.append(f"--store {store}")
    return " ".join(parts)
