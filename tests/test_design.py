"""The course's statistical design, checked by simulation: with the seeds fixed in advance, runs paired by seed
and each family decided by Holm's procedure, the chance that a family calls any gap real when every setting has
the same true mean stays within 5 %. The same simulations show what each part of the design is for: read
uncorrected, the family calls a false gap far more often; a second look at undecided comparisons (three seeds,
then five) calls one more often than 5 %."""

from __future__ import annotations

import math

import numpy as np

from adapterlab.runs.compare import compare, family
from adapterlab.runs.reference import SeedRow

SEEDS = 5  # what the tuned comparison fixes in advance for every point
POINTS = 8  # two reference points and six others, each compared with both: 13 verdicts a family
FAMILIES = 600
SPREADS = np.linspace(0.005, 0.015, POINTS)  # spreads from 1 to 3 times the smallest, as the tuned tables have
SEED_EFFECT = 0.006  # a seed's shared luck: about a third of the within-point variance, as on CoLA


def _row(label: str, values, seeds) -> SeedRow:
    return SeedRow(label, None, "accuracy", tuple(values), tuple(seeds), (), 0, float(np.mean(values)),
                   float(np.std(values, ddof=1)))


def _family(rows) -> list:
    """Every point against both references, and the references against each other: as lab 10 reads a table."""
    first, second, others = rows[0], rows[1], rows[2:]
    return [compare(second, first), *(compare(row, ref) for row in others for ref in (first, second))]


def _false_rates(shared_seeds: bool, rng) -> tuple[float, float, bool]:
    """(share of families with any false ahead/behind verdict after Holm, the same read uncorrected, whether every
    comparison was paired) when all true means are equal."""
    corrected = uncorrected = 0
    paired = True
    for _ in range(FAMILIES):
        luck = rng.normal(0, SEED_EFFECT, SEEDS)
        rows = []
        for i, spread in enumerate(SPREADS):
            seeds = range(SEEDS) if shared_seeds else range(i * SEEDS, (i + 1) * SEEDS)
            shared = luck if shared_seeds else rng.normal(0, SEED_EFFECT, SEEDS)
            rows.append(_row(f"p{i}", 0.85 + shared + rng.normal(0, spread, SEEDS), seeds))
        alone = _family(rows)
        paired = paired and all(c.paired == shared_seeds for c in alone)
        uncorrected += any(c.verdict in ("ahead", "behind") for c in alone)
        corrected += any(c.verdict in ("ahead", "behind") for c in family(alone))
    return corrected / FAMILIES, uncorrected / FAMILIES, paired


def _error(rate: float, n: int) -> float:
    return 3 * math.sqrt(rate * (1 - rate) / n)


def test_a_family_of_paired_runs_calls_a_false_gap_at_most_5_percent_of_the_time():
    corrected, uncorrected, paired = _false_rates(shared_seeds=True, rng=np.random.default_rng(46))
    assert paired  # rows of the same seeds were read seed by seed
    assert corrected <= 0.05 + _error(0.05, FAMILIES)
    assert uncorrected > 0.2  # uncorrected, the same family calls a false gap several times as often


def test_a_family_of_unpaired_runs_calls_a_false_gap_at_most_5_percent_of_the_time():
    corrected, uncorrected, welch = _false_rates(shared_seeds=False, rng=np.random.default_rng(47))
    assert welch  # rows of other seeds were read by Welch's interval
    assert corrected <= 0.05 + _error(0.05, FAMILIES)
    assert uncorrected > 0.2


def test_looking_twice_calls_a_false_gap_more_often_than_5_percent_and_the_fixed_design_does_not():
    """Three seeds, then seeds 3 and 4 where the first look is undecided (the course's old design), against five
    seeds read once, on the same draws with equal means and spreads of 1:3."""
    rng, trials = np.random.default_rng(2), 3000
    twice = once = 0
    for _ in range(trials):
        a, b = rng.normal(0.85, 0.005, SEEDS), rng.normal(0.85, 0.015, SEEDS)
        first = compare(a[:3], b[:3])
        final = first if first.decided else compare(a, b)
        twice += final.verdict in ("ahead", "behind")
        once += compare(a, b).verdict in ("ahead", "behind")
    assert twice / trials > 0.05 + _error(0.05, trials) / 3
    assert once / trials <= 0.05 + _error(0.05, trials)
