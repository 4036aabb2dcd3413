"""Backbones: what each name loads, the offline fallback and its notice, seeding, the hub probe."""

from __future__ import annotations

import pickle
import socket
from pathlib import Path

import huggingface_hub
import pytest
import safetensors.torch
import torch
import transformers

from adapterlab import backbones
from adapterlab.backbones import (
    BERT_BASE,
    BERT_BASE_RANDOM,
    STANDIN,
    TINY,
    BackboneError,
    BackboneInfo,
    load_backbone,
)


@pytest.fixture(scope="module")
def standin():
    return load_backbone(STANDIN, num_labels=3, seed=5)


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """An empty Hugging Face cache, HF_HUB_OFFLINE=1, and a socket that must not be used."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def no_network(*args, **kwargs):
        raise AssertionError("the network was used although HF_HUB_OFFLINE=1")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(backbones, "_notices_printed", set())  # as in a fresh kernel
    return cache


def fake_cached_bert_base(cache, seed=3):
    """Put a tiny BERT under bert-base-uncased in the hub cache layout (refs/main -> snapshots/<rev>)."""
    repo = cache / "models--bert-base-uncased"
    snapshot = repo / "snapshots" / ("0" * 40)
    torch.manual_seed(seed)
    model = transformers.BertForPreTraining(transformers.BertConfig(**backbones.TINY_CONFIG))
    model.save_pretrained(snapshot)
    transformers.AutoTokenizer.from_pretrained(str(backbones.standin_path())).save_pretrained(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    return model


def test_tiny_has_the_documented_shape_and_a_working_tokenizer():
    model, tokenizer, info = load_backbone(TINY, num_labels=3)
    config = model.config
    assert isinstance(model, transformers.BertForSequenceClassification) and not model.training
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads, config.intermediate_size) == (
        2, 32, 4, 64,
    )
    assert model.classifier.out_features == 3
    assert (info.loaded, info.source, info.is_standin, info.pretrained) == (TINY, "random", False, False)
    assert info.num_parameters == sum(p.numel() for p in model.parameters())
    encoded = tokenizer(["a short sentence", "another one"], padding=True, return_tensors="pt")
    assert int(encoded["input_ids"].max()) < config.vocab_size
    assert model(**encoded).logits.shape == (2, 3)


def test_random_backbones_are_seeded_and_leave_the_global_rng_alone():
    state = torch.random.get_rng_state()
    first = load_backbone(TINY, seed=1)[0].state_dict()
    again = load_backbone(TINY, seed=1)[0].state_dict()
    other = load_backbone(TINY, seed=2)[0].state_dict()
    assert torch.equal(state, torch.random.get_rng_state())
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(first["classifier.weight"], other["classifier.weight"])


def test_bert_base_random_has_bert_base_shape_and_parameter_count():
    model, _, info = load_backbone(BERT_BASE_RANDOM)
    d, layers, ffn, vocab, positions = 768, 12, 3072, 30522, 512
    embeddings = (vocab + positions + 2) * d + 2 * d
    layer = 4 * (d * d + d) + (d * ffn + ffn) + (ffn * d + d) + 2 * (2 * d)
    expected = embeddings + layers * layer + (d * d + d) + (d * 2 + 2)
    assert (info.num_layers, info.hidden_size, info.num_parameters) == (layers, d, expected)
    assert not info.pretrained and "random weights" in info.describe()


def test_standin_loads_the_packaged_pretrained_weights(standin):
    model, _, info = standin
    assert (info.loaded, info.source, info.is_standin, info.pretrained) == (STANDIN, "package", True, True)
    assert (info.num_layers, info.hidden_size) == (6, 384) and info.notice == ""
    packaged = safetensors.torch.load_file(str(backbones.standin_path() / "model.safetensors"))
    for name, parameter in model.bert.named_parameters():
        assert torch.equal(parameter, packaged[name]), name
    assert model.classifier.out_features == 3 and not model.training


def test_standin_head_is_seeded_and_the_tokenizer_uncased(standin):
    model, tokenizer, _ = standin
    again = load_backbone(STANDIN, num_labels=3, seed=5)[0]
    other = load_backbone(STANDIN, num_labels=3, seed=6)[0]
    assert torch.equal(model.classifier.weight, again.classifier.weight)
    assert not torch.equal(model.classifier.weight, other.classifier.weight)
    assert tokenizer("Adapters WORK")["input_ids"] == tokenizer("adapters work")["input_ids"]


def test_offline_fallback_loads_the_standin_and_says_so(offline, capsys):
    assert not backbones.bert_base_cached()
    model, _, info = load_backbone(BERT_BASE, seed=0)
    assert (info.requested, info.loaded, info.is_standin, info.source) == (BERT_BASE, STANDIN, True, "package")
    assert model.config.hidden_size == 384
    assert f"not from {BERT_BASE}" in info.notice and "HF_HUB_OFFLINE" in info.notice
    assert info.notice in capsys.readouterr().err
    assert info.describe().startswith(f"Backbone: {STANDIN} (offline stand-in for {BERT_BASE}:")


def test_the_notice_is_printed_once_per_process_and_every_line_still_names_the_standin(offline, capsys):
    """A lab loads its backbone in several cells: the box once, then the one-line reminder in each describe()."""
    infos = [load_backbone(BERT_BASE, seed=seed)[2] for seed in (0, 1, 2)]
    printed = capsys.readouterr().err
    assert infos[0].notice and printed.count("NOTICE:") == 1 and infos[0].notice in printed
    for info in infos:
        assert info.notice == infos[0].notice  # still there for code that wants to show it
        assert f"{STANDIN} (offline stand-in" in info.describe()
    load_backbone(STANDIN)
    assert capsys.readouterr().err == ""  # asked for by name: no notice at all


def test_without_fallback_the_error_says_what_to_do(offline):
    with pytest.raises(BackboneError) as caught:
        load_backbone(BERT_BASE, fallback=False)
    message = str(caught.value)
    assert "connect to the internet once" in message and STANDIN in message


def test_unknown_model_id_offline_is_a_clear_error_not_a_fallback(offline):
    with pytest.raises(BackboneError, match="no-such-org/no-such-model is not in the local Hugging Face cache"):
        load_backbone("no-such-org/no-such-model")


def test_cached_bert_base_is_loaded_from_the_cache(offline):
    reference = fake_cached_bert_base(offline)
    assert backbones.bert_base_cached()
    model, _, info = load_backbone(BERT_BASE, num_labels=2)
    assert (info.loaded, info.source, info.is_standin, info.notice) == (BERT_BASE, "cache", False, "")
    assert torch.equal(
        model.bert.embeddings.word_embeddings.weight, reference.bert.embeddings.word_embeddings.weight
    )
    assert info.describe().startswith(f"Backbone: {BERT_BASE} (from the local cache:")


def pickled_only_folder(folder, marker, seed=3):
    """A save_pretrained folder whose weights are only a pytorch_model.bin that runs code when unpickled."""

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    torch.manual_seed(seed)
    model = transformers.BertForSequenceClassification(transformers.BertConfig(**backbones.TINY_CONFIG))
    model.save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(str(backbones.standin_path())).save_pretrained(folder)
    (folder / "model.safetensors").unlink()
    with open(folder / "pytorch_model.bin", "wb") as file:
        pickle.dump({**model.state_dict(), "payload": Payload()}, file)
    return model


def test_a_folder_with_only_a_pickle_is_refused_without_unpickling(offline, tmp_path):
    """An adapter set names its backbone; a name that is a folder of pickled weights must not be unpickled."""
    marker = tmp_path / "code-ran"
    pickled_only_folder(tmp_path / "backbone", marker)
    loaded = []
    real_load = torch.load
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch, "load", lambda *args, **kwargs: loaded.append(args) or real_load(*args, **kwargs))
        with pytest.raises(BackboneError, match="reads weights only from model.safetensors"):
            load_backbone(str(tmp_path / "backbone"))
    assert not marker.exists() and loaded == []


def test_a_folder_with_safetensors_loads_from_the_folder(offline, tmp_path):
    reference = pickled_only_folder(tmp_path / "backbone", tmp_path / "code-ran")
    safetensors.torch.save_model(reference, str(tmp_path / "backbone" / "model.safetensors"))
    model, _, info = load_backbone(str(tmp_path / "backbone"), num_labels=2)
    assert info.source == "folder" and "from a local folder" in info.describe()
    assert torch.equal(model.bert.embeddings.word_embeddings.weight, reference.bert.embeddings.word_embeddings.weight)
    assert not (tmp_path / "code-ran").exists()


def test_a_cache_with_only_pickled_weights_does_not_count_as_cached(offline):
    fake_cached_bert_base(offline)
    snapshot = offline / "models--bert-base-uncased" / "snapshots" / ("0" * 40)
    (snapshot / "model.safetensors").rename(snapshot / "pytorch_model.bin")
    assert not backbones.bert_base_cached()


def test_offline_environment_skips_the_probe(offline):
    assert backbones.offline_requested() and backbones.hub_reachable() is False


@pytest.mark.parametrize("bad", [{"num_labels": 0}, {"num_labels": 2.0}, {"name": ""}, {"name": None}])
def test_bad_arguments_name_the_argument(bad):
    argument = next(iter(bad))
    with pytest.raises(ValueError, match=argument):
        load_backbone(**{"name": TINY, **bad})


def test_info_is_frozen():
    info = BackboneInfo(TINY, TINY, "random", False, False, 2, 32, 1, "")
    with pytest.raises(AttributeError):
        info.loaded = STANDIN


def test_expected_backbone_says_what_load_backbone_will_load_without_loading_it(offline):
    """Offline with an empty cache, bert-base-uncased (with fallback) turns into the stand-in; with a
    cached copy, or without fallback, or for any other name, the name stays."""
    assert backbones.expected_backbone(BERT_BASE) == STANDIN
    assert load_backbone(BERT_BASE)[2].loaded == STANDIN  # the same answer as loading
    assert backbones.expected_backbone(BERT_BASE, fallback=False) == BERT_BASE
    assert backbones.expected_backbone(STANDIN) == STANDIN
    assert backbones.expected_backbone(TINY) == TINY
    fake_cached_bert_base(offline)
    assert backbones.expected_backbone(BERT_BASE) == BERT_BASE
