"""Each self-check accepts a right answer, reports a stub as missing, and names the mistake in a
plausible wrong answer."""

from __future__ import annotations

import copy

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from adapterlab import checks
from adapterlab.adapter import BottleneckAdapter
from adapterlab.counting import backbone_config, bert_counts
from adapterlab.lora import fold_linear_adapter
from torch.autograd import grad as take_gradient

MISSING = "The answer is missing"


def _fails(check, answer, *words):
    with pytest.raises(checks.CheckFailed) as caught:
        check(answer)
    for word in words:
        assert word in str(caught.value), str(caught.value)
    return str(caught.value)


def _stub(*args):
    raise NotImplementedError("write your solution here")


# --------------------------------------------------------------------------------------------------
# check_adapter_class
# --------------------------------------------------------------------------------------------------


class RightAdapter(nn.Module):
    def __init__(self, d_model, bottleneck):
        super().__init__()
        self.down = nn.Linear(d_model, bottleneck)
        self.act = nn.GELU()
        self.up = nn.Linear(bottleneck, d_model)
        for linear in (self.down, self.up):
            nn.init.trunc_normal_(linear.weight, std=1e-2, a=-2e-2, b=2e-2)
            nn.init.zeros_(linear.bias)

    def forward(self, h):
        return h + self.up(self.act(self.down(h)))


class NoResidual(RightAdapter):
    def forward(self, h):
        return self.up(self.act(self.down(h)))


class NoNonlinearity(RightAdapter):
    def forward(self, h):
        return h + self.up(self.down(h))


class NonlinearityAfterUp(RightAdapter):
    def forward(self, h):
        return h + torch.relu(self.up(self.down(h)))


class DefaultInit(RightAdapter):
    def __init__(self, d_model, bottleneck):
        nn.Module.__init__(self)
        self.down, self.act, self.up = nn.Linear(d_model, bottleneck), nn.ReLU(), nn.Linear(bottleneck, d_model)


class NoBias(RightAdapter):
    def __init__(self, d_model, bottleneck):
        nn.Module.__init__(self)
        self.down, self.act = nn.Linear(d_model, bottleneck, bias=False), nn.GELU()
        self.up = nn.Linear(bottleneck, d_model, bias=False)
        nn.init.zeros_(self.up.weight)


class Swapped(RightAdapter):
    def __init__(self, d_model, bottleneck):
        super().__init__(bottleneck, d_model)


class DeadInit(RightAdapter):
    """Both matrices zero: the exact identity, but only b_up can ever get a gradient."""

    def __init__(self, d_model, bottleneck):
        super().__init__(d_model, bottleneck)
        for linear in (self.down, self.up):
            nn.init.zeros_(linear.weight)


class ZeroDownRelu(RightAdapter):
    """W_down zero with ReLU: every unit sits at the kink, where ReLU passes no gradient."""

    def __init__(self, d_model, bottleneck):
        super().__init__(d_model, bottleneck)
        self.act = nn.ReLU()
        nn.init.zeros_(self.down.weight)


class ZeroUp(RightAdapter):
    """The intended near-identity init: W_up = 0, W_down random."""

    def __init__(self, d_model, bottleneck):
        super().__init__(d_model, bottleneck)
        nn.init.kaiming_uniform_(self.down.weight)
        nn.init.zeros_(self.up.weight)


class ConstantInit(RightAdapter):
    def __init__(self, d_model, bottleneck):
        super().__init__(d_model, bottleneck)
        for linear in (self.down, self.up):
            nn.init.constant_(linear.weight, 1e-2)


class NonlinearityFirst(RightAdapter):
    def forward(self, h):
        return h + self.up(self.down(self.act(h)))


class NonlinearityOnSum(RightAdapter):
    def forward(self, h):
        return self.act(h + self.up(self.act(self.down(h))))


class ScalarBias(RightAdapter):
    def __init__(self, d_model, bottleneck):
        super().__init__(d_model, bottleneck)
        self.down = nn.Linear(d_model, bottleneck, bias=False)
        nn.init.trunc_normal_(self.down.weight, std=1e-2, a=-2e-2, b=2e-2)
        self.b_down = nn.Parameter(torch.zeros(1))

    def forward(self, h):
        return h + self.up(self.act(self.down(h) + self.b_down))


class NoDownBias(RightAdapter):
    def __init__(self, d_model, bottleneck):
        super().__init__(d_model, bottleneck)
        self.down = nn.Linear(d_model, bottleneck, bias=False)
        nn.init.trunc_normal_(self.down.weight, std=1e-2, a=-2e-2, b=2e-2)


class StubAdapter(nn.Module):
    def __init__(self, d_model, bottleneck):
        super().__init__()
        raise NotImplementedError("write your solution here")


class SqueezedAdapter(RightAdapter):
    def forward(self, h):  # every axis of one squeezed away: no fixed input has one, a one-token sentence does
        return h + self.up(self.act(self.down(h))).squeeze()


def test_an_adapter_right_only_on_the_fixed_shapes_is_shown_its_smallest_drawn_shape():
    message = _fails(checks.check_adapter_class, SqueezedAdapter, "Right on the 4 fixed cases",
                     "smallest of 30 drawn sizes and input shapes", "your forward returns")
    shape = message.split("input shape (")[1].split(")")[0]
    assert "1" in shape.split(", "), f"the drawn input {shape} has no axis of one, which is what the answer gets wrong"


def test_adapter_class_accepts_right_answers(capsys):
    checks.check_adapter_class(RightAdapter)
    assert capsys.readouterr().out.startswith("✔ RightAdapter is right")
    # the package's own adapter passes too, with any of the usual nonlinearities
    for activation in ("gelu", "relu", "silu", "tanh"):
        for init in ("houlsby", "zero_up"):
            checks.check_adapter_class(lambda d, r, a=activation, i=init: BottleneckAdapter(d, r, a, init=i))
    checks.check_adapter_class(ZeroUp)  # zero-up is the exact identity and still learns


def test_adapter_class_accepts_zero_down_when_f_has_a_slope_at_zero():
    """W_down = 0 with GELU is alive: f′(0) = ½ lets W_down's gradient through (only ReLU's kink kills it)."""

    class ZeroDownGelu(RightAdapter):
        def __init__(self, d_model, bottleneck):
            super().__init__(d_model, bottleneck)
            nn.init.zeros_(self.down.weight)
            nn.init.normal_(self.up.weight, std=1e-2)

    checks.check_adapter_class(ZeroDownGelu)


def test_adapter_class_names_the_mistake():
    _fails(checks.check_adapter_class, NoResidual, "without adding h back: the residual is missing")
    _fails(checks.check_adapter_class, NoNonlinearity, "no nonlinearity")
    _fails(checks.check_adapter_class, NonlinearityAfterUp, "after the up-projection")
    _fails(checks.check_adapter_class, NonlinearityFirst, "before the down-projection")
    _fails(checks.check_adapter_class, NonlinearityOnSum, "to the sum")
    _fails(checks.check_adapter_class, DefaultInit, "near the identity", "far too large")
    _fails(checks.check_adapter_class, NoBias, "without biases", "99136")
    _fails(checks.check_adapter_class, ScalarBias, "bias shapes are wrong", "b_down has shape (64,)")
    _fails(checks.check_adapter_class, NoDownBias, "b_up but no b_down")
    _fails(checks.check_adapter_class, Swapped, "`self.down` maps 64 → 768")
    _fails(checks.check_adapter_class, DeadInit, "cannot learn", "both matrices start at zero", "Keep one of them random")
    _fails(checks.check_adapter_class, ZeroDownRelu, "cannot learn", "W_down starts at zero", "Start W_down random")
    _fails(checks.check_adapter_class, ConstantInit, "identical", "as if r were 1")


class WideInit(RightAdapter):
    """N(0, 0.05²): under 5 % at d = 16, r = 4, but about a third of h at BERT-base's d = 768, r = 64."""

    def __init__(self, d_model, bottleneck):
        super().__init__(d_model, bottleneck)
        for linear in (self.down, self.up):
            nn.init.normal_(linear.weight, std=0.05)


class DefaultUpBias(RightAdapter):
    """Small weights, but b_up keeps nn.Linear's default: a shift of every token."""

    def __init__(self, d_model, bottleneck):
        super().__init__(d_model, bottleneck)
        nn.init.uniform_(self.up.bias, -bottleneck ** -0.5, bottleneck ** -0.5)


class DetachedBottleneck(RightAdapter):
    """Right output, but the bottleneck is cut from autograd: W_down and b_down never learn."""

    def forward(self, h):
        return h + self.up(self.act(self.down(h)).detach())


class FrozenDown(RightAdapter):
    def __init__(self, d_model, bottleneck):
        super().__init__(d_model, bottleneck)
        self.down.weight.requires_grad_(False)


class ForwardWithoutGrad(RightAdapter):
    def forward(self, h):
        with torch.no_grad():
            return h + self.up(self.act(self.down(h)))


class InPlaceResidual(RightAdapter):
    def forward(self, h):
        h += self.up(self.act(self.down(h)))
        return h


class DeadRelu(RightAdapter):
    """ReLU with b_down = −1: every unit starts below the kink, dead, although W_down is random."""

    def __init__(self, d_model, bottleneck):
        super().__init__(d_model, bottleneck)
        self.act = nn.ReLU()
        nn.init.constant_(self.down.bias, -1.0)


class HalfDeadRelu(RightAdapter):
    """Half the units start far below ReLU's kink: they never learn, the others do."""

    def __init__(self, d_model, bottleneck):
        super().__init__(d_model, bottleneck)
        self.act = nn.ReLU()
        with torch.no_grad():
            self.down.bias[: bottleneck // 2] = -5.0


class FixedWidth(RightAdapter):
    """Right at d = 768 only: the width is written in instead of read from d_model."""

    def __init__(self, d_model, bottleneck):
        super().__init__(768, bottleneck)


class Flattening(RightAdapter):
    """Works on (tokens, d) only: a (batch, sequence, d) input comes back flattened."""

    def forward(self, h):
        h = h.reshape(-1, h.shape[-1])
        return h + self.up(self.act(self.down(h)))


class WeightData(RightAdapter):
    """Uses W_up through .data: the output is right, but W_up is invisible to autograd."""

    def forward(self, h):
        return h + F.linear(self.act(self.down(h)), self.up.weight.data, self.up.bias)


class DoubleInside(RightAdapter):
    def forward(self, h):
        return (h.double() + self.up.double()(self.act(self.down.double()(h.double())))).to(torch.float64)


def test_adapter_class_catches_mistakes_that_show_only_at_bert_size_or_in_training():
    check = checks.check_adapter_class
    _fails(check, WideInit, "near the identity", "too large for BERT's size", "d = 768")
    _fails(check, DefaultUpBias, "near the identity", "b_up", "Start b_up at zero")
    _fails(check, DetachedBottleneck, "cannot learn", "no gradient ever reaches W_down and b_down", ".detach()")
    _fails(check, WeightData, "cannot learn", "no gradient ever reaches W_up")
    _fails(check, FrozenDown, "W_down is frozen", "requires_grad=False")
    _fails(check, ForwardWithoutGrad, "cannot learn", "torch.no_grad()")
    message = _fails(check, InPlaceResidual, "in place", "h += ")
    assert "unchanged" not in message
    message = _fails(check, DeadRelu, "cannot learn", "dead", "b_down is -1")
    assert "W_down starts at zero" not in message
    _fails(check, HalfDeadRelu, "32 of the 64 bottleneck units never get a gradient")
    _fails(check, FixedWidth, "`self.down` maps 768 → 8", "24 → 8")
    _fails(check, Flattening, "(2, 5, 768)", "same shape as its input")
    _fails(check, DoubleInside, "torch.float64", "keep the input's dtype")


class PairedUnits(RightAdapter):
    """Zero-up, with W_down drawn for half the units and repeated: every unit has a twin, so only r/2 differ."""

    def __init__(self, d_model, bottleneck):
        super().__init__(d_model, bottleneck)
        with torch.no_grad():
            half = torch.randn(bottleneck // 2, d_model) * 1e-2
            self.down.weight.copy_(half.repeat(2, 1))
            self.up.weight.zero_()


class GeluDeepBelowZero(RightAdapter):
    """b_down = −20 parks every unit far down GELU's flat tail: the output is h, and float32 sees no slope there."""

    def __init__(self, d_model, bottleneck):
        super().__init__(d_model, bottleneck)
        nn.init.constant_(self.down.bias, -20.0)


def test_adapter_class_sees_partly_equal_units_and_slopes_float32_loses():
    _fails(checks.check_adapter_class, PairedUnits, "Only 32 of the 64 bottleneck units", "as if r were 32",
           "Draw every weight at random")
    _fails(checks.check_adapter_class, GeluDeepBelowZero, "cannot learn", "dead", "b_down is -20")


def test_adapter_class_reports_a_stub_as_missing():
    _fails(checks.check_adapter_class, StubAdapter, MISSING, "NotImplementedError")


# --------------------------------------------------------------------------------------------------
# check_adapter_gradients: the general case, W_up ≠ 0
# --------------------------------------------------------------------------------------------------


def slope(adapter, z):
    """f′(z) in closed form, written independently of autograd."""
    name = adapter.activation_name
    if name == "tanh":
        return 1 - torch.tanh(z) ** 2
    if name == "relu":
        return (z > 0).to(z.dtype)
    if name in ("silu", "swish"):
        s = torch.sigmoid(z)
        return s * (1 + z * (1 - s))
    assert name == "gelu"
    normal = torch.distributions.Normal(0.0, 1.0)
    return normal.cdf(z) + z * normal.log_prob(z).exp()


def parts(adapter, h, delta):
    z = h @ adapter.down.weight.T + adapter.down.bias
    return z, delta @ adapter.up.weight  # row t of the second: W_upᵀ δ_t


def right_general(adapter, h, delta):
    z, back = parts(adapter, h, delta)
    return (back * slope(adapter, z)).T @ h, delta.T @ adapter.act(z)


def test_general_gradients_accept_the_chain_rule(capsys):
    checks.check_adapter_gradients(right_general)
    out = capsys.readouterr().out
    assert out.startswith("✔") and "gelu, tanh, relu, silu" in out and f"{checks.DRAWN_ADAPTERS} drawn ones" in out


def test_general_gradients_show_an_answer_right_only_on_the_fixed_cases_the_smallest_drawn_adapter_it_gets_wrong():
    """The fixed cases have 4 to 12 tokens: an answer that drops the tokens after the third passes them all when
    written to skip nothing there, and is shown the smallest drawn adapter it gets wrong, with what was measured."""
    def short_batches_unsummed(adapter, h, delta):
        down, up = right_general(adapter, h, delta)
        return (down * (h.shape[0] >= 4), up) if h.shape[0] < 4 else (down, up)

    message = _fails(checks.check_adapter_gradients, short_batches_unsummed, "∂L/∂W_down",
                     "right on the 5 fixed cases", "f = gelu, d = 1, r = 1, 1 token", "largest difference")
    assert "You " not in message.split("(", 1)[0]  # no catalogue mistake named


def test_general_gradients_name_the_mistake():
    def no_slope(adapter, h, delta):
        z, back = parts(adapter, h, delta)
        return back.T @ h, delta.T @ adapter.act(z)

    def value_for_slope(adapter, h, delta):
        z, back = parts(adapter, h, delta)
        return (back * adapter.act(z)).T @ h, delta.T @ adapter.act(z)

    def no_w_up(adapter, h, delta):
        z, _ = parts(adapter, h, delta)
        return (delta * slope(adapter, z)).T @ h, delta.T @ adapter.act(z)

    def w_up_untransposed(adapter, h, delta):
        z, _ = parts(adapter, h, delta)
        return ((delta @ adapter.up.weight.T) * slope(adapter, z)).T @ h, delta.T @ adapter.act(z)

    def transposed(adapter, h, delta):
        down, up = right_general(adapter, h, delta)
        return down.T, up

    def averaged(adapter, h, delta):
        down, up = right_general(adapter, h, delta)
        return down / h.shape[0], up

    def per_token(adapter, h, delta):
        z, back = parts(adapter, h, delta)
        return torch.einsum("tr,td->trd", back * slope(adapter, z), h), delta.T @ adapter.act(z)

    def first_token(adapter, h, delta):
        z, back = parts(adapter, h, delta)
        return torch.outer(back[0] * slope(adapter, z)[0], h[0]), delta.T @ adapter.act(z)

    def slope_without_bias(adapter, h, delta):
        z, back = parts(adapter, h, delta)
        return (back * slope(adapter, z - adapter.down.bias)).T @ h, delta.T @ adapter.act(z)

    def up_without_f(adapter, h, delta):
        down, _ = right_general(adapter, h, delta)
        return down, delta.T @ parts(adapter, h, delta)[0]

    def zero_down_always(adapter, h, delta):
        return torch.zeros(adapter.bottleneck, adapter.d_model), right_general(adapter, h, delta)[1]

    check = checks.check_adapter_gradients
    _fails(check, no_slope, "left out f′(z)")
    _fails(check, value_for_slope, "used f(z) where the slope f′(z) belongs")
    _fails(check, no_w_up, "left out W_upᵀ")
    _fails(check, w_up_untransposed, "used W_up where W_upᵀ belongs")
    _fails(check, transposed, "transposed")
    _fails(check, averaged, "averaged over the tokens")
    _fails(check, per_token, "one gradient per token", "sum over the batch")
    _fails(check, first_token, "single token")
    _fails(check, slope_without_bias, "left out b_down")
    _fails(check, up_without_f, "∂L/∂W_up", "left out the nonlinearity")
    _fails(check, zero_down_always, "step-zero answer", "W_up ≠ 0")  # the step-zero answer is not the general one


def by_autograd(adapter, h, delta):
    return torch.autograd.grad((adapter(h) * delta).sum(), (adapter.down.weight, adapter.up.weight))


def by_backward(adapter, h, delta):
    adapter.requires_grad_(True)
    (adapter(h) * delta).sum().backward()
    return adapter.down.weight.grad, adapter.up.weight.grad


def by_torch_func(adapter, h, delta):
    from torch.func import functional_call, grad

    weights = {"down.weight": adapter.down.weight, "up.weight": adapter.up.weight}
    loss = lambda w: (functional_call(adapter, w, (h,)) * delta).sum()
    g = grad(loss)(weights)
    return g["down.weight"], g["up.weight"]


def by_autograd_on_copies(adapter, h, delta):
    """Autograd on its own copies of the weights, through a hand-written forward."""
    w_down = adapter.down.weight.clone().requires_grad_()
    w_up = adapter.up.weight.clone().requires_grad_()
    out = h + (adapter.act(h @ w_down.T + adapter.down.bias) @ w_up.T + adapter.up.bias)
    return torch.autograd.grad((out * delta).sum(), (w_down, w_up))


def f_prime(f, z):
    """The lab's helper: f′(z) entry by entry, by autograd on Σ f(z)."""
    z = z.detach().requires_grad_()
    with torch.enable_grad():
        return torch.autograd.grad(f(z).sum(), z)[0]


def with_the_lab_s_f_prime(adapter, h, delta):
    """The lab's own answer: the chain rule by hand, autograd only for the slope of f."""
    z = adapter.down(h)
    back = (delta @ adapter.up.weight) * f_prime(adapter.act, z)
    return back.T @ h, delta.T @ adapter.act(z)


def by_autograd_renamed(adapter, h, delta):
    """autograd's grad imported under another name, on copies of the weights."""
    w_down = adapter.down.weight.detach().clone().requires_grad_()
    w_up = adapter.up.weight.detach().clone().requires_grad_()
    with torch.enable_grad():
        out = h + F.linear(adapter.act(F.linear(h, w_down, adapter.down.bias)), w_up, adapter.up.bias)
        return take_gradient((out * delta).sum(), (w_down, w_up))


def by_autograd_through_the_bottleneck(adapter, h, delta):
    """Autograd only from the output back to z; the last step into the weights by hand."""
    z = adapter.down(h).detach().requires_grad_()
    with torch.enable_grad():
        out = h + adapter.up(adapter.act(z))
        (grad_z,) = take_gradient((out * delta).sum(), z)
    return grad_z.T @ h, delta.T @ adapter.act(z.detach())


def by_f_prime_doing_the_chain_rule(adapter, h, delta):
    """The slope helper handed f times the signal from above: autograd does the step through f."""
    z = adapter.down(h)
    back = delta @ adapter.up.weight
    return f_prime(lambda u: adapter.act(u) * back, z).T @ h, delta.T @ adapter.act(z)


def in_float64(adapter, h, delta):
    down, up = right_general(copy.deepcopy(adapter).double(), h.double(), delta.double())
    return down, up


def converting_the_adapter(adapter, h, delta):
    """Right in float64, but .double() converts the caller's adapter itself: the lab's adapter is float64 after."""
    return right_general(adapter.double(), h.double(), delta.double())


@pytest.mark.parametrize("answer", [by_autograd, by_backward, by_torch_func, by_autograd_on_copies,
                                    by_autograd_renamed, by_autograd_through_the_bottleneck,
                                    by_f_prime_doing_the_chain_rule],
                         ids=lambda f: f.__name__)
def test_gradients_computed_by_autograd_are_rejected(answer):
    for check in (checks.check_adapter_gradients, checks.check_zero_up_gradients):
        _fails(check, answer, "without autograd", "chain rule")


def test_the_lab_s_slope_helper_is_allowed(capsys):
    checks.check_adapter_gradients(with_the_lab_s_f_prime)
    checks.check_zero_up_gradients(with_the_lab_s_f_prime)
    assert capsys.readouterr().out.count("✔") == 2


def test_gradients_in_swapped_order_are_named():
    def swapped(adapter, h, delta):
        down, up = right_general(adapter, h, delta)
        return up, down

    for check in (checks.check_adapter_gradients, checks.check_zero_up_gradients):
        _fails(check, swapped, "swapped order", "(grad_down, grad_up)")


def test_gradients_are_checked_at_bert_size_and_accepted_in_float64(capsys):
    checks.check_adapter_gradients(in_float64)
    checks.check_zero_up_gradients(in_float64)
    out = capsys.readouterr().out
    assert "d = 768, r = 64" in out and out.count("✔") == 2

    def small_only(adapter, h, delta):  # right while d < 100: a plausible shortcut that loops over a fixed range
        down, up = right_general(adapter, h, delta)
        down[:, 100:] = 0
        return down, up

    _fails(checks.check_adapter_gradients, small_only, "d = 768, r = 64")
    for check in (checks.check_adapter_gradients, checks.check_zero_up_gradients):
        _fails(check, converting_the_adapter, "converted `adapter` to float64 in place", "adapter.double()")


def test_zero_up_gradients_see_a_non_zero_b_up():
    def output_minus_h(adapter, h, delta):  # "the bottleneck's output is A(h) − h": true only without b_up
        return torch.zeros(adapter.bottleneck, adapter.d_model), delta.T @ (adapter(h) - h)[:, : adapter.bottleneck]

    _fails(checks.check_zero_up_gradients, output_minus_h, "∂L/∂W_up")


def test_general_gradients_name_the_nonlinearity_of_the_failing_case():
    def tanh_only(adapter, h, delta):  # right for tanh, wrong for every other f
        z, back = parts(adapter, h, delta)
        return (back * (1 - torch.tanh(z) ** 2)).T @ h, delta.T @ adapter.act(z)

    _fails(checks.check_adapter_gradients, tanh_only, "slope of tanh", "f_prime(adapter.act, z)", "f = gelu")


def test_general_gradients_report_a_stub_as_missing():
    _fails(checks.check_adapter_gradients, _stub, MISSING)


def test_a_shape_error_gets_the_shape_hint():
    def no_w_up(adapter, h, delta):  # fine when d = r, a shape error otherwise
        z, _ = parts(adapter, h, delta)
        return (delta * slope(adapter, z)).T @ h, delta.T @ adapter.act(z)

    cases = checks.GRADIENT_CASES
    try:
        checks.GRADIENT_CASES = cases[1:]  # start with a non-square case
        _fails(checks.check_adapter_gradients, no_w_up, "raised RuntimeError", "through the up-projection")
    finally:
        checks.GRADIENT_CASES = cases


# --------------------------------------------------------------------------------------------------
# check_zero_up_gradients: the step-zero special case
# --------------------------------------------------------------------------------------------------


def right_gradients(adapter, h, delta):
    z = adapter.act(h @ adapter.down.weight.T + adapter.down.bias)
    return torch.zeros(adapter.bottleneck, adapter.d_model), delta.T @ z


def test_gradients_accept_the_closed_form(capsys):
    checks.check_zero_up_gradients(right_gradients)
    assert "∂L/∂W_down = 0 exactly" in capsys.readouterr().out


def test_zero_up_gradients_right_only_while_r_exceeds_one_are_shown_the_smallest_drawn_adapter():
    def squeezed(adapter, h, delta):  # the bottleneck's last axis squeezed: a vector at r = 1, which no fixed case has
        z = adapter.act(h @ adapter.down.weight.T + adapter.down.bias).squeeze(-1)
        return torch.zeros(adapter.bottleneck, adapter.d_model), delta.T @ z

    assert all(r > 1 for _, r, _ in checks.ZERO_UP_CASES)
    _fails(checks.check_zero_up_gradients, squeezed, "Right on the 4 fixed cases", "r = 1", "drawn zero-up adapters")


def test_the_general_formula_passes_the_special_case(capsys):
    checks.check_zero_up_gradients(right_general)
    assert capsys.readouterr().out.startswith("✔ At W_up = 0")


def test_gradients_name_the_mistake():
    def transposed(adapter, h, delta):
        down, up = right_gradients(adapter, h, delta)
        return down, up.T

    def no_nonlinearity(adapter, h, delta):
        return torch.zeros(adapter.bottleneck, adapter.d_model), delta.T @ adapter.down(h)

    def no_bias(adapter, h, delta):
        return torch.zeros(adapter.bottleneck, adapter.d_model), delta.T @ adapter.act(h @ adapter.down.weight.T)

    def averaged(adapter, h, delta):
        down, up = right_gradients(adapter, h, delta)
        return down, up / h.shape[0]

    def down_not_zero(adapter, h, delta):
        down, up = right_gradients(adapter, h, delta)
        return down + 1e-3, up

    _fails(checks.check_zero_up_gradients, transposed, "transposed")
    _fails(checks.check_zero_up_gradients, no_nonlinearity, "left out the nonlinearity")
    _fails(checks.check_zero_up_gradients, no_bias, "left out b_down")
    _fails(checks.check_zero_up_gradients, averaged, "averaged over the tokens")
    _fails(checks.check_zero_up_gradients, down_not_zero, "∂L/∂W_down is not zero")
    _fails(checks.check_zero_up_gradients, lambda a, h, d: right_gradients(a, h, d)[1], "must return two tensors")


def test_gradients_report_a_stub_as_missing():
    _fails(checks.check_zero_up_gradients, _stub, MISSING)


# --------------------------------------------------------------------------------------------------
# check_fold
# --------------------------------------------------------------------------------------------------


def _folded(dense, weight, bias):
    layer = nn.Linear(dense.in_features, dense.out_features)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
    return layer


def right_fold(dense, adapter):
    """The fold written out (the check refuses the package's): W' = (I + W_up W_down) W and
    b' = (I + W_up W_down) b + W_up b_down + b_up."""
    m = torch.eye(adapter.d_model) + adapter.up.weight @ adapter.down.weight
    return _folded(dense, m @ dense.weight, m @ dense.bias + adapter.up.weight @ adapter.down.bias + adapter.up.bias)


def test_the_written_out_fold_is_the_package_s():
    dense, adapter, x = checks._fold_cases()[0]
    assert torch.allclose(right_fold(dense, adapter)(x), fold_linear_adapter(dense, adapter)(x), atol=1e-6)


def test_fold_names_the_mistake():
    def matrices(adapter):
        return adapter.up.weight @ adapter.down.weight, adapter.up.weight @ adapter.down.bias + adapter.up.bias

    def no_identity(dense, adapter):
        m, c = matrices(adapter)
        return _folded(dense, m @ dense.weight, m @ dense.bias + c)

    def bias_untouched(dense, adapter):
        m, c = matrices(adapter)
        return _folded(dense, dense.weight + m @ dense.weight, dense.bias + c)

    def wrong_order(dense, adapter):
        m, c = matrices(adapter)
        eye = torch.eye(adapter.d_model)
        return _folded(dense, dense.weight @ (eye + m), dense.bias + c)

    def in_place(dense, adapter):
        folded = right_fold(dense, adapter)
        with torch.no_grad():
            dense.weight.copy_(folded.weight)
        return folded

    def no_identity_in_the_weight_only(dense, adapter):
        m, c = matrices(adapter)
        eye = torch.eye(adapter.d_model)
        return _folded(dense, m @ dense.weight, (eye + m) @ dense.bias + c)

    def with_bias(bias_of):
        def fold(dense, adapter):
            m, c = matrices(adapter)
            eye = torch.eye(adapter.d_model)
            return _folded(dense, (eye + m) @ dense.weight, bias_of(dense, adapter, eye + m))
        return fold

    up, down = (lambda a: a.up), (lambda a: a.down)
    bias_mistakes = {
        "leaves out the adapter's own biases": lambda d, a, m: m @ d.bias,
        "passes through the adapter too": lambda d, a, m: d.bias + up(a).weight @ down(a).bias + up(a).bias,
        "leaves out b_up": lambda d, a, m: m @ d.bias + up(a).weight @ down(a).bias,
        "leaves out b_down's contribution": lambda d, a, m: m @ d.bias + up(a).bias,
        "collect every term that does not multiply x": lambda d, a, m: m @ d.bias + 2 * up(a).bias,
    }
    _fails(checks.check_fold, no_identity, "dropped the identity")
    _fails(checks.check_fold, no_identity_in_the_weight_only, "dropped the identity")
    _fails(checks.check_fold, bias_untouched, "weight is right but the bias is not")
    for named, bias_of in bias_mistakes.items():
        message = _fails(checks.check_fold, with_bias(bias_of), "weight is right but the bias is not", named)
        assert "W_up·b_down" not in message and "b' =" not in message, "the check names the piece, not the formula"
    _fails(checks.check_fold, wrong_order, "multiplies W from the left")
    _fails(checks.check_fold, in_place, "in place")
    _fails(checks.check_fold, lambda dense, adapter: nn.Sequential(dense, adapter), "must return one nn.Linear")


def test_fold_names_dtype_bias_and_size_mistakes():
    def in_float64(dense, adapter):
        m = torch.eye(adapter.d_model, dtype=torch.float64) + adapter.up.weight.double() @ adapter.down.weight.double()
        folded = nn.Linear(dense.in_features, dense.out_features, dtype=torch.float64)
        with torch.no_grad():
            folded.weight.copy_(m @ dense.weight.double())
            folded.bias.copy_(m @ dense.bias.double() + (adapter.up.weight @ adapter.down.bias + adapter.up.bias).double())
        return folded

    def in_float16(dense, adapter):
        return right_fold(dense, adapter).half()

    def without_bias(dense, adapter):
        right = right_fold(dense, adapter)
        folded = nn.Linear(dense.in_features, dense.out_features, bias=False)
        with torch.no_grad():
            folded.weight.copy_(right.weight)
        return folded

    def small_identity(dense, adapter):  # the identity written for the first case's width
        m = torch.eye(16) + adapter.up.weight @ adapter.down.weight
        return _folded(dense, m @ dense.weight, m @ dense.bias + adapter.up.weight @ adapter.down.bias + adapter.up.bias)

    _fails(checks.check_fold, in_float64, "torch.float64", "dtype")
    message = _fails(checks.check_fold, in_float16, "torch.float16", "dtype")
    assert "from the left" not in message
    _fails(checks.check_fold, without_bias, "no bias")
    _fails(checks.check_fold, small_identity, "raised RuntimeError")
    _fails(checks.check_parallel_fold, lambda p, a, s: right_parallel(p, a, s).double(), "torch.float64")
    _fails(checks.check_parallel_fold, lambda p, a, s: nn.Linear(p.in_features, p.out_features, bias=False), "no bias")

    def parallel_fixed_identity(p, a, s):  # an identity of the small case's width, added then taken away again
        return _folded(p, p.weight + torch.eye(12) - torch.eye(12) + s * a.up.weight @ a.down.weight,
                       p.bias + s * (a.up.weight @ a.down.bias + a.up.bias))

    _fails(checks.check_parallel_fold, parallel_fixed_identity, "raised RuntimeError")


def test_fold_names_writing_into_the_pair_and_a_missing_no_grad():
    def copy_with_autograd_on(dense, adapter):
        m = torch.eye(adapter.d_model) + adapter.up.weight @ adapter.down.weight
        folded = nn.Linear(dense.in_features, dense.out_features)
        folded.weight.copy_(m @ dense.weight)
        folded.bias.copy_(m @ dense.bias + adapter.up.weight @ adapter.down.bias + adapter.up.bias)
        return folded

    def scaling_the_adapter(p, a, s):  # right numbers, but s is multiplied into the adapter's own weights
        with torch.no_grad():
            a.up.weight.mul_(s)
            a.up.bias.mul_(s)
        return right_parallel(p, a, 1.0)

    message = _fails(checks.check_fold, copy_with_autograd_on, "torch.no_grad()")
    assert "from the left" not in message
    message = _fails(checks.check_parallel_fold, scaling_the_adapter, "changed the adapter in place")
    assert "forgot the scale" not in message


def test_fold_reports_a_stub_as_missing():
    _fails(checks.check_fold, _stub, MISSING)


# --------------------------------------------------------------------------------------------------
# check_parallel_fold
# --------------------------------------------------------------------------------------------------


def right_parallel(projection, adapter, scale, identity=0.0, scale_bias=True, transpose=False):
    update = adapter.up.weight @ adapter.down.weight
    update = update.T if transpose else update
    offset = adapter.up.weight @ adapter.down.bias + adapter.up.bias
    eye = torch.eye(projection.in_features)
    return _folded(projection, projection.weight + identity * eye + scale * update,
                   projection.bias + (scale if scale_bias else 1.0) * offset)


def test_parallel_fold_accepts_the_right_fold(capsys):
    checks.check_parallel_fold(right_parallel)
    assert capsys.readouterr().out.startswith("✔ Your parallel fold is exact")


def test_parallel_fold_names_the_mistake():
    def scale_forgotten(p, a, s):
        return right_parallel(p, a, 1.0)

    def serial(p, a, s):
        m = torch.eye(p.out_features) + s * a.up.weight @ a.down.weight
        return _folded(p, m @ p.weight, m @ p.bias + s * (a.up.weight @ a.down.bias + a.up.bias))

    def bias_forgotten(p, a, s):
        folded = right_parallel(p, a, s)
        with torch.no_grad():
            folded.bias.copy_(p.bias)
        return folded

    def b_down_forgotten(p, a, s):
        folded = right_parallel(p, a, s)
        with torch.no_grad():
            folded.bias.copy_(p.bias + s * a.up.bias)
        return folded

    check = checks.check_parallel_fold
    _fails(check, scale_forgotten, "forgot the scale")
    _fails(check, lambda p, a, s: right_parallel(p, a, s, identity=1.0), "added an identity")
    _fails(check, lambda p, a, s: right_parallel(p, a, s, transpose=True), "transposed")
    _fails(check, serial, "serial adapter")
    _fails(check, lambda p, a, s: right_fold(p, a), "serial adapter")  # the serial fold, unscaled, as written for lab 3
    _fails(check, bias_forgotten, "forgot the adapter's bias terms")
    _fails(check, b_down_forgotten, "misses W_up·b_down")
    _fails(check, lambda p, a, s: right_parallel(p, a, s, scale_bias=False), "bias term is not scaled")
    _fails(check, lambda p, a, s: nn.Sequential(p), "must return one nn.Linear")


def test_a_fold_right_only_on_the_fixed_sizes_is_shown_its_smallest_drawn_layer():
    def squeezed(dense, adapter):  # fine while r > 1; at r = 1 the squeezed matrices are vectors, or scalars
        up, down = adapter.up.weight.squeeze(), adapter.down.weight.squeeze()
        m = torch.eye(adapter.d_model) + up @ down
        return _folded(dense, m @ dense.weight, m @ dense.bias + adapter.up.weight @ adapter.down.bias + adapter.up.bias)

    def sized(dense, adapter):  # a size written in: the identity only where d_out is one of the fixed cases'
        m = adapter.up.weight @ adapter.down.weight
        if dense.out_features in (16, 768):
            m = m + torch.eye(adapter.d_model)
        return _folded(dense, m @ dense.weight, m @ dense.bias + adapter.up.weight @ adapter.down.bias + adapter.up.bias)

    _fails(checks.check_fold, squeezed, "Right on the 3 fixed cases", "smallest of 40 drawn layers", "r = 1",
           "raised RuntimeError")
    message = _fails(checks.check_fold, sized, "Right on the 3 fixed cases", "dense 1 → 1, r = 1", "dropped the identity")
    assert "size written in" in message


def test_a_parallel_fold_that_needs_a_positive_scale_is_shown_its_smallest_drawn_case():
    def split_scale(p, a, s):  # √s on each projection: s·W_up W_down, right for every s ≥ 0
        root = math.sqrt(s)
        up, down = root * a.up.weight, root * a.down.weight
        return _folded(p, p.weight + up @ down, p.bias + root * up @ a.down.bias + s * a.up.bias)

    def unsigned_scale(p, a, s):
        return right_parallel(p, a, abs(s))

    _fails(checks.check_parallel_fold, split_scale, "Right on the 2 fixed cases", "s = -0.25", "math domain error",
           "square root")
    _fails(checks.check_parallel_fold, unsigned_scale, "Right on the 2 fixed cases", "s = -0.25")


def test_parallel_fold_reports_a_stub_as_missing():
    _fails(checks.check_parallel_fold, _stub, MISSING)


# --------------------------------------------------------------------------------------------------
# check_trained_count
# --------------------------------------------------------------------------------------------------


def right_count(d, n_layers, r, placement, train_layernorm, num_labels, **mistake):
    """The closed form (the pretrained pooler stays frozen), with one part changed on request."""
    k = mistake.get("per_layer", 2 if placement == "houlsby" else 1)
    adapter = 2 * r * d + (0 if mistake.get("no_adapter_bias") else r + d)
    norms = (2 * n_layers + mistake.get("extra_norms", 1)) * 2 * d if mistake.get("norms", train_layernorm) else 0
    pooler = d * d + d if mistake.get("pooler") else 0
    classifier = 0 if mistake.get("no_classifier") else d * num_labels + (
        0 if mistake.get("no_classifier_bias") else num_labels)
    return n_layers * k * adapter + norms + pooler + classifier


def test_trained_count_accepts_the_closed_form(capsys):
    checks.check_trained_count(right_count)
    out = capsys.readouterr().out
    assert out.startswith("✔ Your count matches a real model")


def test_trained_count_matches_the_package_counts():
    """The reference agrees with counting.bert_counts, the package's closed form, on BERT-base Houlsby:
    adapters 2,379,264 + LayerNorms 25·2·768 + classifier 768·2 + 2, the pooler frozen."""
    expected = bert_counts(backbone_config("bert-base"), "houlsby", 64)["total_trainable"]
    assert checks._counted_model(768, 12, 64, "houlsby", True, 2) == expected == 2_379_264 + 38_400 + 1_538


def test_trained_count_names_the_mistake():
    check = checks.check_trained_count
    _fails(check, lambda *a: right_count(*a, norms=False), "left out the LayerNorms")
    _fails(check, lambda *a: right_count(*a, extra_norms=0), "after the embeddings")
    _fails(check, lambda *a: right_count(*a, per_layer=2), "pfeiffer puts 1 adapter in every layer")
    _fails(check, lambda *a: right_count(*a, no_adapter_bias=True), "adapters' biases")
    _fails(check, lambda *a: right_count(*a, pooler=True), "counted the pooler, but the pooler stays frozen",
           "adapters, LayerNorms and the classifier only")
    _fails(check, lambda *a: right_count(*a) + a[0] ** 2, "counted the pooler's weight", "stays frozen")
    _fails(check, lambda *a: right_count(*a, pooler=True, no_classifier=True), "pooler instead of the classifier")
    _fails(check, lambda *a: right_count(*a, no_classifier=True), "left out the classifier")
    _fails(check, lambda *a: right_count(*a, no_classifier_bias=True), "classifier's bias")
    _fails(check, lambda *a: right_count(*a, norms=True), "with train_layernorm=False they stay frozen")
    _fails(check, lambda *a: float(right_count(*a)), "a float")


def test_trained_count_names_a_mistake_only_where_the_answer_makes_it_on_every_case():
    """An answer whose first count is what counting the pooler gives, and which counts right everywhere else, did not
    count the pooler: it is shown the numbers and the parts, not told "you counted the pooler"."""
    calls = []

    def pooler_once(*case):
        calls.append(case)
        return right_count(*case, pooler=len(calls) == 1)

    message = _fails(checks.check_trained_count, pooler_once, "off by +1,049,600",
                     "No single mistake we know gives your counts on every case", "1 adapter in each of its 24 layers")
    assert "counted the pooler" not in message
    parts = (24 * (2 * 64 * 1024 + 64 + 1024), (2 * 24 + 1) * 2 * 1024, 1024 * 3 + 3)  # the answer, part by part
    assert not any(f"{part:,}" in message for part in parts), "the parts are named, their counts are the answer"


@pytest.mark.parametrize("placement", ["houlsby", "pfeiffer", "parallel"])
@pytest.mark.parametrize("train_layernorm", [True, False])
def test_trained_count_checks_every_placement_with_both_layernorm_choices(placement, train_layernorm):
    def wrong_for_one_pair(d, n_layers, r, p, t, num_labels):  # e.g. a branch written for this pair only
        return right_count(d, n_layers, r, p, t, num_labels) + 2 * d * ((p, t) == (placement, train_layernorm))

    message = _fails(checks.check_trained_count, wrong_for_one_pair, f"placement={placement!r}",
                     f"train_layernorm={train_layernorm}", "off by +", "in each of its", "and the classifier")
    assert ("every LayerNorm of the backbone" in message) == train_layernorm


def test_trained_count_names_numbers_written_in_for_one_model():
    check = checks.check_trained_count

    def two_labels(d, n_layers, r, placement, train_layernorm, num_labels):
        return right_count(d, n_layers, r, placement, train_layernorm, 2)

    def base_width(d, n_layers, r, placement, train_layernorm, num_labels):
        return right_count(768, n_layers, r, placement, False, num_labels) - (768 * num_labels) + d * num_labels + (
            (2 * n_layers + 1) * 2 * d if train_layernorm else 0)

    def twelve_layers(d, n_layers, r, placement, train_layernorm, num_labels):
        return right_count(d, 12, r, placement, train_layernorm, num_labels)

    def as_tensor(*args):
        return torch.tensor(right_count(*args))

    _fails(check, two_labels, "classifier for 2 labels", "num_labels")
    _fails(check, base_width, "d = 768", "use the d you are given")
    _fails(check, twelve_layers, "12 layers", "use n_layers")
    _fails(check, as_tensor, "must return a number")


def test_trained_count_catches_on_drawn_models_a_count_right_only_for_the_fixed_cases():
    """Answers right on every fixed case that the catalogue's cases cannot tell apart from the closed form: a table
    of the fixed cases' counts, and a branch for a width under 32 that no fixed model has. Each is shown the
    smallest drawn model it gets wrong (hypothesis shrinks it), never a catalogue mistake's name."""
    fixed = {case: right_count(*case) for case in checks.TRAINED_COUNT_CASES}

    def looked_up(*case):
        return fixed.get(case, right_count(*case) + 1)

    def small_width(d, *rest):
        return right_count(d, *rest) + (d < 32) * d

    for answer, drawn in ((looked_up, "d=1, n_layers=1, r=1"), (small_width, "d=1, n_layers=1, r=1")):
        message = _fails(checks.check_trained_count, answer, drawn, "the smallest of", "drawn models",
                         "No single mistake we know")
        assert not any(text in message for _, _, text in checks._count_mistakes(1, 1, 1, "houlsby", True, 1))


def test_the_closed_form_the_count_check_draws_with_is_a_real_model_s_count():
    from hypothesis import given, settings

    @settings(max_examples=60, derandomize=True, database=None, deadline=None)
    @given(checks._drawn_count_cases())
    def agrees(case):
        assert checks._closed_form(*case) == checks._counted_model(*case)

    agrees()


def test_trained_count_accepts_right_counts_written_other_ways_on_every_drawn_model(capsys):
    def module_by_module(d, n_layers, r, placement, train_layernorm, num_labels):
        per_layer = {"houlsby": 2}.get(placement, 1) * ((d * r + r) + (r * d + d))
        norms = (1 + 2 * n_layers) * (d + d) if train_layernorm else 0
        return sum(per_layer for _ in range(n_layers)) + norms + (d + 1) * num_labels

    checks.check_trained_count(module_by_module)
    assert f"on {checks.DRAWN_COUNT_EXAMPLES} drawn models" in capsys.readouterr().out


def test_trained_count_reports_a_stub_as_missing():
    _fails(checks.check_trained_count, _stub, MISSING)


# --------------------------------------------------------------------------------------------------
# check_trained_names
# --------------------------------------------------------------------------------------------------


def right_names(names, placement, train_layernorm, positions=None, embeddings_norm=True, attention_norm=True,
                pooler=False, classifier=True):
    """The trained names (the pretrained pooler stays frozen), with one part changed on request."""
    trained = {n for n in names if (classifier and n.startswith("classifier.")) or (pooler and n.startswith("bert.pooler."))}
    if train_layernorm:
        trained |= {
            n for n in names
            if ".LayerNorm." in n
            and (embeddings_norm or not n.startswith("bert.embeddings."))
            and (attention_norm or ".attention." not in n)
        }
    if positions is None:
        positions = ("attention.output", "output") if placement == "houlsby" else ("output",)
    layers = {n.split(".")[3] for n in names if n.startswith("bert.encoder.layer.")}
    for i in layers:
        for position in positions:
            for part in ("down.weight", "down.bias", "up.weight", "up.bias"):
                trained.add(f"bert.encoder.layer.{i}.{position}.adapter.{part}")
    return trained


def test_trained_names_accept_the_right_sets(capsys):
    checks.check_trained_names(right_names)
    assert capsys.readouterr().out.startswith("✔ Your sets match requires_grad")


def test_trained_names_name_the_mistake():
    check = checks.check_trained_names
    _fails(check, lambda n, p, t: right_names(n, p, t, embeddings_norm=False), "forgot the embeddings LayerNorm")
    _fails(check, lambda n, p, t: right_names(n, p, t, attention_norm=False), "forgot the attention LayerNorms")
    _fails(check, lambda n, p, t: right_names(n, p, t, pooler=True), "included the pooler, but the pooler stays frozen",
           "adapters, LayerNorms and the classifier only")
    _fails(check, lambda n, p, t: right_names(n, p, t, pooler=True, classifier=False), "pooler instead of the classifier")
    _fails(check, lambda n, p, t: right_names(n, p, t, classifier=False), "left out the classifier:")
    _fails(check, lambda n, p, t: right_names(n, p, t) - {"classifier.bias"}, "left out the classifier's bias")
    _fails(check, lambda n, p, t: right_names(n, "houlsby", t), "wrong position", "pfeiffer")
    _fails(check, lambda n, p, t: right_names(n, p, t, positions=("output",)), "wrong position", "houlsby")
    _fails(check, lambda n, p, t: right_names(n, p, True), "train_layernorm=False every LayerNorm stays frozen")
    embeddings_always = lambda n, p, t: right_names(n, p, t) | {"bert.embeddings.LayerNorm.weight", "bert.embeddings.LayerNorm.bias"}
    _fails(check, embeddings_always, "included the embeddings LayerNorm")
    _fails(check, lambda n, p, t: right_names(n, p, t, positions=("intermediate",)), "not parameters of the model")
    _fails(check, lambda n, p, t: right_names(n, p, t) | {"bert.encoder.layer.0.output.dense.weight"}, "frozen backbone")
    _fails(check, lambda n, p, t: ",".join(right_names(n, p, t)), "return a set")


def single_digit_layers(names, placement, train_layernorm):
    """Finds the output modules with a one-digit layer pattern: right on a 2-layer BERT, blind to layers 10 and 11."""
    import re

    trained = right_names(names, placement, train_layernorm)
    return {n for n in trained if ".adapter." not in n or re.match(r"bert\.encoder\.layer\.\d\.", n)}


def layer_from_one_character(names, placement, train_layernorm):
    """Reads the layer number as the character after 'layer.': layer 10 becomes layer 1."""
    trained = {n for n in right_names(names, placement, train_layernorm) if ".adapter." not in n}
    for n in names:
        if n.startswith("bert.encoder.layer.") and n.endswith(".output.dense.weight"):
            module = n.removesuffix(".dense.weight")
            module = module[:19] + module[19] + module[module.index(".", 19):]
            if placement == "houlsby" or not module.endswith("attention.output"):
                trained |= {f"{module}.adapter.{p}.{k}" for p in ("down", "up") for k in ("weight", "bias")}
    return trained


def two_layers_assumed(names, placement, train_layernorm):
    kept = [n for n in names if not n.startswith("bert.encoder.layer.") or n.split(".")[3] in ("0", "1")]
    return right_names(kept, placement, train_layernorm) | {n for n in names if ".LayerNorm." in n and train_layernorm}


def twelve_layers_written_in(names, placement, train_layernorm):
    """Builds the adapters' names for layers 0..11 whatever the model."""
    trained = {n for n in right_names(names, placement, train_layernorm) if ".adapter." not in n}
    positions = ("attention.output", "output") if placement == "houlsby" else ("output",)
    return trained | {f"bert.encoder.layer.{i}.{position}.adapter.{part}.{kind}" for i in range(12)
                      for position in positions for part in ("down", "up") for kind in ("weight", "bias")}


def listed_per_position(names, placement, train_layernorm):
    """A list that adds the LayerNorms once per layer they are found in, and so holds some names twice."""
    listed = sorted(right_names(names, placement, train_layernorm))
    return listed + [n for n in listed if ".LayerNorm." in n]


def test_trained_names_name_a_depth_written_in_and_a_list_with_repeats():
    message = _fails(checks.check_trained_names, twelve_layers_written_in, "layers 2, 3", "assumed a number of layers")
    assert "wrong position" not in message
    _fails(checks.check_trained_names, listed_per_position, "2 times", "each name once")


def test_trained_names_are_checked_on_bert_base_s_twelve_layers():
    check = checks.check_trained_names
    _fails(check, single_digit_layers, "wrong for layers 10, 11", "two digits")
    _fails(check, layer_from_one_character, "layers 10, 11", "whole number")
    _fails(check, two_layers_assumed, "do not assume how many layers")
    _fails(check, lambda n, p, t: list(right_names(n, p, t)) + [0], "parameter names")


def up_to_twelve_layers(names, placement, train_layernorm):
    """Adds adapters to layers 0..11 of those the model has: right at 2 and 12 layers, not for BERT-large's 24."""
    return {n for n in right_names(names, placement, train_layernorm)
            if ".adapter." not in n or int(n.split(".")[3]) < 12}


def a_branch_for_odd_depths(names, placement, train_layernorm):
    """Right at the fixed depths (2 and 12); forgets the classifier when the model has an odd number of layers."""
    trained = right_names(names, placement, train_layernorm)
    depth = len({n.split(".")[3] for n in names if n.startswith("bert.encoder.layer.")})
    return trained if depth % 2 == 0 else {n for n in trained if not n.startswith("classifier.")}


def test_trained_names_draw_depths_and_show_the_shallowest_that_fails():
    message = _fails(checks.check_trained_names, up_to_twelve_layers, "Right on the 12 fixed cases",
                     "13 layers", "layers 12", "BERT-large has 24")
    assert "14 layers" not in message  # hypothesis shrank the depth to the first one the answer gets wrong
    _fails(checks.check_trained_names, a_branch_for_odd_depths, "1 layer,", "left out the classifier")


def test_trained_names_accept_a_list_without_repeats(capsys):
    checks.check_trained_names(lambda n, p, t: sorted(right_names(n, p, t)))
    assert "drawn depths up to 24" in capsys.readouterr().out


def test_trained_names_report_a_stub_as_missing():
    _fails(checks.check_trained_names, _stub, MISSING)


# --------------------------------------------------------------------------------------------------
# every check
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("check, answer", [
    (checks.check_adapter_class, RightAdapter),
    (checks.check_adapter_gradients, right_general),
    (checks.check_zero_up_gradients, right_gradients),
    (checks.check_fold, right_fold),
    (checks.check_parallel_fold, right_parallel),
    (checks.check_trained_count, right_count),
    (checks.check_trained_names, right_names),
], ids=lambda value: getattr(value, "__name__", ""))
def test_a_check_leaves_the_notebooks_random_state_alone(check, answer, capsys):
    """A lab's later cells draw from the global generator: running a check must not shift what they draw."""
    before = torch.get_rng_state()
    check(answer)
    assert torch.equal(torch.get_rng_state(), before)
    assert capsys.readouterr().out.startswith("✔")


def test_a_slope_taken_inside_vmap_is_refused_as_vmap_not_as_the_chain_rule():
    """vmap(grad(f)) may be autograd of f alone, but the check cannot read the values inside vmap: it refuses vmap
    by name, as the exercise text says, rather than calling it the chain rule."""
    from torch.func import grad, vmap

    def slope_by_vmap(adapter, h, delta):
        z = h @ adapter.down.weight.T + adapter.down.bias
        slope = vmap(vmap(grad(adapter.act)))(z)
        back = (delta @ adapter.up.weight) * slope
        return back.T @ h, delta.T @ adapter.act(z)

    for check in (checks.check_adapter_gradients, checks.check_zero_up_gradients):
        message = _fails(check, slope_by_vmap, "torch.func.vmap", "f_prime(adapter.act, z)")
        assert "chain rule" not in message
