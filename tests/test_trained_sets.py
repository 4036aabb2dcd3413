"""Lab 11's trained sets (trained_sets) and its measurements of one set (set_anatomy), against independent work.

The command that makes a set parses as a ``train`` command at the fair protocol's settings; missing sets are
named by their commands; ``open_set`` loads a set as the checkpoint loader does; ``measure`` agrees with
evaluations, ablations and fits redone here by hand; its record survives JSON; and ``anatomy_of`` reuses a
stored record only while it was made from the very adapters and rows it reads. Tiny backbone and toy data.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex

import numpy as np
import pytest
import torch

from adapterlab.cli import build_parser, config_from_args, main
from adapterlab.methods.checkpoints import load_adapter_set
from adapterlab.model.placement import (
    adapted_outputs,
    adapter_config,
    add_adapters,
    set_adapters_enabled,
)
from adapterlab.paths import PROJECT_ROOT
from adapterlab.runs.tuning import PROTOCOLS
from adapterlab.teaching.notebook import anatomy, set_anatomy, trained_sets
from adapterlab.training.backbones import TINY, load_backbone
from adapterlab.training.data import TOY_DIR, load_split, tokenize
from adapterlab.training.evaluation import eval_batches, evaluate


pytestmark = pytest.mark.usefixtures("toy_data_only")


def tiny_run(folder, task: str, seed: int, *extra) -> dict:
    """A real run folder made by the command line in seconds; its metrics.json."""
    assert main(["train", "--out", str(folder), "--task", task, "--seed", str(seed), "--backbone", TINY,
                 "--bottleneck", "8", "--batch-size", "16", "--max-train", "64", "--max-eval", "32",
                 "--no-progress", *extra]) == 0
    return json.loads((folder / "metrics.json").read_text())


def logits(model, data) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(**{k: v for k, v in b.items() if k != "labels"}).logits
                          for b in eval_batches(data, 32)])


def assert_same(a: set_anatomy.SetAnatomy, b: set_anatomy.SetAnatomy):
    for field in dataclasses.fields(set_anatomy.SetAnatomy):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, np.ndarray):
            assert isinstance(y, np.ndarray) and y.dtype == np.float64, field.name
            np.testing.assert_array_equal(x, y, err_msg=field.name)
        else:
            assert x == y and type(x) is type(y), field.name


# ------------------------------------------------------------------------------------- the commands


@pytest.mark.parametrize("task, seed", [("sst2", 0), ("cola", 2)])
def test_the_command_trains_at_the_fair_protocol(task, seed):
    command = trained_sets.train_command(task, seed)
    words = shlex.split(command)
    assert words[:4] == ["python", "-m", "adapterlab", "train"]
    assert words[4:] == trained_sets.train_arguments(task, seed)
    assert str(PROJECT_ROOT) not in command and not any(os.path.isabs(word) for word in words)
    args = build_parser().parse_args(words[3:])
    protocol = PROTOCOLS[task]
    assert args.command == "train" and args.task == task and args.method == "houlsby"
    assert (args.validation_rows, args.max_train, args.epochs, args.eval_every) == (
        protocol.validation_rows, protocol.max_train, protocol.epochs, protocol.eval_every)
    assert (args.batch_size, args.precision, args.train_pooler, args.bottleneck, args.seed) == (32, "fp32", True, 64, seed)
    assert (args.backbone, args.save_dtype, args.out) == ("all-MiniLM-L6-v2", "fp16", f"data/lab11/{task}-seed{seed}")
    # every other setting as the fair comparison's tuned runs have it, at the rate it selected
    assert config_from_args(args) == protocol.base(method="houlsby", bottleneck=64, seed=seed,
                                                   learning_rate=args.learning_rate)


def test_an_unknown_task_names_the_two_it_has():
    with pytest.raises(ValueError, match="sst2 and cola"):
        trained_sets.train_arguments("mrpc", 0)


def test_a_missing_set_is_named_by_the_command_that_makes_it(tmp_path):
    for task, seed in (("cola", 2), ("sst2", 0)):
        with pytest.raises(FileNotFoundError) as error:
            trained_sets.anatomy_of(task, seed, tmp_path, data_dir=TOY_DIR)
        assert trained_sets.train_command(task, seed, tmp_path) in str(error.value)
        assert shlex.split(trained_sets.train_command(task, seed, tmp_path))[-1] == str(tmp_path / f"{task}-seed{seed}")


# ------------------------------------------------------------------------------------ opening a set


def test_open_set_loads_the_set_as_the_checkpoint_loader_does(tmp_path):
    report = tiny_run(tmp_path / "sst2-seed0", "sst2", 0)
    opened = trained_sets.open_set("sst2", 0, tmp_path)
    assert not opened.model.training and (opened.task, opened.seed) == ("sst2", 0)
    assert opened.run == report and opened.dev_score == report["metrics"]["accuracy"]
    independent, tokenizer, _ = load_backbone(TINY, num_labels=2, seed=0)
    bare = logits(independent, tokenize(load_split("sst2", "dev", source="toy", max_examples=40), tokenizer))
    load_adapter_set(independent, tmp_path / "sst2-seed0")
    dev = tokenize(load_split("sst2", "dev", source="toy", max_examples=40), opened.tokenizer)
    assert torch.equal(logits(opened.model, dev), logits(independent.eval(), dev))
    assert not torch.equal(logits(opened.model, dev), bare)  # the set was loaded, not just the backbone


# ----------------------------------------------------------------------------------- measuring a set


@pytest.fixture
def measured():
    """A tiny model whose adapters training moved far from their init (noise of 0.5 on every matrix), with its
    classifier's bias centred on dev so that its CoLA predictions (and so its MCC) depend on the adapters;
    the backbone as loaded; toy CoLA dev and fit rows; and measure's result."""
    model, tokenizer, _ = load_backbone(TINY, num_labels=2, seed=0)
    pretrained = load_backbone(TINY, num_labels=2, seed=0)[0]
    torch.manual_seed(0)
    add_adapters(model, "houlsby", 8)
    with torch.no_grad():
        for _, _, output in adapted_outputs(model):
            for weight in (output.adapter.down.weight, output.adapter.up.weight):
                weight.add_(0.5 * torch.randn_like(weight))
    dev = tokenize(load_split("cola", "dev", source="toy", max_examples=80), tokenizer)
    fit = tokenize(load_split("cola", "train", source="toy", max_examples=100), tokenizer)
    assert fit.lengths.sum() >= 10 * (model.config.hidden_size + 1)  # enough tokens for every adapter's fit
    with torch.no_grad():
        margin = logits(model, dev) @ torch.tensor([-1.0, 1.0])
        model.classifier.bias[1] -= margin.median()
    before = logits(model, dev)
    at_init = set_anatomy.adapters_at_init(model, pretrained, seed=0)
    result = set_anatomy.measure(model, at_init, dev, fit, task="cola", seed=0)
    return model, pretrained, at_init, dev, fit, before, result


def test_measure_agrees_with_independent_evaluations(measured):
    model, _, _, dev, fit, before, m = measured
    assert (m.task, m.seed, m.metric, m.bottleneck) == ("cola", 0, "matthews", 8)
    assert m.dev_trained == pytest.approx(evaluate(model, dev)["matthews"], abs=1e-12)
    dropped = []
    for layer in range(2):
        set_adapters_enabled(model, False, layers=[layer])
        dropped.append(m.dev_trained - evaluate(model, dev)["matthews"])
        set_adapters_enabled(model, True)
    np.testing.assert_allclose(m.importance, dropped, atol=1e-12)
    assert np.abs(m.importance).max() > 0.01  # switching a layer off changes the score here
    seen = anatomy.adapter_inputs(model, eval_batches(dev, 16))
    np.testing.assert_allclose(m.change_trained, anatomy.relative_changes(model, seen), rtol=1e-5)
    seen, streams = anatomy.inputs_and_residuals(model, eval_batches(dev, 16))
    np.testing.assert_allclose(m.change_residual, anatomy.residual_changes(model, seen, streams), rtol=1e-5)
    folded = anatomy.linearise_and_fold(model, anatomy.adapter_inputs(model, eval_batches(fit, 16)))
    assert m.dev_linear == pytest.approx(evaluate(folded, dev)["matthews"], abs=1e-12)
    assert m.dev_linear != m.dev_trained  # the folded model is another model here
    assert all(output.enabled for _, _, output in adapted_outputs(model))
    assert torch.equal(logits(model, dev), before)


def test_adapters_at_init_are_the_set_at_step_zero(measured):
    model, pretrained, at_init, dev, _, _, m = measured
    with pytest.raises(ValueError, match="without adapters"):
        set_anatomy.adapters_at_init(model, model, seed=0)
    assert adapter_config(pretrained) is None  # the backbone passed in is left bare
    assert adapter_config(at_init) == adapter_config(model)
    seen = anatomy.adapter_inputs(at_init, eval_batches(dev, 16))
    np.testing.assert_allclose(m.change_init, anatomy.relative_changes(at_init, seen), rtol=1e-5)
    assert m.change_init.max() < m.change_trained.min() / 20


def test_a_record_survives_json(measured):
    m = measured[-1]
    assert_same(set_anatomy.from_record(json.loads(json.dumps(set_anatomy.as_record(m)))), m)


# -------------------------------------------------------------------------------------- stored measurements


def test_stored_measurements_are_reused_only_for_the_same_adapters_and_rows(tmp_path, monkeypatch):
    where = tmp_path / "cola-seed1"
    tiny_run(where, "cola", 1)
    real, calls = trained_sets.measure_set, []

    def counted(trained, data_dir=None):
        calls.append(trained)
        return real(trained, data_dir)

    def record():
        return json.loads((tmp_path / "anatomy" / "cola-seed1.json").read_text())

    monkeypatch.setattr(trained_sets, "measure_set", counted)
    first = trained_sets.anatomy_of("cola", 1, tmp_path, data_dir=TOY_DIR)
    stored = record()
    assert len(calls) == 1 and calls[0].seed == 1
    assert stored["adapters_sha256"] == hashlib.sha256((where / "adapters.safetensors").read_bytes()).hexdigest()
    assert_same(set_anatomy.from_record(stored["anatomy"]), first)
    assert sorted(p.name for p in where.iterdir()) == ["adapter_config.json", "adapters.safetensors", "metrics.json"]

    def refuse(*args, **kwargs):
        raise AssertionError("measured again although the stored record matches the adapters and rows")

    monkeypatch.setattr(trained_sets, "measure_set", refuse)
    assert_same(trained_sets.anatomy_of("cola", 1, tmp_path, data_dir=TOY_DIR), first)

    # other rows: a record measured on other data is not these measurements
    (tmp_path / "anatomy" / "cola-seed1.json").write_text(json.dumps({**stored, "data_sha256": "0" * 64}))
    monkeypatch.setattr(trained_sets, "measure_set", counted)
    trained_sets.anatomy_of("cola", 1, tmp_path, data_dir=TOY_DIR)
    assert len(calls) == 2 and record()["data_sha256"] == stored["data_sha256"]

    # a record written before a measurement was added lacks it: measured again, not read short
    shorter = {**stored, "anatomy": {k: v for k, v in stored["anatomy"].items() if k != "change_residual"}}
    (tmp_path / "anatomy" / "cola-seed1.json").write_text(json.dumps(shorter))
    trained_sets.anatomy_of("cola", 1, tmp_path, data_dir=TOY_DIR)
    assert len(calls) == 3 and "change_residual" in record()["anatomy"]

    # other adapters in the same folder: the set trained again over the old one
    tiny_run(where, "cola", 1, "--lr", "0.05", "--overwrite")
    again = trained_sets.anatomy_of("cola", 1, tmp_path, data_dir=TOY_DIR)
    assert len(calls) == 4
    assert not np.array_equal(again.change_trained, first.change_trained)
    assert record()["adapters_sha256"] == hashlib.sha256((where / "adapters.safetensors").read_bytes()).hexdigest()
    assert record()["adapters_sha256"] != stored["adapters_sha256"]


def test_a_re_measure_without_scores_agrees_with_the_stored_measure_and_a_changed_one_does_not(measured):
    model, _, at_init, dev, fit, _, stored = measured
    live = set_anatomy.measure(model, at_init, dev, fit, task="cola", seed=0, scores=False)
    assert np.isnan(live.dev_trained) and np.isnan(live.importance).all()
    assert set_anatomy.same_measurements(stored, live)
    moved = dataclasses.replace(live, change_trained=live.change_trained * (1 + 1e-3))
    assert not set_anatomy.same_measurements(stored, moved)
    ranked = dataclasses.replace(live, weight_ranks=live.weight_ranks + np.eye(*live.weight_ranks.shape))
    assert not set_anatomy.same_measurements(stored, ranked)
    against_x = dataclasses.replace(live, change_residual=live.change_residual * (1 + 1e-3))
    assert not set_anatomy.same_measurements(stored, against_x)


def test_the_residual_claims_read_every_seed_and_the_mean_of_the_seeds():
    """Two made-up seeds of a two-layer model: the spans run over both seeds, ‖h‖ / ‖x‖ is the ratio of the two
    changes, and the layers where the FFN's correction is larger are read on the mean of the seeds."""
    def one(seed, against_h, against_x):
        return set_anatomy.SetAnatomy(
            task="sst2", seed=seed, metric="accuracy", change_init=np.zeros((2, 2)),
            change_trained=np.array(against_h), change_residual=np.array(against_x), share_init=np.ones((2, 2)),
            share_trained=np.ones((2, 2)), weight_ranks=np.ones((2, 2)), bottleneck_ranks=np.ones((2, 2)),
            bottleneck=8, dev_trained=0.9, dev_linear=0.9, importance=np.zeros(2))

    seeds = [one(0, [[0.4, 0.05], [0.3, 0.1]], [[0.2, 0.1], [0.1, 0.3]]),
             one(1, [[0.2, 0.05], [0.3, 0.2]], [[0.1, 0.06], [0.16, 0.1]])]
    lines = set_anatomy.residual_claims(seeds, "sst2").splitlines()
    assert lines == [
        "SST-2, against x, the residual stream:",
        "  ‖h‖ / ‖x‖, every adapter of every seed: attention 0.33 to 0.53, FFN 0.50 to 3.00",
        "  ‖A(h) − h‖ / ‖x‖, every adapter of every seed: attention 0.100 to 0.200, FFN 0.060 to 0.300",
        "  mean over layers and seeds, against h: attention 0.300, FFN 0.100 (ratio 3.0)",
        "  mean over layers and seeds, against x: attention 0.140, FFN 0.140 (ratio 1.0)",
        "  against x, the attention adapter's correction larger than the FFN one's, every layer: False",
        "  against x, layers where the FFN adapter's is larger: [1]",
    ]


def test_the_lab_s_verdict_is_the_paired_comparison_of_the_seeds(measured):
    from adapterlab.runs.compare import compare

    one = measured[-1]
    seeds = [dataclasses.replace(one, seed=s, dev_trained=t, dev_linear=l)
             for s, t, l in ((2, 0.25, 0.214), (0, 0.205, 0.201), (1, 0.205, 0.237))]
    rows, verdict = set_anatomy.linear_against_trained(seeds, "cola")
    expected = compare([0.201, 0.237, 0.214], [0.205, 0.205, 0.25], 0.02, paired=True)
    assert (verdict.verdict, verdict.low, verdict.high) == (expected.verdict, expected.low, expected.high)
    assert verdict.paired and rows.splitlines()[1:] == ["  adapters as trained:   0.205 0.205 0.250",
                                                        "  linearised and folded: 0.201 0.237 0.214"]


# ------------------------------------------------------------------------------ a folder not as made


def _remade(error, task, seed, folder) -> bool:
    return f"{trained_sets.train_command(task, seed, folder)} --overwrite" in str(error.value)


def test_a_folder_holding_another_task_s_or_seed_s_set_is_refused_naming_both(tmp_path):
    tiny_run(tmp_path / "sst2-seed0", "cola", 0)  # a CoLA set where SST-2's belongs
    with pytest.raises(trained_sets.SetDamaged) as error:
        trained_sets.open_set("sst2", 0, tmp_path)
    assert "task 'cola', seed 0" in str(error.value) and _remade(error, "sst2", 0, tmp_path)
    tiny_run(tmp_path / "sst2-seed1", "sst2", 1)
    manifest = json.loads((tmp_path / "sst2-seed1" / "metrics.json").read_text())
    manifest["config"]["seed"] = 0  # seed 0's metrics beside seed 1's adapters
    (tmp_path / "sst2-seed1" / "metrics.json").write_text(json.dumps(manifest))
    with pytest.raises(trained_sets.SetDamaged, match="metrics.json task 'sst2', seed 0"):
        trained_sets.open_set("sst2", 1, tmp_path)


@pytest.mark.parametrize("damage", ["metrics.json", "adapter_config.json", "adapters.safetensors"])
def test_a_damaged_set_names_its_folder_and_the_command_that_makes_it_again(tmp_path, damage):
    tiny_run(tmp_path / "cola-seed2", "cola", 2)
    (tmp_path / "cola-seed2" / damage).write_text("{ not what train wrote")
    with pytest.raises(trained_sets.SetDamaged) as error:
        trained_sets.open_set("cola", 2, tmp_path)
    assert str(tmp_path / "cola-seed2") in str(error.value) and _remade(error, "cola", 2, tmp_path)


@pytest.mark.parametrize("record", ["{ cut short", '{"anatomy": 3}', "[]"])
def test_a_damaged_measurement_record_is_measured_again(tmp_path, monkeypatch, record):
    tiny_run(tmp_path / "cola-seed1", "cola", 1)
    first = trained_sets.anatomy_of("cola", 1, tmp_path, data_dir=TOY_DIR)
    stored = tmp_path / "anatomy" / "cola-seed1.json"
    stored.write_text(record)
    again = trained_sets.anatomy_of("cola", 1, tmp_path, data_dir=TOY_DIR)
    assert_same(again, first)
    assert json.loads(stored.read_text())["anatomy"], "the record is written again, whole"


@pytest.mark.parametrize("edit", ["a number changed", "a NaN pasted in", "the seal left out"])
def test_an_edited_measurement_record_is_measured_again(tmp_path, monkeypatch, edit):
    tiny_run(tmp_path / "cola-seed1", "cola", 1)
    first = trained_sets.anatomy_of("cola", 1, tmp_path, data_dir=TOY_DIR)
    stored = tmp_path / "anatomy" / "cola-seed1.json"
    record = json.loads(stored.read_text())
    if edit == "the seal left out":
        del record["anatomy_sha256"]
    else:  # well-formed JSON, made from these adapters and rows, every measurement present
        record["anatomy"]["dev_trained"] = 0.99 if edit == "a number changed" else float("nan")
    stored.write_text(json.dumps(record))
    calls = []
    monkeypatch.setattr(trained_sets, "measure_set", lambda *args, **kwargs: calls.append(args) or first)
    assert_same(trained_sets.anatomy_of("cola", 1, tmp_path, data_dir=TOY_DIR), first)
    assert len(calls) == 1, "an edited record is measured again, not shown as measured"
    assert json.loads(stored.read_text())["anatomy"]["dev_trained"] == first.dev_trained


def test_the_stored_records_of_lab_11_carry_the_seal_of_their_values():
    """The lab reads its six records instead of measuring for minutes only while each matches its seal."""
    records = sorted((trained_sets.LAB11_DIR / trained_sets.ANATOMY_DIR).glob("*.json"))
    assert len(records) == 6
    for path in records:
        record = json.loads(path.read_text())
        canonical = json.dumps(record["anatomy"], sort_keys=True).encode()
        assert record["anatomy_sha256"] == hashlib.sha256(canonical).hexdigest(), path.name
