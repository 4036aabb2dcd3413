"""Accuracy against trained parameters, from stored runs (lab 10): the shape of the paper's Figures 3 and 4.

Every point is a method at one size, trained for three seeds and read from the run store; nothing here
trains. Two sets of points: one shared recipe (the reference settings, :mod:`adapterlab.runs.reference`:
:func:`tradeoff_points`), and the fair comparison, each method at its own tuned rate
(:mod:`adapterlab.runs.tuning`: :func:`tuned_points`). Its x is the number of parameters the
method trains, counted on a copy of the lab's backbone (so a point whose runs are not stored yet still has
its place on the axis), its y the dev metric's mean and spread over the seeds.

Besides the figure, three readings of the same runs: the *Pareto front* (the methods no other method
beats with as few or fewer trained parameters), the *knee* of the adapter-size curve (the smallest r
the seeds do not place behind the best, by the course's rule), and the learning-rate and LayerNorm comparisons.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from torch import nn

from .compare import compare, family
from .reference import REFERENCE_CONFIG, SeedRow, missing_report, seed_rows
from ..model.latency import _shared_copy
from .. import methods
from ..methods import apply_method
from ..model.trainable import trainable_summary
from ..training import TrainConfig

#: The sizes each family is trained at (paper Fig. 3/4: adapters of every size against top-k fine-tuning).
HOULSBY_BOTTLENECKS = (2, 8, 32, 64, 256)
LORA_RANKS = (8, 64)
TOP_K_LAYERS = (1, 2, 3)
#: Peak learning rates of the learning-rate comparison: fine-tuning's usual 2e-5 up to past the adapters' 1e-3.
LEARNING_RATES = (2e-5, 1e-4, 1e-3, 3e-3)


def _config(**settings) -> TrainConfig:
    return dataclasses.replace(REFERENCE_CONFIG, **settings)


#: method → the name its family has in every trade-off figure's legend (the shared recipe's and the tuned one's)
FAMILIES = {"houlsby": "Houlsby", "pfeiffer": "Pfeiffer", "parallel": "Parallel", "lora": "LoRA",
            "top_k": "top-k layers", "layernorm": "LayerNorm only", "bitfit": "BitFit", "head": "head only",
            "full": "full fine-tuning"}


def tradeoff_families() -> dict[str, dict[str, TrainConfig]]:
    """family → {label: TrainConfig}: every point of the trade-off figure, with the reference settings (lab 10).
    The methods are the registry's (:mod:`adapterlab.methods`); these are the points the figure draws."""
    return {
        FAMILIES["houlsby"]: {f"Houlsby r={r}": _config(bottleneck=r) for r in HOULSBY_BOTTLENECKS},
        FAMILIES["pfeiffer"]: {"Pfeiffer r=64": _config(method="pfeiffer")},
        FAMILIES["lora"]: {f"LoRA r={r}": _config(method="lora", lora_rank=r) for r in LORA_RANKS},
        FAMILIES["top_k"]: {f"top-{k} layers": _config(method="top_k", top_k=k) for k in TOP_K_LAYERS},
        FAMILIES["layernorm"]: {"LayerNorm only": _config(method="layernorm")},
        FAMILIES["bitfit"]: {"BitFit": _config(method="bitfit")},
        FAMILIES["head"]: {"head only": _config(method="head")},
        FAMILIES["full"]: {"full fine-tuning": _config(method="full")},
    }


def learning_rate_configs() -> dict[str, dict[float, TrainConfig]]:
    """method label → {peak learning rate: TrainConfig}: Houlsby adapters and full fine-tuning (lab 10)."""
    return {label: {lr: _config(method=method, learning_rate=lr) for lr in LEARNING_RATES}
            for label, method in (("Houlsby r=64", "houlsby"), ("full fine-tuning", "full"))}


def layernorm_configs() -> dict[str, TrainConfig]:
    """The same Houlsby adapters with the LayerNorms trained (the paper) and frozen (AdapterHub) (lab 10)."""
    return {"LayerNorms trained": _config(train_layernorm=True), "LayerNorms frozen": _config(train_layernorm=False)}


def trained_parameters(backbone: nn.Module, config: TrainConfig) -> int:
    """How many parameters ``config``'s method trains on this backbone, counted on a copy that shares its
    tensors (the backbone keeps its own trainable flags)."""
    flags = {p: p.requires_grad for p in backbone.parameters()}
    try:
        model = apply_method(_shared_copy(backbone), config.method, **config.method_kwargs())
        return trainable_summary(model).total_trainable
    finally:
        for parameter, flag in flags.items():
            parameter.requires_grad_(flag)


@dataclass(frozen=True)
class Point:
    """One point of the figure: its family, its trained-parameter count and its seeds' row."""

    family: str
    trained: int
    row: SeedRow

    @property
    def label(self):
        return self.row.label


def tradeoff_points(task: str, model: nn.Module, families: dict[str, dict[str, TrainConfig]], **read) -> list[Point]:
    """Every configured point, stored or not, its trained parameters counted on ``model`` (the lab's backbone);
    ``read`` are :func:`adapterlab.experiments.seed_rows`'s keywords (backbone, stores, ...)."""
    points = []
    for method, configs in families.items():
        for row in seed_rows(task, setting=configs, **read):
            points.append(Point(method, trained_parameters(model, row.config), row))
    return points


def tuned_points(rows: list[dict], model: nn.Module) -> list[Point]:
    """The trade-off figure's points from the fair comparison (:func:`adapterlab.runs.tuning.tuned_rows`): each
    method at its own selected rate, one family per method, named as in the shared recipe's figure (a method
    of the registry that figure lacks by its registry label), the trained parameters as the stored runs counted
    them (counted on ``model`` for a point not stored yet)."""
    return [Point(FAMILIES.get(row["method"]) or methods.get(row["method"]).label,
                  row["trained_parameters"] or trained_parameters(model, row["seed_row"].config), row["seed_row"])
            for row in rows]


def points_table(points: list[Point]) -> str:
    """One line per point: its label, the parameters it trains and its mean ± spread over the stored seeds
    (the table beside the trade-off figure in lab 10)."""
    def score(row: SeedRow) -> str:
        return f"{row.mean:.3f} ± {row.std:.3f} (n = {row.n})" if row.n else "not stored yet"
    return "\n".join(f"{p.label:<18}{p.trained:>12,} trained   {score(p.row)}" for p in points)


def missing_by_family(task: str, points: list[Point], backbone: str) -> str:
    """For each family with a missing run: what is missing and the command that makes it; "" when every run is
    stored."""
    reports = {family: missing_report(task, [p.row for p in points if p.family == family], backbone)
               for family in dict.fromkeys(p.family for p in points)}
    return "\n".join(f"{family}: {report}" for family, report in reports.items() if not report.startswith("all"))


def pareto_front(points: dict) -> list:
    """The labels of ``points`` (label → (trained parameters, score)) that no other point
    dominates, from the fewest trained parameters to the most. A point is dominated when
    another has at most as many parameters and at least its score, and is better in one
    of the two (lab 10)."""
    best, last, front = -math.inf, None, []
    by_count = sorted(points.items(), key=lambda item: (item[1][0], -item[1][1]))
    for label, (count, score) in by_count:
        # an exact twin of a front point dominates nothing, nor is dominated
        if score > best or (count, score) == last:
            front.append(label)
            best, last = max(best, score), (count, score)
    return front


def knee(rows: list[SeedRow]) -> tuple[SeedRow | None, str]:
    """The knee of the adapter size under the course's rule (:func:`~.compare.compare`): in rows of increasing
    size, the first that the seeds do not place behind the best mean, every smaller one being behind it; past
    it, more capacity buys nothing the seeds can see (labs 7 and 10). The smaller sizes' verdicts against the
    best are one family (:func:`~.compare.family`). Returns that row, or None where the seeds cannot place a
    smaller size (or a row has fewer than two runs), and one line saying why."""
    if len(rows) < 2 or any(row.n < 2 for row in rows):
        return None, "the knee of r: not stored yet (every size needs two seeds or more)"
    best = max(rows, key=lambda row: row.mean)
    smaller = rows[:next(i for i, row in enumerate(rows) if row is best)]
    verdicts = family([compare(row, best, names=(str(row.label), str(best.label))) for row in smaller])
    for row, verdict in zip(smaller, verdicts):
        if verdict.verdict == "undecided":
            return None, f"the knee of r: undecided, the seeds cannot place {row.label} against {best.label}"
        if verdict.verdict != "behind":
            return row, f"the knee of r: {row.label} ({verdict.describe()})"
    return best, f"the knee of r: {best.label}, the best mean (every smaller size is behind it)"
