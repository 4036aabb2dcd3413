"""`adapterlab train` and `adapterlab sweep` with --method lora and --method bitfit, on the 2-layer tiny-random
backbone and the toy data: the run folder holds the trained set, evaluate reloads it, a sweep over the
LoRA rank stores one run per rank."""

from __future__ import annotations

import json

import pytest

from adapterlab.backbones import TINY, load_backbone
from adapterlab.cli import OK, USAGE, main
from adapterlab.counting import method_counts
from adapterlab.runstore import RunStore

FAST = ["--backbone", TINY, "--batch-size", "16", "--max-train", "64", "--max-eval", "32", "--no-progress"]


pytestmark = pytest.mark.usefixtures("toy_data_only")


@pytest.mark.parametrize("method, options", [
    ("lora", ["--rank", "4", "--lora-alpha", "8", "--lora-targets", "all_dense"]),
    ("bitfit", ["--train-pooler"]),
])
def test_train_writes_the_set_and_evaluate_reproduces_the_metrics(tmp_path, capsys, method, options):
    out = tmp_path / "run"
    assert main(["train", "--task", "sst2", "--method", method, *options, "--epochs", "1", "--out", str(out),
                 *FAST]) == OK
    report = json.loads((out / "metrics.json").read_text())
    manifest = json.loads((out / "adapter_config.json").read_text())
    config = report["config"]
    assert report["checkpoint"] == str(out) and manifest["method"] == method
    shape = load_backbone(TINY)[0].config
    closed = method_counts(shape, method, lora_rank=config["lora_rank"], lora_targets=config["lora_targets"],
                           train_pooler=config["train_pooler"])
    assert report["trainable"]["total_trainable"] == closed["total_trainable"] == manifest["num_parameters"]
    if method == "lora":
        assert (config["lora_rank"], config["lora_alpha"], config["lora_targets"]) == (4, 8.0, "all_dense")
        assert manifest["lora"] == {"rank": 4, "alpha": 8.0, "targets": "all_dense", "train_pooler": False}
    else:
        assert config["train_pooler"] is True and manifest["bitfit"] == {"train_pooler": True}
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out), "--max-eval", "32"]) == OK
    scored = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert scored["metrics"]["accuracy"] == pytest.approx(report["metrics"]["accuracy"])


def test_bad_lora_settings_are_usage_errors(tmp_path, capsys):
    assert main(["train", "--method", "lora", "--rank", "0", "--out", str(tmp_path / "run"), *FAST]) == USAGE
    assert "lora_rank" in capsys.readouterr().err
    assert main(["train", "--method", "lora", "--lora-targets", "keys", "--out", str(tmp_path / "run"), *FAST]) == USAGE
    assert not (tmp_path / "run").exists()


def test_sweep_over_the_lora_rank_stores_one_run_per_rank(tmp_path, capsys):
    store = tmp_path / "store"
    assert main(["sweep", "--method", "lora", "--grid", "lora_rank=2,4", "--seeds", "0", "--steps", "2",
                 "--store", str(store), *FAST]) == OK
    out = capsys.readouterr().out
    assert "lora_rank=2" in out and "lora_rank=4" in out
    records = [json.loads(path.read_text()) for path in sorted(store.glob("*.json"))]
    assert sorted(r["key"]["settings"]["lora_rank"] for r in records) == [2, 4] and len(RunStore(store)) == 2


@pytest.mark.parametrize("options", [["--method", "lora", "--rank", "16", "--lora-targets", "all_dense"],
                                     ["--method", "bitfit", "--train-pooler", "--backbone", "bert-large"]])
def test_count_puts_the_closed_forms_beside_the_model(capsys, options):
    assert main(["count", *options, "--json"]) == OK
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(row["match"] and row["closed_form"] == row["counted"] for row in rows)
    assert main(["count", *options]) == OK and "every row matches" in capsys.readouterr().out


def test_count_refuses_a_bad_rank(capsys):
    assert main(["count", "--method", "lora", "--rank", "0"]) == USAGE
    assert "rank must be an integer >= 1" in capsys.readouterr().err
