"""LoRA (Hu et al. 2021) as a training method: rank-r updates of chosen dense layers, merged away after
training. The layers and the surgery are :mod:`adapterlab.model.lora`."""

from __future__ import annotations

from ..model.counting import bert_lora_params
from ..model.lora import (DEFAULT_LORA_ALPHA, DEFAULT_LORA_RANK, LORA_TARGET_SETS, LoRAConfig, add_lora, lora_config,
                          merge_lora, remove_lora)
from ..settings import Setting
from ..validation import check_number, check_positive_int
from .registry import TRAIN_POOLER, Method, SavedSet, register

RANK = Setting("lora_rank", DEFAULT_LORA_RANK, "LoRA rank r", int, check=check_positive_int, aliases=("--rank",))
ALPHA = Setting("lora_alpha", DEFAULT_LORA_ALPHA, "LoRA scaling alpha: the update is alpha/r·BA", float,
                check=lambda name, value: check_number(name, value, 0, low_inclusive=False))
TARGETS = Setting("lora_targets", "query_value",
                  "the dense layers LoRA adapts: attention query and value, or every dense layer", str,
                  choices=tuple(LORA_TARGET_SETS))


def prepare(model, lora_rank=RANK.default, lora_alpha=ALPHA.default, lora_targets=TARGETS.default,
            train_pooler=False):
    return add_lora(model, lora_rank, lora_alpha, lora_targets, train_pooler=train_pooler)


def _describe(model):
    config = lora_config(model)
    return None if config is None else config.as_dict()


def _rebuild(model, entry: dict):
    add_lora(model, **entry)
    return lambda: remove_lora(model)


def _holds(entry: dict, name: str, group: str) -> bool:
    return group in ("adapters", "classifier") or (group == "pooler" and entry["train_pooler"])


register(Method(
    "lora", "LoRA", "rank-r updates of the chosen dense layers, and the classifier",
    # B starts at zero like an adapter's up-projection; Hu et al. train RoBERTa-base on GLUE with 4e-4...5e-4.
    learning_rate=5e-4, learning_rates=(3e-4, 1e-3, 3e-3),
    prepare=prepare, settings=(RANK.name, ALPHA.name, TARGETS.name, TRAIN_POOLER.name),
    own_settings=(RANK, ALPHA, TARGETS),
    saved=SavedSet("lora", "lora", _describe, _holds, _rebuild, lambda entry: LoRAConfig.from_dict(entry).as_dict(),
                   kind="LoRA layers"),
    merge=merge_lora,
    count=lambda config, lora_rank=RANK.default, lora_targets=TARGETS.default, **_: {
        "adapters": bert_lora_params(config, lora_rank, lora_targets)},
    extra={"count_row": ("adapters", "LoRA matrices", "L·Σ r(d_in + d_out)")}))
