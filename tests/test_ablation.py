"""Span ablation: every span is scored with exactly its adapters off, and the model is restored."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from adapterlab.ablation import span_ablation
from adapterlab.ablation_runs import (
    AblationSummary,
    ablate_command_line,
    ablation_key_for,
    ablation_of,
    run_ablations,
    stored_ablations,
    summarize_ablations,
)
from adapterlab.placement import (
    PlacementError,
    adapted_outputs,
    add_adapters,
    enabled_layers,
    remove_adapters,
)
from adapterlab.runstore import RunStore, key_for


def mean_logit_score(model, batch, batch_size=None, device=None):
    """A continuous stand-in for a metric, so that any change in the model's output changes it."""
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        logits = model(**inputs).logits
    return {"loss": 0.0, "accuracy": float(logits[:, 1].mean() - logits[:, 0].mean())}


def adapted_classifier(make_classifier, seed=0):
    """A tiny classifier whose adapters change its output clearly (init scale 0.3 instead of 1e-2)."""
    model = make_classifier(seed=seed)
    torch.manual_seed(seed + 1)
    return add_adapters(model, "houlsby", bottleneck=4, init_scale=0.3)


def without_adapters_in(model, first, last):
    """An independent copy with the adapters of layers first..last physically taken out of the graph."""
    clone = copy.deepcopy(model)
    layers = clone.bert.encoder.layer
    for index, position, adapted in adapted_outputs(clone):
        if first <= index <= last:
            if position == "attention":
                layers[index].attention.output = adapted.original
            else:
                layers[index].output = adapted.original
    return clone


def test_every_entry_equals_an_independent_evaluation_with_those_adapters_taken_out(make_classifier, batch):
    model = adapted_classifier(make_classifier)
    result = span_ablation(model, batch, evaluate=mean_logit_score, progress=False)
    n = 3
    assert result.metric == "accuracy" and result.scores.shape == (n, n)
    assert result.full == pytest.approx(mean_logit_score(model, batch)["accuracy"], abs=1e-6)
    for i in range(n):
        for j in range(n):
            if i > j:
                assert np.isnan(result.scores[i, j])
                continue
            expected = mean_logit_score(without_adapters_in(model, i, j), batch)["accuracy"]
            assert result.scores[i, j] == pytest.approx(expected, abs=1e-6), (i, j)
    assert len({round(float(s), 6) for s in result.scores[~np.isnan(result.scores)]}) > 3  # the spans differ


def test_all_removed_equals_the_backbone_without_adapters(make_classifier, batch):
    model = adapted_classifier(make_classifier)
    result = span_ablation(model, batch, evaluate=mean_logit_score, progress=False)
    bare = remove_adapters(copy.deepcopy(model)).eval()  # eval(): dropout off, as in the ablated model
    assert result.all_removed == pytest.approx(mean_logit_score(bare, batch)["accuracy"], abs=1e-6)
    reference = make_classifier(seed=0)  # same weights as before the adapters went in
    assert result.all_removed == pytest.approx(mean_logit_score(reference, batch)["accuracy"], abs=1e-6)
    assert np.allclose(result.single_layer(), np.diag(result.scores))
    assert len(result.rows()) == 6


def test_each_evaluation_sees_exactly_its_span_switched_off(make_classifier, batch):
    model = adapted_classifier(make_classifier)
    seen = []

    def spy(model, data, batch_size=None, device=None):
        seen.append(enabled_layers(model))
        return {"accuracy": 0.5}

    span_ablation(model, batch, evaluate=spy, progress=False)
    expected = [[0, 1, 2]] + [[k for k in range(3) if not i <= k <= j] for i in range(3) for j in range(i, 3)]
    assert seen == expected


def test_the_switches_are_restored_as_they_were_even_after_an_error(make_classifier, batch):
    model = adapted_classifier(make_classifier)
    outputs = [adapted for _, _, adapted in adapted_outputs(model)]
    outputs[1].enabled = False  # layer 0's FFN adapter was off before the call
    before = [adapted.enabled for adapted in outputs]
    span_ablation(model, batch, evaluate=mean_logit_score, progress=False)
    assert [adapted.enabled for adapted in outputs] == before

    calls = []

    def failing(model, data, batch_size=None, device=None):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return {"accuracy": 0.0}

    with pytest.raises(KeyboardInterrupt):
        span_ablation(model, batch, evaluate=failing, progress=False)
    assert [adapted.enabled for adapted in outputs] == before


def test_metric_choice_and_bad_input(make_classifier, batch):
    model = adapted_classifier(make_classifier)
    result = span_ablation(model, batch, metric="loss", evaluate=mean_logit_score, progress=False)
    assert result.metric == "loss" and result.full == 0.0
    with pytest.raises(ValueError, match="metric must be one of"):
        span_ablation(model, batch, metric="f1", evaluate=mean_logit_score, progress=False)
    with pytest.raises(ValueError, match="pass metric="):
        span_ablation(model, batch, evaluate=lambda *a, **k: {"loss": 1.0}, progress=False)
    with pytest.raises(PlacementError, match="no adapters"):
        span_ablation(make_classifier(), batch, evaluate=mean_logit_score, progress=False)


def test_with_the_real_evaluation_on_toy_data_all_removed_is_the_bare_backbone():
    from adapterlab.backbones import TINY, load_backbone
    from adapterlab.data import TOY_DIR, load_split, tokenize
    from adapterlab.training import evaluate

    model, tokenizer, _ = load_backbone(TINY, seed=0)
    with torch.no_grad():
        model.classifier.weight.mul_(300)  # a random head's logits are ~0; make the loss feel the adapters
    torch.manual_seed(0)
    add_adapters(model, "pfeiffer", bottleneck=4, init_scale=0.5)
    data = tokenize(load_split("sst2", "dev", TOY_DIR, max_examples=40), tokenizer)
    result = span_ablation(model, data, metric="loss", progress=False)  # the loss: continuous
    bare = remove_adapters(copy.deepcopy(model)).eval()
    assert result.all_removed == pytest.approx(evaluate(bare, data)["loss"], abs=1e-6)
    assert result.full == pytest.approx(evaluate(model, data)["loss"], abs=1e-6)
    assert abs(result.full - result.all_removed) > 1e-3


# ------------------------------------------------------------------------------ ablations in the run store


TOY_RUN = {"backbone": "tiny-random", "max_train": 32, "max_eval": 16}
EVAL_ROWS = 24


def toy_config(seed=0):
    from adapterlab.training import TrainConfig

    return TrainConfig(bottleneck=4, init_scale=0.3, max_steps=2, batch_size=8, seed=seed, progress=False)


def mean_logit_gap(model, data, batch_size=32, device=None):
    """A continuous score of a TokenizedSplit (a tiny random BERT's accuracy hardly moves), as "accuracy"."""
    from adapterlab.evaluation import eval_batches

    with torch.no_grad():
        gaps = [model(**{k: v for k, v in b.items() if k != "labels"}).logits for b in eval_batches(data, batch_size)]
    logits = torch.cat(gaps)
    return {"accuracy": float((logits[:, 1] - logits[:, 0]).mean()), "loss": 0.0}


class CountingTrainer:
    """run_experiment, remembering each trained model by seed."""

    def __init__(self):
        self.models = {}

    def __call__(self, task, config, **kwargs):
        from adapterlab.training import run_experiment

        result = run_experiment(task, config, **kwargs)
        self.models[config.seed] = result.model
        return result


@pytest.fixture(scope="module")
def toy_store(tmp_path_factory):
    """Seed 0's span ablation of a tiny model on the toy data, computed once into a fresh store."""
    from adapterlab.data import TOY_DIR

    store = RunStore(tmp_path_factory.mktemp("ablations"))
    trainer = CountingTrainer()
    with pytest.MonkeyPatch.context() as patch:  # as conftest does for each test: runs in fp32, no probe
        patch.setenv("ADAPTERLAB_PRECISION", "fp32")
        patch.setenv("ADAPTERLAB_CACHE", str(tmp_path_factory.mktemp("cache")))
        lookups = run_ablations("sst2", toy_config(), [0], EVAL_ROWS, stores=[store], trainer=trainer,
                                evaluate=mean_logit_gap, data_dir=TOY_DIR, **TOY_RUN)
    return store, trainer, lookups


def test_a_stored_ablation_equals_a_direct_span_ablation_of_the_trained_model(toy_store):
    from adapterlab.backbones import TINY, load_backbone
    from adapterlab.data import TOY_DIR, load_split, tokenize

    store, trainer, (lookup,) = toy_store
    assert not lookup.stored
    run = key_for("sst2", toy_config(), data_dir=TOY_DIR, **TOY_RUN)
    key = ablation_key_for("sst2", toy_config(), EVAL_ROWS, data_dir=TOY_DIR, **TOY_RUN)
    assert key != run and key == {**run, "analysis": {"name": "span_ablation", "eval_rows": EVAL_ROWS}}
    record = store.get(key)  # read back from disk: the JSON round trip, NaN stored as null
    assert record is not None and store.get(run) is not None  # the training run is stored beside it

    _, tokenizer, _ = load_backbone(TINY, seed=0)
    rows = load_split("sst2", "dev", TOY_DIR, max_examples=EVAL_ROWS, seed=0)
    direct = span_ablation(trainer.models[0], tokenize(rows, tokenizer), evaluate=mean_logit_gap, progress=False)
    stored = ablation_of(record)
    assert np.array_equal(np.isnan(stored.scores), np.isnan(direct.scores))
    assert np.allclose(stored.scores, direct.scores, atol=1e-9, equal_nan=True)
    assert stored.full == pytest.approx(direct.full, abs=1e-9)
    assert len({round(v, 6) for v in direct.scores[~np.isnan(direct.scores)]}) > 1  # the spans differ
    assert record["ablation"]["majority"] == pytest.approx(max(rows.labels.count(0), rows.labels.count(1)) / len(rows))
    assert record["best_metric"] == store.get(run)["best_metric"]


def test_a_rerun_skips_the_stored_seeds_and_computes_only_the_new_ones(toy_store, tmp_path):
    import shutil

    from adapterlab.data import TOY_DIR

    store, _, _ = toy_store
    copy_of_store = RunStore(shutil.copytree(store.folder, tmp_path / "store"))
    trainer = CountingTrainer()
    lookups = run_ablations("sst2", toy_config(), [0, 1], EVAL_ROWS, stores=[copy_of_store], trainer=trainer,
                            evaluate=mean_logit_gap, data_dir=TOY_DIR, **TOY_RUN)
    assert [lookup.stored for lookup in lookups] == [True, False]
    assert list(trainer.models) == [1]
    records = stored_ablations("sst2", toy_config(), [0, 1, 2], EVAL_ROWS, stores=[copy_of_store],
                               data_dir=TOY_DIR, **TOY_RUN)
    assert [r is not None for r in records] == [True, True, False]
    assert [r["key"]["settings"]["seed"] for r in records[:2]] == [0, 1]


def fake_ablation_record(seed, scores, full, majority=0.5, metric="accuracy"):
    n = len(scores)
    matrix = [[float(scores[i][j]) if j >= i else float("nan") for j in range(n)] for i in range(n)]
    return {"key": {"task": "sst2", "settings": {"seed": seed}, "analysis": {"name": "span_ablation"}},
            "metric": metric, "best_metric": full + 0.01,
            "ablation": {"metric": metric, "full": full, "scores": matrix, "majority": majority}}


def test_the_summary_of_three_seeds_is_the_cellwise_mean_and_sample_sd(tmp_path):
    rng = np.random.default_rng(7)
    store = RunStore(tmp_path)
    for seed in range(3):
        store.put(fake_ablation_record(seed, rng.uniform(0.4, 0.9, (4, 4)), float(rng.uniform(0.8, 0.9))))
    records = sorted(store.records(), key=lambda r: r["key"]["settings"]["seed"])
    summary = summarize_ablations(records)
    assert isinstance(summary, AblationSummary) and summary.seeds == [0, 1, 2] and summary.metric == "accuracy"
    for i in range(4):
        for j in range(4):
            values = [r["ablation"]["scores"][i][j] for r in records]
            if j < i:
                assert values == [None] * 3 and np.isnan(summary.mean[i, j]) and np.isnan(summary.std[i, j])
                continue
            assert summary.mean[i, j] == pytest.approx(np.mean(values), abs=1e-12)
            assert summary.std[i, j] == pytest.approx(np.std(values, ddof=1), abs=1e-12)
    assert list(summary.all_removed) == [r["ablation"]["scores"][0][3] for r in records]
    assert summary.ablation().full == pytest.approx(np.mean([r["ablation"]["full"] for r in records]))


def test_missing_or_mixed_ablations_are_refused_with_the_command_that_makes_them():
    record = fake_ablation_record(0, np.full((2, 2), 0.7), 0.8)
    with pytest.raises(ValueError, match="adapterlab ablate"):
        summarize_ablations([record, None, record])
    with pytest.raises(ValueError, match="two or more"):
        summarize_ablations([record])
    with pytest.raises(ValueError, match="different metrics"):
        summarize_ablations([record, fake_ablation_record(1, np.full((2, 2), 0.1), 0.2, metric="matthews")])


def test_the_printed_command_asks_for_exactly_the_ablations_looked_up():
    from adapterlab.cli import build_parser
    from adapterlab.training import TrainConfig
    from adapterlab.training.config import config_from_args

    def rebuilt(line):
        args = build_parser().parse_args(line.split()[3:])
        return args, config_from_args(args)

    config = TrainConfig(bottleneck=64, init_scale=1e-2, max_steps=300, eval_every=150, batch_size=32,
                         precision="fp32")
    args, again = rebuilt(ablate_command_line("sst2", config, [0, 1, 2], 300, backbone="all-MiniLM-L6-v2"))
    assert args.command == "ablate" and args.seeds == "0,1,2" and args.eval_rows == 300
    assert args.store == "data/reference_runs" and args.backbone == "all-MiniLM-L6-v2"
    assert again == config
    assert "--backbone" not in ablate_command_line("sst2", config, [0], 300)  # the default needs no option
    pooler = dataclasses.replace(config, train_pooler=True, learning_rate=3e-4, max_steps=None, epochs=2.0)
    assert rebuilt(ablate_command_line("sst2", pooler, [0], 300))[1] == pooler


def test_only_the_spans_asked_for_are_scored_each_as_in_the_full_ablation(make_classifier, batch):
    model = adapted_classifier(make_classifier)
    full = span_ablation(model, batch, evaluate=mean_logit_score, progress=False)
    seen = []

    def counting(model, data, batch_size=None, device=None):
        seen.append(enabled_layers(model))
        return mean_logit_score(model, data)

    diagonal = span_ablation(model, batch, evaluate=counting, progress=False, spans=[(i, i) for i in range(3)])
    assert seen == [[0, 1, 2], [1, 2], [0, 2], [0, 1]], "the full model, then one layer off at a time"
    assert np.allclose(diagonal.single_layer(), full.single_layer())
    assert np.isnan(diagonal.scores[0, 1]) and diagonal.full == pytest.approx(full.full)
    for bad in ([], [(2, 1)], [(0, 3)]):
        with pytest.raises(ValueError, match="0 <= i <= j < 3"):
            span_ablation(model, batch, evaluate=counting, progress=False, spans=bad)
