"""The measured PEFT map (lab 10) and the trade-off readings of stored runs, on the tiny-random backbone and toy data."""

from __future__ import annotations

import math
import statistics

import pytest
from scipy import stats
import torch

from adapterlab import peft_map, tradeoff
from adapterlab.backbones import TINY, load_backbone
from adapterlab.data import load_split, make_batches, tokenize
from adapterlab.experiments import SeedRow
from adapterlab.training import TrainConfig


pytestmark = pytest.mark.usefixtures("toy_data_only")


@pytest.fixture(scope="module")
def measured():
    """The map of five methods on the tiny backbone: 2 training steps, 2 timed rounds per batch size."""
    model, tokenizer, _ = load_backbone(TINY, seed=0)
    train_data = tokenize(load_split("sst2", "train", source="toy", max_examples=64), tokenizer)
    dev = tokenize(load_split("sst2", "dev", source="toy", max_examples=8), tokenizer)
    inputs = {f"batch {size}": [{k: v for k, v in b.items() if k != "labels"}
                                for b in make_batches(dev, size, "sequential")[:2]] for size in (1, 4)}
    wanted = ("head only", "BitFit", "LoRA r=8", "Houlsby r=8", "full fine-tuning")
    configs = {label: config for label, config in peft_map.map_configs(batch_size=16).items() if label in wanted}
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    rows = {row.label: row for row in peft_map.measure_map(model, train_data, inputs, configs, steps=2, rounds=2,
                                                          progress=False)}
    return model, before, rows


def test_the_backbone_is_left_as_it_was(measured):
    model, before, _ = measured
    after = model.state_dict()
    assert set(after) == set(before) and all(torch.equal(after[n], before[n]) for n in before)


def test_trained_counts_follow_the_closed_forms(measured):
    model, _, rows = measured
    d, layers, labels = model.config.hidden_size, model.config.num_hidden_layers, model.config.num_labels
    head = d * labels + labels
    assert rows["head only"].trained == head
    assert rows["LoRA r=8"].trained == layers * 2 * (8 * d + d * 8) + head  # A and B on query and value
    ln = 2 * d * (2 * layers + 1)  # two per layer and the embeddings' LayerNorm
    assert rows["Houlsby r=8"].trained == layers * 2 * (2 * 8 * d + 8 + d) + ln + head
    assert rows["full fine-tuning"].trained == sum(p.numel() for p in model.parameters())
    biases = sum(p.numel() for n, p in model.named_parameters()
                 if n.endswith(".bias") and not n.startswith(("classifier", "bert.pooler")))
    assert rows["BitFit"].trained == biases + head


def test_a_checkpoint_holds_four_bytes_per_trained_number_and_a_small_header(measured):
    _, _, rows = measured
    for row in rows.values():
        assert 4 * row.trained <= row.checkpoint_bytes <= 4 * row.trained + 20_000, row.label


def test_what_can_be_merged_and_what_shares_the_backbone(measured):
    _, _, rows = measured
    adapters, lora, full, bitfit = rows["Houlsby r=8"], rows["LoRA r=8"], rows["full fine-tuning"], rows["BitFit"]
    assert not adapters.mergeable and adapters.merged_overhead is None and adapters.merged_shares_backbone is None
    assert lora.mergeable and lora.merge_error is not None and lora.merge_error < 1e-5
    assert lora.shares_backbone and not lora.merged_shares_backbone  # merging writes the update into W
    assert adapters.shares_backbone and rows["head only"].shares_backbone and bitfit.shares_backbone
    assert not full.shares_backbone and full.mergeable and full.merged_overhead == full.overhead


def test_timings_and_speeds_are_measured(measured):
    _, _, rows = measured
    for row in rows.values():
        assert set(row.overhead) == {"batch 1", "batch 4"} and all(math.isfinite(v) for v in row.overhead.values())
        assert row.examples_per_second > 0
    table = peft_map.map_table(list(rows.values()))
    assert len(table.splitlines()) == len(rows) + 3 and "LoRA r=8" in table  # header, a row each, two notes


def test_architecture_tells_a_merged_lora_from_an_unmerged_one(make_classifier):
    from adapterlab.lora_model import add_lora, merge_lora

    plain = make_classifier()
    with_lora = add_lora(make_classifier(), rank=2)
    assert peft_map.architecture(with_lora) != peft_map.architecture(plain)
    assert peft_map.architecture(merge_lora(with_lora)) == peft_map.architecture(plain)


def _row(label, values, config=None):
    values = tuple(values)
    mean = statistics.mean(values) if values else math.nan
    return SeedRow(label=label, config=config or TrainConfig(progress=False), metric="accuracy", values=values,
                   seeds=tuple(range(len(values))), missing=(), diverged=0, mean=mean,
                   std=statistics.stdev(values) if len(values) > 1 else math.nan)


def test_the_knee_is_the_first_size_the_paired_interval_does_not_place_behind_the_best():
    values = {2: [0.80, 0.82, 0.78], 8: [0.871, 0.869, 0.872], 64: [0.870, 0.872, 0.871], 256: [0.865, 0.87, 0.86]}
    rows = [_row(r, v) for r, v in values.items()]  # every size ran seeds 0, 1, 2: compared pair by pair

    def interval(a, b):  # the paired 95 % interval of mean(a - b), from scipy directly
        result = stats.ttest_rel(a, b).confidence_interval(0.95)
        return result.low, result.high

    assert interval(values[2], values[64])[1] < 0   # r = 2 is behind the best (r = 64)
    assert -0.01 < interval(values[8], values[64])[0] < 0 < interval(values[8], values[64])[1] < 0.01  # r = 8 level
    row, line = tradeoff.knee(rows)
    assert row.label == 8 and line.startswith("the knee of r: 8")
    # a wide r = 2, whose interval against the best holds 0, leaves the knee undecided
    wide = [_row(2, [0.70, 0.86, 0.78]), *rows[1:]]
    assert interval([0.70, 0.86, 0.78], values[64])[1] > 0
    assert tradeoff.knee(wide) == (None, "the knee of r: undecided, the seeds cannot place 2 against 64")
    assert tradeoff.knee([_row(2, [0.8, 0.81]), _row(8, [0.9])])[0] is None  # one seed at r = 8: no knee


def test_trained_parameters_leaves_the_backbones_flags_alone(make_classifier):
    model = make_classifier()
    model.classifier.weight.requires_grad_(False)
    flags = [p.requires_grad for p in model.parameters()]
    count = tradeoff.trained_parameters(model, TrainConfig(method="head", progress=False))
    assert count == model.classifier.weight.numel() + model.classifier.bias.numel()
    assert [p.requires_grad for p in model.parameters()] == flags


def test_the_figure_draws_stored_points_with_their_spread():
    stored = tradeoff.Point("Houlsby", 1000, _row("Houlsby r=2", [0.8, 0.9]))
    missing = tradeoff.Point("Houlsby", 5000, _row("Houlsby r=8", []))
    figure = tradeoff.tradeoff_figure([stored, missing], "t", baseline=("majority", 0.5))
    means, seeds = figure.data
    assert list(means.x) == [1000] and means.error_y.array[0] == pytest.approx(statistics.stdev([0.8, 0.9]))
    assert sorted(seeds.y) == [0.8, 0.9]


def test_the_points_table_gives_each_points_mean_and_spread_or_says_it_is_missing():
    stored = tradeoff.Point("Houlsby", 1234, _row("Houlsby r=2", [0.8, 0.9, 0.85]))
    missing = tradeoff.Point("Houlsby", 5000, _row("Houlsby r=8", []))
    first, second = tradeoff.points_table([stored, missing]).splitlines()
    assert "1,234" in first and f"{statistics.mean([0.8, 0.9, 0.85]):.3f}" in first
    assert f"{statistics.stdev([0.8, 0.9, 0.85]):.3f}" in first and "n = 3" in first
    assert "Houlsby r=8" in second and "not stored yet" in second


def test_only_families_with_a_missing_run_are_reported(tmp_path):
    config = TrainConfig(progress=False)
    complete = tradeoff.Point("head only", 10, _row("head only", [0.7, 0.71, 0.72], config))
    lacking = SeedRow(label="LoRA r=8", config=config, metric="accuracy", values=(0.8,), seeds=(0,), missing=(1, 2),
                      diverged=0, mean=0.8, std=math.nan)
    report = tradeoff.missing_by_family("sst2", [complete, tradeoff.Point("LoRA", 20, lacking)], "all-MiniLM-L6-v2")
    assert report.startswith("LoRA: ") and "head only" not in report
    assert "seed 1, 2" in report and "python -m adapterlab sweep --task sst2" in report
    assert tradeoff.missing_by_family("sst2", [complete], "all-MiniLM-L6-v2") == ""
