"""The tuning protocol: selection on validation rows that never train, each method's own rate, a grid
that grows past a winning edge, shared rates, and shards that split the runs without overlap."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from scipy import stats

from adapterlab.runs import tradeoff, tuning
from adapterlab.runs.compare import compare, holm
from adapterlab.runs.reference import SeedRow
from adapterlab.runs.store import RunStore
from adapterlab.runs.tuning import POINTS, PROTOCOLS, Point, Protocol, owner, plan, select, tuned_rows
from adapterlab.training.backbones import TINY, load_backbone
from adapterlab.training.data import Split, carve_validation, get_task, load_split, nested_overlap
from adapterlab.training.experiment import load_splits


pytestmark = pytest.mark.usefixtures("toy_data_only")


def fake_lookup(score_of, best_metric=lambda config: 0.5):
    """A store that holds every run, with validation score ``score_of(config)``."""
    return lambda config: {"validation_metric": score_of(config), "best_metric": best_metric(config),
                           "status": "complete", "metric": "accuracy", "key": {"settings": {"seed": config.seed}}}


PROTOCOL = PROTOCOLS["sst2"]
ROOT = Path(__file__).resolve().parent.parent
SHARED_GLUE = next((p for p in (ROOT.parent / "shared" / "data" / "glue",) if p.is_dir()), None)


def test_the_validation_rows_are_disjoint_from_training_and_the_same_for_every_seed():
    train = load_split("cola", "train")
    rest, validation = carve_validation(train, 40)
    assert len(validation) == 40 and len(rest) == len(train) - 40
    pairs = lambda split: sorted(zip(split.texts, split.labels))  # noqa: E731
    assert sorted(pairs(rest) + pairs(validation)) == pairs(train)
    _, _, v0 = load_splits("cola", None, 100, None, seed=0, validation_rows=40)
    t1, _, v1 = load_splits("cola", None, 100, None, seed=1, validation_rows=40)
    assert v0.texts == v1.texts == validation.texts
    assert len(t1) == 100 and set(t1.texts) <= set(rest.texts)
    with pytest.raises(ValueError, match="below"):
        carve_validation(train, len(train))


def _contains(outer: str, inner: str) -> bool:
    return f" {inner} " in f" {outer} "


def test_phrases_of_a_validation_sentence_never_train_and_no_validation_row_contains_a_training_row():
    """SST-2's layout on a small scale: sentences and every phrase of them, as rows; checked pair by pair."""
    sentences = [("a gorgeous , witty , seductive movie .", 1), ("the plot is nothing but boilerplate clichés", 0),
                 ("it 's a charming and often affecting journey .", 1), ("a dull , simple-minded and stereotypical tale", 0),
                 ("one of the best films of the year", 1), ("the acting is bad and the story worse", 0)]
    rows = []
    for sentence, label in sentences * 3:
        words = sentence.split()
        rows += [(" ".join(words[i:j]), label) for i in range(len(words)) for j in range(i + 1, len(words) + 1)
                 if j - i in (1, 2, len(words)) or (i, j) == (0, len(words) - 1)]
    train = Split(get_task("sst2"), "train", [t for t, _ in rows], [y for _, y in rows], "rows", is_toy=True)
    rest, validation = carve_validation(train, 2)
    assert len(validation) == 2 and all(text in [s for s, _ in sentences] for text in validation.texts)
    assert not any(_contains(t, v) or _contains(v, t) for v in validation.texts for t in rest.texts)
    assert nested_overlap(validation, rest) == 0
    plain = dataclasses.replace(train, task=dataclasses.replace(train.task, nested_rows=False))
    leaky_rest, leaky = carve_validation(plain, 20)                          # rows drawn at random leak
    assert nested_overlap(leaky, leaky_rest) == sum(
        any(_contains(t, v) or _contains(v, t) for t in leaky_rest.texts) for v in leaky.texts) > 0


@pytest.mark.skipif(SHARED_GLUE is None, reason="the GLUE data is not beside the project")
def test_the_real_sst2_validation_split_shares_no_phrase_with_its_training_rows(monkeypatch):
    monkeypatch.setenv("ADAPTERLAB_DATA", str(SHARED_GLUE))
    train, _, validation = load_splits("sst2", None, None, None, seed=0, validation_rows=1000)
    assert len(validation) == 1000 and nested_overlap(validation, train) == 0
    assert 50_000 < len(train) < 67_349 - 1000                             # the phrases inside them left out


def test_the_rate_with_the_best_validation_score_is_selected_not_the_best_dev_score():
    point = Point("BitFit", "bitfit")
    # dev (best_metric) would pick 1e-2; validation picks 3e-3, by more than the validation noise.
    lookup = fake_lookup(lambda c: {1e-3: 0.70, 3e-3: 0.85, 1e-2: 0.75}[c.learning_rate], lambda c: c.learning_rate)
    selection, needed = select(point, PROTOCOL, lookup)
    assert needed == [] and selection.rate == 3e-3 and not selection.at_edge and selection.tie_scores == {}


def test_a_grid_whose_edge_wins_grows_past_it_and_says_when_it_stops():
    point = Point("BitFit", "bitfit")
    rising = fake_lookup(lambda c: 0.3 + c.learning_rate)  # the larger the better, forever
    selection, _ = select(point, PROTOCOL, rising)
    assert len(selection.grid) == 3 + tuning.MAX_EXTENSIONS and selection.rate == max(selection.grid)
    assert selection.at_edge and max(selection.grid) > 1e-2
    falling = fake_lookup(lambda c: max(0.0, 0.9 - c.learning_rate * 20))
    assert min(select(point, PROTOCOL, falling)[0].grid) < 1e-3


def test_the_validation_noise_is_the_standard_error_of_one_score():
    # accuracy: sqrt(p (1 - p) / n); the Matthews correlation: (1 - phi^2) / sqrt(n - 1)
    assert tuning.validation_noise(0.85, "accuracy", 1000) == pytest.approx((0.85 * 0.15 / 1000) ** 0.5)
    assert tuning.validation_noise(0.3, "matthews", 801) == pytest.approx(0.91 / 800 ** 0.5)


@pytest.mark.parametrize("second, chosen", [
    ({1e-3: 0.80, 3e-3: 0.86}, 3e-3),   # seed 1 agrees with seed 0: 3e-3
    ({1e-3: 0.88, 3e-3: 0.82}, 1e-3),   # the mean over seeds 0 and 1 turns the choice: 0.865 vs 0.84
])
def test_a_near_tie_at_seed_0_is_decided_on_the_mean_of_two_seeds(second, chosen):
    point = Point("BitFit", "bitfit")
    first = {3e-4: 0.70, 1e-3: 0.85, 3e-3: 0.86, 1e-2: 0.70}  # 0.01 apart: within 2 standard errors (0.022)
    stored = {}
    lookup = lambda c: stored.get((c.learning_rate, c.seed)) or (  # noqa: E731
        fake_lookup(lambda c: first[c.learning_rate])(c) if c.seed == 0 else None)
    selection, needed = select(point, PROTOCOL, lookup)
    assert selection.rate is None and sorted((c.learning_rate, c.seed) for c in needed) == [(1e-3, 1), (3e-3, 1)]
    for config in needed:
        stored[config.learning_rate, 1] = fake_lookup(lambda c: second[c.learning_rate])(config)
    selection, needed = select(point, PROTOCOL, lookup)
    assert needed == [] and selection.rate == chosen and not selection.at_edge
    assert (3e-4 in selection.grid) == (chosen == 1e-3)  # two seeds chose BitFit's lowest rate: the grid grew
    assert selection.tie_scores == pytest.approx({rate: (first[rate] + second[rate]) / 2 for rate in second})


def test_a_missing_seed_zero_run_is_what_the_selection_asks_for():
    point = Point("head only", "head")
    lookup = lambda c: None if c.learning_rate == 3e-3 else fake_lookup(lambda c: 0.5)(c)  # noqa: E731
    selection, needed = select(point, PROTOCOL, lookup)
    assert selection.rate is None and [c.learning_rate for c in needed] == [3e-3]
    assert needed[0].seed == 0 and needed[0].validation_rows == PROTOCOL.validation_rows


def test_sizes_wait_for_r64s_rate_then_are_tuned_over_it_and_its_neighbours():
    points = (Point("Houlsby r=64", "houlsby", (("bottleneck", 64),)),
              Point("Houlsby r=8", "houlsby", (("bottleneck", 8),), "Houlsby r=64"))
    store = {}
    key = lambda c: (c.bottleneck, c.learning_rate, c.seed)  # noqa: E731
    lookup = lambda c: store.get(key(c))  # noqa: E731
    ready, waiting, _ = plan(PROTOCOL, lookup, points)
    assert {c.bottleneck for c in ready} == {64} and len(waiting) == 2
    peak = {64: 1e-3, 8: 3e-4}
    score = lambda c: 0.9 - 0.1 * abs(math.log10(c.learning_rate / peak[c.bottleneck]))  # noqa: E731
    for config in ready:
        store[key(config)] = fake_lookup(score)(config)
    ready, waiting, selections = plan(PROTOCOL, lookup, points)
    assert selections["Houlsby r=64"].rate == 1e-3 and [p.label for p in waiting] == ["Houlsby r=8"]
    grid_of_8 = sorted(c.learning_rate for c in ready if c.bottleneck == 8)
    assert grid_of_8 == [3e-4, 1e-3, 3e-3]                   # r = 64's rate and its neighbours, at seed 0
    for config in ready:
        store[key(config)] = fake_lookup(score)(config)
    ready, waiting, selections = plan(PROTOCOL, lookup, points)
    assert [(c.bottleneck, c.learning_rate, c.seed) for c in ready if c.bottleneck == 8] == [(8, 1e-4, 0)]
    store[8, 1e-4, 0] = fake_lookup(score)(ready[0])           # 3e-4 won at the window's edge: one step past it
    ready, waiting, selections = plan(PROTOCOL, lookup, points)
    assert selections["Houlsby r=8"].rate == 3e-4 and selections["Houlsby r=8"].grid == [1e-4, 3e-4, 1e-3, 3e-3]
    assert sorted((c.bottleneck, c.learning_rate, c.seed) for c in ready) == [(8, 3e-4, s) for s in (1, 2, 3, 4)]


def test_a_neighbour_grid_at_the_methods_edge_steps_past_it():
    assert tuning.neighbours((1e-4, 3e-4, 1e-3, 3e-3), 3e-3) == [1e-3, 3e-3, 9e-3]
    assert tuning.neighbours((1e-4, 3e-4, 1e-3, 3e-3), 1e-4) == [3e-5, 1e-4, 3e-4]
    assert tuning.neighbours((1e-4, 3e-4, 1e-3, 3e-3), 9e-3) == [3e-3, 9e-3, 3e-2]


def test_the_seeds_of_points_that_choose_a_rate_come_before_those_of_points_tuned_near_them():
    seed_zero_only = lambda c: fake_lookup(lambda c: 0.9 - abs(math.log10(c.learning_rate / 1e-3)) / 10)(c) \
        if c.seed == 0 else None  # noqa: E731
    ready, waiting, _ = plan(PROTOCOL, seed_zero_only)
    near = [any(c == p.config(PROTOCOL, learning_rate=c.learning_rate, seed=c.seed) for p in POINTS if p.near)
            for c in ready if c.seed > 0 and tuning.protocol_for("sst2", c) is PROTOCOL]
    assert waiting == [] and any(near) and not all(near)
    assert near == sorted(near)  # every seed of a point that chooses its rate, then those tuned near them


def _label_of(config):
    """The point a run belongs to (in the standard protocol or the budget check)."""
    return next(p.label for p in POINTS for protocol in (PROTOCOL, tuning.BUDGET_PROTOCOLS["sst2"])
                if p.config(protocol, learning_rate=config.learning_rate, seed=config.seed) == config)


def _seeded_lookup(values):
    """Every run stored: validation peaked at 1e-3 (no near ties), dev score ``values[label][seed]``."""
    return fake_lookup(lambda c: 0.9 - abs(math.log10(c.learning_rate / 1e-3)) / 10,
                       lambda c: values.get(_label_of(c), [0.5] * 5)[c.seed])


def test_every_point_runs_the_same_five_seeds_whatever_the_first_ones_show():
    """The design has one look: seeds 0-4 for every point, fixed in advance, whether the first three decide a claim
    or not."""
    for values in ({"full fine-tuning": [0.86, 0.87, 0.88, 0.0, 0.0], "Houlsby r=64": [0.80, 0.81, 0.82, 0.0, 0.0]},
                   {"full fine-tuning": [0.85, 0.87, 0.86, 0.0, 0.0], "Houlsby r=64": [0.84, 0.86, 0.85, 0.0, 0.0]}):
        lookup = _seeded_lookup(values)
        first_three = lambda c: lookup(c) if c.seed < 3 else None  # noqa: E731
        ready, waiting, selections = plan(PROTOCOL, first_three)
        standard = [c for c in ready if tuning.protocol_for("sst2", c) is PROTOCOL]
        assert waiting == [] and tuning.SEEDS == (0, 1, 2, 3, 4)
        assert sorted((_label_of(c), c.seed) for c in standard) == sorted((p.label, s) for p in POINTS for s in (3, 4))


def test_a_rate_two_seeds_choose_at_the_grids_edge_grows_the_grid_and_is_chosen_again():
    """Seed 0 puts the method's top rate second to one inside the grid, within the validation noise; seed 1 makes
    the edge win the tie. The grid then grows past it, and the choice is made again over the larger grid."""
    point, rates = POINTS[0], sorted(tuning.methods.get(POINTS[0].method).learning_rates)
    top, inner = rates[-1], rates[-2]
    beyond = tuning._step(rates, upward=True, rates=rates)

    def score(c):
        if c.seed == 0:
            return {inner: 0.900, top: 0.899}.get(c.learning_rate, 0.7)  # a near tie, the inner rate ahead
        return {inner: 0.880, top: 0.895, beyond: 0.80}.get(c.learning_rate, 0.7)  # seed 1: the edge wins

    selection, needed = select(point, PROTOCOL, fake_lookup(score))
    assert needed == [] and beyond in selection.grid and selection.rate == top and not selection.at_edge
    untried = lambda c: None if c.learning_rate == beyond else fake_lookup(score)(c)  # noqa: E731
    selection, needed = select(point, PROTOCOL, untried)
    assert selection.rate is None and [(c.learning_rate, c.seed) for c in needed] == [(beyond, 0)]


def test_the_budget_check_trains_the_headline_pair_longer_at_their_selected_rates():
    lookup = _seeded_lookup({})
    standard_only = lambda c: lookup(c) if tuning.protocol_for("sst2", c) is PROTOCOL else None  # noqa: E731
    ready, _, selections = plan(PROTOCOL, standard_only)
    longer = tuning.BUDGET_PROTOCOLS["sst2"]
    assert sorted((c.method, c.seed) for c in ready) == [(m, s) for m in ("full", "houlsby") for s in tuning.BUDGET_SEEDS]
    assert all((c.epochs, c.eval_every) == (longer.epochs, longer.eval_every) for c in ready)
    assert all(c.learning_rate == selections[_label_of(c)].rate for c in ready)
    assert all(tuning.protocol_for("sst2", c).max_train is None for c in ready)


def test_progress_counts_the_grid_runs_left_and_the_points_waiting_then_says_when_all_is_stored():
    from adapterlab import methods

    grid_runs = sum(len(methods.get(p.method).learning_rates) for p in POINTS if p.near is None)
    line = tuning.progress("sst2", lambda config: None)
    assert f"{grid_runs} runs can start now and {len(POINTS)} points wait" in line
    assert "`python -m adapterlab tune --task sst2`" in line
    assert tuning.progress("sst2", _seeded_lookup({})) == "every run of the sst2 protocol is stored"
    only_head = [point for point in POINTS if point.label == "head only"]
    all_but_one = lambda c: None if c.learning_rate == 1e-2 else _seeded_lookup({})(c)  # noqa: E731
    line = tuning.progress("sst2", all_but_one, only_head)
    assert "1 run can start now and 1 point waits for a rate" in line
    assert "`python -m adapterlab tune --task sst2 --points 'head only'`" in line


def test_the_command_that_continues_a_protocol_keeps_its_points_backbone_data_and_store():
    points = [point for point in POINTS if point.label in ("BitFit", "head only")]
    assert tuning.continue_command("cola", points=points, backbone="all-MiniLM-L6-v2", data_dir="my glue",
                                   store="runs/mine") == ("python -m adapterlab tune --task cola --points "
                                                          "'BitFit,head only' --backbone all-MiniLM-L6-v2 "
                                                          "--data 'my glue' --store runs/mine")


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
        assert row["rate"] in row["grid"] and row["n"] == len(tuning.SEEDS)
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
    # named as the shared recipe's figure names them, so that the two legends of lab 10 read alike
    shared = {config.method: family for family, configs in tradeoff.tradeoff_families().items() for config in configs.values()}
    assert [p.family for p in stored] == [shared["head"], shared["bitfit"]]
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


def _row(label, values, rate=1e-3, trained=1000, tie=None):
    """A tuned row as tuned_rows gives it, its spread computed here, apart from the code under test."""
    n = len(values)
    mean = sum(values) / n if n else math.nan
    std = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5 if n > 1 else math.nan
    seeds = tuple(range(n))
    row = SeedRow(label, None, "accuracy", tuple(values), seeds, (), 0, mean, std)
    return {"label": label, "method": "x", "rate": rate, "near": None, "grid": {}, "tie": tie or {}, "at_edge": False,
            "mean": mean, "std": std, "n": n, "values": list(values), "seeds": seeds,
            "trained_parameters": trained if n else None, "seed_row": row}


def test_claims_are_read_with_the_courses_rule_over_every_stored_seed():
    houlsby = _row("Houlsby r=64", (0.840, 0.844, 0.848, 0.841, 0.846))
    far = _row("full fine-tuning", (0.866, 0.874, 0.870, 0.869, 0.871))
    close = _row("full fine-tuning", (0.838, 0.846, 0.850, 0.842, 0.848))
    (pair, verdict), = tuning.tuned_comparisons([houlsby, far]).items()
    assert pair == ("full fine-tuning", "Houlsby r=64") and verdict.verdict == "ahead" and verdict.paired
    alone = compare(far["seed_row"], houlsby["seed_row"])
    assert verdict.n_a == 5 and (verdict.low, verdict.high) == (alone.low, alone.high) and alone.paired
    verdict, = tuning.tuned_comparisons([houlsby, close]).values()
    assert verdict.n_a == 5 and verdict.verdict == compare(close["seed_row"], houlsby["seed_row"]).verdict


def test_a_claim_waits_for_every_seed():
    rows = [_row("Houlsby r=64", (0.840, 0.844, 0.848)), _row("full fine-tuning", (0.845, 0.846)),
            _row("LoRA r=8", ())]
    assert tuning.tuned_comparisons(rows) == {("full fine-tuning", "Houlsby r=64"): None,
                                              ("LoRA r=8", "Houlsby r=64"): None}
    table = tuning.tuned_claim_table(rows)
    assert table.title == "tuned, standard budget"
    assert [row[0] for row in table.rows()] == ["full fine-tuning vs Houlsby r=64", "LoRA r=8 vs Houlsby r=64"]
    assert all(row[3] == "not stored yet" for row in table.rows())


def test_the_table_shows_rates_spreads_and_the_paper_beside_ours():
    rows = [_row("Houlsby r=64", (0.840, 0.844, 0.848), trained=753_794),
            _row("Houlsby r=8", (0.83,), tie={1e-3: 0.8, 3e-4: 0.79}), _row("full fine-tuning", (), rate=None)]
    lines = tuning.tuned_table(rows, "sst2").splitlines()
    assert lines[1].split() == ["Houlsby", "r=64", "0.001", "753,794", "84.4", "±", "0.4", "(3)", "94.0"]
    assert lines[2].split() == ["Houlsby", "r=8", "0.001*", "1,000", "83.0", "(1)"]
    assert lines[3].split() == ["full", "fine-tuning", "—", "—", "not", "stored", "94.9"]
    assert lines[4].startswith("* chosen on two seeds") and "!" not in lines[4]  # no row sits at the grid's edge
    rows[0]["at_edge"] = True
    assert "! best rate at the grid's edge" in tuning.tuned_table(rows, "sst2").splitlines()[-1]


def test_the_validation_curve_is_read_from_each_evaluation():
    record = {"metric": "accuracy", "evals": [
        {"step": 125, "accuracy": 0.70, "validation": {"accuracy": 0.80}},
        {"step": 250, "accuracy": 0.90, "validation": {"accuracy": 0.86}},   # the dev score is not the curve's
        {"step": 375, "accuracy": 0.80, "validation": {"accuracy": 0.84}},
        {"step": 500, "accuracy": 0.81, "validation": {"accuracy": 0.87}}]}
    curve = tuning.validation_curve(record)
    assert curve == [(125, 0.80), (250, 0.86), (375, 0.84), (500, 0.87)]


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


@pytest.mark.parametrize("means, first_spread, expected", [
    ((0.80, 0.83, 0.85, 0.85), 0.001, "Houlsby r=32"),   # r = 2 and 8 clearly behind; r = 32 level with the best
    ((0.845, 0.83, 0.85, 0.85), 0.01, None),             # r = 2's seeds too spread to place it: no knee claimed
])
def test_the_knee_is_the_first_size_the_seeds_do_not_place_behind_the_best(means, first_spread, expected):
    rows = [_row(f"Houlsby r={r}", (mean - spread, mean + spread / 3, mean, mean - spread / 3, mean + spread))
            for r, mean, spread in zip((2, 8, 32, 64), means, (first_spread, 0.001, 0.001, 0.001))]
    row, line = tuning.knee(rows)
    assert (row and row["label"]) == expected
    best = max(rows, key=lambda r: r["mean"])["seed_row"]
    verdicts = [compare(r["seed_row"], best).verdict for r in rows]
    assert verdicts[:2] == (["behind", "behind"] if expected else ["undecided", "behind"])
    assert line.startswith("the knee of r: " + (expected or "undecided"))


def test_the_budget_table_reads_each_method_long_against_standard_and_the_pair_at_each_budget():
    def seeds(label, values):
        return _row(label, values)["seed_row"]

    standard = {"Houlsby r=64": [0.85, 0.86, 0.87], "full fine-tuning": [0.86, 0.87, 0.88]}
    long = {"Houlsby r=64": [0.88, 0.884, 0.89], "full fine-tuning": [0.872, 0.887, 0.884]}
    rows = [{"label": label, "rate": 1e-3, "standard": seeds(label, standard[label]), "long": seeds(label, long[label]),
             "steps": {"standard": 625, "long": 1755}, "curve": []} for label in tuning.BUDGET_POINTS]
    text = tuning.budget_table(rows, "sst2")
    lines = text.splitlines()
    assert lines[1].split() == ["Houlsby", "r=64", "86.0", "±", "1.0", "(625", "steps)", "88.5", "±", "0.5", "(1755",
                                "steps)"]
    # long against standard, Houlsby: the paired interval straight from scipy (the seeds' own differences)
    interval = stats.ttest_rel(long["Houlsby r=64"], standard["Houlsby r=64"]).confidence_interval()
    assert interval.low > 0
    verdicts = tuning.budget_verdicts(rows)
    alone = verdicts["Houlsby r=64", "long against standard"]
    assert (alone.low, alone.high) == pytest.approx((interval.low, interval.high))
    table = tuning.budget_verdict_table(rows)
    by_row = {row[0]: row for row in table.rows()}
    houlsby = by_row["Houlsby r=64: long vs standard"]
    assert houlsby[1:3] == ("+2.5", f"{100 * interval.low:+.1f} to {100 * interval.high:+.1f}")
    assert houlsby[3] == ("long ahead" if alone.verdict == "ahead" else "undecided")
    # the pair at the long budget: the paired interval holds 0 and gaps over a point
    pair = stats.ttest_rel(long["full fine-tuning"], long["Houlsby r=64"]).confidence_interval()
    assert pair.low < 0 < pair.high and max(-pair.low, pair.high) > 0.01
    assert by_row["long budget: full fine-tuning vs Houlsby r=64"][3] == "undecided"
    assert "Holm over 4 verdicts" in table.footer()
    verdicts = list(tuning.budget_verdicts(rows).values())
    assert all(v.paired and v.family_size == 4 for v in verdicts)
    assert [v.p_adjusted for v in verdicts] == pytest.approx(list(holm([v.p_value for v in verdicts])))
    assert max(len(line) for line in lines[:len(rows) + 1]) <= 70  # the table itself fits a slide's width
