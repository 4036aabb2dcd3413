"""Measurements on adapters, against closed forms and autograd."""

from __future__ import annotations

import math

import pytest
import torch

from adapterlab import probes
from adapterlab.adapter import BottleneckAdapter
from adapterlab.placement import adapter_config


def test_truncated_normal_variance_matches_torch_samples():
    torch.manual_seed(0)
    samples = torch.nn.init.trunc_normal_(torch.empty(2_000_000), std=1.0, a=-2.0, b=2.0)
    assert samples.var().item() == pytest.approx(probes.TRUNCATED_NORMAL_VARIANCE, abs=3e-3)
    assert probes.TRUNCATED_NORMAL_VARIANCE == pytest.approx(0.7737, abs=1e-4)


def test_relative_deviation_is_the_correction_norm_even_below_float32_resolution():
    torch.manual_seed(0)
    adapter = BottleneckAdapter(64, 8, init_scale=1e-6)
    h = torch.randn(10, 64)
    expected = (torch.linalg.norm(adapter.double().delta(h.double())) / torch.linalg.norm(h.double())).item()
    adapter.float()
    assert torch.equal(adapter(h), h)  # in float32 the adapter is exactly the identity here
    assert probes.relative_deviation(adapter, h) == pytest.approx(expected, rel=1e-6)
    assert probes.relative_deviation(adapter, h) > 0


@pytest.mark.parametrize("activation", ["gelu", "relu", "tanh", "identity"])
def test_predicted_deviation_matches_measurement_at_small_sigma(activation):
    h, _ = probes.probe_inputs(256, 768, seed=1)
    measured = [probes.relative_deviation(probes._houlsby_adapter(768, 64, 1e-4, activation, seed), h) for seed in range(4)]
    assert sum(measured) / 4 == pytest.approx(probes.predicted_deviation(1e-4, 768, 64, activation), rel=0.1)


def test_step_zero_gradients_of_zero_up_adapter():
    torch.manual_seed(0)
    adapter = BottleneckAdapter(16, 4, "gelu", init="zero_up")
    h, delta = probes.probe_inputs(5, 16, seed=2)
    grad_down, grad_up = probes.step_zero_gradients(adapter, h, delta)
    assert torch.count_nonzero(grad_down) == 0
    closed_form = delta.T @ torch.nn.functional.gelu(h @ adapter.down.weight.T + adapter.down.bias)
    torch.testing.assert_close(grad_up, closed_form)
    assert adapter.up.weight.grad is None  # the adapter itself is left untouched


def test_step_zero_gradients_agree_with_gradcheck_in_float64():
    torch.manual_seed(0)
    adapter = BottleneckAdapter(6, 2, "gelu", init="houlsby", init_scale=0.3).double()
    h, delta = (t.double() for t in probes.probe_inputs(3, 6, seed=4))

    def loss(w_down, w_up):
        z = torch.nn.functional.gelu(h @ w_down.T + adapter.down.bias)
        return ((h + z @ w_up.T + adapter.up.bias) * delta).sum()

    w = (adapter.down.weight.detach().clone().requires_grad_(), adapter.up.weight.detach().clone().requires_grad_())
    assert torch.autograd.gradcheck(loss, w)
    expected = torch.autograd.grad(loss(*w), w)
    for got, want in zip(probes.step_zero_gradients(adapter, h, delta), expected):
        torch.testing.assert_close(got, want)


def test_init_scale_sweep_scaling_laws():
    h, delta = probes.probe_inputs(16, 128, seed=0)
    sweep = probes.init_scale_sweep([1e-5, 1e-4], h, delta, bottleneck=8)
    assert sweep["init_scale"] == [1e-5, 1e-4]
    assert sweep["deviation"][1] / sweep["deviation"][0] == pytest.approx(100, rel=0.02)
    assert sweep["grad_up"][1] / sweep["grad_up"][0] == pytest.approx(10, rel=0.02)
    assert sweep["grad_down"][1] / sweep["grad_down"][0] == pytest.approx(10, rel=0.02)


def _batch(vocab=100):
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, vocab, (2, 6), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def test_model_deviation_sweep(make_classifier):
    model = make_classifier()
    batch = _batch()
    with torch.no_grad():
        before = model(**batch).logits
    sweep = probes.model_deviation_sweep(model, batch, [0.0, 1e-3, 1e-1], bottleneck=4)
    assert sweep["hidden_deviation"][0] == 0.0 and sweep["max_logit_change"][0] == 0.0  # σ = 0: exact identity
    assert 0 < sweep["hidden_deviation"][1] < sweep["hidden_deviation"][2]
    assert adapter_config(model) is None  # adapters removed again
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, before)
    with pytest.raises(ValueError, match="eval mode"):
        probes.model_deviation_sweep(model.train(), batch, [1e-3])


def test_median_seconds():
    calls = []
    assert probes.median_seconds(lambda: calls.append(1), repeats=3, warmup=2) >= 0
    assert len(calls) == 5
    with pytest.raises(ValueError, match="repeats"):
        probes.median_seconds(lambda: None, repeats=0)
    assert math.isfinite(probes.median_seconds(lambda: torch.ones(3).sum()))


@pytest.mark.parametrize("init_scale", [1e-6, 1e-2])
def test_first_adam_step_is_lr_times_gradient_over_gradient_plus_eps(make_classifier, init_scale):
    """Adam's first step, bias-corrected, is lr·g / (|g| + ε) for every weight: checked on a tiny model against
    that closed form, from the gradients autograd gives on a copy."""
    from adapterlab.placement import add_adapters

    no_dropout = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    model = add_adapters(make_classifier(**no_dropout), "houlsby", bottleneck=4, init_scale=init_scale)
    batch = {**_batch(), "labels": torch.tensor([0, 1])}
    copy_ = add_adapters(make_classifier(**no_dropout), "houlsby", bottleneck=4, init_scale=init_scale)
    copy_.load_state_dict(model.state_dict())
    copy_.train()
    copy_(**batch).loss.backward()
    adapters = [m for m in copy_.modules() if isinstance(m, BottleneckAdapter)]
    lr, eps = 1e-3, 1e-8
    step = probes.first_adam_step(model, batch, lr=lr, eps=eps)
    for name in ("down", "up"):
        g = torch.cat([getattr(a, name).weight.grad.abs().flatten() for a in adapters]).double()
        assert step[name]["median_gradient"] == pytest.approx(g.median().item(), rel=1e-5)
        assert step[name]["median_step_over_lr"] == pytest.approx((g / (g + eps)).median().item(), rel=1e-3)
    with pytest.raises(ValueError, match="no adapters"):
        probes.first_adam_step(make_classifier(), batch)
