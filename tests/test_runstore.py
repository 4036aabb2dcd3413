"""The run store and sweeps: a stored run answers without training, keys keep different runs apart,
shards written by two processes merge into one store, and an interrupted sweep resumes."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from adapterlab import precision, runstore, sweep
from adapterlab.backbones import TINY, load_backbone
from adapterlab.data import load_split
from adapterlab.runstore import RunStore, run_key, run_or_load, summarize
from adapterlab.training import TrainConfig

ROOT = Path(__file__).resolve().parent.parent


pytestmark = pytest.mark.usefixtures("toy_data_only")


def config(**overrides):
    return TrainConfig(**{"bottleneck": 4, "batch_size": 16, "max_steps": 2, "progress": False, **overrides})


def lookup(store, cfg, **kwargs):
    return run_or_load("sst2", cfg, backbone=TINY, max_train=48, max_eval=32, stores=[store], **kwargs)


def no_training(*args, **kwargs):
    raise AssertionError("a stored run was trained again")


def test_a_stored_run_answers_without_loading_a_model(tmp_path, monkeypatch):
    store = RunStore(tmp_path / "runs")
    first = lookup(store, config())
    assert not first.stored and len(store) == 1
    monkeypatch.setattr("adapterlab.training.run_experiment", no_training)
    monkeypatch.setattr("adapterlab.backbones.load_backbone", no_training)
    again = lookup(store, config(progress=True))  # the progress bar is not part of a run's key
    assert again.stored and again.record == json.loads(store.path(first.record["key"]).read_text())
    assert again.record["best_metric"] == pytest.approx(first.record["best_metric"])


def test_retrain_trains_again_and_replaces_the_record(tmp_path):
    store = RunStore(tmp_path)
    first = lookup(store, config())
    second = lookup(store, config(), retrain=True)
    assert not second.stored and len(store) == 1
    assert second.record["created"] >= first.record["created"]


@pytest.mark.parametrize("change", [dict(seed=1), dict(bottleneck=8), dict(learning_rate=3e-4), dict(max_steps=3)])
def test_a_different_setting_is_a_different_run(tmp_path, change):
    store = RunStore(tmp_path)
    lookup(store, config())
    other = lookup(store, config(**change))
    assert not other.stored and len(store) == 2


def test_the_key_holds_data_backbone_and_the_resolved_precision():
    train, dev = load_split("sst2", "train", max_examples=48), load_split("sst2", "dev", max_examples=32)
    key = run_key("sst2", config(precision="fp32"), TINY, train, dev)
    fewer = run_key("sst2", config(precision="fp32"), TINY, load_split("sst2", "train", max_examples=40), dev)
    assert key["toy_data"] is True and key["train_rows"] == 48 and key["precision"] == "fp32"
    assert fewer["data"] != key["data"]
    standin = run_key("sst2", config(precision="fp32"), "all-MiniLM-L6-v2", train, dev)
    assert runstore.run_id(standin) != runstore.run_id(key)
    bf16 = run_key("sst2", config(precision="bf16"), TINY, train, dev)
    assert bf16["precision"] == "bf16" and runstore.run_id(bf16) != runstore.run_id(key)
    assert "precision" not in key["settings"] and {**bf16, "precision": "fp32"} == key
    assert key["settings"]["peak_learning_rate"] == config().peak_learning_rate
    with pytest.raises(ValueError, match="needs the precision it trains in.*not 'auto'"):
        run_key("sst2", config(precision="auto"), TINY, train, dev)


def test_auto_is_resolved_before_the_key_is_made(monkeypatch):
    """key_for resolves "auto" with the cached probe: a machine where bf16 is fast keys the run as bf16."""
    monkeypatch.delenv(precision.PRECISION_ENV)
    model = load_backbone(TINY)[0]
    precision.resolve("auto", TINY, model=model, timer=lambda m, b, chosen, d: {"fp32": 2.0, "bf16": 1.0}[chosen])
    monkeypatch.setattr("adapterlab.backbones.load_backbone", no_training)  # the probe is cached: no loading
    key = runstore.key_for("sst2", config(), backbone=TINY, max_train=48, max_eval=32)
    assert key["precision"] == "bf16"
    assert runstore.key_for("sst2", config(precision="fp32"), backbone=TINY, max_train=48, max_eval=32) == {
        **key, "precision": "fp32"}


def test_runs_of_different_precisions_never_stand_in_for_each_other(tmp_path):
    store = RunStore(tmp_path)
    bf16 = lookup(store, config(precision="bf16"))
    assert bf16.record["key"]["precision"] == "bf16" and bf16.result.config.precision == "bf16"
    with pytest.warns(UserWarning, match="no fp32 run of these settings is stored, but a bf16 one is"):
        fp32 = lookup(store, config(precision="fp32"))
    assert not fp32.stored and fp32.record["key"]["precision"] == "fp32" and len(store) == 2
    assert lookup(store, config(precision="bf16")).stored
    assert lookup(store, config()).record["key"]["precision"] == "fp32"  # "auto", pinned to fp32 by the suite


def test_an_unprobed_auto_loads_the_backbone_once_to_probe_then_answers_without_loading(tmp_path, monkeypatch):
    import adapterlab.backbones as backbones

    monkeypatch.delenv(precision.PRECISION_ENV)
    real, loads = backbones.load_backbone, []
    monkeypatch.setattr(backbones, "load_backbone", lambda *a, **k: loads.append(a[0]) or real(*a, **k))
    store = RunStore(tmp_path)
    first = lookup(store, config())
    assert loads == [TINY, TINY]  # the probe, then the training run
    decided = precision.resolve("auto", TINY, load=no_training)  # cached by the first look-up
    assert first.record["key"]["precision"] == decided.precision == first.result.config.precision
    assert first.result.precision == decided
    loads.clear()
    assert lookup(store, config()).stored and loads == []


GLUE = ROOT.parent / "shared" / "data" / "glue"


@pytest.mark.skipif(not (GLUE / "SST-2" / "train.tsv").is_file(), reason="needs the GLUE folder of the reference runs")
def test_a_shipped_fp32_reference_run_is_found_by_an_fp32_config_and_by_no_other(tmp_path, monkeypatch):
    """A copy of a reference run (made before runs had a precision setting) keeps its key: an fp32 config
    finds it; bf16, or "auto" on a machine where bf16 is fast, does not, and says that an fp32 run is there."""
    shipped = sorted((ROOT / "data" / "reference_runs").glob("*.json"))
    record = json.loads(shipped[0].read_text())
    reference = RunStore(tmp_path / "reference_runs", read_only=True)
    reference.folder.mkdir()
    (reference.folder / shipped[0].name).write_text(shipped[0].read_text())
    key, settings = record["key"], dict(record["key"]["settings"])
    cfg = TrainConfig(**{name: value for name, value in settings.items() if name != "peak_learning_rate"},
                      learning_rate=settings["peak_learning_rate"], precision="fp32", progress=False)
    full_train = len(load_split(key["task"], "train", GLUE))
    full_eval = len(load_split(key["task"], "dev", GLUE))
    args = dict(backbone=key["backbone"], data_dir=GLUE, stores=[reference],
                max_train=None if key["train_rows"] == full_train else key["train_rows"],
                max_eval=None if key["eval_rows"] == full_eval else key["eval_rows"])
    assert runstore.stored_runs(key["task"], [cfg], **args) == [record]
    with pytest.warns(UserWarning, match="no bf16 run .* but an fp32 one is .*reference_runs.*precision='fp32'"):
        assert runstore.stored_runs(key["task"], [replace(cfg, precision="bf16")], **args) == [None]
    monkeypatch.delenv(precision.PRECISION_ENV)
    fast = {"fp32": 1.5, "bf16": 1.0}
    precision.resolve("auto", key["backbone"], model=load_backbone(TINY)[0], timer=lambda m, b, chosen, d: fast[chosen])
    with pytest.warns(UserWarning, match="no bf16 run"):
        assert runstore.stored_runs(key["task"], [replace(cfg, precision="auto")], **args) == [None]


def test_the_default_learning_rate_and_the_same_rate_given_are_one_run(tmp_path):
    store = RunStore(tmp_path)
    lookup(store, config())
    assert lookup(store, config(learning_rate=config().peak_learning_rate)).stored


def test_a_reference_store_is_read_but_never_written(tmp_path):
    reference = RunStore(tmp_path / "reference")
    made = lookup(reference, config())
    read_only = RunStore(tmp_path / "reference", read_only=True)
    own = RunStore(tmp_path / "own")
    found = run_or_load("sst2", config(), backbone=TINY, max_train=48, max_eval=32, stores=[own, read_only])
    assert found.stored and found.store is read_only and found.record == made.record
    with pytest.raises(PermissionError, match="read-only"):
        read_only.put(made.record)
    with pytest.raises(ValueError, match="no writable run store"):
        run_or_load("sst2", config(seed=5), backbone=TINY, stores=[read_only])


def test_a_failed_write_leaves_no_file(tmp_path, monkeypatch):
    store = RunStore(tmp_path)
    record = lookup(store, config()).record
    store.path(record["key"]).unlink()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(runstore.os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        store.put(record)
    assert list(tmp_path.iterdir()) == []


def test_summarize_gives_mean_and_sample_spread_per_group():
    def record(bottleneck, seed, value):
        return {"key": {"task": "sst2", "settings": {"bottleneck": bottleneck, "seed": seed}}, "best_metric": value}

    values = {2: [0.81, 0.84, 0.79], 8: [0.9, 0.86, 0.88]}
    records = [record(r, seed, v) for r, vs in values.items() for seed, v in reversed(list(enumerate(vs)))]
    rows = {row["bottleneck"]: row for row in summarize(records, by=("bottleneck",))}
    for r, vs in values.items():
        assert rows[r]["seeds"] == [0, 1, 2] and rows[r]["values"] == vs
        assert rows[r]["mean"] == pytest.approx(statistics.mean(vs))
        assert rows[r]["std"] == pytest.approx(statistics.stdev(vs))


# ------------------------------------------------------------------------------------------ sweeps


def test_grid_and_shard_parsing():
    grid = sweep.parse_grid(["bottleneck=2,8", "init-scale=1e-3,1e-2", "train_layernorm=false",
                             "learning_rate=none,3e-4"], TrainConfig)
    assert grid == {"bottleneck": [2, 8], "init_scale": [1e-3, 1e-2], "train_layernorm": [False],
                    "learning_rate": [None, 3e-4]}
    assert sweep.parse_shard("2/3") == (2, 3)
    for bad, message in (("seed=1,2", "--seeds"), ("rank=4", "no training setting"), ("bottleneck=", "no values"),
                         ("train_layernorm=yes", "true or false")):
        with pytest.raises(ValueError, match=message):
            sweep.parse_grid([bad], TrainConfig)
    for bad in ("0/2", "3/2", "1-2", "a/b"):
        with pytest.raises(ValueError, match="--shard"):
            sweep.parse_shard(bad)


def test_expand_orders_settings_then_seeds_and_validates():
    configs = sweep.expand(config(), {"bottleneck": [2, 8], "init_scale": [1e-3, 1e-2]}, seeds=[0, 1])
    assert [(c.bottleneck, c.init_scale, c.seed) for c in configs] == [
        (b, s, seed) for b in (2, 8) for s in (1e-3, 1e-2) for seed in (0, 1)]
    with pytest.raises(ValueError, match="bottleneck"):
        sweep.expand(config(), {"bottleneck": [0]}, seeds=[0])


SHARD_SCRIPT = textwrap.dedent("""
    import sys
    from adapterlab import sweep
    from adapterlab.runstore import RunStore
    from adapterlab.training import TrainConfig
    base = TrainConfig(bottleneck=4, batch_size=16, max_steps=2, progress=False)
    configs = sweep.expand(base, {"bottleneck": [2, 4], "init_scale": [1e-3, 1e-2]}, seeds=[0, 1])
    index, count = sweep.parse_shard(sys.argv[2])
    done = sweep.run_sweep("sst2", configs, stores=[RunStore(sys.argv[1])], shard=(index, count),
                           backbone="tiny-random", max_train=48, max_eval=32, progress=False)
    print(len(done))
""")


def test_two_processes_share_a_sweep_through_one_store(tmp_path, monkeypatch):
    store_dir = tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if k != "ADAPTERLAB_DATA"}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    shards = [subprocess.Popen([sys.executable, "-c", SHARD_SCRIPT, str(store_dir), f"{i}/2"], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (1, 2)]
    outputs = [shard.communicate(timeout=600) for shard in shards]
    assert [shard.returncode for shard in shards] == [0, 0], [err[-2000:] for _, err in outputs]
    assert [int(out.split()[-1]) for out, _ in outputs] == [4, 4]
    store = RunStore(store_dir)
    configs = sweep.expand(config(), {"bottleneck": [2, 4], "init_scale": [1e-3, 1e-2]}, seeds=[0, 1])
    stored = {(r["key"]["settings"]["bottleneck"], r["key"]["settings"]["init_scale"], r["key"]["settings"]["seed"])
              for r in store.records()}
    assert stored == {(c.bottleneck, c.init_scale, c.seed) for c in configs}
    assert not list(store_dir.glob("*.tmp")) and not list(store_dir.glob(".*"))
    # The merged store answers the whole grid: nothing is trained again.
    monkeypatch.setattr("adapterlab.training.run_experiment", no_training)
    again = sweep.run_sweep("sst2", configs, stores=[store], backbone=TINY, max_train=48, max_eval=32, progress=False)
    assert all(item.stored for item in again) and len(again) == 8


def test_an_interrupted_sweep_resumes_where_it_stopped(tmp_path, monkeypatch):
    import adapterlab.training as training

    store = RunStore(tmp_path)
    configs = sweep.expand(config(), {"bottleneck": [2, 4, 8]}, seeds=[0])
    real, calls = training.run_experiment, []

    def interrupted_at_the_third(*args, **kwargs):
        calls.append(kwargs)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(training, "run_experiment", interrupted_at_the_third)
    with pytest.raises(KeyboardInterrupt):
        sweep.run_sweep("sst2", configs, stores=[store], backbone=TINY, max_train=48, max_eval=32, progress=False)
    assert len(store) == 2
    calls.clear()
    monkeypatch.setattr(training, "run_experiment", lambda *a, **k: calls.append(k) or real(*a, **k))
    done = sweep.run_sweep("sst2", configs, stores=[store], backbone=TINY, max_train=48, max_eval=32, progress=False)
    assert [item.stored for item in done] == [True, True, False] and len(calls) == 1 and len(store) == 3


# ------------------------------------------------------------------------------------- the command


def sweep_args(store, *extra):
    return ["sweep", "--backbone", TINY, "--steps", "2", "--batch-size", "16", "--max-train", "48", "--max-eval", "32",
            "--bottleneck", "4", "--store", str(store), "--no-progress", *extra]


def test_sweep_command_trains_the_grid_once_and_prints_each_settings_spread(tmp_path, capsys):
    from adapterlab.cli import main

    args = sweep_args(tmp_path, "--grid", "init_scale=1e-3,1e-2", "--seeds", "0,1")
    assert main(args + ["--shard", "2/2"]) == 0
    assert "2 runs of shard 2/2 (2 trained now)" in capsys.readouterr().out
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "4 runs of shard 1/1 (2 trained now)" in out and out.count("(stored)") == 2
    records = RunStore(tmp_path).records()
    for scale in (1e-3, 1e-2):
        values = [r["best_metric"] for r in records if r["key"]["settings"]["init_scale"] == scale]
        assert f"init_scale={scale}: mean {statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}" in out


def test_sweep_command_interrupted_exits_130_and_says_how_to_resume(tmp_path, capsys, monkeypatch):
    import adapterlab.training as training
    from adapterlab.cli import main

    real, calls = training.run_experiment, []

    def interrupted_at_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(training, "run_experiment", interrupted_at_the_second)
    assert main(sweep_args(tmp_path, "--seeds", "0,1,2")) == 130
    err = capsys.readouterr().err
    assert "interrupted after 1 of this shard's runs" in err and "again to resume" in err
    assert len(RunStore(tmp_path)) == 1


def test_sweep_command_trains_in_the_precision_asked_fp32_by_default(tmp_path, capsys):
    from adapterlab.cli import main

    assert main(sweep_args(tmp_path, "--grid", "precision=fp32,bf16", "--seeds", "0")) == 0
    out = capsys.readouterr().out
    assert "precision=fp32" in out and "precision=bf16" in out and "in bf16 and fp32, in the run store" in out
    assert sorted(r["key"]["precision"] for r in RunStore(tmp_path).records()) == ["bf16", "fp32"]
    assert main(sweep_args(tmp_path, "--precision", "bf16", "--seeds", "0")) == 0
    assert "(stored)" in capsys.readouterr().out
    assert main(sweep_args(tmp_path, "--seeds", "0")) == 0
    out = capsys.readouterr().out
    assert "(stored)" in out and "in fp32, in the run store" in out
    assert main(sweep_args(tmp_path, "--precision", "fp16")) == 2
    assert "precision must be 'auto', 'fp32' or 'bf16'; got 'fp16'" in capsys.readouterr().err


@pytest.mark.parametrize("bad, message", [(["--grid", "rank=4"], "no training setting 'rank'"),
                                          (["--seeds", "0,0"], "distinct"), (["--seeds", "x"], "comma-separated"),
                                          (["--shard", "3/2"], "1 <= I <= N"), (["--grid", "bottleneck=0"], "bottleneck")])
def test_sweep_command_rejects_bad_arguments_before_training(tmp_path, capsys, monkeypatch, bad, message):
    from adapterlab.cli import main

    monkeypatch.setattr("adapterlab.training.run_experiment", no_training)
    assert main(sweep_args(tmp_path, *bad)) == 2
    err = capsys.readouterr().err
    assert err.startswith("adapterlab sweep: ") and message in err and len(err.strip().splitlines()) == 1


def test_a_diverged_run_is_stored_as_diverged_and_left_out_of_the_mean(tmp_path, monkeypatch):
    store = RunStore(tmp_path)
    blown = lookup(store, config(learning_rate=1e6, max_steps=8))
    assert blown.record["status"] == "diverged" and blown.record["best_metric"] is None
    assert "learning rate" in blown.record["error"]
    monkeypatch.setattr("adapterlab.training.run_experiment", no_training)
    again = lookup(store, config(learning_rate=1e6, max_steps=8))
    assert again.stored and again.record["status"] == "diverged"
    (row,) = summarize([again.record], by=("learning_rate",))
    assert row["diverged"] == 1 and row["n"] == 0


def test_lora_settings_enter_only_lora_run_keys():
    """A setting added for a new method leaves every other method's keys (and the stored runs) as they were."""
    train, dev = load_split("sst2", "train", max_examples=48), load_split("sst2", "dev", max_examples=32)

    def settings(**fields):
        return run_key("sst2", TrainConfig(**fields), TINY, train, dev, precision="fp32")["settings"]

    lora = dict(lora_rank=16, lora_alpha=2.0, lora_targets="all_dense")
    for method in ("houlsby", "bitfit", "full", "head"):
        assert settings(method=method) == settings(method=method, **lora)
        assert not any(name.startswith("lora_") for name in settings(method=method))
    assert settings(method="lora") != settings(method="lora", lora_rank=4)
    assert {name: settings(method="lora", **lora)[name] for name in lora} == lora
    assert "bottleneck" not in settings(method="lora") and "train_pooler" in settings(method="lora")
