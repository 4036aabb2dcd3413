"""Adapters inside a tiny BERT: where they sit (checked by recomputing a layer by hand), switching
them off and removing them bit for bit, errors that leave the model untouched, what is trainable,
near-identity logits, and the step-zero gradients of zero_up adapters in the whole model."""

from __future__ import annotations

import copy
import dataclasses
import json
import math

import numpy as np
import pytest
import torch
import transformers
from torch import nn

from adapterlab.adapter import BottleneckAdapter
from adapterlab.placement import (
    GROUPS,
    AdapterConfig,
    AdaptedOutput,
    PlacementError,
    add_adapters,
    adapted_outputs,
    adapter_config,
    apply_method,
    enabled_layers,
    largest_correction,
    remove_adapters,
    set_adapters_enabled,
    set_trainable,
    trainable_summary,
)

L, D, FFN, R = 3, 32, 64, 8


def gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def linear(module: nn.Linear, x):
    return x @ module.weight.T + module.bias


def layer_norm(module: nn.LayerNorm, x, eps: float):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * module.weight + module.bias


def adapter_delta(adapter: BottleneckAdapter, x):
    return linear(adapter.up, gelu(linear(adapter.down, x)))


def logits_of(model, batch):
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def adapter_parameter_names(model) -> set[str]:
    return {
        f"{module_name}.{name}"
        for module_name, module in model.named_modules()
        if isinstance(module, BottleneckAdapter)
        for name, _ in module.named_parameters()
    }


def parameter_names_of(model, *modules) -> set[str]:
    ids = {id(p) for module in modules for p in module.parameters()}
    return {name for name, p in model.named_parameters() if id(p) in ids}


def layernorm_names(model) -> set[str]:
    return parameter_names_of(model, *[m for m in model.modules() if isinstance(m, nn.LayerNorm)])


def trainable_names(model) -> set[str]:
    return {name for name, p in model.named_parameters() if p.requires_grad}


def make_adapters_visible(model, seed: int = 0):
    """Random nonzero weights and biases in every adapter, so a misplaced adapter cannot hide."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, BottleneckAdapter):
                for p in module.parameters():
                    p.copy_(0.3 * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    return model


def snapshot(model) -> dict:
    return {
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "modules": [(name, type(m), id(m)) for name, m in model.named_modules()],
        "requires_grad": {n: p.requires_grad for n, p in model.named_parameters()},
        "config": adapter_config(model),
    }


def assert_unchanged(model, before: dict) -> None:
    after = snapshot(model)
    assert list(after["state"]) == list(before["state"])
    assert all(torch.equal(after["state"][k], before["state"][k]) for k in before["state"])
    assert after["modules"] == before["modules"]
    assert after["requires_grad"] == before["requires_grad"]
    assert after["config"] == before["config"]


# ---------------------------------------------------------------------------------------------------
# where the adapters go
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "placement, positions",
    [("houlsby", {"attention", "ffn"}), ("pfeiffer", {"ffn"}), ("parallel", {"ffn"})],
)
@pytest.mark.parametrize("factory", ["make_bert", "make_classifier"])
def test_positions_and_counts(request, factory, placement, positions):
    model = request.getfixturevalue(factory)()
    prefix = "bert." if factory == "make_classifier" else ""
    add_adapters(model, placement, bottleneck=R)
    found = adapted_outputs(model)
    assert [(i, p) for i, p, _ in found] == [(i, p) for i in range(L) for p in ("attention", "ffn") if p in positions]
    for i, layer in enumerate(model.base_model.encoder.layer):
        assert isinstance(layer.attention.output, AdaptedOutput) == ("attention" in positions)
        assert isinstance(layer.output, AdaptedOutput)
        assert layer.output.mode == ("parallel" if placement == "parallel" else "serial")
    names = adapter_parameter_names(model)
    assert f"{prefix}encoder.layer.2.output.adapter.down.weight" in names
    assert (f"{prefix}encoder.layer.0.attention.output.adapter.up.bias" in names) == ("attention" in positions)
    count = sum(p.numel() for n, p in model.named_parameters() if n in names)
    assert count == L * len(positions) * (2 * R * D + R + D)
    assert adapter_config(model).placement == placement
    assert adapter_config(model).adapters_per_layer == len(positions)


def test_layer_subset(make_classifier):
    model = make_classifier()
    add_adapters(model, "houlsby", bottleneck=R, layers=[2, 0])
    assert sorted({i for i, _, _ in adapted_outputs(model)}) == [0, 2]
    assert not isinstance(model.bert.encoder.layer[1].output, AdaptedOutput)
    assert not isinstance(model.bert.encoder.layer[1].attention.output, AdaptedOutput)
    assert adapter_config(model).layers == (0, 2)
    assert enabled_layers(model) == [0, 2]

    last_only = make_classifier()
    add_adapters(last_only, "pfeiffer", bottleneck=R, layers=[-1])
    assert [(i, p) for i, p, _ in adapted_outputs(last_only)] == [(2, "ffn")]


def capture_layer(model, index: int, batch):
    """Run the model; return layer index's input, its output, and its attention context (pre-projection)."""
    captured = {}
    attention = model.base_model.encoder.layer[index].attention.self

    def keep(module, args, output):  # returns None: a hook that returns a value replaces the output
        captured["context"] = output[0]

    handle = attention.register_forward_hook(keep)
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
    handle.remove()
    return out.hidden_states[index], out.hidden_states[index + 1], captured["context"]


def layer_by_hand(layer, x, context, placement, scale=None, eps=transformers.BertConfig().layer_norm_eps):
    """One BERT layer (eval mode) from its weights, with the adapters where the placement says."""
    attention, ffn = layer.attention.output, layer.output
    a = linear(attention.dense, context)
    if placement == "houlsby":
        a = a + adapter_delta(attention.adapter, a)
    attention_out = layer_norm(attention.LayerNorm, a + x, eps)
    o = linear(ffn.dense, gelu(linear(layer.intermediate.dense, attention_out)))
    if placement == "houlsby":
        o = o + adapter_delta(ffn.adapter, o)
    elif placement == "pfeiffer":  # the adapter reads the Add & Norm's output; the same LayerNorm runs again
        o = o + adapter_delta(ffn.adapter, layer_norm(ffn.LayerNorm, o + attention_out, eps))
    elif placement == "parallel":
        o = o + scale * adapter_delta(ffn.adapter, attention_out)
    return layer_norm(ffn.LayerNorm, o + attention_out, eps)


@pytest.mark.parametrize("placement", ["houlsby", "pfeiffer", "parallel"])
def test_layer_output_recomputed_by_hand(make_classifier, batch, placement):
    model = make_classifier(dtype=torch.float64)
    x, y, context = capture_layer(model, 1, batch)
    torch.testing.assert_close(layer_by_hand(model.bert.encoder.layer[1], x, context, None), y, rtol=1e-10, atol=1e-10)

    add_adapters(model, placement, bottleneck=R, **({"parallel_scale": 2.5} if placement == "parallel" else {}))
    make_adapters_visible(model)
    x, y, context = capture_layer(model, 1, batch)
    layer = model.bert.encoder.layer[1]
    expected = layer_by_hand(layer, x, context, placement, scale=2.5)
    torch.testing.assert_close(y, expected, rtol=1e-10, atol=1e-10)
    for other in {"pfeiffer", "parallel", None} - {placement}:  # houlsby needs an attention adapter
        assert (layer_by_hand(layer, x, context, other, scale=2.5) - y).abs().max() > 1e-3


def count_plain_forwards(monkeypatch) -> list:
    """Each call of AdaptedOutput's inference path appends one entry to the list returned."""
    calls = []
    plain_forward = AdaptedOutput._plain_forward

    def counted(self, *args):
        calls.append(self)
        return plain_forward(self, *args)

    monkeypatch.setattr(AdaptedOutput, "_plain_forward", counted)
    return calls


@pytest.mark.parametrize("placement", ["houlsby", "pfeiffer", "parallel"])
def test_inference_skips_the_module_calls_and_computes_the_same(make_classifier, batch, monkeypatch, placement):
    """Without autograd, in eval mode, every adapted sublayer runs as tensor operations, bit for bit the module
    path; with autograd recording (training) it never does."""
    calls = count_plain_forwards(monkeypatch)
    for dtype in (torch.float64, torch.float32):
        model = make_classifier(dtype=dtype)
        scale = {"parallel_scale": 2.5} if placement == "parallel" else {}
        make_adapters_visible(add_adapters(model, placement, bottleneck=R, **scale))
        inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        calls.clear()
        by_modules = model(**inputs).logits.detach()
        assert calls == []
        with torch.inference_mode():
            plain = model(**inputs).logits
        assert len(calls) == len(adapted_outputs(model))
        assert torch.equal(plain, by_modules)


@pytest.mark.parametrize(
    "watched", ["dense", "dropout", "LayerNorm", "adapter", "adapter.down", "adapter.act", "adapter.up", "all"]
)
def test_a_forward_hook_still_sees_its_module_called_in_inference(make_classifier, batch, monkeypatch, watched):
    """Lab 5 reads each correction with a hook on the up-projection under no_grad: a hook on any part of an
    adapted sublayer (or on every module) keeps that sublayer on the module path."""
    calls = count_plain_forwards(monkeypatch)
    model = make_classifier()
    add_adapters(model, "houlsby", bottleneck=R, init="bert")
    seen = []
    if watched == "all":
        handles = [nn.modules.module.register_module_forward_hook(lambda m, args, out: seen.append(m))]
    else:
        handles = [adapted.get_submodule(watched).register_forward_hook(lambda m, args, out: seen.append(m))
                   for _, _, adapted in adapted_outputs(model)]
    logits_of(model, batch)
    for handle in handles:
        handle.remove()
    assert calls == []
    assert len(seen) >= len(adapted_outputs(model))
    logits_of(model, batch)
    assert len(calls) == len(adapted_outputs(model))  # the hooks gone, the inference path again


def test_a_dense_layer_replaced_by_another_module_is_called_in_inference(make_classifier, batch, monkeypatch):
    """A sublayer whose dense layer is no plain nn.Linear (another method wrapped it) runs that module."""

    class Doubled(nn.Linear):
        def forward(self, x):
            return 2 * super().forward(x)

    calls = count_plain_forwards(monkeypatch)
    model, twice = make_classifier(), make_classifier()
    for m in (model, twice):
        add_adapters(m, "houlsby", bottleneck=R, init="bert")
    for (_, _, adapted), (_, _, reference) in zip(adapted_outputs(model), adapted_outputs(twice)):
        doubled = Doubled(adapted.dense.in_features, adapted.dense.out_features)
        doubled.load_state_dict(adapted.dense.state_dict())
        adapted.dense = doubled
        with torch.no_grad():
            reference.dense.weight.mul_(2)
            reference.dense.bias.mul_(2)
    torch.testing.assert_close(logits_of(model, batch), logits_of(twice, batch))
    assert len(calls) == len(adapted_outputs(twice))  # only the reference model's sublayers ran plain


def test_parallel_scale_zero_is_the_backbone(make_classifier, batch):
    base, model = make_classifier(), make_classifier()
    add_adapters(model, "parallel", bottleneck=R, parallel_scale=0.0)
    make_adapters_visible(model)
    assert torch.equal(logits_of(model, batch), logits_of(base, batch))


@pytest.mark.parametrize("placement", ["houlsby"])
def test_serial_adapter_reads_the_output_after_dropout(make_classifier, batch, placement):
    """The original code applies the adapter to dropout(dense(x)), before the residual + LayerNorm (Pfeiffer's reads
    the Add & Norm's output instead: test_layer_output_recomputed_by_hand)."""
    model = make_classifier()
    add_adapters(model, placement, bottleneck=R)
    model.train()
    seen = {}
    handles = []
    for i, position, adapted in adapted_outputs(model):
        key = (i, position)
        handles.append(adapted.adapter.register_forward_pre_hook(lambda m, args, k=key: seen.__setitem__((k, "in"), args[0])))
        handles.append(adapted.dense.register_forward_hook(lambda m, args, out, k=key: seen.__setitem__((k, "dense"), out)))

    for _, _, adapted in adapted_outputs(model):
        adapted.dropout.p = 1.0
    logits_of(model, batch)
    for i, position, _ in adapted_outputs(model):
        assert torch.count_nonzero(seen[((i, position), "in")]) == 0
        assert torch.count_nonzero(seen[((i, position), "dense")]) > 0

    for _, _, adapted in adapted_outputs(model):
        adapted.dropout.p = 0.5
    torch.manual_seed(0)
    logits_of(model, batch)
    for i, position, _ in adapted_outputs(model):
        seen_in, dense = seen[((i, position), "in")], seen[((i, position), "dense")]
        kept = seen_in != 0
        assert 0.35 < 1 - kept.float().mean().item() < 0.65
        torch.testing.assert_close(seen_in[kept], 2.0 * dense[kept])  # inverted dropout scales by 1/(1-p)
    for handle in handles:
        handle.remove()


# ---------------------------------------------------------------------------------------------------
# switching off and removing
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("placement", ["houlsby", "pfeiffer", "parallel"])
def test_disabled_adapters_give_the_backbone_bit_for_bit(make_classifier, batch, placement):
    base, model = make_classifier(), make_classifier()
    add_adapters(model, placement, bottleneck=R, init="bert")
    assert not torch.equal(logits_of(model, batch), logits_of(base, batch))
    set_adapters_enabled(model, False)
    assert enabled_layers(model) == []
    assert torch.equal(logits_of(model, batch), logits_of(base, batch))
    set_adapters_enabled(model, True)
    assert enabled_layers(model) == [0, 1, 2]
    assert not torch.equal(logits_of(model, batch), logits_of(base, batch))


def test_disabling_one_layer_touches_only_that_layer(make_classifier, batch):
    model = make_classifier()
    add_adapters(model, "houlsby", bottleneck=R, init="bert")
    with torch.no_grad():
        all_on = model(**{k: batch[k] for k in ("input_ids", "attention_mask")}, output_hidden_states=True)
    reference = copy.deepcopy(model)  # layer 1 by hand: its original modules put back
    layer = reference.bert.encoder.layer[1]
    layer.attention.output, layer.output = layer.attention.output.original, layer.output.original

    set_adapters_enabled(model, False, layers=[1])
    assert enabled_layers(model) == [0, 2]
    assert [(i, a.enabled) for i, _, a in adapted_outputs(model)] == [(0, True), (0, True), (1, False), (1, False), (2, True), (2, True)]
    with torch.no_grad():
        one_off = model(**{k: batch[k] for k in ("input_ids", "attention_mask")}, output_hidden_states=True)
    assert torch.equal(one_off.hidden_states[1], all_on.hidden_states[1])  # layer 0 unaffected
    assert not torch.equal(one_off.hidden_states[2], all_on.hidden_states[2])
    assert torch.equal(one_off.logits, logits_of(reference, batch))


@pytest.mark.parametrize("placement", ["houlsby", "pfeiffer", "parallel"])
def test_remove_restores_everything(make_classifier, batch, placement):
    model = make_classifier()
    model.bert.embeddings.word_embeddings.weight.requires_grad_(False)  # a flag of the user's own
    before = snapshot(model)
    reference = logits_of(model, batch)
    originals = [(l.attention.output, l.output) for l in model.bert.encoder.layer]

    add_adapters(model, placement, bottleneck=R, init="bert")
    assert not any(m.training for m in model.modules())  # the new modules take the model's mode
    model.train()
    model.eval()
    model.train()  # the mode flips while adapted must reach the restored modules
    remove_adapters(model)
    assert [(l.attention.output, l.output) for l in model.bert.encoder.layer] == originals
    assert all(m.training for m in model.modules())
    model.eval()
    assert_unchanged(model, before)
    assert torch.equal(logits_of(model, batch), reference)
    assert adapter_config(model) is None and adapted_outputs(model) == []
    add_adapters(model, placement, bottleneck=R)  # and it can be adapted again
    assert len(adapted_outputs(model)) == (2 * L if placement == "houlsby" else L)


def test_deepcopy_is_independent(make_classifier, batch):
    base, model = make_classifier(), make_classifier()
    add_adapters(model, "houlsby", bottleneck=R, init="bert")
    adapted_logits = logits_of(model, batch)
    twin = copy.deepcopy(model)
    assert torch.equal(logits_of(twin, batch), adapted_logits)
    remove_adapters(twin)
    assert torch.equal(logits_of(twin, batch), logits_of(base, batch))
    assert len(adapted_outputs(model)) == 2 * L and adapter_config(model) is not None
    assert torch.equal(logits_of(model, batch), adapted_logits)
    with torch.no_grad():
        twin.bert.encoder.layer[0].output.dense.weight.add_(1.0)
    assert torch.equal(logits_of(model, batch), adapted_logits)
    remove_adapters(model)
    assert torch.equal(logits_of(model, batch), logits_of(base, batch))


@pytest.mark.parametrize(
    "name, build",
    [
        ("roberta", lambda: transformers.RobertaForSequenceClassification(
            transformers.RobertaConfig(vocab_size=100, hidden_size=D, num_hidden_layers=2, num_attention_heads=4,
                                       intermediate_size=FFN, max_position_embeddings=64))),
        ("electra", lambda: transformers.ElectraForSequenceClassification(
            transformers.ElectraConfig(vocab_size=100, embedding_size=16, hidden_size=D, num_hidden_layers=2,
                                       num_attention_heads=4, intermediate_size=FFN, max_position_embeddings=64))),
    ],
)
def test_other_bert_family_encoders(name, build, batch):
    torch.manual_seed(0)
    model = build().eval()
    ids = {"input_ids": batch["input_ids"] + 2, "attention_mask": batch["attention_mask"]}
    reference = logits_of(model, ids)
    add_adapters(model, "houlsby", bottleneck=R, init="bert")
    assert len(adapted_outputs(model)) == 4
    assert not torch.equal(logits_of(model, ids), reference)
    remove_adapters(model)
    assert torch.equal(logits_of(model, ids), reference)


# ---------------------------------------------------------------------------------------------------
# errors leave the model unchanged
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"placement": "serial"}, PlacementError, "placement"),
        ({"layers": [3]}, PlacementError, "layers"),
        ({"layers": [-4]}, PlacementError, "layers"),
        ({"layers": [0, 0]}, PlacementError, "twice"),
        ({"layers": [0, -3]}, PlacementError, "twice"),
        ({"layers": [1.0]}, PlacementError, "layers"),
        ({"layers": [True]}, PlacementError, "layers"),
        ({"layers": 1}, PlacementError, "layers"),
        ({"layers": []}, PlacementError, "layers"),
        ({"bottleneck": 0}, ValueError, "bottleneck"),
        ({"bottleneck": 2.5}, ValueError, "bottleneck"),
        ({"bottleneck": True}, ValueError, "bottleneck"),
        ({"activation": "softmax"}, ValueError, "activation"),
        ({"init": "orthogonal"}, ValueError, "init"),
        ({"init_scale": float("nan")}, ValueError, "init_scale"),
        ({"placement": "parallel", "parallel_scale": float("inf")}, PlacementError, "parallel_scale"),
        ({"placement": "parallel", "parallel_scale": "4"}, PlacementError, "parallel_scale"),
    ],
)
def test_bad_arguments_leave_the_model_unchanged(make_classifier, kwargs, error, words):
    model = make_classifier()
    before = snapshot(model)
    with pytest.raises(error, match=words):
        add_adapters(model, **{"bottleneck": R, **kwargs})
    assert_unchanged(model, before)


def test_adding_twice_is_refused(make_classifier):
    model = make_classifier()
    add_adapters(model, "houlsby", bottleneck=R)
    before = snapshot(model)
    with pytest.raises(PlacementError, match="already has adapters"):
        add_adapters(model, "pfeiffer", bottleneck=R)
    assert_unchanged(model, before)
    with pytest.raises(PlacementError, match="already has adapters"):
        add_adapters(model.bert, "houlsby", bottleneck=R)  # through the inner model
    assert_unchanged(model, before)
    with pytest.raises(PlacementError, match="remove_adapters on that model"):
        remove_adapters(model.bert)
    assert_unchanged(model, before)


@pytest.mark.parametrize(
    "build",
    [
        lambda: nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)),
        lambda: transformers.GPT2Model(transformers.GPT2Config(vocab_size=100, n_embd=D, n_layer=2, n_head=4, n_positions=32)),
    ],
    ids=["sequential", "gpt2"],
)
def test_unsupported_models_are_refused(build):
    model = build()
    before = snapshot(model)
    with pytest.raises(PlacementError, match=f"{type(model).__name__} is not supported"):
        add_adapters(model, bottleneck=R)
    assert_unchanged(model, before)
    with pytest.raises(PlacementError):
        set_trainable(model, "head")


def test_remove_and_switch_without_adapters_are_refused(make_bert):
    model = make_bert()
    with pytest.raises(PlacementError, match="no adapters"):
        remove_adapters(model)
    with pytest.raises(PlacementError, match="no adapters"):
        set_adapters_enabled(model, False)
    with pytest.raises(PlacementError, match="needs adapters"):
        set_trainable(model, "adapters")


def test_adapter_config_holds_plain_python_values(make_bert):
    model = make_bert()
    add_adapters(model, "pfeiffer", bottleneck=np.int64(R), init_scale=np.float64(1e-3), layers=[np.int64(1)])
    values = adapter_config(model).as_dict()
    assert json.loads(json.dumps(values)) == values
    assert type(values["bottleneck"]) is int and type(values["init_scale"]) is float and values["layers"] == [1]
    assert AdapterConfig.from_dict(values) == adapter_config(model)


def test_adapter_config_cannot_be_changed_behind_the_model(make_bert):
    model = make_bert()
    add_adapters(model, "pfeiffer", bottleneck=R, layers=[1])
    config = adapter_config(model)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.bottleneck = 99
    assert config.replace(bottleneck=99).bottleneck == 99 and adapter_config(model).bottleneck == R


# ---------------------------------------------------------------------------------------------------
# one configuration object for an adapter set
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("placement", ["houlsby", "pfeiffer", "parallel"])
def test_a_config_and_the_separate_arguments_build_the_same_model(make_classifier, batch, placement):
    settings = dict(bottleneck=R, activation="relu", init="bert", init_scale=0.3, layers=[2, 0], train_layernorm=False)
    by_arguments = add_adapters(make_classifier(), placement, **settings)
    torch.manual_seed(1)
    by_config = add_adapters(make_classifier(), AdapterConfig.preset(placement, **settings))
    torch.manual_seed(1)
    by_name = add_adapters(make_classifier(), placement, **settings)
    assert adapter_config(by_config) == adapter_config(by_arguments) == adapter_config(by_name)
    assert trainable_names(by_config) == trainable_names(by_arguments)
    assert torch.equal(logits_of(by_config, batch), logits_of(by_name, batch))


def test_a_config_with_changes_and_the_adapters_each_layer_gets(make_classifier):
    model = add_adapters(make_classifier(), AdapterConfig.preset("pfeiffer"), bottleneck=R, layers=[1])
    assert adapter_config(model).placement == "pfeiffer" and adapter_config(model).bottleneck == R
    for placement, positions in [("houlsby", {"attention", "ffn"}), ("pfeiffer", {"ffn"}), ("parallel", {"ffn"})]:
        config = AdapterConfig.preset(placement, bottleneck=R)
        built = add_adapters(make_classifier(), config)
        assert config.adapters_per_layer == len(adapted_outputs(built)) // L == len(positions)


def test_presets_differ_only_in_where_the_adapters_go():
    presets = {name: AdapterConfig.preset(name).as_dict() for name in ("houlsby", "pfeiffer", "parallel")}
    differing = {key for values in presets.values() for key in values if values[key] != presets["houlsby"][key]}
    assert differing == {"placement", "parallel_scale"}
    assert presets["parallel"]["parallel_scale"] == 4.0 and presets["houlsby"]["parallel_scale"] is None


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"train_layernorm": "False"}, "train_layernorm must be True or False; got 'False'"),
        ({"train_layernorm": 0}, "train_layernorm must be True or False"),
        ({"bias": "no"}, "bias must be True or False"),
        ({"parallel_scale": 2.0}, "placement 'houlsby' has none"),
        ({"colour": "red"}, "unknown settings \\['colour'\\]"),
        ({"placement": "sideways"}, "placement must be one of houlsby, pfeiffer, parallel"),
    ],
)
def test_bad_configs_are_refused_with_a_message_naming_the_setting(make_classifier, changes, words):
    with pytest.raises(ValueError, match=words):
        AdapterConfig.preset("houlsby").replace(**changes)
    model = make_classifier()
    before = snapshot(model)
    with pytest.raises(ValueError, match=words):
        add_adapters(model, **{"placement": "houlsby", "bottleneck": R, **changes})
    assert_unchanged(model, before)


def test_a_string_false_cannot_switch_adapters_on(make_classifier):
    model = add_adapters(make_classifier(), "houlsby", bottleneck=R)
    set_adapters_enabled(model, False)
    with pytest.raises(ValueError, match="enabled must be True or False; got 'False'"):
        set_adapters_enabled(model, "False")
    assert enabled_layers(model) == []
    with pytest.raises(ValueError, match="train_layernorm must be True or False"):
        set_trainable(model, "adapters", train_layernorm="False")


# ---------------------------------------------------------------------------------------------------
# what is trainable
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("train_pooler", [False, True])
@pytest.mark.parametrize("train_layernorm", [True, False])
@pytest.mark.parametrize("placement", ["houlsby", "pfeiffer", "parallel"])
def test_freezing_after_add_adapters(make_classifier, placement, train_layernorm, train_pooler):
    """Adapters and the classifier train, the LayerNorms when asked; the pretrained pooler stays frozen
    unless train_pooler (adapter-bert's optimization.py trains adapters, layer_norm and head only)."""
    model = make_classifier()
    add_adapters(model, placement, bottleneck=R, train_layernorm=train_layernorm, train_pooler=train_pooler)
    pooler = parameter_names_of(model, model.bert.pooler)
    expected = adapter_parameter_names(model) | parameter_names_of(model, model.classifier)
    if train_layernorm:
        expected |= layernorm_names(model)
    if train_pooler:
        expected |= pooler
    assert len(layernorm_names(model)) == 2 * (2 * L + 1) and len(pooler) == 2
    assert trainable_names(model) == expected
    assert adapter_config(model).train_pooler is train_pooler


def test_the_pooler_is_frozen_by_default(make_classifier):
    model = add_adapters(make_classifier(), "houlsby", bottleneck=R)
    assert not any(p.requires_grad for p in model.bert.pooler.parameters())
    assert all(p.requires_grad for p in model.classifier.parameters())
    with pytest.raises(ValueError, match="train_pooler must be True or False"):
        add_adapters(make_classifier(), "houlsby", bottleneck=R, train_pooler="yes")


def test_freezing_on_a_bare_encoder(make_bert):
    model = make_bert()
    add_adapters(model, "pfeiffer", bottleneck=R, train_layernorm=False)
    assert trainable_names(model) == adapter_parameter_names(model)
    model = make_bert()
    add_adapters(model, "pfeiffer", bottleneck=R, train_layernorm=False, train_pooler=True)
    assert trainable_names(model) == adapter_parameter_names(model) | parameter_names_of(model, model.pooler)


def test_set_trainable_methods(make_classifier):
    model = make_classifier()
    everything = {name for name, _ in model.named_parameters()}
    head = parameter_names_of(model, model.classifier)
    pooler = parameter_names_of(model, model.bert.pooler)
    layers = model.bert.encoder.layer

    assert trainable_names(set_trainable(model, "full")) == everything
    assert trainable_names(set_trainable(model, "full", train_pooler=False)) == everything
    assert trainable_names(set_trainable(model, "head")) == head
    assert trainable_names(set_trainable(model, "head", train_pooler=True)) == head | pooler
    assert trainable_names(apply_method(model, "head", train_pooler=True)) == head | pooler
    assert trainable_names(apply_method(model, "layernorm", train_pooler=True)) == head | pooler | layernorm_names(model)
    assert trainable_names(set_trainable(model, "layernorm")) == head | layernorm_names(model)
    assert trainable_names(set_trainable(model, "top_k", top_k=1)) == head | parameter_names_of(model, layers[2])
    assert trainable_names(set_trainable(model, "top_k", top_k=2)) == head | parameter_names_of(model, layers[1], layers[2])
    assert trainable_names(apply_method(model, "top_k", top_k=3)) == head | parameter_names_of(model, *layers)
    for top_k in (0, 4, None, True, 1.0):
        with pytest.raises(PlacementError, match="top_k"):
            set_trainable(model, "top_k", top_k=top_k)
    with pytest.raises(PlacementError, match="method"):
        set_trainable(model, "prefix")
    with pytest.raises(PlacementError, match="method"):
        apply_method(model, "prefix")


def test_apply_method_adds_adapters(make_classifier):
    model = apply_method(make_classifier(), "parallel", bottleneck=R, train_layernorm=False, parallel_scale=2.0)
    assert adapter_config(model).placement == "parallel" and adapter_config(model).parallel_scale == 2.0
    assert not layernorm_names(model) & trainable_names(model)


def test_apply_method_takes_the_adapter_settings_for_every_method_and_refuses_unknown_ones(make_classifier):
    model = apply_method(make_classifier(), "head", bottleneck=R, activation="relu", train_layernorm=False, top_k=1)
    assert adapter_config(model) is None and trainable_names(model) == parameter_names_of(model, model.classifier)
    model = apply_method(make_classifier(), "pfeiffer", bottleneck=R, train_layernorm=False, train_pooler=True)
    assert adapter_config(model).train_pooler and trainable_names(model) == (
        adapter_parameter_names(model) | parameter_names_of(model, model.bert.pooler, model.classifier))
    with pytest.raises(TypeError, match=r"unknown settings \['bottlenek'\]"):
        apply_method(make_classifier(), "full", bottlenek=R)


def test_trainable_summary_counts(make_classifier, bert_config):
    model = make_classifier()
    add_adapters(model, "houlsby", bottleneck=R)
    summary = trainable_summary(model)
    config = bert_config
    adapters = L * 2 * (2 * R * D + R + D)
    layernorm = (2 * L + 1) * 2 * D
    pooler = D * D + D
    classifier = 2 * D + 2
    embeddings = (config.vocab_size + config.max_position_embeddings + config.type_vocab_size) * D
    per_layer = 4 * (D * D + D) + (D * FFN + FFN) + (FFN * D + D)
    other = embeddings + L * per_layer
    assert summary.trainable == {"adapters": adapters, "layernorm": layernorm, "pooler": 0, "classifier": classifier, "other": 0}
    assert summary.frozen == {"adapters": 0, "layernorm": 0, "pooler": pooler, "classifier": 0, "other": other}
    assert summary.total == sum(p.numel() for p in model.parameters())
    assert summary.total_trainable == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert summary.backbone == layernorm + pooler + other
    assert summary.percent_of_backbone == pytest.approx(100 * (adapters + layernorm + classifier) / (layernorm + pooler + other))
    assert summary.as_dict()["total"] == summary.total
    assert all(group in str(summary) for group in GROUPS)

    with_pooler = trainable_summary(add_adapters(make_classifier(), "houlsby", bottleneck=R, train_pooler=True))
    assert with_pooler.trainable["pooler"] == pooler and with_pooler.frozen["pooler"] == 0
    assert with_pooler.total_trainable - summary.total_trainable == D * D + D

    set_trainable(model, "full")
    full = trainable_summary(model)
    assert sum(full.frozen.values()) == 0 and full.total == summary.total


# ---------------------------------------------------------------------------------------------------
# near identity and step zero in the whole model
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("placement", ["houlsby", "pfeiffer", "parallel"])
def test_zero_up_logits_equal_the_backbone(make_classifier, batch, placement):
    base, model = make_classifier(), make_classifier()
    add_adapters(model, placement, bottleneck=R, init="zero_up")
    difference = (logits_of(model, batch) - logits_of(base, batch)).abs().max().item()
    assert difference <= 1e-6


def _adds_in_another_order(model: nn.Module) -> nn.Module:
    """The model with every dense layer's output moved by about one float32 ulp, as another summation order
    of the same product moves it (another kernel, split or alignment chosen at run time)."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.register_forward_hook(lambda _m, _a, out: out + out.abs() * 2.0 ** -23)
    return model


@pytest.mark.parametrize("placement", ["houlsby", "pfeiffer", "parallel"])
def test_zero_up_adds_exactly_zero_whatever_order_the_backbone_adds_in(make_classifier, batch, placement):
    """Lab 5's claim holds by construction: each zero-up adapter adds exactly 0, read where it is made. Two forward
    passes of two copies are the backbone's only to round-off: a bitwise comparison of their logits (what lab 5
    once printed) fails as soon as the copies add in another order."""
    base = make_classifier()
    model = add_adapters(_adds_in_another_order(make_classifier()), placement, bottleneck=R, init="zero_up")
    added, logits = largest_correction(model, {k: v for k, v in batch.items() if k != "labels"})
    assert added == 0.0
    assert not torch.equal(logits, logits_of(base, batch))  # the old bitwise check would print False here
    assert (logits - logits_of(base, batch)).abs().max().item() < 1e-5


def test_largest_correction_sees_a_nonzero_adapter_and_needs_adapters(make_classifier, batch):
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with pytest.raises(PlacementError, match="no adapters"):
        largest_correction(make_classifier(), inputs)
    model = add_adapters(make_classifier(), "pfeiffer", bottleneck=R, init="houlsby", init_scale=1e-2)
    added, _ = largest_correction(model, inputs)
    with torch.no_grad():
        expected = max(float(out.adapter.delta(u).abs().max()) for u, out in _adapter_inputs(model, inputs))
    assert added == pytest.approx(expected, rel=1e-6) and added > 0
    assert all(not out.adapter.up._forward_hooks for _, _, out in adapted_outputs(model))  # hooks removed


def _adapter_inputs(model, inputs):
    """(u, output) for every adapted sublayer: the input its adapter read, recomputed by hand (Pfeiffer's z)."""
    seen = []
    hooks = [out.register_forward_hook(
        lambda m, args, _out: seen.append((m.LayerNorm(m.dropout(m.dense(args[0])) + args[1]), m)))
        for _, _, out in adapted_outputs(model)]
    with torch.no_grad():
        model(**inputs)
    for hook in hooks:
        hook.remove()
    return seen


def test_houlsby_logit_change_grows_with_init_scale(make_classifier, batch):
    """Each adapter's correction is ≈ ½σ²·W̃_up W̃_down h (see test_adapter), so at small σ the logits
    move by ∝ σ²: a factor 100 per decade, and monotonically up to σ = 0.1."""
    base = make_classifier(dtype=torch.float64)
    reference = logits_of(base, batch)
    changes = []
    for scale in (1e-4, 1e-3, 1e-2, 1e-1):
        model = copy.deepcopy(base)
        torch.manual_seed(7)  # the same draw at every scale
        add_adapters(model, "houlsby", bottleneck=R, init="houlsby", init_scale=scale)
        changes.append((logits_of(model, batch) - reference).abs().max().item())
    assert all(a < b for a, b in zip(changes, changes[1:])), changes
    assert changes[1] / changes[0] == pytest.approx(100, rel=0.1), changes
    assert changes[0] > 0


def test_zero_up_step_zero_in_bert(make_classifier, batch):
    model = make_classifier(dtype=torch.float64)
    add_adapters(model, "houlsby", bottleneck=R, init="zero_up")
    adapters = [a.adapter for _, _, a in adapted_outputs(model)]
    start = {id(a): (a.down.weight.detach().clone(), a.up.weight.detach().clone()) for a in adapters}
    seen = {}

    def keep(module, args, output):
        output.retain_grad()
        seen[id(module)] = (args[0].detach(), output)

    handles = [a.register_forward_hook(keep) for a in adapters]
    model(**batch).loss.backward()
    for a in adapters:
        h, output = seen[id(a)]
        delta = output.grad.reshape(-1, D)  # ∂L/∂(adapter output), read off the graph independently
        f = gelu(h.reshape(-1, D) @ a.down.weight.detach().T + a.down.bias.detach())
        assert torch.count_nonzero(a.down.weight.grad) == 0
        torch.testing.assert_close(a.up.weight.grad, delta.T @ f, rtol=1e-9, atol=1e-14)
        assert a.up.weight.grad.abs().max() > 0

    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    optimizer.step()
    optimizer.zero_grad()
    model(**batch).loss.backward()
    for a in adapters:
        assert a.down.weight.grad.abs().max() > 0
    optimizer.step()
    for handle in handles:
        handle.remove()
    for a in adapters:
        down0, up0 = start[id(a)]
        assert not torch.equal(a.down.weight, down0) and not torch.equal(a.up.weight, up0)
