"""The one place that knows the inside of a BERT layer: where adapters go and what is trainable.

A BERT layer ends each of its two sublayers with the same three steps (``BertSelfOutput`` after
attention, ``BertOutput`` after the FFN)::

    h = dropout(dense(x));  out = LayerNorm(h + residual)

Placements, each implemented by swapping that output module for an :class:`AdaptedOutput` that reuses
the very same ``dense``, ``dropout`` and ``LayerNorm`` (so parameter names and weights do not change):

* ``houlsby``  — an adapter after the dropout of *both* sublayers, before the residual add + LayerNorm
  (as in the original adapter-bert code): 2 adapters per layer.
* ``pfeiffer`` — 1 adapter per layer, at the FFN only, reading the output of the FFN's Add & Norm
  (Pfeiffer et al. 2020/2021, as AdapterHub's SeqBnConfig computes it): with h = dropout(dense(·)) and x
  the residual, z = LayerNorm(h + x), then LayerNorm(h + Δ(z) + x) — the same pretrained LayerNorm twice,
  the adapter's residual the pre-add h.
* ``parallel`` — a bottleneck alongside the FFN, reading the FFN's input and adding
  ``scale · up(f(down(x)))`` to its output (He et al. 2021): 1 per layer.

An :class:`AdapterConfig` holds everything that describes one adapter set (placement, bottleneck,
activation, init, layers, whether LayerNorms train); :data:`POSITIONS` below is the one place that says
which sublayers a placement adapts, and so how many adapters a layer gets.

The placements are training methods of the registry (:mod:`adapterlab.methods.adapters`), beside the
others the labs compare.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as torch_module

from .adapter import ACTIVATIONS, INIT_SCHEMES, PAPER_INIT_SCALE, BottleneckAdapter
from ..validation import check_bool, check_choice, check_init_scale, check_positive_int
from .trainable import train_only

PLACEMENTS = ("houlsby", "pfeiffer", "parallel")
#: He et al. (2021) scale the parallel adapter's output by s = 4.
DEFAULT_PARALLEL_SCALE = 4.0
#: Which sublayer outputs each placement adapts, and how.
POSITIONS = {
    "houlsby": (("attention", "serial"), ("ffn", "serial")),
    "pfeiffer": (("ffn", "serial"),),
    "parallel": (("ffn", "parallel"),),
}
#: Serial placements whose adapter reads the output of the sublayer's Add & Norm, not the sublayer's own output.
READS_ADD_NORM = ("pfeiffer",)
CONFIG_ATTRIBUTE = "adapterlab_config"


class PlacementError(ValueError):
    """The model or the request cannot be honoured; the model was left unchanged."""


def _parallel_scale(placement: str, scale) -> float | None:
    """The scale s of a parallel adapter (default 4, as He et al.); a serial placement has none."""
    if placement != "parallel":
        if scale is not None:
            raise PlacementError(
                f"parallel_scale is the scale of a parallel adapter; placement {placement!r} has none "
                f"(got parallel_scale={scale!r}): leave it out, or use placement='parallel'"
            )
        return None
    if scale is None:
        return DEFAULT_PARALLEL_SCALE
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(scale):
        raise PlacementError(f"parallel_scale must be a finite number (He et al. use 4); got {scale!r}")
    return float(scale)


def _layer_list(layers) -> tuple[int, ...] | None:
    """None (every layer) or a tuple of distinct integer indices; the model's depth is checked later."""
    if layers is None:
        return None
    if isinstance(layers, (int, str)) or not hasattr(layers, "__iter__"):
        raise PlacementError(f"layers must be a list of layer indices such as [0, 1] (or None for all); got {layers!r}")
    chosen = tuple(layers)
    for index in chosen:
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise PlacementError(f"layers must hold integer layer indices such as [0, 1]; got {index!r}")
    if not chosen:
        raise PlacementError("layers is empty: name at least one layer, or pass None for all layers")
    if len(set(chosen)) != len(chosen):
        raise PlacementError(f"layers lists a layer twice: {list(chosen)}")
    return tuple(int(index) for index in chosen)


@dataclass(frozen=True)
class AdapterConfig:
    """Everything that describes one adapter set, checked when it is made; the one place these settings live.

    ``placement`` (houlsby, pfeiffer or parallel) decides where the adapters go and how many each layer
    gets (:attr:`adapters_per_layer`); ``bottleneck``, ``activation``, ``init``, ``init_scale`` and ``bias``
    how each is built; ``layers`` which layers get them (None: all); ``train_layernorm`` whether the
    LayerNorms train with them (the paper trains them, AdapterHub freezes them); ``train_pooler`` whether
    the pooler trains with the classifier (the original adapter-bert code leaves the pretrained pooler
    frozen, and so do we by default; the paper's text does not say); ``parallel_scale`` the factor s of a
    parallel adapter (He et al. use 4; only the parallel placement has one).

    The three presets (:meth:`preset`) mirror AdapterHub's DoubleSeqBnConfig, SeqBnConfig and ParBnConfig
    in where the adapters go, but keep every other setting the same, so that comparing them changes
    one thing only. :func:`add_adapters` builds an adapter set from it, :mod:`adapterlab.counting` counts
    it in closed form and :mod:`adapterlab.checkpoints` stores it. Labs 3 and 5 build adapters from it
    through ``add_adapters``, labs 6-9 through ``apply_method``; lab 9 saves and loads it with its weights.
    """

    placement: str = "houlsby"
    bottleneck: int = 64
    activation: str = "gelu"
    init: str = "houlsby"
    init_scale: float = PAPER_INIT_SCALE
    layers: tuple[int, ...] | None = None
    train_layernorm: bool = True
    train_pooler: bool = False
    parallel_scale: float | None = None
    bias: bool = True

    def __post_init__(self):
        if not isinstance(self.placement, str) or self.placement not in PLACEMENTS:
            raise PlacementError(f"placement must be one of {', '.join(PLACEMENTS)}; got {self.placement!r}")
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("init", self.init, INIT_SCHEMES)
        check_bool("train_layernorm", self.train_layernorm)
        check_bool("train_pooler", self.train_pooler)
        check_bool("bias", self.bias)
        plain = {
            "bottleneck": check_positive_int("bottleneck", self.bottleneck),
            "init_scale": check_init_scale(self.init_scale),
            "layers": _layer_list(self.layers),
            "parallel_scale": _parallel_scale(self.placement, self.parallel_scale),
        }
        for name, value in plain.items():  # NumPy numbers and lists become plain ints, floats and tuples
            object.__setattr__(self, name, value)  # how a frozen dataclass sets its own fields

    @classmethod
    def preset(cls, name: str, **changes) -> "AdapterConfig":
        """The preset named by a placement, with any field changed: ``AdapterConfig.preset("pfeiffer", bottleneck=48)``."""
        return cls.from_dict({**changes, "placement": name}, what="AdapterConfig.preset")

    @classmethod
    def from_dict(cls, values: dict, what: str = "the adapter config") -> "AdapterConfig":
        """The config a dict (e.g. :meth:`as_dict`, read back from JSON) describes; unknown keys are refused."""
        fields = [field.name for field in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise PlacementError(f"{what} has unknown settings {unknown}; the settings are {', '.join(fields)}")
        return cls(**values)

    def replace(self, **changes) -> "AdapterConfig":
        """A copy with some fields changed, checked like a new config."""
        return type(self).from_dict({**self.as_dict(), **changes})

    def as_dict(self) -> dict:
        """Plain JSON values: what a checkpoint stores."""
        values = dataclasses.asdict(self)
        values["layers"] = None if self.layers is None else list(self.layers)
        return values

    @property
    def positions(self) -> tuple[tuple[str, str], ...]:
        """(sublayer, mode) of each adapter in a layer: ("attention" | "ffn", "serial" | "parallel")."""
        return POSITIONS[self.placement]

    @property
    def adapters_per_layer(self) -> int:
        return len(self.positions)

    def layer_indices(self, n_layers: int) -> list[int]:
        """The layers of an n_layers-deep model that get adapters, sorted; a PlacementError if one is out of range."""
        return _check_layers(self.layers, n_layers)


def make_adapter_config(placement: "str | AdapterConfig" = "houlsby", **changes) -> AdapterConfig:
    """An AdapterConfig from a preset name or a config, with ``changes`` applied (the settings of add_adapters)."""
    if isinstance(placement, AdapterConfig):
        return placement.replace(**changes) if changes else placement
    return AdapterConfig.preset(placement, **changes)


class AdaptedOutput(nn.Module):
    """A sublayer output (dense → dropout → LayerNorm(· + residual)) with an adapter inside.

    ``mode="serial"`` applies the adapter to the sublayer's output after dropout; ``mode="parallel"``
    adds ``scale · adapter.delta(x)`` computed from the sublayer's input x. A serial adapter with
    ``reads_add_norm`` (Pfeiffer's) reads z = LayerNorm(h + x) instead and gives LayerNorm(h + Δ(z) + x).
    With ``enabled = False`` the original module runs instead, so a switched-off adapter costs nothing and
    changes nothing.
    """

    def __init__(self, original: nn.Module, adapter: BottleneckAdapter, mode: str, scale: float = 1.0,
                 reads_add_norm: bool = False):
        super().__init__()
        self.reads_add_norm = reads_add_norm
        self.dense = original.dense
        self.dropout = original.dropout
        self.LayerNorm = original.LayerNorm
        self.adapter = adapter
        self.mode = mode
        self.scale = scale
        self.enabled = True
        # Kept unregistered (no duplicate parameters); it shares dense/dropout/LayerNorm with us and
        # goes back in place when the adapters are removed.
        object.__setattr__(self, "original", original)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return self.original(hidden_states, input_tensor)
        if self._runs_plain():
            return self._plain_forward(hidden_states, input_tensor)
        h = self.dropout(self.dense(hidden_states))
        if self.mode == "serial" and self.reads_add_norm:
            z = self.LayerNorm(h + input_tensor)
            return self.LayerNorm(h + self.adapter.delta(z) + input_tensor)
        if self.mode == "serial":
            h = self.adapter(h)
        else:
            h = h + self.scale * self.adapter.delta(input_tensor)
        return self.LayerNorm(h + input_tensor)

    def _runs_plain(self) -> bool:
        """Whether this forward may run as tensor operations (:meth:`_plain_forward`): for inference only (no
        autograd recording, dropout off), with the stock modules, and where no forward hook would miss its
        call (lab 5 reads each correction with a hook on the up-projection)."""
        if torch.is_grad_enabled() or self.dropout.training:
            return False
        adapter = self.adapter
        if not (type(self.dense) is type(adapter.down) is type(adapter.up) is nn.Linear
                and type(self.LayerNorm) is nn.LayerNorm):
            return False
        if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
            return False
        watched = (self.dense, self.dropout, self.LayerNorm, adapter, adapter.down, adapter.act, adapter.up)
        return not any(module._forward_hooks or module._forward_pre_hooks for module in watched)

    def _plain_forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` in inference, without a module call: the same operations in the same order (dropout
        is the identity in eval mode), so the same values bit for bit. At batch 1 on BERT-base the seven
        calls skipped per sublayer cost about half a point of Houlsby's inference overhead of 6 to 7 %
        (``benchmarks/inference.py``)."""
        norm = self.LayerNorm

        def layer_norm(x: torch.Tensor) -> torch.Tensor:
            return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)

        h = F.linear(hidden_states, self.dense.weight, self.dense.bias)
        delta = self.adapter.plain_delta
        if self.mode == "serial" and self.reads_add_norm:
            return layer_norm(h + delta(layer_norm(h + input_tensor)) + input_tensor)
        if self.mode == "serial":
            h = h + delta(h)
        else:
            h = h + self.scale * delta(input_tensor)
        return layer_norm(h + input_tensor)

    def extra_repr(self) -> str:
        reads = ", reads_add_norm=True" if self.reads_add_norm else ""
        return f"mode={self.mode}, scale={self.scale}{reads}, enabled={self.enabled}"


def encoder_layers(model: nn.Module) -> nn.ModuleList:
    """The transformer layers of a BERT-family model, or a PlacementError saying what is supported."""
    base = getattr(model, "base_model", model)
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    supported = "BERT-family encoders from transformers (BertModel, BertForSequenceClassification, RoBERTa, ELECTRA)"
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise PlacementError(f"{type(model).__name__} is not supported: expected {supported} with .encoder.layer")
    for layer in layers:
        for output in (_sublayer_output(layer, "attention"), _sublayer_output(layer, "ffn")):
            if not all(hasattr(output, name) for name in ("dense", "dropout", "LayerNorm")):
                raise PlacementError(
                    f"{type(model).__name__} is not supported: its layers' outputs lack dense/dropout/LayerNorm; "
                    f"expected {supported}"
                )
    return layers


def _sublayer_output(layer: nn.Module, position: str) -> nn.Module:
    return layer.attention.output if position == "attention" else layer.output


def _set_sublayer_output(layer: nn.Module, position: str, module: nn.Module) -> None:
    if position == "attention":
        layer.attention.output = module
    else:
        layer.output = module


def _check_layers(layers, n_layers: int) -> list[int]:
    """The layer indices in 0..n_layers-1 (negative ones count from the top), sorted; None gives all."""
    if isinstance(layers, (list, tuple)) and not layers:
        return []
    chosen = _layer_list(layers)
    if chosen is None:
        return list(range(n_layers))
    for index in chosen:
        if not -n_layers <= index < n_layers:
            raise PlacementError(f"layers must hold integers in 0..{n_layers - 1} (this model has {n_layers}); got {index!r}")
    resolved = [index % n_layers for index in chosen]
    if len(set(resolved)) != len(resolved):
        raise PlacementError(f"layers lists a layer twice: {list(chosen)}")
    return sorted(resolved)


def add_adapters(model: nn.Module, placement: "str | AdapterConfig" = "houlsby", bottleneck: int | None = None,
                 **settings) -> nn.Module:
    """Insert adapters into a BERT-family model and freeze everything but adapters, LayerNorms and classifier.

    ``placement`` is an :class:`AdapterConfig`, or the name of a preset (houlsby, pfeiffer, parallel);
    ``bottleneck`` and ``settings`` (any other field of AdapterConfig: activation, init, init_scale, layers,
    train_layernorm, parallel_scale, bias) change it, e.g. ``add_adapters(model, "houlsby", 64,
    init="zero_up")``. Every argument is checked and every adapter built before the model is touched,
    so an error leaves the model exactly as it was. Returns the model (changed in place). Labs 3 and 5
    add adapters this way; the training labs through :func:`apply_method`.
    """
    if bottleneck is not None:
        settings["bottleneck"] = bottleneck
    config = make_adapter_config(placement, **settings)
    if getattr(model, CONFIG_ATTRIBUTE, None) is not None:
        raise PlacementError("this model already has adapters; call remove_adapters(model) first")
    all_layers = encoder_layers(model)
    if adapted_outputs(model):
        raise PlacementError(
            "this model already has adapters (added through a model that contains it); "
            "call remove_adapters on that model first"
        )
    chosen = config.layer_indices(len(all_layers))
    planned = []
    for index in chosen:
        for position, mode in config.positions:
            output = _sublayer_output(all_layers[index], position)
            weight = output.dense.weight
            adapter = BottleneckAdapter(
                output.dense.out_features, config.bottleneck, config.activation, config.init, config.init_scale,
                config.bias,
            ).to(device=weight.device, dtype=weight.dtype)
            scale = config.parallel_scale if mode == "parallel" else 1.0
            adapted = AdaptedOutput(output, adapter, mode, scale, config.placement in READS_ADD_NORM)
            adapted.train(output.training)  # the model's mode
            planned.append((all_layers[index], position, adapted))
    requires_grad = {name: p.requires_grad for name, p in model.named_parameters()}
    for layer, position, adapted in planned:
        _set_sublayer_output(layer, position, adapted)
    object.__setattr__(model, CONFIG_ATTRIBUTE, config.replace(layers=chosen))
    object.__setattr__(model, "_adapterlab_requires_grad", requires_grad)
    train_only(model, adapters_train(config.train_layernorm), train_pooler=config.train_pooler)
    return model


def adapter_config(model: nn.Module) -> AdapterConfig | None:
    """The AdapterConfig of the model's adapters, with ``layers`` spelled out; None when it has none.

    Lab 9 relies on it (through the checkpoints) to load an adapter set only into matching adapters.
    """
    return getattr(model, CONFIG_ATTRIBUTE, None)


def adapted_outputs(model: nn.Module) -> list[tuple[int, str, AdaptedOutput]]:
    """(layer index, "attention" | "ffn", module) for every adapted sublayer, in order."""
    found = []
    for index, layer in enumerate(encoder_layers(model)):
        for position in ("attention", "ffn"):
            output = _sublayer_output(layer, position)
            if isinstance(output, AdaptedOutput):
                found.append((index, position, output))
    return found


def largest_correction(model: nn.Module, inputs: dict) -> tuple[float, torch.Tensor]:
    """Run ``model(**inputs)`` once and return (the largest |Δ(u)| any of its adapters added, the logits).

    Δ(u) is read where it is made, as the output of each adapter's up-projection, during the same forward pass.
    With zero-up init it is exactly 0 by construction (a sum of products with 0 is 0), whatever order the
    kernels add in; two forward passes of two copies of a model carry no such promise (lab 5).
    """
    corrections = []
    hooks = [output.adapter.up.register_forward_hook(lambda _module, _args, out: corrections.append(out.detach()))
             for _, _, output in adapted_outputs(model)]
    if not hooks:
        raise PlacementError("this model has no adapters; call add_adapters first")
    try:
        with torch.no_grad():
            logits = model(**inputs).logits
    finally:
        for hook in hooks:
            hook.remove()
    return max(float(delta.abs().max()) for delta in corrections), logits


def remove_adapters(model: nn.Module) -> nn.Module:
    """Take every adapter out and restore the original modules and trainable flags.

    The restored model computes exactly what it computed before add_adapters (bit for bit), as long
    as its own weights were not trained in between.
    """
    if getattr(model, CONFIG_ATTRIBUTE, None) is None:
        raise PlacementError(
            "this model has no adapters to remove (if they were added to a model that contains this one, "
            "call remove_adapters on that model)"
        )
    layers = encoder_layers(model)
    for index, position, adapted in adapted_outputs(model):
        # The original sat outside the module tree, so train()/eval() did not reach its own flag.
        adapted.original.train(adapted.training)
        _set_sublayer_output(layers[index], position, adapted.original)
    saved = getattr(model, "_adapterlab_requires_grad", {})
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(saved.get(name, True))
    object.__delattr__(model, CONFIG_ATTRIBUTE)
    object.__delattr__(model, "_adapterlab_requires_grad")
    return model


def set_adapters_enabled(model: nn.Module, enabled: bool, layers=None) -> nn.Module:
    """Switch adapters on or off in the given layers (default all) without removing them (lab 8)."""
    check_bool("enabled", enabled)
    chosen = set(_check_layers(layers, len(encoder_layers(model))))
    outputs = adapted_outputs(model)
    if not outputs:
        raise PlacementError("this model has no adapters; call add_adapters first")
    for index, _, adapted in outputs:
        if index in chosen:
            adapted.enabled = enabled
    return model


def enabled_layers(model: nn.Module) -> list[int]:
    """Indices of layers whose adapters are currently switched on."""
    return sorted({index for index, _, adapted in adapted_outputs(model) if adapted.enabled})


def adapters_train(train_layernorm: bool):
    """What an adapter set trains (besides the classifier and, if asked, the pooler): its adapters, and the
    LayerNorms when ``train_layernorm`` (the paper trains them, AdapterHub freezes them)."""
    check_bool("train_layernorm", train_layernorm)
    return lambda name, group: group == "adapters" or (train_layernorm and group == "layernorm")
