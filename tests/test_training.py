"""The training loop: schedule, learning, freezing, best state, determinism, Stop, divergence, CLI.

Everything runs on the 2-layer "tiny-random" backbone and the project's toy data in a few seconds,
except one check that adapters learn: a random frozen backbone gives its [CLS] token almost no
information about the sentence, so that check uses the pretrained offline stand-in (skipped when it
is not installed).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch

from adapterlab import plots, training
from adapterlab.backbones import STANDIN, TINY, load_backbone, standin_installed
from adapterlab.data import load_split, tokenize
from adapterlab.placement import METHODS, apply_method, trainable_summary
from adapterlab.precision import PRECISION_ENV, Choice, resolve
from adapterlab.training import (
    DIVERGENCE_FACTOR,
    DIVERGENCE_STEPS,
    History,
    TrainConfig,
    TrainingDiverged,
    check_divergence,
    evaluate,
    pick_device,
    run_experiment,
    train,
)


pytestmark = pytest.mark.usefixtures("toy_data_only")


def tiny(method="houlsby", seed=0, **kwargs):
    """A tiny-random model prepared for ``method`` (adapters seeded) and its tokenizer."""
    model, tokenizer, _ = load_backbone(TINY, seed=seed)
    torch.manual_seed(seed)
    apply_method(model, method, **{"bottleneck": 8, **kwargs})
    return model, tokenizer


def toy(tokenizer, split="train", task="sst2", rows=None):
    return tokenize(load_split(task, split, source="toy", max_examples=rows), tokenizer)


def config(**overrides):
    return TrainConfig(**{"bottleneck": 8, "batch_size": 16, "progress": False, **overrides})


def trainable_copy(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


# -------------------------------------------------------------------------------------- schedule


@pytest.mark.parametrize("total, ratio", [(20, 0.1), (10, 0.25), (7, 0.0)])
def test_learning_rate_follows_linear_warmup_then_linear_decay(total, ratio):
    model, tokenizer = tiny("head")
    peak = 2e-3
    result = train(model, toy(tokenizer), None, config(method="head", max_steps=total, warmup_ratio=ratio,
                                                       learning_rate=peak))
    warmup = math.ceil(ratio * total)
    for step, rate in zip(result.history.steps, result.history.learning_rate):
        k = step - 1  # updates done before this one
        expected = peak * k / warmup if k < warmup else peak * (total - k) / (total - warmup)
        assert rate == pytest.approx(expected, rel=1e-12, abs=1e-18), step
    assert len(result.history.learning_rate) == total


@pytest.mark.parametrize("max_grad_norm, weight_decay", [(None, 0.0), (1e-9, 0.0), (None, 0.5)])
def test_first_step_is_adamw_with_clipping_and_decay_off_biases_and_layernorms(max_grad_norm, weight_decay):
    # AdamW's first update: p <- p * (1 - lr * wd) - lr * g / (|g| + eps), Adam's bias-corrected m = g,
    # v = g². Clipping first scales every g by max_norm / (total norm + 1e-6) when that is below 1.
    # Biases and LayerNorm weights are not decayed (the BERT convention).
    model, tokenizer = tiny("houlsby")
    before = trainable_copy(model)
    grads = {}
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            parameter.register_hook(lambda g, name=name: grads.__setitem__(name, g.detach().double()))
    lr = 1e-3
    train(model, toy(tokenizer), None, config(max_steps=1, warmup_ratio=0.0, learning_rate=lr,
                                              weight_decay=weight_decay, max_grad_norm=max_grad_norm))
    assert set(grads) == set(before)
    norm = torch.sqrt(sum((g ** 2).sum() for g in grads.values()))
    scale = 1.0 if max_grad_norm is None else min(1.0, max_grad_norm / (norm.item() + 1e-6))
    for name, parameter in model.named_parameters():
        if name in before:
            g = grads[name] * scale
            decay = 0.0 if name.endswith("bias") or "LayerNorm" in name else weight_decay
            expected = before[name].double() * (1 - lr * decay) - lr * g / (g.abs() + 1e-8)
            torch.testing.assert_close(parameter.detach().double(), expected, rtol=0, atol=2e-7, msg=name)


# -------------------------------------------------------------------------------------- learning


def test_full_fine_tuning_of_the_tiny_model_learns_toy_sst2():
    model, tokenizer = tiny("full")
    result = train(model, toy(tokenizer), toy(tokenizer, "dev"), config(method="full", epochs=10, learning_rate=1e-3))
    losses = result.history.loss
    assert sum(losses[-10:]) / 10 < 0.5 * sum(losses[:10]) / 10
    assert result.metrics["accuracy"] > 0.8  # chance and the majority class are 0.5


@pytest.mark.skipif(not standin_installed(), reason=f"the offline stand-in {STANDIN} is not installed")
def test_houlsby_adapters_on_the_pretrained_standin_learn_toy_sst2():
    # The stand-in's pooler was never trained to summarise a sentence: the labs train it (profile.train_pooler).
    result = run_experiment("sst2", config(epochs=1, learning_rate=3e-3, bottleneck=16, train_pooler=True),
                            backbone=STANDIN)
    losses = result.history.loss
    assert sum(losses[-3:]) / 3 < 0.5 * sum(losses[:3]) / 3
    assert result.metrics["accuracy"] > 0.8
    assert "TOY DATA" in result.data_description["train"] and "TOY DATA" in result.data_description["eval"]
    assert result.backbone_info.loaded == STANDIN


def test_only_trainable_parameters_change():
    model, tokenizer = tiny("houlsby")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    train(model, toy(tokenizer), None, config(max_steps=5, learning_rate=1e-2))
    for name, parameter in model.named_parameters():
        if flags[name]:
            assert not torch.equal(parameter, before[name]), f"{name} is trainable but did not change"
        else:
            assert torch.equal(parameter, before[name]), f"{name} is frozen but changed"
    for name, buffer in model.named_buffers():
        assert torch.equal(buffer, buffers[name]), name
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags


def test_best_state_is_restored():
    # Evaluate on the dev set with its labels flipped: the better the model learns the task, the worse
    # it scores there, so the best evaluation comes early and the final state is not the best one.
    model, tokenizer = tiny("full")
    dev = load_split("sst2", "dev", source="toy")
    flipped = tokenize(replace(dev, labels=[1 - label for label in dev.labels]), tokenizer)
    snapshots = {}

    def snapshot(history):
        snapshots[history.evals[-1]["step"]] = trainable_copy(model)

    result = train(model, toy(tokenizer), flipped, config(method="full", epochs=4, eval_every=2, learning_rate=1e-3),
                   callback=snapshot)
    scores = [(e["accuracy"], -e["step"]) for e in result.history.evals]
    best_score, minus_step = max(scores)
    assert result.best_step == -minus_step != result.history.steps[-1]
    assert result.best_metric == best_score
    final = snapshots[result.history.steps[-1]]
    assert any(not torch.equal(final[n], snapshots[result.best_step][n]) for n in final)
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            assert torch.equal(parameter, snapshots[result.best_step][name]), name
    again = evaluate(model, flipped)
    assert again["accuracy"] == result.metrics["accuracy"] == best_score
    assert again["loss"] == pytest.approx(result.metrics["loss"], rel=1e-5)


def test_same_seed_gives_identical_history_and_weights():
    runs = [run_experiment("sst2", config(max_steps=8, eval_every=4, seed=seed), backbone=TINY) for seed in (3, 3, 4)]
    first, second, other = runs
    assert first.history.loss == second.history.loss
    assert first.history.evals[-1]["loss"] == second.history.evals[-1]["loss"]
    assert all(torch.equal(p, q) for p, q in zip(first.model.parameters(), second.model.parameters()))
    assert first.history.loss != other.history.loss  # the seed matters, so the test can fail


# -------------------------------------------------------------------------------------- stop and divergence


def test_keyboard_interrupt_in_the_callback_returns_the_partial_history():
    model, tokenizer = tiny("houlsby")
    snapshots = []

    def stop_at_second_eval(history):
        snapshots.append(trainable_copy(model))
        if len(history.evals) == 2:
            raise KeyboardInterrupt

    result = train(model, toy(tokenizer), toy(tokenizer, "dev"), config(max_steps=20, eval_every=2),
                   callback=stop_at_second_eval)
    assert result.interrupted
    assert result.history.steps == [1, 2, 3, 4] and len(result.history.loss) == 4
    assert [e["step"] for e in result.history.evals] == [2, 4]
    best = 0 if result.best_step == 2 else 1
    assert all(torch.equal(p, snapshots[best][n]) for n, p in model.named_parameters() if p.requires_grad)


def test_keyboard_interrupt_inside_a_step_keeps_the_finished_steps(monkeypatch):
    model, tokenizer = tiny("houlsby")
    calls = []
    real_collate = training.loop.collate

    def collate_then_stop(*args):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real_collate(*args)

    monkeypatch.setattr(training.loop, "collate", collate_then_stop)
    result = train(model, toy(tokenizer), None, config(max_steps=10))
    assert result.interrupted and result.history.steps == [1, 2, 3] and len(result.history.loss) == 3
    assert all(math.isfinite(v) for v in result.history.loss) and result.metrics == {}


def test_nan_loss_raises_training_diverged_naming_the_step():
    model, tokenizer = tiny("houlsby")
    calls = []

    def poison_third_call(module, inputs, output):
        calls.append(1)
        return output * float("nan") if len(calls) == 3 else output

    model.classifier.register_forward_hook(poison_third_call)
    with pytest.raises(TrainingDiverged, match="step 3") as caught:
        train(model, toy(tokenizer), None, config(max_steps=10))
    assert caught.value.step == 3 and math.isnan(caught.value.loss)
    # The paper's own init scale (the default) is never blamed; the learning rate is named.
    assert "learning rate" in str(caught.value) and "init_scale" not in str(caught.value)
    assert caught.value.history.steps == [1, 2, 3]


def test_a_learning_rate_far_too_high_is_named_as_the_cause():
    with pytest.raises(TrainingDiverged, match=r"Likely cause: the learning rate is too high \(peak 1e\+06") as caught:
        run_experiment("sst2", config(max_steps=12, learning_rate=1e6), backbone=TINY)
    assert "init_scale" not in str(caught.value)
    assert caught.value.data_description is not None and caught.value.toy_data is True


def test_a_loss_that_stays_far_above_its_start_is_divergence_though_finite():
    # lr 1000: the loss climbs from ln 2 to millions within a few steps and stays finite.
    with pytest.raises(TrainingDiverged, match=f"stayed above {DIVERGENCE_FACTOR:g}x its start") as caught:
        run_experiment("sst2", config(max_steps=40, learning_rate=1000.0), backbone=TINY)
    losses = caught.value.history.loss
    assert all(math.isfinite(v) for v in losses)
    assert len(losses) < 40 and min(losses[-DIVERGENCE_STEPS:]) > DIVERGENCE_FACTOR * math.log(2)


def history_of(losses):
    history = History(steps=list(range(1, len(losses) + 1)), learning_rate=[1e-3] * len(losses))
    for loss in losses:
        history.loss.append(loss)
        check_divergence(history, 2, TrainConfig())
    return history


def test_divergence_needs_a_sustained_stretch_far_above_the_start():
    start, high = math.log(2), DIVERGENCE_FACTOR * math.log(2) * 1.01
    history_of([start] + [high] * (DIVERGENCE_STEPS - 1) + [0.5] + [high] * (DIVERGENCE_STEPS - 1))  # a stretch too short
    history_of([start] + [DIVERGENCE_FACTOR * start * 0.99] * 3 * DIVERGENCE_STEPS)  # just below the line
    history_of([0.01] + [0.5] * 3 * DIVERGENCE_STEPS)  # a lucky first batch does not lower the line below ln 2
    with pytest.raises(TrainingDiverged, match=f"for {DIVERGENCE_STEPS} steps"):
        history_of([start] + [high] * DIVERGENCE_STEPS)
    with pytest.raises(TrainingDiverged, match="the loss is inf at step 2"):
        history_of([start, float("inf")])


def test_huge_init_scale_diverges_at_the_first_step():
    with pytest.raises(TrainingDiverged, match="step 1.*init_scale is too large"):
        run_experiment("sst2", config(max_steps=3, init_scale=1e30), backbone=TINY)


# -------------------------------------------------------------------------------------- methods, results


@pytest.mark.parametrize("method", METHODS)
def test_every_method_trains_and_reports(method):
    model, tokenizer = tiny(method)
    expected = trainable_summary(model).as_dict()
    result = train(model, toy(tokenizer, rows=192), toy(tokenizer, "dev"), config(method=method, max_steps=3))
    assert result.history.steps == [1, 2, 3] and all(math.isfinite(v) for v in result.history.loss)
    assert result.trainable == expected
    assert set(result.metrics) == {"accuracy", "loss"} and result.best_step == 3
    assert result.history.examples == 48 and result.history.examples_per_second > 0


def test_cola_reports_matthews_first():
    model, tokenizer = tiny("head")
    result = train(model, toy(tokenizer, task="cola"), toy(tokenizer, "dev", task="cola"),
                   config(method="head", max_steps=2))
    assert list(result.metrics) == ["matthews", "accuracy", "loss"]
    assert result.best_metric == result.metrics["matthews"] and result.history.metric == "matthews"


def test_history_rows_table_and_figure():
    model, tokenizer = tiny("houlsby")
    history = train(model, toy(tokenizer), toy(tokenizer, "dev"), config(max_steps=6, eval_every=4)).history
    rows = history.rows()
    assert [r["step"] for r in rows] == [4, 6]
    assert rows[0]["train_loss"] == pytest.approx(sum(history.loss[:4]) / 4)
    assert rows[1]["train_loss"] == pytest.approx(sum(history.loss[4:6]) / 2)
    assert rows[1]["learning_rate"] == history.learning_rate[5]
    assert rows[1]["accuracy"] == history.evals[1]["accuracy"]
    json.dumps(rows)
    text = str(history)
    assert "accuracy" in text and "examples/s" in text and len(text.splitlines()) == 4
    figure = plots.training_figure(history)
    assert len(figure.data) == 3 and list(figure.data[0].y) == history.loss
    assert figure.layout.title.text == "Houlsby adapters on SST-2"  # names a person reads, not the registry's keys
    assert "nats" in figure.layout.yaxis.title.text and "step" in figure.layout.xaxis.title.text
    assert "fraction" in figure.layout.yaxis2.title.text


# -------------------------------------------------------------------------------------- precision


def record_linear_outputs(model) -> set:
    """(training mode, dtype) of every nn.Linear output the model computes from now on."""
    seen = set()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda layer, inputs, output: seen.add((layer.training, output.dtype)))
    return seen


@pytest.mark.parametrize("method", METHODS)
def test_bf16_trains_every_method_in_bf16_with_fp32_weights_and_evaluates_in_fp32(method):
    model, tokenizer = tiny(method)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    seen = record_linear_outputs(model)
    dev = toy(tokenizer, "dev")
    result = train(model, toy(tokenizer, rows=192), dev,
                   config(method=method, max_steps=4, learning_rate=1e-2, precision="bf16"))
    assert all(math.isfinite(v) for v in result.history.loss) and len(result.history.loss) == 4
    assert seen == {(True, torch.bfloat16), (False, torch.float32)}  # training forward in bf16, evaluation fp32
    assert result.config.precision == "bf16" and result.precision == Choice("bf16", "bf16")
    for name, parameter in model.named_parameters():
        assert parameter.dtype == torch.float32, f"{name} is {parameter.dtype}: master weights must stay fp32"
        if flags[name]:
            assert not torch.equal(parameter, before[name]), f"{name} is trainable but did not change"
        else:
            assert torch.equal(parameter, before[name]), f"{name} is frozen but changed"
    assert result.metrics == pytest.approx(evaluate(model, dev))  # the reported metrics are an fp32 evaluation


def test_auto_in_train_resolves_with_the_probe_cached_under_the_models_shape(monkeypatch):
    monkeypatch.delenv(PRECISION_ENV)
    model, tokenizer = tiny("houlsby")
    fast = {"fp32": 3, "bf16": 1}
    resolve("auto", training.loop._shape_name(model), model=model, timer=lambda m, b, chosen, d: fast[chosen])
    result = train(model, toy(tokenizer), None, config(max_steps=1))
    assert result.config.precision == "bf16" and result.precision == Choice("bf16", "auto", 3.0)


def test_run_experiment_prints_the_precision_under_the_backbone_line(capsys):
    result = run_experiment("sst2", config(max_steps=1, precision="bf16", progress=True), backbone=TINY,
                            max_train=32, max_eval=16)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == result.backbone_info.describe()
    assert lines[1] == "Precision: bf16 (as asked; evaluation in fp32)"
    assert result.summary().splitlines()[:2] == lines[:2]


@pytest.mark.parametrize("flag, expected", [([], ("fp32", "auto")), (["--precision", "bf16"], ("bf16", "bf16"))])
def test_metrics_json_records_the_precision_the_run_trained_in(tmp_path, flag, expected):
    from adapterlab.cli import main

    out = tmp_path / "run"
    args = ["train", "--backbone", TINY, "--max-train", "32", "--max-eval", "16", "--bottleneck", "4",
            "--no-progress", "--out", str(out), *flag]
    assert main(args) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    used, requested = expected
    assert metrics["precision"] == metrics["config"]["precision"] == used
    assert metrics["precision_choice"]["requested"] == requested  # "auto" is pinned to fp32 in the test suite


# -------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize("field, value", [
    ("method", "prefix"), ("bottleneck", 0), ("activation", "sigmoid"), ("init", "xavier"), ("init_scale", -1.0),
    ("train_layernorm", "yes"), ("top_k", 1.5), ("learning_rate", 0.0), ("learning_rate", float("nan")),
    ("epochs", 0), ("max_steps", 0), ("batch_size", True), ("eval_batch_size", 0), ("warmup_ratio", 1.0),
    ("weight_decay", -0.1), ("max_grad_norm", 0.0), ("eval_every", -5), ("order", "random"), ("seed", -1),
    ("device", 3), ("progress", None), ("precision", "fp16"),
])
def test_bad_config_fields_are_named(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})
    good = TrainConfig()
    setattr(good, field, value)  # a widget may change a field after construction
    with pytest.raises(ValueError, match=field):
        train(torch.nn.Linear(1, 1), None, None, good)


def test_default_learning_rates_per_method():
    assert TrainConfig(method="houlsby").peak_learning_rate == 1e-3
    assert TrainConfig(method="full").peak_learning_rate == 5e-5
    assert TrainConfig(method="full", learning_rate=2e-5).peak_learning_rate == 2e-5


def test_pick_device():
    expected = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    assert pick_device().type == expected
    assert pick_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="device"):
        pick_device("tpu-please")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            pick_device("cuda")


def test_train_refuses_a_model_with_nothing_to_train():
    model, tokenizer, _ = load_backbone(TINY)
    model.requires_grad_(False)
    with pytest.raises(ValueError, match="apply_method"):
        train(model, toy(tokenizer), None, config())
