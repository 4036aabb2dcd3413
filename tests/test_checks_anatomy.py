"""Lab 11's self-check, check_effective_rank: its exact reference agrees with the
package's effective_rank, it accepts right answers, and it rejects each mistake of its
catalogue with a message that names it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from adapterlab.teaching import checks_anatomy as ca
from adapterlab.teaching.notebook import anatomy

MISSING = "The answer is missing"


def _fails(answer, words=()):
    with pytest.raises(ca.CheckFailed) as caught:
        ca.check_effective_rank(answer)
    message = str(caught.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, message
    return message


def _squares_largest_first(singular_values):
    return np.sort(np.asarray(singular_values, dtype=np.float64) ** 2)[::-1]


# ------------------------------------------------------------------------------------
# The cases and the reference
# ------------------------------------------------------------------------------------


def test_the_reference_agrees_with_the_package_on_every_case():
    cases = ca._effective_rank_cases()
    for what, values, energy in cases:
        reference = ca._reference(values, energy)
        assert reference == anatomy.effective_rank(values, energy), what


def test_the_reference_counts_ties_and_zeros_exactly():
    assert ca._reference([2.0, 2.0, 2.0, 2.0], 0.5) == 2
    assert ca._reference([1.0, 2.0, 0.0, 0.0], 1.0) == 2
    assert ca._reference([0.0, 0.0], 0.9) == 0
    assert ca._reference([3.0, 4.0], 0.625) == 1  # 4² holds 16/25 = 0.64 of the total
    assert ca._reference([3.0, 4.0], 0.64) == 2  # the float 0.64 is a hair above 16/25
    assert ca._reference([0.25], 0.9) == 1


def test_the_cases_are_the_ones_the_exercise_promises():
    cases = ca._effective_rank_cases()
    drawn = [(values, energy) for what, values, energy in cases if "random" in what]
    assert {energy for _, energy in drawn} == {0.5, 0.9, 0.99, 1.0}
    for values, _ in drawn:
        array = np.asarray(values)
        assert len(array) == 64 and not np.all(np.diff(array) <= 0)  # not largest first
    kinds = {type(values).__name__ + str(getattr(values, "dtype", ""))
             for _, values, _ in cases}
    assert {"ndarrayfloat64", "ndarrayfloat32", "list"} <= kinds
    expected = {ca._reference(values, energy) for _, values, energy in cases}
    assert {0, 1, 2, 40, 64} <= expected  # zeros, one value, the tie, 40 used, all 64
    [tie] = [(values, energy) for what, values, energy in cases if "tie" in what]
    assert ca._reference(*tie) == 2
    assert next(mistake for mistake, _ in ca._mistakes(*tie)) == "strict"


def test_every_random_case_tells_the_mistakes_apart_and_is_clear_of_rounding():
    for what, values, energy in ca._effective_rank_cases()[:4]:
        assert ca._clear(values, energy) and ca._told_apart(values, energy), what
        right = ca._reference(values, energy)
        float32 = _squares_largest_first(np.asarray(values, dtype=np.float32))
        assert int(np.argmax(np.cumsum(float32) >= energy * float32.sum())) + 1 == right


# ------------------------------------------------------------------------------------
# Right answers
# ------------------------------------------------------------------------------------


def my_effective_rank(singular_values, energy=0.9):
    """A plain Python loop: no NumPy at all."""
    return _plain_count(singular_values, energy, largest_first=True)


def _plain_count(singular_values, energy, largest_first):
    squares = sorted((value * value for value in singular_values), reverse=largest_first)
    total = sum(squares)
    if total == 0:
        return 0
    running = 0.0
    for count, square in enumerate(squares, 1):
        running += square
        if running >= energy * total:
            return count
    return len(squares)


def with_numpy(singular_values, energy=0.9):
    squares = _squares_largest_first(singular_values)
    cumulative = np.cumsum(squares)
    if cumulative[-1] == 0:
        return 0
    return int(np.argmax(cumulative / cumulative[-1] >= energy)) + 1


@pytest.mark.parametrize("answer",
                         [my_effective_rank, with_numpy],
                         ids=["python_loop", "numpy"])
def test_right_answers_pass_with_one_tick_line(answer, capsys):
    ca.check_effective_rank(answer)
    out = capsys.readouterr().out
    assert out.startswith("✔ Your effective rank matches an exact count on 10 spectra")
    assert out.count("\n") == 1


def test_a_numpy_integer_is_a_count():
    def as_numpy_integer(singular_values, energy=0.9):
        return np.int64(with_numpy(singular_values, energy))

    ca.check_effective_rank(as_numpy_integer)


# ------------------------------------------------------------------------------------
# The catalogue of mistakes
# ------------------------------------------------------------------------------------


def energy_of_sigma(singular_values, energy=0.9):
    values = np.sort(np.asarray(singular_values, dtype=np.float64))[::-1]
    cumulative = np.cumsum(values)
    if cumulative[-1] == 0:
        return 0
    return int(np.argmax(cumulative >= energy * cumulative[-1])) + 1


def not_sorted(singular_values, energy=0.9):
    cumulative = np.cumsum(np.asarray(singular_values, dtype=np.float64) ** 2)
    if cumulative[-1] == 0:
        return 0
    return int(np.argmax(cumulative >= energy * cumulative[-1])) + 1


def returns_the_index(singular_values, energy=0.9):
    cumulative = np.cumsum(_squares_largest_first(singular_values))
    if cumulative[-1] == 0:
        return 0
    return int(np.argmax(cumulative >= energy * cumulative[-1]))


def one_more(singular_values, energy=0.9):
    cumulative = np.cumsum(_squares_largest_first(singular_values))
    if cumulative[-1] == 0:
        return 0
    return int(np.sum(cumulative < energy * cumulative[-1])) + 2


def strictly_greater(singular_values, energy=0.9):
    cumulative = np.cumsum(_squares_largest_first(singular_values))
    if cumulative[-1] == 0:
        return 0
    return int(np.argmax(cumulative > energy * cumulative[-1])) + 1


def dividing_by_zero(singular_values, energy=0.9):
    """Python floats: 0 / 0 raises ZeroDivisionError."""
    squares = sorted((float(v) ** 2 for v in singular_values), reverse=True)
    total, running = sum(squares), 0.0
    for count, square in enumerate(squares, 1):
        running += square
        if running / total >= energy:
            return count


def nan_share(singular_values, energy=0.9):
    """NumPy: 0 / 0 is NaN, no comparison holds, argmax of all False is 0: gives 1."""
    cumulative = np.cumsum(_squares_largest_first(singular_values))
    return int(np.argmax(cumulative / cumulative[-1] >= energy)) + 1


def returns_nan(singular_values, energy=0.9):
    cumulative = np.cumsum(_squares_largest_first(singular_values))
    if cumulative[-1] == 0:
        return float("nan")
    return int(np.argmax(cumulative >= energy * cumulative[-1])) + 1


def falls_off_the_end(singular_values, energy=0.9):
    """A loop whose return no NaN share ever reaches gives None."""
    cumulative = np.cumsum(_squares_largest_first(singular_values))
    with np.errstate(invalid="ignore"):
        shares = cumulative / cumulative[-1]
    for count, share in enumerate(shares, 1):
        if share >= energy:
            return count


def above_energy_times_max(singular_values, energy=0.9):
    values = np.asarray(singular_values, dtype=np.float64)
    return int(np.sum(values >= energy * values.max()))


def counts_nonzero(singular_values, energy=0.9):
    return int(np.count_nonzero(singular_values))


def sorts_in_place(singular_values, energy=0.9):
    singular_values.sort()  # arrays and lists have .sort(): the caller's order goes
    return with_numpy(singular_values[::-1], energy)


def squares_in_place(singular_values, energy=0.9):
    values = np.asarray(singular_values)
    values **= 2  # an array given is squared where the caller keeps it
    cumulative = np.cumsum(np.sort(values)[::-1])
    if cumulative[-1] == 0:
        return 0
    return int(np.argmax(cumulative >= energy * cumulative[-1])) + 1


def ignores_energy(singular_values, energy=0.9):
    cumulative = np.cumsum(_squares_largest_first(singular_values))
    if cumulative[-1] == 0:
        return 0
    return int(np.argmax(cumulative >= 0.9 * cumulative[-1])) + 1


def wrong_default(singular_values, energy=0.5):
    return with_numpy(singular_values, energy)


@pytest.mark.parametrize(
    "answer, words",
    [
        (energy_of_sigma, ("returned 12", "is 6", "Σσ, the sum of the singular values",
                           "square the values")),
        (not_sorted, ("returned 49", "in the order given", "largest to smallest")),
        (returns_the_index, ("returned 5", "one less than the count", "0-based index")),
        (one_more, ("returned 7", "one more than the count")),
        (strictly_greater, ("four equal values (a tie at the threshold)", "returned 3",
                            "is 2", "≥, not >")),
        (dividing_by_zero, ("64 zeros", "ZeroDivisionError",
                            "so the effective rank is 0", "Return 0 when Σσ² is 0")),
        (nan_share, ("64 zeros", "returned 1, not 0", "so the effective rank is 0",
                     "Return 0 when Σσ² is 0")),
        (returns_nan, ("64 zeros", "returned nan, not 0", "Return 0 when Σσ² is 0")),
        (falls_off_the_end, ("64 zeros", "returned None, not 0",
                             "Return 0 when Σσ² is 0")),
        (above_energy_times_max, ("returned 1", "above energy × the largest one",
                                  "threshold on each σ")),
        (counts_nonzero, ("returned 64", "nonzero values (the rank)",
                          "whatever energy is")),
        (sorts_in_place, ("sorted the caller's values in place",
                          "np.sort(singular_values)")),
        (squares_in_place, ("changed the values it was given",
                            "squared them in place")),
        (ignores_energy, ("energy=0.5", "returned 10", "is 3",
                          "answer for energy=0.9", "ignores its energy argument")),
        (wrong_default, ("wrong_default(singular_values) for", "default, energy=0.9")),
    ],
    ids=lambda value: getattr(value, "__name__", None) if callable(value) else None,
)
def test_each_mistake_is_named(answer, words):
    _fails(answer, words=(f"{answer.__name__}(singular_values", *words))


# ------------------------------------------------------------------------------------
# What the answer returns, or raises
# ------------------------------------------------------------------------------------


def _stub(singular_values, energy=0.9):
    raise NotImplementedError("write your solution here")


def raises(singular_values, energy=0.9):
    raise ValueError("no spectrum today")


def returns_none(singular_values, energy=0.9):
    with_numpy(singular_values, energy)


def returns_a_float(singular_values, energy=0.9):
    return float(with_numpy(singular_values, energy))


def returns_a_numpy_float(singular_values, energy=0.9):
    return np.float64(with_numpy(singular_values, energy))


def returns_a_bool(singular_values, energy=0.9):
    return bool(with_numpy(singular_values, energy))


def returns_an_array(singular_values, energy=0.9):
    return np.array([with_numpy(singular_values, energy)])


def squares_a_list(singular_values, energy=0.9):
    cumulative = np.cumsum(np.sort(singular_values ** 2)[::-1])  # a list has no ** 2
    if cumulative[-1] == 0:
        return 0
    return int(np.argmax(cumulative >= energy * cumulative[-1])) + 1


@pytest.mark.parametrize(
    "answer, words",
    [
        (_stub, (MISSING,)),
        (raises, ("raised ValueError: no spectrum today",)),
        (returns_none, ("returned None", "return the count (here 6) as an int",
                        "without reaching a return")),
        (returns_a_float, ("returned 6.0, a float", "return an int (here 6)")),
        (returns_a_numpy_float, (f"returned {np.float64(6.0)!r}, a float",
                                 "return an int")),
        (returns_a_bool, ("returned True, a bool", "an int (here 6)",
                          "not a comparison")),
        (returns_an_array, ("(ndarray)", "return one number", "as an int (here 6)")),
        (squares_a_list, ("as a Python list", "raised TypeError",
                          "np.asarray(singular_values)")),
    ],
    ids=lambda value: getattr(value, "__name__", None) if callable(value) else None,
)
def test_what_is_not_a_count_gets_a_clear_message(answer, words):
    _fails(answer, words=words)


def test_a_float_zero_for_all_zeros_is_still_a_float():
    def zero_as_float(singular_values, energy=0.9):
        result = with_numpy(singular_values, energy)
        return 0.0 if result == 0 else result

    _fails(zero_as_float, words=("64 zeros", "returned 0.0, a float", "here 0"))


# ------------------------------------------------------------------------------------
# Drawn cases: sizes the fixed cases never have, shown at their smallest
# ------------------------------------------------------------------------------------


def written_for_64_values(singular_values, energy=0.9):
    """Right on every spectrum of at most 64 values: the loop stops at the lab's r."""
    squares = sorted((float(s) ** 2 for s in singular_values), reverse=True)
    total = sum(squares)
    if total == 0:
        return 0
    running = 0.0
    for k in range(64):
        running += squares[k]
        if running >= energy * total:
            return k + 1
    return 64


def test_an_answer_written_for_64_values_passes_the_fixed_cases_and_fails_the_smallest_longer_one():
    for what, values, energy in ca._effective_rank_cases():
        assert written_for_64_values(values, energy) == ca._reference(values, energy), what
    message = _fails(written_for_64_values, ["the drawn case of 65 values (65 × 0.125", "returned 64",
                                             "the effective rank is 65", "does your code assume 64"])
    assert not any(named in message for named in ca._MISTAKES.values())  # no guess at a catalogue mistake


def float32_running_share(singular_values, energy=0.9):
    squares = np.sort(np.asarray(singular_values, dtype=np.float32) ** 2)[::-1]
    total = squares.sum(dtype=np.float32)
    if total == 0:
        return 0
    running = np.float32(0)
    for k, square in enumerate(squares, 1):
        running += square
        if running / total >= energy:
            return k


def searchsorted_count(singular_values, energy=0.9):
    squares = _squares_largest_first(singular_values)
    if squares.sum() == 0:
        return 0
    return int(np.searchsorted(np.cumsum(squares), energy * squares.sum())) + 1


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(ca._drawn_spectra())
def test_every_right_way_of_counting_agrees_with_the_exact_count_on_every_drawn_case(case):
    """The drawn cases are exact in floats, so no right answer (float64 or float32, a loop or numpy, a share
    compared by division or by product) can be rejected on one."""
    values, energy = case
    expected = ca._reference(values, energy)
    for answer in (my_effective_rank, with_numpy, float32_running_share, searchsorted_count):
        assert answer(values, energy) == expected, answer.__name__
        assert answer(values.tolist(), energy) == expected, answer.__name__


def smallest_first(singular_values, energy=0.9):
    """Adds the squares from the smallest up: on the first case it counts as many values as are nonzero, which is
    what counting the nonzero values returns there too."""
    return _plain_count(singular_values, energy, largest_first=False)


def test_a_mistake_is_named_only_where_the_answer_makes_it_on_every_fixed_case():
    """Matching a mistake's count on one case is not making that mistake: an ascending sort was told "you counted
    the nonzero values (the rank)"; it is told what was measured, and how to count."""
    message = _fails(smallest_first, words=("smallest_first(singular_values", ca._GENERIC))
    assert not any(text in message for text in ca._MISTAKES.values()), message
