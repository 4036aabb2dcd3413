"""Parameter counts: the paper's numbers, closed forms against models counted here by summing
p.numel() over named parameters, BERT-large on the meta device, and the `count` command.

The expected numbers are written out from the formulas (2rd + r + d, 2d per LayerNorm, d² + d, ...)
or summed from the model here, never taken from adapterlab.counting's output.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from torch import nn
from transformers import BertConfig, BertForSequenceClassification

from adapterlab.cli import main as cli_main
from adapterlab.counting import (
    adapter_params,
    bert_backbone_params,
    bert_counts,
    compare_counts,
    count_model,
    layernorm_params,
    lora_params,
    meta_model,
    model_adapter_params,
)
from adapterlab.placement import AdapterConfig, add_adapters

BERT_BASE = BertConfig()
BERT_LARGE = BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)


def numel(model: nn.Module, keep) -> int:
    """Sum p.numel() over the named parameters whose name passes ``keep``."""
    return sum(p.numel() for name, p in model.named_parameters() if keep(name))


def is_adapter(name: str) -> bool:
    return ".adapter." in name


def layernorm_numel(model: nn.Module) -> int:
    return sum(p.numel() for m in model.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters())


# --------------------------------------------------------------------------------------------------
# Closed forms
# --------------------------------------------------------------------------------------------------


def test_closed_forms_reproduce_the_papers_numbers():
    assert adapter_params(768, 48) == 2 * 48 * 768 + 48 + 768 == 74_544
    assert adapter_params(1024, 64) == 132_160
    assert adapter_params(768, 64, bias=False) == 2 * 64 * 768
    assert model_adapter_params(12, 2, 768, 64) == 24 * (2 * 64 * 768 + 64 + 768) == 2_379_264
    assert model_adapter_params(12, 1, 768, 48) == 12 * 74_544 == 894_528
    assert model_adapter_params(24, 2, 1024, 64) == 48 * 132_160 == 6_343_680
    assert layernorm_params(768, 25) == 25 * 2 * 768 == 38_400
    assert lora_params(8, 768, 3072) == 8 * 768 + 3072 * 8


def test_bert_counts_for_bert_base():
    counts = bert_counts(BERT_BASE, "houlsby", 64)
    assert counts["per_adapter"] == 99_136
    assert counts["adapters"] == 2_379_264
    assert counts["layernorm"] == 38_400
    assert counts["pooler"] == 768 * 768 + 768 == 590_592
    assert counts["classifier"] == 768 * 2 + 2 == 1_538
    # adapter-bert trains adapters, LayerNorms and the classifier; the pretrained pooler stays frozen
    assert counts["total_trainable"] == 2_379_264 + 38_400 + 1_538
    assert counts["backbone"] == 109_482_240  # bert-base-uncased's BertModel, pooler included
    frozen = bert_counts(BERT_BASE, "houlsby", 64, train_layernorm=False)
    assert frozen["total_trainable"] == 2_379_264 + 1_538
    pooler = bert_counts(BERT_BASE, "houlsby", 64, train_pooler=True)
    assert pooler["total_trainable"] == 2_379_264 + 38_400 + 590_592 + 1_538
    assert pooler["pooler"] == counts["pooler"] and pooler["backbone"] == counts["backbone"]
    assert bert_counts(BERT_BASE, AdapterConfig.preset("houlsby", train_pooler=True))["total_trainable"] == (
        pooler["total_trainable"])
    assert bert_counts(BERT_BASE, "pfeiffer", 48)["adapters"] == 894_528
    assert bert_counts(BERT_BASE, "parallel", 48)["adapters"] == 894_528
    assert bert_counts(BERT_BASE, "houlsby", 64, num_labels=3)["classifier"] == 768 * 3 + 3


def test_derived_figures_follow_from_the_trainable_total():
    counts = bert_counts(BERT_BASE, "pfeiffer", 48, train_layernorm=False)
    trainable = 894_528 + 1_538
    assert counts["checkpoint_fp32_mb"] == pytest.approx(trainable * 4 / 1e6)
    assert counts["checkpoint_fp16_mb"] == pytest.approx(trainable * 2 / 1e6)
    assert counts["adam_state_bytes"] == 8 * trainable
    assert counts["adam_state_bytes_full"] == 8 * (109_482_240 + 1_538)
    assert counts["percent_of_backbone"] == pytest.approx(100 * trainable / 109_482_240)


@pytest.mark.parametrize("bad", [{"placement": "serial"}, {"bottleneck": 0}, {"bottleneck": 2.5}, {"num_labels": 0},
                                 {"train_pooler": "no"}])
def test_bert_counts_rejects_bad_input(bad):
    kwargs = {"placement": "houlsby", "bottleneck": 8, **bad}
    with pytest.raises(ValueError, match=next(iter(bad))):
        bert_counts(BERT_BASE, **kwargs)


# --------------------------------------------------------------------------------------------------
# Real models on the meta device
# --------------------------------------------------------------------------------------------------


def test_bert_base_counted_on_the_meta_device():
    houlsby = meta_model(BERT_BASE, "houlsby", 64)
    assert all(p.is_meta for p in houlsby.parameters())
    assert numel(houlsby, is_adapter) == 2_379_264
    assert layernorm_numel(houlsby) == 38_400
    assert sum(isinstance(m, nn.LayerNorm) for m in houlsby.modules()) == 25
    assert numel(houlsby, lambda n: ".pooler." in n) == 590_592
    assert numel(houlsby, lambda n: n.startswith("classifier.")) == 1_538
    assert numel(houlsby, lambda n: n.startswith("bert.") and not is_adapter(n)) == bert_backbone_params(BERT_BASE)
    assert numel(meta_model(BERT_BASE, "pfeiffer", 48), is_adapter) == 894_528


def test_bert_large_is_counted_without_allocating_weights():
    model = meta_model(BERT_LARGE, "houlsby", 64)
    assert all(p.is_meta for p in model.parameters())
    adapters = [m for name, m in model.named_modules() if name.endswith(".adapter")]
    assert len(adapters) == 48
    assert {sum(p.numel() for p in a.parameters()) for a in adapters} == {132_160}
    assert numel(model, is_adapter) == 6_343_680

    report = compare_counts("bert-large", "houlsby", 64)
    assert report.all_match
    assert report.row("per_adapter").counted == 132_160
    assert report.row("adapters").counted == report.row("adapters").closed_form == 6_343_680
    assert report.row("adapters_percent_of_backbone").counted == pytest.approx(1.893, abs=1e-3)  # the paper's ≈1.9 %


def test_count_model_matches_sums_over_parameters():
    model = meta_model(BERT_BASE, "pfeiffer", 16, train_layernorm=False, num_labels=5)
    counts = count_model(model)
    assert counts["adapters"] == numel(model, is_adapter)
    assert counts["n_adapters"] == 12
    assert counts["per_adapter"] == numel(model, lambda n: ".layer.0.output.adapter." in n)
    assert counts["classifier"] == numel(model, lambda n: n.startswith("classifier."))
    assert counts["total_trainable"] == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert counts["total_trainable"] == numel(model, is_adapter) + 768 * 5 + 5
    assert counts["pooler"] == numel(model, lambda n: ".pooler." in n) == 768 * 768 + 768
    with_pooler = count_model(meta_model(BERT_BASE, "pfeiffer", 16, train_layernorm=False, num_labels=5,
                                         train_pooler=True))
    assert with_pooler["total_trainable"] - counts["total_trainable"] == 768 * 768 + 768


SMALL = [
    # (hidden, heads, layers, ffn, r, placement, train_layernorm, num_labels)
    (32, 4, 2, 64, 4, "houlsby", True, 2),
    (32, 4, 3, 64, 1, "pfeiffer", False, 3),
    (48, 6, 1, 96, 16, "parallel", True, 2),
    (64, 8, 4, 128, 7, "houlsby", False, 1),
    (24, 3, 5, 40, 24, "pfeiffer", True, 4),
    (40, 5, 2, 80, 3, "parallel", False, 2),
]


@pytest.mark.parametrize("train_pooler", [False, True])
@pytest.mark.parametrize("d, heads, L, ffn, r, placement, train_layernorm, num_labels", SMALL)
def test_closed_form_equals_a_real_cpu_model(d, heads, L, ffn, r, placement, train_layernorm, num_labels, train_pooler):
    config = BertConfig(
        vocab_size=50, hidden_size=d, num_hidden_layers=L, num_attention_heads=heads, intermediate_size=ffn,
        max_position_embeddings=32, num_labels=num_labels,
    )
    model = add_adapters(BertForSequenceClassification(config), placement, r, train_layernorm=train_layernorm,
                         train_pooler=train_pooler)
    k = {"houlsby": 2, "pfeiffer": 1, "parallel": 1}[placement]
    closed = bert_counts(config, placement, r, train_layernorm, num_labels, train_pooler=train_pooler)
    assert closed["adapters"] == numel(model, is_adapter) == L * k * (2 * r * d + r + d)
    assert closed["layernorm"] == layernorm_numel(model) == (2 * L + 1) * 2 * d
    assert closed["pooler"] == numel(model, lambda n: ".pooler." in n) == d * d + d
    assert closed["total_trainable"] == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert closed["backbone"] == sum(p.numel() for p in model.bert.parameters()) - numel(model, is_adapter)
    report = compare_counts(config, placement, r, train_layernorm, num_labels, train_pooler=train_pooler)
    assert report.all_match, str(report)
    assert report.row("pooler").item == ("pooler (trained)" if train_pooler else "pooler (frozen)")
    assert report.as_dict()["train_pooler"] is train_pooler


@pytest.mark.parametrize(
    "adapters",
    [
        AdapterConfig.preset("houlsby", bottleneck=8, layers=[0, 2]),
        AdapterConfig.preset("parallel", bottleneck=3, bias=False, train_layernorm=False),
        AdapterConfig.preset("pfeiffer", bottleneck=5, layers=[-1], bias=False),
        AdapterConfig.preset("houlsby", bottleneck=4, train_layernorm=False, train_pooler=True),
    ],
)
def test_closed_form_of_an_adapter_config_equals_a_real_cpu_model(adapters):
    """Layers, bias and the placement all come from the one AdapterConfig, for the formula and the model alike."""
    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=32)
    model = add_adapters(BertForSequenceClassification(config), adapters)
    closed = bert_counts(config, adapters)
    assert closed["adapters"] == numel(model, is_adapter)
    assert closed["n_adapters"] == sum(".adapter.down.weight" in name for name, _ in model.named_parameters())
    assert closed["total_trainable"] == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert compare_counts(config, adapters).all_match
    assert bert_counts(config, adapters, bottleneck=2 * adapters.bottleneck)["per_adapter"] > closed["per_adapter"]


def test_a_mismatch_would_show():
    """compare_counts can fail: a model with adapters on some layers only differs from the closed form."""
    with torch.device("meta"):
        model = add_adapters(BertForSequenceClassification(BERT_BASE), "houlsby", 8, layers=[0, 1])
    assert count_model(model)["adapters"] == 4 * adapter_params(768, 8)
    assert count_model(model)["adapters"] != bert_counts(BERT_BASE, "houlsby", 8)["adapters"]


def test_unknown_backbone_lists_the_known_names():
    with pytest.raises(ValueError, match="bert-base, bert-large"):
        compare_counts("gpt-2")


# --------------------------------------------------------------------------------------------------
# The `count` command
# --------------------------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "adapterlab", "count", *args], capture_output=True, text=True, timeout=120
    )


def test_count_command_json_in_a_subprocess():
    result = run_cli("--backbone", "bert-base", "--placement", "houlsby", "--bottleneck", "64", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    rows = {row["key"]: row for row in report["rows"]}
    for key, expected in [
        ("per_adapter", 2 * 64 * 768 + 64 + 768),
        ("adapters", 2_379_264),
        ("layernorm", 38_400),
        ("pooler", 590_592),
        ("classifier", 1_538),
        ("total_trainable", 2_379_264 + 38_400 + 1_538),  # the pooler stays frozen
        ("backbone", 109_482_240),
    ]:
        assert rows[key]["closed_form"] == rows[key]["counted"] == expected, key
        assert rows[key]["match"] is True
    assert report["all_match"] is True


def test_count_command_bad_placement_exits_2_in_a_subprocess():
    result = run_cli("--placement", "sideways")
    assert result.returncode == 2
    assert "placement" in result.stderr and "houlsby" in result.stderr and "sideways" in result.stderr
    assert result.stdout == ""


def test_count_command_table_and_bad_input(capsys):
    assert cli_main(["count", "--placement", "pfeiffer", "--bottleneck", "48", "--frozen-layernorm"]) == 0
    table = capsys.readouterr().out
    assert "894,528" in table and "74,544" in table and "LayerNorms frozen" in table
    assert "pooler (frozen)" in table and f"{894_528 + 768 * 2 + 2:,}" in table
    assert " NO" not in table
    for argv, word in [
        (["count", "--backbone", "gpt-2"], "bert-large"),
        (["count", "--bottleneck", "0"], "bottleneck"),
        (["count", "--num-labels", "-1"], "num_labels"),
    ]:
        assert cli_main(argv) == 2
        captured = capsys.readouterr()
        assert word in captured.err and captured.out == ""
