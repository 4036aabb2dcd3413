"""LoRA as a training method on a whole BERT model: put LoRA layers on chosen dense layers, train only
them (and the classifier), then merge them away.

:class:`adapterlab.lora.LoRALinear` is the layer; this module decides where it goes. Hu et al. (2021)
adapt the attention's query and value projections and find that enough (``targets="query_value"``,
the default); ``"all_dense"`` puts one on every dense layer of every transformer layer (query, key,
value, attention output, FFN in and out) for comparison.

After training, :func:`merge_lora` folds every update into its frozen weight (``W + (alpha/r)·B A``,
:meth:`LoRALinear.merge`) and puts the plain ``nn.Linear`` back: the merged model has exactly the
backbone's architecture, so it runs exactly as fast as the backbone. That is LoRA's advantage over
adapters, whose nonlinearity keeps them in the forward pass (lab 3).

Lab 10 (adapters among the PEFT methods) trains LoRA through :func:`adapterlab.placement.apply_method`
(``method="lora"``), which calls :func:`add_lora`, and merges it with :func:`merge_lora`; the same :class:`LoRAConfig` is what a saved LoRA set records (:mod:`adapterlab.checkpoints`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn

from .placement import PlacementError, adapted_outputs, encoder_layers
from .trainable import train_only
from ..validation import check_bool, check_choice, check_number, check_positive_int

class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable rank-r update: ``base(x) + (alpha/r)·x Aᵀ Bᵀ``.

    A (r × in) is Kaiming-uniform and B (out × r) is zero, as in LoRA and PEFT, so the layer starts
    as exactly ``base``. ``alpha`` defaults to r (scaling 1). The base weights are frozen: LoRA
    trains only A and B.

    :meth:`merge` adds ``(alpha/r)·B A`` to ``base.weight`` (zero inference overhead, one task);
    :meth:`unmerge` takes it back out (the update is still in A and B). Merging twice, or unmerging
    a layer that is not merged, raises ``RuntimeError``: silently ignoring it would hide a bookkeeping
    mistake, and adding the update twice would be a wrong model.
    """

    def __init__(self, base: nn.Linear, r: int, alpha: float | None = None):
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"base must be an nn.Linear; got {type(base).__name__}")
        self.r = check_positive_int("r", r)
        alpha = float(r if alpha is None else alpha)
        if not math.isfinite(alpha) or alpha <= 0:
            raise ValueError(f"alpha must be a finite number > 0 (default r); got {alpha!r}")
        self.alpha = alpha
        self.base = base
        for parameter in base.parameters():
            parameter.requires_grad_(False)
        factory = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features, **factory))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r, **factory))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.merged = False

    @property
    def scaling(self) -> float:
        return self.alpha / self.r

    def delta_weight(self) -> torch.Tensor:
        """The update ``(alpha/r)·B A`` (out × in), of rank ≤ r."""
        return self.scaling * (self.lora_B @ self.lora_A)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.merged:
            return self.base(x)
        return self.base(x) + self.scaling * ((x @ self.lora_A.T) @ self.lora_B.T)

    @torch.no_grad()
    def merge(self) -> "LoRALinear":
        """Fold the update into ``base.weight``; forward then runs the plain linear layer."""
        if self.merged:
            raise RuntimeError("this LoRALinear is already merged; call unmerge() before merging again")
        self.base.weight += self.delta_weight()
        self.merged = True
        return self

    @torch.no_grad()
    def unmerge(self) -> "LoRALinear":
        """Take the update back out of ``base.weight`` (exact up to rounding)."""
        if not self.merged:
            raise RuntimeError("this LoRALinear is not merged; there is nothing to unmerge")
        self.base.weight -= self.delta_weight()
        self.merged = False
        return self

    def extra_repr(self) -> str:
        return f"r={self.r}, alpha={self.alpha:g}, merged={self.merged}"


# --------------------------------------------------------------------------------------------------
# A linear adapter is an affine map; a nonlinear one is not
# --------------------------------------------------------------------------------------------------


#: Where each target sits inside a BERT layer (``transformers``' BertLayer module names).
LORA_TARGETS = {
    "query": "attention.self.query",
    "key": "attention.self.key",
    "value": "attention.self.value",
    "attention_output": "attention.output.dense",
    "intermediate": "intermediate.dense",
    "output": "output.dense",
}
#: The named target sets a TrainConfig / the CLI choose from.
LORA_TARGET_SETS = {
    "query_value": ("query", "value"),
    "all_dense": tuple(LORA_TARGETS),
}
DEFAULT_LORA_RANK = 8
#: Hu et al. set alpha to the first r they try and do not tune it. Keeping alpha fixed while r is swept
#: keeps the update's scale alpha/r·BA comparable, so the learning rate need not be tuned again per r.
DEFAULT_LORA_ALPHA = 8.0
LORA_ATTRIBUTE = "adapterlab_lora"
_SAVED_FLAGS = "_adapterlab_lora_requires_grad"


@dataclass(frozen=True)
class LoRAConfig:
    """Everything that describes one LoRA set: rank r, scaling alpha, the target set, whether the pooler trains."""

    rank: int = DEFAULT_LORA_RANK
    alpha: float = DEFAULT_LORA_ALPHA
    targets: str = "query_value"
    train_pooler: bool = False

    def __post_init__(self):
        check_positive_int("lora_rank", self.rank)
        object.__setattr__(self, "alpha", check_number("lora_alpha", self.alpha, 0, low_inclusive=False))
        check_choice("lora_targets", self.targets, tuple(LORA_TARGET_SETS))
        check_bool("train_pooler", self.train_pooler)

    @property
    def target_modules(self) -> tuple[str, ...]:
        return LORA_TARGET_SETS[self.targets]

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "LoRAConfig":
        if not isinstance(data, dict) or set(data) != {f for f in cls.__dataclass_fields__}:
            raise ValueError(f"a LoRA config needs exactly the keys {sorted(cls.__dataclass_fields__)}; got {data!r}")
        return cls(**data)


def lora_config(model: nn.Module) -> LoRAConfig | None:
    """The LoRAConfig of the model's LoRA layers; None when it has none."""
    return getattr(model, LORA_ATTRIBUTE, None)


def lora_layers(model: nn.Module) -> list[tuple[int, str, LoRALinear]]:
    """(layer index, target name, module) for every LoRA layer, in order."""
    found = []
    for index, layer in enumerate(encoder_layers(model)):
        for target, path in LORA_TARGETS.items():
            module = layer.get_submodule(path)
            if isinstance(module, LoRALinear):
                found.append((index, target, module))
    return found


def _replace(layer: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(layer.get_submodule(parent), name, module)


def add_lora(model: nn.Module, rank: int = DEFAULT_LORA_RANK, alpha: float = DEFAULT_LORA_ALPHA,
             targets: str = "query_value", train_pooler: bool = False) -> nn.Module:
    """Wrap the target dense layers of every transformer layer in a LoRALinear and train only the LoRA
    matrices and the classifier (the pooler too with ``train_pooler``). B starts at zero, so the model
    computes exactly what it did before. Lab 10 trains LoRA this way, through ``apply_method``.
    Everything is checked before the model is touched. Returns the model (changed in place).
    """
    config = LoRAConfig(rank, alpha, targets, train_pooler)
    if lora_config(model) is not None or any(isinstance(m, LoRALinear) for m in model.modules()):
        raise PlacementError("this model already has LoRA layers; call remove_lora(model) or merge_lora(model) first")
    layers = encoder_layers(model)
    if adapted_outputs(model):
        raise PlacementError("this model has adapters; LoRA is a method of its own here: call remove_adapters first")
    requires_grad = {name: p.requires_grad for name, p in model.named_parameters()}  # LoRALinear freezes its base
    planned = []
    for layer in layers:
        for target in config.target_modules:
            base = layer.get_submodule(LORA_TARGETS[target])
            planned.append((layer, LORA_TARGETS[target], LoRALinear(base, config.rank, config.alpha)))
    for layer, path, module in planned:
        _replace(layer, path, module)
    object.__setattr__(model, LORA_ATTRIBUTE, config)
    object.__setattr__(model, _SAVED_FLAGS, requires_grad)
    return train_only(model, lambda name, group: group == "adapters", train_pooler=train_pooler)


def _take_out(model: nn.Module, merge: bool) -> nn.Module:
    if lora_config(model) is None:
        raise PlacementError("this model has no LoRA layers; add them with add_lora (or apply_method(model, 'lora'))")
    layers = encoder_layers(model)
    for index, target, module in lora_layers(model):
        if merge and not module.merged:
            module.merge()
        elif not merge and module.merged:
            module.unmerge()
        _replace(layers[index], LORA_TARGETS[target], module.base)
    saved = getattr(model, _SAVED_FLAGS)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(saved.get(name, True))
    object.__delattr__(model, LORA_ATTRIBUTE)
    object.__delattr__(model, _SAVED_FLAGS)
    return model


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every LoRA update into its weight, ``W ← W + (alpha/r)·B A``, and put the plain nn.Linear back.

    The result has exactly the backbone's architecture (module types, state_dict keys and shapes,
    parameter count) and computes what the LoRA model computed, up to rounding; trainable flags are
    restored as they were before add_lora. Changes the model in place and returns it (``copy.deepcopy``
    first to keep the LoRA model). Lab 10 measures the merged model's latency against the backbone's.
    """
    return _take_out(model, merge=True)


def remove_lora(model: nn.Module) -> nn.Module:
    """Take the LoRA layers out without merging: the backbone computes what it did before add_lora."""
    return _take_out(model, merge=False)
