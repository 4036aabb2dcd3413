"""The course's comparison rule, checked against computations of its own: Welch's interval by hand, a simulation
of how often it calls a gap real when there is none (n = 3 and n = 5), how often its interval holds the true
difference, the seeds it says would find a gap, pairing by seed and Holm's procedure over a family."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from scipy import stats

from adapterlab.runs.compare import MARGINS, compare, family, holm, level_bound, shown
from adapterlab.runs.reference import SeedRow

SIMULATIONS = 3000


def _welch_by_hand(x, y):
    """The 95 % Welch interval of mean(x) - mean(y), written out (Welch-Satterthwaite degrees of freedom)."""
    vx, vy = np.var(x, ddof=1) / len(x), np.var(y, ddof=1) / len(y)
    df = (vx + vy) ** 2 / (vx ** 2 / (len(x) - 1) + vy ** 2 / (len(y) - 1))
    half = stats.t.ppf(0.975, df) * math.sqrt(vx + vy)
    d = np.mean(x) - np.mean(y)
    return d - half, d + half


def test_the_interval_is_welchs_and_the_verdict_follows_it():
    x, y = [0.850, 0.862, 0.871], [0.840, 0.845, 0.851, 0.838]
    verdict = compare(x, y)
    assert (verdict.low, verdict.high) == pytest.approx(_welch_by_hand(x, y))
    assert verdict.verdict == ("ahead" if verdict.low > 0 else "undecided")
    assert compare(y, x).verdict == {"ahead": "behind", "undecided": "undecided"}[verdict.verdict]


@pytest.mark.parametrize("n", [3, 5])
def test_equal_means_are_called_different_at_most_5_percent_of_the_time(n):
    """Under equal means the rule may call A or B ahead only as often as a 95 % interval allows (Welch's is
    a little conservative at small n, so the rate may fall somewhat below 5 %), and its interval holds the true
    difference 0 at least 95 % of the time, within the simulation's own sampling error."""
    rng = np.random.default_rng(n)
    called, by_hand, covered = 0, 0, 0
    for _ in range(SIMULATIONS):
        x, y = rng.normal(0.85, 0.01, n), rng.normal(0.85, 0.01, n)
        verdict = compare(x, y)
        called += verdict.verdict in ("ahead", "behind")
        low, high = _welch_by_hand(x, y)
        by_hand += low > 0 or high < 0
        covered += verdict.low <= 0 <= verdict.high
    error = 3 * math.sqrt(0.05 * 0.95 / SIMULATIONS)
    assert called == by_hand                                  # the same decision, draw by draw
    assert 0.02 < called / SIMULATIONS <= 0.05 + error
    assert covered / SIMULATIONS >= 0.95 - error


def test_a_gap_of_three_spreads_is_found_at_five_seeds_and_equal_settings_are_level_when_seeds_are_tight():
    rng = np.random.default_rng(7)
    found = sum(compare(rng.normal(0.88, 0.01, 5), rng.normal(0.85, 0.01, 5)).verdict == "ahead" for _ in range(500))
    assert found / 500 > 0.9
    level = sum(compare(rng.normal(0.85, 0.001, 5), rng.normal(0.85, 0.001, 5)).verdict == "level" for _ in range(500))
    assert level / 500 > 0.9


def _exactly(mean, std, n):
    """n values whose sample mean and sample standard deviation are exactly ``mean`` and ``std``."""
    z = np.linspace(-1, 1, n)
    z = (z - z.mean()) / z.std(ddof=1)
    return mean + std * z


def test_the_seeds_it_names_find_a_true_gap_of_one_margin_eight_times_in_ten():
    """The power line is checked by simulation: at the seeds it names (and the spreads it saw, taken as true), a true
    gap of one margin is found ahead about 80 % of the time, and one seed fewer finds it less often than 80 %."""
    a, b = _exactly(0.855, 0.01, 3), _exactly(0.85, 0.01, 3)
    verdict = compare(a, b)
    assert verdict.verdict == "undecided" and verdict.seeds_for_power is not None
    n, rng = verdict.seeds_for_power, np.random.default_rng(11)

    def found(seeds):
        return np.mean([compare(rng.normal(0.86, 0.01, seeds), rng.normal(0.85, 0.01, seeds)).verdict == "ahead"
                        for _ in range(1500)])

    error = 3 * math.sqrt(0.8 * 0.2 / 1500)
    assert found(n) >= 0.8 - error and found(n - 1) < 0.8 + error
    assert f"{n} seeds each would find a true gap of 1.0 points 8 times in 10" in verdict.describe()


def test_rows_of_the_same_seeds_are_paired_and_others_are_not():
    """Two rows of the same complete seeds are read seed by seed (the one-sample interval of their differences, by
    hand here); other seeds, a missing seed, or paired=False give Welch's interval."""
    row = lambda values, seeds: SeedRow("r", None, "accuracy", tuple(values), tuple(seeds), (), 0,  # noqa: E731
                                        float(np.mean(values)), float(np.std(values, ddof=1)))
    x, y = [0.850, 0.862, 0.871, 0.858, 0.866], [0.845, 0.860, 0.862, 0.851, 0.860]
    paired = compare(row(x, range(5)), row(y, range(5)))
    d = np.subtract(x, y)
    half = stats.t.ppf(0.975, 4) * d.std(ddof=1) / math.sqrt(5)
    assert paired.paired and (paired.low, paired.high) == pytest.approx((d.mean() - half, d.mean() + half))
    assert paired.verdict == "ahead" and "5 paired seeds" in paired.describe()
    for unpaired in (compare(row(x, range(5)), row(y, range(1, 6))), compare(row(x, range(5)), row(y, range(5)),
                                                                               paired=False)):
        assert not unpaired.paired and (unpaired.low, unpaired.high) == pytest.approx(_welch_by_hand(x, y))
    assert not compare(row(x, range(5)), row(y[:4], range(4))).paired


def test_a_behind_verdict_names_the_seeds_the_way_round_it_is_said():
    verdict = compare([0.80, 0.81, 0.80], [0.85, 0.861, 0.869, 0.87], names=("three", "four"))
    assert verdict.verdict == "behind" and "four ahead of three" in verdict.describe()
    assert verdict.describe().endswith("4 and 3 seeds")


def test_holm_adjusts_as_statsmodels_does():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(5)
    for m in (1, 2, 7, 31):
        p = rng.uniform(0, 0.2, m) ** 2
        p[rng.integers(m)] = p.min()  # a tie
        assert holm(p) == pytest.approx(multipletests(p, method="holm")[1], abs=1e-15)
    assert holm([0.01, math.nan]).tolist() == [0.02, 1.0]


def test_a_family_is_decided_by_holms_procedure():
    """Holm by hand: the k-th smallest p-value is compared with alpha / (m - k + 1), stopping at the first that
    fails. A verdict that stands alone can fall in its family, and the line says so."""
    rng = np.random.default_rng(3)
    comparisons = [compare(rng.normal(0.86 + gap, 0.01, 5), rng.normal(0.86, 0.01, 5))
                   for gap in (0.0, 0.0, 0.004, 0.012, 0.03, 0.0, 0.015, 0.0)]
    decided = family(comparisons)
    order, stands, alive = np.argsort([c.p_value for c in comparisons]), set(), True
    for k, i in enumerate(order):
        alive = alive and comparisons[i].p_value < 0.05 / (len(comparisons) - k)
        if alive:
            stands.add(int(i))
    assert {i for i, c in enumerate(decided) if c.verdict in ("ahead", "behind")} == stands
    assert all(c.family_size == len(comparisons) for c in decided)
    fallen = [c for c, alone in zip(decided, comparisons) if alone.decided and not c.decided]
    assert all("undecided in its family" in c.describe() for c in fallen)
    keyed = family({"a": comparisons[4], "b": None})
    assert keyed["b"] is None and keyed["a"].family_size == 1 and keyed["a"].verdict == comparisons[4].verdict


def test_an_interval_inside_the_margin_that_its_family_leaves_undecided_says_so():
    """Level needs the equivalence test's adjusted p under 2.5 %: an interval inside ±1 point whose family
    raises that p stays undecided, and its line must not claim the interval reaches past the margin."""
    close = compare([0.861, 0.855, 0.866, 0.860], [0.860, 0.861, 0.857, 0.862], paired=False)
    assert close.verdict == "level" and close.interval_alone == "level"
    members = [close, *(compare([0.86, 0.87, 0.85], [0.86, 0.85, 0.87]) for _ in range(30))]
    decided = family(members)[0]
    assert decided.p_adjusted >= 0.025 and decided.verdict == "undecided"
    assert -0.01 <= decided.low and decided.high <= 0.01
    line = decided.describe()
    assert "undecided in its family (the interval alone lies within ±1.0)" in line
    assert "holds 0 and gaps over" not in line


def test_a_fixed_value_is_compared_by_the_one_sample_interval():
    mcc = [0.048, 0.016, 0.032]                             # CoLA's head only against chance (MCC 0)
    verdict = compare(mcc, 0.0)
    half = stats.t.ppf(0.975, 2) * np.std(mcc, ddof=1) / math.sqrt(3)
    assert (verdict.low, verdict.high) == pytest.approx((np.mean(mcc) - half, np.mean(mcc) + half))
    assert verdict.verdict == "undecided" and verdict.n_b is None
    assert compare([0.30, 0.31, 0.32], 0.0).verdict == "ahead"


def test_the_margin_follows_the_metric_and_the_line_says_what_was_measured():
    row = lambda label, values, metric: SeedRow(label, None, metric, tuple(values), (0, 1, 2), (), 0,  # noqa: E731
                                                float(np.mean(values)), float(np.std(values, ddof=1)))
    verdict = compare(row("Houlsby", [0.20, 0.22, 0.24], "matthews"), row("LoRA", [0.21, 0.23, 0.22], "matthews"))
    assert verdict.margin == MARGINS["matthews"] and verdict.a == "Houlsby" and verdict.b == "LoRA"
    line = verdict.describe()
    assert line.startswith("Houlsby vs LoRA undecided") and "95 % interval" in line and "3 paired seeds" in line
    ahead = compare(row("full", [0.88, 0.881, 0.882], "accuracy"), row("Houlsby", [0.84, 0.85, 0.86], "accuracy"))
    assert ahead.describe().startswith("full ahead of Houlsby: difference +3.1 points")
    behind = compare(row("Houlsby", [0.84, 0.85, 0.86], "accuracy"), row("full", [0.88, 0.881, 0.882], "accuracy"))
    assert behind.verdict == "behind" and behind.difference < 0
    low, high = (round(-100 * bound, 1) for bound in (behind.high, behind.low))
    assert behind.describe().startswith(f"full ahead of Houlsby: difference +3.1 points, 95 % interval "
                                        f"+{low} to +{high}")  # read the way round it is said


def test_a_side_whose_seeds_all_agree_is_compared_without_a_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        verdict = compare([0.509, 0.509, 0.509], [0.85, 0.86, 0.855])
    expected = stats.ttest_ind([0.509] * 3, [0.85, 0.86, 0.855], equal_var=False).confidence_interval(0.95)
    assert verdict.verdict == "behind" and verdict.high == pytest.approx(expected.high)


def test_too_few_seeds_decide_nothing():
    assert compare([0.9], [0.5, 0.6]).verdict == "undecided"
    assert "fewer than 2 seeds" in compare([0.9], [0.5, 0.6]).describe()
    assert compare([0.5, 0.5, 0.5], [0.5, 0.5, 0.5]).verdict == "level"   # identical seeds: an exact zero


@pytest.mark.parametrize("n", [3, 5])
def test_paired_seeds_are_compared_by_their_differences_and_equal_means_pass_at_most_5_percent(n):
    """Paired: the interval is the one-sample t-interval of the per-seed differences, computed by hand here; under
    equal means it calls a gap at most 5 % of the time (simulated); and it sees a small gap that the seeds' shared
    spread hides from the unpaired rule."""
    rng = np.random.default_rng(10 + n)
    called = 0
    for _ in range(SIMULATIONS):
        shared = rng.normal(0.85, 0.02, n)  # each seed's own level, common to both sides
        x, y = shared + rng.normal(0, 0.002, n), shared + rng.normal(0, 0.002, n)
        verdict = compare(x, y, paired=True)
        d = x - y
        half = stats.t.ppf(0.975, n - 1) * np.std(d, ddof=1) / math.sqrt(n)
        assert (verdict.low, verdict.high) == pytest.approx((d.mean() - half, d.mean() + half))
        assert verdict.difference == pytest.approx(x.mean() - y.mean()) and verdict.paired
        called += verdict.verdict in ("ahead", "behind")
    assert called / SIMULATIONS <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / SIMULATIONS)
    shared = np.array([0.84, 0.87, 0.86, 0.83, 0.88])[:n]
    assert compare(shared + 0.004, shared + [0.0, 0.001, -0.001, 0.0005, 0.0][:n], paired=True).verdict == "ahead"
    assert compare(shared + 0.004, shared + [0.0, 0.001, -0.001, 0.0005, 0.0][:n]).verdict != "ahead"
    assert "paired seeds" in compare(shared + 0.004, shared, paired=True).describe()


def test_a_paired_comparison_needs_the_same_seeds_on_both_sides():
    with pytest.raises(ValueError, match="same seeds"):
        compare([0.8, 0.81, 0.82], [0.8, 0.81], paired=True)
    with pytest.raises(ValueError, match="same seeds"):
        compare([0.8, 0.81, 0.82], 0.5, paired=True)



def _welch_p_level(x, y, margin):
    """The larger p of the two one-sided Welch tests against a gap of -margin and of +margin, from scipy.stats."""
    below = stats.ttest_ind(x + margin, y, equal_var=False, alternative="greater").pvalue  # against a gap of -margin
    above = stats.ttest_ind(x - margin, y, equal_var=False, alternative="less").pvalue  # against a gap of +margin
    return max(below, above)


def test_the_interval_and_p_values_are_scipy_s_welch_and_one_sample_tests():
    """compare writes the t-test out for speed: on drawn sizes and spreads (one side's seeds all equal among them)
    its interval, p and the p behind "level" equal scipy.stats' own Welch and one-sample tests."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        n_a, n_b = rng.integers(2, 9, size=2)
        x = rng.normal(0.85, rng.choice([0.002, 0.01, 0.05]), n_a)
        y = np.full(n_b, 0.5) if rng.random() < 0.15 else rng.normal(0.84, rng.choice([0.002, 0.01, 0.05]), n_b)
        margin = float(rng.choice([0.01, 0.02]))
        got = compare(list(x), list(y), margin, paired=False)
        expected = stats.ttest_ind(x, y, equal_var=False)
        interval = expected.confidence_interval(0.95)
        assert got.low == pytest.approx(interval.low, rel=1e-9, abs=1e-12)
        assert got.high == pytest.approx(interval.high, rel=1e-9, abs=1e-12)
        assert got.p_value == pytest.approx(expected.pvalue, rel=1e-7, abs=1e-300)
        assert got.p_level == pytest.approx(_welch_p_level(x, y, margin), rel=1e-7, abs=1e-300)
        alone = compare(list(x), 0.8, margin)
        one = stats.ttest_1samp(x, 0.8)
        assert (alone.low, alone.high) == pytest.approx((one.confidence_interval(0.95).low - 0.8,
                                                        one.confidence_interval(0.95).high - 0.8), rel=1e-9)
        assert alone.p_value == pytest.approx(one.pvalue, rel=1e-7, abs=1e-300)


def test_the_seeds_it_names_are_the_fewest_at_which_scipy_s_noncentral_t_gives_the_power():
    rng = np.random.default_rng(6)
    for _ in range(40):
        x, y = rng.normal(0.85, 0.01, 5), rng.normal(0.85, rng.choice([0.005, 0.01, 0.02]), 5)
        verdict = compare(list(x), list(y), 0.01, paired=False)
        v = (x.var(ddof=1), y.var(ddof=1))

        def power(n):
            df = sum(v) ** 2 / sum(s ** 2 for s in v) * (n - 1)
            critical, shift = stats.t.ppf(0.975, df), 0.01 / math.sqrt(sum(v) / n)
            return stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift)

        n = verdict.seeds_for_power
        assert n is not None and power(n) >= 0.8 and (n == 2 or power(n - 1) < 0.8), (n, power(n))


def _said_interval(line: str) -> tuple[float, float]:
    low, high = re.search(r"95 % interval ([+-][\d.]+) to ([+-][\d.]+)", line).groups()
    return float(low), float(high)


def test_a_level_line_never_shows_its_interval_on_or_past_the_bound_it_states():
    """"level (any difference under B): ... interval L to H": read back as numbers, every end is strictly under B,
    B is above every value the interval holds and within the margin, and an end is shown on the margin only
    where it is on it. Drawn near the edges: ends a few hundredths from a tenth, from the margin, and on them."""
    generator = np.random.default_rng(7)
    lines = 0
    for _ in range(400):
        n, spread = generator.integers(3, 9), generator.choice([0.0005, 0.001, 0.002, 0.003])
        shift = generator.choice([0.0, 0.0047, 0.0097, 0.0045, 0.005, -0.0047])
        verdict = compare(0.86 + shift + generator.normal(0, spread, n), 0.86 + generator.normal(0, spread, n))
        if verdict.verdict != "level":
            continue
        lines += 1
        line = verdict.describe()
        bound = float(re.search(r"any difference under ([\d.]+) points", line).group(1))
        low, high = _said_interval(line)
        assert max(abs(low), abs(high)) < bound <= 1.0, line
        assert max(abs(100 * verdict.low), abs(100 * verdict.high)) < bound, line
        for said, true in ((low, 100 * verdict.low), (high, 100 * verdict.high)):
            assert said == pytest.approx(true, abs=0.05), line  # the value is the interval's, to its last decimal
    assert lines > 50


@pytest.mark.parametrize(("value", "bounds", "text"), [
    (0.97, (1.0,), "+0.97"), (1.03, (1.0,), "+1.03"), (-0.999, (1.0,), "-0.999"), (1.0, (1.0,), "+1.0"),
    (0.43, (1.0,), "+0.4"), (0.47, (1.0, 0.5), "+0.47"), (-1.97, (2.0,), "-1.97"), (0.47, (), "+0.5"),
])
def test_an_end_is_shown_with_the_decimals_that_keep_it_off_a_bound_it_is_not_on(value, bounds, text):
    assert shown(value, bounds) == text


@pytest.mark.parametrize(("low", "high", "bound"), [(-0.43, 0.2, 0.5), (-0.4, 0.47, 0.5), (0.1, 0.5, 0.6),
                                                    (-1.97, 1.5, 2.0), (0.0, 0.0, 0.1)])
def test_a_level_bound_is_the_next_tenth_above_the_interval(low, high, bound):
    assert level_bound(low, high) == pytest.approx(bound)
