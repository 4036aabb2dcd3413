"""Lab 8's stored three-seed ablation: claims computed from the stored numbers, missing runs named."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from adapterlab.ablation_report import CLAIMS, read_stored_ablations
from adapterlab.ablation_runs import ablation_key_for
from adapterlab.backbones import TINY
from adapterlab.data import TOY_DIR
from adapterlab.runstore import RunStore, key_for
from adapterlab.training import TrainConfig

CONFIG = TrainConfig(max_steps=2, batch_size=8, progress=False)
WHERE = {"backbone": TINY, "data_dir": TOY_DIR, "max_train": 32, "max_eval": 16}
SEEDS = (0, 1, 2)
EVAL_ROWS = 40


def span_scores(n, full, one_off, lower_off, upper_off, all_off):
    """An n-layer score matrix (n even): one layer off, each half off, all off; other spans in between."""
    scores = np.full((n, n), np.nan)
    for i in range(n):
        for j in range(i, n):
            scores[i, j] = (full + all_off) / 2
        scores[i, i] = one_off
    scores[0, n // 2 - 1], scores[n // 2, n - 1], scores[0, n - 1] = lower_off, upper_off, all_off
    return scores


def store_runs(store, *, full, one_off, lower_off, upper_off, all_off, majority, trained, control, seeds=SEEDS):
    """Stored ablations and control runs under the keys lab 8 looks up; seed k adds k × 0.004 noise."""
    for seed in seeds:
        wobble = 0.004 * (seed - 1)
        config = dataclasses.replace(CONFIG, seed=seed)
        matrix = span_scores(4, full, one_off + wobble, lower_off + wobble, upper_off - wobble, all_off + wobble)
        store.put({"key": ablation_key_for("sst2", config, EVAL_ROWS, **WHERE), "status": "complete",
                   "metric": "accuracy", "best_metric": trained + wobble,
                   "ablation": {"metric": "accuracy", "full": full, "majority": majority,
                                "scores": [[None if np.isnan(v) else float(v) for v in row] for row in matrix]}})
        control_config = dataclasses.replace(config, method="layernorm")  # what all-off keeps trained, no adapters
        store.put({"key": key_for("sst2", control_config, **WHERE), "status": "complete", "metric": "accuracy",
                   "best_metric": control - wobble})


def read(store, seeds=SEEDS):
    return read_stored_ablations("sst2", CONFIG, seeds, EVAL_ROWS, stores=[store], **WHERE)


def test_the_papers_shape_and_a_good_backbone_make_every_claim_true(tmp_path):
    store = RunStore(tmp_path)
    store_runs(store, full=0.86, one_off=0.855, lower_off=0.85, upper_off=0.70, all_off=0.52, majority=0.51,
               trained=0.85, control=0.80)
    stored = read(store)
    assert stored.missing_seeds == () and stored.missing() == ""
    assert stored.claims() == dict.fromkeys(CLAIMS, True)
    lower, upper = stored.halves()
    assert np.allclose(lower, [0.846, 0.85, 0.854]) and np.allclose(upper, [0.704, 0.70, 0.696])
    assert stored.trained_row().mean == pytest.approx(0.85) and stored.control.mean == pytest.approx(0.80)
    assert "paper" in stored.beside_the_paper() and "0.850 ± 0.004" in stored.beside_the_paper()
    assert "0.520 ± 0.004" in stored.table()


def test_a_short_run_on_a_backbone_that_needs_no_help_makes_the_papers_claims_false(tmp_path):
    store = RunStore(tmp_path)
    store_runs(store, full=0.86, one_off=0.80, lower_off=0.82, upper_off=0.825, all_off=0.77, majority=0.51,
               trained=0.85, control=0.55)
    assert read(store).claims() == {"one_layer_costs_little": False, "lower_matter_less": False,
                                        "all_off_near_majority": False, "control_recovers_most": False,
                                        "adapters_beat_control": True, "all_off_below_control": False}


def test_a_difference_within_the_seed_spread_is_no_claim(tmp_path):
    store = RunStore(tmp_path)
    # lower and upper half off differ by 0.003, less than their spread (0.004 per seed step: sd 0.004)
    store_runs(store, full=0.86, one_off=0.855, lower_off=0.803, upper_off=0.80, all_off=0.52, majority=0.51,
               trained=0.85, control=0.848)
    claims = read(store).claims()
    assert claims["lower_matter_less"] is False and claims["adapters_beat_control"] is False


def test_missing_runs_give_no_claims_and_the_commands_that_make_them(tmp_path):
    stored = read(RunStore(tmp_path))
    assert stored.summary is None and stored.missing_seeds == SEEDS
    assert set(stored.claims().values()) == {None}
    text = stored.missing()
    assert "python -m adapterlab ablate --task sst2" in text and "--seeds 0,1,2" in text
    assert "--backbone tiny-random --store data/reference_runs" in text
    assert "python -m adapterlab sweep --task sst2 --method layernorm" in text

    store = RunStore(tmp_path / "two")
    store_runs(store, full=0.86, one_off=0.855, lower_off=0.85, upper_off=0.70, all_off=0.52, majority=0.51,
               trained=0.85, control=0.80, seeds=(0, 1))
    stored = read(store)
    assert stored.missing_seeds == (2,) and stored.summary.seeds == [0, 1]
    assert "seeds 0, 1, 2: seed 2 not stored" in stored.missing() and "control: " in stored.missing()
    assert stored.claims()["all_off_near_majority"] is True  # two seeds are enough for a spread


def test_the_claim_lines_print_each_claim_with_its_boolean_or_not_stored(tmp_path):
    store = RunStore(tmp_path)
    store_runs(store, full=0.86, one_off=0.80, lower_off=0.82, upper_off=0.825, all_off=0.77, majority=0.51,
               trained=0.85, control=0.55)
    lines = read(store).claim_lines(["one_layer_costs_little", "adapters_beat_control"]).splitlines()
    assert lines == ["any one layer's adapters off costs under 2 points: False",
                     "the adapted model beats the control, beyond the spread: True"]
    missing = read(RunStore(tmp_path / "empty")).claim_lines(["lower_matter_less"])
    assert missing == "the lower half off costs less than the upper half off, beyond the spread: not stored"


def test_ablations_stored_without_the_control_still_compare_with_the_paper(tmp_path):
    store = RunStore(tmp_path)
    store_runs(store, full=0.86, one_off=0.855, lower_off=0.85, upper_off=0.70, all_off=0.52, majority=0.51,
               trained=0.85, control=0.80)
    for path in tmp_path.glob("*.json"):  # take the control runs out again
        if '"layernorm"' in path.read_text():
            path.unlink()
    stored = read(store)
    claims = stored.claims()
    assert claims["lower_matter_less"] is True and claims["all_off_below_control"] is None
    assert "control, no adapters, the LayerNorms, head and pooler trained: not stored" in stored.beside_the_paper()
    assert "python -m adapterlab sweep --task sst2 --method layernorm" in stored.missing()


def test_all_off_far_below_the_majority_class_is_not_near_it(tmp_path):
    store = RunStore(tmp_path)
    store_runs(store, full=0.86, one_off=0.855, lower_off=0.85, upper_off=0.70, all_off=0.30, majority=0.51,
               trained=0.85, control=0.80)
    assert read(store).claims()["all_off_near_majority"] is False


def test_the_control_trains_exactly_what_all_off_keeps_trained(make_classifier):
    """All off skips the adapters and keeps the rest of what the adapted run trained: the control must train that
    rest, parameter for parameter, and nothing else (a head-only control would leave the LayerNorms out)."""
    from adapterlab.ablation_report import CONTROL_METHOD
    from adapterlab.methods import apply_method
    from adapterlab.model.trainable import parameter_group

    settings = CONFIG.method_kwargs() | {"train_pooler": True}
    adapted = apply_method(make_classifier(), CONFIG.method, **settings)
    kept = {name for name, p in adapted.named_parameters() if p.requires_grad and parameter_group(adapted, name) != "adapters"}
    control = apply_method(make_classifier(), CONTROL_METHOD, **settings)
    assert {name for name, p in control.named_parameters() if p.requires_grad} == kept
    assert {parameter_group(adapted, name) for name in kept} == {"layernorm", "pooler", "classifier"}
