"""(IA)³ (Liu et al. 2022): learned vectors that rescale the keys, the values and the FFN's hidden units.

Each transformer layer gets three vectors, initialised to ones (so the model starts exactly as the
backbone): ``l_k ⊙ K``, ``l_v ⊙ V`` and ``l_ff ⊙ f(W_1 x)``. That is ``2d + i`` numbers a layer, fewer than
any adapter. A rescaling of a linear layer's output is a rescaling of its rows, and a rescaling of the
FFN's hidden units is one of the next layer's columns, so (IA)³ merges into the backbone's weights exactly.
"""

from __future__ import annotations

import torch
from torch import nn

from ..model.placement import PlacementError, adapted_outputs, encoder_layers
from ..model.trainable import train_only
from .registry import Method, SavedSet, pooler_entry_check, register

ATTRIBUTE = "adapterlab_ia3"


class Rescaled(nn.Module):
    """``module(x) ⊙ l``, with ``l`` a learned vector over the output features, starting at ones."""

    adds_to_backbone = True  # its vector counts with the adapters: a parameter added to the backbone

    def __init__(self, module: nn.Module, features: int, weight: torch.Tensor):
        super().__init__()
        self.module = module
        self.ia3_scale = nn.Parameter(torch.ones(features, device=weight.device, dtype=weight.dtype))

    def forward(self, x):
        return self.module(x) * self.ia3_scale


def _sites(layer):
    """(parent, attribute) of the three rescaled outputs of a BERT layer."""
    return [(layer.attention.self, "key"), (layer.attention.self, "value"), (layer, "intermediate")]


def _features(module: nn.Module) -> int:
    return (module.dense if hasattr(module, "dense") else module).out_features


def add_ia3(model: nn.Module, train_pooler: bool = False) -> nn.Module:
    """Rescale the keys, values and FFN hidden units of every layer; train the vectors and the classifier."""
    if getattr(model, ATTRIBUTE, None) is not None or adapted_outputs(model):
        raise PlacementError("this model already has (IA)³ vectors or adapters: start from a fresh backbone")
    for layer in encoder_layers(model):
        for parent, name in _sites(layer):
            original = getattr(parent, name)
            setattr(parent, name, Rescaled(original, _features(original), next(original.parameters())))
    object.__setattr__(model, ATTRIBUTE, {"train_pooler": train_pooler})
    return train_only(model, lambda name, group: group == "adapters", train_pooler=train_pooler)


def _take_out(model: nn.Module, merge: bool) -> nn.Module:
    if getattr(model, ATTRIBUTE, None) is None:
        raise PlacementError("this model has no (IA)³ vectors")
    with torch.no_grad():
        for layer in encoder_layers(model):
            for parent, name in _sites(layer):
                rescaled = getattr(parent, name)
                scale = rescaled.ia3_scale
                if merge and name == "intermediate":  # f(W_1 x) ⊙ l feeds W_2: scale W_2's columns
                    layer.output.dense.weight.mul_(scale)
                elif merge:  # (W x + b) ⊙ l: scale W's rows and b
                    rescaled.module.weight.mul_(scale[:, None])
                    rescaled.module.bias.mul_(scale)
                setattr(parent, name, rescaled.module)
    object.__delattr__(model, ATTRIBUTE)
    return model


def merge_ia3(model: nn.Module) -> nn.Module:
    """Fold every vector into the weights it rescales: the backbone's exact architecture, the same outputs."""
    return _take_out(model, merge=True)


def remove_ia3(model: nn.Module) -> nn.Module:
    return _take_out(model, merge=False)


def _holds(entry: dict, name: str, group: str) -> bool:
    return group in ("adapters", "classifier") or (group == "pooler" and entry["train_pooler"])


def _rebuild(model: nn.Module, entry: dict):
    add_ia3(model, train_pooler=entry["train_pooler"])
    return lambda: remove_ia3(model)


register(Method(
    "ia3", "(IA)³ rescaling", "vectors rescaling keys, values and FFN hidden units, and the classifier",
    # Liu et al. train (IA)³ with 3e-3: a vector at one moves slowly at an adapter's rate.
    learning_rate=3e-3, learning_rates=(1e-3, 3e-3, 1e-2), prepare=add_ia3,
    saved=SavedSet("ia3", "ia3", lambda model: getattr(model, ATTRIBUTE, None), _holds, _rebuild, pooler_entry_check("ia3"),
                   kind="(IA)³ vectors"),
    merge=merge_ia3,
    count=lambda config, **_: {"adapters": config.num_hidden_layers * (2 * config.hidden_size
                                                                      + config.intermediate_size)},
    extra={"count_row": ("adapters", "(IA)³ vectors", "L·(2d + i)")}))
