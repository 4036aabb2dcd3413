"""Self-checks for the lab exercises: each says in plain words what is right or what is wrong.

A check runs the student's code on small random cases and compares it with an independent
reference (autograd, a real module, a real model's parameter count). On success it prints one line
starting with ✔. On a wrong answer it raises :class:`CheckFailed` whose message names the mistake,
recognised by comparing the answer with the mistakes students make most often (the residual left
out, a transposed gradient, a forgotten bias …). An answer that still raises ``NotImplementedError``
(the student copies) is reported as missing.
"""

from __future__ import annotations

import copy
import numbers

import torch
import torch.nn.functional as F
from torch import nn

from .adapter import BottleneckAdapter
from .placement import add_adapters, trainable_summary
from .probes import step_zero_gradients

#: Largest start deviation ‖A(h) − h‖/‖h‖ accepted as "near the identity".
NEAR_IDENTITY = 0.05
ATOL, RTOL = 1e-5, 1e-4


class CheckFailed(AssertionError):
    """The answer is missing or wrong; the message says which, in plain words."""


def _missing(what: str) -> CheckFailed:
    return CheckFailed(
        f"The answer is missing: {what} still raises NotImplementedError. Write your solution in the "
        "exercise cell above (replace the `raise NotImplementedError(...)` line), run that cell, "
        "then run this check again."
    )


def _call(what: str, fn, *args, hint: str = ""):
    """Call the student's code; turn a stub or a crash into a plain-words CheckFailed."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise _missing(what) from None
    except Exception as error:
        raise CheckFailed(f"Calling {what} raised {type(error).__name__}: {error}. {hint}".rstrip()) from error


def _close(a, b) -> bool:
    return isinstance(a, torch.Tensor) and a.shape == b.shape and torch.allclose(a, b, atol=ATOL, rtol=RTOL)


def _name(obj) -> str:
    return getattr(obj, "__name__", type(obj).__name__)


def _passed(message: str) -> None:
    print(f"✔ {message}")


# --------------------------------------------------------------------------------------------------
# Lab 1: the adapter module
# --------------------------------------------------------------------------------------------------

_NONLINEARITIES = {
    "GELU": F.gelu,
    "GELU (tanh approximation)": lambda x: F.gelu(x, approximate="tanh"),
    "ReLU": F.relu,
    "SiLU": F.silu,
    "tanh": torch.tanh,
}


def _check_linear(adapter, attribute: str, in_features: int, out_features: int, role: str) -> None:
    layer = getattr(adapter, attribute, None)
    if layer is None:
        raise CheckFailed(
            f"Your adapter has no attribute `{attribute}`: name the {role} `self.{attribute} = nn.Linear(...)` "
            "so that the labs can find it."
        )
    if not isinstance(layer, nn.Linear):
        raise CheckFailed(f"`self.{attribute}` is a {type(layer).__name__}; it should be an nn.Linear.")
    if (layer.in_features, layer.out_features) != (in_features, out_features):
        raise CheckFailed(
            f"`self.{attribute}` maps {layer.in_features} → {layer.out_features} features; the {role} must map "
            f"{in_features} → {out_features}."
        )


def _diagnose_forward(out: torch.Tensor, h: torch.Tensor, adapter: nn.Module) -> str | None:
    """None when out = h + up(f(down(h))) for a known f; otherwise what the code computes instead."""
    down, up = adapter.down, adapter.up
    z = down(h)
    for name, f in _NONLINEARITIES.items():
        if _close(out, h + up(f(z))):
            return None
    if any(_close(out, up(f(z))) for f in _NONLINEARITIES.values()):
        return "Your adapter returns up(f(down(h))) without adding h back: the residual is missing. Return h + up(f(down(h)))."
    if _close(out, h + up(z)):
        return (
            "Your adapter has no nonlinearity: it computes h + up(down(h)), which is linear in h (lab 3 shows it "
            "is then just a LoRA update). Apply f, e.g. GELU, between the down- and the up-projection."
        )
    if any(_close(out, h + f(up(z))) for f in _NONLINEARITIES.values()):
        return "You applied the nonlinearity after the up-projection; it belongs between them: h + up(f(down(h)))."
    if any(_close(out, f(h + up(f(z)))) or _close(out, f(h + up(z))) for f in _NONLINEARITIES.values()):
        return "You applied the nonlinearity to the sum; the residual must carry h through untouched: h + up(f(down(h)))."
    if _close(out, h):
        return "Your adapter returns h unchanged: add the correction up(f(down(h))) to it."
    return (
        "Your adapter's output is not h + up(f(down(h))) for f = GELU, ReLU, SiLU or tanh "
        f"(largest difference {(out - h - up(F.gelu(z))).abs().max().item():.2g} from the GELU version)."
    )


def check_adapter_class(adapter_class, d_model: int = 16, bottleneck: int = 4) -> None:
    """Check a student's adapter class ``adapter_class(d_model, bottleneck)`` with ``.down`` and ``.up``.

    It must have 2rd + r + d parameters, compute h + up(f(down(h))) on inputs of any leading shape,
    and start near the identity (‖A(h) − h‖/‖h‖ < 5 %).
    """
    name = _name(adapter_class)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        adapter = _call(f"{name}({d_model}, {bottleneck})", adapter_class, d_model, bottleneck)
        _check_linear(adapter, "down", d_model, bottleneck, "down-projection (d_model → bottleneck)")
        _check_linear(adapter, "up", bottleneck, d_model, "up-projection (bottleneck → d_model)")
        count = sum(p.numel() for p in adapter.parameters())
        expected = 2 * bottleneck * d_model + bottleneck + d_model
        if count == 2 * bottleneck * d_model:
            raise CheckFailed(
                f"Your adapter has {count} parameters, 2rd without biases; the paper's adapter has biases in both "
                f"projections: 2rd + r + d = {expected}. Use nn.Linear's default bias=True."
            )
        if count != expected:
            raise CheckFailed(
                f"Your adapter has {count} parameters; a bottleneck adapter has 2rd + r + d = {expected} "
                f"for d = {d_model}, r = {bottleneck} (just down and up with their biases)."
            )
        h = torch.randn(2, 3, d_model)
        fresh = _call(f"{name}.forward", adapter, h)
        if not isinstance(fresh, torch.Tensor) or fresh.shape != h.shape:
            shape = tuple(fresh.shape) if isinstance(fresh, torch.Tensor) else type(fresh).__name__
            raise CheckFailed(
                f"For an input of shape {tuple(h.shape)} your forward returns {shape}; an adapter must return "
                "a tensor of the same shape as its input."
            )
        probe = copy.deepcopy(adapter)
        with torch.no_grad():
            for parameter in probe.parameters():
                parameter.normal_(0.0, 0.5)  # large weights, so that a missing f or residual shows
            out = _call(f"{name}.forward", probe, h)
            problem = _diagnose_forward(out, h, probe)
        if problem:
            raise CheckFailed(problem)
        deviation = (torch.linalg.norm(fresh - h) / torch.linalg.norm(h)).item()
        if deviation >= NEAR_IDENTITY:
            raise CheckFailed(
                f"A freshly built adapter changes h by {100 * deviation:.0f} % (‖A(h) − h‖/‖h‖ = {deviation:.2f}); "
                f"it should start near the identity (below {100 * NEAR_IDENTITY:.0f} %). Initialise the "
                "projections with small weights, e.g. nn.init.trunc_normal_(w, std=1e-2, a=-2e-2, b=2e-2), "
                "or set the up-projection to zero."
            )
    _passed(
        f"{name} is right: h + up(f(down(h))) with 2rd + r + d = {expected} parameters for d = {d_model}, "
        f"r = {bottleneck}, and it starts near the identity (deviation below {100 * NEAR_IDENTITY:.0f} %)."
    )


# --------------------------------------------------------------------------------------------------
# Lab 2: gradients at step zero
# --------------------------------------------------------------------------------------------------


def _gradient_cases(n: int = 3):
    """Zero-up adapters (with a non-zero b_down, so a forgotten bias shows) and random h, δ."""
    generator = torch.Generator().manual_seed(0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        for d, r, tokens in [(16, 4, 5), (12, 3, 7), (20, 6, 1)][:n]:
            adapter = BottleneckAdapter(d, r, "gelu", init="zero_up")
            with torch.no_grad():
                adapter.down.bias.normal_(0.0, 1.0, generator=generator)
            yield adapter, torch.randn(tokens, d, generator=generator), torch.randn(tokens, d, generator=generator)


def _diagnose_up_gradient(grad_up: torch.Tensor, adapter, h, delta, reference: torch.Tensor) -> str:
    d, r = adapter.d_model, adapter.bottleneck
    z = adapter.down(h)
    if isinstance(grad_up, torch.Tensor) and grad_up.shape == (r, d) and _close(grad_up.T, reference):
        return (
            f"Your ∂L/∂W_up has shape ({r}, {d}) but W_up has shape ({d}, {r}): you computed f(z)ᵀ·δ. "
            "Transpose it: δᵀ·f(z), i.e. delta.T @ f(W_down h + b_down)."
        )
    if not isinstance(grad_up, torch.Tensor) or grad_up.shape != (d, r):
        shape = tuple(grad_up.shape) if isinstance(grad_up, torch.Tensor) else type(grad_up).__name__
        return f"Your ∂L/∂W_up is {shape}; it must be a tensor shaped like W_up: ({d}, {r})."
    if _close(grad_up, delta.T @ z):
        return "You left out the nonlinearity: the up-projection sees f(W_down h + b_down), so ∂L/∂W_up = δᵀ·f(z)."
    if _close(grad_up, delta.T @ adapter.act(z - adapter.down.bias)):
        return "You left out b_down: the nonlinearity is applied to W_down h + b_down, bias included."
    if _close(grad_up * h.shape[0], reference):
        return "You averaged over the tokens; L sums over them, so the gradient is the sum δᵀ·f(z) (no division)."
    return (
        "Your ∂L/∂W_up does not match autograd (largest difference "
        f"{(grad_up - reference).abs().max().item():.2g}); it should be δᵀ·f(W_down h + b_down)."
    )


def check_zero_up_gradients(gradients_fn) -> None:
    """Check ``gradients_fn(adapter, h, delta) -> (grad_down, grad_up)`` against autograd.

    The adapter is zero-up initialised (W_up = 0), h and δ have shape (tokens, d) and the loss is
    L = Σ_t ⟨Adapter(h_t), δ_t⟩. Expected: ∂L/∂W_down = 0 exactly, ∂L/∂W_up = δᵀ f(W_down h + b_down).
    """
    name = _name(gradients_fn)
    for adapter, h, delta in _gradient_cases():
        reference_down, reference_up = step_zero_gradients(adapter, h, delta)
        with torch.no_grad():
            answer = _call(f"{name}(adapter, h, delta)", gradients_fn, copy.deepcopy(adapter), h.clone(), delta.clone())
            if not isinstance(answer, (tuple, list)) or len(answer) != 2:
                raise CheckFailed(f"{name} must return two tensors, (grad_down, grad_up); it returned {type(answer).__name__}.")
            grad_down, grad_up = answer
            shape = (adapter.bottleneck, adapter.d_model)
            if not isinstance(grad_down, torch.Tensor) or grad_down.shape != shape:
                got = tuple(grad_down.shape) if isinstance(grad_down, torch.Tensor) else type(grad_down).__name__
                raise CheckFailed(f"Your ∂L/∂W_down is {got}; it must be a tensor shaped like W_down: {shape}.")
            if torch.count_nonzero(grad_down) or torch.count_nonzero(reference_down):
                raise CheckFailed(
                    "Your ∂L/∂W_down is not zero. At step zero W_up = 0, and every path from W_down to the loss "
                    "goes through W_up (∂L/∂W_down = ((W_upᵀ δ) ⊙ f′(z)) hᵀ), so it is exactly zero."
                )
            if not _close(grad_up, reference_up):
                raise CheckFailed(_diagnose_up_gradient(grad_up, adapter, h, delta, reference_up))
    _passed(
        "Your step-zero gradients match autograd: ∂L/∂W_down = 0 exactly, and ∂L/∂W_up = δᵀ·f(W_down h + b_down) "
        f"(within {ATOL:g}) on 3 random cases."
    )


# --------------------------------------------------------------------------------------------------
# Lab 3: folding a linear adapter into the dense layer before it
# --------------------------------------------------------------------------------------------------


_FOLD_ORDER = (
    "The adapter acts after dense, so I + W_up W_down multiplies W from the left: W' = (I + W_up W_down)·W, "
    "a (d_out × d_in) matrix like W."
)


def _fold_case(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        dense = nn.Linear(12, 16)
        adapter = BottleneckAdapter(16, 4, "identity", init="houlsby", init_scale=0.3)
        with torch.no_grad():
            adapter.down.bias.normal_(0.0, 1.0, generator=generator)
            adapter.up.bias.normal_(0.0, 1.0, generator=generator)
    return dense.eval(), adapter.eval(), torch.randn(5, 12, generator=generator)


def check_fold(fold_fn) -> None:
    """Check ``fold_fn(dense, adapter) -> nn.Linear`` for a linear adapter that follows ``dense``.

    The result must be one nn.Linear of dense's shape computing adapter(dense(x)), with dense left
    unchanged: W' = (I + W_up W_down) W and b' = (I + W_up W_down) b + W_up b_down + b_up.
    """
    name = _name(fold_fn)
    dense, adapter, x = _fold_case()
    before = copy.deepcopy(dense.state_dict())
    folded = _call(f"{name}(dense, adapter)", fold_fn, dense, adapter, hint=_FOLD_ORDER)
    if any(not torch.equal(before[k], v) for k, v in dense.state_dict().items()):
        raise CheckFailed(
            "Your fold changed the original dense layer in place. Build a new nn.Linear and leave dense as it "
            "was, so that the two can be compared."
        )
    if not isinstance(folded, nn.Linear):
        raise CheckFailed(
            f"Your fold returns a {type(folded).__name__}; it must return one nn.Linear: that the folded model "
            "has exactly the original architecture is the point."
        )
    if (folded.in_features, folded.out_features) != (dense.in_features, dense.out_features):
        raise CheckFailed(
            f"Your folded layer maps {folded.in_features} → {folded.out_features}; it must have dense's shape "
            f"{dense.in_features} → {dense.out_features}."
        )
    with torch.no_grad():
        reference = adapter(dense(x))
        got = folded(x)
        if _close(got, reference):
            _passed(
                f"Your fold is exact: one nn.Linear({dense.in_features} → {dense.out_features}) reproduces dense "
                f"followed by the linear adapter (within {ATOL:g})."
            )
            return
        w_up, w_down = adapter.up.weight.double(), adapter.down.weight.double()
        matrix = torch.eye(adapter.d_model, dtype=torch.float64) + w_up @ w_down
        weight = (matrix @ dense.weight.double()).float()
        if _close(got, adapter.delta(dense(x))):
            problem = (
                "You dropped the identity, i.e. the adapter's residual: the folded weight is (I + W_up W_down)·W, "
                "not W_up W_down·W."
            )
        elif _close(folded.weight, weight):
            problem = (
                "The weight is right but the bias is not: b' = (I + W_up W_down)·b + W_up·b_down + b_up "
                "(the dense bias goes through the adapter too, and the adapter adds its own biases)."
            )
        else:
            problem = (
                "Your folded layer's output differs from dense followed by the adapter (largest difference "
                f"{(got - reference).abs().max().item():.2g}). {_FOLD_ORDER}"
            )
    raise CheckFailed(problem)


# --------------------------------------------------------------------------------------------------
# Lab 4: counting parameters
# --------------------------------------------------------------------------------------------------

#: (d, r, layers, adapters per layer): BERT-base Houlsby and Pfeiffer, BERT-large Houlsby, and a tiny one.
COUNT_CASES = [(768, 64, 12, 2), (768, 48, 12, 1), (1024, 64, 24, 2), (16, 4, 3, 1)]


def _module_count(d: int, r: int, layers: int, per_layer: int) -> int:
    """The reference: parameters of a real BottleneckAdapter (built without storage) times L·k."""
    with torch.device("meta"):
        one = sum(p.numel() for p in BottleneckAdapter(d, r).parameters())
    return one * layers * per_layer


def check_param_count(count_fn) -> None:
    """Check ``count_fn(d, r, n_layers, per_layer) -> int``: the parameters of all adapters in a model."""
    name = _name(count_fn)
    for d, r, layers, k in COUNT_CASES:
        call = f"{name}(d={d}, r={r}, n_layers={layers}, per_layer={k})"
        got = _call(call, count_fn, d, r, layers, k)
        expected = _module_count(d, r, layers, k)
        if isinstance(got, bool) or not isinstance(got, numbers.Number):
            raise CheckFailed(f"{call} returned {got!r}; it must return a number of parameters (an int).")
        if got == expected and not isinstance(got, numbers.Integral):
            raise CheckFailed(
                f"{call} returned {got!r}, a float; a count is a whole number: use integer arithmetic (// not /)."
            )
        if got == expected:
            continue
        mistakes = [
            (2 * r * d * layers * k, "You left out the biases: each adapter has r + d of them (b_down and b_up)."),
            ((2 * r * d + d) * layers * k, "You counted b_up but not b_down: each adapter has r + d biases."),
            ((2 * r * d + r) * layers * k, "You counted b_down but not b_up: each adapter has r + d biases."),
            ((r * d + r + d) * layers * k, "You counted only one of the two matrices: W_down (r×d) and W_up (d×r) make 2rd."),
            ((2 * r * d + r + d) * layers, "You did not multiply by the adapters per layer (per_layer, 2 for Houlsby)."),
            ((2 * r * d + r + d) * k, "You did not multiply by the number of layers (n_layers)."),
        ]
        for value, message in mistakes:
            if got == value:
                raise CheckFailed(f"{call} returned {got:,}; the model has {expected:,}. {message}")
        raise CheckFailed(
            f"{call} returned {got!r}; the model has {expected:,} = n_layers · per_layer · (2rd + r + d)."
        )
    _passed(
        f"Your count is right on all {len(COUNT_CASES)} cases, e.g. BERT-base, Houlsby, r = 64: "
        f"{_module_count(768, 64, 12, 2):,}; BERT-large, Houlsby, r = 64: {_module_count(1024, 64, 24, 2):,}."
    )


# --------------------------------------------------------------------------------------------------
# Lab 5: what a placement trains
# --------------------------------------------------------------------------------------------------

PLACEMENT_CASES = [
    (placement, train_layernorm) for placement in ("houlsby", "pfeiffer", "parallel") for train_layernorm in (True, False)
]


def _trained_by_placement(layers: int, d: int, r: int, placement: str, train_layernorm: bool) -> int:
    """The reference: adapters + LayerNorms trainable in a real BertModel (meta device) after add_adapters."""
    from transformers import BertConfig, BertModel  # imported here: the other checks do without it

    config = BertConfig(
        hidden_size=d, num_hidden_layers=layers, num_attention_heads=1, intermediate_size=4 * d, vocab_size=100,
        max_position_embeddings=16,
    )
    with torch.device("meta"):
        model = add_adapters(BertModel(config, add_pooling_layer=False), placement, r, train_layernorm=train_layernorm)
    summary = trainable_summary(model)
    return summary.trainable["adapters"] + summary.trainable["layernorm"]


def check_placement_answer(trained_fn, n_layers: int = 12, d: int = 768, r: int = 64) -> None:
    """Check ``trained_fn(n_layers, d, r, placement, train_layernorm) -> int``.

    The answer is the number of parameters the placement trains in the encoder besides the task
    head: its adapters, plus every LayerNorm (2L + 1 of them, 2d each) when train_layernorm.
    """
    name = _name(trained_fn)
    per_adapter = 2 * r * d + r + d
    norms = (2 * n_layers + 1) * 2 * d
    for placement, train_layernorm in PLACEMENT_CASES:
        call = f"{name}({n_layers}, {d}, {r}, {placement!r}, train_layernorm={train_layernorm})"
        got = _call(call, trained_fn, n_layers, d, r, placement, train_layernorm)
        expected = _trained_by_placement(n_layers, d, r, placement, train_layernorm)
        if got == expected and isinstance(got, numbers.Integral) and not isinstance(got, bool):
            continue
        k = 2 if placement == "houlsby" else 1
        adapters = n_layers * k * per_adapter
        where = {"houlsby": "after the attention output and after the FFN output", "pfeiffer": "after the FFN output",
                 "parallel": "beside the FFN"}[placement]
        mistakes = [
            (n_layers * (3 - k) * per_adapter + (norms if train_layernorm else 0),
             f"{placement} puts {k} adapter{'s' if k == 2 else ''} in every layer ({where})."),
        ]
        if train_layernorm:
            mistakes += [
                (adapters + norms - 2 * d, f"You are 2d = {2 * d:,} short: the LayerNorm after the embeddings is "
                 "trained too, so BERT has 2L + 1 LayerNorms, not 2L."),
                (adapters + norms // 2, "A LayerNorm has a gain and a bias: 2d parameters each, not d."),
                (adapters, "With train_layernorm=True the paper's recipe trains every LayerNorm too: add (2L + 1)·2d."),
            ]
        else:
            mistakes.append((adapters + norms, "With train_layernorm=False the LayerNorms stay frozen (as in "
                             "AdapterHub): count only the adapters."))
        if got == expected:
            raise CheckFailed(f"{call} returned {got!r}; return a whole number (an int).")
        for value, message in mistakes:
            if got == value:
                raise CheckFailed(f"{call} returned {got:,}; the model trains {expected:,}. {message}")
        raise CheckFailed(
            f"{call} returned {got!r}; the model trains {expected:,} in adapters and LayerNorms "
            f"({'adapters + (2L + 1)·2d' if train_layernorm else 'adapters only'})."
        )
    _passed(
        f"Your counts match a real {n_layers}-layer model (d = {d}, r = {r}) for all three placements, with "
        "LayerNorms trained and frozen."
    )
