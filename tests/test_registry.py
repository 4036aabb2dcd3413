"""The method registry: each method declared once, and everything else asking it.

A throwaway method registered here — and nowhere else — trains from the command line, saves and loads
its set and gets its own run keys (tests/test_run_keys_pfeiffer.py checks that every stored reference run
keeps its key); (IA)³, the method added through the registry alone, starts as the backbone, merges exactly
and counts in closed form.
"""

from __future__ import annotations

import json

import pytest
import torch
from transformers import BertForSequenceClassification

from adapterlab import methods
from adapterlab.cli import OK, build_parser, main
from adapterlab.methods.checkpoints import load_adapter_set, save_adapter_set, saved_parameters
from adapterlab.methods.counts import method_counts
from adapterlab.methods.ia3 import merge_ia3
from adapterlab.methods.registry import Method, SavedSet
from adapterlab.model.trainable import train_only, trainable_summary
from adapterlab.runs.store import key_settings
from adapterlab.training import TrainConfig
from adapterlab.training.backbones import TINY, load_backbone


FAST = ["--backbone", TINY, "--batch-size", "16", "--max-train", "64", "--max-eval", "32", "--no-progress", "--steps", "3"]


pytestmark = pytest.mark.usefixtures("toy_data_only")


def test_a_key_holds_only_the_settings_its_method_reads():
    lora = key_settings(TrainConfig(method="lora", lora_rank=4))
    assert lora["lora_rank"] == 4 and "bottleneck" not in lora and "top_k" not in lora
    assert key_settings(TrainConfig(method="full", bottleneck=8)) == key_settings(TrainConfig(method="full", bottleneck=64))
    assert "train_pooler" not in key_settings(TrainConfig(method="full"))
    # A setting added after runs were stored enters a key only away from its default.
    assert "validation_rows" not in key_settings(TrainConfig())
    assert key_settings(TrainConfig(validation_rows=100))["validation_rows"] == 100


@pytest.fixture
def throwaway():
    """A method declared through the registry alone: train the attention's query weights, save them."""
    attribute = "throwaway_marker"

    def prepare(model, train_pooler=False):
        object.__setattr__(model, attribute, {"train_pooler": train_pooler})
        return train_only(model, lambda name, group: name.endswith("attention.self.query.weight"), train_pooler)

    def holds(entry, name, group):
        return group == "classifier" or name.endswith("attention.self.query.weight") or (
            group == "pooler" and entry["train_pooler"])

    def rebuild(model, entry):
        prepare(model, **entry)
        return lambda: object.__delattr__(model, attribute)

    saved = SavedSet("throwaway", "throwaway", lambda model: getattr(model, attribute, None), holds, rebuild, dict)
    methods.register(Method("throwaway", "Queries only", "the query weights", learning_rate=1e-3,
                            learning_rates=(1e-3,), prepare=prepare, saved=saved))
    yield "throwaway"
    methods.unregister("throwaway")


def test_a_method_registered_alone_trains_from_the_command_line_and_loads_again(throwaway, tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--method", throwaway, "--out", str(out), *FAST]) == OK
    report = json.loads((out / "metrics.json").read_text())
    assert report["config"]["method"] == throwaway and report["checkpoint"]
    fresh = load_backbone(TINY, num_labels=2)[0]
    load_adapter_set(fresh, out)
    trained = {n for n, p in fresh.named_parameters() if p.requires_grad}
    assert trained and all(n.endswith("query.weight") or n.startswith("classifier.") for n in trained)
    # Its key holds the pooler switch it reads and none of the other methods' settings.
    assert set(key_settings(TrainConfig(method=throwaway))) >= {"train_pooler"}
    assert "bottleneck" not in key_settings(TrainConfig(method=throwaway))


def test_every_training_subcommand_takes_the_same_settings_under_the_same_names():
    parser = build_parser()
    subparsers = parser._subparsers._group_actions[0].choices
    flags = {name: {s for a in subparsers[name]._actions for s in a.option_strings}
             for name in ("train", "sweep", "ablate")}
    shared = {"--lr", "--steps", "--epochs", "--batch-size", "--eval-every", "--bottleneck", "--init-scale",
              "--lora-rank", "--lora-alpha", "--top-k", "--train-pooler", "--precision", "--validation-rows"}
    for command, options in flags.items():
        assert shared <= options, (command, shared - options)
    assert "--seed" in flags["train"] and "--seeds" in flags["sweep"] and "--seeds" in flags["ablate"]


@pytest.fixture
def classifier(bert_config):
    torch.manual_seed(0)
    return BertForSequenceClassification(bert_config).eval()


def outputs(model, batch):
    """The last hidden states and the logits of a batch."""
    out = model(**batch, output_hidden_states=True)
    return torch.cat([out.hidden_states[-1].flatten(), out.logits.flatten()])


def test_ia3_starts_as_the_backbone_and_merges_exactly(classifier, batch, bert_config):
    before = outputs(classifier, batch)
    methods.apply_method(classifier, "ia3")
    assert torch.equal(outputs(classifier, batch), before)  # vectors of ones
    with torch.no_grad():
        for name, parameter in classifier.named_parameters():
            if name.endswith("ia3_scale"):
                parameter.uniform_(0.5, 1.5)
    changed = outputs(classifier, batch)
    assert (changed - before).abs().max() > 5e-3  # three orders above the merge tolerance below
    reference = BertForSequenceClassification(bert_config)
    merged = merge_ia3(classifier)
    assert [n for n, _ in merged.named_parameters()] == [n for n, _ in reference.named_parameters()]
    assert torch.allclose(outputs(merged, batch), changed, atol=1e-5)


def test_ia3_counts_in_closed_form_and_saves_only_its_vectors(classifier, tmp_path, bert_config):
    config = bert_config
    methods.apply_method(classifier, "ia3")
    summary = trainable_summary(classifier)
    assert summary.trainable["adapters"] == method_counts(config, "ia3")["adapters"] == \
        config.num_hidden_layers * (2 * config.hidden_size + config.intermediate_size)
    assert sorted(saved_parameters(classifier)) == sorted(n for n, p in classifier.named_parameters() if p.requires_grad)
    with torch.no_grad():
        for parameter in saved_parameters(classifier).values():
            parameter.uniform_(0.5, 1.5)
    save_adapter_set(classifier, tmp_path / "set")
    torch.manual_seed(0)  # the classifier fixture's backbone again, vectors at one
    fresh = BertForSequenceClassification(config).eval()
    load_adapter_set(fresh, tmp_path / "set")
    assert fresh.state_dict().keys() == classifier.state_dict().keys()
    assert all(torch.equal(fresh.state_dict()[n], t) for n, t in classifier.state_dict().items())


def test_unknown_method_names_every_registered_method():
    with pytest.raises(ValueError, match="ia3"):
        TrainConfig(method="ia4")
