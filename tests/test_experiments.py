"""Multi-seed experiments read from the run store: rows with mean and sample spread over the seeds,
missing seeds named with the command that makes them, diverged runs counted, and the booleans the labs'
conclusions print."""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
import shutil
import statistics
from pathlib import Path

import pytest

from adapterlab import cli, experiments
from adapterlab.backbones import STANDIN, TINY
from adapterlab.experiments import REFERENCE_CONFIG, SeedRow, seed_rows
from adapterlab.runstore import RunStore, key_for
from adapterlab.training import TrainConfig

ROOT = Path(__file__).resolve().parent.parent
SHARED_GLUE = next(
    (p for p in (Path("/work/shared/data/glue"), ROOT.parent / "shared" / "data" / "glue") if p.is_dir()), None
)
TOY = dict(backbone=TINY, fallback=False, max_train=48, max_eval=32)
BASE = TrainConfig(bottleneck=4, batch_size=16, max_steps=2, progress=False)


pytestmark = pytest.mark.usefixtures("toy_data_only")


def store_run(store, config, best_metric, status="complete"):
    """A hand-made stored run of ``config`` on the toy data."""
    key = key_for("sst2", config, backbone=TINY, max_train=48, max_eval=32, fallback=False)
    store.put({"key": key, "status": status, "metric": "accuracy", "best_metric": best_metric})


def test_rows_give_mean_and_sample_spread_of_the_stored_seeds(tmp_path):
    store = RunStore(tmp_path)
    scores = {8: [0.61, 0.67, 0.70], 32: [0.80, 0.79]}
    for bottleneck, values in scores.items():
        for seed, value in enumerate(values):
            store_run(store, dataclasses.replace(BASE, bottleneck=bottleneck, seed=seed), value)
    rows = seed_rows("sst2", BASE, "bottleneck", [8, 32], stores=[store], **TOY)
    assert [row.label for row in rows] == [8, 32]
    for row, values in zip(rows, scores.values()):
        assert row.values == pytest.approx(values) and row.n == len(values)
        assert row.mean == pytest.approx(statistics.mean(values))
        assert row.std == pytest.approx(statistics.stdev(values))
        assert row.metric == "accuracy" and row.config.bottleneck == row.label
    assert rows[0].missing == () and rows[1].missing == (2,) and rows[1].seeds == (0, 1)


def test_missing_runs_are_named_with_a_command_that_makes_exactly_them(tmp_path):
    store = RunStore(tmp_path)
    store_run(store, dataclasses.replace(BASE, init_scale=1e-4, seed=0), 0.6)
    rows = seed_rows("sst2", BASE, "init_scale", [1e-4, 1e-1], stores=[store], **TOY)
    assert rows[0].missing == (1, 2) and rows[1].missing == (0, 1, 2) and rows[1].n == 0
    assert math.isnan(rows[1].mean) and math.isnan(rows[1].std)
    report = experiments.missing_report("sst2", rows, TINY)
    assert "1 runs stored" in report and "0.0001: seed 1, 2" in report and "0.1: seed 0, 1, 2" in report
    wanted = [dataclasses.replace(row.config, seed=seed) for row in rows for seed in row.missing]
    assert set(sweep_configs(report.splitlines()[-1].removeprefix("to fill them: "))) >= set(map(str, wanted))


def sweep_configs(command: str) -> list[str]:
    """The configs (as text) that the real ``adapterlab sweep`` CLI would train for ``command``."""
    prefix = "python -m adapterlab "
    assert command.startswith(prefix)
    trained = []

    def fake_run_sweep(task, configs, **kwargs):
        trained.extend(str(dataclasses.replace(config, progress=False)) for config in configs)
        return []

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("adapterlab.sweep.run_sweep", fake_run_sweep)
        assert cli.main(shlex.split(command.removeprefix(prefix))) == 0
    return trained


def test_everything_stored_is_said_so(tmp_path):
    store = RunStore(tmp_path)
    for seed in experiments.SEEDS:
        store_run(store, dataclasses.replace(BASE, seed=seed), 0.5 + seed / 10)
    rows = seed_rows("sst2", BASE, "bottleneck", [BASE.bottleneck], stores=[store], **TOY)
    assert experiments.missing_report("sst2", rows, TINY) == "all 3 runs stored (1 settings × their seeds)"


def test_diverged_runs_are_counted_and_left_out_of_the_mean(tmp_path):
    store = RunStore(tmp_path)
    store_run(store, dataclasses.replace(BASE, init_scale=1.0, seed=0), 0.52)
    store_run(store, dataclasses.replace(BASE, init_scale=1.0, seed=1), None, status="diverged")
    store_run(store, dataclasses.replace(BASE, init_scale=1.0, seed=2), 0.56)
    (row,) = seed_rows("sst2", BASE, "init_scale", [1.0], stores=[store], **TOY)
    assert row.diverged == 1 and row.missing == () and row.seeds == (0, 1, 2)
    assert row.values == pytest.approx([0.52, 0.56]) and row.mean == pytest.approx(0.54)


def test_a_dict_of_labelled_configs_gives_one_row_per_label(tmp_path):
    store = RunStore(tmp_path)
    configs = {"head only": dataclasses.replace(BASE, method="head"), "adapters": BASE}
    for seed, value in enumerate([0.5, 0.6, 0.7]):
        store_run(store, dataclasses.replace(configs["head only"], seed=seed), value)
    rows = seed_rows("sst2", BASE, configs, stores=[store], **TOY)
    assert [row.label for row in rows] == ["head only", "adapters"]
    assert rows[0].mean == pytest.approx(0.6) and rows[1].missing == (0, 1, 2)
    report = experiments.missing_report("sst2", rows, TINY)
    assert "adapters: seed 0, 1, 2" in report and "head only" not in report
    command = report.splitlines()[-1].removeprefix("to fill them: ")
    assert sorted(sweep_configs(command)) == sorted(str(dataclasses.replace(BASE, seed=s)) for s in (0, 1, 2))


def test_configs_differing_in_two_settings_get_one_command_each():
    configs = [BASE, dataclasses.replace(BASE, method="head", bottleneck=8)]
    with pytest.raises(ValueError, match="differ in"):
        experiments.sweep_command("sst2", configs, [0])
    rows = [SeedRow(label=str(i), config=c, metric=None, values=(), seeds=(), missing=(0,), diverged=0,
                    mean=math.nan, std=math.nan) for i, c in enumerate(configs)]
    report = experiments.missing_report("sst2", rows, TINY)
    assert report.count("python -m adapterlab sweep") == 2


@pytest.mark.parametrize("bad", [dict(setting="seed", values=[0, 1]), dict(setting="no_such", values=[1]),
                                 dict(setting="bottleneck", values=None),
                                 dict(setting={"a": BASE}, values=[1])])
def test_bad_requests_get_a_clear_error(bad):
    with pytest.raises(ValueError, match="setting|values|dict"):
        seed_rows("sst2", BASE, stores=[], **TOY, **bad)


def row(values):
    values = tuple(values)
    return SeedRow(label="x", config=BASE, metric="accuracy", values=values, seeds=tuple(range(len(values))),
                   missing=(), diverged=0, mean=statistics.mean(values) if values else math.nan,
                   std=statistics.stdev(values) if len(values) > 1 else math.nan)


def test_the_paper_values_name_their_source():
    assert experiments.PAPER["cola_full"].value == 60.5 and "Table 1" in experiments.PAPER["cola_full"].source
    assert all(value.source.startswith("paper") for value in experiments.PAPER.values())


def _reference_record():
    """One stored reference run of Houlsby adapters with the reference config's pooler setting, or None."""
    for path in sorted((ROOT / "data" / "reference_runs").glob("*.json")):
        record = json.loads(path.read_text())
        settings = record["key"]["settings"]
        if (settings.get("train_pooler") is REFERENCE_CONFIG.train_pooler and settings["method"] == "houlsby"
                and settings.get("bottleneck") == REFERENCE_CONFIG.bottleneck and record.get("best_metric") is not None
                and settings.get("max_steps") == REFERENCE_CONFIG.max_steps and "validation_rows" not in settings):
            return path, record
    return None, None


def test_a_reference_run_is_found_by_the_reference_config(tmp_path, monkeypatch):
    path, record = _reference_record()
    if path is None or SHARED_GLUE is None:
        pytest.skip("needs a stored reference run of Houlsby adapters and the real GLUE copy (../shared/data/glue)")
    monkeypatch.setenv("ADAPTERLAB_DATA", str(SHARED_GLUE))
    shutil.copy(path, tmp_path / path.name)
    settings = record["key"]["settings"]
    (found,) = seed_rows(record["key"]["task"], REFERENCE_CONFIG, "init_scale", [settings["init_scale"]],
                         seeds=[settings["seed"]], backbone=STANDIN, stores=[RunStore(tmp_path)])
    assert found.n == 1 and found.values == (record["best_metric"],) and found.missing == ()


def test_a_row_describes_itself_in_one_line():
    assert row([0.5, 0.7]).describe() == "+0.600 ± 0.141 (2 seeds)"
    assert row([0.5]).describe(2) == "+0.50 (1 seed: no spread)"
    missing = dataclasses.replace(row([]), missing=(0, 1, 2))
    assert missing.describe() == "no run with a metric, seed 0, 1, 2 not stored"
    assert dataclasses.replace(row([0.1, 0.3]), diverged=1).describe().endswith("(2 seeds), 1 diverged")


class Profile:
    """The two fields of a run profile that decide which backbone's runs a lab reads."""

    backbone, fallback = TINY, False


FP32 = dataclasses.replace(BASE, precision="fp32")



def store_full_data_run(store, config, backbone, value):
    key = key_for("sst2", config, backbone=backbone, fallback=False)
    store.put({"key": key, "status": "complete", "metric": "accuracy", "best_metric": value})


def test_lab_rows_read_the_students_own_runs_when_any_is_stored(tmp_path):
    store = RunStore(tmp_path)
    store_full_data_run(store, FP32, TINY, 0.7)
    store_full_data_run(store, FP32, STANDIN, 0.9)
    found = experiments.lab_rows("sst2", FP32, "bottleneck", [4], profile=Profile(), seeds=[0], stores=[store])
    assert found.backbone == TINY and found.rows[0].values == (0.7,) and "your own runs on tiny" in found.note


def test_lab_rows_show_the_stand_ins_runs_labelled_while_the_students_store_is_empty(tmp_path):
    store = RunStore(tmp_path)
    store_full_data_run(store, FP32, STANDIN, 0.9)
    found = experiments.lab_rows("sst2", FP32, "bottleneck", [4], profile=Profile(), seeds=[0], stores=[store])
    assert found.backbone == STANDIN and found.rows[0].values == (0.9,)
    assert f"reference runs on the stand-in {STANDIN}, not {TINY}" in found.note
    assert "python -m adapterlab sweep --task sst2 " in found.note and f"--backbone {TINY}" in found.note
    assert found.missing() == "all 1 runs stored (1 settings × their seeds)"
