"""Measurements the labs take on adapters: how far from the identity they start, their gradients at
step zero, and how long a forward pass takes.

Why near-identity is measured two ways:

* on one adapter, ``‖Adapter(h) − h‖ / ‖h‖``. For the paper's init (both matrices drawn from
  N(0, σ²) truncated at ±2σ, zero biases) and small σ, f(z) ≈ f'(0)·z, so the correction is about
  ``f'(0)·W_up W_down h`` and its relative size is about ``f'(0)·v·σ²·√(r·d)`` for *any* h, where
  ``v ≈ 0.774`` is the variance of a standard normal truncated at ±2 (see
  :func:`predicted_deviation`). The deviation grows like σ², not σ.
* on a whole model: the relative change of the last hidden state and the largest change of any
  logit, after adapters are inserted into every layer.

Gradients at step zero use the loss ``L = Σ ⟨Adapter(h_t), δ_t⟩``, whose gradient with respect to the
adapter's output is exactly δ: the closed forms of the labs can then be written in terms of δ alone.
"""

from __future__ import annotations

import copy
import math
import statistics
import time

import torch
from torch import nn

from ...model.adapter import BottleneckAdapter
from ...model.fold import best_linear_fit
from ...model.placement import add_adapters, remove_adapters

#: Variance of a standard normal truncated to [−2, 2]: 1 − 4φ(2) / (2Φ(2) − 1).
TRUNCATED_NORMAL_VARIANCE = 1 - 4 * math.exp(-2) / math.sqrt(2 * math.pi) / math.erf(2 / math.sqrt(2))
#: ‖f(z)‖ / ‖z‖ for small random z: f'(0) for smooth f; ReLU keeps half the energy of z, so 1/√2.
ACTIVATION_GAIN_AT_ZERO = {"gelu": 0.5, "relu": math.sqrt(0.5), "silu": 0.5, "swish": 0.5, "tanh": 1.0, "identity": 1.0}


def relative_deviation(adapter: nn.Module, h: torch.Tensor) -> float:
    """‖Adapter(h) − h‖ / ‖h‖ over all of h (Frobenius norms), computed in float64.

    float64 because below σ ≈ 1e-4 the correction is smaller than float32's resolution around h:
    in float32, Adapter(h) rounds back to h exactly and the difference would read 0.
    """
    exact = copy.deepcopy(adapter).double()
    h = h.double()
    with torch.no_grad():
        return (torch.linalg.norm(exact(h) - h) / torch.linalg.norm(h)).item()


def predicted_deviation(init_scale: float, d_model: int, bottleneck: int, activation: str = "gelu") -> float:
    """The small-σ deviation of a Houlsby-initialised adapter: g·v·σ²·√(r·d), g = ‖f(z)‖/‖z‖ near 0.

    Derivation: z = W_down h has r entries of variance v·σ²·‖h‖², so ‖z‖ ≈ √(v·r)·σ·‖h‖; near 0,
    ‖f(z)‖ ≈ g·‖z‖ (g = f'(0) = ½ for GELU); each of the d entries of W_up f(z) has variance
    v·σ²·‖f(z)‖², so ‖W_up f(z)‖ ≈ √(v·d)·σ·g·‖z‖ = g·v·σ²·√(r·d)·‖h‖. Biases are zero at init.
    """
    gain = ACTIVATION_GAIN_AT_ZERO[activation]
    return gain * TRUNCATED_NORMAL_VARIANCE * init_scale**2 * math.sqrt(bottleneck * d_model)


def step_zero_gradients(adapter: BottleneckAdapter, h: torch.Tensor, delta: torch.Tensor):
    """(∂L/∂W_down, ∂L/∂W_up) by autograd for L = Σ ⟨Adapter(h), δ⟩; the adapter is left untouched."""
    weights = (adapter.down.weight, adapter.up.weight)
    with torch.enable_grad():
        loss = (adapter(h) * delta).sum()
        grad_down, grad_up = torch.autograd.grad(loss, weights)
    return grad_down, grad_up


#: Adam's ε (torch's default, which training uses): a step is lr·m̂ / (√v̂ + ε), so a gradient far below ε
#: gives a step far below lr.
ADAM_EPS = 1e-8


def first_adam_step(model: nn.Module, batch: dict, lr: float = 1e-3, eps: float = ADAM_EPS) -> dict:
    """One AdamW step of every trainable weight on ``batch``: for the adapters' W_down and W_up (all layers
    together) the median |gradient| and the median |step| / lr. Lab 7: with Adam the first step is about lr
    whatever the gradient's scale, unless the gradient is below ε (tiny init scales). No weight decay, no
    clipping, so the step is exactly lr·g / (|g| + ε). The model is changed by the step: pass a fresh one."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    adapters = [m for m in model.modules() if isinstance(m, BottleneckAdapter)]
    if not adapters:
        raise ValueError("the model has no adapters: add them first (add_adapters or apply_method)")
    weights = {"down": [a.down.weight for a in adapters], "up": [a.up.weight for a in adapters]}
    before = {name: [w.detach().clone() for w in ws] for name, ws in weights.items()}
    model.zero_grad()
    model.train()
    model(**batch).loss.backward()
    grads = {name: torch.cat([w.grad.abs().flatten() for w in ws]) for name, ws in weights.items()}
    torch.optim.AdamW(trainable, lr=lr, eps=eps, weight_decay=0.0).step()
    model.zero_grad()
    steps = {name: torch.cat([(w.detach() - b).abs().flatten() for w, b in zip(ws, before[name])])
             for name, ws in weights.items()}
    return {name: {"median_gradient": grads[name].median().item(), "median_step_over_lr": steps[name].median().item() / lr}
            for name in weights}


def _houlsby_adapter(d_model: int, bottleneck: int, init_scale: float, activation: str, seed: int):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return BottleneckAdapter(d_model, bottleneck, activation, "houlsby", init_scale)


def init_scale_probe(
    init_scale: float, h: torch.Tensor, delta: torch.Tensor, bottleneck: int = 64, activation: str = "gelu", seed: int = 0
) -> dict:
    """One Houlsby-initialised adapter at ``init_scale``: its deviation and its step-zero gradient norms.

    Returns ``init_scale``, ``deviation``, ``predicted`` (the small-σ formula), ``grad_down`` and
    ``grad_up`` (Frobenius norms of ∂L/∂W_down and ∂L/∂W_up for L = Σ ⟨Adapter(h), δ⟩).
    """
    adapter = _houlsby_adapter(h.shape[-1], bottleneck, init_scale, activation, seed)
    grad_down, grad_up = step_zero_gradients(adapter, h, delta)
    return {
        "init_scale": float(init_scale),
        "deviation": relative_deviation(adapter, h),
        "predicted": predicted_deviation(init_scale, h.shape[-1], bottleneck, activation),
        "grad_down": torch.linalg.norm(grad_down).item(),
        "grad_up": torch.linalg.norm(grad_up).item(),
    }


def init_scale_sweep(scales, h: torch.Tensor, delta: torch.Tensor, bottleneck: int = 64, activation: str = "gelu", seed: int = 0) -> dict:
    """:func:`init_scale_probe` at every scale, as columns (a dict of lists)."""
    rows = [init_scale_probe(s, h, delta, bottleneck, activation, seed) for s in scales]
    return {key: [row[key] for row in rows] for key in rows[0]}


def probe_inputs(n_tokens: int = 32, d_model: int = 768, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded random hidden states h (n_tokens × d_model, unit-variance entries) and output gradients δ."""
    generator = torch.Generator().manual_seed(seed)
    h = torch.randn(n_tokens, d_model, generator=generator)
    delta = torch.randn(n_tokens, d_model, generator=generator)
    return h, delta


def _outputs(model: nn.Module, batch: dict):
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    return out.hidden_states[-1], out.logits


def model_deviation_sweep(
    model: nn.Module, batch: dict, scales, placement: str = "houlsby", bottleneck: int = 64, seed: int = 0
) -> dict:
    """How far a whole model moves when adapters with each init scale go into every layer.

    The model must be in eval mode (dropout off) and have no adapters; it is returned to its
    original state. Returns columns ``init_scale``, ``hidden_deviation`` (relative change of the last
    hidden state over the real tokens) and ``max_logit_change`` (max |Δlogit| over the batch).
    """
    if model.training:
        raise ValueError("model_deviation_sweep needs the model in eval mode (call model.eval()): dropout would add noise")
    mask = batch["attention_mask"].unsqueeze(-1).bool()
    hidden0, logits0 = _outputs(model, batch)
    hidden0 = hidden0.masked_select(mask)
    columns = {"init_scale": [], "hidden_deviation": [], "max_logit_change": []}
    for scale in scales:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            add_adapters(model, placement, bottleneck, init="houlsby", init_scale=scale)
        try:
            hidden, logits = _outputs(model, batch)
        finally:
            remove_adapters(model)
        change = torch.linalg.norm(hidden.masked_select(mask) - hidden0) / torch.linalg.norm(hidden0)
        columns["init_scale"].append(float(scale))
        columns["hidden_deviation"].append(change.item())
        columns["max_logit_change"].append((logits - logits0).abs().max().item())
    return columns


def linear_fit_sweep(
    scales, activations=("identity", "gelu", "relu"), d_model: int = 128, bottleneck: int = 16, n_samples: int = 4096, seed: int = 0
) -> dict:
    """How much of an adapter's correction the best affine map misses, per activation and weight scale.

    Every adapter has both matrices drawn with std σ and unit-variance random inputs h; the residual
    is :func:`adapterlab.lora.best_linear_fit`'s. Returns ``init_scale``, ``residual`` (a dict mapping each
    activation to its list of relative residuals) and the ``d_model`` and ``bottleneck`` it was computed at.
    """
    h, _ = probe_inputs(n_samples, d_model, seed)
    residual = {
        activation: [best_linear_fit(_houlsby_adapter(d_model, bottleneck, s, activation, seed), h).relative_residual for s in scales]
        for activation in activations
    }
    return {"init_scale": [float(s) for s in scales], "residual": residual, "d_model": d_model, "bottleneck": bottleneck}


def median_seconds(fn, repeats: int = 10, warmup: int = 1) -> float:
    """The median wall time of ``fn()`` over ``repeats`` calls, after ``warmup`` untimed calls, without autograd."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1; got {repeats!r}")
    times = []
    with torch.inference_mode():
        for _ in range(warmup):
            fn()
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(times)
