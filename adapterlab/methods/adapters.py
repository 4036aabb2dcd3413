"""Bottleneck adapters as training methods: the houlsby, pfeiffer and parallel placements.

The surgery is :mod:`adapterlab.model.placement`; here each placement is declared as a method with the
settings an adapter set reads. All three share one saved-set kind (an ``adapter`` manifest entry holding
the :class:`~adapterlab.model.placement.AdapterConfig`).
"""

from __future__ import annotations

from ..model.adapter import ACTIVATIONS, INIT_SCHEMES, PAPER_INIT_SCALE
from ..model.counting import bert_counts
from ..model.fold import fold_adapters
from ..model.placement import PLACEMENTS, AdapterConfig, add_adapters, adapter_config, remove_adapters
from ..model.trainable import parameter_group  # noqa: F401  (what holds() receives as group)
from ..settings import Setting
from ..validation import check_init_scale, check_positive_int
from .registry import TRAIN_POOLER, Method, SavedSet, register

BOTTLENECK = Setting("bottleneck", 64, "bottleneck size r of every adapter", int, check=check_positive_int)
ACTIVATION = Setting("activation", "gelu", "the adapter's nonlinearity f (identity: the linear adapter of lab 3)",
                     str, choices=ACTIVATIONS)
INIT = Setting("init", "houlsby",
               "how the adapter starts: houlsby (near-identity), zero_up (W_up = 0, as LoRA starts), bert",
               str, choices=INIT_SCHEMES)
INIT_SCALE = Setting("init_scale", PAPER_INIT_SCALE, "standard deviation sigma of the adapter's initial weights",
                     float, check=lambda name, value: check_init_scale(value))
TRAIN_LAYERNORM = Setting("train_layernorm", True,
                          "train the LayerNorms with the adapters (the paper does; AdapterHub does not)", bool)
ADAPTER_SETTINGS = (BOTTLENECK, ACTIVATION, INIT, INIT_SCALE, TRAIN_LAYERNORM)


def _describe(model):
    config = adapter_config(model)
    return None if config is None else config.as_dict()


def _holds(entry: dict, name: str, group: str) -> bool:
    return group in ("adapters", "classifier") or (group == "layernorm" and entry["train_layernorm"]) \
        or (group == "pooler" and entry["train_pooler"])


def _rebuild(model, entry: dict):
    add_adapters(model, AdapterConfig.from_dict(entry))
    return lambda: remove_adapters(model)


def _check(entry: dict) -> dict:
    return AdapterConfig.from_dict(entry, what="the adapter entry").as_dict()


ADAPTER_SET = SavedSet("adapter", None, _describe, _holds, _rebuild, _check, kind="adapters")


def _count(config, placement: str, bottleneck: int = BOTTLENECK.default, train_layernorm: bool = True, **_):
    counts = bert_counts(config, AdapterConfig.preset(placement, bottleneck=bottleneck, train_layernorm=train_layernorm))
    return {"adapters": counts["adapters"], **({"layernorm": counts["layernorm"]} if train_layernorm else {})}


#: "pfeiffer" first computed Houlsby's FFN adapter alone, LN(h + Δ(h) + x); it now computes Pfeiffer's, the
#: adapter reading the FFN's Add & Norm, LN(h + Δ(z) + x) with z = LN(h + x), as AdapterHub's SeqBnConfig. Its
#: keys carry this mark, so a run of the former (in a student's own store) never stands in for the latter; the
#: shipped runs of the former were moved out of the reference runs (data/reference_runs/houlsby_ffn/).
KEY_MARKS = {"pfeiffer": {"adapter_reads": "add_and_norm_output"}}

SUMMARIES = {
    "houlsby": "two adapters per layer, after attention and after the FFN (Houlsby et al. 2019)",
    "pfeiffer": "one adapter per layer, after the FFN's Add & Norm (Pfeiffer et al. 2020)",
    "parallel": "one adapter per layer beside the FFN, its output scaled by s (He et al. 2021)",
}
LABELS = {"houlsby": "Houlsby adapters", "pfeiffer": "Pfeiffer adapters", "parallel": "Parallel adapters"}

for _placement in PLACEMENTS:
    register(Method(
        name=_placement, label=LABELS[_placement], summary=SUMMARIES[_placement], family="adapters",
        # Adapters start at (near) identity and want a large rate; the paper sweeps 3e-5...3e-3.
        learning_rate=1e-3, learning_rates=(1e-4, 3e-4, 1e-3, 3e-3),
        prepare=lambda model, _p=_placement, **settings: add_adapters(model, _p, **settings),
        settings=tuple(s.name for s in ADAPTER_SETTINGS) + (TRAIN_POOLER.name,),
        own_settings=ADAPTER_SETTINGS, options=("layers", "parallel_scale", "bias"), saved=ADAPTER_SET, merge=fold_adapters,  # linear adapters only: ValueError else
        count=lambda config, _p=_placement, **settings: _count(config, _p, **settings),
        key_marks=KEY_MARKS.get(_placement, {})))
