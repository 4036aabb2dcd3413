"""A task of the user's own CSV/TSV/JSON files: read in memory from the bytes fingerprinted, checked as GLUE's files
are (each bad row named), keyed by the files' fingerprint, trained and evaluated from the command line, and nothing
written outside the run."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest
import torch
from adapterlab.backbones import TINY, load_backbone
from adapterlab.checkpoints import load_adapter_set

from adapterlab.cli import OK, USAGE, main
from adapterlab.training import data
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
    assert "9 of the dev file's 9 rows also occur word for word in the train file" in capsys.readouterr().err
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
    data._OWN_TASKS.pop(spec_name)  # a new process knows only GLUE's tasks
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


def _fifo(path):
    path.unlink()
    os.mkfifo(path)


def _folder(path):
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize(("damage", "message"), [
    (lambda train, dev: _write_csv(dev, [("fine", "maybe")]), "dev.csv: row 1: label 'maybe' is outside the task's "),
    (lambda train, dev: _write_csv(dev, [("fine", "pos"), ("gap", "")]), "dev.csv: row 2: the label column 'sent.* empty"),
    (lambda train, dev: _write_csv(train, [*ROWS, ("gap", "")]), "train.csv: row 25: the label column .* empty"),
    (lambda train, dev: _write_csv(dev, [("fine", "pos")], header=("text", "text")), "no column 'sentiment'"),
    (lambda train, dev: dev.write_text('text,sentiment\n"fine,pos\n'), r"dev.csv, line 2: unexpected end of data"),
    (lambda train, dev: dev.write_text("text;sentiment\nfine;pos\n"), "separated by ;, not commas"),
    (lambda train, dev: dev.write_text('text;sentiment\nfine;pos\n"a; b" and ""c"";neg\n'), "line 1: its header"),
    (lambda train, dev: _write_csv(train, [*ROWS, ("fine", "Pos")]), "'Pos' and 'pos' differ only in capitals"),
    (lambda train, dev: dev.write_text("text,sentiment\n"), "dev.csv: no data rows after the header"),
    (lambda train, dev: dev.write_text("text,sentiment\nfine,pos,extra\n"), "row 1 has 3 fields split by commas"),
    (lambda train, dev: _fifo(dev), "dev.csv: this is a named pipe"),
    (lambda train, dev: _folder(dev), "dev.csv: this is a folder"),
    (lambda train, dev: _write_csv(dev, [("fine", "pos")], header=("sentence", "sentiment")), "no column 'text'"),
    (lambda train, dev: dev.write_bytes(b""), "empty file"),
    (lambda train, dev: dev.write_bytes("text,sentiment\nfine,pos\ncaf\u00e9,pos\n".encode("latin-1")),
     "dev.csv, line 3: not UTF-8"),
    (lambda train, dev: _write_csv(train, [(t, "pos") for t, _ in ROWS]), "one value"),
])
def test_bad_files_are_one_clear_error(damage, message, files):
    train, dev = files
    damage(train, dev)
    with pytest.raises(DataError, match=message):
        own_task(train, dev, ["text"], "sentiment")


@pytest.mark.parametrize(("line", "message"), [
    ('{"text": "fine", "sentiment": null}', "row 2: the label column 'sentiment' is empty"),
    ('{"text": "fine", "sentiment": 1e30}', r"row 2: the label column 'sentiment' holds a number \(1e\+30\)"),
    ('{"text": 42, "sentiment": "pos"}', r"row 2: the text column 'text' is a number \(42\), not text"),
    ('{"text": ["a", "b"], "sentiment": "pos"}', "row 2: the text column 'text' is a list"),
    ('{"text": "fine", "sentiment": "pos"', "dev.jsonl, line 2: not a JSON object"),
    ('["fine", "pos"]', "row 2 is a list, not an object of columns"),
])
def test_bad_json_rows_are_named_by_row(line, message, files, tmp_path):
    train, _ = files
    dev = tmp_path / "dev.jsonl"
    dev.write_text(json.dumps({"text": "good", "sentiment": "neg"}) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=message):
        own_task(train, dev, ["text"], "sentiment")


def test_a_column_that_is_both_text_and_label_is_refused(files):
    train, dev = files
    with pytest.raises(DataError, match="both a text column and the label column"):
        own_task(train, dev, ["sentiment"], "sentiment")


def test_a_glue_style_tsv_keeps_its_bare_quotes(tmp_path, files):
    _, dev = files
    rows = [('he said "no" and left', "neg"), ('"a classic," she said', "pos"), ('a "classic', "pos")] * 3
    tsv = tmp_path / "train.tsv"
    tsv.write_text("text\tsentiment\n" + "".join(f"{t}\t{y}\n" for t, y in rows), encoding="utf-8")
    split = load_split(own_task(tsv, dev, ["text"], "sentiment"), "train")
    assert split.texts == [t for t, _ in rows]


def test_the_rows_read_are_the_bytes_fingerprinted_after_an_edit_that_keeps_size_and_time(files):
    train, dev = files
    before = own_task(train, dev, ["text"], "sentiment")
    assert load_split(before, "train").labels[0] == 1  # "pos"
    stat = train.stat()
    train.write_bytes(train.read_bytes().replace(b"film,pos", b"film,neg", 1))  # the same size
    os.utime(train, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same time, as `cp -p` or a restore leave it
    after = own_task(train, dev, ["text"], "sentiment")
    assert after.name != before.name
    assert load_split(after, "train").labels[0] == 0  # the edited row, under the new fingerprint
    assert load_split(before, "train").labels[0] == 1  # the old name still stands for the old rows


def test_own_task_flags_and_task_together_are_refused(files, tmp_path, capsys):
    train, dev = files
    own = ["--train-file", str(train), "--dev-file", str(dev), "--text-column", "text", "--label-column", "sentiment"]
    assert main(["train", "--out", str(tmp_path / "run"), "--task", "cola", "--backbone", TINY, *own]) == USAGE
    assert "--task cola and your own files" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_evaluate_on_other_files_names_both_fingerprints(files, tmp_path, capsys):
    train, dev = files
    own = ["--dev-file", str(dev), "--text-column", "text", "--label-column", "sentiment"]
    assert main(["train", "--out", str(tmp_path / "run"), "--backbone", TINY, "--bottleneck", "4", "--no-progress",
                 "--max-train", "8", "--train-file", str(train), *own]) == OK
    trained_on = json.loads((tmp_path / "run" / "metrics.json").read_text())["task"]
    other = _write_csv(tmp_path / "other.csv", ROWS[1:])
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(tmp_path / "run"), "--train-file", str(other), *own]) == USAGE
    error = capsys.readouterr().err
    assert "not the files the adapter set" in error and trained_on in error and "--task" not in error.split(";")[0]
    assert own_task(other, dev, ["text"], "sentiment").name in error
    relabelled = _write_csv(tmp_path / "relabelled.csv", [(t, {"pos": "yes", "neg": "no"}[y]) for t, y in ROWS])
    assert main(["evaluate", "--checkpoint", str(tmp_path / "run"), "--train-file", str(relabelled), *own]) == USAGE
    error = capsys.readouterr().err  # the files' fingerprint, not the dev labels the other train file lacks
    assert "not the files the adapter set" in error and "outside the task's classes" not in error


def test_training_on_own_files_writes_nothing_outside_out_with_an_unwritable_home(files, tmp_path):
    train, dev = files
    home = tmp_path / "home"
    home.write_text("a file, so that nothing can be written beneath it (a read-only folder does not stop root)")
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("HF_", "XDG_", "TRANSFORMERS_", "ADAPTERLAB_"))}
    env.update(HOME=str(home), HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(sys.path))
    before = sorted(tmp_path.rglob("*"))
    done = subprocess.run([sys.executable, "-m", "adapterlab", "train", "--out", str(tmp_path / "run"), "--backbone",
                           TINY, "--bottleneck", "4", "--no-progress", "--max-train", "8", "--train-file", str(train),
                           "--dev-file", str(dev), "--text-column", "text", "--label-column", "sentiment"],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == OK, done.stderr
    made = [path for path in sorted(tmp_path.rglob("*")) if path not in before]
    assert made and all(path.is_relative_to(tmp_path / "run") for path in made), made


def test_an_own_task_is_found_by_name_but_never_joins_glues_table(files):
    """GLUE's table is what --task offers and every list of tasks names; an own task registered in the process
    must not join it (a later parser would offer `--task own-…`, which only the files can make)."""
    glue = dict(TASKS)
    spec = own_task(*files, ["text"], "sentiment")
    assert data.get_task(spec.name) is spec and TASKS == glue


@pytest.mark.parametrize("metric, key", [("f1", "f1"), ("mcc", "matthews")])
def test_an_own_task_scored_by_f1_or_mcc_reports_it_computed_by_hand_and_keys_the_run_by_it(files, tmp_path, capsys,
                                                                                            metric, key):
    from sklearn.metrics import f1_score, matthews_corrcoef

    train, dev = files
    own = ["--train-file", str(train), "--dev-file", str(dev), "--text-column", "text", "--label-column", "sentiment"]
    assert main(["train", "--out", str(tmp_path / "run"), "--backbone", TINY, "--bottleneck", "4", "--batch-size", "8",
                 "--no-progress", "--metric", metric, *own]) == OK
    report = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert report["task"] != own_task(train, dev, ["text"], "sentiment").name, "another metric, another task key"
    assert main(["evaluate", "--checkpoint", str(tmp_path / "run"), *own]) == USAGE  # scored otherwise: refused
    assert "--metric" in capsys.readouterr().err
    assert main(["evaluate", "--checkpoint", str(tmp_path / "run"), "--metric", metric, *own]) == OK
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert list(result["metrics"])[0] == key and report["metrics"][key] == result["metrics"][key]
    model, tokenizer, _ = load_backbone(TINY, num_labels=2, seed=0)
    load_adapter_set(model, tmp_path / "run")
    batch = tokenizer([text for text, _ in ROWS[:9]], padding=True, return_tensors="pt")
    with torch.no_grad():
        predicted = model.eval()(**batch).logits.argmax(-1).tolist()
    truth = [["neg", "pos"].index(label) for _, label in ROWS[:9]]  # "pos", the second class, is F1's class
    by_hand = f1_score(truth, predicted, zero_division=0) if metric == "f1" else matthews_corrcoef(truth, predicted)
    assert result["metrics"][key] == pytest.approx(by_hand)


def test_f1_on_more_than_two_classes_and_metric_beside_a_glue_task_are_refused(tmp_path, capsys):
    three = [(text, label) for (text, _), label in zip(ROWS, ["a", "b", "c"] * 8)]
    train, dev = _write_csv(tmp_path / "t.csv", three), _write_csv(tmp_path / "d.csv", three[:6])
    with pytest.raises(DataError, match="holds 3 classes .*--metric accuracy or mcc"):
        own_task(train, dev, ["text"], "sentiment", metric="f1")
    assert own_task(train, dev, ["text"], "sentiment", metric="mcc").metric == "matthews"
    assert main(["train", "--out", str(tmp_path / "run"), "--task", "sst2", "--metric", "f1", "--backbone", TINY]) == USAGE
    assert "--metric f1 scores your own task" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_set_trained_on_own_files_exports_with_its_label_names(tmp_path, capsys):
    """The classes of a task of your own files are known only while its files are read: train records them in the
    set, so that an export names the classifier's rows "contradict" and "entail", not LABEL_0 and LABEL_1."""
    from adapterlab.interop.convert import export_set, import_set

    rows = [(f"premise {i}", f"hypothesis {i}", ("entail", "contradict")[i % 2]) for i in range(16)]
    train = _write_csv(tmp_path / "train.csv", rows, header=("premise", "hypothesis", "label"))
    dev = _write_csv(tmp_path / "dev.csv", rows[:6], header=("premise", "hypothesis", "label"))
    own = ["--train-file", str(train), "--dev-file", str(dev), "--text-column", "premise", "hypothesis",
           "--label-column", "label"]
    for method, target in (("houlsby", "adapterhub"), ("lora", "peft")):
        run = tmp_path / method
        assert main(["train", "--out", str(run), "--backbone", TINY, "--method", method, "--batch-size", "8",
                     "--no-progress", "--max-steps", "2", *own]) == OK
        out = export_set(run, target, tmp_path / f"{method}-{target}",  # under its default name
                         backbone_tensors=target == "adapterhub")
        record = json.loads((out / "adapterlab_export.json").read_text())
        assert record["id2label"] == {"0": "contradict", "1": "entail"}, record["id2label"]  # the classes, sorted
        if target == "adapterhub":
            assert json.loads((out / "head_config.json").read_text())["label2id"] == {"contradict": 0, "entail": 1}
        # and back: the set keeps its task and names, and evaluate scores it given the same files
        back, summary = import_set(out, tmp_path / f"{method}-back")
        assert summary["task"] == record["task"] and "--train-file" in summary["notes"][-1]
        assert main(["evaluate", "--checkpoint", str(back), *own]) == OK
        assert main(["evaluate", "--checkpoint", str(run), *own]) == OK
        scores = [json.loads(line)["metrics"] for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
        assert scores[-2] == pytest.approx(scores[-1], abs=1e-6), "the round trip keeps the set's numbers"
