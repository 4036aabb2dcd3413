"""Closed-form counts of what a method trains, beside a count of the real model (labs 4 and 10).

The adapters' own closed forms (lab 4's tables) are :func:`adapterlab.model.counting.bert_counts`; this
module asks each method's ``count`` for the rest, so a new method is counted by declaring its count.
"""

from __future__ import annotations

import copy

import torch
from transformers import BertConfig

from ..model.counting import (CountRow, backbone_config, bert_backbone_params, classifier_params, count_model,
                              pooler_params)
from ..model.trainable import parameter_group
from ..validation import SIZE_LIMITS, check_size
from .registry import apply_method, get


def method_counts(config: BertConfig, method: str, num_labels: int = 2, train_pooler: bool = False,
                  **settings) -> dict:
    """Closed-form counts for a BERT classifier trained with ``method``.

    Keys: ``adapters`` (parameters the method adds to the backbone), ``biases`` (backbone biases it
    unfreezes), ``layernorm`` (LayerNorm parameters it unfreezes, where it does), pooler, classifier, total_trainable (+ the pooler when train_pooler), backbone and
    percent_of_backbone, with the meaning of :func:`count_model`'s keys, so the two can be compared.
    ``settings`` are the method's (``lora_rank=16``, ...).
    """
    check_size("num_labels", num_labels, SIZE_LIMITS["num_labels"])  # BertConfig builds a name per label
    chosen = get(method)
    if chosen.count is None:
        raise ValueError(f"method {method!r} has no closed-form count")
    own = chosen.count(config, **settings)
    counts = {"adapters": 0, "biases": 0, **own, "pooler": pooler_params(config.hidden_size),
              "classifier": classifier_params(config.hidden_size, num_labels),
              "backbone": bert_backbone_params(config)}
    counts["total_trainable"] = sum(own.values()) + counts["classifier"] + (counts["pooler"] if train_pooler else 0)
    counts["percent_of_backbone"] = 100.0 * counts["total_trainable"] / counts["backbone"]
    return counts


def compare_method_counts(config: BertConfig | str, method: str, num_labels: int = 2, train_pooler: bool = False,
                          **settings) -> list[CountRow]:
    """The closed forms of :func:`method_counts` beside a count of the real model, prepared with
    :func:`adapterlab.methods.apply_method` on the meta device (no weights allocated), one
    :class:`CountRow` per item. ``config`` is a BertConfig or a name from NAMED_CONFIGS."""
    from transformers import BertForSequenceClassification

    if isinstance(config, str):
        config = backbone_config(config)
    chosen = get(method)
    closed = method_counts(config, method, num_labels, train_pooler, **settings)
    shape = copy.deepcopy(config)
    shape.num_labels = num_labels
    with torch.device("meta"):
        model = apply_method(BertForSequenceClassification(shape), method, train_pooler=train_pooler, **settings)
    counted = count_model(model)
    counted["biases"] = sum(p.numel() for name, p in model.named_parameters()
                            if p.requires_grad and parameter_group(model, name) in ("layernorm", "other"))
    key, item, formula = chosen.extra.get("count_row", ("adapters", f"{chosen.label} parameters", "closed form"))
    state = "trained" if train_pooler else "frozen"
    labels = [
        (key, item, formula),
        ("pooler", f"pooler ({state})", "d² + d"),
        ("classifier", "classifier", f"d·n + n, n={num_labels}"),
        ("total_trainable", "total trainable", f"{key} + classifier" + (" + pooler" if train_pooler else "")),
        ("backbone", "backbone", "BertModel, no classifier"),
        ("percent_of_backbone", "trainable, % of backbone", "100·trainable / backbone"),
    ]
    return [CountRow(k, label, text, closed[k], counted[k]) for k, label, text in labels]
