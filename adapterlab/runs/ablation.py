"""Which layers' adapters matter: switch them off span by span, without retraining (paper Fig. 6).

After training, Houlsby et al. removed the adapters of every contiguous span of layers [i, j] and
evaluated the model as it stood. Because a switched-off adapter runs the layer's original output
module (:func:`adapterlab.placement.set_adapters_enabled`), "removed" here means exactly the frozen
backbone's computation in those layers, with the adapters of the other layers (and the trained
LayerNorms and classifier) untouched. What the paper saw: removing one layer's adapters costs little,
lower layers matter less than upper ones, and removing all of them drops the model to about the
majority-class score, because the head was trained on adapted features.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from tqdm.auto import tqdm

from ..training.data import METRICS
from ..model.placement import PlacementError, adapted_outputs, encoder_layers, set_adapters_enabled
from ..training.evaluation import evaluate as evaluate_model


@dataclass
class SpanAblation:
    """``scores[i, j]`` is the metric with the adapters of layers i..j switched off (NaN where i > j).

    ``full`` is the metric with every adapter on; ``metric`` names the metric.
    """

    scores: np.ndarray
    full: float
    metric: str

    @property
    def num_layers(self) -> int:
        return self.scores.shape[0]

    @property
    def all_removed(self) -> float:
        """The metric with every layer's adapters off (the top-right cell of the heatmap)."""
        return float(self.scores[0, -1])

    def single_layer(self) -> np.ndarray:
        """The diagonal: the metric with one layer's adapters off, per layer."""
        return np.diag(self.scores).copy()

    def rows(self) -> list[dict]:
        """One plain dict per span: first and last layer switched off, the metric, the change from full."""
        n = self.num_layers
        return [
            {"first": i, "last": j, self.metric: float(self.scores[i, j]), "change": float(self.scores[i, j] - self.full)}
            for i in range(n)
            for j in range(i, n)
        ]


def _pick_metric(scores: dict, metric: str | None) -> str:
    if metric is not None:
        if metric not in scores:
            raise ValueError(f"metric must be one of {', '.join(scores)} (what evaluate returned); got {metric!r}")
        return metric
    for name in scores:
        if name in METRICS:
            return name
    raise ValueError(f"evaluate returned no task metric ({', '.join(METRICS)}); pass metric= to name one of {list(scores)}")


def span_ablation(
    model,
    eval_data,
    metric: str | None = None,
    batch_size: int = 32,
    device="auto",
    evaluate: Callable = evaluate_model,
    progress: bool = True,
    spans=None,
) -> SpanAblation:
    """Evaluate the model with the adapters of every contiguous span of layers switched off.

    ``evaluate(model, eval_data, batch_size=..., device=...) -> dict`` scores the model as it stands
    (default :func:`adapterlab.evaluation.evaluate`); ``metric`` picks the score (default: the task's
    main metric, the first of accuracy / matthews / f1 that evaluate returns). That is
    L·(L+1)/2 + 1 evaluations for L layers, so pass a modest ``eval_data``. The default ``batch_size``
    is small because the rows are batched in length order: a few hundred rows in batches of 128 would
    pad most sentences to the longest of the whole set, in 32s each batch only to its own longest.

    ``spans`` limits the evaluations to those (i, j) (the others stay NaN): lab 11 needs only the diagonal,
    ``[(i, i) for i in range(L)]``, L + 1 evaluations per model.

    The adapters are switched back exactly as they were, even after an error or an interrupt: the
    model leaves this function as it came in.
    """
    outputs = adapted_outputs(model)
    if not outputs:
        raise PlacementError("this model has no adapters to ablate; train one with adapters first")
    n = len(encoder_layers(model))
    every = [(i, j) for i in range(n) for j in range(i, n)]
    if spans is None:
        spans = every
    elif not spans or any(tuple(span) not in every for span in spans):
        raise ValueError(f"spans must be pairs (i, j) with 0 <= i <= j < {n} (this model's layers); got {spans!r}")
    saved = [(adapted, adapted.enabled) for _, _, adapted in outputs]
    scores = np.full((n, n), np.nan)
    try:
        for _, _, adapted in outputs:
            adapted.enabled = True
        full_scores = evaluate(model, eval_data, batch_size=batch_size, device=device)
        name = _pick_metric(full_scores, metric)
        for i, j in tqdm(spans, desc="span ablation", disable=not progress):
            set_adapters_enabled(model, False, layers=list(range(i, j + 1)))
            scores[i, j] = evaluate(model, eval_data, batch_size=batch_size, device=device)[name]
            set_adapters_enabled(model, True)
    finally:
        for adapted, enabled in saved:
            adapted.enabled = enabled
    return SpanAblation(scores, float(full_scores[name]), name)
