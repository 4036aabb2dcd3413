"""Self-check for lab 11's exercise, the effective rank: how many of a trained
adapter's r singular values hold a share ``energy`` of Σσ². Lab 11 reads it off each
adapter's W_up W_down (r = 64 values) to say how much of the bottleneck training used,
so a count that is off misreads every adapter. The check compares the student's count
with an exact one (fractions, no rounding) on spectra in random order, as float64 or
float32 arrays and as a list, and on a tie at the threshold, one dominant value,
trailing zeros, all zeros and a single value, then on spectra hypothesis draws (1 to
192 values), showing a wrong count's smallest failing one; it names the
mistake a wrong count matches, and rejects a function that changes the caller's values.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

import numpy as np

from .audit import ANYTHING
from ...model.spectrum import effective_rank
from .checks import (CheckFailed, PackageAnswer, call_answer, makes_everywhere, plain_errors, report_passed,
                     smallest_failing)

_PACKAGE_RANK = PackageAnswer((effective_rank,), (
    "Your answer calls the package's effective_rank: that is the count this exercise asks you to write. Sort, sum "
    "and count the squares yourself."))

__all__ = ["CheckFailed", "check_effective_rank"]

#: The lab's bottleneck: each adapter's W_up W_down has r = 64 singular values.
SPECTRUM_SIZE = 64
#: The exercise's default share.
DEFAULT_ENERGY = 0.9
#: How far (a share of the total) every threshold stays from what it is compared with
#: in the random cases, so that float arithmetic, float32 or in any order, counts as
#: exact arithmetic does.
CLEARANCE = 1e-4

_ZERO = ("Every value is 0: there is no energy to hold, and Σσ² = 0 is nothing to "
         "divide by, so the effective rank is 0. Return 0 when Σσ² is 0, before "
         "dividing by it.")
_LIST = ("The singular values may come as a Python list: turn them into an array "
         "first (np.asarray(singular_values)) or use what works on both (sorted, sum).")
_ALL_COUNT = ("With energy=1.0 every nonzero value counts: the answer is their number. "
              "Make sure your comparison can hold when the running sum equals the "
              "whole Σσ² (≥, not >).")
_GENERIC = ("Sort the squares σ² from largest to smallest, add them up one by one and "
            "return how many it took for the running sum to reach energy × Σσ² (≥).")

#: What each mistake in the catalogue is called, and the message that names it.
_MISTAKES = {
    "sigma": "You measured energy as Σσ, the sum of the singular values; it is Σσ², "
             "the sum of their squares (what a rank-k approximation loses is the "
             "squares it drops): square the values before adding them up.",
    "unsorted": "You added the values up in the order given; they come in any order, "
                "so sort them from largest to smallest first (np.sort(...)[::-1] or "
                "sorted(..., reverse=True)).",
    "strict": "You stop only once the running sum exceeds energy × Σσ²; here it "
              "reaches it exactly. 'Hold at least that share' means ≥, not >: stop "
              "at the first k whose sum is ≥ energy × Σσ².",
    "above_max": "You counted the values above energy × the largest one, a threshold "
                 "on each σ; the effective rank adds the squares up from the largest "
                 "down until their running sum holds that share of the total Σσ².",
    "nonzero": "You counted the nonzero values (the rank), whatever energy is; count "
               "only as many of the largest as it takes to hold that share of Σσ².",
    "ignores_energy": f"That is the answer for energy={DEFAULT_ENERGY}: your function "
                      "ignores its energy argument (a 0.9 written in); use energy.",
    "index": "Your answer is one less than the count: you returned the 0-based index "
             "of the last value kept; the count is that index + 1.",
    "one_more": "Your answer is one more than the count: you kept one value past the "
                "first k that reaches the share, or added 1 to a count that already "
                "starts at 1.",
}
#: The mistakes every random case tells apart (a random case has no tie at the
#: threshold, so > and ≥ agree there; the tie case catches >).
_RANDOM_CATCHES = ("sigma", "unsorted", "above_max", "nonzero", "ignores_energy",
                   "index", "one_more")


def _sigmas(values) -> list[Fraction]:
    """The values exactly: each float (float32 ones too) as a Fraction, sign dropped."""
    flat = np.asarray(values, dtype=np.float64).ravel()
    return [abs(Fraction(float(v))) for v in flat]


def _first_reaching(weights: list[Fraction], target: Fraction, strict: bool = False):
    """The smallest k (1-based) whose first k weights sum to at least ``target`` (to
    more than it when ``strict``); None when no k does."""
    running = Fraction(0)
    for k, weight in enumerate(weights, 1):
        running += weight
        if running > target or (running == target and not strict):
            return k
    return None


def _reference(values, energy: float) -> int:
    """The effective rank, exactly: the fewest of the largest squares that hold
    ``energy`` (the float's exact value) of their total; 0 when the total is 0."""
    squares = sorted((s * s for s in _sigmas(values)), reverse=True)
    total = sum(squares, Fraction(0))
    if total == 0:
        return 0
    return _first_reaching(squares, Fraction(energy) * total)


def _mistakes(values, energy: float) -> list[tuple[str, int]]:
    """(mistake, what it returns on this case) for each mistake of the catalogue whose
    answer differs from the right one, computed exactly as the reference is; the most
    specific first, off by one last."""
    sigmas = _sigmas(values)
    squares = [s * s for s in sigmas]
    total, share = sum(squares, Fraction(0)), Fraction(energy)
    right = _reference(values, energy)
    cut = share * max(sigmas, default=Fraction(0))
    candidates = [
        ("sigma", _first_reaching(sorted(sigmas, reverse=True),
                                  share * sum(sigmas, Fraction(0)))),
        ("unsorted", _first_reaching(squares, share * total)),
        ("strict", _first_reaching(sorted(squares, reverse=True), share * total,
                                   strict=True)),
        ("above_max", sum(s >= cut for s in sigmas)),
        ("above_max", sum(s > cut for s in sigmas)),
        ("nonzero", sum(s != 0 for s in sigmas)),
        ("ignores_energy", _reference(values, DEFAULT_ENERGY)),
        ("index", right - 1),
        ("one_more", right + 1),
    ]
    return [(mistake, int(value)) for mistake, value in candidates
            if value is not None and value != right]


def _clear(values, energy: float) -> bool:
    """Whether every threshold of the catalogue's rules stays ``CLEARANCE`` (of its
    total) away from the running sums and values it is compared with."""
    sigmas = _sigmas(values)
    squares = [s * s for s in sigmas]
    share = Fraction(energy)
    largest_first = sorted(squares, reverse=True)
    for weights in (largest_first, squares, sorted(sigmas, reverse=True)):
        total, running = sum(weights, Fraction(0)), Fraction(0)
        for weight in weights:
            running += weight
            if abs(running - share * total) < CLEARANCE * total:
                return False
    largest = max(sigmas)
    return all(abs(s - share * largest) >= CLEARANCE * largest for s in sigmas)


def _told_apart(values, energy: float) -> bool:
    """Whether each mistake a random case must catch gives an answer of its own here,
    none of them the right one (so a wrong answer names one mistake only)."""
    answers: dict[str, set[int]] = {}
    for mistake, value in _mistakes(values, energy):
        answers.setdefault(mistake, set()).add(value)
    wanted = [m for m in _RANDOM_CATCHES
              if m != "ignores_energy" or energy != DEFAULT_ENERGY]
    seen = [value for found in answers.values() for value in found]
    return all(m in answers for m in wanted) and len(seen) == len(set(seen))


def _random_spectrum(generator, energy: float, dtype=np.float64) -> np.ndarray:
    """64 decaying singular values, as a trained adapter's W_up W_down has them, in
    random order; drawn again until every rule of the catalogue gives its own answer,
    clear of rounding."""
    for _ in range(1000):
        decay = generator.uniform(4.0, 16.0)
        values = 3.0 * np.exp(-np.arange(SPECTRUM_SIZE) / decay)
        noise = generator.lognormal(0.0, 0.3, SPECTRUM_SIZE)
        values = generator.permutation(values * noise).astype(dtype)
        if _clear(values, energy) and _told_apart(values, energy):
            return values
    raise RuntimeError("no random spectrum told the mistakes apart")  # pragma: no cover


def _effective_rank_cases():
    """(what, singular values, energy): random spectra in random order at the lab's
    r = 64 (float64, float32, a list), then the corner cases; the tie comes before the
    cases at energy 1.0, where > never holds."""
    generator = np.random.default_rng(11)
    drawn = f"{SPECTRUM_SIZE} random singular values in random order"
    cases = [
        (drawn, _random_spectrum(generator, 0.9), 0.9),
        (drawn, _random_spectrum(generator, 0.5), 0.5),
        (f"{drawn}, as float32", _random_spectrum(generator, 0.99, np.float32), 0.99),
        (f"{drawn}, as a Python list", _random_spectrum(generator, 0.9).tolist(), 0.9),
        ("four equal values (a tie at the threshold)", np.full(4, 2.0), 0.5),
    ]
    dominant = np.concatenate([[8.0], generator.uniform(0.05, 0.3, SPECTRUM_SIZE - 1)])
    cases.append(("one dominant value among 64, in random order",
                  generator.permutation(dominant), 0.9))
    # multiples of 1/8 and 1/16: their squares and every sum of them are exact floats,
    # so at energy 1.0 no order of adding up rounds the total away
    eighths = generator.integers(1, 33, SPECTRUM_SIZE) / 8
    cases.append((f"{drawn} (multiples of 1/8)", eighths, 1.0))
    used = np.sort(generator.integers(1, 49, 40) / 16)[::-1]
    cases.append(("40 nonzero values then 24 zeros, largest first",
                  np.concatenate([used, np.zeros(SPECTRUM_SIZE - 40)]), 1.0))
    cases.append((f"{SPECTRUM_SIZE} zeros", np.zeros(SPECTRUM_SIZE), 0.9))
    cases.append(("a single value", np.array([0.25]), 0.9))
    return cases


#: How many spectra the check draws beyond its fixed cases (hypothesis, derandomized: the same ones every run),
#: and their shape: up to RUNS runs of up to RUN_LONGEST equal values, so up to three times the lab's r, and a
#: count written for 64 values is caught.
DRAWN_EXAMPLES = 150
RUNS, RUN_LONGEST = 6, 32
LONGEST_DRAWN = RUNS * RUN_LONGEST
#: Shares that are binary fractions: with values in eighths, energy × Σσ² and every running sum are exact floats.
_SHARES = (0.5, 0.75, 1.0)


def _drawn_spectra():
    """(values, energy) drawn by hypothesis: 1 to LONGEST_DRAWN values in runs of equal ones, the runs in any
    order, each value a multiple of 1/8 from 0 to 8, and a share of :data:`_SHARES`. Their squares, sums and
    shares are exact floats (in float32 too) in any order, so every right way of counting agrees with the exact
    count, ties at the threshold included. A failing case shrinks to the fewest and smallest values that still
    fail."""
    from hypothesis import strategies as st

    # runs of equal values (how many, which eighth): few draws for a long spectrum, so drawing and shrinking
    # stay fast, and ties come up as often as in a trained adapter's spectrum
    runs = st.lists(st.tuples(st.integers(1, RUN_LONGEST), st.integers(0, 64)), min_size=1, max_size=RUNS)
    spectra = runs.map(lambda drawn: np.repeat([value / 8 for _, value in drawn],
                                               [count for count, _ in drawn]))
    return st.tuples(spectra, st.sampled_from(_SHARES))


def _drawn_what(values) -> str:
    """A drawn case in words, by its runs of equal values: "the drawn case of 65 values (65 × 0.125)"."""
    runs = []
    for value in values:
        if runs and runs[-1][1] == value:
            runs[-1][0] += 1
        else:
            runs.append([1, value])
    said = ", ".join(f"{count} × {value:g}" if count > 1 else f"{value:g}" for count, value in runs)
    return f"the drawn case of {len(values)} value{'s' if len(values) > 1 else ''} ({said}, in this order)"


def _smallest_failing(rank_fn):
    """The smallest drawn case on which ``rank_fn`` fails :func:`_check_one` (hypothesis shrinks it), or None."""

    def fails(case) -> bool:
        values, energy = case
        got = rank_fn(values.copy(), energy)
        return isinstance(got, bool) or not isinstance(got, numbers.Integral) or got != _reference(values, energy)

    return smallest_failing(_drawn_spectra(), fails, DRAWN_EXAMPLES)


def _unchanged(given, original) -> bool:
    if isinstance(original, list):
        return given == original
    return given.dtype == original.dtype and np.array_equal(given, original)


def _changed(call: str, given, original) -> str:
    """The message for an answer that changed the values it was given."""
    if sorted(np.asarray(given, dtype=np.float64).ravel().tolist()) == sorted(
            np.asarray(original, dtype=np.float64).ravel().tolist()):
        return (f"{call} sorted the caller's values in place (.sort()): the lab's "
                "spectrum is then in another order afterwards. Sort a copy: "
                "np.sort(singular_values) or sorted(singular_values) return a new one.")
    return (f"{call} changed the values it was given (e.g. squared them in place, "
            "s **= 2): the lab reads its spectrum again afterwards. Compute on a new "
            "array (s ** 2).")


def _count(call: str, got, expected: int, zero: bool) -> int:
    """The answer as a count, or a CheckFailed saying what it should be."""
    if isinstance(got, numbers.Integral) and not isinstance(got, bool):
        return int(got)
    if zero and (got is None or (isinstance(got, numbers.Real) and math.isnan(got))):
        raise CheckFailed(f"{call} returned {got!r}, not 0. {_ZERO}")
    if isinstance(got, (bool, np.bool_)):
        raise CheckFailed(f"{call} returned {got!r}, a bool; return the count itself, "
                          f"an int (here {expected}), not a comparison.")
    if isinstance(got, numbers.Real):
        raise CheckFailed(f"{call} returned {got!r}, a float; the effective rank "
                          "counts singular values, so return an int (here "
                          f"{expected}): e.g. int(k).")
    if got is None:
        raise CheckFailed(f"{call} returned None; return the count (here {expected}) "
                          "as an int. A function that ends without reaching a return "
                          "gives None.")
    raise CheckFailed(f"{call} returned {got!r} ({type(got).__name__}); return one "
                      f"number, the count of singular values, as an int (here "
                      f"{expected}).")


def _count_of(rank_fn, case):
    """What ``rank_fn`` returns for one fixed case, if it is a count (None otherwise, or when it raises)."""
    _, values, energy = case
    try:
        with np.errstate(all="ignore"):
            got = rank_fn(list(values) if isinstance(values, list) else values.copy(), energy)
    except Exception:
        return None
    return None if isinstance(got, bool) or not isinstance(got, numbers.Integral) else got


def _wrong_counts(mistake: str, case) -> list[int]:
    """What ``mistake`` returns on one fixed case where it differs from the effective rank; nothing for all zeros,
    where what a mistake gives depends on how the answer guards Σσ² = 0, which has its own message."""
    _, values, energy = case
    if _reference(values, energy) == 0:
        return []
    return [value for name, value in _mistakes(values, energy) if name == mistake]


def _check_one(name: str, rank_fn, what: str, values, energy: float,
               default: bool = False, named: bool = True, cases=()) -> None:
    """One case; ``default``: call without energy, which must then be 0.9. ``named``: name the catalogue's
    mistake the count matches, when the answer makes it on every one of ``cases`` too. A drawn case does not: an
    answer that passed the fixed cases, where each mistake gives its own count, is none of them, and matching one
    on a single case would be a guess; it is told what was measured instead (the case, the count, the exact
    count)."""
    expected = _reference(values, energy)
    zero = expected == 0
    if default:
        call, extra = f"{name}(singular_values) for {what}", ()
    else:
        call = f"{name}(singular_values, energy={energy!r}) for {what}"
        extra = (energy,)
    given = list(values) if isinstance(values, list) else values.copy()
    hint = _ZERO if zero else _LIST if isinstance(values, list) else ""
    with np.errstate(all="ignore"):
        got = call_answer(call, rank_fn, given, *extra, hint=hint, package=_PACKAGE_RANK,
                          may_change={0: ANYTHING})  # named below: sorted or squared in place
    if not _unchanged(given, values):
        raise CheckFailed(_changed(call, given, values))
    count = _count(call, got, expected, zero)
    if count == expected:
        return
    if zero:
        raise CheckFailed(f"{call} returned {count}, not 0. {_ZERO}")
    held = (f"{call} returned {count}; the effective rank is {expected} (the fewest "
            f"values whose squares hold {energy:.0%} of Σσ²).")
    if default:
        raise CheckFailed(f"{held} Without an energy argument your function must use "
                          f"the default, energy={DEFAULT_ENERGY} "
                          f"(def {name}(singular_values, energy={DEFAULT_ENERGY})).")
    if not named:
        longer = (f" It has {len(values)} values, more than the lab's {SPECTRUM_SIZE}: does your code assume "
                  f"{SPECTRUM_SIZE}?") if len(values) > SPECTRUM_SIZE else ""
        raise CheckFailed(f"{held} Your count was right on the fixed cases; this is the smallest drawn case where it "
                          f"is not.{longer} Run your function on it and compare, step by step.")
    problem = next((_MISTAKES[mistake] for mistake, value in _mistakes(values, energy)
                    if value == count and makes_everywhere(lambda case: _count_of(rank_fn, case),
                                                           lambda case: _wrong_counts(mistake, case), cases)),
                   None)
    if problem is None and energy == 1:
        problem = _ALL_COUNT
    raise CheckFailed(f"{held} {problem or _GENERIC}")


@plain_errors
def check_effective_rank(rank_fn) -> None:
    """Check ``rank_fn(singular_values, energy=0.9) -> int`` (lab 11): the fewest
    singular values whose squares hold at least ``energy`` of Σσ², 0 when every value
    is 0.

    The reference sorts the exact squares (each float as a Fraction) from largest to
    smallest and counts until their running sum is ≥ energy × Σσ², with no rounding
    anywhere; it does not call the package's ``anatomy.effective_rank``.
    """
    name = getattr(rank_fn, "__name__", "effective_rank")
    cases = _effective_rank_cases()
    for what, values, energy in cases:
        _check_one(name, rank_fn, what, values, energy, cases=cases)
    what, values, _ = cases[0]
    _check_one(name, rank_fn, what, values, DEFAULT_ENERGY, default=True)
    failing = _smallest_failing(rank_fn)
    if failing is not None:
        _check_one(name, rank_fn, _drawn_what(failing[0]), *failing, named=False)
    report_passed(
        f"Your effective rank matches an exact count on {len(cases)} spectra: 64 "
        "values in random order (energy 0.5, 0.9, 0.99 and 1.0; float64, float32 and a "
        "list), a tie at the threshold, one dominant value, trailing zeros, all zeros "
        "(0) and a single value; energy defaults to 0.9 and the caller's values are "
        f"left as they were; and on {DRAWN_EXAMPLES} drawn spectra of 1 to "
        f"{LONGEST_DRAWN} values."
    )
