"""Save and load an adapter set: what one task trains on top of a frozen backbone.

An adapter set is a folder with two files:

* ``adapters.safetensors`` — every tensor the adapter method trains: the adapters, the LayerNorms
  (when the adapters were added with ``train_layernorm``) and the head (pooler + classifier). For
  BERT-base with Houlsby adapters at r = 64 that is about 3 M numbers (≈ 12 MB in float32), against
  440 MB for the whole model: the point of adapters is that a new task costs only this file.
* ``adapter_config.json`` — how to rebuild the adapters (the arguments of ``add_adapters``), the
  backbone's name and shape, the tensor names and shapes, and the SHA-256 of the tensor file.

The tensors are read with safetensors only — never with ``torch.load`` / pickle, which can run code
hidden in a file. Saving writes both files to temporary files in the same folder, syncs them to disk
and then renames them over the final names, so an interrupted save leaves the previous set intact.
The SHA-256 ties the two files together: a tensor file that does not belong to its config (a crash
between the two renames, a truncated copy) is refused with a clear message.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import safetensors
import safetensors.torch
import torch
from torch import nn

from .placement import PlacementError, add_adapters, adapter_config, encoder_layers, parameter_group, remove_adapters

TENSORS_FILE = "adapters.safetensors"
CONFIG_FILE = "adapter_config.json"
FORMAT = "adapterlab-adapter-set"
FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """An adapter set cannot be saved or loaded; the message names the file and what is wrong."""


def saved_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """The parameters an adapter set holds: adapters, LayerNorms if trained with them, pooler, classifier."""
    config = adapter_config(model)
    if config is None:
        raise CheckpointError("this model has no adapters; call adapterlab.add_adapters(model, ...) first")
    groups = {"adapters", "pooler", "classifier"} | ({"layernorm"} if config["train_layernorm"] else set())
    return {name: p for name, p in model.named_parameters() if parameter_group(model, name) in groups}


def _backbone_shape(model: nn.Module) -> dict:
    try:
        num_layers = len(encoder_layers(model))
    except PlacementError as error:
        raise CheckpointError(str(error)) from error
    return {
        "hidden_size": model.config.hidden_size,
        "num_layers": num_layers,
        "num_labels": model.config.num_labels,
    }


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_temp(directory: Path, final_name: str, write, temps: list) -> Path:
    """Write a new file next to ``final_name`` with ``write(path)`` and sync it to disk."""
    handle, name = tempfile.mkstemp(dir=directory, prefix=f".{final_name}.", suffix=".tmp")
    os.close(handle)
    path = Path(name)
    temps.append(path)
    write(path)
    with open(path, "rb+") as file:
        os.fsync(file.fileno())
    os.chmod(path, 0o644)  # mkstemp makes it private; a checkpoint is meant to be shared
    return path


def save_adapter_set(model: nn.Module, directory, backbone=None, extra: dict | None = None, dtype=None) -> Path:
    """Write the model's adapter set to ``directory`` (created if needed) and return the folder.

    ``backbone`` is a BackboneInfo or a name, recorded so a reader knows what the adapters were
    trained on (default: the model's own name_or_path). ``extra`` is any JSON-serialisable dict
    (task, metrics, ...). ``dtype=torch.float16`` halves the file; loading casts back to the model's dtype.
    """
    from . import __version__

    directory = Path(directory)
    tensors = {
        name: p.detach().to(device="cpu", dtype=dtype or p.dtype).contiguous()
        for name, p in saved_parameters(model).items()
    }
    name = getattr(backbone, "loaded", backbone) or getattr(model.config, "name_or_path", "") or "unknown"
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "adapterlab_version": __version__,
        "adapter": adapter_config(model),
        "backbone": {"name": str(name), **_backbone_shape(model)},
        "dtype": str(next(iter(tensors.values())).dtype).removeprefix("torch."),
        "tensors": {key: list(t.shape) for key, t in tensors.items()},
        "num_parameters": sum(t.numel() for t in tensors.values()),
        "extra": extra or {},
    }
    try:
        json.dumps(manifest)
    except TypeError as error:
        raise CheckpointError(f"extra must hold only JSON values (str, numbers, lists, dicts): {error}") from error
    if directory.exists() and not directory.is_dir():
        raise CheckpointError(f"{directory} exists and is not a folder; choose a folder for the adapter set")
    directory.mkdir(parents=True, exist_ok=True)
    temps: list[Path] = []
    try:
        tensors_tmp = _write_temp(
            directory, TENSORS_FILE, lambda path: safetensors.torch.save_file(tensors, str(path)), temps
        )
        manifest["sha256"] = _sha256(tensors_tmp)
        text = json.dumps(manifest, indent=2) + "\n"
        config_tmp = _write_temp(directory, CONFIG_FILE, lambda path: path.write_text(text, encoding="utf-8"), temps)
        os.replace(tensors_tmp, directory / TENSORS_FILE)
        os.replace(config_tmp, directory / CONFIG_FILE)
    finally:
        for path in temps:
            path.unlink(missing_ok=True)
    if hasattr(os, "O_DIRECTORY"):  # make the renames durable too (POSIX only)
        handle = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)
    return directory


def read_adapter_config(directory) -> dict:
    """The parsed adapter_config.json of an adapter set, checked for the keys loading needs."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such folder; pass the folder save_adapter_set wrote")
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"{path} is missing; the folder does not hold a complete adapter set")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON ({error}); the adapter set is damaged") from error
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an adapterlab adapter set (its 'format' is not {FORMAT!r})")
    if not isinstance(manifest.get("format_version"), int) or manifest["format_version"] > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format_version {manifest.get('format_version')!r}; this adapterlab reads up to "
            f"{FORMAT_VERSION}: upgrade adapterlab"
        )
    required = {"adapter": dict, "backbone": dict, "sha256": str}
    for key, kind in required.items():
        if not isinstance(manifest.get(key), kind):
            raise CheckpointError(f"{path} is malformed: {key!r} is missing or not a {kind.__name__}")
    for key in ("hidden_size", "num_layers", "num_labels"):
        if not isinstance(manifest["backbone"].get(key), int):
            raise CheckpointError(f"{path} is malformed: backbone.{key} is missing or not an integer")
    return manifest


def _check_backbone(model: nn.Module, manifest: dict, path: Path) -> None:
    saved, here = manifest["backbone"], _backbone_shape(model)
    wrong = [f"{key} {saved[key]} (this model: {here[key]})" for key in here if saved[key] != here[key]]
    if wrong:
        raise CheckpointError(
            f"{path}: these adapters were trained on a backbone of another shape ({saved.get('name', 'unknown')}): "
            f"{', '.join(wrong)}. Load them into the same backbone, e.g. load_backbone({saved.get('name')!r}, "
            f"num_labels={saved['num_labels']})"
        )


def _read_tensors(path: Path, manifest: dict) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise CheckpointError(f"{path} is missing; the folder does not hold a complete adapter set")
    if _sha256(path) != manifest["sha256"]:
        raise CheckpointError(
            f"{path} does not match the sha256 recorded in {CONFIG_FILE}: the file is corrupt, truncated, "
            "or from another save; save the adapter set again"
        )
    try:
        return safetensors.torch.load_file(str(path))
    except safetensors.SafetensorError as error:
        raise CheckpointError(
            f"{path} is not a readable safetensors file ({error}); save the adapter set again"
        ) from error


def _add_kwargs(config: dict) -> dict:
    keys = ("placement", "bottleneck", "activation", "init", "init_scale", "layers", "train_layernorm", "bias")
    kwargs = {key: config[key] for key in keys if key in config}
    if config.get("parallel_scale") is not None:
        kwargs["parallel_scale"] = config["parallel_scale"]
    return kwargs


def _some(names: list[str], shown: int = 5) -> str:
    return f"{names[:shown]}{' ...' if len(names) > shown else ''}"


def load_adapter_set(model: nn.Module, directory, strict: bool = True) -> dict:
    """Load an adapter set into ``model`` and return its config (adapter_config.json) with the
    ``missing_keys`` and ``unexpected_keys`` of the load.

    A model without adapters gets them first, as the config describes; a model with adapters must
    have the same adapter config. ``strict`` (default) requires the file to hold exactly the
    parameters the adapter method trains. On any error the model is left as it was.
    """
    directory = Path(directory)
    manifest = read_adapter_config(directory)
    config_path, tensors_path = directory / CONFIG_FILE, directory / TENSORS_FILE
    _check_backbone(model, manifest, config_path)
    tensors = _read_tensors(tensors_path, manifest)
    current = adapter_config(model)
    if current is not None and json.loads(json.dumps(current)) != manifest["adapter"]:
        saved = manifest["adapter"]
        differ = sorted(k for k in set(current) | set(saved) if current.get(k) != saved.get(k))
        detail = ", ".join(f"{k}: model {current.get(k)!r}, file {saved.get(k)!r}" for k in differ)
        raise CheckpointError(
            f"{config_path}: the model already has adapters with another config ({detail}); "
            "call remove_adapters(model) first or load into a fresh backbone"
        )
    if current is None:
        try:
            add_adapters(model, **_add_kwargs(manifest["adapter"]))
        except (PlacementError, ValueError, TypeError) as error:
            raise CheckpointError(
                f"{config_path}: its adapter config cannot be applied to this model: {error}"
            ) from error
    try:
        expected = saved_parameters(model)
        for name, tensor in tensors.items():
            if name in expected and expected[name].shape != tensor.shape:
                raise CheckpointError(
                    f"{tensors_path}: tensor {name} has shape {list(tensor.shape)}, the model expects "
                    f"{list(expected[name].shape)}; the config and the weights do not belong together"
                )
        missing = sorted(set(expected) - set(tensors))
        unexpected = sorted(set(tensors) - set(expected))
        if strict and (missing or unexpected):
            raise CheckpointError(
                f"{tensors_path} does not fit this model: missing {_some(missing)}, unexpected {_some(unexpected)}; "
                "pass strict=False to load the rest"
            )
        with torch.no_grad():
            for name, tensor in tensors.items():
                if name in expected:
                    expected[name].copy_(tensor)
    except BaseException:
        if current is None:
            remove_adapters(model)
        raise
    return dict(manifest, missing_keys=missing, unexpected_keys=unexpected)
