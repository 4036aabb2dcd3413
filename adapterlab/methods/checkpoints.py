"""Save and load an adapter set: what one task trains on top of a frozen backbone (lab 9).

The same folder holds what any method with a saved set trains (:class:`~adapterlab.methods.registry.SavedSet`:
LoRA's matrices, BitFit's biases, ...); its manifest then says ``"method": NAME`` with that method's entry in
place of the ``adapter`` entry, and the registry says which tensors the set holds and how a fresh backbone
is given its structure. A set of the backbone's own tensors (BitFit's biases) overwrites them when loaded:
load it into a fresh backbone.

An adapter set is a folder with two files:

* ``adapters.safetensors`` — every tensor the adapter method trains: the adapters, the LayerNorms
  (when the adapters were added with ``train_layernorm``), the classifier, and the pretrained pooler only
  when it trains (``train_pooler``; frozen by default, as in the original adapter code). For BERT-base
  with Houlsby adapters at r = 64 that is about 2.4 M numbers (≈ 10 MB in float32), against 440 MB for
  the whole model: the point of adapters is that a new task costs only this file.
* ``adapter_config.json`` — the manifest: the :class:`~adapterlab.placement.AdapterConfig` that rebuilds
  the adapters, the backbone's name and shape, the tensor names and shapes, the SHA-256 of the tensor
  file, and a checksum over all of that, so a hand-edited config (another activation, say, which would
  load the weights into the wrong nonlinearity) is refused rather than trusted.

The tensors are read with safetensors only — never with ``torch.load`` / pickle, which can run code
hidden in a file.

Why a save survives a crash at any instant. The manifest is the commit point: the folder holds whichever
set its manifest names, and the manifest is replaced by one atomic rename. A save

1. writes the new tensors to a temporary file, syncs it to disk and renames it to
   ``.adapters-<sha256>.safetensors`` (a name no loader reads unless a manifest asks for that hash);
2. writes the new manifest the same way and renames it over ``adapter_config.json`` — from here on the
   folder holds the new set, its tensors in the hidden file;
3. renames the hidden file over ``adapters.safetensors``.

A loader takes the tensors from the hidden file of the manifest's hash when it exists, else from
``adapters.safetensors``, and checks them against that hash. So a kill before step 2 leaves the old set,
a kill after it the new one, never a mix. Temporary and orphaned hidden files of killed saves are removed
by the next save into the folder (and a step 3 it never reached is finished first). One process should
write a folder at a time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import reprlib
import secrets
from pathlib import Path

import safetensors
import safetensors.torch
import torch
from torch import nn

from ..model.placement import PlacementError, encoder_layers
from ..model.trainable import parameter_group
from ..validation import MAX_SEED, SIZE_LIMITS, check_size, json_safe
from .registry import SavedSet, saveable, saved_sets

TENSORS_FILE = "adapters.safetensors"
CONFIG_FILE = "adapter_config.json"
FORMAT = "adapterlab-adapter-set"
#: 2: the manifest carries a checksum over its own contents and the adapter config's every field.
FORMAT_VERSION = 2
#: Tensors of a save in progress, or of a committed save whose last rename a kill cut short.
PENDING_TENSORS = re.compile(r"\.adapters-([0-9a-f]{64})\.safetensors")
#: Files being written (``.<final name>.<random>.tmp``).
TEMPORARY = re.compile(rf"\.({re.escape(TENSORS_FILE)}|{re.escape(CONFIG_FILE)}|adapters-[0-9a-f]{{64}}\.safetensors)\.\w+\.tmp")


class CheckpointError(ValueError):
    """An adapter set cannot be saved or loaded; the message names the file and what is wrong."""


def folder_kind(folder) -> str | None:
    """"adapterlab", "peft" or "adapterhub": whose adapter_config.json the folder holds (None: none, or unknown)."""
    path = Path(folder) / CONFIG_FILE
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    if config.get("format") == FORMAT:
        return "adapterlab"
    if "peft_type" in config:
        return "peft"
    if isinstance(config.get("config"), dict) and str(config.get("version", "")).startswith("adapters."):
        return "adapterhub"
    return None


def describe_kind(kind: str | None) -> str:
    return {"adapterlab": "an adapterlab adapter set", "peft": "a PEFT adapter folder",
            "adapterhub": "an AdapterHub (adapters) adapter folder", None: "no adapter folder any of them reads"}[kind]


def _present(model: nn.Module) -> list[tuple[SavedSet, dict]]:
    """The saved-set kinds the model is prepared for, each with its manifest entry."""
    found = ((kind, kind.describe(model)) for kind in saved_sets())
    return [(kind, entry) for kind, entry in found if entry is not None]


def _method_entry(model: nn.Module) -> dict:
    """The manifest entries that say which method the model's set belongs to and how to rebuild it."""
    present = _present(model)
    if not present:
        raise CheckpointError("this model has no adapters, LoRA layers or other set a method trains to save: prepare "
                              f"it with apply_method(model, METHOD) for one of {', '.join(saveable())} first")
    kind, entry = present[0]
    return {kind.entry: entry} if kind.format is None else {"method": kind.format, kind.entry: entry}


def _kind_of(manifest: dict) -> SavedSet:
    method = manifest.get("method")
    for kind in saved_sets():
        if kind.format == method:
            return kind
    raise ValueError(method)


def saved_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """The parameters a saved set holds: what the method trains — adapters, LoRA matrices, BitFit's biases,
    ... —, the classifier, and the LayerNorms and pooler where they train. Lab 9 compares them before and
    after training a second task."""
    entry = _method_entry(model)
    kind = _kind_of(entry)
    settings = entry[kind.entry]
    return {name: p for name, p in model.named_parameters() if kind.holds(settings, name, parameter_group(model, name))}


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


def manifest_checksum(manifest: dict) -> str:
    """SHA-256 of the manifest without its own ``checksum`` entry, written as canonical JSON (sorted keys)."""
    body = {key: value for key, value in manifest.items() if key != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _pending_name(sha256: str) -> str:
    return f".adapters-{sha256}.safetensors"


def _sync_folder(directory: Path) -> None:
    """Make renames in ``directory`` durable (POSIX; Windows has no handle for a folder)."""
    if hasattr(os, "O_DIRECTORY"):
        handle = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)


def write_durably(directory: Path, name: str, data: bytes) -> None:
    """Put ``data`` at ``directory/name`` whole or not at all: write a temporary file, sync, rename.
    (The run store writes its records with it too.)"""
    temporary = directory / f".{name.lstrip('.')}.{secrets.token_hex(6)}.tmp"
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(handle, view):]
            os.fsync(handle)
        finally:
            os.close(handle)
        os.replace(temporary, directory / name)
    except Exception:
        temporary.unlink(missing_ok=True)  # an error (a full disk) leaves nothing; a kill leaves it to _tidy
        raise
    _sync_folder(directory)


def _committed_sha256(directory: Path) -> str | None:
    """The tensor hash the folder's manifest names, or None when it has no readable manifest."""
    try:
        sha = json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8")).get("sha256")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return sha if isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha) else None


def _tidy(directory: Path) -> None:
    """Finish a committed save a kill cut short, and delete what killed saves left behind."""
    committed = _committed_sha256(directory)
    if committed is not None and (directory / _pending_name(committed)).is_file():
        os.replace(directory / _pending_name(committed), directory / TENSORS_FILE)
        _sync_folder(directory)
    for path in list(directory.iterdir()):
        if TEMPORARY.fullmatch(path.name) or PENDING_TENSORS.fullmatch(path.name):
            os.unlink(path)


#: The dtypes a set is written in: floating types that safetensors stores and every CPU kernel computes in (the
#: float8 types have no matrix product on CPU, so a set loaded from them could not run).
WRITABLE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class OutOfRange(CheckpointError):
    """A trained weight lies beyond what the dtype asked for can hold: nothing was written. ``reason`` says which
    tensor and how far, for a caller that writes the set another way."""

    def __init__(self, reason: str, directory):
        super().__init__(f"{reason}: nothing was saved to {directory}; keep the model's dtype")
        self.reason = reason


def _check_dtype(dtype) -> None:
    if dtype is not None and dtype not in WRITABLE_DTYPES:
        names = ", ".join(f"torch.{str(d).removeprefix('torch.')}" for d in WRITABLE_DTYPES)
        why = ("a name, not a dtype: pass torch.float16, say" if not isinstance(dtype, torch.dtype)
               else "a set in it could not be loaded and run on a CPU" if dtype.is_floating_point
               else "an integer, boolean or complex type would not hold the weights as trained")
        raise CheckpointError(f"dtype must be one of {names} (or None to keep the model's); got {dtype!r}: {why}")


def _beyond_range(model: nn.Module, dtype) -> tuple[str, float] | None:
    """The first saved tensor with a value `dtype` cannot hold, and its largest magnitude (None when all fit)."""
    if dtype is None:
        return None
    limit = torch.finfo(dtype).max
    for name, parameter in saved_parameters(model).items():
        largest = parameter.detach().abs().max().item() if parameter.numel() else 0.0
        if largest > limit:
            return name, largest
    return None


def flushed_to_zero(model: nn.Module, dtype) -> tuple[int, int]:
    """(values of the saved tensors that are not 0 but become 0 in `dtype`, values in all): what writing the set in
    a narrower type loses without a NaN to show it."""
    lost = total = 0
    for parameter in saved_parameters(model).values():
        values = parameter.detach()
        total += values.numel()
        if dtype is not None:
            lost += int(((values != 0) & (values.to(dtype) == 0)).sum())
    return lost, total


def save_adapter_set(model: nn.Module, directory, backbone=None, extra: dict | None = None, dtype=None) -> Path:
    """Write the model's adapter set to ``directory`` (created if needed) and return the folder (lab 9).

    ``backbone`` is a BackboneInfo or a name, recorded so a reader knows what the adapters were
    trained on (default: the model's own name_or_path). ``extra`` is any JSON-serialisable dict
    (task, metrics, ...). ``dtype=torch.float16`` halves the file; loading casts back to the model's
    dtype. A set already in the folder is replaced atomically (see the module's notes).
    """
    from .. import __version__

    _check_dtype(dtype)
    directory = Path(directory)
    beyond = _beyond_range(model, dtype)
    if beyond:
        name, largest = beyond
        raise OutOfRange(f"tensor {name} holds {largest:.3g}, beyond {str(dtype).removeprefix('torch.')}'s range "
                         f"(±{torch.finfo(dtype).max:.6g})", directory)
    tensors = {
        name: p.detach().to(device="cpu", dtype=dtype or p.dtype).contiguous()
        for name, p in saved_parameters(model).items()
    }
    broken = _non_finite(tensors)
    if broken:  # loading would refuse them: refuse now, while the caller still holds the model and can say why
        raise CheckpointError(f"tensor {broken} holds NaN or infinite values{f' in {dtype}' if dtype else ''}; "
                              f"nothing was saved to {directory}: train again (a lower learning rate if it diverged"
                              f"{', or keep the model dtype' if dtype else ''})")
    name = getattr(backbone, "loaded", backbone) or getattr(model.config, "name_or_path", "") or "unknown"
    data = safetensors.torch.save(tensors)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "adapterlab_version": __version__,
        **_method_entry(model),
        "backbone": {"name": str(name), **_backbone_shape(model)},
        "dtype": str(next(iter(tensors.values())).dtype).removeprefix("torch."),
        "tensors": {key: list(t.shape) for key, t in tensors.items()},
        "num_parameters": sum(t.numel() for t in tensors.values()),
        "extra": json_safe(extra or {}),  # a NaN metric is null: the manifest stays JSON
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    try:
        manifest["checksum"] = manifest_checksum(manifest)
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"extra must hold only JSON values (str, numbers, lists, dicts): {error}") from error
    if directory.exists() and not directory.is_dir():
        raise CheckpointError(f"{directory} exists and is not a folder; choose a folder for the adapter set")
    directory.mkdir(parents=True, exist_ok=True)
    _tidy(directory)
    write_durably(directory, _pending_name(manifest["sha256"]), data)
    write_durably(directory, CONFIG_FILE, (json.dumps(manifest, indent=2) + "\n").encode("utf-8"))
    os.replace(directory / _pending_name(manifest["sha256"]), directory / TENSORS_FILE)
    _sync_folder(directory)
    return directory


def read_adapter_config(directory) -> dict:
    """The parsed adapter_config.json of an adapter set, checked against its checksum and for the keys
    loading needs (the ``adapter`` entry stays a dict; :class:`AdapterConfig`.from_dict rebuilds it)."""
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
    except RecursionError:
        raise CheckpointError(f"{path} is not valid JSON (nested too deeply); the adapter set is damaged") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        kind = folder_kind(directory)
        hint = (f": it is {describe_kind(kind)}, whose adapter_config.json has another schema; `adapterlab import "
                f"{directory} --out RUN_FOLDER` reads it into an adapter set") if kind in ("peft", "adapterhub") else ""
        raise CheckpointError(f"{path} is not an adapterlab adapter set (its 'format' is not {FORMAT!r}){hint}")
    version = manifest.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format_version {version!r}; this adapterlab reads up to {FORMAT_VERSION}: upgrade adapterlab"
        )
    if version < FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format_version {version}, written by an older adapterlab whose config carries no "
            "checksum; save the adapter set again with this version"
        )
    if manifest.get("checksum") != manifest_checksum(manifest):
        raise CheckpointError(
            f"{path} was changed after it was saved (its checksum does not match its contents): a hand-edited "
            "config would rebuild the adapters differently from how they were trained (another activation, "
            "bottleneck or layers), so it is refused. Undo the edit, or build the adapters you want and save "
            "them again"
        )
    try:
        kind = _kind_of(manifest)
    except ValueError:
        named = [k.format for k in saved_sets() if k.format is not None]
        raise CheckpointError(f"{path} is malformed: its method {manifest.get('method')!r} is not one of "
                              f"{', '.join(named)} (adapter sets name none)") from None
    required = {kind.entry: dict, "backbone": dict, "sha256": str}
    for key, expected in required.items():
        if not isinstance(manifest.get(key), expected):
            raise CheckpointError(f"{path} is malformed: {key!r} is missing or not a {expected.__name__}")
    if not re.fullmatch(r"[0-9a-f]{64}", manifest["sha256"]):
        raise CheckpointError(f"{path} is malformed: 'sha256' is not a SHA-256 hex digest")
    for key in ("hidden_size", "num_layers", "num_labels"):
        if not isinstance(manifest["backbone"].get(key), int):
            raise CheckpointError(f"{path} is malformed: backbone.{key} is missing or not an integer")
    _check_sizes(manifest, kind.entry, path)
    _check_extra(manifest.get("extra", {}), path)
    return manifest


def _check_sizes(manifest: dict, entry: str, path: Path) -> None:
    """The sizes a reader builds a model from, within the bounds ``import`` and the command line hold them to: a
    config whose checksum was remade around ``num_labels`` 10^8 would otherwise run for minutes toward
    out-of-memory before anything said why."""
    sizes = {"backbone.num_labels": (manifest["backbone"]["num_labels"], "num_labels")}
    sizes.update({f"{entry}.{key}": (manifest[entry][key], key) for key in ("bottleneck", "rank")
                  if key in manifest[entry]})
    for name, (value, limit) in sizes.items():
        try:
            check_size(name, value, SIZE_LIMITS[limit])
        except ValueError as error:
            raise CheckpointError(f"{path} is malformed: {error}; the adapter set is damaged") from None


def _check_extra(extra, path: Path) -> None:
    """The checksum seals ``extra`` but not its shape (``save_adapter_set`` takes any JSON): what a reader
    uses from it — the task, the seed a random backbone is rebuilt from — must still be what train writes."""
    if not isinstance(extra, dict):
        raise CheckpointError(f"{path} is malformed: 'extra' is a JSON {type(extra).__name__}, not an object")
    if "task" in extra and not isinstance(extra["task"], str):
        raise CheckpointError(f"{path} is malformed: extra.task is {reprlib.repr(extra['task'])}, not a task's name")
    seed = extra.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise CheckpointError(f"{path} is malformed: extra.seed is {reprlib.repr(seed)}, not an integer from 0 to "
                              f"{MAX_SEED}")


def _check_backbone(model: nn.Module, manifest: dict, path: Path) -> None:
    saved, here = manifest["backbone"], _backbone_shape(model)
    wrong = [f"{key} {saved[key]} (this model: {here[key]})" for key in here if saved[key] != here[key]]
    if wrong:
        raise CheckpointError(
            f"{path}: these adapters were trained on a backbone of another shape ({saved.get('name', 'unknown')}): "
            f"{', '.join(wrong)}. Load them into the same backbone, e.g. load_backbone({saved.get('name')!r}, "
            f"num_labels={saved['num_labels']})"
        )


def read_tensors(directory: Path, manifest: dict) -> dict[str, torch.Tensor]:
    """The tensors the manifest names: the hidden file of its hash when a save stopped before its last
    rename, else adapters.safetensors; checked against the hash, read without unpickling."""
    pending = directory / _pending_name(manifest["sha256"])
    path = pending if pending.is_file() else directory / TENSORS_FILE
    if not path.is_file():
        raise CheckpointError(f"{path} is missing; the folder does not hold a complete adapter set")
    if _sha256(path) != manifest["sha256"]:
        raise CheckpointError(
            f"{path} does not match the sha256 recorded in {CONFIG_FILE}: the file is corrupt, truncated, "
            "or from another save; save the adapter set again"
        )
    try:
        tensors = safetensors.torch.load_file(str(path))
    except safetensors.SafetensorError as error:
        raise CheckpointError(
            f"{path} is not a readable safetensors file ({error}); save the adapter set again"
        ) from error
    integral = sorted(name for name, tensor in tensors.items() if not tensor.is_floating_point())
    if integral:
        raise CheckpointError(
            f"{path} holds weights of a non-floating type ({_some(integral)}); trained weights are floating-point "
            "numbers: save the adapter set again with a floating dtype"
        )
    broken = _non_finite(tensors)
    if broken:
        raise CheckpointError(
            f"{path}: tensor {broken} holds NaN or infinite values"
            + "; a model with them scores nothing real: train the adapter set again (a lower learning rate if it "
            "diverged)"
        )
    return tensors


def _non_finite(tensors: dict[str, torch.Tensor]) -> str:
    """The tensors holding a NaN or an infinity, named as one message names them ("" when none does)."""
    broken = sorted(name for name, tensor in tensors.items() if not torch.isfinite(tensor).all())
    if len(broken) > 1:
        return f"{broken[0]} (and {len(broken) - 1} more: {_some(broken[1:])})"
    return broken[0] if broken else ""


def _saved_setup(manifest: dict, path: Path) -> tuple[SavedSet, dict]:
    """The saved-set kind the manifest names, and its entry, checked."""
    kind = _kind_of(manifest)
    try:
        return kind, kind.check(manifest[kind.entry])
    except (ValueError, TypeError, PlacementError) as error:
        raise CheckpointError(f"{path}: its {kind.entry} config cannot be applied to this model: {error}") from error


def _differences(here: dict, there: dict) -> str:
    return ", ".join(f"{k}: model {here[k]!r}, file {there[k]!r}" for k in here if here.get(k) != there.get(k))


def _prepare(model: nn.Module, saved: tuple[SavedSet, dict], config_path: Path):
    """Give the model the structure the set needs (adapters, LoRA layers, BitFit's trainable biases, ...),
    unless it has it already; return what undoes that (None when nothing was done)."""
    kind, entry = saved
    present = dict((k.entry, (k, e)) for k, e in _present(model))
    others = [k for name, (k, _) in present.items() if name != kind.entry]
    if others:
        raise CheckpointError(f"{config_path} holds {kind.kind} but the model has {others[0].kind}; load it into a "
                              "fresh backbone")
    if kind.entry in present:
        current = present[kind.entry][1]
        if current == entry:
            return None
        raise CheckpointError(f"{config_path}: the model already has {kind.kind} with another config "
                              f"({_differences(current, entry)}); remove them first or load into a fresh backbone")
    try:
        return kind.rebuild(model, entry)
    except (PlacementError, ValueError, TypeError) as error:
        raise CheckpointError(f"{config_path}: its {kind.entry} config cannot be applied to this model: {error}") from error


def _some(names: list[str], shown: int = 5) -> str:
    return f"{names[:shown]}{' ...' if len(names) > shown else ''}"


def load_adapter_set(model: nn.Module, directory, strict: bool = True) -> dict:
    """Load an adapter set into ``model`` and return its manifest (adapter_config.json) with the
    ``missing_keys`` and ``unexpected_keys`` of the load. Lab 9 swaps tasks on one backbone with it.

    A model without adapters gets them first, as the saved AdapterConfig describes; a model with
    adapters must have the same AdapterConfig (LoRA sets likewise; a BitFit set makes the model train
    BitFit's biases). ``strict`` (default) requires the file to hold exactly the parameters the method
    trains. On any error the model is left as it was.
    """
    directory = Path(directory)
    manifest = read_adapter_config(directory)
    config_path = directory / CONFIG_FILE
    saved = _saved_setup(manifest, config_path)
    _check_backbone(model, manifest, config_path)
    tensors = read_tensors(directory, manifest)
    undo = _prepare(model, saved, config_path)
    try:
        expected = saved_parameters(model)
        for name, tensor in tensors.items():
            if name in expected and expected[name].shape != tensor.shape:
                raise CheckpointError(
                    f"{directory / TENSORS_FILE}: tensor {name} has shape {list(tensor.shape)}, the model expects "
                    f"{list(expected[name].shape)}; the config and the weights do not belong together"
                )
        missing = sorted(set(expected) - set(tensors))
        unexpected = sorted(set(tensors) - set(expected))
        if strict and (missing or unexpected):
            raise CheckpointError(
                f"{directory / TENSORS_FILE} does not fit this model: missing {_some(missing)}, "
                f"unexpected {_some(unexpected)}; pass strict=False to load the rest"
            )
        with torch.no_grad():
            for name, tensor in tensors.items():
                if name in expected:
                    expected[name].copy_(tensor)
    except BaseException:
        if undo is not None:
            undo()
        raise
    return dict(manifest, missing_keys=missing, unexpected_keys=unexpected)
