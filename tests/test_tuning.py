"""The tuning protocol: selection on validation rows that never train, each method's own rate, a grid
that grows past a winning edge, shared rates, and shards that split the runs without overlap."""

from __future__ import annotations

import math

import pytest

from adapterlab.runs import tradeoff, tuning
from adapterlab.runs.reference import SeedRow
from adapterlab.runs.store import RunStore
from adapterlab.runs.tuning import POINTS, PROTOCOLS, Point, Protocol, owner, plan, select, tuned_rows
from adapterlab.training.backbones import TINY, load_backbone
from adapterlab.training.data import carve_validation, load_split
from adapterlab.training.experiment import load_splits


@pytest.fixture(autouse=True)
def toy_data_only(monkeypatch):
    monkeypatch.delenv("ADAPTERLAB_DATA", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def fake_lookup(score_of):
    """A store that holds every run, with validation score ``score_of(config)``."""
    return lambda config: {"validation_metric": score_of(config), "best_metric": 0.5, "status": "complete"}


PROTOCOL = PROTOCOLS["sst2"]


def test_the_validation_rows_are_disjoint_from_training_and_the_same_for_every_seed():
    train = load_split("sst2", "train")
    rest, validation = carve_validation(train, 40)
    assert len(validation) == 40 and len(rest) == len(train) - 40
    assert not set(rest.texts) & set(validation.texts) or len(set(train.texts)) < len(train.texts)
    pairs = lambda split: sorted(zip(split.texts, split.labels))  # noqa: E731
    assert sorted(pairs(rest) + pairs(validation)) == pairs(train)
    _, _, v0 = load_splits("sst2", None, 100, None, seed=0, validation_rows=40)
    t1, _, v1 = load_splits("sst2", None, 100, None, seed=1, validation_rows=40)
    assert v0.texts == v1.texts == validation.texts
    assert not set(t1.texts) & set(v1.texts) - set(rest.texts)
    assert len(t1) == 100 and set(t1.texts) <= set(rest.texts)
    with pytest.raises(ValueError, match="below"):
        carve_validation(train, len(train))


def test_the_rate_with_the_best_validation_score_is_selected_not_the_best_dev_score():
    point = Point("BitFit", "bitfit")
    # dev (best_metric) would pick 1e-2; validation picks 3e-3.
    lookup = lambda c: {"validation_metric": {1e-3: 0.7, 3e-3: 0.8, 1e-2: 0.75}[c.learning_rate],  # noqa: E731
                        "best_metric": c.learning_rate, "status": "complete"}
    selection, needed = select(point, PROTOCOL, lookup)
    assert needed == [] and selection.rate == 3e-3 and not selection.at_edge


def test_a_grid_whose_edge_wins_grows_past_it_and_says_when_it_stops():
    point = Point("BitFit", "bitfit")
    rising = fake_lookup(lambda c: c.learning_rate)  # the larger the better, forever
    selection, _ = select(point, PROTOCOL, rising)
    assert len(selection.grid) == 3 + tuning.MAX_EXTENSIONS and selection.rate == max(selection.grid)
    assert selection.at_edge and max(selection.grid) > 1e-2
    falling = fake_lookup(lambda c: -c.learning_rate)
    assert min(select(point, PROTOCOL, falling)[0].grid) < 1e-3


def test_a_missing_seed_zero_run_is_what_the_selection_asks_for():
    point = Point("head only", "head")
    lookup = lambda c: None if c.learning_rate == 3e-3 else {"validation_metric": 0.5, "status": "complete"}  # noqa
    selection, needed = select(point, PROTOCOL, lookup)
    assert selection.rate is None and [c.learning_rate for c in needed] == [3e-3]
    assert needed[0].seed == 0 and needed[0].validation_rows == PROTOCOL.validation_rows


def test_shared_points_wait_for_their_source_then_take_its_rate():
    points = (Point("Houlsby r=64", "houlsby", (("bottleneck", 64),)),
              Point("Houlsby r=8", "houlsby", (("bottleneck", 8),), "Houlsby r=64"))
    store = {}
    key = lambda c: (c.bottleneck, c.learning_rate, c.seed)  # noqa: E731
    lookup = lambda c: store.get(key(c))  # noqa: E731
    ready, waiting, _ = plan(PROTOCOL, lookup, points)
    assert {c.bottleneck for c in ready} == {64} and len(waiting) == 2
    for config in ready:
        store[key(config)] = {"validation_metric": -abs(math.log10(config.learning_rate) + 3), "status": "complete"}
    ready, waiting, selections = plan(PROTOCOL, lookup, points)
    assert selections["Houlsby r=64"].rate == 1e-3 and not waiting
    assert sorted((c.bottleneck, c.seed) for c in ready) == [(8, 0), (8, 1), (8, 2), (64, 1), (64, 2)]
    assert {c.learning_rate for c in ready} == {1e-3}


def test_the_seeds_of_points_that_choose_a_rate_come_before_those_of_points_that_borrow_it():
    seed_zero_only = lambda c: {"validation_metric": c.learning_rate, "best_metric": 0.5, "status": "complete"} \
        if c.seed == 0 else None  # noqa: E731
    ready, waiting, _ = plan(PROTOCOL, seed_zero_only)
    borrows = [any(c == p.config(PROTOCOL, learning_rate=c.learning_rate, seed=c.seed) for p in POINTS if p.rate_of)
               for c in ready]
    assert waiting == [] and any(borrows) and not all(borrows)
    assert borrows == sorted(borrows)  # every run of a point that chooses its rate, then the borrowers'


def test_progress_counts_the_grid_runs_left_and_the_points_waiting_then_says_when_all_is_stored():
    from adapterlab import methods

    grid_runs = sum(len(methods.get(p.method).learning_rates) for p in POINTS if p.rate_of is None)
    line = tuning.progress("sst2", lambda config: None)
    assert f"{grid_runs} runs can start now and {len(POINTS)} points wait" in line
    assert "python -m adapterlab tune --task sst2" in line
    peaked = fake_lookup(lambda c: -abs(math.log(c.learning_rate / 1e-3)))  # every grid's best inside it
    assert tuning.progress("sst2", peaked) == "every run of the sst2 protocol is stored"
    only_head = [point for point in POINTS if point.label == "head only"]
    all_but_one = lambda c: None if c.learning_rate == 1e-2 else peaked(c)  # noqa: E731
    assert "1 run can start now and 1 point waits for a rate" in tuning.progress("sst2", all_but_one, only_head)


def test_every_run_has_exactly_one_owner_shard():
    ready, _, _ = plan(PROTOCOL, lambda config: None, POINTS)
    for count in (1, 2, 3):
        owners = [owner(config, count) for config in ready]
        assert set(owners) <= set(range(1, count + 1))
    assert {owner(c, 2) for c in ready} == {1, 2}


def test_lora_points_keep_alpha_over_r_fixed():
    for point in POINTS:
        if point.method == "lora":
            settings = dict(point.settings)
            assert settings["lora_alpha"] / settings["lora_rank"] == 2.0


def test_a_small_protocol_trains_each_run_once_and_the_table_reports_dev_at_the_selected_rate(monkeypatch, tmp_path):
    monkeypatch.setitem(PROTOCOLS, "sst2", Protocol("sst2", validation_rows=40, max_train=64, epochs=1.0, eval_every=2))
    points = (Point("head only", "head"), Point("BitFit", "bitfit"))
    store = RunStore(tmp_path / "store")
    tuning.run_protocol("sst2", stores=[store], backbone=TINY, points=points, poll_seconds=0.01, log=lambda *a: None)
    trained = len(store.records())
    tuning.run_protocol("sst2", stores=[store], backbone=TINY, points=points, poll_seconds=0.01, log=lambda *a: None)
    assert len(store.records()) == trained  # a rerun finds every run stored
    records = store.records()
    assert len(records) == len({r["id"] for r in records})
    assert all(r["selected_on"] == "validation" and "validation" in r["key"] for r in records)
    rows = tuned_rows("sst2", [store], TINY, points=points)
    for row in rows:
        assert row["rate"] in row["grid"] and row["n"] == 3
        assert row["grid"][row["rate"]] == max(row["grid"].values())
        selected = [r for r in records if r["key"]["settings"]["method"] == row["method"]
                    and r["key"]["settings"]["peak_learning_rate"] == row["rate"]]
        assert sorted(r["best_metric"] for r in selected) == sorted(row["values"])
        assert row["seed_row"].values == tuple(row["values"]) and row["seed_row"].seeds == tuning.SEEDS
        assert row["seed_row"].config.peak_learning_rate == row["rate"]

    # The figure's x: the trainer's own count where the runs are stored, the same count made on the
    # backbone where they are not (an empty store).
    model, _, _ = load_backbone(TINY, seed=0)
    stored = tradeoff.tuned_points(rows, model)
    assert [p.trained for p in stored] == [next(r["trained_parameters"] for r in records
                                                if r["key"]["settings"]["method"] == row["method"]) for row in rows]
    assert [p.family for p in stored] == ["Head only", "BitFit: biases only"]
    empty = tuned_rows("sst2", [RunStore(tmp_path / "empty")], TINY, points=points)
    assert [row["n"] for row in empty] == [0, 0]
    assert [p.trained for p in tradeoff.tuned_points(empty, model)] == [p.trained for p in stored]


def test_a_stopped_run_stops_the_protocol_and_is_not_stored(monkeypatch, tmp_path):
    """Ctrl-C or SIGTERM inside a run ends the protocol (the run is not stored) instead of starting it again."""
    from adapterlab import training

    monkeypatch.setitem(PROTOCOLS, "sst2", Protocol("sst2", validation_rows=40, max_train=64, epochs=1.0, eval_every=2))
    real, calls = training.run_experiment, []

    def stopped(*args, **kwargs):
        calls.append(1)
        result = real(*args, **kwargs)
        result.interrupted = True
        return result

    monkeypatch.setattr(training, "run_experiment", stopped)
    store = RunStore(tmp_path / "store")
    with pytest.raises(KeyboardInterrupt):
        tuning.run_protocol("sst2", stores=[store], backbone=TINY, points=(Point("head only", "head"),),
                            poll_seconds=0.01, log=lambda *a: None)
    assert calls == [1] and store.records() == []


def _row(label, values, rate=1e-3, rate_of=None, trained=1000):
    """A tuned row as tuned_rows gives it, its spread computed here, apart from the code under test."""
    n = len(values)
    mean = sum(values) / n if n else math.nan
    std = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5 if n > 1 else math.nan
    seeds = SeedRow(label, None, "accuracy", tuple(values), tuning.SEEDS[:n], tuning.SEEDS[n:], 0, mean, std)
    return {"label": label, "method": "x", "rate": rate, "rate_of": rate_of, "grid": {}, "at_edge": False,
            "mean": mean, "std": std, "n": n, "values": list(values), "trained_parameters": trained if n else None,
            "seed_row": seeds}


@pytest.mark.parametrize("full, expected", [
    ((0.850, 0.852, 0.854), False),   # means 0.844 and 0.852, spreads 0.004 and 0.002: 0.008 apart, not within
    ((0.843, 0.845, 0.847), True),    # 0.001 apart
    ((0.835, 0.846, 0.857), True),    # 0.002 apart; the full runs' own spread (0.011) is the larger
    ((0.855, 0.857, 0.859), False),   # 0.013 apart, more than the larger spread 0.004
])
def test_adapters_match_full_fine_tuning_only_within_the_larger_spread(full, expected):
    houlsby = _row("Houlsby r=64", (0.840, 0.844, 0.848))
    mean = sum(full) / 3
    spread = (sum((v - mean) ** 2 for v in full) / 2) ** 0.5
    assert (abs(mean - 0.844) <= max(0.004, spread)) is expected  # the rule, computed apart from the code
    claims = tuning.tuned_claims([houlsby, _row("full fine-tuning", full)])
    assert claims["adapters_match_full"] is expected


def test_a_claim_waits_for_every_seed():
    rows = [_row("Houlsby r=64", (0.840, 0.844, 0.848)), _row("full fine-tuning", (0.845, 0.846)),
            _row("LoRA r=8", ())]
    assert tuning.tuned_claims(rows) == {"adapters_match_full": None, "lora_matches_adapters": None}
    assert tuning.tuned_claim_lines(rows).splitlines() == [
        "tuned, Houlsby r = 64 is within one spread of full fine-tuning: not stored yet",
        "tuned, LoRA r = 8 is within one spread of Houlsby r = 64: not stored yet"]


def test_the_table_shows_rates_spreads_and_the_paper_beside_ours():
    rows = [_row("Houlsby r=64", (0.840, 0.844, 0.848), trained=753_794),
            _row("Houlsby r=8", (0.83,), rate_of="Houlsby r=64"), _row("full fine-tuning", (), rate=None)]
    lines = tuning.tuned_table(rows, "sst2").splitlines()
    assert lines[1].split() == ["Houlsby", "r=64", "0.001", "753,794", "84.4", "±", "0.4", "(3)", "94.0"]
    assert lines[2].split() == ["Houlsby", "r=8", "0.001*", "1,000", "83.0", "(1)"]
    assert lines[3].split() == ["full", "fine-tuning", "—", "—", "not", "stored", "94.9"]


def test_the_validation_curve_is_read_from_each_evaluation_and_its_final_gain_is_the_last_step_over_the_best_before():
    record = {"metric": "accuracy", "evals": [
        {"step": 125, "accuracy": 0.70, "validation": {"accuracy": 0.80}},
        {"step": 250, "accuracy": 0.90, "validation": {"accuracy": 0.86}},   # the dev score is not the curve's
        {"step": 375, "accuracy": 0.80, "validation": {"accuracy": 0.84}},
        {"step": 500, "accuracy": 0.81, "validation": {"accuracy": 0.87}}]}
    curve = tuning.validation_curve(record)
    assert curve == [(125, 0.80), (250, 0.86), (375, 0.84), (500, 0.87)]
    assert tuning.final_gain(curve) == pytest.approx(0.87 - 0.86)            # over the best before, not the last
    assert tuning.final_gain(curve[:3]) == pytest.approx(0.84 - 0.86)        # it fell back
    with pytest.raises(ValueError, match="evaluate more often"):
        tuning.final_gain(curve[:1])


def test_a_tuned_row_carries_seed_zeros_curve_at_its_selected_rate(monkeypatch, tmp_path):
    monkeypatch.setitem(PROTOCOLS, "sst2", Protocol("sst2", validation_rows=40, max_train=64, epochs=1.0, eval_every=1))
    points = (Point("head only", "head"),)
    store = RunStore(tmp_path / "store")
    tuning.run_protocol("sst2", stores=[store], backbone=TINY, points=points, poll_seconds=0.01, log=lambda *a: None)
    row, = tuned_rows("sst2", [store], TINY, points=points)
    seed_zero = next(r for r in store.records() if r["key"]["settings"]["seed"] == 0
                     and r["key"]["settings"]["peak_learning_rate"] == row["rate"])
    assert [step for step, _ in row["curve"]] == [e["step"] for e in seed_zero["evals"]] and len(row["curve"]) > 1
    assert max(score for _, score in row["curve"]) == seed_zero["validation_metric"]  # the step it kept
