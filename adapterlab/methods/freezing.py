"""Methods that add nothing and only choose what trains: full fine-tuning, the head only, LayerNorms only
and the top k layers. Their trained parameters are the backbone's own, so there is nothing to merge."""

from __future__ import annotations

from ..model.placement import PlacementError, encoder_layers
from ..model.trainable import train_only
from ..settings import Setting
from ..validation import check_positive_int
from .registry import Method, register

TOP_K = Setting("top_k", 2, "the number of top transformer layers trained by top_k", int, check=check_positive_int)


def full(model, **_):
    """Everything trains, the pooler too."""
    return train_only(model, lambda name, group: True, train_pooler=True)


def head(model, train_pooler: bool = False):
    return train_only(model, lambda name, group: False, train_pooler=train_pooler)


def layernorm(model, train_pooler: bool = False):
    return train_only(model, lambda name, group: group == "layernorm", train_pooler=train_pooler)


def top_k(model, top_k: int = TOP_K.default, train_pooler: bool = False):
    n_layers = len(encoder_layers(model))
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= n_layers:
        raise PlacementError(f"top_k must be an integer in 1..{n_layers} for this model; got {top_k!r}")
    prefixes = tuple(f".encoder.layer.{i}." for i in range(n_layers - top_k, n_layers))
    return train_only(model, lambda name, group: any(p in f".{name}" for p in prefixes), train_pooler=train_pooler)


# Pretrained weights move with a small rate; the paper sweeps fine-tuning over 3e-5...1e-4.
_FINE_TUNING_RATES = (2e-5, 5e-5, 1e-4, 2e-4)
register(Method("full", "Full fine-tuning", "every parameter of the backbone, the pooler included",
                learning_rate=5e-5, learning_rates=_FINE_TUNING_RATES, prepare=full, settings=()))
register(Method("head", "Head only", "the new classifier only (and the pooler with train_pooler)",
                learning_rate=1e-3, learning_rates=(1e-3, 3e-3, 1e-2), prepare=head))
register(Method("layernorm", "LayerNorm only", "every LayerNorm's scale and shift, and the classifier",
                learning_rate=1e-3, learning_rates=(1e-3, 3e-3, 1e-2), prepare=layernorm))
register(Method("top_k", "Top-k layers", "the last top_k transformer layers, and the classifier",
                learning_rate=5e-5, learning_rates=_FINE_TUNING_RATES, prepare=top_k,
                settings=("top_k", "train_pooler"), own_settings=(TOP_K,)))
