"""Hugging Face PEFT's LoRA and IA3 folder formats, written and read (as peft 0.21 saves them).

``PeftModel.from_pretrained(base, DIR)`` loads a written folder into a ``BertForSequenceClassification`` of the
same backbone:

* ``adapter_config.json`` — a LoraConfig: ``r``, ``lora_alpha`` (the update is ``lora_alpha / r · B A``, as
  adapterlab's), ``task_type`` SEQ_CLS and ``modules_to_save`` (the classifier; the pooler too when it was
  trained), ``base_model_name_or_path`` (a name the hub resolves; None for a random backbone), and
  ``target_modules`` as a regular expression over the encoder's layers. A plain suffix list would not do:
  PEFT matches ``"dense"`` against every module name ending in ``.dense``, ``bert.pooler.dense`` among them.
  An (IA)³ set is an IA3Config: the keys and values rescaled at their output, the FFN's hidden units at the input
  of ``output.dense`` (``feedforward_modules``).
* ``adapter_model.safetensors`` — ``base_model.model.bert.encoder.layer.{i}.{target}.lora_A.weight`` (r × in) and
  ``lora_B.weight`` (out × r), or ``{module}.ia3_l``, and the classifier (and pooler) under ``base_model.model.``.

PEFT's folder has no place for the number and names of the labels: the base model is made with them
(``num_labels``, ``id2label``, ``label2id``), as the folder's README.md shows; adapterlab_export.json records them.

Reading takes what users save: the targets are read from the matrices the folder holds (a list, a regex or
``layers_to_transform``; a LoRA of some of the encoder's dense layers, query, key and value say, comes in as the
smallest adapterlab target set holding them, with zero matrices on the rest, which compute the same);
``use_rslora``, ``rank_pattern``, ``alpha_pattern`` and ``layers_to_transform`` are exact changes of the
matrices; dropout acts in training only; ``adapter_model.bin`` is read with torch's restricted unpickler; the
model's ``config.json`` saved beside the adapter names the classifier's rows (its ``id2label``). A LoRA whose init rewrites the base weights (PiSSA, OLoRA,
CorDA, LoftQ, LoRA-GA) is refused with PEFT's conversion to plain LoRA.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import safetensors.torch
import torch

from .common import (BASE, EXPORT_FILE, InteropError, copy_into, hub_name, layer_tensors, load_preamble,
                     lora_targets_holding, read_json, read_weights, split_backbone_tensors, stated_labels, write_json,
                     zero_lora_matrices, zero_modules_note)

CONFIG_FILE = "adapter_config.json"
#: The model's transformers config, which a PEFT folder may hold beside the adapter (model.config.save_pretrained).
MODEL_CONFIG_FILE = "config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
TORCH_WEIGHTS_FILE = "adapter_model.bin"
PREFIX = "base_model.model."
#: Each adapterlab target set as the regular expression PEFT fully matches against module names.
TARGET_PATTERNS = {
    "query_value": rf".*{BASE}\.encoder\.layer\.\d+\.attention\.self\.(query|value)",
    "all_dense": rf".*{BASE}\.encoder\.layer\.\d+\.(attention\.self\.(query|key|value)|attention\.output\.dense"
                 r"|intermediate\.dense|output\.dense)",
}
#: adapterlab's all_dense as a target list PEFT matches by suffix (output.dense also names attention.output.dense).
ALL_DENSE_NAMES = ["query", "key", "value", "intermediate.dense", "output.dense"]
#: The LoraConfig fields whose value changes what the model computes, at the value adapterlab's LoRA has.
PLAIN_LORA = {"bias": "none", "use_dora": False, "use_rslora": False, "fan_in_fan_out": False, "rank_pattern": {},
              "alpha_pattern": {}, "layers_to_transform": None, "layer_replication": None, "lora_bias": False,
              "trainable_token_indices": None, "target_parameters": None,
              "use_qalora": False, "use_bdlora": None, "alora_invocation_tokens": None}
#: The pooler trained whole, as modules_to_save may name it: the module or its one dense layer, bare or in full.
POOLER_NAMES = ("pooler", "pooler.dense", f"{BASE}.pooler", f"{BASE}.pooler.dense")


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
    if method == "ia3":
        return _write_ia3(manifest, tensors, folder)
    if method != "lora":
        raise InteropError(f"this is a {method} set, which neither library has a format for: adapters (--to "
                           "adapterhub), LoRA and (IA)³ (--to peft) are exported")
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


def _write_ia3(manifest: dict, tensors: dict[str, torch.Tensor], folder: Path) -> None:
    """Write an adapterlab (IA)³ set as PEFT's IA3Config folder: keys and values rescaled at their output, the
    FFN's hidden units at the input of output.dense (a feedforward module)."""
    classifier, layernorms, pooler = split_backbone_tensors(tensors)
    if layernorms:
        raise InteropError("this (IA)³ set holds LayerNorms, which adapterlab's ia3 never trains: the set is damaged")
    weights = {PREFIX + k: v.contiguous() for k, v in {**classifier, **pooler}.items()}
    theirs = {ours: site for site, ours in IA3_SITES.items()}
    for index, inside in sorted(layer_tensors(tensors).items()):
        for ours, site in theirs.items():
            vector = inside.get(ours)
            if vector is None:
                raise InteropError(f"the set lacks {BASE}.encoder.layer.{index}.{ours}: train it again")
            shape = (1, -1) if site == "output.dense" else (-1, 1)
            weights[f"{PREFIX}{BASE}.encoder.layer.{index}.{site}.ia3_l"] = vector.reshape(shape).contiguous()
    config = {"peft_type": "IA3", "task_type": "SEQ_CLS", "target_modules": IA3_TARGETS,
              "feedforward_modules": IA3_FEEDFORWARD, "modules_to_save": (["pooler"] if pooler else []) + ["classifier", "score"],
              "base_model_name_or_path": hub_name(manifest["backbone"]["name"]), "inference_mode": True,
              "init_ia3_weights": True, "fan_in_fan_out": False, "revision": None, "exclude_modules": None}
    write_json(folder / CONFIG_FILE, config)
    safetensors.torch.save_file(weights, str(folder / WEIGHTS_FILE))


#: PEFT LoRA inits that start from the base weights as they are: only their B A adds to the unchanged backbone.
PLAIN_INITS = (True, False, "gaussian", "eva", "orthogonal", "mica")
#: PEFT LoRA inits whose adapter belongs to a rewritten base model (PEFT subtracts the initial B A from the base
#: weights when it builds them, LoftQ quantizes them): the folder alone does not hold what the model computes.
REWRITING_INITS = ("pissa", "olora", "corda", "loftq", "lora_ga")
CONVERT = ("save it again with model.save_pretrained(DIR, path_initial_model_for_weight_conversion=INIT_DIR), "
           "PEFT's conversion to plain LoRA (INIT_DIR: the adapter saved right after get_peft_model, before training)")
RESAVE = "save it with model.save_pretrained(DIR, safe_serialization=True)"
#: Where adapterlab's (IA)³ vectors sit, in PEFT's module names: the keys and values are rescaled at their output,
#: the FFN's hidden units at the input of its second dense layer (a feedforward module, in PEFT's terms).
IA3_SITES = {"attention.self.key": "attention.self.key.ia3_scale", "attention.self.value":
             "attention.self.value.ia3_scale", "output.dense": "intermediate.ia3_scale"}
IA3_TARGETS = rf".*{BASE}\.encoder\.layer\.\d+\.(attention\.self\.(key|value)|output\.dense)"
IA3_FEEDFORWARD = rf".*{BASE}\.encoder\.layer\.\d+\.output\.dense"


def _init_check(config: dict, folder: Path) -> None:
    """Refuse a LoRA whose init rewrites the base weights: imported onto the plain backbone it would compute else."""
    init = config.get("init_lora_weights", True)
    if init in PLAIN_INITS:
        return
    if isinstance(init, str) and init.lower().startswith(REWRITING_INITS):
        fix = ("it belongs to LoftQ's quantized base model, which adapterlab does not have" if init == "loftq"
               else CONVERT)
        raise InteropError(f"{folder}: its init_lora_weights = {init!r} rewrites the base model's weights when PEFT "
                           f"loads it, so on adapterlab's backbone it would compute something else: {fix}")
    raise InteropError(f"{folder}: its init_lora_weights = {init!r} is not a PEFT init adapterlab knows to leave "
                       "the base weights as they are; it is not imported")


def _task_check(config: dict, folder: Path) -> set:
    """The modules the folder trains whole besides the adapter ({"pooler"} or nothing); an InteropError when it is
    not a sequence classifier's or trains other modules whole."""
    task_type = config.get("task_type")
    saved = set(config.get("modules_to_save") or [])
    if task_type not in ("SEQ_CLS", None):
        raise InteropError(f"{folder}: its task_type is {task_type!r}; adapterlab imports sequence classifiers "
                           "(task_type SEQ_CLS, or modules_to_save ['classifier'])")
    if task_type is None and "classifier" not in saved:
        raise InteropError(f"{folder}: it has no task_type and does not save the classifier: make the adapter with "
                           "task_type='SEQ_CLS' (or modules_to_save=['classifier']) and save it again")
    saved = {"pooler" if name in POOLER_NAMES else name for name in saved} - {"classifier", "score"}
    if saved - {"pooler"}:
        raise InteropError(f"{folder}: it also trains {sorted(saved - {'pooler'})} whole (modules_to_save), which "
                           "adapterlab's methods do not")
    return saved


def _head(weights: dict, saved: set, folder: Path) -> dict:
    """The classifier (and a trained pooler) among a folder's tensors, by the model's own names."""
    head = {k: v for k, v in weights.items()
            if k.startswith("classifier.") or (k.startswith(f"{BASE}.pooler.") and "pooler" in saved)}
    if "classifier.weight" not in head:
        raise InteropError(f"{folder}: it holds no classifier, so there is nothing to evaluate: save it with "
                           "task_type='SEQ_CLS' (PEFT 0.21's path_initial_model_for_weight_conversion leaves it out: copy "
                           "base_model.model.classifier.* from a save without it into adapter_model.safetensors)")
    return head


def load_lines(folder: Path, record: dict, where) -> list[str]:
    """The Python that loads the exported ``folder`` (to be found at ``where``) with PEFT: the base model's
    classifier as many labels wide as the set's, named as the task names them (PEFT's folder does not say)."""
    names = stated_labels(folder / EXPORT_FILE, "id2label", record["id2label"])[0]
    id2label = dict(enumerate(names))
    label2id = {name: row for row, name in id2label.items()}
    return [*load_preamble(record, where, ["peft", "transformers"]),
            "base = transformers.AutoModelForSequenceClassification.from_pretrained(",
            f"    BASE, num_labels={len(names)}, id2label={id2label!r}, label2id={label2id!r})",
            "model = peft.PeftModel.from_pretrained(base, DIR)"]


def _model_labels(folder: Path) -> tuple[list[str], str] | None:
    """The names of the classifier's rows as the model config saved beside the adapter states them, if there is
    one (its id2label; transformers writes label2id with it)."""
    if not (folder / MODEL_CONFIG_FILE).is_file():
        return None
    config = read_json(folder / MODEL_CONFIG_FILE)
    field = "id2label" if config.get("id2label") is not None else "label2id"
    return stated_labels(folder / MODEL_CONFIG_FILE, field, config.get(field))


def _read_weights(folder: Path) -> dict:
    return {k.removeprefix(PREFIX): v for k, v in
            read_weights(folder, WEIGHTS_FILE, TORCH_WEIGHTS_FILE, RESAVE).items()}


def _pattern_value(patterns: dict, module: str, default):
    """A rank_pattern / alpha_pattern entry for a module, matched as PEFT matches it (utils.other.get_pattern_key)."""
    for key, value in (patterns or {}).items():
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default


def read_peft(folder: Path) -> dict:
    """What a PEFT folder holds, checked, and how to put it into an adapterlab model (adapterlab.interop.convert.import_set)."""
    config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    if config.get("peft_type") == "IA3":
        return _read_ia3(folder, config)
    if config.get("peft_type") == "VERA":
        return _read_vera(folder, config)
    if config.get("peft_type") != "LORA":
        raise InteropError(f"{folder}: its peft_type is {config.get('peft_type')!r}; adapterlab imports LORA and "
                           "VERA (adapterlab's lora) and IA3 (adapterlab's ia3) folders")
    saved = _task_check(config, folder)
    _init_check(config, folder)
    for field, value in PLAIN_LORA.items():
        if field in TRANSFORMED:
            continue
        found = config.get(field, value)
        if found != value and not (value in (None, False, {}) and found in (None, False, [], {})):
            raise InteropError(f"{folder}: its LoraConfig sets {field} = {config.get(field)!r}; adapterlab's LoRA "
                               f"computes {field} = {value!r}, so it is not imported")
    weights = _read_weights(folder)
    head = _head(weights, saved, folder)
    pairs = {}
    for name, tensor in weights.items():
        match = re.fullmatch(rf"{BASE}\.encoder\.layer\.(\d+)\.([\w.]+)\.(lora_A|lora_B)\.weight", name)
        if match:
            pairs.setdefault((int(match.group(1)), match.group(2)), {})[match.group(3)] = tensor
        elif ".lora_" in name:
            raise InteropError(f"{folder}: its LoRA also adapts {name.partition('.lora_')[0]}, which adapterlab's LoRA "
                               "leaves alone (a target 'dense' matches the pooler's too): name the encoder's modules, "
                               f"e.g. target_modules={ALL_DENSE_NAMES}")
        elif name not in head:
            raise InteropError(f"{folder}: it holds {name}, which adapterlab's LoRA has no place for")
    targets, added, rank, alpha, renamed = _lora_as_ours(config, pairs, folder)
    notes = [*dropout_note(config.get("lora_dropout", 0.0), "lora_dropout"), *zero_modules_note(targets, added)]

    def apply(model):
        _put_lora(model, folder, config, pairs, targets, rank, alpha, renamed, head, train_pooler="pooler" in saved)

    return {"method": "lora", "base_model": config.get("base_model_name_or_path") or "",
            "num_labels": head["classifier.weight"].shape[0], "name": None, "labels": _model_labels(folder),
            "apply": apply, "notes": notes}


def _put_lora(model, folder: Path, config: dict, pairs: dict, targets: str, rank: int, alpha: float, renamed: dict,
              head: dict, *, train_pooler: bool) -> None:
    """Add adapterlab's LoRA of ``targets`` to ``model`` and copy in ``renamed`` (the folder's matrices, by the
    model's names, for the (layer, module) ``pairs`` it adapts) and ``head``; every other LoRA module of the target
    set gets A = B = 0, which adds nothing."""
    from ..model.lora import add_lora

    n_layers = model.config.num_hidden_layers
    layers = sorted({index for index, _ in pairs})
    # LoRA in fewer layers than the model has is the model PEFT saved when its config picks the layers (by number,
    # by a target regex, or by modules left out); with a target list alone, it came from another backbone
    picked = (config.get("layers_to_transform") is not None or isinstance(config.get("target_modules"), str)
              or bool(config.get("exclude_modules")))
    if layers[-1] >= n_layers or (len(layers) < n_layers and not picked):
        raise InteropError(f"{folder}: its {config.get('peft_type', 'LORA')} sits in layers {layers} of a model with "
                           f"{n_layers}: pass the --backbone it was trained on")
    add_lora(model, rank=rank, alpha=alpha, targets=targets, train_pooler=train_pooler)
    copy_into(model, {**renamed, **zero_lora_matrices(model, targets, renamed), **head}, str(folder))


def _read_vera(folder: Path, config: dict) -> dict:
    """PEFT's VeRA as adapterlab's LoRA, exactly. VeRA adds λ_b ⊙ B(λ_d ⊙ A x), with A (r × in) and B (out × r)
    random projections shared by every module (each module slices them to its size) and only the vectors λ_d and
    λ_b trained: the LoRA update B'A' with A' = diag(λ_d)·A and B' = diag(λ_b)·B at scale 1 (alpha = r)."""
    saved = _task_check(config, folder)
    for field, value in {"bias": "none", "fan_in_fan_out": False}.items():
        if config.get(field, value) != value:
            raise InteropError(f"{folder}: its VeraConfig sets {field} = {config.get(field)!r}; adapterlab's LoRA "
                               f"computes {field} = {value!r}, so it is not imported")
    weights = _read_weights(folder)
    head = _head(weights, saved, folder)
    shared = {name: weights.get(f"base_model.vera_{name}") for name in ("A", "B")}
    if shared["A"] is None or shared["B"] is None:
        raise InteropError(f"{folder}: it was saved without VeRA's shared projections (save_projection=False), which "
                           "PEFT makes again from projection_prng_key with its own initialiser: save it with "
                           "save_projection=True (PEFT's default) to import it")
    rank = int(config["r"])
    pairs = {}
    for name, tensor in weights.items():
        match = re.fullmatch(rf"{BASE}\.encoder\.layer\.(\d+)\.([\w.]+)\.vera_lambda_(b|d)", name)
        if match:
            pairs.setdefault((int(match.group(1)), match.group(2)), {})[match.group(3)] = tensor
        elif name not in head and not name.startswith("base_model.vera_"):
            raise InteropError(f"{folder}: it holds {name}, which VeRA as adapterlab's LoRA has no place for")
    if not pairs or any(set(pair) != {"b", "d"} or pair["d"].shape != (rank,) for pair in pairs.values()):
        raise InteropError(f"{folder}: its VeRA vectors are not one λ_b and one λ_d of r = {rank} per module; the "
                           "folder is damaged")
    holding = lora_targets_holding({path for _, path in pairs})
    if holding is None:
        raise InteropError(f"{folder}: its VeRA adapts {sorted({path for _, path in pairs})}, which is in neither of "
                           "adapterlab's LoRA target sets (query_value, all_dense)")
    targets, added = holding
    notes = [*dropout_note(config.get("vera_dropout", 0.0), "vera_dropout"), *zero_modules_note(targets, added),
             f"VeRA comes in as adapterlab's LoRA of r = {rank}: its shared projections scaled by the trained vectors "
             "(diag(λ_b)·B, diag(λ_d)·A), the same update; training it further trains the whole matrices"]

    def apply(model):
        renamed = {}
        for (index, path), pair in pairs.items():
            module = model.get_submodule(f"{BASE}.encoder.layer.{index}.{path}")
            a, b = shared["A"][:, :module.in_features], shared["B"][:module.out_features, :]
            if a.shape != (rank, module.in_features) or b.shape != (module.out_features, rank):
                raise InteropError(f"{folder}: its shared projections ({list(shared['A'].shape)}, "
                                   f"{list(shared['B'].shape)}) are too small for layer {index}'s {path}: pass the "
                                   "--backbone it was trained on")
            renamed[f"{BASE}.encoder.layer.{index}.{path}.lora_A"] = pair["d"][:, None] * a
            renamed[f"{BASE}.encoder.layer.{index}.{path}.lora_B"] = pair["b"][:, None] * b
        _put_lora(model, folder, config, pairs, targets, rank, float(rank), renamed, head,
                  train_pooler="pooler" in saved)

    return {"method": "lora", "base_model": config.get("base_model_name_or_path") or "",
            "num_labels": head["classifier.weight"].shape[0], "name": None, "labels": _model_labels(folder),
            "apply": apply, "notes": notes}


#: LoraConfig fields whose effect is an exact change of the matrices (each module's own scale and rank, the layers
#: left alone), taken by _lora_as_ours rather than refused.
TRANSFORMED = ("use_rslora", "rank_pattern", "alpha_pattern", "layers_to_transform")


def _lora_as_ours(config: dict, pairs: dict, folder: Path) -> tuple[str, list, int, float, dict]:
    """(target set, the modules it adds with zero matrices, rank, alpha, matrices by adapterlab's names) computing
    what PEFT computes with these matrices: each module's scale (alpha / r, or alpha / √r with use_rslora; alpha_pattern) folded into its B, each rank
    (rank_pattern) padded with zero rows of A and zero columns of B to the largest."""
    paths = {path for _, path in pairs}
    holding = lora_targets_holding(paths)
    if holding is None:
        raise InteropError(
            f"{folder}: its LoRA adapts {sorted(paths)} in each layer, which is in neither of adapterlab's target "
            "sets (query and value: --lora-targets query_value; every dense layer of every encoder layer, the "
            "pooler's not: --lora-targets all_dense); it is not imported")
    targets, added = holding
    rank = max(pair["lora_A"].shape[0] for pair in pairs.values() if "lora_A" in pair)
    default_alpha, rslora = float(config["lora_alpha"]), bool(config.get("use_rslora"))

    def scale(r: int, a: float) -> float:
        return a / math.sqrt(r) if rslora else a / r

    common = scale(int(config["r"]), default_alpha)
    renamed = {}
    for (index, path), pair in sorted(pairs.items()):
        if set(pair) != {"lora_A", "lora_B"}:
            raise InteropError(f"{folder}: layer {index}'s {path} lacks its lora_A or lora_B; the folder is damaged")
        a, b = pair["lora_A"], pair["lora_B"]
        r = a.shape[0]
        name = f"{BASE}.encoder.layer.{index}.{path}"
        own = scale(r, float(_pattern_value(config.get("alpha_pattern"), name, default_alpha)))
        renamed[f"{name}.lora_A"] = torch.cat([a, a.new_zeros(rank - r, a.shape[1])])
        renamed[f"{name}.lora_B"] = torch.cat([b * (own / common), b.new_zeros(b.shape[0], rank - r)], dim=1)
    return targets, added, rank, common * rank, renamed


def dropout_note(dropout, field: str) -> list[str]:
    """What import says of a library's dropout: it acts in training only, so it changes nothing imported."""
    if not dropout:
        return []
    return [(f"{field} = {dropout} acts in training only: the imported set computes what the library computes in "
             "evaluation (adapterlab trains it without dropout)")]


def _read_ia3(folder: Path, config: dict) -> dict:
    """A PEFT IA3 folder whose vectors are adapterlab's ia3 (keys, values, the FFN's hidden units, every layer)."""
    saved = _task_check(config, folder)
    if config.get("fan_in_fan_out"):
        raise InteropError(f"{folder}: its IA3Config sets fan_in_fan_out, which BERT's layers do not have")
    weights = _read_weights(folder)
    head = _head(weights, saved, folder)
    renamed, shapes = {}, set()
    for name, tensor in weights.items():
        match = re.fullmatch(rf"({BASE}\.encoder\.layer\.\d+\.)([\w.]+)\.ia3_l", name)
        if match and match.group(2) in IA3_SITES:
            renamed[match.group(1) + IA3_SITES[match.group(2)]] = tensor.flatten()
            shapes.add((match.group(2), "input" if tensor.shape[0] == 1 else "output"))
        elif name not in head:
            raise InteropError(f"{folder}: it holds {name}, which adapterlab's ia3 has no place for: it rescales the "
                               "keys, the values and the FFN's hidden units, not the attention output. PEFT's "
                               "default IA3Config for BERT names 'output.dense', which matches "
                               "attention.output.dense too: save it again with "
                               f"target_modules=r'{IA3_TARGETS}' and feedforward_modules=r'{IA3_FEEDFORWARD}'")
    wanted = {("attention.self.key", "output"), ("attention.self.value", "output"), ("output.dense", "input")}
    if shapes != wanted:
        raise InteropError(f"{folder}: its IA3 rescales {sorted(shapes)} (module, its output or input); adapterlab's "
                           f"ia3 rescales {sorted(wanted)}: make it with feedforward_modules naming output.dense alone")

    def apply(model):
        from ..methods.ia3 import add_ia3

        add_ia3(model, train_pooler="pooler" in saved)
        expected = {name for name, _ in model.named_parameters() if name.endswith(".ia3_scale")}
        if set(renamed) != expected:
            raise InteropError(f"{folder}: its IA3 vectors ({len(renamed)}) are not three in each layer of this "
                               f"backbone ({len(expected)}): pass the --backbone it was trained on")
        copy_into(model, {**renamed, **head}, str(folder))

    return {"method": "ia3", "base_model": config.get("base_model_name_or_path") or "",
            "num_labels": head["classifier.weight"].shape[0], "name": None, "labels": _model_labels(folder),
            "apply": apply, "notes": []}
