"""Lab 8's stored three-seed ablation: claims computed from the stored numbers, missing runs named.

The claims that compare two sets of seeds are checked against scipy's own 95 % intervals (``ttest_rel`` for
the two halves of the same models, ``ttest_ind(equal_var=False)`` against the control), on stored values
chosen so that the old spread rule ("more than the larger spread") and the course's rule disagree."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats

from adapterlab.ablation_report import CLAIMS, read_stored_ablations
from adapterlab.ablation_runs import ablation_key_for
from adapterlab.backbones import TINY
from adapterlab.data import TOY_DIR
from adapterlab.runs.compare import Comparison
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


def store_runs(store, *, full, one_off, lower_off, upper_off, all_off, majority, trained, control, seeds=SEEDS,
               upper_follows=False):
    """Stored ablations and control runs under the keys lab 8 looks up; seed k adds (k - 1) × 0.004 noise, to the
    upper half off with the opposite sign unless ``upper_follows`` (then both halves move with the seed)."""
    for seed in seeds:
        wobble = 0.004 * (seed - 1)
        config = dataclasses.replace(CONFIG, seed=seed)
        upper_wobble = wobble if upper_follows else -wobble
        matrix = span_scores(4, full, one_off + wobble, lower_off + wobble, upper_off + upper_wobble,
                             all_off + wobble)
        store.put({"key": ablation_key_for("sst2", config, EVAL_ROWS, **WHERE), "status": "complete",
                   "metric": "accuracy", "best_metric": trained + wobble,
                   "ablation": {"metric": "accuracy", "full": full, "majority": majority,
                                "scores": [[None if np.isnan(v) else float(v) for v in row] for row in matrix]}})
        control_config = dataclasses.replace(config, method="layernorm")  # what all-off keeps trained, no adapters
        store.put({"key": key_for("sst2", control_config, **WHERE), "status": "complete", "metric": "accuracy",
                   "best_metric": control - wobble})


def read(store, seeds=SEEDS):
    return read_stored_ablations("sst2", CONFIG, seeds, EVAL_ROWS, stores=[store], **WHERE)


WOBBLE = np.array([-0.004, 0.0, 0.004])  # what store_runs adds per seed 0, 1, 2


def paired_interval(a, b):
    interval = stats.ttest_rel(a, b).confidence_interval(0.95)
    return interval.low, interval.high


def welch_interval(a, b):
    interval = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    return interval.low, interval.high


def old_spread_rule(a, b):
    """The rule lab 8 used before: a's mean above b's by more than the larger sample sd."""
    return np.mean(a) - np.mean(b) > max(np.std(a, ddof=1), np.std(b, ddof=1))


def verdicts(claims):
    return {name: claim.verdict if isinstance(claim, Comparison) else claim for name, claim in claims.items()}


def test_the_papers_shape_and_a_good_backbone_make_every_claim_true(tmp_path):
    store = RunStore(tmp_path)
    store_runs(store, full=0.86, one_off=0.855, lower_off=0.85, upper_off=0.70, all_off=0.52, majority=0.51,
               trained=0.85, control=0.80)
    stored = read(store)
    assert stored.missing_seeds == () and stored.missing() == ""
    assert verdicts(stored.claims()) == {"one_layer_costs_little": True, "lower_matter_less": "ahead",
                                         "all_off_near_majority": True, "all_off_below_control": "ahead"}
    assert all(stored.claims()[name].family_size == 2 for name in ("lower_matter_less", "all_off_below_control"))
    lower, upper = stored.halves()
    assert np.allclose(lower, [0.846, 0.85, 0.854]) and np.allclose(upper, [0.704, 0.70, 0.696])
    assert stored.trained_row().mean == pytest.approx(0.85) and stored.control.mean == pytest.approx(0.80)
    assert "paper" in stored.beside_the_paper() and "0.850 ± 0.004" in stored.beside_the_paper()
    assert "0.520 ± 0.004" in stored.table()


def test_a_short_run_on_a_backbone_that_needs_no_help_makes_the_papers_claims_false(tmp_path):
    store = RunStore(tmp_path)
    store_runs(store, full=0.86, one_off=0.80, lower_off=0.82, upper_off=0.825, all_off=0.77, majority=0.51,
               trained=0.85, control=0.55)
    claims = read(store).claims()
    # lower - upper per seed: -0.013, -0.005, +0.003; the control is 0.22 below every adapter off
    assert verdicts(claims) == {"one_layer_costs_little": False, "lower_matter_less": "undecided",
                                "all_off_near_majority": False, "all_off_below_control": "behind"}


def test_a_gap_over_the_spread_but_inside_the_interval_is_undecided(tmp_path):
    """Each gap is larger than both spreads (the old rule's True) and the 95 % interval still holds 0 and gaps
    over the 1-point margin: the course's rule says undecided."""
    store = RunStore(tmp_path)
    store_runs(store, full=0.86, one_off=0.855, lower_off=0.81, upper_off=0.80, all_off=0.834, majority=0.51,
               trained=0.85, control=0.842)
    stored = read(store)
    lower, upper = 0.81 + WOBBLE, 0.80 - WOBBLE
    control, all_off = 0.842 - WOBBLE, 0.834 + WOBBLE
    assert np.allclose(stored.halves(), (lower, upper))
    claims = stored.claims()
    for name, (a, b, interval) in {"lower_matter_less": (lower, upper, paired_interval(lower, upper)),
                                   "all_off_below_control": (control, all_off, paired_interval(control, all_off)),
                                   }.items():
        low, high = interval
        assert old_spread_rule(a, b), name  # the spread rule would have called it a finding
        assert low < 0 < high and (low < -0.01 or high > 0.01), name  # scipy: neither side ahead, not level
        assert claims[name].verdict == "undecided", name
        assert (claims[name].low, claims[name].high) == pytest.approx((low, high)), name
        assert claims[name].difference == pytest.approx(np.mean(a) - np.mean(b)), name


@pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")  # per-seed differences equal up to round-off
def test_the_halves_and_the_control_are_paired_by_seed(tmp_path):
    store = RunStore(tmp_path)
    # the halves move together with the seed: their per-seed differences are all 0.006, though the gap is
    # inside Welch's interval; the control and every adapter off share their seeds too, and are read seed by seed
    store_runs(store, full=0.86, one_off=0.855, lower_off=0.806, upper_off=0.80, all_off=0.52, majority=0.51,
               trained=0.85, control=0.838, upper_follows=True)
    claims = read(store).claims()
    lower, upper = 0.806 + WOBBLE, 0.80 + WOBBLE
    assert welch_interval(lower, upper)[0] < 0 < paired_interval(lower, upper)[0]
    assert claims["lower_matter_less"].verdict == "ahead" and claims["lower_matter_less"].paired
    control, all_off = 0.838 - WOBBLE, 0.52 + WOBBLE
    claim = claims["all_off_below_control"]
    assert claim.paired and (claim.low, claim.high) == pytest.approx(paired_interval(control, all_off))


def test_halves_that_score_the_same_in_every_seed_are_level(tmp_path):
    store = RunStore(tmp_path)
    store_runs(store, full=0.86, one_off=0.855, lower_off=0.80, upper_off=0.80, all_off=0.52, majority=0.51,
               trained=0.85, control=0.80, upper_follows=True)
    claim = read(store).claims()["lower_matter_less"]
    assert claim.verdict == "level" and abs(claim.difference) < 1e-9


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
    assert stored.claims()["lower_matter_less"].n_a == 2


def test_the_claim_lines_print_each_claim_with_its_boolean_or_its_verdict_and_the_table_its_interval(tmp_path):
    store = RunStore(tmp_path)
    store_runs(store, full=0.86, one_off=0.80, lower_off=0.82, upper_off=0.825, all_off=0.77, majority=0.51,
               trained=0.85, control=0.55)
    stored = read(store)
    names = ["one_layer_costs_little", "all_off_below_control", "lower_matter_less"]
    assert stored.claim_lines(names).splitlines() == [
        "any one layer's adapters off costs under 2 points: False",
        "the control scores above every adapter off (paired by seed): every adapter off ahead",
        "the lower half off scores above the upper half off (the same models, paired by seed): undecided"]
    rows = stored.claim_table(names).rows()  # the boolean claim has no row
    control = [f"{100 * x:+.1f}" for x in paired_interval(0.55 - WOBBLE, 0.77 + WOBBLE)]
    halves = [f"{100 * x:+.1f}" for x in paired_interval(0.82 + WOBBLE, 0.825 - WOBBLE)]
    assert [row[:5] for row in rows] == [
        ("the control vs every adapter off", "-22.0", f"{control[0]} to {control[1]}", "every adapter off ahead",
         "3 paired"),
        ("lower half off vs upper half off", "-0.5", f"{halves[0]} to {halves[1]}", "undecided", "3 paired")]
    assert "Holm over 2 verdicts" in stored.claim_table(names).footer()
    empty = read(RunStore(tmp_path / "empty"))
    assert empty.claim_lines(["lower_matter_less"]) == ("the lower half off scores above the upper half off (the same "
                                                         "models, paired by seed): not stored")
    assert empty.claim_table(["lower_matter_less"]).rows() == [
        ("lower half off vs upper half off", "", "", "not stored yet", "")]


def test_no_claim_says_beyond_the_spread():
    assert not [text for text in CLAIMS.values() if "spread" in text]


def test_ablations_stored_without_the_control_still_compare_with_the_paper(tmp_path):
    store = RunStore(tmp_path)
    store_runs(store, full=0.86, one_off=0.855, lower_off=0.85, upper_off=0.70, all_off=0.52, majority=0.51,
               trained=0.85, control=0.80)
    for path in tmp_path.glob("*.json"):  # take the control runs out again
        if '"layernorm"' in path.read_text():
            path.unlink()
    stored = read(store)
    claims = stored.claims()
    assert claims["lower_matter_less"].verdict == "ahead" and claims["all_off_below_control"] is None
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
