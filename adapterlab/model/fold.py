"""LoRA, and why a linear adapter is one: folding a low-rank update into a weight.

Two residual low-rank modules meet here.

* **LoRA** (Hu et al. 2021) adds a trainable low-rank offset to a frozen weight,
  ``y = W x + b + (alpha/r)·B A x``, with A Kaiming-uniform and B = 0 so that training starts from
  the frozen layer exactly. Because the offset is linear it can be *merged* into W once, after which
  the layer costs nothing extra at inference.
* A **bottleneck adapter without its nonlinearity** following a dense layer computes
  ``h + W_up (W_down h + b_down) + b_up`` with ``h = W x + b``, i.e.
  ``(I + W_up W_down) W x + (I + W_up W_down) b + W_up b_down + b_up``: one dense layer again, and
  ``W' - W = W_up (W_down W)`` has rank ≤ r — a LoRA update with B = W_up and A = W_down W.

With a nonlinearity f the map ``h ↦ h + W_up f(W_down h + b_down) + b_up`` is not linear in h, so no
fixed matrix reproduces it and the adapter must run at every step of inference.
:func:`best_linear_fit` measures how much of a nonlinear adapter's correction the best affine map
misses.

The module knows nothing of BERT except :func:`fold_adapters`, which works on the adapters that
:func:`adapterlab.placement.add_adapters` inserted and asks :mod:`adapterlab.placement` for them.
"""

from __future__ import annotations

import copy
from typing import NamedTuple

import torch
from torch import nn

from .adapter import BottleneckAdapter
from .placement import PlacementError, adapted_outputs, adapter_config, remove_adapters

# --------------------------------------------------------------------------------------------------
# LoRA
# --------------------------------------------------------------------------------------------------


def _nonlinear_error(adapter: BottleneckAdapter) -> ValueError:
    return ValueError(
        f"cannot fold an adapter with activation {adapter.activation_name!r}: the map "
        "h -> h + W_up f(W_down h + b_down) + b_up is not linear in h when f is a nonlinearity, so no "
        "fixed matrix reproduces it and the adapter must run at inference. Only a linear adapter "
        "(activation='identity') folds; best_linear_fit(adapter, h) shows what a linear map misses."
    )


def linear_adapter_matrix(
    adapter: BottleneckAdapter, dtype: torch.dtype | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, c) with ``adapter(h) = M h + c`` for a linear adapter (activation ``identity``).

    ``M = I + W_up W_down`` and ``c = W_up b_down + b_up``; ``M - I`` has rank ≤ r. Computed in
    ``dtype`` (default: the adapter's own). Raises ValueError for a nonlinear adapter.
    """
    if not adapter.is_linear:
        raise _nonlinear_error(adapter)
    up, down = adapter.up, adapter.down
    dtype = dtype or up.weight.dtype
    with torch.no_grad():
        w_up, w_down = up.weight.to(dtype), down.weight.to(dtype)
        matrix = torch.eye(adapter.d_model, dtype=dtype, device=w_up.device) + w_up @ w_down
        offset = torch.zeros(adapter.d_model, dtype=dtype, device=w_up.device)
        if down.bias is not None:
            offset += w_up @ down.bias.to(dtype)
        if up.bias is not None:
            offset += up.bias.to(dtype)
    return matrix, offset


def fold_linear_adapter(dense: nn.Linear, adapter: BottleneckAdapter) -> nn.Linear:
    """One nn.Linear computing ``adapter(dense(x))`` for a linear adapter after ``dense``.

    ``W' = (I + W_up W_down) W`` and ``b' = (I + W_up W_down) b + W_up b_down + b_up``,
    computed in float64 and stored in dense's dtype and device. The new layer has a bias
    when dense or the adapter has one. ``dense`` is left untouched. Raises ValueError for
    a nonlinear adapter or mismatched widths.
    """
    if not adapter.is_linear:
        raise _nonlinear_error(adapter)
    if adapter.d_model != dense.out_features:
        raise ValueError(
            f"the adapter's d_model ({adapter.d_model}) must equal "
            f"dense.out_features ({dense.out_features})"
        )
    matrix, offset = linear_adapter_matrix(adapter, torch.float64)
    has_bias = dense.bias is not None or adapter.up.bias is not None
    weight = dense.weight
    folded = nn.Linear(dense.in_features, dense.out_features, bias=has_bias,
                       device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        folded.weight.copy_(matrix @ weight.double())
        if has_bias:
            bias = offset if dense.bias is None else matrix @ dense.bias.double() + offset
            folded.bias.copy_(bias)
    folded.requires_grad_(weight.requires_grad)
    return folded.train(dense.training)


_PARALLEL_EXPLANATION = (
    "cannot fold a parallel adapter into the original architecture: it reads the FFN's *input* x (the "
    "attention block's output) and adds s·(W_up W_down x + c) beside the FFN, while the FFN's output dense "
    "reads GELU(intermediate(x)). The correction is linear in x, but the only path from x to the sum "
    "in the original module is the fixed identity residual; no weight of the original model acts "
    "linearly on x there, so nothing can absorb it. Use the houlsby placement to fold."
)
_ADD_NORM_EXPLANATION = (
    "cannot fold a Pfeiffer adapter into the original architecture: it reads z = LayerNorm(h + x), the output of "
    "the FFN's Add & Norm, and its output joins a second LayerNorm(h + W_up W_down z + c + x). A LayerNorm stands "
    "between the dense layer and the adapter, so no weight of the dense layer can absorb it. Use the houlsby "
    "placement to fold."
)


def fold_adapters(model: nn.Module) -> nn.Module:
    """Fold every serial linear adapter into its sublayer's dense layer and remove the adapters.

    For a model prepared by :func:`adapterlab.placement.add_adapters` with placement houlsby and
    activation ``identity``: each ``dropout(dense(x))`` followed by the adapter becomes
    ``dropout(dense'(x))`` with ``dense' = fold_linear_adapter(dense, adapter)``, and the original
    BERT output module goes back in place. The result has exactly the original architecture: the
    same module types, state_dict keys and shapes, and parameter count; trainable flags are
    restored as they were before add_adapters.

    Folding is exact in **eval mode only**: there dropout is the identity, so
    ``adapter(dropout(dense(x))) = dense'(x)``. In training mode the dropout mask sits between
    dense and the adapter and no folded layer can reproduce it. Adapters switched off with
    ``set_adapters_enabled`` change nothing and are dropped, not folded.

    Changes the model in place and returns it (``copy.deepcopy`` first to keep the adapted model).
    Everything is checked before the model is touched: a parallel or Pfeiffer adapter (see the errors for
    why) or a nonlinear one raises ValueError and leaves the model unchanged.
    """
    if adapter_config(model) is None:
        raise PlacementError("this model has no adapters to fold; add them with add_adapters first")
    outputs = adapted_outputs(model)
    for index, position, adapted in outputs:
        if adapted.mode != "serial":
            raise ValueError(f"layer {index} ({position}): {_PARALLEL_EXPLANATION}")
        if adapted.reads_add_norm:
            raise ValueError(f"layer {index} ({position}): {_ADD_NORM_EXPLANATION}")
        if not adapted.adapter.is_linear:
            raise ValueError(f"layer {index} ({position}): {_nonlinear_error(adapted.adapter)}")
    for _, _, adapted in outputs:
        if adapted.enabled:
            # adapted.original shares dense with adapted; give it the folded layer instead.
            adapted.original.dense = fold_linear_adapter(adapted.dense, adapted.adapter)
    return remove_adapters(model)


#: Samples per unknown of the fit (d_model + 1 per output) that :func:`best_linear_fit` asks for.
SAMPLES_PER_UNKNOWN = 10


class LinearFit(NamedTuple):
    """The least-squares affine map ``h ↦ M h + c`` closest to an adapter on given samples."""

    matrix: torch.Tensor
    offset: torch.Tensor
    relative_residual: float


def best_linear_fit(adapter: BottleneckAdapter, h_samples: torch.Tensor) -> LinearFit:
    """Fit ``adapter(h) ≈ M h + c`` by least squares over the samples, in float64.

    ``relative_residual = ‖delta(H) − fit‖ / ‖delta(H)‖`` (Frobenius norms) where delta is the
    adapter's correction ``adapter(h) − h``: the share of the correction no affine map explains. The
    residual is measured against the correction rather than the output because the identity part
    ``h`` is linear and would make any adapter look almost linear. It is ~1e-15 for a linear
    adapter and clearly positive for a nonlinear adapter whose pre-activations reach the curved
    part of f (e.g. GELU with weights of order 1/√d). A zero correction gives 0.

    ``h_samples`` has shape (..., d_model) with at least SAMPLES_PER_UNKNOWN × (d_model + 1) samples in
    all. The residual is measured on the samples the map was fitted to, and a fit on n samples with
    d + 1 unknowns per output absorbs part of any nonlinearity: its residual is about
    √(1 − (d + 1)/n) of the true share (with n = d + 1 it is 0 whatever the adapter). Ten samples per
    unknown keep that within 5 %. Returns float64 tensors M (d × d) and c (d).
    """
    d = adapter.d_model
    if h_samples.ndim < 1 or h_samples.shape[-1] != d:
        raise ValueError(f"h_samples must have shape (..., {d}) for this adapter; got {tuple(h_samples.shape)}")
    h = h_samples.reshape(-1, d).detach().double()
    if h.shape[0] < SAMPLES_PER_UNKNOWN * (d + 1):
        raise ValueError(
            f"h_samples needs at least {SAMPLES_PER_UNKNOWN} × (d_model + 1) = {SAMPLES_PER_UNKNOWN * (d + 1)} "
            f"samples (got {h.shape[0]}): a fit to fewer absorbs part of the nonlinearity and reports too small "
            "a residual (with d_model + 1 or fewer, none at all)"
        )
    reference = copy.deepcopy(adapter).to(device=h.device, dtype=torch.float64)
    with torch.no_grad():
        correction = reference.delta(h)
        design = torch.cat([h, torch.ones(h.shape[0], 1, dtype=h.dtype, device=h.device)], dim=1)
        solution = torch.linalg.lstsq(design, correction).solution  # (d + 1) × d
        residual = correction - design @ solution
    scale = torch.linalg.norm(correction).item()
    relative = 0.0 if scale == 0 else torch.linalg.norm(residual).item() / scale
    matrix = torch.eye(d, dtype=h.dtype, device=h.device) + solution[:d].T
    return LinearFit(matrix, solution[d].clone(), relative)
