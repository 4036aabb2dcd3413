"""What trains: parameter groups, freezing all but a chosen part, and counting trainable parameters.

Every method differs from the others only in what it adds to the backbone and which parameters it
unfreezes; this module knows the groups a parameter falls in (adapters, LayerNorms, the pooler, the
classifier, the rest of the backbone) and freezes a model down to a chosen part. Which part each method
trains is declared with the method (:mod:`adapterlab.methods`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import nn

from ..validation import check_bool

GROUPS = ("adapters", "layernorm", "pooler", "classifier", "other")
#: The trainable matrices of a LoRA layer (adapterlab.model.lora.LoRALinear).
LORA_PARAMETERS = ("lora_A", "lora_B")


def parameter_group(model: nn.Module, name: str) -> str:
    """Which of GROUPS a named parameter belongs to (LoRA's A and B count as adapters: modules added to
    the backbone)."""
    parts = name.split(".")
    owner = model.get_submodule(".".join(parts[:-1]))
    if "adapter" in parts or parts[-1] in LORA_PARAMETERS or getattr(owner, "adds_to_backbone", False):
        return "adapters"
    if "pooler" in parts:
        return "pooler"
    if parts[0] in ("classifier", "score", "qa_outputs"):
        return "classifier"
    if isinstance(owner, nn.LayerNorm):
        return "layernorm"
    return "other"


def train_only(model: nn.Module, trains: Callable[[str, str], bool], train_pooler: bool = False) -> nn.Module:
    """Freeze the model, then unfreeze every parameter for which ``trains(name, group)`` is true, the new
    classifier, and the pretrained pooler when ``train_pooler``: the original adapter-bert code trains its
    ``adapters``, ``layer_norm`` and ``head`` collections and leaves the pooler frozen, so frozen is the
    default. Returns the model."""
    check_bool("train_pooler", train_pooler)
    for name, parameter in model.named_parameters():
        group = parameter_group(model, name)
        parameter.requires_grad_(group == "classifier" or (group == "pooler" and train_pooler) or trains(name, group))
    return model


@dataclass
class TrainableSummary:
    """Trainable and frozen parameter counts per group, and the share of the backbone trained."""

    trainable: dict
    frozen: dict

    @property
    def total_trainable(self) -> int:
        return sum(self.trainable.values())

    @property
    def total(self) -> int:
        return self.total_trainable + sum(self.frozen.values())

    @property
    def backbone(self) -> int:
        """The pretrained network: everything but the adapters and the task classifier."""
        return sum(self.trainable[g] + self.frozen[g] for g in ("layernorm", "pooler", "other"))

    @property
    def percent_of_backbone(self) -> float:
        return 100.0 * self.total_trainable / self.backbone

    def as_dict(self) -> dict:
        return {
            "trainable": dict(self.trainable),
            "frozen": dict(self.frozen),
            "total_trainable": self.total_trainable,
            "total": self.total,
            "backbone": self.backbone,
            "percent_of_backbone": self.percent_of_backbone,
        }

    def __str__(self) -> str:
        lines = [f"{'group':<12}{'trainable':>14}{'frozen':>14}"]
        for group in GROUPS:
            lines.append(f"{group:<12}{self.trainable[group]:>14,}{self.frozen[group]:>14,}")
        lines.append(f"{'total':<12}{self.total_trainable:>14,}{sum(self.frozen.values()):>14,}")
        lines.append(f"trainable = {self.percent_of_backbone:.2f} % of the backbone ({self.backbone:,})")
        return "\n".join(lines)


def trainable_summary(model: nn.Module) -> TrainableSummary:
    """Count trainable and frozen parameters by group (adapters, layernorm, pooler, classifier, other)."""
    trainable = dict.fromkeys(GROUPS, 0)
    frozen = dict.fromkeys(GROUPS, 0)
    for name, parameter in model.named_parameters():
        bucket = trainable if parameter.requires_grad else frozen
        bucket[parameter_group(model, name)] += parameter.numel()
    return TrainableSummary(trainable, frozen)
