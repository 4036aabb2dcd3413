"""Inference timing: the interleaving and pairing logic, with a fake clock (no timing assertions);
the table's two columns agree; FLOP counts against closed forms."""

from __future__ import annotations

import statistics

import pytest
import torch

from adapterlab.latency import (
    LatencyResult,
    forward_flops,
    training_flops,
    inference_overhead,
    inference_variants,
    overhead_table,
    time_interleaved,
)
from adapterlab.placement import adapted_outputs, adapter_config


class FakeClock:
    """A clock that only moves when a fake workload says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def workloads(clock: FakeClock, costs: dict, log: list, drift=lambda k: 1.0):
    """Functions that advance the clock by cost · drift(round) and log (name, round)."""

    def make(name):
        def run(k):
            log.append((name, k))
            clock.now += costs[name] * drift(k)

        return run

    return {name: make(name) for name in costs}


def test_each_round_runs_every_variant_once_on_the_same_input_after_untimed_warmup():
    clock, log = FakeClock(), []
    costs = {"backbone": 1.0, "a": 2.0, "b": 3.0}
    result = time_interleaved(workloads(clock, costs, log), rounds=7, warmup=2, clock=clock)
    warm, timed = log[:6], log[6:]
    assert sorted(warm) == sorted((name, k) for name in costs for k in range(2))
    assert len(timed) == 21
    for k in range(7):
        in_round = timed[3 * k : 3 * k + 3]
        assert sorted(name for name, _ in in_round) == sorted(costs)
        assert {index for _, index in in_round} == {k}
        assert [name for name, _ in in_round] == result.orders[k]
    for name, cost in costs.items():
        assert result.times[name] == pytest.approx([cost] * 7)


def test_the_order_changes_between_rounds_so_no_variant_is_always_first():
    clock, log = FakeClock(), []
    result = time_interleaved(workloads(clock, dict.fromkeys("pqrs", 1.0), log), rounds=40, clock=clock)
    firsts = {order[0] for order in result.orders}
    assert firsts == set("pqrs")
    again = time_interleaved(workloads(FakeClock(), dict.fromkeys("pqrs", 1.0), []), rounds=40, clock=FakeClock())
    assert again.orders == result.orders  # seeded


def test_paired_overhead_cancels_drift_that_unpaired_medians_do_not():
    # The machine gets 3x slower over the run; the variant is always exactly 10 % slower than the
    # reference in the same round.
    clock, log = FakeClock(), []
    drift = lambda k: 1.0 + 2.0 * k / 9  # noqa: E731
    result = time_interleaved(
        workloads(clock, {"backbone": 1.0, "adapter": 1.1}, log, drift), rounds=10, clock=clock
    )
    assert result.overhead_percent("adapter") == pytest.approx(10.0)
    assert result.overhead_percent("backbone") == pytest.approx(0.0)
    expected_median = statistics.median(1.1 * drift(k) for k in range(10))
    assert result.median_ms("adapter") == pytest.approx(1e3 * expected_median)


def test_overhead_is_the_median_of_per_round_ratios():
    result = LatencyResult({"backbone": [1.0, 2.0, 4.0], "x": [1.5, 2.0, 4.4]}, reference="backbone")
    # ratios − 1: 0.5, 0.0, 0.1 → median 0.1
    assert result.overhead_percent("x") == pytest.approx(10.0)
    rows = result.rows()
    assert [row["variant"] for row in rows] == ["backbone", "x"]
    assert rows[1]["median_ms"] == pytest.approx(2000.0)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(functions={}), "functions is empty"),
        (dict(functions={"a": lambda k: None}, rounds=0), "rounds"),
        (dict(functions={"a": lambda k: None}, warmup=-1), "warmup"),
        (dict(functions={"a": lambda k: None}, reference="b"), "reference"),
    ],
)
def test_bad_arguments_are_named(kwargs, words):
    with pytest.raises(ValueError, match=words):
        time_interleaved(**kwargs)


def test_variants_share_the_frozen_backbone_and_leave_the_model_alone(make_classifier, batch):
    model = make_classifier()
    reference = make_classifier()
    model.classifier.weight.requires_grad_(False)
    before = {name: p.requires_grad for name, p in model.named_parameters()}
    variants = inference_variants(model, bottleneck=4)
    assert list(variants) == ["backbone", "houlsby", "pfeiffer", "linear adapter, folded", "LoRA, merged"]
    assert variants["backbone"] is model
    assert adapter_config(model) is None
    assert {name: p.requires_grad for name, p in model.named_parameters()} == before
    for name, tensor in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    embeddings = model.bert.embeddings.word_embeddings.weight
    for variant in variants.values():
        assert variant.bert.embeddings.word_embeddings.weight is embeddings
        assert not variant.training
    assert len(adapted_outputs(variants["houlsby"])) == 2 * 3
    assert len(adapted_outputs(variants["pfeiffer"])) == 3
    for name in ("linear adapter, folded", "LoRA, merged"):
        variant = variants[name]
        assert type(variant) is type(model) and adapter_config(variant) is None
        assert {k: v.shape for k, v in variant.state_dict().items()} == {
            k: v.shape for k, v in model.state_dict().items()
        }
    lora_layer = variants["LoRA, merged"].bert.encoder.layer[0].attention.self
    base_layer = model.bert.encoder.layer[0].attention.self
    assert not torch.equal(lora_layer.query.weight, base_layer.query.weight)
    assert lora_layer.key.weight is base_layer.key.weight
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        outputs = {name: variant(**inputs).logits for name, variant in variants.items()}
    assert torch.allclose(outputs["houlsby"], outputs["backbone"], atol=1e-2)  # near-identity init


def test_inference_overhead_feeds_round_k_input_k_to_every_variant():
    seen, clock = [], FakeClock()

    class Recorder(torch.nn.Module):
        def __init__(self, name):
            super().__init__()
            self.name = name

        def forward(self, input_ids):
            seen.append((self.name, int(input_ids[0, 0]), torch.is_inference_mode_enabled()))
            clock.now += 1.0

    inputs = {"batch 1": [{"input_ids": torch.full((1, 3), i)} for i in range(3)]}
    variants = {"backbone": Recorder("backbone"), "x": Recorder("x")}
    results = inference_overhead(variants, inputs, rounds=5, warmup=0, clock=clock)
    assert len(results) == 1 and results[0].label == "batch 1"
    by_variant = {name: [i for n, i, _ in seen if n == name] for name in ("backbone", "x")}
    assert by_variant["backbone"] == by_variant["x"] == [0, 1, 2, 0, 1]
    assert all(flag for _, _, flag in seen)
    assert "batch 1" in overhead_table(results)


def test_inference_overhead_rejects_an_empty_setting():
    with pytest.raises(ValueError, match="batch 32"):
        inference_overhead({"backbone": torch.nn.Identity()}, {"batch 32": []})


def test_the_table_columns_agree_where_unpaired_medians_contradict_the_paired_overhead():
    """Load drifts between rounds: the variant is 10 % slower in three rounds of five, yet its own
    median (2.0) is below the reference's (3.0). The table shows the time the paired overhead implies."""
    result = LatencyResult({"backbone": [1.0, 3.0, 3.0, 3.0, 5.0], "x": [1.1, 3.3, 2.0, 2.0, 5.5]}, "backbone")
    assert result.median_ms("x") < result.median_ms("backbone")  # the contradiction an unpaired column shows
    assert result.overhead_percent("x") == pytest.approx(10.0)
    assert result.paired_ms("x") == pytest.approx(3300.0) and result.paired_ms("backbone") == pytest.approx(3000.0)
    line = overhead_table([result]).splitlines()[2].split()
    assert line[-2:] == ["3300.00", "+10.0%"]


def test_every_row_of_the_table_agrees_with_itself_on_random_times():
    generator = torch.Generator().manual_seed(0)
    times = {name: (0.5 + torch.rand(9, generator=generator)).tolist() for name in ("backbone", "a", "b")}
    result = LatencyResult(times, "backbone", label="batch 1")
    rows = result.rows()
    reference = next(row["paired_ms"] for row in rows if row["variant"] == "backbone")
    assert reference == pytest.approx(result.median_ms("backbone"), abs=1e-3)
    for row in rows:
        assert 100 * (row["paired_ms"] / reference - 1) == pytest.approx(row["overhead_percent"], abs=0.05)
        implied = statistics.median(t / r for t, r in zip(times[row["variant"]], times["backbone"]))
        assert row["paired_ms"] == pytest.approx(1e3 * statistics.median(times["backbone"]) * implied, abs=1e-3)


def test_forward_flops_match_the_closed_forms(make_classifier, batch):
    linear = torch.nn.Linear(12, 5)
    assert forward_flops(linear, {"input": torch.randn(3, 12)}) == 2 * 3 * 12 * 5
    model = make_classifier()
    variants = inference_variants(model, bottleneck=4)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    flops = {name: forward_flops(variant, inputs) for name, variant in variants.items()}
    config = model.config
    tokens, d, r = inputs["input_ids"].numel(), config.hidden_size, 4
    per_adapter = 2 * (2 * tokens * d * r)  # down and up projection, 2 FLOPs per multiply-add
    assert flops["houlsby"] - flops["backbone"] == 2 * config.num_hidden_layers * per_adapter
    assert flops["pfeiffer"] - flops["backbone"] == config.num_hidden_layers * per_adapter
    assert flops["linear adapter, folded"] == flops["LoRA, merged"] == flops["backbone"]


def test_a_backward_costs_two_products_per_trained_weight_and_one_per_frozen_one():
    linear = torch.nn.Linear(12, 5, bias=False)
    x = torch.randn(3, 12, requires_grad=True)
    for weight_trains, input_needs_grad, products in ((True, False, 1), (False, True, 1), (True, True, 2)):
        linear.weight.requires_grad_(weight_trains)
        x.requires_grad_(input_needs_grad)
        model = lambda labels: type("Out", (), {"loss": linear(x).sum()})  # noqa: E731
        forward, backward = training_flops(model, {"labels": None})
        assert (forward, backward) == (2 * 3 * 12 * 5, products * 2 * 3 * 12 * 5)


def test_adapters_save_the_weight_gradients_but_not_the_input_gradients(make_classifier, batch):
    from adapterlab.placement import apply_method

    full = apply_method(make_classifier(), "full")
    forward, backward = training_flops(full, batch)
    assert backward == 2 * forward  # every product: the input's gradient and the weight's
    adapted = apply_method(make_classifier(), "houlsby", bottleneck=4)
    forward, backward = training_flops(adapted, batch)
    assert forward <= backward < 1.2 * forward  # input gradients through every frozen layer, weights' skipped
    assert all(p.grad is None for p in adapted.parameters() if not p.requires_grad)
    lowest = [p for n, p in adapted.named_parameters() if "layer.0." in n and "adapter" in n]
    assert lowest and all(p.grad is not None and p.grad.abs().sum() > 0 for p in lowest)
