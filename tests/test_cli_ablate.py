"""`adapterlab ablate`: a span ablation per seed into the run store, resumable, with the usual errors."""

from __future__ import annotations

import numpy as np
import pytest

from adapterlab import ablation_runs, backbones
from adapterlab.backbones import TINY
from adapterlab.cli import INTERRUPTED, OK, USAGE, main
from adapterlab.runstore import RunStore

FAST = ["--backbone", TINY, "--bottleneck", "4", "--steps", "2", "--batch-size", "8", "--max-train", "32",
        "--max-eval", "16", "--eval-rows", "16", "--no-progress"]


pytestmark = pytest.mark.usefixtures("toy_data_only")


def ablations_in(folder) -> list[dict]:
    records = [r for r in RunStore(folder).records() if "analysis" in r["key"]]
    return sorted(records, key=lambda r: r["key"]["settings"]["seed"])


def test_ablate_stores_each_seed_prints_the_spread_and_a_rerun_computes_nothing(tmp_path, capsys):
    store = tmp_path / "store"
    assert main(["ablate", "--seeds", "0,1", "--store", str(store), *FAST]) == OK
    out = capsys.readouterr().out
    records = ablations_in(store)
    assert [r["key"]["settings"]["seed"] for r in records] == [0, 1]
    assert all(r["key"]["analysis"] == {"name": "span_ablation", "eval_rows": 16} for r in records)
    assert all(r["key"]["precision"] == "fp32" for r in records)  # the reference runs' precision by default
    assert len(RunStore(store).records()) == 4  # each ablation beside its training run
    assert out.count("(computed)") == 2 and "2 span ablations (2 computed now)" in out
    all_off = [r["ablation"]["scores"][0][-1] for r in records]
    assert f"all off {np.mean(all_off):.4f} ± {np.std(all_off, ddof=1):.4f}" in out

    assert main(["ablate", "--seeds", "0,1", "--store", str(store), *FAST]) == OK
    out = capsys.readouterr().out
    assert out.count("(stored)") == 2 and "(0 computed now)" in out
    assert len(RunStore(store).records()) == 4


@pytest.mark.parametrize("bad, words", [(["--eval-rows", "0"], "--eval-rows must be"),
                                        (["--seeds", "0,x"], "--seeds must be"),
                                        (["--seeds", "1,1"], "distinct"),
                                        (["--init-scale", "-1"], "init_scale")])
def test_bad_arguments_are_usage_errors_before_anything_loads(tmp_path, capsys, monkeypatch, bad, words):
    def refuse(*args, **kwargs):
        raise AssertionError("a backbone was loaded before the arguments were checked")

    monkeypatch.setattr(backbones, "load_backbone", refuse)
    assert main(["ablate", "--store", str(tmp_path), *FAST, *bad]) == USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("adapterlab ablate: ") and words in err[0]


def test_only_adapter_methods_can_be_ablated(tmp_path, capsys):
    assert main(["ablate", "--method", "full", "--store", str(tmp_path), *FAST]) == USAGE
    assert "method must be one of houlsby, pfeiffer, parallel" in capsys.readouterr().err


def test_ctrl_c_keeps_the_finished_seeds_and_says_how_to_resume(tmp_path, capsys, monkeypatch):
    real = ablation_runs.compute_ablation

    def stop_at_seed_1(task, config, *args, **kwargs):
        if config.seed == 1:
            raise KeyboardInterrupt
        return real(task, config, *args, **kwargs)

    monkeypatch.setattr(ablation_runs, "compute_ablation", stop_at_seed_1)
    assert main(["ablate", "--seeds", "0,1,2", "--store", str(tmp_path), *FAST]) == INTERRUPTED
    err = capsys.readouterr().err
    assert "interrupted after 1 of 3 seeds" in err and "Run the same command again to resume" in err
    assert [r["key"]["settings"]["seed"] for r in ablations_in(tmp_path)] == [0]
