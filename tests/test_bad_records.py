"""A stored run that is wrong (an impossible or mistyped score, evaluations without the metric, a seed that is
not an integer, an ``id`` that is not its key's hash) is left out of `tune` with one warning naming the file and
the field: `tune --report` then prints what it prints with that file deleted, and `tune` trains the run again."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import warnings

import pytest

from adapterlab.cli import OK, main
from adapterlab.runs import tuning
from adapterlab.runs.store import RunStore, record_problem
from adapterlab.runs.tuning import PROTOCOLS, Point, Protocol
from adapterlab.training.backbones import TINY

SMALL = Protocol("sst2", validation_rows=40, max_train=64, epochs=1.0, eval_every=2)
POINT = Point("head only", "head")


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """The head-only protocol on the toy data, trained once for every test here."""
    folder = tmp_path_factory.mktemp("tuned") / "store"
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("ADAPTERLAB_DATA", raising=False)
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setitem(PROTOCOLS, "sst2", SMALL)
        tuning.run_protocol("sst2", stores=[RunStore(folder)], backbone=TINY, points=(POINT,), poll_seconds=0.01,
                            log=lambda *a: None)
    return folder


@pytest.fixture(autouse=True)
def small_protocol(monkeypatch):
    monkeypatch.delenv("ADAPTERLAB_DATA", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setitem(PROTOCOLS, "sst2", SMALL)


def tune(store, capsys, *extra) -> tuple[int, str, list[str]]:
    """`adapterlab tune --report` (or, with ``extra``, what they say) on ``store``: exit code, output with the
    store's path taken out, and the warnings."""
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(["tune", *(extra or ["--report"]), "--task", "sst2", "--backbone", TINY, "--points", POINT.label,
                     "--store", str(store)])
    return code, capsys.readouterr().out.replace(str(store), "STORE"), [str(w.message) for w in caught]


def run_path(store, rate: float, seed: int):
    """The file of the stored run at this rate and seed."""
    path, = [path for path in store.glob("*.json") if (lambda s: (s["peak_learning_rate"], s["seed"]))(
        json.loads(path.read_text())["key"]["settings"]) == (rate, seed)]
    return path


def copies(stored, tmp_path):
    """Two copies of the trained store: one to spoil, one where the spoilt file is deleted instead."""
    return [shutil.copytree(stored, tmp_path / name) for name in ("spoilt", "deleted")]


def selected_rate(store) -> float:
    row, = tuning.tuned_rows("sst2", [RunStore(store)], TINY, points=(POINT,))
    return row["rate"]


def other_rate(store) -> float:
    """A seed-0 grid rate that was not selected."""
    rate = selected_rate(store)
    return next(json.loads(p.read_text())["key"]["settings"]["peak_learning_rate"] for p in sorted(store.glob("*.json"))
                if json.loads(p.read_text())["key"]["settings"]["peak_learning_rate"] != rate)


def nested_set(record: dict, field: str, value) -> None:
    """``record[a][b]... = value`` for ``field`` "a.b..."; a value of ``...`` deletes the entry."""
    *parents, last = field.split(".")
    for part in parents:
        record = record[int(part)] if isinstance(record, list) else record[part]
    if value is ...:
        del record[last]
    else:
        record[last] = value


# (which run: "other" = seed 0 at a rate not selected, or (seed) at the selected rate), field, bad value, the
# words the warning names the field by
CASES = [
    ("other", "validation_metric", 5.0, "validation_metric is 5.0, outside accuracy's range [0, 1]"),
    ("other", "validation_metric", -0.1, "validation_metric is -0.1, outside"),
    ("other", "validation_metric", "0.9", "validation_metric is '0.9', not a number"),
    ("other", "validation_metric", [0.9], "validation_metric is [0.9], not a number"),
    ("other", "validation_metric", ..., "has no validation_metric"),
    (1, "best_metric", 1.5, "best_metric is 1.5, outside"),
    (1, "best_metric", "0.5", "best_metric is '0.5', not a number"),
    (0, "evals.0.validation.accuracy", ..., "has no evals[0].validation.accuracy"),
    (0, "evals.0.validation.accuracy", {"a": 1}, "evals[0].validation.accuracy is {'a': 1}, not a number"),
    (0, "evals.0.accuracy", ..., "has no evals[0].accuracy"),
    (0, "evals.0.step", "2", "evals[0].step is '2', not an integer"),
    (0, "trained_parameters", [1122], "trained_parameters is [1122], not a count"),
    (0, "trained_parameters", "1,122", "trained_parameters is '1,122', not a count"),
    (2, "key.settings.seed", "2", "settings.seed is '2', not an integer"),
    (2, "key.settings.seed", [2], "settings.seed is [2], not an integer"),
    (2, "key.settings.seed", None, "settings.seed is None, not an integer"),
    (2, "key.settings.seed", 2.0, "settings.seed is 2.0, not an integer"),
]


@pytest.mark.parametrize("which, field, value, words", CASES)
def test_a_wrong_record_is_left_out_with_one_warning_naming_its_file_and_field(stored, tmp_path, capsys, which, field,
                                                                              value, words):
    spoilt, deleted = copies(stored, tmp_path)
    rate = other_rate(stored) if which == "other" else selected_rate(stored)
    seed = 0 if which == "other" else which
    path = run_path(spoilt, rate, seed)
    record = json.loads(path.read_text())
    nested_set(record, field, value)
    path.write_text(json.dumps(record))
    run_path(deleted, rate, seed).unlink()
    code, out, warned = tune(spoilt, capsys)
    expected_code, expected, _ = tune(deleted, capsys)
    assert code == expected_code == OK and out == expected
    assert len(warned) == 1 and str(path) in warned[0] and words in warned[0], warned


def test_a_copy_whose_id_is_another_runs_is_left_out_not_counted_as_a_seed(stored, tmp_path, capsys):
    spoilt, deleted = copies(stored, tmp_path)
    rate = selected_rate(stored)
    first = json.loads(run_path(spoilt, rate, 0).read_text())
    third = run_path(spoilt, rate, 2)
    third.write_text(json.dumps({**first, "key": json.loads(third.read_text())["key"]}))  # seed 0's, keyed as seed 2's
    run_path(deleted, rate, 2).unlink()
    code, out, warned = tune(spoilt, capsys)
    assert (code, out) == tune(deleted, capsys)[:2]
    assert "1 run can start now" in out
    assert len(warned) == 1 and str(third) in warned[0] and f"its id '{first['id']}' is not its key's hash" in warned[0]


def test_a_record_copied_under_another_name_is_left_out(stored, tmp_path):
    original = sorted(stored.glob("*.json"))[0]
    copy = tmp_path / "copy of a run.json"
    shutil.copy(original, copy)
    for other in sorted(stored.glob("*.json"))[1:]:
        shutil.copy(other, tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept = [record["id"] for record in RunStore(tmp_path).records()]
    assert kept == sorted(path.stem for path in stored.glob("*.json"))[1:]
    warned, = [str(w.message) for w in caught]
    assert str(copy) in warned and f"it holds the run {original.name}, not {copy.name}" in warned


def test_tune_trains_a_left_out_run_again_and_stores_it_whole(stored, tmp_path, capsys):
    spoilt, _ = copies(stored, tmp_path)
    path = run_path(spoilt, other_rate(stored), 0)
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "validation_metric": "high"}))
    code, out, warned = tune(spoilt, capsys, "--shard", "1/1")
    assert code == OK and "every run of the sst2 protocol is stored" in out
    assert len(warned) == 1 and "validation_metric is 'high'" in warned[0]
    assert record_problem(json.loads(path.read_text())) is None


@pytest.mark.parametrize("metric, value, possible", [
    ("accuracy", 0.0, True), ("accuracy", 1.0, True), ("accuracy", 1.0001, False), ("accuracy", -0.01, False),
    ("f1", 1.0, True), ("f1", 1.2, False), ("f1", -0.5, False),
    ("matthews", -1.0, True), ("matthews", 1.0, True), ("matthews", -0.4, True), ("matthews", -1.01, False),
    ("matthews", 1.5, False), ("matthews", float("nan"), False), ("accuracy", True, False),
])
def test_each_metric_has_its_own_range(stored, metric, value, possible):
    """Accuracy and F1 are fractions, 0 to 1; a Matthews correlation runs from -1 to 1."""
    record = json.loads(sorted(stored.glob("*.json"))[0].read_text())
    record.update(metric=metric, best_metric=value, validation_metric=0.5,
                  evals=[{**entry, metric: 0.5, "validation": {metric: 0.5}} for entry in record["evals"]])
    assert (record_problem(record) is None) == possible


def test_the_command_line_prints_the_warning_as_one_line(stored, tmp_path):
    """As a user sees it: one line in the errors' style, not Python's two naming a source line."""
    spoilt, _ = copies(stored, tmp_path)
    path = run_path(spoilt, other_rate(stored), 0)
    path.write_text(json.dumps({**json.loads(path.read_text()), "validation_metric": 5.0}))
    small = ("from adapterlab.runs.tuning import PROTOCOLS, Protocol; from adapterlab.cli import main; import sys; "
             f"PROTOCOLS['sst2'] = Protocol(*{dataclasses.astuple(SMALL)!r}); sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", small, "tune", "--report", "--task", "sst2", "--backbone", TINY,
                           "--points", POINT.label, "--store", str(spoilt)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == OK and done.stderr.splitlines() == [
        f"adapterlab tune: warning: skipping the stored run {path}: its validation_metric is 5.0, outside accuracy's "
        "range [0, 1]; delete the file (the run is trained again when asked for)"]
