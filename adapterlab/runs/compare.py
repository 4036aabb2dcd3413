"""The course's one rule for comparing two settings over seeds: A ahead, level, or undecided (lab 7 teaches it).

A few seeds give a mean and a spread, and two means always differ. Whether the difference is real is a
question for a proper test (Welch's t, with scipy's t distributions), on a design fixed before any run is seen:

* **Seeds fixed in advance.** Each compared setting runs the seeds its protocol names, and the verdict is read
  once: adding seeds where a first look was undecided would call gaps real more often than the 5 % promised.
* **Paired where the seeds are shared.** A seed fixes a run's training rows, their order and the new head's
  initialisation, so two settings run on the same seeds share part of their luck. Their difference is then read
  seed by seed (the one-sample interval of the seeds' own differences), which leaves the shared part out; two
  rows with other seeds are read by Welch's interval (each setting its own spread). :func:`compare` pairs by
  itself when both sides carry the same complete seeds.
* **A family's error controlled.** A lab that draws many verdicts from one table declares them one family, and
  :func:`family` decides them together with Holm's procedure (:func:`holm`): the chance that any verdict of
  the family calls a gap real when there is none stays within 5 %. Holm rather than Benjamini-Hochberg because
  the course reads each verdict on its own, so it is the chance of a single false verdict that must be bounded,
  not the share of false ones among the verdicts.

Then, for one comparison (or each of a family at Holm's adjusted level):

* the interval of the difference lies wholly above 0: **A ahead** (wholly below: B ahead);
* the interval lies wholly inside ±margin: **level** (two one-sided tests). The margins (1 point of accuracy,
  2 points of MCC) are the size of difference the course treats as negligible: no more than one standard error
  of a single dev score (SST-2's 872 sentences: 1.2 points of accuracy; CoLA's 1,043: about 3 points of MCC),
  so a gap under them is smaller than the noise of scoring one model on another dev set of the same size;
* otherwise **undecided**: the seeds allow a real gap and allow none. With five seeds and these spreads that is
  the usual verdict; it says the gap is smaller than the seeds can see, not that there is none. The verdict
  says how many seeds per setting would find a true gap of one margin 8 times in 10 (the power, from the
  noncentral t distribution at the spreads seen).

Every conclusion the labs print between two rows of seeds goes through :func:`compare` or :func:`family`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
from scipy import special

#: How much two settings may differ and still count as level, in the metric's own units (see the docstring).
MARGINS = {"accuracy": 0.01, "matthews": 0.02, "f1": 0.01}
CONFIDENCE = 0.95
#: The power a "seeds would find it" line promises: a true gap of one margin found this often.
POWER = 0.8
#: The most seeds per setting :attr:`Comparison.seeds_for_power` looks for before it says "more than".
MOST_SEEDS = 100


@dataclass(frozen=True)
class Comparison:
    """The verdict between ``a`` and ``b`` (a :class:`~.reference.SeedRow`, a list of values, or a fixed
    value such as chance for ``b``), with the interval and the p-values it rests on."""

    a: str
    b: str
    verdict: str  # "ahead" (a ahead of b), "behind" (b ahead of a), "level" or "undecided"
    difference: float  # mean of a - mean of b (or - the fixed value)
    low: float
    high: float
    margin: float
    n_a: int
    n_b: int | None  # None: b is a fixed value
    spreads: tuple = field(default=(), repr=False)  # the sample variances the interval used (one: a single sample)
    paired: bool = False  # the interval is of the seeds' own differences (see compare)
    p_value: float = math.nan  # two-sided p of "no difference"
    p_level: float = math.nan  # p of "a difference of at least the margin" (the larger of the two one-sided tests)
    family_size: int = 1  # how many verdicts were decided together (family), Holm-adjusted p-values above
    p_adjusted: float | None = None  # the Holm-adjusted p behind an ahead/behind verdict of a family

    @cached_property
    def seeds_for_power(self) -> int | None:
        """Seeds per setting at which the test behind the interval, at the spreads seen, finds a true gap of one
        margin with probability :data:`POWER` (noncentral t); None when more than MOST_SEEDS would."""
        return _seeds_for_power(self.spreads, self.margin) if self.spreads else None

    @property
    def decided(self) -> bool:
        return self.verdict != "undecided"

    def flipped(self) -> "Comparison":
        """The same verdict read the other way round: ``b`` against ``a``."""
        turned = {"ahead": "behind", "behind": "ahead"}
        return replace(self, a=self.b, b=self.a, verdict=turned.get(self.verdict, self.verdict),
                       difference=-self.difference, low=-self.high, high=-self.low, n_a=self.n_b, n_b=self.n_a,
                       spreads=self.spreads[::-1])

    @property
    def interval_alone(self) -> str:
        """What the 95 % interval alone says (the verdict of this comparison outside any family)."""
        if self.low > 0:
            return "ahead"
        if self.high < 0:
            return "behind"
        return "level" if -self.margin <= self.low and self.high <= self.margin else "undecided"

    def seeds(self, swapped: bool = False) -> str:
        """The seeds behind the verdict, in words: "5 paired seeds", "3 and 5 seeds" (``swapped``: b's first, as a
        "behind" verdict is said), "5 seeds"."""
        if self.paired:
            return f"{self.n_a} paired seeds"
        if self.n_b is None:
            return f"{self.n_a} seeds"
        first, second = (self.n_b, self.n_a) if swapped else (self.n_a, self.n_b)
        return f"{first} and {second} seeds"

    def describe(self, scale: float = 100.0, unit: str = " points") -> str:
        """One line: the verdict in words, the difference and its 95 % interval (×``scale``), the seeds."""
        d, lo, hi, m = (scale * x for x in (self.difference, self.low, self.high, self.margin))
        n_a, n_b = self.n_a, self.n_b
        if self.verdict == "behind":  # said the way round it reads: the one ahead first, its lead positive
            d, lo, hi = -d, -hi, -lo
        seeds = self.seeds(swapped=self.verdict == "behind")
        bound = level_bound(lo, hi) if self.verdict == "level" else None
        bounds = (m,) if bound is None else (m, bound)
        interval = f"difference {d:+.1f}{unit}, 95 % interval {shown(lo, bounds)} to {shown(hi, bounds)}; {seeds}"
        if self.family_size > 1:
            interval += f"; Holm over {self.family_size} verdicts"
        if self.verdict == "ahead":
            said = f"{self.a} ahead of {self.b}"
        elif self.verdict == "behind":
            said = f"{self.b} ahead of {self.a}"
        elif self.verdict == "level":
            said = f"{self.a} level with {self.b} (inside the ±{m:.1f} margin: any difference under {bound:.1f}{unit})"
        elif n_a < 2 or (n_b is not None and n_b < 2):
            return f"{self.a} vs {self.b}: undecided, fewer than 2 seeds on a side ({self.seeds()})"
        elif self.interval_alone in ("ahead", "behind"):
            said = f"{self.a} vs {self.b} undecided in its family (the interval alone leaves out 0)"
        elif self.interval_alone == "level":
            said = f"{self.a} vs {self.b} undecided in its family (the interval alone lies within ±{m:.1f})"
        else:
            said = f"{self.a} vs {self.b} undecided (the interval holds 0 and gaps over ±{m:.1f}; " \
                f"{self.power_words(m, unit)})"
        return f"{said}: {interval}"

    def power_words(self, margin: float, unit: str = " points") -> str:
        """How many seeds would find a true gap of one margin (given scaled, in ``unit``), in words."""
        many = f"not even {MOST_SEEDS}" if self.seeds_for_power is None else f"{self.seeds_for_power}"
        return f"{many} seeds each would find a true gap of {margin:.1f}{unit} {round(10 * POWER)} times in 10"


def shown(value: float, bounds=()) -> str:
    """``value`` signed with one decimal, or with as many more (up to three) as it takes not to show it on a bound
    it does not equal: beside a margin of 1.0 an interval's end 0.97 is "+0.97", not "+1.0", which would read
    as touching the margin (or, for 1.03, as inside it)."""
    for decimals in (1, 2, 3):
        text = f"{value:+.{decimals}f}"
        if not any(math.isclose(abs(float(text)), bound) and not math.isclose(abs(value), bound)
                   for bound in bounds):
            break
    return text


def level_bound(low: float, high: float) -> float:
    """The bound a level verdict states, "any difference under B": the interval's largest end, rounded up to the
    next tenth (0.43 and 0.47 give 0.5, 0.5 gives 0.6), so that B is above every value the interval holds."""
    return (math.floor(max(abs(low), abs(high)) * 10 + 1e-9) + 1) / 10


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


def shares_seeds(a, b) -> bool:
    """True when both sides are rows of runs on the same seeds, each seed with its value (none missing or
    diverged): the design then pairs them."""
    seeds_a, seeds_b = getattr(a, "seeds", None), getattr(b, "seeds", None)
    return seeds_a is not None and seeds_b is not None and tuple(seeds_a) == tuple(seeds_b) and \
        len(seeds_a) >= 2 and len(_values(a)) == len(seeds_a) and len(_values(b)) == len(seeds_b)


def compare(a, b, margin: float | None = None, *, names: tuple[str, str] | None = None,
            paired: bool | None = None) -> Comparison:
    """The course's verdict on ``a`` against ``b`` (see the module docstring). ``b`` may be a fixed number
    (chance, the majority class): then the interval is the one-sample interval of ``a``'s mean minus it.

    ``paired`` (default: whenever both sides are rows of the same seeds, :func:`shares_seeds`) reads two
    measurements of the same seeds, in the same seed order, by the one-sample interval of the seeds'
    differences, which leaves out the luck the two sides share; ``paired=False`` asks for Welch's interval
    whatever the seeds (lab 7 shows both readings)."""
    fixed = isinstance(b, (int, float)) and not isinstance(b, bool)
    x = _values(a)
    y = None if fixed else _values(b)
    name_a, name_b = names or (_label(a, "A"), f"{b:g}" if fixed else _label(b, "B"))
    margin = margin_for(a, *(() if fixed else (b,))) if margin is None else float(margin)
    if paired is None:
        paired = not fixed and shares_seeds(a, b)
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
        return Comparison(name_a, name_b, "undecided", difference, -math.inf, math.inf, margin, len(x), n_b)
    other = float(b) if fixed else y
    low, high, difference, test = _t_test(x, other)
    p_value, p_level = _p_values(difference, test, margin)
    spreads = (float(x.var(ddof=1)),) + (() if fixed else (float(y.var(ddof=1)),))
    undecided = Comparison(name_a, name_b, "undecided", difference, low, high, margin, len(x), n_b, spreads,
                           p_value=p_value, p_level=p_level)
    return replace(undecided, verdict=undecided.interval_alone)


def family(comparisons) -> list:
    """The verdicts of one family, decided together by Holm's procedure (``statsmodels``) so that the chance
    of any false ahead / behind verdict among them stays within 1 - CONFIDENCE, and likewise of any false
    "level": a verdict stands where its Holm-adjusted p-value is below the level its interval used. Give the
    family every comparison a lab reads from the same runs, decided or not; a list, or a dict of them (the
    same keys come back). None entries (not stored yet) are kept as None and are not counted."""
    keys = list(comparisons) if isinstance(comparisons, dict) else None
    items = [comparisons[key] for key in keys] if keys is not None else list(comparisons)
    present = [item for item in items if item is not None]
    if not present:
        return dict(zip(keys, items)) if keys is not None else items
    alpha = 1 - CONFIDENCE

    for_difference = holm([c.p_value for c in present])
    for_level = holm([c.p_level for c in present])
    decided = {}
    for c, p, q in zip(present, for_difference, for_level):
        if p < alpha and c.interval_alone in ("ahead", "behind"):
            verdict = c.interval_alone
        elif q < alpha / 2:  # a level verdict is two one-sided tests, each at half the interval's miss rate
            verdict = "level"
        else:
            verdict = "undecided"
        decided[id(c)] = replace(c, verdict=verdict, family_size=len(present), p_adjusted=float(p))
    out = [None if item is None else decided[id(item)] for item in items]
    return dict(zip(keys, out)) if keys is not None else out


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values (a missing p counts as 1): the k-th smallest of m is multiplied by
    m - k + 1, each kept at least as large as the one before it, and capped at 1. A verdict whose adjusted p is
    below alpha stands. The tests check it against ``statsmodels``' ``multipletests(method="holm")``, which
    computes the same but runs a full garbage collection on every call (a quarter of a second here), too slow
    for the simulations that check the course's design."""
    p = np.array([1.0 if math.isnan(value) else value for value in p_values], dtype=float)
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order])
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted


def _t_test(x: np.ndarray, y):
    """(low, high, difference, (df, p, standard error) or None for an exact difference) of mean(x) - mean(y) by
    Welch's t-test, or of mean(x) - y for a fixed y (the one-sample test). Written out from the t distribution
    (Welch-Satterthwaite degrees of freedom): the same interval and p as ``scipy.stats.ttest_ind(equal_var=False)``
    and ``ttest_1samp``, which the tests compare it with, at a hundredth of their cost per call (the design's
    simulations decide hundreds of thousands of verdicts)."""
    fixed = not isinstance(y, np.ndarray)
    difference = float(x.mean() - (y if fixed else y.mean()))
    share_x = x.var(ddof=1) / len(x)
    share_y = 0.0 if fixed else y.var(ddof=1) / len(y)
    if share_x + share_y == 0:  # every seed gave the same value on both sides: the difference is exact
        return difference, difference, difference, None
    error = math.sqrt(share_x + share_y)
    df = (share_x + share_y) ** 2 / (share_x ** 2 / (len(x) - 1) + (share_y ** 2 / (len(y) - 1) if share_y else 0.0))
    half = float(special.stdtrit(df, 0.5 + CONFIDENCE / 2)) * error
    p_value = 2 * float(special.stdtr(df, -abs(difference) / error))
    return difference - half, difference + half, difference, (df, p_value, error)


def _p_values(difference: float, test, margin: float) -> tuple[float, float]:
    """(p of "no difference", two-sided; p of "a difference of at least ``margin``": the larger p of the two
    one-sided tests against -margin and +margin), from the t-test behind the interval (:func:`_t_test`)."""
    if test is None:  # an exact difference
        return (0.0 if difference != 0 else 1.0), (0.0 if abs(difference) < margin else 1.0)
    df, p_value, error = test
    level = max(special.stdtr(df, -(difference + margin) / error), special.stdtr(df, (difference - margin) / error))
    return p_value, float(level)


def _seeds_for_power(variances: tuple, margin: float) -> int | None:
    """The fewest seeds per setting at which a t-test at these sample ``variances`` (one: a one-sample or paired
    test; two: Welch's) finds a true gap of ``margin`` with probability :data:`POWER` (noncentral t)."""
    if sum(variances) == 0:
        return 2
    for n in range(2, MOST_SEEDS + 1):
        if len(variances) == 1:
            df = n - 1
        else:
            df = sum(variances) ** 2 / sum(v ** 2 for v in variances) * (n - 1) if all(variances) else n - 1
        critical = special.stdtrit(df, 0.5 + CONFIDENCE / 2)
        shift = margin / math.sqrt(sum(variances) / n)
        if 1 - special.nctdtr(df, shift, critical) + special.nctdtr(df, shift, -critical) >= POWER:
            return n
    return None
