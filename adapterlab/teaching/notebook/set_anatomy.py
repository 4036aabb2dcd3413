"""Every measurement lab 11 makes on one trained set, beside the same adapters at initialisation, in one call.

The lab opens six sets (two tasks, three seeds) and asks the same questions of each; a cell per question per
set would bury the answers. :func:`measure` answers all of them for one set with :mod:`.anatomy`'s functions,
and the lab reads the tables it returns: how far each adapter moves its input, how large its correction is against
the residual stream, how much of its correction a linear map explains, how much of r it uses, the dev score with
the adapters as trained and linearised and folded away, and how much the score drops with one layer's adapters off.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
from accelerate.utils import set_seed
from torch import nn

from ...model.placement import adapter_config, add_adapters, encoder_layers
from ...runs.ablation import span_ablation
from ...training.data import TokenizedSplit
from ...training.evaluation import eval_batches, evaluate
from . import anatomy


@dataclass
class SetAnatomy:
    """Lab 11's measurements of one trained set. Tables are layers × :data:`~.anatomy.POSITIONS`."""

    task: str
    seed: int
    metric: str
    change_init: np.ndarray  # ‖A(h) − h‖ / ‖h‖ on dev sentences, the adapters at init
    change_trained: np.ndarray  # the same, as trained
    change_residual: np.ndarray  # ‖A(h) − h‖ / ‖x‖, x the residual stream the correction is added to, as trained
    share_init: np.ndarray  # share of the correction the best affine map explains, at init
    share_trained: np.ndarray
    weight_ranks: np.ndarray  # effective rank (90 % energy) of W_up W_down
    bottleneck_ranks: np.ndarray  # effective rank of the bottleneck activations on dev sentences
    bottleneck: int  # r
    dev_trained: float  # the task's metric on dev, adapters as trained
    dev_linear: float  # every adapter replaced by its linear fit and folded into the dense layer before it
    importance: np.ndarray  # per layer: dev score lost with that layer's adapters off

    @property
    def change_per_layer(self) -> np.ndarray:
        """The trained change of each layer, its two adapters averaged: what lab 11 ranks the layers by."""
        return np.nanmean(self.change_trained, axis=1)


def adapters_at_init(trained: nn.Module, pretrained: nn.Module, seed: int) -> nn.Module:
    """A copy of ``pretrained`` (the backbone as loaded, without adapters) with adapters configured as
    ``trained``'s, freshly initialised under ``seed``: the same set at step 0."""
    if adapter_config(pretrained) is not None:
        raise ValueError("pass the backbone as loaded, without adapters: its adapters would be initialised again")
    set_seed(seed)
    return add_adapters(copy.deepcopy(pretrained), adapter_config(trained)).eval()


def measure(model: nn.Module, at_init: nn.Module, dev: TokenizedSplit, fit: TokenizedSplit, *, task: str,
            seed: int, energy: float = 0.9, scores: bool = True) -> SetAnatomy:
    """Lab 11's measurements of the trained ``model`` (eval mode) and of ``at_init`` (its adapters at step 0).

    The changes, bottleneck ranks and scores are on ``dev``; the linear fits are made on what the adapters read
    on ``fit`` (training sentences: at least ten real tokens per unknown, as lab 3 requires), so the linearised
    model's dev score is measured on sentences its fit never saw. ``scores=False`` leaves out the evaluations
    (dev scores and importance are then NaN), which take most of the time: lab 11 re-measures a stored set so.
    """
    metric = "matthews" if task == "cola" else "accuracy"
    seen, streams = anatomy.inputs_and_residuals(model, eval_batches(dev, 64))
    seen_init = anatomy.adapter_inputs(at_init, eval_batches(dev, 64))
    fitted_on = anatomy.adapter_inputs(model, eval_batches(fit, 64))
    fitted_on_init = anatomy.adapter_inputs(at_init, eval_batches(fit, 64))
    layers = len(encoder_layers(model))
    if scores:
        diagonal = span_ablation(model, dev, metric=metric, progress=False, spans=[(i, i) for i in range(layers)])
        full, importance = diagonal.full, anatomy.ablation_importance(diagonal)
        linear = evaluate(anatomy.linearise_and_fold(model, fitted_on), dev)[metric]
    else:
        full, linear, importance = math.nan, math.nan, np.full(layers, np.nan)
    return SetAnatomy(
        task=task, seed=seed, metric=metric,
        change_init=anatomy.relative_changes(at_init, seen_init),
        change_trained=anatomy.relative_changes(model, seen),
        change_residual=anatomy.residual_changes(model, seen, streams),
        share_init=anatomy.linear_shares(at_init, fitted_on_init),
        share_trained=anatomy.linear_shares(model, fitted_on),
        weight_ranks=anatomy.effective_ranks(model, anatomy.weight_spectra(model), energy),
        bottleneck_ranks=anatomy.effective_ranks(model, anatomy.bottleneck_spectra(model, seen), energy),
        bottleneck=adapter_config(model).bottleneck,
        dev_trained=full,
        dev_linear=linear,
        importance=importance,
    )


def as_record(measured: SetAnatomy) -> dict:
    """``measured`` as plain JSON values (tables as nested lists), for :func:`from_record`."""
    return {name: value.tolist() if isinstance(value, np.ndarray) else value
            for name, value in vars(measured).items()}


def from_record(record: dict) -> SetAnatomy:
    """The :class:`SetAnatomy` :func:`as_record` wrote."""
    arrays = {name for name, kind in SetAnatomy.__annotations__.items() if kind == "np.ndarray"}
    return SetAnatomy(**{name: np.asarray(value, dtype=np.float64) if name in arrays else value
                         for name, value in record.items()})


def same_measurements(stored: SetAnatomy, live: SetAnatomy, rtol: float = 1e-4) -> bool:
    """Whether ``live`` (re-measured, perhaps without scores) agrees with ``stored`` in every table both hold:
    equal ranks, and changes and shares within ``rtol`` (another CPU rounds a least-squares fit differently)."""
    for name in ("change_init", "change_trained", "change_residual", "share_init", "share_trained", "weight_ranks",
                 "bottleneck_ranks"):
        if not np.allclose(getattr(stored, name), getattr(live, name), rtol=rtol, atol=0, equal_nan=True):
            return False
    return True


def per_seed(anatomies, task: str, field: str) -> list:
    """``field`` of every measured set of ``task``, in seed order: the values the course's rule compares."""
    return [getattr(a, field) for a in sorted(anatomies, key=lambda a: a.seed) if a.task == task]


def mean_table(anatomies, task: str, field: str) -> np.ndarray:
    """The mean of a table (or per-layer array) over the seeds of ``task``."""
    return np.mean(np.stack(per_seed(anatomies, task, field)), axis=0)


def layer_table(columns: dict, number: str = "{:.3f}") -> str:
    """A fixed-width table, one row per adapter (layer, position), one column per table (heading → layers ×
    POSITIONS array), each value written with ``number``: what lab 11 prints under its figures."""
    width = max(9, *(len(heading) for heading in columns))
    lines = [f"{'layer':>5}  {'adapter':<9}" + "".join(f"  {heading:>{width}}" for heading in columns)]
    layers = len(next(iter(columns.values())))
    for layer in range(layers):
        for index, position in enumerate(anatomy.POSITIONS):
            cells = "".join(f"  {number.format(float(table[layer][index])):>{width}}" for table in columns.values())
            lines.append(f"{layer:>5}  {position:<9}{cells}")
    return "\n".join(lines)


TASK_NAMES = {"sst2": "SST-2", "cola": "CoLA"}
METRIC_NAMES = {"accuracy": "accuracy", "matthews": "MCC"}


def _span(values, number: str = "{:.3f}") -> str:
    """The smallest and largest of ``values`` (NaN left out), e.g. "0.012 to 0.168"."""
    return f"{number.format(np.nanmin(values))} to {number.format(np.nanmax(values))}"


def _by_position(tables: np.ndarray, number: str = "{:.3f}") -> str:
    """The span of the adapter after attention and of the one after the FFN over every seed's table."""
    return ", ".join(f"{name} {_span(tables[..., column], number)}"
                     for column, name in enumerate(("attention", "FFN")))


def change_claims(anatomies, task: str) -> str:
    """Lab 11's checked lines on how far the adapters of ``task`` moved what they read, ‖A(h) − h‖ / ‖h‖: all near
    the identity at init, all further after training in every seed, the span of each position over every seed,
    the furthest one, and whether the adapter after attention moved further than the one after the FFN in every
    layer (on the mean of the seeds)."""
    init = np.stack(per_seed(anatomies, task, "change_init"))
    trained = np.stack(per_seed(anatomies, task, "change_trained"))
    mean = trained.mean(axis=0)
    layer, column = np.unravel_index(mean.argmax(), mean.shape)
    ahead = bool((mean[:, 0] > mean[:, 1]).all())
    return "\n".join([
        f"{TASK_NAMES[task]}, against h, what the adapter reads:",
        f"  every adapter at init within 1 % of the identity: {bool((init < 0.01).all())}",
        f"  every adapter moved further than at init, every seed: {bool((trained > init).all())}",
        f"  trained, every adapter of every seed: {_by_position(trained)}",
        f"  furthest: layer {layer}, {anatomy.POSITIONS[column]} ({mean.max():.3f})",
        f"  the attention adapter moved further than the FFN one, every layer: {ahead}",
    ])


def residual_claims(anatomies, task: str) -> str:
    """Lab 11's checked lines on the corrections of ``task``'s trained adapters against the residual stream x
    they are added to: how large h is against x at each position (‖h‖ / ‖x‖ = the ratio of the two changes, both
    measured on the same tokens), the span of ‖A(h) − h‖ / ‖x‖ at each position over every seed, the mean of
    each position against h and against x (over layers and seeds) with their ratio, and in which layers the
    FFN adapter's correction is the larger against x (on the mean of the seeds)."""
    against_h = np.stack(per_seed(anatomies, task, "change_trained"))
    against_x = np.stack(per_seed(anatomies, task, "change_residual"))
    h_of_x = against_x / against_h

    def means(tables):
        attention, ffn = np.nanmean(tables[..., 0]), np.nanmean(tables[..., 1])
        return f"attention {attention:.3f}, FFN {ffn:.3f} (ratio {attention / ffn:.1f})"

    mean = against_x.mean(axis=0)
    ffn_larger = [int(layer) for layer in np.flatnonzero(mean[:, 1] > mean[:, 0])]
    return "\n".join([
        f"{TASK_NAMES[task]}, against x, the residual stream:",
        f"  ‖h‖ / ‖x‖, every adapter of every seed: {_by_position(h_of_x, '{:.2f}')}",
        f"  ‖A(h) − h‖ / ‖x‖, every adapter of every seed: {_by_position(against_x)}",
        f"  mean over layers and seeds, against h: {means(against_h)}",
        f"  mean over layers and seeds, against x: {means(against_x)}",
        "  against x, the attention adapter's correction larger than the FFN one's, every layer: "
        f"{not ffn_larger}",
        f"  against x, layers where the FFN adapter's is larger: {ffn_larger}",
    ])


def linear_against_trained(anatomies, task: str):
    """Lab 11's decisive comparison on ``task``: per seed, the dev score as trained and with every adapter
    linearised and folded away (a few lines), and the course's verdict between the two, paired by seed (the
    same trained model on both sides), at the metric's margin."""
    from ...runs.compare import compare, margin_of

    trained, linear = per_seed(anatomies, task, "dev_trained"), per_seed(anatomies, task, "dev_linear")
    metric = next(a.metric for a in anatomies if a.task == task)
    seeds = ", ".join(str(a.seed) for a in sorted(anatomies, key=lambda a: a.seed) if a.task == task)
    rows = "\n".join([f"{TASK_NAMES[task]} dev {METRIC_NAMES[metric]}, seeds {seeds}:",
                      "  adapters as trained:   " + " ".join(f"{v:.3f}" for v in trained),
                      "  linearised and folded: " + " ".join(f"{v:.3f}" for v in linear)])
    verdict = compare(linear, trained, margin_of(metric), names=("linearised and folded", "the trained adapters"),
                      paired=True)
    return rows, verdict
