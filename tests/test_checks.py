"""Each self-check accepts a right answer, reports a stub as missing, and names the mistake in a
plausible wrong answer."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from adapterlab import checks
from adapterlab.adapter import BottleneckAdapter
from adapterlab.counting import model_adapter_params
from adapterlab.lora import fold_linear_adapter

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


class StubAdapter(nn.Module):
    def __init__(self, d_model, bottleneck):
        super().__init__()
        raise NotImplementedError("write your solution here")


def test_adapter_class_accepts_right_answers(capsys):
    checks.check_adapter_class(RightAdapter)
    assert capsys.readouterr().out.startswith("✔ RightAdapter is right")
    # the package's own adapter passes too, with any of the usual nonlinearities
    for activation in ("gelu", "relu", "silu", "tanh"):
        checks.check_adapter_class(lambda d, r, a=activation: BottleneckAdapter(d, r, a))


def test_adapter_class_names_the_mistake():
    _fails(checks.check_adapter_class, NoResidual, "without adding h back: the residual is missing")
    _fails(checks.check_adapter_class, NoNonlinearity, "no nonlinearity")
    _fails(checks.check_adapter_class, NonlinearityAfterUp, "after the up-projection")
    _fails(checks.check_adapter_class, DefaultInit, "near the identity", "trunc_normal_")
    _fails(checks.check_adapter_class, NoBias, "without biases", "148")
    _fails(checks.check_adapter_class, Swapped, "`self.down` maps 4 → 16")


def test_adapter_class_reports_a_stub_as_missing():
    _fails(checks.check_adapter_class, StubAdapter, MISSING, "NotImplementedError")


# --------------------------------------------------------------------------------------------------
# check_zero_up_gradients
# --------------------------------------------------------------------------------------------------


def right_gradients(adapter, h, delta):
    z = adapter.act(h @ adapter.down.weight.T + adapter.down.bias)
    return torch.zeros(adapter.bottleneck, adapter.d_model), delta.T @ z


def test_gradients_accept_the_closed_form(capsys):
    checks.check_zero_up_gradients(right_gradients)
    assert "∂L/∂W_down = 0 exactly" in capsys.readouterr().out


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

    _fails(checks.check_zero_up_gradients, transposed, "Transpose it")
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


def test_fold_accepts_the_package_fold(capsys):
    checks.check_fold(fold_linear_adapter)
    assert "Your fold is exact" in capsys.readouterr().out


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
        folded = fold_linear_adapter(dense, adapter)
        with torch.no_grad():
            dense.weight.copy_(folded.weight)
        return folded

    _fails(checks.check_fold, no_identity, "dropped the identity")
    _fails(checks.check_fold, bias_untouched, "weight is right but the bias is not")
    _fails(checks.check_fold, wrong_order, "multiplies W from the left")
    _fails(checks.check_fold, in_place, "in place")
    _fails(checks.check_fold, lambda dense, adapter: nn.Sequential(dense, adapter), "must return one nn.Linear")


def test_fold_reports_a_stub_as_missing():
    _fails(checks.check_fold, _stub, MISSING)


# --------------------------------------------------------------------------------------------------
# check_param_count
# --------------------------------------------------------------------------------------------------


def test_param_count_accepts_the_closed_form(capsys):
    checks.check_param_count(lambda d, r, n_layers, per_layer: model_adapter_params(n_layers, per_layer, d, r))
    out = capsys.readouterr().out
    assert "2,379,264" in out and "6,343,680" in out  # the paper's and the seeds' numbers


def test_param_count_names_the_mistake():
    _fails(checks.check_param_count, lambda d, r, L, k: 2 * r * d * L * k, "left out the biases")
    _fails(checks.check_param_count, lambda d, r, L, k: (2 * r * d + d) * L * k, "b_up but not b_down")
    _fails(checks.check_param_count, lambda d, r, L, k: (2 * r * d + r + d) * L, "adapters per layer")
    _fails(checks.check_param_count, lambda d, r, L, k: (2 * r * d + r + d) * L * k / 1, "a float")
    _fails(checks.check_param_count, lambda d, r, L, k: d * d * L * k, "n_layers · per_layer · (2rd + r + d)")


def test_param_count_reports_a_stub_as_missing():
    _fails(checks.check_param_count, _stub, MISSING)


# --------------------------------------------------------------------------------------------------
# check_placement_answer
# --------------------------------------------------------------------------------------------------


def right_trained(n_layers, d, r, placement, train_layernorm):
    k = 2 if placement == "houlsby" else 1
    return n_layers * k * (2 * r * d + r + d) + ((2 * n_layers + 1) * 2 * d if train_layernorm else 0)


def test_placement_accepts_the_right_count(capsys):
    checks.check_placement_answer(right_trained)
    assert "all three placements" in capsys.readouterr().out
    checks.check_placement_answer(right_trained, n_layers=3, d=32, r=4)


def test_placement_names_the_mistake():
    def always_two(n_layers, d, r, placement, train_layernorm):
        return right_trained(n_layers, d, r, "houlsby", train_layernorm)

    def no_embedding_norm(n_layers, d, r, placement, train_layernorm):
        return right_trained(n_layers, d, r, placement, train_layernorm) - (2 * d if train_layernorm else 0)

    def norms_always(n_layers, d, r, placement, train_layernorm):
        return right_trained(n_layers, d, r, placement, True)

    def norms_never(n_layers, d, r, placement, train_layernorm):
        return right_trained(n_layers, d, r, placement, False)

    _fails(checks.check_placement_answer, always_two, "pfeiffer puts 1 adapter in every layer")
    _fails(checks.check_placement_answer, no_embedding_norm, "the LayerNorm after the embeddings")
    _fails(checks.check_placement_answer, norms_always, "LayerNorms stay frozen")
    _fails(checks.check_placement_answer, norms_never, "trains every LayerNorm too")


def test_placement_reports_a_stub_as_missing():
    _fails(checks.check_placement_answer, _stub, MISSING)
