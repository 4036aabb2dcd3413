"""Accuracy against trained parameters, from stored runs (lab 10): the shape of the paper's Figures 3 and 4.

Every point is a method at one size, trained with the reference settings (:mod:`adapterlab.experiments`)
for three seeds and read from the run store; nothing here trains. Its x is the number of parameters the
method trains, counted on a copy of the lab's backbone (so a point whose runs are not stored yet still has
its place on the axis), its y the dev metric's mean and spread over the seeds.

Besides the figure, three readings of the same runs: the *Pareto front* (the methods no other method
beats with as few or fewer trained parameters), the *knee* of the adapter-size curve (the smallest r
whose mean the seeds cannot tell from the best), and the learning-rate and LayerNorm comparisons.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import plotly.graph_objects as go
from torch import nn

from .reference import REFERENCE_CONFIG, SeedRow, missing_report, seed_rows, within_spread
from ..model.latency import _shared_copy
from ..model.placement import METHODS, apply_method, trainable_summary
from ..teaching.plots import LINE_COLORS, METRIC_AXES, _layout
from ..training.loop import TrainConfig

#: The sizes each family is trained at (paper Fig. 3/4: adapters of every size against top-k fine-tuning).
HOULSBY_BOTTLENECKS = (2, 8, 32, 64, 256)
LORA_RANKS = (8, 64)
TOP_K_LAYERS = (1, 2, 3)
#: Peak learning rates of the learning-rate comparison (paper Appendix B: adapters robust over 2e-5 … 1e-3).
LEARNING_RATES = (2e-5, 1e-4, 1e-3, 3e-3)


def _config(**settings) -> TrainConfig:
    return dataclasses.replace(REFERENCE_CONFIG, **settings)


def tradeoff_families() -> dict[str, dict[str, TrainConfig]]:
    """family → {label: TrainConfig}: every point of the trade-off figure, with the reference settings (lab 10).
    Families whose method this package cannot train are left out."""
    families = {
        "Houlsby": {f"Houlsby r={r}": _config(bottleneck=r) for r in HOULSBY_BOTTLENECKS},
        "Pfeiffer": {"Pfeiffer r=64": _config(method="pfeiffer")},
        "LoRA": {f"LoRA r={r}": (lambda r=r: _config(method="lora", lora_rank=r)) for r in LORA_RANKS},
        "top-k layers": {f"top-{k} layers": _config(method="top_k", top_k=k) for k in TOP_K_LAYERS},
        "LayerNorm only": {"LayerNorm only": _config(method="layernorm")},
        "BitFit": {"BitFit": (lambda: _config(method="bitfit"))},
        "head only": {"head only": _config(method="head")},
        "full fine-tuning": {"full fine-tuning": _config(method="full")},
    }
    method = {"LoRA": "lora", "BitFit": "bitfit"}
    out = {}
    for family, points in families.items():
        if method.get(family, "houlsby") not in METHODS:
            continue
        out[family] = {label: make() if callable(make) else make for label, make in points.items()}
    return out


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
    for family, configs in families.items():
        for row in seed_rows(task, setting=configs, **read):
            points.append(Point(family, trained_parameters(model, row.config), row))
    return points


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
    """The labels of ``points`` (label → (trained parameters, score)) that no other point dominates, from
    the fewest trained parameters to the most. A point is dominated when another has at most as many
    parameters and at least its score, and is better in one of the two (lab 10)."""
    best = -math.inf
    front = []
    for label, (count, score) in sorted(points.items(), key=lambda item: (item[1][0], -item[1][1])):
        if score > best:
            front.append(label)
            best = score
    return front


def knee(rows: list[SeedRow]) -> SeedRow | None:
    """The first row (rows in increasing size) whose mean the seeds cannot tell from the best row's:
    past it, more capacity buys nothing measurable (lab 10). None when fewer than two rows have 2+ runs."""
    measured = [row for row in rows if row.n >= 2]
    if len(measured) < 2:
        return None
    best = max(measured, key=lambda row: row.mean)
    return next(row for row in measured if row is best or within_spread(row, best))


def tradeoff_figure(points: list[Point], title: str, baseline: tuple[str, float] | None = None,
                    note: str = "") -> go.Figure:
    """The dev metric (mean ± sample std over seeds, each seed a faint dot) against trained parameters (log),
    one trace per family; points without stored runs are left out (lab 10)."""
    shown = [p for p in points if p.row.n]
    metric = next((p.row.metric for p in shown if p.row.metric), "accuracy")
    fig = go.Figure()
    for (family, color) in zip(dict.fromkeys(p.family for p in points), LINE_COLORS * 2):
        members = sorted((p for p in shown if p.family == family), key=lambda p: p.trained)
        if not members:
            continue
        fig.add_scatter(
            x=[p.trained for p in members], y=[p.row.mean for p in members], name=family,
            mode="lines+markers" if len(members) > 1 else "markers", marker=dict(size=10, color=color),
            line=dict(color=color), text=[str(p.label) for p in members],
            error_y=dict(type="data", array=[0.0 if p.row.n < 2 else p.row.std for p in members], visible=True),
            hovertemplate="%{text}: %{y:.3f}<br>%{x:,} trained parameters<extra></extra>")
        seeds = [(p.trained, value) for p in members for value in p.row.values]
        fig.add_scatter(x=[x for x, _ in seeds], y=[y for _, y in seeds], mode="markers", showlegend=False,
                        marker=dict(size=5, color=color, opacity=0.35), hoverinfo="skip")
    if baseline is not None:
        fig.add_hline(y=baseline[1], line_dash="dot", line_color="gray", annotation_text=baseline[0],
                      annotation_position="bottom right")
    if note:
        fig.add_annotation(text=note, xref="paper", yref="paper", x=0, y=-0.28, showarrow=False, align="left",
                           font=dict(size=11))
    fig = _layout(fig, title, "trained parameters (log)", METRIC_AXES.get(metric, metric), log_x=True)
    fig.update_layout(height=520, margin=dict(b=120) if note else None)
    return fig


def curve_figure(curves: dict[str, list[tuple[float, SeedRow]]], title: str, x_title: str,
                 mark: tuple[float, SeedRow] | None = None) -> go.Figure:
    """Mean ± spread against one setting on a log axis, one line per curve (label → [(x, row)]), each seed a
    faint dot; ``mark`` (x, row), e.g. the knee, is circled. Rows without stored runs are left out (lab 10)."""
    fig = go.Figure()
    ticks, metric = set(), "accuracy"
    for (label, pairs), color in zip(curves.items(), LINE_COLORS * 2):
        done = [(x, row) for x, row in pairs if row.n]
        ticks |= {x for x, _ in done}
        metric = next((row.metric for _, row in done if row.metric), metric)
        fig.add_scatter(x=[x for x, _ in done], y=[row.mean for _, row in done], mode="lines+markers", name=label,
                        error_y=dict(type="data", array=[0.0 if row.n < 2 else row.std for _, row in done],
                                     visible=True), marker=dict(size=10, color=color), line=dict(color=color))
        seeds = [(x, value) for x, row in done for value in row.values]
        fig.add_scatter(x=[x for x, _ in seeds], y=[y for _, y in seeds], mode="markers", showlegend=False,
                        marker=dict(size=5, color=color, opacity=0.35), hoverinfo="skip")
    if mark is not None:
        fig.add_scatter(x=[mark[0]], y=[mark[1].mean], mode="markers", name=f"knee: {mark[1].label}",
                        marker=dict(size=24, color="rgba(0,0,0,0)", line=dict(width=3, color=LINE_COLORS[3])))
    fig = _layout(fig, title, x_title, METRIC_AXES.get(metric, metric), log_x=True)
    if ticks:
        fig.update_xaxes(tickvals=sorted(ticks))
    return fig
