"""Shared fixtures: tiny random BERT models, seeded and in eval mode, so every test runs in milliseconds.

The factories return a fresh model per call; the same seed gives the same weights, so two calls make
two independent but identical models (one to adapt, one to compare against).
"""

from __future__ import annotations

import pytest
import torch
import transformers

TINY_BERT = dict(
    vocab_size=100,
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
    type_vocab_size=2,
)


def tiny_bert_config(**overrides) -> transformers.BertConfig:
    """A 3-layer BERT with d = 32, 4 heads, FFN width 64 and a 100-token vocabulary."""
    return transformers.BertConfig(**{**TINY_BERT, **overrides})


def _build(model_class, seed: int, dtype: torch.dtype, **overrides):
    torch.manual_seed(seed)
    model = model_class(tiny_bert_config(**overrides))
    return model.to(dtype).eval()


@pytest.fixture
def bert_config() -> transformers.BertConfig:
    return tiny_bert_config()


@pytest.fixture
def make_bert():
    """make_bert(seed=0, dtype=torch.float32, **config_overrides) -> a tiny BertModel in eval mode."""

    def factory(seed: int = 0, dtype: torch.dtype = torch.float32, **overrides) -> transformers.BertModel:
        return _build(transformers.BertModel, seed, dtype, **overrides)

    return factory


@pytest.fixture
def make_classifier():
    """make_classifier(seed=0, dtype=torch.float32, num_labels=2, **config_overrides) ->
    a tiny BertForSequenceClassification in eval mode."""

    def factory(
        seed: int = 0, dtype: torch.dtype = torch.float32, num_labels: int = 2, **overrides
    ) -> transformers.BertForSequenceClassification:
        return _build(transformers.BertForSequenceClassification, seed, dtype, num_labels=num_labels, **overrides)

    return factory


@pytest.fixture
def batch() -> dict:
    """Two sequences of 7 tokens, the second padded after 5, with labels for a 2-way task."""
    generator = torch.Generator().manual_seed(1234)
    input_ids = torch.randint(1, TINY_BERT["vocab_size"], (2, 7), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 5:] = 0
    input_ids[1, 5:] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": torch.tensor([0, 1])}


@pytest.fixture(autouse=True)
def own_run_store(tmp_path_factory, monkeypatch):
    """Every test stores its training runs in a fresh folder, never in the project's runs/store."""
    monkeypatch.setenv("ADAPTERLAB_RUNS", str(tmp_path_factory.mktemp("runs")))


@pytest.fixture(autouse=True)
def fp32_and_own_probe_cache(tmp_path_factory, monkeypatch):
    """Precision "auto" means fp32 in tests, so that no number depends on how fast this CPU computes bf16,
    and precision probes are cached in a fresh folder, never in the user's cache."""
    monkeypatch.setenv("ADAPTERLAB_PRECISION", "fp32")
    monkeypatch.setenv("ADAPTERLAB_CACHE", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture
def toy_data_only(monkeypatch):
    """The project's toy sets only: no GLUE folder from the environment, no hub probe. A module that trains
    or loads data asks for it with ``pytestmark = pytest.mark.usefixtures("toy_data_only")``."""
    monkeypatch.delenv("ADAPTERLAB_DATA", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _reported_group(nodeid: str) -> str:
    path = nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        return "labs under nbval"
    return "browser tests" if path.startswith("tests/browser/") else "package tests"


def pytest_terminal_summary(terminalreporter):
    """The time each group of tests took (setup, call and teardown of every test, summed over the workers), so
    that a run that grows shows which group grew."""
    seconds, counts = {}, {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) in ("setup", "call", "teardown") and hasattr(report, "duration"):
                group = _reported_group(report.nodeid)
                seconds[group] = seconds.get(group, 0.0) + report.duration
                counts.setdefault(group, set()).add(report.nodeid)
    if seconds:
        terminalreporter.section("time per group")
        for group in ("package tests", "labs under nbval", "browser tests"):
            if group in seconds:
                minutes, rest = divmod(round(seconds[group]), 60)
                terminalreporter.write_line(f"{group:<17} {len(counts[group]):>5} tests  {minutes:>3} min {rest:02d} s")
