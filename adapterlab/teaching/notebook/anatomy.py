"""What a trained adapter learned (lab 11): the ideas of labs 2, 3 and 8, measured on a model's own adapters.

Labs 2 and 3 study the adapter at initialisation: it starts near the identity, and without its nonlinearity it
is a rank-r linear map that folds into the dense layer before it. Lab 8 finds which layers' adapters matter.
Training may change all of that, so lab 11 opens a trained model and asks again, on real sentences:

* how far each adapter moves what it reads, ‖A(h) − h‖ / ‖h‖ (:func:`relative_changes`, lab 2's measure), and
  how large its correction is against the residual stream x it is added to, ‖A(h) − h‖ / ‖x‖
  (:func:`residual_changes`);
* how much of its correction the best affine map explains (:func:`linear_shares`, lab 3's fit), and what the
  model does when every adapter is replaced by that map and folded away (:func:`linearise_and_fold`, lab 3's fold);
* how much of its rank r it uses (:func:`weight_spectra`, :func:`bottleneck_spectra`, :func:`effective_ranks`);
* whether the layers that change most are those lab 8's ablation found to matter (:func:`rank_correlation`).

Every measurement reads what the adapters read: :func:`adapter_inputs` runs the model over batches of sentences
once and keeps each adapter's input on the real (unpadded) tokens. Tables are arrays of shape
(layers, :data:`POSITIONS`), NaN where a layer has no adapter at that position.
"""

from __future__ import annotations

import copy
from typing import NamedTuple

import numpy as np
import torch
from scipy import stats
from torch import nn

from ...model.adapter import BottleneckAdapter
from ...model.fold import SAMPLES_PER_UNKNOWN, best_linear_fit, fold_adapters
from ...model.spectrum import effective_rank
from ...model.placement import CONFIG_ATTRIBUTE, PlacementError, adapted_outputs, adapter_config, encoder_layers
from .probes import relative_deviation

#: The columns of every table: the adapter after attention and the adapter after the FFN (Houlsby's two).
POSITIONS = ("attention", "ffn")


def adapter_inputs(model: nn.Module, batches) -> dict[tuple[int, str], torch.Tensor]:
    """What every adapter reads on ``batches``: {(layer, position): h of shape (real tokens, d_model)}.

    Lab 11 measures trained adapters on the inputs they meet, not on random vectors as labs 2 and 3 did. A hook
    on each adapter's down-projection keeps its input on the tokens the attention mask marks real (padding would
    add states no sentence has). ``batches`` are dicts of model inputs (``input_ids``, ``attention_mask``, ...;
    ``labels`` are ignored). The model must be in eval mode, so that no dropout changes what the adapters read;
    it is not changed. Kept in float32 on the model's device; the measurements compute in float64.
    """
    return _collect(model, batches, residuals=False)[0]


def inputs_and_residuals(model: nn.Module, batches) -> tuple[dict, dict]:
    """:func:`adapter_inputs` and, from the same pass, the residual stream each adapter's correction is added to:
    ({(layer, position): h}, {(layer, position): x}), both on the real tokens.

    x is the sublayer's ``input_tensor``, the hidden state entering its add & LayerNorm, LayerNorm(h' + x) (the
    layer's input for the adapter after attention, the attention block's output for the one after the FFN).
    Lab 11 measures each correction against it too (:func:`residual_changes`): h, the sublayer's output, is a
    different fraction of x at each position.
    """
    return _collect(model, batches, residuals=True)


def _collect(model: nn.Module, batches, residuals: bool):
    """(adapter inputs, residual streams or None) on ``batches``: see :func:`adapter_inputs`."""
    if model.training:
        raise ValueError("adapter_inputs needs the model in eval mode (call model.eval()): dropout would change "
                         "what the adapters read")
    outputs = adapted_outputs(model)
    if not outputs:
        raise PlacementError("this model has no adapters to measure; add them (add_adapters) or load a trained set")
    kept = {(index, position): [] for index, position, _ in outputs}
    streams = {key: [] for key in kept}
    real = {}

    def keeper(key, into, argument):
        def keep(module, args):
            into[key].append(args[argument][real["mask"]].detach().float())
        return keep

    hooks = [adapted.adapter.down.register_forward_pre_hook(keeper((index, position), kept, 0))
             for index, position, adapted in outputs]
    if residuals:  # AdaptedOutput.forward(hidden_states, input_tensor): x is its second argument
        hooks += [adapted.register_forward_pre_hook(keeper((index, position), streams, 1))
                  for index, position, adapted in outputs]
    device = next(model.parameters()).device
    try:
        with torch.no_grad():
            for batch in batches:
                batch = {name: value.to(device) for name, value in batch.items() if name != "labels"}
                real["mask"] = batch.get("attention_mask", torch.ones_like(batch["input_ids"])).bool()
                model(**batch)
    finally:
        for hook in hooks:
            hook.remove()
    silent = [key for key, parts in kept.items() if not parts]
    if silent:
        raise ValueError(f"the adapters at {silent} read nothing: pass at least one batch, and switch every adapter "
                         "on first (set_adapters_enabled(model, True))")
    inputs = {key: torch.cat(parts) for key, parts in kept.items()}
    return inputs, ({key: torch.cat(parts) for key, parts in streams.items()} if residuals else None)


def _each_adapter(model: nn.Module, inputs: dict | None = None):
    """(key, adapter, h) for every adapter of the model; h is None without inputs."""
    outputs = adapted_outputs(model)
    if not outputs:
        raise PlacementError("this model has no adapters to measure; add them (add_adapters) or load a trained set")
    keys = [(index, position) for index, position, _ in outputs]
    if inputs is not None and sorted(inputs) != sorted(keys):
        raise ValueError(f"inputs hold the adapters at {sorted(inputs)} but the model has them at {sorted(keys)}: "
                         "collect the inputs with adapter_inputs on this model")
    return [(key, adapted.adapter, None if inputs is None else inputs[key])
            for key, (_, _, adapted) in zip(keys, outputs)]


def _table(model: nn.Module, values: dict[tuple[int, str], float]) -> np.ndarray:
    """values as an array (layers × POSITIONS), NaN where there is no adapter."""
    table = np.full((len(encoder_layers(model)), len(POSITIONS)), np.nan)
    for (index, position), value in values.items():
        table[index, POSITIONS.index(position)] = value
    return table


def relative_changes(model: nn.Module, inputs: dict) -> np.ndarray:
    """‖A(h) − h‖ / ‖h‖ of every adapter over its inputs (Frobenius norms): a table, layers × POSITIONS.

    Lab 11 puts it beside lab 2's init-time figure: an adapter that starts within about 1 % of the identity
    (lab 2's g·v·σ²·√(r·d): 0.006 on the stand-in at r = 64 and σ = 1e-2, measured the same on SST-2 sentences),
    or exactly at it with zero_up, shows here how far training moved it, layer by layer. Lab 2's
    :func:`~adapterlab.teaching.notebook.probes.relative_deviation`, on the inputs of :func:`adapter_inputs`.
    """
    return _table(model, {key: relative_deviation(adapter, h) for key, adapter, h in _each_adapter(model, inputs)})


def residual_changes(model: nn.Module, inputs: dict, residuals: dict) -> np.ndarray:
    """‖A(h) − h‖ / ‖x‖ of every adapter: its correction against the residual stream x it is added to (Frobenius
    norms over the tokens), a table, layers × POSITIONS (lab 11).

    :func:`relative_changes` divides by h, the sublayer's output the adapter reads; but the correction is added to
    h + x before the LayerNorm, and h is a different fraction of x at each position (the attention output is
    smaller than the hidden state, the FFN output of the same order). Against x the corrections of the two
    positions compare as changes of the same hidden state. ``inputs`` and ``residuals`` from
    :func:`inputs_and_residuals`; computed in float64. A parallel adapter's correction is scaled as it is added.
    """
    scales = {(index, position): adapted.scale if adapted.mode == "parallel" else 1.0
              for index, position, adapted in adapted_outputs(model)}
    values = {}
    for key, adapter, h in _each_adapter(model, inputs):
        x = residuals[key].double()
        if x.shape != h.shape:
            raise ValueError(f"the residual stream at {key} has shape {tuple(x.shape)} but the adapter read "
                             f"{tuple(h.shape)}: collect both with inputs_and_residuals in one pass")
        exact = copy.deepcopy(adapter).double()
        with torch.no_grad():
            correction = exact(h.double()) - h.double()
        values[key] = (scales[key] * torch.linalg.norm(correction) / torch.linalg.norm(x)).item()
    return _table(model, values)


def linear_share(adapter: BottleneckAdapter, h: torch.Tensor) -> float:
    """The share of the adapter's correction A(h) − h that the best affine map of h explains, in [0, 1].

    Lab 11 asks whether a trained adapter uses its nonlinearity. The least-squares residual is orthogonal to
    the fit, so ‖correction‖² = ‖fit‖² + ‖residual‖² and the share is ``1 − relative_residual²`` of lab 3's
    :func:`~adapterlab.model.fold.best_linear_fit` (1 for a linear adapter or a zero correction). ``h`` needs
    ten samples per unknown, as lab 3 requires: at least 10 × (d_model + 1) rows.
    """
    return 1.0 - best_linear_fit(adapter, h).relative_residual ** 2


def _enough_to_fit(model: nn.Module, inputs: dict):
    """_each_adapter(model, inputs), once every adapter has read enough tokens for lab 3's linear fit."""
    pairs = _each_adapter(model, inputs)
    for key, adapter, h in pairs:
        needed = SAMPLES_PER_UNKNOWN * (adapter.d_model + 1)
        if len(h) < needed:
            raise ValueError(f"the adapter at {key} read {len(h)} real tokens, and a linear fit of a "
                             f"{adapter.d_model}-wide adapter needs at least {needed} (ten per unknown): pass more "
                             "sentences to adapter_inputs")
    return pairs


def linear_shares(model: nn.Module, inputs: dict) -> np.ndarray:
    """:func:`linear_share` of every adapter on its own inputs: a table, layers × POSITIONS (lab 11)."""
    return _table(model, {key: linear_share(adapter, h) for key, adapter, h in _enough_to_fit(model, inputs)})


def _linear_adapter(adapter: BottleneckAdapter, h: torch.Tensor) -> BottleneckAdapter:
    """A linear adapter (activation identity, same r) computing the best affine fit of ``adapter`` on ``h``.

    The correction is W_up f(W_down h + b_down) + b_up, so its fit is W_up G h + W_up g + b_up: the fitted
    matrix M − I lies in W_up's column space, and G, g follow from it by W_up's pseudo-inverse (exactly, even
    when W_up is rank deficient). The fitted adapter keeps W_up and b_up and gets G and g as its down-projection.
    """
    fit = best_linear_fit(adapter, h)
    up_weight = adapter.up.weight.detach().double()
    up_bias = torch.zeros_like(fit.offset) if adapter.up.bias is None else adapter.up.bias.detach().double()
    inverse = torch.linalg.pinv(up_weight)
    identity = torch.eye(adapter.d_model, dtype=torch.float64, device=fit.matrix.device)
    linear = BottleneckAdapter(adapter.d_model, adapter.bottleneck, "identity", adapter.init, adapter.init_scale)
    weight = adapter.up.weight
    linear.to(device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        linear.down.weight.copy_(inverse @ (fit.matrix - identity))
        linear.down.bias.copy_(inverse @ (fit.offset - up_bias))
        linear.up.weight.copy_(up_weight)
        linear.up.bias.copy_(up_bias)
    linear.requires_grad_(weight.requires_grad)
    return linear.train(adapter.training)


def linearised_copy(model: nn.Module, inputs: dict) -> nn.Module:
    """A copy of the model with every adapter replaced by its best linear fit on its inputs (lab 11).

    The decisive test of whether the trained adapters use their nonlinearity: if the copy scores as the
    model does, a linear map (LoRA-like, rank ≤ r) would have done. Each adapter is fitted on what it read in
    the original model (one pass of :func:`adapter_inputs`), as lab 3's
    :func:`~adapterlab.model.fold.best_linear_fit` does, and keeps its r: the fit's matrix − I has rank ≤ r
    (see :func:`_linear_adapter`). The model itself is left unchanged.
    """
    pairs = _enough_to_fit(model, inputs)
    linear = copy.deepcopy(model)
    for (_, adapter, h), (_, _, adapted) in zip(pairs, adapted_outputs(linear)):
        adapted.adapter = _linear_adapter(adapter, h)
    object.__setattr__(linear, CONFIG_ATTRIBUTE, adapter_config(linear).replace(activation="identity", bias=True))
    return linear


def linearise_and_fold(model: nn.Module, inputs: dict) -> nn.Module:
    """A plain BERT with merged weights: :func:`linearised_copy`, then lab 3's
    :func:`~adapterlab.model.fold.fold_adapters` (lab 11).

    Each fitted adapter folds into the dense layer before it, W' = M W, b' = M b + c, so the result has the
    original architecture, costs nothing extra at inference, and computes what the linearised copy does (in
    eval mode). Houlsby adapters only: a Pfeiffer or parallel adapter has no dense layer to fold into.
    """
    return fold_adapters(linearised_copy(model, inputs))


def weight_spectrum(adapter: BottleneckAdapter) -> np.ndarray:
    """The r largest singular values of W_up W_down, the adapter's linear part, in float64 (lab 11).

    W_up W_down is the matrix lab 3 folds (M − I of a linear adapter); its rank is at most r, and how many of
    its r singular values carry weight says how much of the bottleneck training used.
    """
    product = adapter.up.weight.detach().double() @ adapter.down.weight.detach().double()
    return torch.linalg.svdvals(product)[: adapter.bottleneck].cpu().numpy()


def bottleneck_spectrum(adapter: BottleneckAdapter, h: torch.Tensor) -> np.ndarray:
    """Singular values of the bottleneck activations f(W_down h + b_down), centred and divided by √n (lab 11).

    Their squares are the eigenvalues of the activations' covariance: how many directions of the bottleneck
    the inputs actually reach, which the weights alone cannot say (a direction of W_down no sentence excites
    carries nothing). r values, largest first.
    """
    exact = copy.deepcopy(adapter).double()
    with torch.no_grad():
        activations = exact.act(exact.down(h.double().to(exact.down.weight.device)))
    centred = activations - activations.mean(dim=0)
    return (torch.linalg.svdvals(centred) / len(h) ** 0.5).cpu().numpy()


def weight_spectra(model: nn.Module) -> dict[tuple[int, str], np.ndarray]:
    """:func:`weight_spectrum` of every adapter: {(layer, position): singular values} (lab 11)."""
    return {key: weight_spectrum(adapter) for key, adapter, _ in _each_adapter(model)}


def bottleneck_spectra(model: nn.Module, inputs: dict) -> dict[tuple[int, str], np.ndarray]:
    """:func:`bottleneck_spectrum` of every adapter on its own inputs: {(layer, position): values} (lab 11)."""
    return {key: bottleneck_spectrum(adapter, h) for key, adapter, h in _each_adapter(model, inputs)}


def effective_ranks(model: nn.Module, spectra: dict, energy: float = 0.9) -> np.ndarray:
    """:func:`effective_rank` of every adapter's spectrum (from :func:`weight_spectra` or
    :func:`bottleneck_spectra`): a table, layers × POSITIONS, to read against r (lab 11)."""
    return _table(model, {key: effective_rank(values, energy) for key, values in spectra.items()})


def ablation_importance(ablation) -> np.ndarray:
    """Per layer, how much the metric drops when that layer's adapters alone are switched off: lab 8's
    :class:`~adapterlab.runs.ablation.SpanAblation` (``full − single_layer()``), the importance lab 11 ranks
    the layers' changes against."""
    return ablation.full - ablation.single_layer()


class RankCorrelation(NamedTuple):
    """Spearman's ρ between two per-layer scores, its two-sided p-value, and the number of layers."""

    rho: float
    p_value: float
    layers: int


def rank_correlation(per_layer, importance) -> RankCorrelation:
    """Do the layers whose adapters change the hidden state most matter most? Spearman's ρ by scipy (lab 11).

    ``per_layer`` is one score per layer (e.g. ``np.nanmean(relative_changes(...), axis=1)``), ``importance``
    one per layer too (e.g. :func:`ablation_importance`). Ranks, not values, because the two scales have
    nothing in common. With few layers the p-value is coarse: say so rather than read a weak ρ as an answer.
    """
    a, b = np.asarray(per_layer, dtype=np.float64), np.asarray(importance, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"give one score per layer in each argument, of the same length; got shapes {a.shape} "
                         f"and {b.shape}")
    if len(a) < 3 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError(f"a rank correlation needs at least 3 layers with finite scores; got {a.tolist()} and "
                         f"{b.tolist()}")
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        raise ValueError("one of the scores is the same for every layer, so it ranks nothing and ρ is undefined")
    result = stats.spearmanr(a, b)
    return RankCorrelation(float(result.statistic), float(result.pvalue), len(a))
