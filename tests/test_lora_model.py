"""LoRA and BitFit as training methods: where LoRA goes in BERT, what each method trains, the merge, the
closed-form counts against the real model, saving and loading, the run keys, and training runs."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest
import safetensors.torch
import torch
import transformers
from model_probes import architecture, logits

from adapterlab.backbones import TINY, load_backbone
from adapterlab.checkpoints import (
    CONFIG_FILE,
    TENSORS_FILE,
    CheckpointError,
    load_adapter_set,
    manifest_checksum,
    save_adapter_set,
    saved_parameters,
)
from adapterlab.counting import (
    bert_bias_params,
    bert_lora_params,
    compare_method_counts,
    count_model,
    method_counts,
)
from adapterlab.data import load_split, tokenize
from adapterlab.lora import LoRALinear
from adapterlab.lora_model import (
    LoRAConfig,
    add_lora,
    lora_config,
    lora_layers,
    merge_lora,
    remove_lora,
)
from adapterlab.placement import (
    METHODS,
    PlacementError,
    add_adapters,
    apply_method,
    bitfit_settings,
    set_trainable,
    trainable_summary,
)
from adapterlab.training import DEFAULT_LEARNING_RATES, TrainConfig, train


def bert_shape(d: int, L: int, i: int) -> transformers.BertConfig:
    """A small BERT shape: hidden size d, L layers, FFN width i, 4 heads, a 100-token vocabulary."""
    return transformers.BertConfig(vocab_size=100, hidden_size=d, num_hidden_layers=L, num_attention_heads=4,
                                   intermediate_size=i, max_position_embeddings=64)


#: Every dense layer of a BERT layer, by its transformers name.
DENSE = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
         "intermediate.dense", "output.dense")


pytestmark = pytest.mark.usefixtures("toy_data_only")


def trainable_names(model) -> set[str]:
    return {name for name, p in model.named_parameters() if p.requires_grad}


def randomize_lora(model, scale: float = 0.3, seed: int = 7) -> None:
    """Give every B a non-zero value, as training would (B starts at zero)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, _, module in lora_layers(model):
            module.lora_B.copy_(scale * torch.randn(module.lora_B.shape, generator=generator, dtype=module.lora_B.dtype))


# -------------------------------------------------------------------------------------- LoRA in BERT


@pytest.mark.parametrize("targets, paths", [("query_value", DENSE[0:3:2]), ("all_dense", DENSE)])
def test_add_lora_wraps_the_targets_and_starts_as_the_backbone(make_classifier, batch, targets, paths):
    model = add_lora(make_classifier(), rank=4, targets=targets)
    L = len(model.bert.encoder.layer)
    wrapped = {name for name, module in model.named_modules() if isinstance(module, LoRALinear)}
    assert wrapped == {f"bert.encoder.layer.{i}.{path}" for i in range(L) for path in paths}
    assert torch.equal(logits(model, batch), logits(make_classifier(), batch))  # B = 0: exactly the backbone
    assert lora_config(model) == LoRAConfig(4, 8.0, targets, False)
    assert [module.scaling for _, _, module in lora_layers(model)] == [8.0 / 4] * len(wrapped)


@pytest.mark.parametrize("train_pooler", [False, True])
def test_lora_trains_only_its_matrices_and_the_head(make_classifier, train_pooler):
    model = apply_method(make_classifier(), "lora", lora_rank=2, train_pooler=train_pooler, bottleneck=64)
    expected = {f"bert.encoder.layer.{i}.attention.self.{p}.lora_{m}" for i in range(3) for p in ("query", "value")
                for m in "AB"} | {"classifier.weight", "classifier.bias"}
    if train_pooler:
        expected |= {"bert.pooler.dense.weight", "bert.pooler.dense.bias"}
    assert trainable_names(model) == expected


def test_bitfit_trains_every_backbone_bias_and_the_head(make_classifier):
    model = make_classifier()
    biases = {name for name, _ in model.named_parameters() if name.endswith("bias") and "pooler" not in name
              and not name.startswith("classifier")}
    head = {"classifier.weight", "classifier.bias"}
    pooler = {"bert.pooler.dense.weight", "bert.pooler.dense.bias"}
    assert trainable_names(apply_method(model, "bitfit", lora_rank=4, bottleneck=8)) == biases | head
    assert bitfit_settings(model) == {"train_pooler": False}
    assert trainable_names(set_trainable(model, "bitfit", train_pooler=True)) == biases | head | pooler
    assert len(biases) == 1 + 3 * 8  # the embeddings' LayerNorm; q, k, v, attention out, 2 LayerNorms, FFN in, out
    set_trainable(model, "head")
    assert bitfit_settings(model) is None  # the mark follows what trains


def test_merge_gives_the_lora_outputs_and_exactly_the_backbone_architecture(make_classifier, batch):
    original = make_classifier()
    model = add_lora(make_classifier(), rank=4, targets="all_dense")
    randomize_lora(model)
    expected = logits(model, batch)
    assert (expected - logits(original, batch)).abs().max().item() > 0.1  # the update matters
    merged = merge_lora(model)
    assert (logits(merged, batch) - expected).abs().max().item() <= 1e-5
    assert architecture(merged) == architecture(original)  # so its latency is the backbone's
    assert lora_config(merged) is None and all(p.requires_grad for p in merged.parameters())


def test_merge_in_float64_is_exact_to_rounding(make_classifier, batch):
    model = add_lora(make_classifier(dtype=torch.float64), rank=3)
    randomize_lora(model)
    expected = logits(model, batch)
    assert (logits(merge_lora(model), batch) - expected).abs().max().item() <= 1e-12


def test_remove_lora_restores_the_backbone_bit_for_bit(make_classifier, batch):
    model = add_lora(make_classifier(), rank=4)
    randomize_lora(model)
    restored = remove_lora(model)
    assert torch.equal(logits(restored, batch), logits(make_classifier(), batch))
    assert architecture(restored) == architecture(make_classifier())
    model = add_lora(make_classifier(), rank=4)
    randomize_lora(model)
    model.bert.encoder.layer[0].attention.self.query.merge()  # a layer merged by hand is unmerged (up to rounding)
    assert (logits(remove_lora(model), batch) - logits(make_classifier(), batch)).abs().max().item() <= 1e-6


def test_lora_refuses_bad_settings_and_mixing_without_touching_the_model(make_classifier):
    model = make_classifier()
    before = architecture(model)
    for kwargs, message in [(dict(rank=0), "lora_rank"), (dict(alpha=-1.0), "lora_alpha"),
                            (dict(targets="qkv"), "lora_targets"), (dict(train_pooler="no"), "train_pooler")]:
        with pytest.raises(ValueError, match=message):
            add_lora(model, **kwargs)
    assert architecture(model) == before
    add_lora(model)
    with pytest.raises(PlacementError, match="already has LoRA layers"):
        add_lora(model)
    with pytest.raises(PlacementError, match="has adapters"):
        add_lora(add_adapters(make_classifier(), "houlsby", 4))
    with pytest.raises(PlacementError, match="no LoRA layers"):
        merge_lora(make_classifier())
    with pytest.raises(PlacementError, match="needs LoRA layers"):
        set_trainable(make_classifier(), "lora")


# -------------------------------------------------------------------------------------- counting


@pytest.mark.parametrize("d, L, i, r, targets", [
    (32, 3, 64, 1, "query_value"), (32, 3, 64, 4, "all_dense"), (48, 2, 80, 3, "query_value"),
    (48, 2, 80, 5, "all_dense"), (16, 1, 40, 16, "all_dense"),
])
def test_lora_closed_form_equals_the_module_count(d, L, i, r, targets):
    config = bert_shape(d, L, i)
    torch.manual_seed(0)
    model = add_lora(transformers.BertForSequenceClassification(config), rank=r, targets=targets)
    closed, counted = method_counts(config, "lora", lora_rank=r, lora_targets=targets), count_model(model)
    lora = sum(p.numel() for name, p in model.named_parameters() if name.endswith(("lora_A", "lora_B")))
    assert closed["adapters"] == lora == counted["adapters"]
    for key in ("pooler", "classifier", "total_trainable", "backbone"):
        assert closed[key] == counted[key], key
    assert closed["percent_of_backbone"] == pytest.approx(counted["percent_of_backbone"], rel=1e-12)


@pytest.mark.parametrize("d, L, i, train_pooler", [(32, 3, 64, False), (48, 2, 80, True), (16, 1, 40, False)])
def test_bitfit_closed_form_equals_the_module_count(d, L, i, train_pooler):
    config = bert_shape(d, L, i)
    model = apply_method(transformers.BertForSequenceClassification(config), "bitfit", train_pooler=train_pooler)
    closed, summary = method_counts(config, "bitfit", train_pooler=train_pooler), trainable_summary(model)
    biases = sum(p.numel() for name, p in model.bert.named_parameters() if name.endswith("bias") and "pooler" not in name)
    assert closed["biases"] == biases
    assert closed["total_trainable"] == summary.total_trainable and closed["backbone"] == summary.backbone


def test_bert_base_counts_on_the_meta_device():
    config = transformers.BertConfig()
    with torch.device("meta"):
        model = add_lora(transformers.BertForSequenceClassification(config), rank=8)
    assert bert_lora_params(config, 8) == 294_912 == count_model(model)["adapters"]  # 4·8·768·12: Hu et al.'s 0.3M
    assert bert_bias_params(config) == 102_144  # 12·(7·768 + 3072) + 768: BitFit's ~0.1 M (0.08 %)
    houlsby = method_counts(config, "houlsby", bottleneck=64)
    assert (houlsby["adapters"], houlsby["layernorm"]) == (2_379_264, 38_400)  # the paper's count; 25 norms of 2d
    with pytest.raises(ValueError, match="no closed-form count"):
        method_counts(config, "full")


@pytest.mark.parametrize("backbone, method, targets, train_pooler", [
    ("bert-base", "lora", "query_value", False), ("bert-large", "lora", "all_dense", True),
    ("bert-base", "bitfit", "query_value", True), ("bert-large", "bitfit", "query_value", False),
])
def test_compare_method_counts_matches_every_row_on_the_meta_device(backbone, method, targets, train_pooler):
    rows = compare_method_counts(backbone, method, num_labels=3, train_pooler=train_pooler, lora_rank=16,
                                 lora_targets=targets)
    assert [row.key for row in rows][1:] == ["pooler", "classifier", "total_trainable", "backbone", "percent_of_backbone"]
    assert all(row.match for row in rows), [row for row in rows if not row.match]
    trained = rows[0].counted + rows[2].counted + (rows[1].counted if train_pooler else 0)
    assert rows[3].counted == trained and rows[0].counted > 0


# -------------------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("method, settings", [("lora", dict(lora_rank=4, lora_targets="all_dense")),
                                              ("bitfit", dict(train_pooler=True))])
def test_a_saved_set_loads_into_a_fresh_backbone_and_gives_the_same_outputs(make_classifier, batch, tmp_path,
                                                                           method, settings):
    model = apply_method(make_classifier(), method, **settings)
    with torch.no_grad():  # stand in for training: move every saved tensor
        for tensor in saved_parameters(model).values():
            tensor.add_(0.1 * torch.randn_like(tensor))
    assert set(saved_parameters(model)) == trainable_names(model)
    save_adapter_set(model, tmp_path / "set", extra={"task": "sst2"})
    manifest = json.loads((tmp_path / "set" / CONFIG_FILE).read_text())
    assert manifest["method"] == method and "adapter" not in manifest
    fresh = make_classifier()
    load_adapter_set(fresh, tmp_path / "set")
    assert torch.equal(logits(fresh, batch), logits(model, batch))
    assert trainable_names(fresh) == trainable_names(model)


def test_loading_refuses_a_model_prepared_for_another_method_and_leaves_it_unchanged(make_classifier, tmp_path):
    save_adapter_set(apply_method(make_classifier(), "lora", lora_rank=4), tmp_path / "lora")
    save_adapter_set(apply_method(make_classifier(), "bitfit"), tmp_path / "bitfit")
    other_rank = apply_method(make_classifier(), "lora", lora_rank=2)
    with pytest.raises(CheckpointError, match="already has LoRA layers.*rank: model 2, file 4"):
        load_adapter_set(other_rank, tmp_path / "lora")
    adapters = add_adapters(make_classifier(), "houlsby", 4)
    before = copy.deepcopy(adapters.state_dict())
    for folder, message in [("lora", "holds LoRA layers but the model has adapters"),
                            ("bitfit", "holds a BitFit set but the model has adapters")]:
        with pytest.raises(CheckpointError, match=message):
            load_adapter_set(adapters, tmp_path / folder)
    assert all(torch.equal(before[k], v) for k, v in adapters.state_dict().items())


def test_a_failed_bitfit_load_restores_the_trainable_flags(make_classifier, tmp_path):
    save_adapter_set(apply_method(make_classifier(), "bitfit"), tmp_path / "set")
    model = apply_method(make_classifier(), "head")
    flags = trainable_names(model)
    broken = make_classifier(num_labels=3)  # another head: the backbone check refuses it first
    with pytest.raises(CheckpointError, match="num_labels"):
        load_adapter_set(broken, tmp_path / "set")
    path = tmp_path / "set" / TENSORS_FILE
    tensors = safetensors.torch.load_file(str(path))
    tensors.pop("classifier.bias")
    safetensors.torch.save_file(tensors, str(path))
    manifest = json.loads((tmp_path / "set" / CONFIG_FILE).read_text())
    manifest["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest["checksum"] = manifest_checksum(manifest)
    (tmp_path / "set" / CONFIG_FILE).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"missing \['classifier.bias'\]"):
        load_adapter_set(model, tmp_path / "set")
    assert trainable_names(model) == flags and bitfit_settings(model) is None


# -------------------------------------------------------------------------------------- config, keys, training


def test_train_config_holds_the_lora_settings_and_the_literature_rates():
    config = TrainConfig(method="lora", lora_rank=16, lora_alpha=16.0, lora_targets="all_dense")
    kwargs = config.method_kwargs()
    assert (kwargs["lora_rank"], kwargs["lora_alpha"], kwargs["lora_targets"]) == (16, 16.0, "all_dense")
    assert TrainConfig(method="lora").peak_learning_rate == DEFAULT_LEARNING_RATES["lora"] == 5e-4
    assert TrainConfig(method="bitfit").peak_learning_rate == DEFAULT_LEARNING_RATES["bitfit"] == 1e-3
    assert set(DEFAULT_LEARNING_RATES) == set(METHODS)
    for field, value in [("lora_rank", 0), ("lora_rank", 2.5), ("lora_alpha", 0.0), ("lora_targets", "everything")]:
        with pytest.raises(ValueError, match=field):
            TrainConfig(**{field: value})


@pytest.mark.parametrize("method", ["lora", "bitfit"])
def test_training_changes_only_what_the_method_trains(method):
    model, tokenizer, _ = load_backbone(TINY, seed=0)
    torch.manual_seed(0)
    config = TrainConfig(method=method, lora_rank=4, batch_size=16, max_steps=4, progress=False)
    apply_method(model, method, **config.method_kwargs())
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    data = tokenize(load_split("sst2", "train", source="toy", max_examples=64), tokenizer)
    result = train(model, data, None, config)
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    # (A LoRA layer's A has no gradient while B is zero, at the first step only.)
    assert changed == trainable_names(model)
    assert result.trainable["total_trainable"] == sum(before[name].numel() for name in trainable_names(model))


def test_the_panel_offers_lora_with_r_as_its_rank_and_bitfit_without_r():
    from adapterlab.panel import TrainingPanel

    panel = TrainingPanel(backbone=TINY, stores=[])
    panel.placement.value, panel.bottleneck.value = "lora", 4
    config = panel.settings()
    assert (config.method, config.lora_rank) == ("lora", 4)
    assert not panel.bottleneck.disabled and panel.init_scale.disabled
    panel.placement.value = "bitfit"
    assert panel.settings().method == "bitfit" and panel.bottleneck.disabled and panel.init_scale.disabled
    panel.placement.value = "houlsby"
    assert panel.settings().lora_rank == TrainConfig().lora_rank  # r is the bottleneck again
