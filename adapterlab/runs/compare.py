"""The course's one rule for comparing two settings over seeds: A ahead, level, or undecided (lab 7 teaches it).

A few seeds give a mean and a spread, and two means always differ. Whether the difference is real is a
question for a proper test: the 95 % confidence interval of the difference of the means, by Welch's
t-interval (each setting its own spread; no pairing of seeds is assumed), computed by ``scipy.stats``. Then:

* the interval lies wholly above 0: **A ahead** (wholly below: B ahead) — the seeds cannot explain the gap;
* the interval lies wholly inside ±margin: **level** — whatever difference there is, it is smaller than the
  margin (1 point of accuracy, 2 points of MCC unless a lab says otherwise), and the interval says how small
  a difference these seeds could have seen;
* otherwise **undecided** — the seeds allow a real gap and allow none; the verdict says about how many seeds
  per setting would settle it, if the means and spreads stayed as they are.

Every conclusion the labs print between two rows of seeds goes through :func:`compare`; nothing counts spreads.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

#: How much two settings may differ and still count as level, in the metric's own units.
MARGINS = {"accuracy": 0.01, "matthews": 0.02, "f1": 0.01}
CONFIDENCE = 0.95
#: The most seeds per setting :attr:`Comparison.seeds_to_settle` looks for before it says "more than".
MOST_SEEDS = 100


@dataclass(frozen=True)
class Comparison:
    """The verdict between ``a`` and ``b`` (a :class:`~.reference.SeedRow`, a list of values, or a fixed
    value such as chance for ``b``), with the interval it rests on."""

    a: str
    b: str
    verdict: str  # "ahead" (a ahead of b), "behind" (b ahead of a), "level" or "undecided"
    difference: float  # mean of a - mean of b (or - the fixed value)
    low: float
    high: float
    margin: float
    n_a: int
    n_b: int | None  # None: b is a fixed value
    seeds_to_settle: int | None  # undecided only: seeds per setting that would settle it (None: over MOST_SEEDS)
    paired: bool = False  # the interval is of the seeds' own differences (see compare)

    @property
    def decided(self) -> bool:
        return self.verdict != "undecided"

    def describe(self, scale: float = 100.0, unit: str = " points") -> str:
        """One line: the verdict in words, the difference and its 95 % interval (×``scale``), the seeds."""
        d, lo, hi, m = (scale * x for x in (self.difference, self.low, self.high, self.margin))
        if self.verdict == "behind":  # said the way round it reads: the one ahead first, its lead positive
            d, lo, hi = -d, -hi, -lo
        seeds = f"{self.n_a} paired seeds" if self.paired else \
            f"{self.n_a} seeds" if self.n_b is None else f"{self.n_a} and {self.n_b} seeds"
        interval = f"difference {d:+.1f}{unit}, 95 % interval {lo:+.1f} to {hi:+.1f}; {seeds}"
        if self.verdict == "ahead":
            said = f"{self.a} ahead of {self.b}"
        elif self.verdict == "behind":
            said = f"{self.b} ahead of {self.a}"
        elif self.verdict == "level":
            said = f"{self.a} level with {self.b} (any difference under {max(abs(lo), abs(hi)):.1f}{unit})"
        elif self.n_a < 2 or (self.n_b is not None and self.n_b < 2):
            return f"{self.a} vs {self.b}: undecided, fewer than 2 seeds on a side ({seeds})"
        else:
            more = f"about {self.seeds_to_settle} seeds each would settle it" if self.seeds_to_settle else \
                f"not even {MOST_SEEDS} seeds each would settle it"
            said = f"{self.a} vs {self.b} undecided (the interval holds 0 and gaps over ±{m:.1f}; {more})"
        return f"{said}: {interval}"


def _values(side) -> np.ndarray:
    values = getattr(side, "values", side)
    return np.asarray([float(v) for v in values], dtype=float)


def _label(side, default: str) -> str:
    label = getattr(side, "label", None)
    return default if label is None else str(label)


def margin_of(metric: str | None) -> float:
    """The level margin of a metric by name; 1 point of accuracy for a metric without one of its own."""
    return MARGINS.get(metric, MARGINS["accuracy"])


def margin_for(*sides) -> float:
    """The level margin of the sides' metric (a SeedRow knows its metric); 1 point of accuracy otherwise."""
    metrics = {getattr(side, "metric", None) for side in sides} - {None}
    return margin_of(metrics.pop() if len(metrics) == 1 else None)


def compare(a, b, margin: float | None = None, *, names: tuple[str, str] | None = None,
            paired: bool = False) -> Comparison:
    """The course's verdict on ``a`` against ``b`` (see the module docstring). ``b`` may be a fixed number
    (chance, the majority class): then the interval is the one-sample interval of ``a``'s mean minus it.

    ``paired=True`` is for two measurements of the same seeds' runs, in the same seed order (lab 11 scores each
    trained model and its own linearised copy): the interval is then the one-sample interval of the seeds'
    differences, which leaves out the spread the two sides share."""
    fixed = isinstance(b, (int, float)) and not isinstance(b, bool)
    x = _values(a)
    y = None if fixed else _values(b)
    name_a, name_b = names or (_label(a, "A"), f"{b:g}" if fixed else _label(b, "B"))
    margin = margin_for(a, *(() if fixed else (b,))) if margin is None else float(margin)
    if paired:
        if fixed or len(x) != len(y):
            raise ValueError(f"a paired comparison needs two lists of the same seeds in the same order; got {len(x)} "
                             f"values and {'a fixed value' if fixed else f'{len(y)} values'}")
        within = compare(x - y, 0.0, margin, names=(name_a, name_b))
        return replace(within, difference=float(x.mean() - y.mean()), n_b=len(y), paired=True)
    n_b = None if fixed else len(y)
    if len(x) < 2 or (not fixed and len(y) < 2):
        mean_b = float(b) if fixed else (float(np.mean(y)) if len(y) else math.nan)
        difference = float(np.mean(x)) - mean_b if len(x) else math.nan
        return Comparison(name_a, name_b, "undecided", difference, -math.inf, math.inf, margin, len(x), n_b, None)
    low, high, difference = _interval(x, float(b) if fixed else y)
    if low > 0:
        verdict = "ahead"
    elif high < 0:
        verdict = "behind"
    elif -margin <= low and high <= margin:
        verdict = "level"
    else:
        verdict = "undecided"
    settle = _seeds_to_settle(x, float(b) if fixed else y, margin) if verdict == "undecided" else None
    return Comparison(name_a, name_b, verdict, difference, low, high, margin, len(x), n_b, settle)


def _interval(x: np.ndarray, y) -> tuple[float, float, float]:
    """The 95 % interval of mean(x) - mean(y) (Welch), or of mean(x) - y for a fixed y (one-sample t)."""
    fixed = not isinstance(y, np.ndarray)
    difference = float(x.mean() - (y if fixed else y.mean()))
    spread = x.var(ddof=1) + (0.0 if fixed else y.var(ddof=1))
    if spread == 0:  # every seed gave the same value on both sides: the difference is exact
        return difference, difference, difference
    with warnings.catch_warnings():
        # one side's seeds all equal (a method stuck at the majority class): scipy warns of precision loss in its
        # moments, but the interval then rests on the other side's spread alone, which is what Welch's should do
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        if fixed:  # scipy's one-sample interval is of the mean itself: shift it by the fixed value
            interval = stats.ttest_1samp(x, y).confidence_interval(CONFIDENCE)
            return float(interval.low) - y, float(interval.high) - y, difference
        interval = stats.ttest_ind(x, y, equal_var=False).confidence_interval(CONFIDENCE)
    return float(interval.low), float(interval.high), difference


def _seeds_to_settle(x: np.ndarray, y, margin: float) -> int | None:
    """The fewest seeds per setting whose interval, with these means and spreads, would leave 0 or fit inside
    ±margin: how many runs an undecided comparison asks for. None when more than MOST_SEEDS would."""
    fixed = not isinstance(y, np.ndarray)
    difference = abs(float(x.mean() - (y if fixed else y.mean())))
    variances = [x.var(ddof=1)] + ([] if fixed else [y.var(ddof=1)])
    for n in range(max(len(x), 2), MOST_SEEDS + 1):
        if fixed:
            df = n - 1
        else:
            df = sum(variances) ** 2 / sum(v ** 2 for v in variances) * (n - 1) if any(variances) else 2 * n - 2
        half = stats.t.ppf(0.5 + CONFIDENCE / 2, df) * math.sqrt(sum(variances) / n)
        if difference > half or difference + half <= margin:
            return n
    return None
