"""AdapterHub's ``adapters`` folder format (version 1.3.0) for the three placements, written and read.

A folder ``model.load_adapter(DIR, use_safetensors=True, set_active=True)`` loads (after ``adapters.init(model)``
on a ``BertForSequenceClassification``; ``use_safetensors=True`` is needed, without it the library looks for
``pytorch_adapter.bin`` only):

* ``adapter_config.json`` — ``{"config": {...}, "name", "hidden_size", "model_type", "model_class",
  "model_name", "version"}``. ``config`` is a bottleneck config (``"architecture": null``; any other
  architecture names another method) with every field of BnConfig:

  ========== ============ ========= ================== ================== ===========
  placement  AdapterHub   mh/output original_ln_before residual_before_ln is_parallel
  ========== ============ ========= ================== ================== ===========
  houlsby    DoubleSeqBn  yes / yes no                 yes                no
  pfeiffer   SeqBn        no / yes  yes                yes                no
  parallel   ParBn        no / yes  no                 (unused)           yes, scaling s
  ========== ============ ========= ================== ================== ===========

  ``reduction_factor`` is d / r (the library builds ``int(d // reduction_factor)`` units), ``leave_out`` the
  layers *without* adapters, ``non_linearity`` adapterlab's activation by transformers' name.
* ``adapter.safetensors`` — ``bert.encoder.layer.{i}.{attention.output|output}.adapters.{name}.adapter_down.0``
  and ``.adapter_up`` (weight, bias; an adapter without biases gets zero biases, which compute the same).
* ``head_config.json`` and ``model_head.safetensors`` — the classifier, as the library saves a static head; with a
  trained pooler, AdapterHub's default classification head (``add_classification_head(name)``: dense and tanh on
  the first token, then the classifier: exactly BERT's pooler and classifier), which ``AutoAdapterModel`` loads
  with the adapter by itself. Its ``label2id`` names the rows with the task's labels (``load_adapter`` sets the
  model's ``id2label`` from it); a static head needs a model of as many labels (``num_labels``).
* ``trained_backbone.safetensors`` — only with ``--backbone-tensors``: the backbone's trained LayerNorms, which no
  AdapterHub adapter holds (the library keeps LayerNorms frozen). Loading them is a step of its own, after the
  adapter: the folder's README.md and ``adapterlab export`` print it, marked REQUIRED. A set that trained them is
  refused without the option: it would load and compute something else.

Import also takes what the library's users save: the flexible classification head (``layers=2``, tanh, or
``layers=1, use_pooler=True``), ``scaling`` (a number, "learned" or "channel": folded into the up-projection;
ParBn's number is the parallel scale), dropout (training only), ``DoubleSeqBnConfig(residual_before_ln=False)``
(the same residual without an Add & Norm before the adapter), ``pytorch_adapter.bin`` / ``pytorch_model_head.bin``
(read with torch's restricted unpickler), the top folder of ``save_adapter_setup`` (its one adapter's subfolder), a
``reduction_factor`` per layer (each adapter padded with zero units to the largest bottleneck, which computes the
same) and a LoRA of any of q, k, v and the FFN's dense layers, in the layers ``leave_out`` leaves (the smallest
adapterlab target set holding them, zero matrices on the rest).
A head whose ``label2id`` names the task's labels in another order comes in with its rows in the task's order
(:func:`adapterlab.interop.common.label_order`).

A LoRA set of the query and value projections goes as AdapterHub's LoRAConfig (``selfattn_lora``, ``attn_matrices``
q and v, ``alpha``; ``version`` 1.3.0, for the library resets alpha to r when it reads a LoRA of a version below
1.1.0), its matrices as ``...attention.self.{query|value}.loras.{name}.lora_A`` / ``lora_B``. LoRA on every dense
layer cannot go: AdapterHub's LoRA has no place on ``attention.output.dense`` (PEFT has: ``--to peft``).

Where AdapterHub's own defaults differ (its presets use swish or ReLU, reduction factor 16 or 2, "bert" or
"mam_adapter" init, frozen LayerNorms), the exported config says adapterlab's values; the init is recorded as
the nearest AdapterHub scheme and matters only to training from scratch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import safetensors.torch
import torch

from .common import (BASE, LAYER_NAME, InteropError, copy_into, hub_name, label_names, layer_tensors, load_preamble,
                     lora_targets_holding, read_weights, split_backbone_tensors, stated_labels, write_json,
                     zero_lora_matrices, zero_modules_note)
from .peft import dropout_note

LIBRARY_VERSION = "adapters.1.3.0"
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter.safetensors"
TORCH_WEIGHTS_FILE = "pytorch_adapter.bin"
HEAD_CONFIG_FILE = "head_config.json"
HEAD_FILE = "model_head.safetensors"
TORCH_HEAD_FILE = "pytorch_model_head.bin"
SETUP_FILE = "adapter_setup.json"
RESAVE = "save it with model.save_adapter(DIR, NAME, with_head=True, use_safetensors=True)"
STATIC_HEAD = {"classifier.weight", "classifier.bias"}
FLEXIBLE_HEAD = {f"{BASE}.pooler.dense.weight", f"{BASE}.pooler.dense.bias"}
BACKBONE_FILE = "trained_backbone.safetensors"
#: Every field of AdapterHub's BnConfig at the value adapterlab's adapters compute (as adapters 1.3.0 writes it).
BASE_CONFIG = {
    "architecture": None, "adapter_residual_before_ln": False, "cross_adapter": False, "dropout": 0.0,
    "factorized_phm_W": True, "factorized_phm_rule": False, "hypercomplex_nonlinearity": "glorot-uniform",
    "init_weights": "bert", "init_weights_seed": None, "inv_adapter": None, "inv_adapter_reduction_factor": None,
    "is_parallel": False, "learn_phm": True, "leave_out": [], "ln_after": False, "ln_before": False,
    "mh_adapter": False, "non_linearity": "relu", "original_ln_after": True, "original_ln_before": False,
    "output_adapter": True, "phm_bias": True, "phm_c_init": "normal", "phm_dim": 4, "phm_init_range": 0.0001,
    "phm_layer": False, "phm_rank": 1, "reduction_factor": 16, "residual_before_ln": True, "scaling": 1.0,
    "shared_W_phm": False, "shared_phm_rule": True, "stochastic_depth": 0.0, "use_gating": False,
}
#: The fields that place the adapter: what makes a config Houlsby's, Pfeiffer's or the parallel one.
PLACEMENT_FIELDS = {
    "houlsby": {"mh_adapter": True, "output_adapter": True, "original_ln_before": False, "residual_before_ln": True,
                "is_parallel": False},
    "pfeiffer": {"mh_adapter": False, "output_adapter": True, "original_ln_before": True, "residual_before_ln": True,
                 "is_parallel": False},
    "parallel": {"mh_adapter": False, "output_adapter": True, "original_ln_before": False, "residual_before_ln": True,
                 "is_parallel": True},
}
#: The AdapterHub preset each placement is, for messages and docs.
PRESET_NAMES = {"houlsby": "DoubleSeqBnConfig", "pfeiffer": "SeqBnConfig", "parallel": "ParBnConfig"}
#: adapterlab's activation → transformers' name (what AdapterHub's non_linearity is looked up in).
ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "silu": "swish", "swish": "swish", "tanh": "tanh", "identity": "linear"}
FROM_ACTIVATION = {"gelu": "gelu", "relu": "relu", "swish": "silu", "silu": "silu", "tanh": "tanh", "linear": "identity"}
INITS = {"houlsby": "houlsby", "zero_up": "mam_adapter", "bert": "bert"}
SITES = {"attention": "attention.output", "ffn": "output"}


def reduction_factor(d: int, r: int):
    """A reduction factor for which AdapterHub builds exactly r units, ``int(d // factor) == r``; d / r itself when r
    divides d. An InteropError when no float does (r > d)."""
    factor = d / r
    if factor.is_integer() and int(d // factor) == r:
        return int(factor)
    for _ in range(64):  # d / r rounded; step to the neighbouring floats until the library's floor gives r
        if int(d // factor) == r:
            return factor
        factor = math.nextafter(factor, 0.0) if int(d // factor) < r else math.nextafter(factor, math.inf)
    raise InteropError(f"AdapterHub sizes a bottleneck as int(d // reduction_factor); no reduction factor gives "
                       f"r = {r} for d = {d}: export a set with a bottleneck of at most d")


def _adapter_names(position: str, name: str) -> dict[str, str]:
    site = SITES[position]
    return {f"{site}.adapter.down.weight": f"{site}.adapters.{name}.adapter_down.0.weight",
            f"{site}.adapter.down.bias": f"{site}.adapters.{name}.adapter_down.0.bias",
            f"{site}.adapter.up.weight": f"{site}.adapters.{name}.adapter_up.weight",
            f"{site}.adapter.up.bias": f"{site}.adapters.{name}.adapter_up.bias"}


def write_adapterhub(manifest: dict, tensors: dict[str, torch.Tensor], folder: Path, *, name: str | None = None,
                     backbone_tensors: bool = False) -> None:
    """Write an adapterlab adapter set (houlsby, pfeiffer, parallel; LoRA of query and value) as an AdapterHub
    folder (module docstring)."""
    from ..model.placement import AdapterConfig

    method = manifest.get("method", "adapters")
    if method == "ia3":
        raise InteropError("this is an ia3 set: export it with --to peft (AdapterHub's IA3Config rescales the FFN's "
                           "units before their activation, adapterlab's after)")
    if method not in ("adapters", "lora"):
        raise InteropError(f"this is a {method} set, which neither library has a format for: adapters (--to "
                           "adapterhub), LoRA and (IA)³ (--to peft) are exported")
    d, n_layers = manifest["backbone"]["hidden_size"], manifest["backbone"]["num_layers"]
    # a task of the user's own files is named own-<fingerprint>; its adapter, own_<fingerprint>
    name = name or ((manifest.get("extra") or {}).get("task") or "adapterlab").replace("-", "_")
    if not name.isidentifier():
        raise InteropError(f"the adapter's name must be a Python identifier (AdapterHub keeps it in a module name); "
                           f"got {name!r}: pass --name")
    if method == "lora":
        lora = _lora_config(manifest)
    else:
        config = AdapterConfig.from_dict(manifest["adapter"])
        if config.placement not in PLACEMENT_FIELDS:
            raise InteropError(f"placement {config.placement!r} has no AdapterHub counterpart")
    classifier, layernorms, pooler = split_backbone_tensors(tensors)
    if layernorms and not backbone_tensors:
        raise InteropError(
            f"this set trained the backbone's LayerNorms ({len(layernorms)} tensors), which an AdapterHub adapter has "
            "no place for (AdapterHub keeps them frozen): pass --backbone-tensors to write them beside the adapter in "
            f"{BACKBONE_FILE} (a step of its own when loading), or train with --no-train-layernorm")
    if method == "lora":
        hub_config, weights = _lora_weights(lora, tensors, name, n_layers)
    else:
        hub_config, weights = _adapter_weights(config, tensors, name, d, n_layers)
    base = hub_name(manifest["backbone"]["name"]) or ""
    common = {"hidden_size": d, "model_class": "BertForSequenceClassification", "model_name": base,
              "model_type": "bert", "version": LIBRARY_VERSION}
    write_json(folder / CONFIG_FILE, {"config": hub_config, "name": name, **common})
    safetensors.torch.save_file(weights, str(folder / WEIGHTS_FILE))
    num_labels = manifest["backbone"]["num_labels"]
    labels = {name: row for row, name in enumerate(label_names(manifest))}
    if pooler:  # a trained pooler and the classifier are AdapterHub's default classification head
        head_config = {"config": {"head_type": "classification", "num_labels": num_labels, "layers": 2,
                                  "activation_function": "tanh", "use_pooler": False, "bias": True,
                                  "dropout_prob": None, "label2id": labels},
                       "name": name, **common, "model_class": "BertAdapterModel"}
        head = {f"heads.{name}.1.{p}": pooler[f"{BASE}.pooler.dense.{p}"] for p in ("weight", "bias")}
        head.update({f"heads.{name}.4.{p}": classifier[f"classifier.{p}"] for p in ("weight", "bias")})
    else:
        head_config = {"config": None, "name": None, "num_labels": num_labels, "label2id": labels, **common}
        head = classifier
    write_json(folder / HEAD_CONFIG_FILE, head_config)
    safetensors.torch.save_file({k: v.contiguous() for k, v in head.items()}, str(folder / HEAD_FILE))
    if layernorms:
        safetensors.torch.save_file({k: v.contiguous() for k, v in layernorms.items()}, str(folder / BACKBONE_FILE))


def load_lines(folder: Path, record: dict, where) -> list[str]:
    """The Python that loads the exported ``folder`` (to be found at ``where``) in AdapterHub, every step of it: a
    static head is as many labels wide as the set's classifier, and load_adapter names its labels."""
    flexible = json.loads((folder / HEAD_CONFIG_FILE).read_text(encoding="utf-8")).get("config") is not None
    backbone_file = (folder / BACKBONE_FILE).is_file()
    modules = ["adapters", "transformers"] + (["safetensors.torch"] if backbone_file else [])
    lines = load_preamble(record, where, modules)
    if flexible:
        lines.append("model = adapters.AutoAdapterModel.from_pretrained(BASE)  # its classification head is the "
                     "trained pooler and the classifier")
    else:
        num_labels = record["backbone"]["num_labels"]
        lines += [f"model = transformers.BertForSequenceClassification.from_pretrained(BASE, num_labels={num_labels})",
                  "adapters.init(model)"]
    lines.append("model.load_adapter(DIR, use_safetensors=True, set_active=True)  # the head and its label names too")
    if backbone_file:
        lines.append(f"model.load_state_dict(safetensors.torch.load_file(DIR + '/{BACKBONE_FILE}'), strict=False)"
                     "  # REQUIRED: the trained LayerNorms; without this line the model computes something else")
    return lines


def _adapter_weights(config, tensors: dict, name: str, d: int, n_layers: int) -> tuple[dict, dict]:
    """The bottleneck config and the adapter tensors, by AdapterHub's names, of an adapterlab adapter set."""
    from ..model.placement import POSITIONS

    layers = config.layer_indices(n_layers)
    hub_config = dict(BASE_CONFIG, **PLACEMENT_FIELDS[config.placement],
                      non_linearity=ACTIVATIONS[config.activation], init_weights=INITS[config.init],
                      reduction_factor=reduction_factor(d, config.bottleneck),
                      leave_out=[i for i in range(n_layers) if i not in layers])
    if config.placement == "parallel":
        hub_config["scaling"] = float(config.parallel_scale)
    by_layer = layer_tensors(tensors)
    weights = {}
    for index in layers:
        for position, _ in POSITIONS[config.placement]:
            for ours, theirs in _adapter_names(position, name).items():
                tensor = by_layer.get(index, {}).get(ours)
                if tensor is None and ours.endswith(".bias") and not config.bias:
                    weight = by_layer[index][ours.replace(".bias", ".weight")]
                    tensor = torch.zeros(weight.shape[0], dtype=weight.dtype)  # no bias computes as a zero bias
                if tensor is None:
                    raise InteropError(f"the set lacks {BASE}.encoder.layer.{index}.{ours}; it is damaged: train it again")
                weights[f"{BASE}.encoder.layer.{index}.{theirs}"] = tensor.contiguous()
    return hub_config, weights


#: LoRAConfig as adapters 1.3.0 writes it, for adapterlab's LoRA of the query and value projections.
LORA_CONFIG = {"architecture": "lora", "selfattn_lora": True, "intermediate_lora": False, "output_lora": False,
               "attn_matrices": ["q", "v"], "composition_mode": "add", "dropout": 0.0, "dtype": None,
               "init_weights": "lora", "init_weights_seed": None, "leave_out": [], "use_dora": False,
               "use_gating": False, "vera_b": None, "vera_d": None}


def _lora_config(manifest: dict):
    from ..model.lora import LoRAConfig

    lora = LoRAConfig.from_dict(manifest["lora"])
    if lora.targets != "query_value":
        raise InteropError("AdapterHub's LoRA has no place for a LoRA on attention.output.dense (it adapts the "
                           "attention's query, key and value and the FFN's two dense layers): export this set with --to "
                           "peft, or train with --lora-targets query_value")
    return lora


def _lora_weights(lora, tensors: dict, name: str, n_layers: int) -> tuple[dict, dict]:
    """AdapterHub's LoRAConfig and the LoRA matrices by AdapterHub's names, of an adapterlab LoRA set."""
    from ..model.lora import LORA_TARGETS

    hub_config = dict(LORA_CONFIG, r=lora.rank, alpha=int(lora.alpha) if float(lora.alpha).is_integer() else lora.alpha)
    by_layer, weights = layer_tensors(tensors), {}
    for index in range(n_layers):
        for target in lora.target_modules:
            for matrix in ("lora_A", "lora_B"):
                tensor = by_layer.get(index, {}).get(f"{LORA_TARGETS[target]}.{matrix}")
                if tensor is None:
                    raise InteropError(f"the set lacks layer {index}'s {target} {matrix}; it is damaged: train it again")
                weights[f"{BASE}.encoder.layer.{index}.{LORA_TARGETS[target]}.loras.{name}.{matrix}"] = tensor.contiguous()
    return hub_config, weights


def _refuse(folder: Path, why: str) -> InteropError:
    return InteropError(f"{folder}: {why}; no adapterlab placement computes what this adapter computes, so it is "
                        "not imported (adapterlab imports DoubleSeqBn, SeqBn and ParBn adapters with adapterlab's options)")


def placement_of(config: dict, folder: Path) -> str:
    """Which adapterlab placement computes what an AdapterHub bottleneck config computes, or an InteropError."""
    if config.get("architecture") is not None:
        raise InteropError(f"{folder}: its adapter is a {config['architecture']} adapter; adapterlab imports "
                           "bottleneck adapters from AdapterHub (and LoRA from PEFT)")
    for field, value in (("ln_before", False), ("ln_after", False), ("use_gating", False), ("phm_layer", False),
                         ("inv_adapter", None), ("original_ln_after", True), ("stochastic_depth", 0.0)):
        if config.get(field, BASE_CONFIG[field]) != value:
            raise _refuse(folder, f"its config sets {field} = {config.get(field)!r} (adapterlab's adapters: {value!r})")
    scaling = config.get("scaling", 1.0)
    if not isinstance(scaling, (int, float)) and scaling not in ("learned", "channel"):
        raise _refuse(folder, f"its scaling is {scaling!r}")
    found = {field: config.get(field, BASE_CONFIG[field]) for field in PLACEMENT_FIELDS["houlsby"]}
    for placement, fields in PLACEMENT_FIELDS.items():
        # without the Add & Norm before the adapter, the residual is the adapter's input either way
        ignored = ("original_ln_before", "residual_before_ln") if placement == "parallel" else (
            () if fields["original_ln_before"] else ("residual_before_ln",))
        if all(found[k] == v for k, v in fields.items() if k not in ignored) and found["residual_before_ln"] in (True, False):
            return placement
    if found["mh_adapter"] is False and found["original_ln_before"] is False and not found["is_parallel"]:
        raise _refuse(folder, "its adapter sits after the FFN only but reads the FFN's own output, not the output of its "
                              "Add & Norm (the FFN half of Houlsby's placement, not Pfeiffer's SeqBnConfig)")
    raise _refuse(folder, "its adapters sit where none of houlsby (DoubleSeqBn), pfeiffer (SeqBn) and parallel "
                          f"(ParBn) put them ({found})")


def setup_adapter(folder: Path) -> Path:
    """The adapter's own folder inside the top folder of ``save_adapter_setup`` (it holds adapter_setup.json and
    one subfolder per adapter); ``folder`` itself when it is no such top folder."""
    if not (folder / SETUP_FILE).is_file() or (folder / CONFIG_FILE).is_file():
        return folder
    try:
        setup = json.loads((folder / SETUP_FILE).read_text(encoding="utf-8"))
    except ValueError:
        raise InteropError(f"{folder}: its {SETUP_FILE} is not JSON; the folder is damaged") from None
    composed = setup.get("adapter_setup")
    names = sorted({name for name in _names_in(composed) if (folder / name).is_dir()})
    if len(names) != 1:
        kind = composed.get("type", "composition") if isinstance(composed, dict) else "composition"
        one = f"adapterlab import {folder / (names[0] if names else 'NAME')}"
        raise InteropError(f"{folder}: it is an AdapterHub {kind} of the adapters {names}, which adapterlab does not "
                           f"compute (it runs one adapter set at a time): no import gives the saved setup's outputs. "
                           f"`{one}` imports that adapter alone, a different model from this setup")
    return folder / names[0]


def _names_in(setup) -> list[str]:
    """Every adapter name in a saved composition block ({"type": ..., "children": [...]}, nested)."""
    if isinstance(setup, str):
        return [setup]
    if isinstance(setup, dict):
        return [name for child in setup.get("children", []) for name in _names_in(child)]
    if isinstance(setup, list):
        return [name for child in setup for name in _names_in(child)]
    return []


def read_adapterhub(folder: Path) -> dict:
    """What an AdapterHub folder holds, checked, and how to put it into an adapterlab model (adapterlab.interop.convert.import_set)."""
    from ..model.placement import POSITIONS, add_adapters

    hub = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    config, name, d = hub["config"], hub.get("name"), hub.get("hidden_size")
    if config.get("architecture") == "lora":
        return _read_lora(folder, hub)
    placement = placement_of(config, folder)
    if hub.get("model_type", "bert") != "bert":
        raise InteropError(f"{folder}: its adapter was made for a {hub.get('model_type')} model; adapterlab's "
                           "backbones are BERT models")
    activation = FROM_ACTIVATION.get(str(config.get("non_linearity", "")).lower())
    if activation is None:
        raise _refuse(folder, f"its nonlinearity {config.get('non_linearity')!r} is none of "
                              f"{', '.join(FROM_ACTIVATION)}")
    weights = read_weights(folder, WEIGHTS_FILE, TORCH_WEIGHTS_FILE, RESAVE)
    head, layernorms, pooler, num_labels = _read_head(folder)
    layer_weights = layer_tensors(weights)
    adapted = sorted(layer_weights)
    leave_out = set(config.get("leave_out") or [])
    if set(adapted) & leave_out or any(not k.startswith(f"{BASE}.encoder.layer.") for k in weights):
        raise InteropError(f"{folder}: {WEIGHTS_FILE} does not match its config (layers {adapted}, leave_out "
                           f"{sorted(leave_out)})")
    sizes = {index: _bottleneck_of(config.get("reduction_factor"), index, d, folder) for index in adapted}
    bottleneck = max(sizes.values(), default=0)
    scaling = config.get("scaling", 1.0)
    parallel_scale = float(scaling) if placement == "parallel" and not isinstance(scaling, str) else 1.0
    renamed = {}
    for index in adapted:
        for position, _ in POSITIONS[placement]:
            for ours, theirs in _adapter_names(position, name).items():
                tensor = layer_weights[index].pop(theirs, None)
                if tensor is None:
                    raise InteropError(f"{folder}: {WEIGHTS_FILE} lacks {BASE}.encoder.layer.{index}.{theirs}")
                renamed[f"{BASE}.encoder.layer.{index}.{ours}"] = tensor
            learned = layer_weights[index].pop(f"{SITES[position]}.adapters.{name}.scaling", None)
            if isinstance(scaling, str) and learned is None:
                raise InteropError(f"{folder}: its scaling is {scaling!r} but layer {index} holds no scale")
            _fold_scale(renamed, f"{BASE}.encoder.layer.{index}.{SITES[position]}.adapter.up",
                        learned if learned is not None else float(scaling) / parallel_scale)
        if layer_weights[index]:
            raise _refuse(folder, f"layer {index} holds more than a {PRESET_NAMES[placement]} adapter: "
                                  f"{sorted(layer_weights[index])[:3]}")
    for key, tensor in renamed.items():
        index = int(LAYER_NAME.fullmatch(key).group(1))
        if key.endswith("down.weight") and tensor.shape != (sizes[index], d):
            raise InteropError(f"{folder}: layer {index}'s down-projection has shape {list(tensor.shape)}, its config "
                               f"says [{sizes[index]}, {d}]")
    renamed = {key: _padded(key, tensor, bottleneck) for key, tensor in renamed.items()}
    notes = dropout_note(config.get("dropout", 0.0), "dropout")
    if len(set(sizes.values())) > 1:
        notes.append(f"its bottleneck differs between layers ({', '.join(f'{i}: {r}' for i, r in sizes.items())}): "
                     f"each adapter is padded with zero units to r = {bottleneck}, which computes the same; training "
                     "it further would train those units too")

    def apply(model):
        n_layers = model.config.num_hidden_layers
        if any(i >= n_layers for i in adapted) or any(i not in adapted for i in range(n_layers) if i not in leave_out):
            raise InteropError(f"{folder}: its adapters sit in layers {adapted} of a model with other layers; "
                               "pass the --backbone it was trained on")
        settings = dict(bottleneck=bottleneck, activation=activation, layers=adapted,
                        train_layernorm=bool(layernorms), train_pooler=pooler)
        if placement == "parallel":
            settings["parallel_scale"] = parallel_scale
        add_adapters(model, placement, **settings)
        copy_into(model, {**renamed, **head}, str(folder))

    return {"method": placement, "base_model": hub.get("model_name") or "", "num_labels": num_labels, "name": name,
            "labels": _head_labels(folder), "apply": apply, "notes": notes}


def _bottleneck_of(factor, index: int, d: int, folder: Path) -> int:
    """Layer ``index``'s bottleneck as AdapterHub sizes it, ``int(d // reduction_factor)``; the factor is one number
    or, per layer, {"<layer>": factor, "default": factor}."""
    if isinstance(factor, Mapping):
        factor = factor.get(str(index), factor.get("default"))
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 0:
        raise InteropError(f"{folder}: its reduction_factor gives layer {index} no size ({factor!r}); the folder is "
                           "damaged")
    return int(d // factor)


def _padded(name: str, tensor: torch.Tensor, bottleneck: int) -> torch.Tensor:
    """An adapter tensor with zero units added up to ``bottleneck``: zero rows of the down-projection and its bias,
    zero columns of the up-projection. A zero unit adds W_up[:, j]·f(0) = 0 whatever f is: the same adapter."""
    if name.endswith(("down.weight", "down.bias")):
        missing = bottleneck - tensor.shape[0]
        return torch.cat([tensor, tensor.new_zeros(missing, *tensor.shape[1:])]) if missing else tensor
    if name.endswith("up.weight"):
        missing = bottleneck - tensor.shape[1]
        return torch.cat([tensor, tensor.new_zeros(tensor.shape[0], missing)], dim=1) if missing else tensor
    return tensor


def _fold_scale(tensors: dict, up: str, scale) -> None:
    """AdapterHub multiplies the up-projection's output by ``scaling`` (a number, one learned number or one per
    channel): the same as an up-projection with its rows and bias scaled, which is exactly what is imported."""
    if isinstance(scale, float) and scale == 1.0:
        return
    scale = torch.as_tensor(scale, dtype=tensors[f"{up}.weight"].dtype).flatten()
    tensors[f"{up}.weight"] = tensors[f"{up}.weight"] * scale[:, None]
    tensors[f"{up}.bias"] = tensors[f"{up}.bias"] * scale


def _version_below(version: str, least: tuple[int, ...]) -> bool:
    digits = str(version).removeprefix("adapters.").split(".")
    try:
        return tuple(int(d) for d in digits[:3]) < least
    except ValueError:
        return False


def _read_head(folder: Path) -> tuple[dict, dict, bool, int]:
    """(the classifier, pooler and LayerNorm tensors to copy by the model's own names, the trained LayerNorms,
    whether the pooler is trained, the label count) of an AdapterHub folder: its static head, or its flexible
    classification head when that is a pooler and a classifier (module docstring)."""
    if not (folder / HEAD_CONFIG_FILE).is_file():
        raise InteropError(f"{folder}: it has no {HEAD_CONFIG_FILE}, so no classifier to evaluate: save the adapter "
                           "with with_head=True")
    head_config = json.loads((folder / HEAD_CONFIG_FILE).read_text(encoding="utf-8"))
    weights = read_weights(folder, HEAD_FILE, TORCH_HEAD_FILE, RESAVE)
    if head_config.get("config") is None:
        head = weights
    else:
        head = _flexible_head(folder, head_config, weights)
    if not {"classifier.weight", "classifier.bias"} <= set(head) or set(head) - STATIC_HEAD - FLEXIBLE_HEAD:
        raise InteropError(f"{folder}: its head holds {sorted(head)}; adapterlab reads the static head of a "
                           "BertForSequenceClassification (classifier.weight, classifier.bias) or a classification "
                           "head of AdapterHub's")
    extra = safetensors.torch.load_file(str(folder / BACKBONE_FILE)) if (folder / BACKBONE_FILE).is_file() else {}
    _, layernorms, pooler = split_backbone_tensors(extra)
    if set(extra) - set(layernorms) - set(pooler):
        raise InteropError(f"{folder}: {BACKBONE_FILE} holds tensors other than LayerNorms and the pooler")
    if pooler and set(head) & set(pooler):
        raise InteropError(f"{folder}: both its head and {BACKBONE_FILE} hold a pooler; the folder is damaged")
    pooled = {**head, **extra}
    return pooled, layernorms, any(k.startswith(f"{BASE}.pooler.") for k in pooled), head["classifier.weight"].shape[0]


def _head_labels(folder: Path) -> tuple[list[str], str] | None:
    """The names of the head's rows as head_config.json states them: the label2id of a classification head's
    config, or of a static head's model config (common.stated_labels)."""
    head_config = json.loads((folder / HEAD_CONFIG_FILE).read_text(encoding="utf-8"))
    if head_config.get("config") is None:
        return stated_labels(folder / HEAD_CONFIG_FILE, "label2id", head_config.get("label2id"))
    return stated_labels(folder / HEAD_CONFIG_FILE, "config.label2id", head_config["config"].get("label2id"))


def _flexible_head(folder: Path, head_config: dict, weights: dict) -> dict:
    """AdapterHub's classification head as adapterlab's pooler and classifier: ``layers=2`` (its default) is
    dropout, dense, tanh on the first token, dropout, dense: a trained pooler and the classifier; ``layers=1,
    use_pooler=True`` is the classifier on the backbone's own pooler, BertForSequenceClassification's static head."""
    config, name = head_config["config"], head_config.get("name")
    settings = (config.get("head_type"), config.get("layers"), config.get("use_pooler", False))
    prefix = f"heads.{name}."
    if settings == ("classification", 2, False) and str(config.get("activation_function")).lower() == "tanh":
        names = {"1.weight": f"{BASE}.pooler.dense.weight", "1.bias": f"{BASE}.pooler.dense.bias",
                 "4.weight": "classifier.weight", "4.bias": "classifier.bias"}
    elif settings == ("classification", 1, True):
        names = {"1.weight": "classifier.weight", "1.bias": "classifier.bias"}
    else:
        raise InteropError(
            f"{folder}: its head is a {config.get('head_type')} head with layers={config.get('layers')}, "
            f"activation_function={config.get('activation_function')!r}, use_pooler={config.get('use_pooler')}; "
            "adapterlab's classifier is BERT's pooler (dense and tanh on the first token) and one dense layer: "
            "add_classification_head(name) (layers=2, tanh) or add_classification_head(name, layers=1, use_pooler=True)")
    if set(weights) - {prefix + k for k in names}:
        raise InteropError(f"{folder}: its head holds {sorted(set(weights) - {prefix + k for k in names})}, which "
                           "its head_config.json does not describe")
    head = {ours: weights[prefix + theirs] for theirs, ours in names.items() if prefix + theirs in weights}
    if "classifier.weight" in head and "classifier.bias" not in head:  # bias=False: a zero bias computes the same
        head["classifier.bias"] = head["classifier.weight"].new_zeros(head["classifier.weight"].shape[0])
    return head


#: Where AdapterHub's LoRAConfig puts its matrices in a BERT layer: attn_matrices (with selfattn_lora), and the
#: FFN's two dense layers (intermediate_lora, output_lora).
HUB_LORA_MODULES = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
                    "intermediate": "intermediate.dense", "output": "output.dense"}


def _read_lora(folder: Path, hub: dict) -> dict:
    """An AdapterHub LoRA on any of the query, key and value projections and the FFN's dense layers, in the layers
    ``leave_out`` leaves: adapterlab's LoRA of the smallest target set holding those modules, with zero matrices
    where the library has none (:func:`~adapterlab.interop.common.lora_targets_holding`), which computes the same."""
    from ..model.lora import add_lora

    config, name = hub["config"], hub.get("name")
    wanted = {"composition_mode": "add", "use_gating": False, "use_dora": False}
    for field, value in wanted.items():
        if config.get(field, value) != value:
            raise InteropError(f"{folder}: its LoRAConfig sets {field} = {config.get(field)!r}; adapterlab's LoRA "
                               f"computes {field} = {value!r}, so it is not imported")
    matrices = config.get("attn_matrices") or []
    unknown = [m for m in matrices if m not in ("q", "k", "v")]
    if unknown:
        raise InteropError(f"{folder}: its LoRA adapts the attention matrices {unknown}, which BERT does not have")
    configured = {HUB_LORA_MODULES[m] for m in matrices if config.get("selfattn_lora", True)}
    configured |= {HUB_LORA_MODULES[part] for part in ("intermediate", "output") if config.get(f"{part}_lora")}
    holding = lora_targets_holding(configured)
    if not configured or holding is None:
        raise InteropError(f"{folder}: its LoRA adapts {sorted(configured) or 'no module'}, which is in neither of "
                           "adapterlab's target sets (query_value, all_dense)")
    targets, added = holding
    rank, alpha = int(config["r"]), float(config.get("alpha", 8))
    if _version_below(hub.get("version", ""), (1, 1, 0)):
        alpha = float(rank)  # as the library reads it: before 1.1.0 its LoRA scaled by 1, so it resets alpha to r
    weights = read_weights(folder, WEIGHTS_FILE, TORCH_WEIGHTS_FILE, RESAVE)
    vera = config.get("vera_d") is not None or config.get("vera_b") is not None
    if vera:
        weights = _vera_as_lora(weights, name, folder)
    head, layernorms, pooler, num_labels = _read_head(folder)
    if layernorms:
        raise InteropError(f"{folder}: {BACKBONE_FILE} holds LayerNorms, which adapterlab's LoRA does not train")
    renamed = {}
    for key, tensor in weights.items():
        ours = key.replace(f".loras.{name}.", ".")
        match = LAYER_NAME.fullmatch(ours)
        if not match or match.group(2) not in {f"{module}.{m}" for module in configured for m in ("lora_A", "lora_B")}:
            raise InteropError(f"{folder}: it holds {key}, which its config's LoRA has no place for")
        renamed[ours] = tensor
    leave_out = set(config.get("leave_out") or [])

    def apply(model):
        layers = [i for i in range(model.config.num_hidden_layers) if i not in leave_out]
        expected = {f"{BASE}.encoder.layer.{i}.{module}.{m}" for i in layers for module in configured
                    for m in ("lora_A", "lora_B")}
        if set(renamed) != expected:
            raise InteropError(f"{folder}: its LoRA matrices are not one pair per adapted module in each layer of this "
                               "backbone that leave_out leaves: pass the --backbone it was trained on")
        add_lora(model, rank=rank, alpha=alpha, targets=targets, train_pooler=pooler)
        copy_into(model, {**renamed, **zero_lora_matrices(model, targets, renamed), **head}, str(folder))

    notes = [*dropout_note(config.get("dropout", 0.0), "dropout"), *zero_modules_note(targets, added)]
    if leave_out:
        notes.append(f"the layers it leaves out ({sorted(leave_out)}) get zero matrices: this computes the same")
    if vera:
        notes.append(f"VeRA comes in as adapterlab's LoRA of r = {rank}: its shared matrices multiplied by the trained "
                     "ones (vera_B·B, vera_D·A), the same update; training it further trains the whole matrices")
    return {"method": "lora", "base_model": hub.get("model_name") or "", "num_labels": num_labels, "name": name,
            "labels": _head_labels(folder), "apply": apply, "notes": notes}


def _vera_as_lora(weights: dict, name: str, folder: Path) -> dict:
    """An AdapterHub VeRA's tensors as the LoRA they compute. Each module adds scaling · vera_B·B·vera_D·A x, with
    A (r × in) and B (out × r) random, frozen and shared by every module (``shared_parameters``) and the square
    vera_D (r × r) and vera_B (out × out) trained: the LoRA lora_A = vera_D·A, lora_B = vera_B·B, exactly."""
    shared = {}
    for matrix in ("lora_A", "lora_B"):
        keys = [key for key in weights if key.endswith(f"shared_parameters.{name}.{matrix}")]
        if len(keys) != 1:
            raise InteropError(f"{folder}: its VeRA lacks the shared {matrix} (shared_parameters.{name}.{matrix}); the "
                               "folder is damaged")
        shared[matrix] = weights[keys[0]]
    lora = {}
    for key, tensor in weights.items():
        if "shared_parameters." in key:
            continue
        if key.endswith(".vera_D"):
            if tensor.shape[1] != shared["lora_A"].shape[0]:
                raise InteropError(f"{folder}: {key} has shape {list(tensor.shape)}, which does not fit the shared "
                                   f"lora_A {list(shared['lora_A'].shape)}; the folder is damaged")
            lora[key.removesuffix("vera_D") + "lora_A"] = tensor @ shared["lora_A"]
        elif key.endswith(".vera_B"):
            if tensor.shape[1] != shared["lora_B"].shape[0]:
                raise InteropError(f"{folder}: {key} has shape {list(tensor.shape)}, which does not fit the shared "
                                   f"lora_B {list(shared['lora_B'].shape)}; the folder is damaged")
            lora[key.removesuffix("vera_B") + "lora_B"] = tensor @ shared["lora_B"]
        else:
            lora[key] = tensor
    return lora
