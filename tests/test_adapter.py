"""BottleneckAdapter against closed forms: the forward formula, parameter counts, init distributions,
the σ² law of near-identity init, and the gradients at step zero of a zero_up adapter."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.func import functional_call

from adapterlab.adapter import (
    ACTIVATIONS,
    BERT_INIT_STD,
    ORIGINAL_CODE_INIT_SCALE,
    PAPER_INIT_SCALE,
    BottleneckAdapter,
)

# Each activation written out from its definition, not through torch.nn.
BY_HAND = {
    "gelu": lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))),
    "relu": lambda x: torch.where(x > 0, x, torch.zeros_like(x)),
    "silu": lambda x: x / (1.0 + torch.exp(-x)),
    "swish": lambda x: x / (1.0 + torch.exp(-x)),
    "tanh": lambda x: (torch.exp(x) - torch.exp(-x)) / (torch.exp(x) + torch.exp(-x)),
    "identity": lambda x: x,
}
# f'(0): near zero each smooth f is f'(0)·x, so a small adapter's correction is f'(0)·W_up W_down h.
SLOPE_AT_ZERO = {"gelu": 0.5, "silu": 0.5, "swish": 0.5, "tanh": 1.0, "identity": 1.0}


def gelu_derivative(x: torch.Tensor) -> torch.Tensor:
    """d/dx x·Φ(x) = Φ(x) + x·φ(x)."""
    return 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0))) + x * torch.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def truncated_normal_std(sigma: float, cut: float = 2.0) -> float:
    """Std of N(0, σ²) truncated to ±cut·σ: σ·sqrt(1 − 2cφ(c) / (2Φ(c) − 1)) ≈ 0.8796σ for c = 2."""
    phi = math.exp(-0.5 * cut * cut) / math.sqrt(2.0 * math.pi)
    mass = math.erf(cut / math.sqrt(2.0))
    return sigma * math.sqrt(1.0 - 2.0 * cut * phi / mass)


def randomise_biases(adapter: BottleneckAdapter, seed: int = 0) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for linear in (adapter.down, adapter.up):
            linear.bias.copy_(torch.randn(linear.bias.shape, generator=generator, dtype=linear.bias.dtype))


def hidden(shape, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ---------------------------------------------------------------------------------------------------
# forward and parameter count
# ---------------------------------------------------------------------------------------------------


def test_truncated_normal_constant():
    assert truncated_normal_std(1.0) == pytest.approx(0.8796, abs=1e-4)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_forward_is_the_closed_form(activation):
    torch.manual_seed(0)
    adapter = BottleneckAdapter(12, 5, activation=activation, init="bert").double()
    randomise_biases(adapter)
    h = hidden((3, 4, 12))
    W_down, b_down = adapter.down.weight, adapter.down.bias
    W_up, b_up = adapter.up.weight, adapter.up.bias
    expected = h + BY_HAND[activation](h @ W_down.T + b_down) @ W_up.T + b_up
    with torch.no_grad():
        torch.testing.assert_close(adapter(h), expected, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(adapter.delta(h), expected - h, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(adapter.plain_delta(h), expected - h, rtol=1e-12, atol=1e-12)
    assert adapter.is_linear == (activation == "identity")


@pytest.mark.parametrize("shape", [(3, 4, 12), (25, 12), (12,)])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_the_inference_correction_is_the_modules_bit_for_bit(activation, shape):
    """plain_delta skips the module calls, not an operation: in float32 the very values of delta."""
    torch.manual_seed(0)
    adapter = BottleneckAdapter(12, 5, activation=activation, init="bert")
    randomise_biases(adapter)
    h = hidden(shape, dtype=torch.float32)
    with torch.inference_mode():
        assert torch.equal(adapter.plain_delta(h), adapter.delta(h))


@pytest.mark.parametrize("d, r", [(1, 1), (32, 4), (768, 64), (1024, 64), (384, 48)])
def test_parameter_count(d, r):
    with_bias = BottleneckAdapter(d, r)
    without_bias = BottleneckAdapter(d, r, bias=False)
    assert sum(p.numel() for p in with_bias.parameters()) == 2 * r * d + r + d
    assert sum(p.numel() for p in without_bias.parameters()) == 2 * r * d
    assert without_bias.down.bias is None and without_bias.up.bias is None


def test_config_rebuilds_the_adapter():
    adapter = BottleneckAdapter(16, 3, activation="tanh", init="zero_up", init_scale=1e-3, bias=False)
    assert adapter.config() == {
        "d_model": 16, "bottleneck": 3, "activation": "tanh", "init": "zero_up", "init_scale": 1e-3, "bias": False,
    }
    rebuilt = BottleneckAdapter(**adapter.config())
    assert [(n, p.shape) for n, p in rebuilt.named_parameters()] == [(n, p.shape) for n, p in adapter.named_parameters()]


def test_numpy_integers_are_sizes():
    adapter = BottleneckAdapter(np.int64(16), np.int32(4))
    assert type(adapter.d_model) is int and type(adapter.bottleneck) is int
    assert adapter.down.weight.shape == (4, 16)


# ---------------------------------------------------------------------------------------------------
# init schemes
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sigma", [PAPER_INIT_SCALE, ORIGINAL_CODE_INIT_SCALE, 0.3])
def test_houlsby_init_is_a_normal_truncated_at_two_sigma(sigma):
    torch.manual_seed(0)
    adapter = BottleneckAdapter(512, 64, init="houlsby", init_scale=sigma)
    for linear in (adapter.down, adapter.up):
        w = linear.weight.detach().double().flatten()  # 32,768 samples
        assert w.abs().max() <= 2 * sigma
        assert w.abs().max() > 1.9 * sigma  # the tails reach the cut
        assert abs(w.mean().item()) < 0.02 * sigma
        # A plain normal (σ) or a uniform on ±2σ (1.155σ) would miss this by > 10 %.
        assert w.std().item() == pytest.approx(truncated_normal_std(sigma), rel=0.02)
        assert torch.equal(linear.bias, torch.zeros_like(linear.bias))


def test_houlsby_init_scale_zero_is_a_zero_adapter():
    adapter = BottleneckAdapter(8, 2, init="houlsby", init_scale=0.0)
    assert all(torch.count_nonzero(p) == 0 for p in adapter.parameters())
    h = hidden((3, 8), dtype=torch.float32)
    assert torch.equal(adapter(h), h)


def test_zero_up_init_is_an_exact_identity():
    torch.manual_seed(0)
    d, r = 256, 32
    adapter = BottleneckAdapter(d, r, init="zero_up")
    assert torch.count_nonzero(adapter.up.weight) == 0
    assert torch.count_nonzero(adapter.up.bias) == 0 and torch.count_nonzero(adapter.down.bias) == 0
    # W_down ~ Kaiming-uniform with a = √5 (nn.Linear's and LoRA's A): U(±1/√d), std 1/√(3d).
    w = adapter.down.weight.detach().double()
    bound = 1 / math.sqrt(d)
    assert w.abs().max() <= bound and w.abs().max() > 0.99 * bound
    assert w.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.03)
    h = hidden((4, 9, d), dtype=torch.float32) * 10
    with torch.no_grad():
        assert torch.equal(adapter(h), h)


def test_bert_init_has_std_002_and_is_not_an_identity():
    torch.manual_seed(0)
    adapter = BottleneckAdapter(512, 64, init="bert", init_scale=0.5)  # init_scale does not apply to bert
    for linear in (adapter.down, adapter.up):
        w = linear.weight.detach().double()
        assert w.std().item() == pytest.approx(BERT_INIT_STD, rel=0.02)
        assert w.abs().max() > 3 * BERT_INIT_STD  # not truncated
        assert torch.count_nonzero(linear.bias) == 0
    h = hidden((4, 512), dtype=torch.float32)
    with torch.no_grad():
        assert not torch.equal(adapter(h), h)


def test_reset_parameters_redraws():
    torch.manual_seed(0)
    adapter = BottleneckAdapter(16, 4, init="houlsby")
    before = adapter.down.weight.detach().clone()
    adapter.reset_parameters()
    assert not torch.equal(before, adapter.down.weight)
    assert adapter.down.weight.abs().max() <= 2 * PAPER_INIT_SCALE


@pytest.mark.parametrize("init", ["houlsby", "zero_up", "bert"])
def test_a_seed_draws_the_weights_of_a_row_major_draw(init):
    """The weights live column-major (the fast layout for the CPU GEMM), but a seed must still give the
    values that torch.nn.init writes into plain row-major tensors, drawn down first, then up."""
    adapter = BottleneckAdapter(24, 5, init=init)
    torch.manual_seed(7)
    adapter.reset_parameters()
    torch.manual_seed(7)
    down, up = torch.empty(5, 24), torch.empty(24, 5)
    if init == "houlsby":
        for weight in (down, up):
            torch.nn.init.trunc_normal_(weight, std=PAPER_INIT_SCALE, a=-2 * PAPER_INIT_SCALE, b=2 * PAPER_INIT_SCALE)
    elif init == "zero_up":
        torch.nn.init.kaiming_uniform_(down, a=math.sqrt(5))
        torch.nn.init.zeros_(up)
    else:
        for weight in (down, up):
            torch.nn.init.normal_(weight, std=BERT_INIT_STD)
    assert torch.equal(adapter.down.weight, down) and torch.equal(adapter.up.weight, up)


def test_weights_are_stored_so_that_their_transpose_is_contiguous():
    """F.linear multiplies by weight.T: contiguous, it takes the CPU GEMM's fast path (benchmarks/inference.py)."""
    adapter = BottleneckAdapter(32, 4)
    for linear in (adapter.down, adapter.up):
        assert linear.weight.t().is_contiguous() and not linear.weight.is_contiguous()
        assert isinstance(linear.weight, torch.nn.Parameter) and linear.weight.requires_grad
    x = torch.randn(3, 32, dtype=torch.float64)
    adapter64 = BottleneckAdapter(32, 4, init="bert").double()
    expected = x + (torch.nn.functional.gelu(x @ adapter64.down.weight.T.contiguous() + adapter64.down.bias)
                    @ adapter64.up.weight.T.contiguous() + adapter64.up.bias)
    torch.testing.assert_close(adapter64(x), expected, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"bottleneck": 0}, "bottleneck"),
        ({"bottleneck": -4}, "bottleneck"),
        ({"bottleneck": 2.0}, "bottleneck"),
        ({"bottleneck": 2.5}, "bottleneck"),
        ({"bottleneck": True}, "bottleneck"),
        ({"bottleneck": "8"}, "bottleneck"),
        ({"d_model": 0}, "d_model"),
        ({"d_model": 16.0}, "d_model"),
        ({"d_model": False}, "d_model"),
        ({"activation": "sigmoid"}, "activation"),
        ({"activation": "GELU"}, "activation"),
        ({"activation": ["gelu"]}, "activation"),
        ({"init": "xavier"}, "init"),
        ({"init": None}, "init"),
        ({"init_scale": -1e-3}, "init_scale"),
        ({"init_scale": float("nan")}, "init_scale"),
        ({"init_scale": float("inf")}, "init_scale"),
        ({"init_scale": float("-inf")}, "init_scale"),
        ({"init_scale": "0.01"}, "init_scale"),
        ({"init_scale": True}, "init_scale"),
        ({"init_scale": None}, "init_scale"),
    ],
)
def test_bad_input_names_the_argument(kwargs, argument):
    arguments = {"d_model": 16, "bottleneck": 4, **kwargs}
    with pytest.raises(ValueError, match=rf"^{argument} must be"):
        BottleneckAdapter(**arguments)


def test_bad_activation_lists_the_allowed_values():
    with pytest.raises(ValueError) as error:
        BottleneckAdapter(16, 4, activation="sigmoid")
    assert all(name in str(error.value) for name in ACTIVATIONS)


def test_bias_must_be_a_bool():
    with pytest.raises(ValueError, match="^bias must be True or False; got 'False'"):
        BottleneckAdapter(16, 4, bias="False")


@pytest.mark.parametrize("shape", [(5, 16), (2, 3, 16), (16,), (5, 33)])
def test_an_input_of_another_width_names_both_widths(shape):
    adapter = BottleneckAdapter(32, 4)
    with pytest.raises(ValueError, match=rf"width d_model=32, but the input has width {shape[-1]}"):
        adapter(torch.randn(shape))
    with pytest.raises(ValueError, match="d_model=32"):
        adapter.delta(torch.randn(shape))
    with pytest.raises(ValueError, match="d_model=32, but the input has a scalar"):
        adapter(torch.tensor(1.0))
    assert adapter(torch.randn(2, 3, 32)).shape == (2, 3, 32)


# ---------------------------------------------------------------------------------------------------
# near identity: the deviation grows as σ²
# ---------------------------------------------------------------------------------------------------


def houlsby_deviation(activation: str, sigma: float, seed: int = 0) -> tuple[float, BottleneckAdapter]:
    """‖Adapter(h) − h‖ / ‖h‖ for a houlsby-initialised adapter (the same draw, scaled, for every σ)."""
    torch.manual_seed(seed)
    adapter = BottleneckAdapter(64, 8, activation=activation, init="houlsby", init_scale=sigma).double()
    h = hidden((16, 64))
    with torch.no_grad():
        return ((adapter(h) - h).norm() / h.norm()).item(), adapter


@pytest.mark.parametrize("activation", ["gelu", "relu", "silu", "tanh", "identity"])
def test_houlsby_deviation_grows_as_sigma_squared(activation):
    """W_down = σA, W_up = σB, biases 0. For smooth f, f(σAh) ≈ f'(0)·σAh, so the correction
    σB f(σAh) ≈ f'(0)·σ²·BAh: quadratic in σ, not linear. ReLU is positively homogeneous, so there
    the law is exact: σB relu(σAh) = σ²·B relu(Ah)."""
    small, _ = houlsby_deviation(activation, 1e-4)
    large, _ = houlsby_deviation(activation, 1e-3)
    assert large / small == pytest.approx(100.0, rel=0.02)


@pytest.mark.parametrize("activation", ["gelu", "silu", "tanh", "identity"])
def test_houlsby_deviation_matches_the_leading_order(activation):
    deviation, adapter = houlsby_deviation(activation, 1e-3)
    h = hidden((16, 64))
    with torch.no_grad():
        predicted = SLOPE_AT_ZERO[activation] * (h @ adapter.down.weight.T @ adapter.up.weight.T).norm() / h.norm()
    assert deviation == pytest.approx(predicted.item(), rel=0.02)
    assert deviation < 1e-4  # near the identity at the original code's σ


# ---------------------------------------------------------------------------------------------------
# gradients at step zero (zero_up, float64)
# ---------------------------------------------------------------------------------------------------


def zero_up_setup(seed: int = 0):
    torch.manual_seed(seed)
    adapter = BottleneckAdapter(16, 4, activation="gelu", init="zero_up").double()
    with torch.no_grad():
        adapter.down.bias.uniform_(-0.5, 0.5)  # a nonzero b_down, so the closed form must carry it
    h = hidden((3, 5, 16), seed=1)
    target = hidden((3, 5, 16), seed=2)
    return adapter, h, target


def mse_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """L = ½‖out − target‖², so δ = ∂L/∂out = out − target in closed form."""
    return 0.5 * ((output - target) ** 2).sum()


def test_zero_up_step_zero_gradients_match_the_closed_form():
    adapter, h, target = zero_up_setup()
    mse_loss(adapter(h), target).backward()
    delta = (h - target).reshape(-1, 16)  # the adapter is the identity, so out = h
    z = h.reshape(-1, 16) @ adapter.down.weight.detach().T + adapter.down.bias.detach()
    f = BY_HAND["gelu"](z)
    assert torch.count_nonzero(adapter.down.weight.grad) == 0
    assert torch.count_nonzero(adapter.down.bias.grad) == 0
    torch.testing.assert_close(adapter.up.weight.grad, delta.T @ f, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(adapter.up.bias.grad, delta.sum(0), rtol=1e-12, atol=1e-12)
    assert adapter.up.weight.grad.abs().min() > 0


def test_zero_up_sgd_moves_up_first_then_down():
    lr = 0.05
    adapter, h, target = zero_up_setup()
    down0, up0 = adapter.down.weight.detach().clone(), adapter.up.weight.detach().clone()
    optimizer = torch.optim.SGD(adapter.parameters(), lr=lr)

    mse_loss(adapter(h), target).backward()
    grad_up = adapter.up.weight.grad.clone()
    optimizer.step()
    optimizer.zero_grad()
    assert torch.equal(adapter.down.weight, down0)  # its gradient was exactly zero
    torch.testing.assert_close(adapter.up.weight.detach(), up0 - lr * grad_up, rtol=0, atol=1e-15)

    # Step one: W_up ≠ 0 now, so δ reaches W_down: ∂L/∂W_down = Σ_t (f'(z_t) ⊙ W_upᵀ δ_t) h_tᵀ.
    output = adapter(h)
    mse_loss(output, target).backward()
    x = h.reshape(-1, 16)
    delta = (output.detach() - target).reshape(-1, 16)
    z = x @ adapter.down.weight.detach().T + adapter.down.bias.detach()
    expected = (gelu_derivative(z) * (delta @ adapter.up.weight.detach())).T @ x
    assert torch.count_nonzero(adapter.down.weight.grad) == adapter.down.weight.numel()
    torch.testing.assert_close(adapter.down.weight.grad, expected, rtol=1e-10, atol=1e-12)
    optimizer.step()
    assert not torch.equal(adapter.down.weight, down0)
    assert not torch.equal(adapter.up.weight, up0)


def test_zero_up_adamw_first_step_closed_form():
    """Adam's first step is lr·g/(|g| + eps) (bias-corrected moments are g and g²); AdamW then decays
    every weight by lr·wd. So W_down, whose g is 0, moves by the decay alone; W_up by ≈ lr·sign(g)."""
    lr, wd, eps = 1e-2, 0.1, 1e-8
    adapter, h, target = zero_up_setup()
    down0, up0 = adapter.down.weight.detach().clone(), adapter.up.weight.detach().clone()
    optimizer = torch.optim.AdamW(adapter.parameters(), lr=lr, weight_decay=wd, eps=eps)
    mse_loss(adapter(h), target).backward()
    g = adapter.up.weight.grad.clone()
    optimizer.step()
    torch.testing.assert_close(adapter.down.weight.detach(), down0 * (1 - lr * wd), rtol=1e-12, atol=0)
    torch.testing.assert_close(
        adapter.up.weight.detach(), up0 * (1 - lr * wd) - lr * g / (g.abs() + eps), rtol=1e-9, atol=1e-15
    )
    optimizer.zero_grad()
    mse_loss(adapter(h), target).backward()
    assert adapter.down.weight.grad.abs().max() > 0
    assert not torch.equal(adapter.down.weight, down0) and not torch.equal(adapter.up.weight, up0)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("init", ["bert", "zero_up"])
def test_gradcheck_float64(activation, init):
    torch.manual_seed(0)
    adapter = BottleneckAdapter(6, 3, activation=activation, init=init).double()
    randomise_biases(adapter)
    names = [name for name, _ in adapter.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in adapter.parameters())
    h = hidden((2, 4, 6)).requires_grad_()

    def function(h, *params):
        return functional_call(adapter, dict(zip(names, params)), (h,))

    assert torch.autograd.gradcheck(function, (h, *params), eps=1e-6, atol=1e-6, rtol=1e-5)
