"""BitFit (Ben Zaken et al. 2021): train every bias of the backbone and the classifier, nothing else.

A BitFit set is the backbone's biases, so loading one overwrites them: load it into a fresh backbone.
Merging is trivial (the biases are the backbone's own), so it merges by doing nothing.
"""

from __future__ import annotations

from torch import nn

from ..model.trainable import train_only
from .registry import Method, SavedSet, pooler_entry_check, register

#: Set on a model that BitFit prepared: what a saved set records about it.
ATTRIBUTE = "adapterlab_bitfit"


def trains(name: str, group: str) -> bool:
    """A bias of the backbone: attention, FFN and LayerNorm biases, as in BitFit's own code."""
    return name.endswith(".bias") and group in ("layernorm", "other")


def prepare(model: nn.Module, train_pooler: bool = False) -> nn.Module:
    train_only(model, trains, train_pooler=train_pooler)
    object.__setattr__(model, ATTRIBUTE, {"train_pooler": train_pooler})
    return model


def settings_of(model: nn.Module) -> dict | None:
    """``{"train_pooler": ...}`` when BitFit prepared the model, else None."""
    return getattr(model, ATTRIBUTE, None)


def bert_bias_params(config) -> int:
    """Every bias BitFit trains in BertModel, the pooler's aside: per layer query, key, value and attention
    output (4d), FFN in (i) and out (d), two LayerNorms (2d); plus the embeddings' LayerNorm (d):
    ``L·(7d + i) + d``."""
    d, i = config.hidden_size, config.intermediate_size
    return config.num_hidden_layers * (7 * d + i) + d


def _holds(entry: dict, name: str, group: str) -> bool:
    return group == "classifier" or trains(name, group) or (group == "pooler" and entry["train_pooler"])


def _rebuild(model: nn.Module, entry: dict):
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    before = settings_of(model)
    prepare(model, train_pooler=entry["train_pooler"])

    def undo():
        for name, parameter in model.named_parameters():
            parameter.requires_grad_(flags[name])
        if before is None:
            object.__delattr__(model, ATTRIBUTE)
        else:
            object.__setattr__(model, ATTRIBUTE, before)

    return undo


register(Method(
    "bitfit", "BitFit: biases only", "every bias of the backbone, and the classifier",
    # Ben Zaken et al. sweep BitFit over 1e-4...1e-3 on BERT-base; a bias moves a whole feature.
    learning_rate=1e-3, learning_rates=(1e-3, 3e-3, 1e-2), prepare=prepare,
    saved=SavedSet("bitfit", "bitfit", settings_of, _holds, _rebuild, pooler_entry_check("bitfit"), kind="a BitFit set",
                   forget=lambda model: model.__dict__.pop(ATTRIBUTE, None)),
    merge=lambda model: model, count=lambda config, **_: {"biases": bert_bias_params(config)},
    extra={"count_row": ("biases", "biases (BitFit)", "L·(7d + i) + d")}))
