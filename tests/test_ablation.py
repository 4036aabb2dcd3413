"""Span ablation: every span is scored with exactly its adapters off, and the model is restored."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from adapterlab.ablation import span_ablation
from adapterlab.placement import PlacementError, add_adapters, adapted_outputs, enabled_layers, remove_adapters


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
