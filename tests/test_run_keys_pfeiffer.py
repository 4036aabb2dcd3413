"""The shipped reference runs keep their keys, and no run of the former "pfeiffer" (Houlsby's FFN adapter alone)
is ever read as a run of Pfeiffer's adapter."""

from __future__ import annotations

import dataclasses
import json

import pytest

from adapterlab import methods
from adapterlab.runs.store import REFERENCE_STORE, RunStore, run_id, run_key
from adapterlab.training import TrainConfig
from adapterlab.training.data import Split, get_task

SHIPPED = sorted(REFERENCE_STORE.glob("*.json"))
FORMER = sorted((REFERENCE_STORE / "houlsby_ffn").glob("*.json"))


def _split(task: str, which: str) -> Split:
    spec = get_task(task)
    return Split(spec, which, ["a"], [0], "stub", is_toy=False)


def recomputed_key(stored: dict) -> dict:
    """run_key of the TrainConfig a stored key's settings describe, with the stored data fields put back (the
    settings are what a change of the code could change)."""
    settings = dict(stored["settings"])
    for mark in methods.get(settings["method"]).key_marks if settings["method"] in methods.REGISTRY else ():
        settings.pop(mark, None)
    fields = {field.name for field in dataclasses.fields(TrainConfig)}
    config = TrainConfig(**{k: v for k, v in settings.items() if k in fields and k != "peak_learning_rate"},
                         learning_rate=settings.get("peak_learning_rate"), precision=stored["precision"], progress=False)
    key = run_key(stored["task"], config, stored["backbone"], _split(stored["task"], "train"),
                  _split(stored["task"], "dev"), stored["precision"])
    key.update({name: stored[name] for name in ("data", "train_rows", "eval_rows", "toy_data", "validation")
                if name in stored})
    if "analysis" in stored:
        key = {"analysis": stored["analysis"], **key}
    return key


def test_the_reference_runs_are_there():
    assert len(SHIPPED) >= 160 and len(FORMER) == 7


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_stored_run_keeps_its_key_and_its_id(path):
    record = json.loads(path.read_text())
    key = record["key"]
    assert run_id(key) == path.stem
    assert recomputed_key(key) == key
    assert run_id(recomputed_key(key)) == path.stem
    if key["settings"]["method"] == "pfeiffer":
        assert key["settings"]["adapter_reads"] == "add_and_norm_output"
    else:
        assert "adapter_reads" not in key["settings"]


@pytest.mark.parametrize("path", FORMER, ids=lambda p: p.stem)
def test_a_run_of_the_former_pfeiffer_is_never_read_as_pfeiffer(path):
    record = json.loads(path.read_text())
    key = record["key"]
    assert key["settings"]["method"] == "houlsby_ffn" and run_id(key) == path.stem
    assert record["renamed"]["from_method"] == "pfeiffer"
    as_it_was = {**key, "settings": {**key["settings"], "method": "pfeiffer"}}
    assert run_id(as_it_was) == record["renamed"]["from_id"]
    # the same settings asked of today's pfeiffer: another key, whatever store holds the old record
    today = recomputed_key(as_it_was)
    assert today != as_it_was and today["settings"]["adapter_reads"] == "add_and_norm_output"
    stores = [RunStore(REFERENCE_STORE, read_only=True), RunStore(path.parent, read_only=True)]
    for store in stores:  # today's pfeiffer may be stored (the reference runs hold it), but never as this record
        found = store.get(today)
        assert found is None or (found["id"] not in (path.stem, record["renamed"]["from_id"]) and "renamed" not in found)
    assert not (REFERENCE_STORE / f"{record['renamed']['from_id']}.json").exists()
    assert path.stem not in {p.stem for p in SHIPPED}
