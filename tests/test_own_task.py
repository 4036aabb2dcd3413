"""A task of the user's own CSV/TSV/JSON files: read with `datasets`, checked as GLUE's files are, keyed by the
files' fingerprint, trained and evaluated from the command line."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from adapterlab.backbones import TINY, load_backbone
from adapterlab.checkpoints import load_adapter_set
from adapterlab.cli import OK, USAGE, main
from adapterlab.training.data import TASKS, DataError, load_split, own_task

ROWS = [("a warm and funny film", "pos"), ("dull, slow and far too long", "neg"), ("I loved every minute", "pos"),
        ("a waste of a good cast", "neg"), ("the best thing this year", "pos"), ("nothing works here", "neg")] * 4


pytestmark = pytest.mark.usefixtures("toy_data_only")


def _write_csv(path, rows, header=("text", "sentiment")):
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture
def files(tmp_path):
    return _write_csv(tmp_path / "train.csv", ROWS), _write_csv(tmp_path / "dev.csv", ROWS[:9])


def test_a_csv_task_trains_and_evaluates_from_the_command_line(files, tmp_path, capsys):
    train, dev = files
    own = ["--train-file", str(train), "--dev-file", str(dev), "--text-column", "text", "--label-column", "sentiment"]
    assert main(["train", "--out", str(tmp_path / "run"), "--backbone", TINY, "--bottleneck", "4", "--batch-size", "8",
                 "--no-progress", *own]) == OK
    assert main(["evaluate", "--checkpoint", str(tmp_path / "run"), *own]) == OK
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["task"].startswith("own-") and lines[-2].endswith("on 9 dev rows")
    model, tokenizer, _ = load_backbone(TINY, num_labels=2, seed=0)  # the accuracy, recomputed by hand
    load_adapter_set(model, tmp_path / "run")
    batch = tokenizer([text for text, _ in ROWS[:9]], padding=True, return_tensors="pt")
    with torch.no_grad():
        predicted = model.eval()(**batch).logits.argmax(-1).tolist()
    truth = [["neg", "pos"].index(label) for _, label in ROWS[:9]]
    assert result["metrics"]["accuracy"] == pytest.approx(sum(p == t for p, t in zip(predicted, truth)) / 9)


def test_evaluate_without_the_files_says_which_flags_to_pass(files, tmp_path, capsys):
    train, dev = files
    own = ["--train-file", str(train), "--dev-file", str(dev), "--text-column", "text", "--label-column", "sentiment"]
    assert main(["train", "--out", str(tmp_path / "run"), "--backbone", TINY, "--bottleneck", "4", "--no-progress",
                 "--max-train", "8", *own]) == OK
    spec_name = json.loads((tmp_path / "run" / "metrics.json").read_text())["task"]
    TASKS.pop(spec_name)  # a new process knows only GLUE's tasks
    assert main(["evaluate", "--checkpoint", str(tmp_path / "run")]) == USAGE
    assert "--train-file, --dev-file" in capsys.readouterr().err


def test_the_task_is_keyed_by_the_files_fingerprint(files, tmp_path):
    train, dev = files
    first = own_task(train, dev, ["text"], "sentiment")
    assert own_task(train, dev, ["text"], "sentiment").name == first.name
    assert first.label_names == ("neg", "pos") and first.num_labels == 2
    _write_csv(tmp_path / "other.csv", ROWS[1:])
    assert own_task(tmp_path / "other.csv", dev, ["text"], "sentiment").name != first.name


def test_tsv_and_json_lines_read_the_same_rows_as_csv(files, tmp_path):
    train, dev = files
    tsv = tmp_path / "train.tsv"
    tsv.write_text("text\tsentiment\n" + "".join(f"{t}\t{y}\n" for t, y in ROWS), encoding="utf-8")
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t, "sentiment": y}) + "\n" for t, y in ROWS), encoding="utf-8")
    expected = ([t for t, _ in ROWS], [["neg", "pos"].index(y) for _, y in ROWS])
    for path in (train, tsv, jsonl):
        split = load_split(own_task(path, dev, ["text"], "sentiment"), "train")
        assert (split.texts, split.labels) == expected


def test_a_pair_task_reads_two_text_columns(tmp_path):
    rows = [("he left", "he went away", 1), ("he left", "she sang", 0)] * 3
    train = _write_csv(tmp_path / "pairs.csv", rows, header=("first", "second", "label"))
    split = load_split(own_task(train, train, ["first", "second"], "label"), "dev")
    assert split.texts[:2] == [("he left", "he went away"), ("he left", "she sang")] and split.labels[:2] == [1, 0]


@pytest.mark.parametrize(("damage", "message"), [
    (lambda train, dev: _write_csv(dev, [("fine", "maybe")]), "row 1: label 'maybe' is outside the task's classes"),
    (lambda train, dev: _write_csv(dev, [("fine", "pos")], header=("sentence", "sentiment")), "no column 'text'"),
    (lambda train, dev: dev.write_bytes(b""), "empty file"),
    (lambda train, dev: dev.write_bytes("text,sentiment\ncaf\u00e9,pos\n".encode("latin-1")), "not UTF-8"),
    (lambda train, dev: _write_csv(train, [(t, "pos") for t, _ in ROWS]), "one value"),
])
def test_bad_files_are_one_clear_error(damage, message, files):
    train, dev = files
    damage(train, dev)
    with pytest.raises(DataError, match=message):
        own_task(train, dev, ["text"], "sentiment")


def test_train_on_the_stand_in_with_its_pooler_frozen_warns_in_one_line(files, tmp_path, capsys):
    from adapterlab.backbones import STANDIN, standin_installed

    if not standin_installed():
        pytest.skip(f"the stand-in {STANDIN} is not installed")
    train, dev = files
    own = ["--train-file", str(train), "--dev-file", str(dev), "--text-column", "text", "--label-column", "sentiment"]
    common = ["--backbone", STANDIN, "--bottleneck", "2", "--no-progress", "--max-train", "8", "--max-eval", "4", *own]
    assert main(["train", "--out", str(tmp_path / "frozen"), *common]) == OK
    warned = [line for line in capsys.readouterr().err.splitlines() if "--train-pooler" in line]
    assert len(warned) == 1 and "majority class" in warned[0]
    assert main(["train", "--out", str(tmp_path / "trained"), "--train-pooler", *common]) == OK
    assert "--train-pooler" not in capsys.readouterr().err
