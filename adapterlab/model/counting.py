"""Parameter counts: the closed forms of the paper beside a count of the real model.

Closed forms (d = hidden size, r = bottleneck, L = layers, k = adapters per layer):

* one adapter: ``(d·r + r) + (r·d + d) = 2rd + r + d`` (``2rd`` without biases)
* all adapters: ``L·k·(2rd + r + d)`` with k = 2 (houlsby), 1 (pfeiffer), 1 (parallel), as
  :attr:`adapterlab.placement.AdapterConfig.adapters_per_layer` says (L counts the adapted layers)
* LayerNorms: ``2d`` each (gain and bias); BERT has ``2L + 1`` of them (two per layer and one
  after the embeddings)
* pooler ``d² + d`` (pretrained, part of the backbone), classifier ``d·n + n`` for n labels
* LoRA on one d_in → d_out matrix: ``r·(d_in + d_out)``
  (``4rdL`` on every layer's query and value, ``r(10d + 2i)L`` on all six dense layers, FFN width i)
* BitFit's biases: ``L·(7d + i) + d`` (pooler and classifier aside)

The real model is built on PyTorch's meta device: every parameter has a shape but no storage, so
even BERT-large is counted without allocating its 1.3 GB of weights.

What trains follows the package's policy (:func:`adapterlab.placement.set_trainable`), which is the
original adapter-bert code's: the adapters, the LayerNorms when ``train_layernorm`` and the new classifier;
the pretrained pooler stays frozen unless ``train_pooler``. The pooler has its own row either way.

Every count of an adapter set reads its settings from one :class:`adapterlab.placement.AdapterConfig`;
the functions that take ``placement, bottleneck, train_layernorm`` (as labs 4 and 5 call them) accept a
preset name or an AdapterConfig there, with ``None`` keeping the config's own bottleneck, LayerNorm and
pooler choice.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from .placement import AdapterConfig, add_adapters, adapted_outputs, make_adapter_config
from .trainable import trainable_summary
from ..validation import SIZE_LIMITS, check_positive_int, check_size

if TYPE_CHECKING:  # transformers is imported where a model is built, so bad input is answered at once
    from transformers import BertConfig, BertForSequenceClassification

FP32_BYTES, FP16_BYTES = 4, 2
#: Adam keeps two fp32 moment buffers (m and v) per trainable parameter.
ADAM_BYTES_PER_PARAM = 2 * FP32_BYTES
MB = 10**6

#: Backbone shapes known by name, as BertConfig arguments (bert-base is BertConfig's default).
NAMED_CONFIGS = {
    "bert-base": {},
    "bert-large": {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096},
}


# --------------------------------------------------------------------------------------------------
# Closed forms
# --------------------------------------------------------------------------------------------------


def adapter_params(d: int, r: int, bias: bool = True) -> int:
    """One bottleneck adapter: W_down (r×d) + b_down (r) + W_up (d×r) + b_up (d)."""
    return 2 * r * d + (r + d if bias else 0)


def model_adapter_params(L: int, k: int, d: int, r: int, bias: bool = True) -> int:
    """k adapters in each of L layers."""
    return L * k * adapter_params(d, r, bias)


def layernorm_params(d: int, n: int) -> int:
    """n LayerNorms of width d: a gain and a bias each."""
    return 2 * d * n


def lora_params(r: int, d_in: int, d_out: int) -> int:
    """LoRA on one d_in → d_out matrix: A (r×d_in) and B (d_out×r)."""
    return r * (d_in + d_out)


def pooler_params(d: int) -> int:
    """BERT's pretrained pooler, a d → d dense layer (frozen unless train_pooler)."""
    return d * d + d


def classifier_params(d: int, num_labels: int) -> int:
    return d * num_labels + num_labels


def bert_backbone_params(config: BertConfig) -> int:
    """BertModel (embeddings, L layers, pooler): the frozen backbone, without the classifier."""
    d, i = config.hidden_size, config.intermediate_size
    embeddings = (config.vocab_size + config.max_position_embeddings + config.type_vocab_size) * d
    attention = 4 * (d * d + d)  # query, key, value, output projection
    ffn = (d * i + i) + (i * d + d)
    per_layer = attention + ffn + layernorm_params(d, 2)
    return embeddings + layernorm_params(d, 1) + config.num_hidden_layers * per_layer + pooler_params(d)


def _adapter_set(placement, bottleneck, train_layernorm, num_labels: int, train_pooler=None) -> AdapterConfig:
    """The AdapterConfig a counting call describes (a preset name or a config; None keeps its value)."""
    check_size("num_labels", num_labels, SIZE_LIMITS["num_labels"])  # BertConfig builds a name per label
    given = {"bottleneck": bottleneck, "train_layernorm": train_layernorm, "train_pooler": train_pooler}
    return make_adapter_config(placement, **{key: value for key, value in given.items() if value is not None})


def _with_derived(counts: dict) -> dict:
    """Add the figures that follow from the trainable total: share, checkpoint size, Adam state."""
    trainable = counts["total_trainable"]
    full = counts["backbone"] + counts["classifier"]
    return {
        **counts,
        "adapters_percent_of_backbone": 100.0 * counts["adapters"] / counts["backbone"],
        "percent_of_backbone": 100.0 * trainable / counts["backbone"],
        "checkpoint_fp32_mb": trainable * FP32_BYTES / MB,
        "checkpoint_fp16_mb": trainable * FP16_BYTES / MB,
        "adam_state_bytes": trainable * ADAM_BYTES_PER_PARAM,
        "adam_state_bytes_full": full * ADAM_BYTES_PER_PARAM,
    }


def bert_counts(
    config: BertConfig,
    placement: str | AdapterConfig = "houlsby",
    bottleneck: int | None = None,
    train_layernorm: bool | None = None,
    num_labels: int = 2,
    train_pooler: bool | None = None,
) -> dict:
    """Closed-form counts for a BERT classifier with an adapter set (labs 4 and 5 tabulate them).

    ``placement`` is a preset name or an AdapterConfig; its ``layers`` (default all), ``bias`` and
    adapters per layer enter the closed form.

    Keys: per_adapter, n_adapters, adapters, n_layernorms, layernorm (all LayerNorm parameters,
    trained or not), pooler (trained or not), classifier, total_trainable (adapters + classifier,
    + LayerNorms when train_layernorm, + pooler when train_pooler), backbone (BertModel, pooler included),
    and the derived adapters_percent_of_backbone, percent_of_backbone, checkpoint_fp32_mb,
    checkpoint_fp16_mb, adam_state_bytes, adam_state_bytes_full.
    """
    adapters = _adapter_set(placement, bottleneck, train_layernorm, num_labels, train_pooler)
    k, r, bias = adapters.adapters_per_layer, adapters.bottleneck, adapters.bias
    d, L = config.hidden_size, config.num_hidden_layers
    adapted = len(adapters.layer_indices(L))
    n_layernorms = 2 * L + 1
    counts = {
        "per_adapter": adapter_params(d, r, bias),
        "n_adapters": adapted * k,
        "adapters": model_adapter_params(adapted, k, d, r, bias),
        "n_layernorms": n_layernorms,
        "layernorm": layernorm_params(d, n_layernorms),
        "pooler": pooler_params(d),
        "classifier": classifier_params(d, num_labels),
        "backbone": bert_backbone_params(config),
    }
    counts["total_trainable"] = (
        counts["adapters"] + counts["classifier"]
        + (counts["layernorm"] if adapters.train_layernorm else 0)
        + (counts["pooler"] if adapters.train_pooler else 0)
    )
    return _with_derived(counts)


def lora_target_shapes(d: int, i: int) -> dict[str, tuple[int, int]]:
    """(d_in, d_out) of every dense layer of a BERT layer that LoRA can adapt (FFN width i)."""
    return {"query": (d, d), "key": (d, d), "value": (d, d), "attention_output": (d, d),
            "intermediate": (d, i), "output": (i, d)}


def bert_lora_params(config: BertConfig, rank: int, targets: str = "query_value") -> int:
    """LoRA on the named target set (see adapterlab.lora_model.LORA_TARGET_SETS) in each of L layers:
    ``L · Σ r(d_in + d_out)``, i.e. ``4rdL`` on query and value, ``r(10d + 2i)L`` on every dense layer."""
    from .lora import LORA_TARGET_SETS

    check_positive_int("rank", rank)
    if targets not in LORA_TARGET_SETS:
        raise ValueError(f"targets must be one of {', '.join(LORA_TARGET_SETS)}; got {targets!r}")
    shapes = lora_target_shapes(config.hidden_size, config.intermediate_size)
    per_layer = sum(lora_params(rank, *shapes[name]) for name in LORA_TARGET_SETS[targets])
    return config.num_hidden_layers * per_layer


# --------------------------------------------------------------------------------------------------
# Counting a real model
# --------------------------------------------------------------------------------------------------


def _numel(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def count_model(model: nn.Module) -> dict:
    """Count a real model module by module, with the same keys as :func:`bert_counts`.

    Groups come from :func:`adapterlab.placement.trainable_summary`; per_adapter is the size of one
    adapter module (None when the model has none or their sizes differ).
    """
    summary = trainable_summary(model)
    sizes = [_numel(adapted.adapter) for _, _, adapted in adapted_outputs(model)]
    layernorms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]

    def both(group: str) -> int:
        return summary.trainable[group] + summary.frozen[group]

    counts = {
        "per_adapter": sizes[0] if sizes and len(set(sizes)) == 1 else None,
        "n_adapters": len(sizes),
        "adapters": both("adapters"),
        "n_layernorms": len(layernorms),
        "layernorm": both("layernorm"),
        "pooler": both("pooler"),
        "classifier": both("classifier"),
        "total_trainable": summary.total_trainable,
        "backbone": summary.backbone,
    }
    return _with_derived(counts)


def backbone_config(name: str) -> BertConfig:
    """The BertConfig of a named backbone shape (see NAMED_CONFIGS)."""
    if name not in NAMED_CONFIGS:
        raise ValueError(f"unknown backbone {name!r}; known backbones: {', '.join(NAMED_CONFIGS)}")
    from transformers import BertConfig

    return BertConfig(**NAMED_CONFIGS[name])


def meta_model(
    config: BertConfig,
    placement: str | AdapterConfig = "houlsby",
    bottleneck: int | None = None,
    train_layernorm: bool | None = None,
    num_labels: int = 2,
    train_pooler: bool | None = None,
) -> BertForSequenceClassification:
    """A BertForSequenceClassification with an adapter set whose parameters all live on the meta device.

    Shapes, names and trainable flags are real; no weight memory is allocated, whatever the size.
    Lab 4 counts BERT-large this way (through :func:`compare_counts`).
    """
    from transformers import BertForSequenceClassification

    adapters = _adapter_set(placement, bottleneck, train_layernorm, num_labels, train_pooler)
    config = copy.deepcopy(config)
    config.num_labels = num_labels
    with torch.device("meta"):
        model = BertForSequenceClassification(config)
        add_adapters(model, adapters)
    return model


@dataclass(frozen=True)
class CountRow:
    key: str
    item: str
    formula: str
    closed_form: int | float
    counted: int | float

    @property
    def match(self) -> bool:
        if isinstance(self.closed_form, float) or isinstance(self.counted, float):
            return math.isclose(self.closed_form, self.counted, rel_tol=1e-12)
        return self.closed_form == self.counted


def _state(trained: bool) -> str:
    return "trained" if trained else "frozen"


def _row_labels(config: BertConfig, adapters: AdapterConfig, num_labels: int) -> list:
    d, k, r = config.hidden_size, adapters.adapters_per_layer, adapters.bottleneck
    L = len(adapters.layer_indices(config.num_hidden_layers))
    train_layernorm, train_pooler = adapters.train_layernorm, adapters.train_pooler
    one = "2rd + r + d" if adapters.bias else "2rd"
    trained = " + ".join(["adapters"] + ["LayerNorms"] * train_layernorm + ["pooler"] * train_pooler + ["classifier"])
    return [
        ("per_adapter", "per adapter", f"{one}, d={d}, r={r}"),
        ("n_adapters", "adapter modules", f"L·k = {L}·{k}"),
        ("adapters", "adapters total", f"L·k·({one})"),
        ("n_layernorms", "LayerNorm modules", "2L + 1"),
        ("layernorm", f"LayerNorms ({_state(train_layernorm)})", "(2L + 1)·2d"),
        ("pooler", f"pooler ({_state(train_pooler)})", "d² + d"),
        ("classifier", "classifier (trained)", f"d·n + n, n={num_labels}"),
        ("total_trainable", "total trainable", trained),
        ("backbone", "backbone", "BertModel, no classifier"),
        ("adapters_percent_of_backbone", "adapters, % of backbone", "100·adapters / backbone"),
        ("percent_of_backbone", "trainable, % of backbone", "100·trainable / backbone"),
        ("checkpoint_fp32_mb", "checkpoint fp32 (MB)", "4 B · trainable"),
        ("checkpoint_fp16_mb", "checkpoint fp16 (MB)", "2 B · trainable"),
        ("adam_state_bytes", "Adam state (bytes)", "2 moments · 4 B · trainable"),
        ("adam_state_bytes_full", "Adam state, full FT (bytes)", "8 B · (backbone + classifier)"),
    ]


@dataclass
class CountReport:
    """Closed form and counted numbers side by side, for one backbone and one adapter set."""

    backbone: str
    config: BertConfig
    adapters: AdapterConfig
    num_labels: int
    rows: list

    @property
    def all_match(self) -> bool:
        return all(row.match for row in self.rows)

    def row(self, key: str) -> CountRow:
        return next(row for row in self.rows if row.key == key)

    def as_dict(self) -> dict:
        c = self.config
        return {
            "backbone": self.backbone,
            "shape": {
                "layers": c.num_hidden_layers,
                "hidden_size": c.hidden_size,
                "attention_heads": c.num_attention_heads,
                "intermediate_size": c.intermediate_size,
                "vocab_size": c.vocab_size,
            },
            "placement": self.adapters.placement,
            "adapters_per_layer": self.adapters.adapters_per_layer,
            "bottleneck": self.adapters.bottleneck,
            "train_layernorm": self.adapters.train_layernorm,
            "train_pooler": self.adapters.train_pooler,
            "adapter": self.adapters.as_dict(),
            "num_labels": self.num_labels,
            "rows": [
                {"key": r.key, "item": r.item, "formula": r.formula, "closed_form": r.closed_form,
                 "counted": r.counted, "match": r.match}
                for r in self.rows
            ],
            "all_match": self.all_match,
        }

    def __str__(self) -> str:
        c, a = self.config, self.adapters

        def fmt(value) -> str:
            return f"{value:,.3f}" if isinstance(value, float) else f"{value:,}"

        header = (
            f"{self.backbone}: L={c.num_hidden_layers}, d={c.hidden_size}, FFN {c.intermediate_size}; "
            f"{a.placement} (k={a.adapters_per_layer} per layer), r={a.bottleneck}, "
            f"LayerNorms {_state(a.train_layernorm)}, pooler {_state(a.train_pooler)}, {self.num_labels} labels"
        )
        width = max(32, 2 + max(len(r.formula) for r in self.rows))
        lines = [header, f"{'item':<29}{'formula':<{width}}{'closed form':>16}{'counted':>16}  match"]
        for r in self.rows:
            lines.append(
                f"{r.item:<29}{r.formula:<{width}}{fmt(r.closed_form):>16}{fmt(r.counted):>16}  {'yes' if r.match else 'NO'}"
            )
        verdict = "every row matches" if self.all_match else "MISMATCH between closed form and counted model"
        lines.append(f"{verdict} (counted on the meta device: no weights allocated; MB = 10^6 bytes)")
        return "\n".join(lines)


def compare_counts(
    config: BertConfig | str,
    placement: str | AdapterConfig = "houlsby",
    bottleneck: int | None = None,
    train_layernorm: bool | None = None,
    num_labels: int = 2,
    train_pooler: bool | None = None,
) -> CountReport:
    """Closed forms beside a count of the real model built on the meta device (lab 4, `adapterlab count`).

    ``config`` is a BertConfig or a name from NAMED_CONFIGS; ``placement`` a preset name or an AdapterConfig.
    """
    adapters = _adapter_set(placement, bottleneck, train_layernorm, num_labels, train_pooler)
    name = config if isinstance(config, str) else "custom BertConfig"
    if isinstance(config, str):
        config = backbone_config(config)
    closed = bert_counts(config, adapters, num_labels=num_labels)
    counted = count_model(meta_model(config, adapters, num_labels=num_labels))
    rows = [
        CountRow(key, item, formula, closed[key], counted[key])
        for key, item, formula in _row_labels(config, adapters, num_labels)
    ]
    return CountReport(name, config, adapters, num_labels, rows)


def format_count_rows(header: str, rows: list[CountRow]) -> str:
    """compare_method_counts' rows as a table in :class:`CountReport`'s layout (`adapterlab count --method`)."""

    def fmt(value) -> str:
        return f"{value:,.3f}" if isinstance(value, float) else f"{value:,}"

    lines = [header, f"{'item':<29}{'formula':<32}{'closed form':>16}{'counted':>16}  match"]
    lines += [f"{r.item:<29}{r.formula:<32}{fmt(r.closed_form):>16}{fmt(r.counted):>16}  {'yes' if r.match else 'NO'}"
              for r in rows]
    verdict = "every row matches" if all(r.match for r in rows) else "MISMATCH between closed form and counted model"
    lines.append(f"{verdict} (counted on the meta device: no weights allocated)")
    return "\n".join(lines)
