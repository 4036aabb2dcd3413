"""Hugging Face PEFT's LoRA folder format, written and read (as peft 0.21 saves it).

``PeftModel.from_pretrained(base, DIR)`` loads it into a ``BertForSequenceClassification`` of the same backbone:

* ``adapter_config.json`` — a LoraConfig: ``r``, ``lora_alpha`` (the update is ``lora_alpha / r · B A``, as
  adapterlab's), ``task_type`` SEQ_CLS and ``modules_to_save`` (the classifier; the pooler too when it was
  trained), ``base_model_name_or_path`` (a name the hub resolves; None for a random backbone), and
  ``target_modules`` as a regular expression over the encoder's layers. A plain suffix list would not do:
  PEFT matches ``"dense"`` against every module name ending in ``.dense``, ``bert.pooler.dense`` among them.
* ``adapter_model.safetensors`` — ``base_model.model.bert.encoder.layer.{i}.{target}.lora_A.weight`` (r × in) and
  ``lora_B.weight`` (out × r), and the classifier (and pooler) under ``base_model.model.``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import safetensors.torch
import torch

from .common import BASE, InteropError, copy_into, hub_name, layer_tensors, split_backbone_tensors, write_json

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
PREFIX = "base_model.model."
#: Each adapterlab target set as the regular expression PEFT fully matches against module names.
TARGET_PATTERNS = {
    "query_value": rf".*{BASE}\.encoder\.layer\.\d+\.attention\.self\.(query|value)",
    "all_dense": rf".*{BASE}\.encoder\.layer\.\d+\.(attention\.self\.(query|key|value)|attention\.output\.dense"
                 r"|intermediate\.dense|output\.dense)",
}
#: The LoraConfig fields whose value changes what the model computes, at the value adapterlab's LoRA has.
PLAIN_LORA = {"bias": "none", "use_dora": False, "use_rslora": False, "fan_in_fan_out": False, "rank_pattern": {},
              "alpha_pattern": {}, "layers_to_transform": None, "layer_replication": None, "lora_bias": False,
              "trainable_token_indices": None, "exclude_modules": None, "target_parameters": None,
              "use_qalora": False, "use_bdlora": None, "alora_invocation_tokens": None}


def _number(value: float):
    return int(value) if float(value).is_integer() else float(value)


def write_peft(manifest: dict, tensors: dict[str, torch.Tensor], folder: Path) -> None:
    """Write an adapterlab LoRA set as a PEFT folder (module docstring)."""
    from ..model.lora import LORA_TARGETS, LoRAConfig

    method = manifest.get("method", "adapters")
    if method == "adapters":
        placement = manifest["adapter"]["placement"]
        raise InteropError(f"this is a {placement} adapter set: export it with --to adapterhub (PEFT's bottleneck "
                           "adapters are not written here)")
    if method != "lora":
        raise InteropError(f"this is a {method} set, which neither library has a format for: only adapters "
                           "(--to adapterhub) and LoRA (--to peft) are exported")
    lora = LoRAConfig.from_dict(manifest["lora"])
    classifier, layernorms, pooler = split_backbone_tensors(tensors)
    if layernorms:
        raise InteropError("this LoRA set holds LayerNorms, which adapterlab's LoRA never trains: the set is damaged")
    weights = {PREFIX + k: v.contiguous() for k, v in {**classifier, **pooler}.items()}
    for index, inside in sorted(layer_tensors(tensors).items()):
        for target in lora.target_modules:
            path = LORA_TARGETS[target]
            for matrix in ("lora_A", "lora_B"):
                tensor = inside.get(f"{path}.{matrix}")
                if tensor is None:
                    raise InteropError(f"the set lacks {BASE}.encoder.layer.{index}.{path}.{matrix}: train it again")
                weights[f"{PREFIX}{BASE}.encoder.layer.{index}.{path}.{matrix}.weight"] = tensor.contiguous()
    config = {
        "peft_type": "LORA", "task_type": "SEQ_CLS", "r": lora.rank, "lora_alpha": _number(lora.alpha),
        "lora_dropout": 0.0, "target_modules": TARGET_PATTERNS[lora.targets],
        "modules_to_save": (["pooler"] if pooler else []) + ["classifier", "score"],
        "base_model_name_or_path": hub_name(manifest["backbone"]["name"]), "inference_mode": True,
        "init_lora_weights": True, "layers_pattern": None, "revision": None, **PLAIN_LORA,
    }
    write_json(folder / CONFIG_FILE, config)
    safetensors.torch.save_file(weights, str(folder / WEIGHTS_FILE))


def _targets_of(config: dict, folder: Path) -> str:
    """adapterlab's target set a PEFT folder's target_modules names exactly, or an InteropError."""
    from ..model.lora import LORA_TARGET_SETS, LORA_TARGETS

    targets = config.get("target_modules")
    if isinstance(targets, str):
        for name, pattern in TARGET_PATTERNS.items():
            if targets == pattern:
                return name
        raise InteropError(f"{folder}: its target_modules is the pattern {targets!r}, which is neither adapterlab "
                           "target set; it is not imported")
    names = set(targets or [])
    suffixes = {name: {LORA_TARGETS[t].rpartition(".")[2] for t in members} for name, members in LORA_TARGET_SETS.items()}
    if names == suffixes["query_value"]:
        return "query_value"
    raise InteropError(
        f"{folder}: its target_modules {sorted(names)} is not one of adapterlab's target sets (query and value; or "
        "every dense layer of every encoder layer): a suffix list naming 'dense' also adapts bert.pooler.dense, "
        "which adapterlab's LoRA does not, so such a folder is not imported")


def read_peft(folder: Path) -> dict:
    """What a PEFT folder holds, checked, and how to put it into an adapterlab model (adapterlab.interop.convert.import_set)."""
    from ..model.lora import LORA_TARGETS, LORA_TARGET_SETS, add_lora

    config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    if config.get("peft_type") != "LORA":
        raise InteropError(f"{folder}: its peft_type is {config.get('peft_type')!r}; adapterlab imports LORA folders")
    if config.get("task_type") != "SEQ_CLS":
        raise InteropError(f"{folder}: its task_type is {config.get('task_type')!r}; adapterlab imports SEQ_CLS folders "
                           "(a sequence classifier)")
    for field, value in PLAIN_LORA.items():
        found = config.get(field, value)
        if found != value and not (value in (None, False, {}) and found in (None, False, [], {})):
            raise InteropError(f"{folder}: its LoraConfig sets {field} = {config.get(field)!r}; adapterlab's LoRA "
                               f"computes {field} = {value!r}, so it is not imported")
    if config.get("lora_dropout", 0.0) not in (0, 0.0):
        raise InteropError(f"{folder}: lora_dropout = {config['lora_dropout']}; adapterlab's LoRA has no dropout")
    targets = _targets_of(config, folder)
    saved = set(config.get("modules_to_save") or []) - {"classifier", "score"}
    if saved - {"pooler"}:
        raise InteropError(f"{folder}: it also trains {sorted(saved - {'pooler'})} whole (modules_to_save), which "
                           "adapterlab's LoRA does not")
    if not (folder / WEIGHTS_FILE).is_file():
        raise InteropError(f"{folder}: {WEIGHTS_FILE} is missing; adapterlab reads safetensors only")
    weights = {k.removeprefix(PREFIX): v for k, v in safetensors.torch.load_file(str(folder / WEIGHTS_FILE)).items()}
    rank, alpha = int(config["r"]), float(config["lora_alpha"])
    renamed = {}
    for name, tensor in weights.items():
        match = re.fullmatch(rf"({BASE}\.encoder\.layer\.\d+\.[\w.]+)\.(lora_A|lora_B)\.weight", name)
        if match:
            renamed[f"{match.group(1)}.{match.group(2)}"] = tensor
        elif name.startswith("classifier.") or (name.startswith(f"{BASE}.pooler.") and "pooler" in saved):
            renamed[name] = tensor
        else:
            raise InteropError(f"{folder}: {WEIGHTS_FILE} holds {name}, which adapterlab's LoRA has no place for")
    if "classifier.weight" not in renamed:
        raise InteropError(f"{folder}: it holds no classifier (modules_to_save), so there is nothing to evaluate")
    num_labels = renamed["classifier.weight"].shape[0]

    def apply(model):
        n_layers = model.config.num_hidden_layers
        expected = {f"{BASE}.encoder.layer.{i}.{LORA_TARGETS[t]}.{m}" for i in range(n_layers)
                    for t in LORA_TARGET_SETS[targets] for m in ("lora_A", "lora_B")}
        found = {k for k in renamed if ".lora_" in k}
        if found != expected:
            raise InteropError(f"{folder}: its LoRA matrices ({len(found)}) are not one pair per target in each of the "
                               f"{n_layers} layers ({len(expected)}): pass the --backbone it was trained on")
        add_lora(model, rank=rank, alpha=alpha, targets=targets, train_pooler="pooler" in saved)
        copy_into(model, renamed, str(folder))

    return {"method": "lora", "base_model": config.get("base_model_name_or_path") or "", "num_labels": num_labels,
            "name": None, "apply": apply}
