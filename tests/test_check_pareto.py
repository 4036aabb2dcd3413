"""The lab-10 self-check of the Pareto front: the reference solution passes, a stub is reported missing, and
each mistake students make is rejected with a message that names it."""

from __future__ import annotations

import pytest

from adapterlab import tradeoff
from adapterlab.checks_training import CheckFailed, check_pareto_front
from adapterlab.tradeoff import pareto_front


def solution(points):
    """The lab's solution: cheapest first, keep a method when it beats every cheaper one, or is an exact twin
    of the last method kept."""
    front, best, last = [], float("-inf"), None
    for label, (count, score) in sorted(points.items(), key=lambda item: (item[1][0], -item[1][1])):
        if score > best or (count, score) == last:
            front.append(label)
            best, last = score, (count, score)
    return front


def by_brute_force(points):
    """Another right answer, written the slow way: keep what no other point dominates."""
    keep = [a for a, (ca, sa) in points.items()
            if not any(cb <= ca and sb >= sa and (cb, sb) != (ca, sa) for b, (cb, sb) in points.items() if b != a)]
    return sorted(keep, key=lambda label: points[label][0])


def stub(points):
    raise NotImplementedError("write the Pareto front")


def more_is_better(points):
    """Dominance the wrong way round: a method survives when nothing LARGER beats it."""
    front, best = [], float("-inf")
    for label, (count, score) in sorted(points.items(), key=lambda item: -item[1][0]):
        if score > best:
            front.append(label)
            best = score
    return sorted(front, key=lambda label: points[label][0])


def only_the_neighbour(points):
    """Compares with the previous method only, not with the best so far."""
    ordered = sorted(points.items(), key=lambda item: (item[1][0], -item[1][1]))
    return [label for k, (label, (count, score)) in enumerate(ordered) if k == 0 or score > ordered[k - 1][1][1]]


def ties_by_count_only(points):
    """Sorts by the count alone, so of two equal counts the one listed first is kept even when weaker."""
    front, best = [], float("-inf")
    for label, (count, score) in sorted(points.items(), key=lambda item: item[1][0]):
        if score > best:
            front.append(label)
            best = score
    return front


def equal_score_kept(points):
    """>= instead of >: a dearer method with the same score stays on the front."""
    front, best = [], float("-inf")
    for label, (count, score) in sorted(points.items(), key=lambda item: (item[1][0], -item[1][1])):
        if score >= best:
            front.append(label)
            best = score
    return front


def best_only(points):
    return [max(points, key=lambda label: points[label][1])]


def unsorted(points):
    return list(reversed(solution(points)))


def mutates(points):
    answer = solution(points)
    points.clear()
    return answer


@pytest.mark.parametrize("answer", [solution, by_brute_force])
def test_right_answers_pass(answer, capsys):
    check_pareto_front(answer)
    assert capsys.readouterr().out.startswith("✔ ")


def test_a_stub_is_reported_missing():
    with pytest.raises(CheckFailed, match="The answer is missing"):
        check_pareto_front(stub)


@pytest.mark.parametrize("answer, words", [
    (more_is_better, "MORE parameters"),
    (only_the_neighbour, "only with the next cheaper one"),
    (ties_by_count_only, "same number of parameters"),
    (equal_score_kept, "scores exactly what a cheaper method scores"),
    (best_only, "only the best-scoring method"),
    (unsorted, "in the wrong order"),
    (mutates, "changed the keys of `points` in place"),
    (lambda points: "method A", "return a list"),
], ids=lambda value: getattr(value, "__name__", None) if callable(value) else None)
def test_each_mistake_is_named(answer, words):
    with pytest.raises(CheckFailed, match=words):
        check_pareto_front(answer)


def twins_dropped(points):
    """Walks cheapest first with a strict >, so of two exact twins only the first survives."""
    front, best = [], float("-inf")
    for label, (count, score) in sorted(points.items(), key=lambda item: (item[1][0], -item[1][1])):
        if score > best:
            front.append(label)
            best = score
    return front


def best_from_zero(points):
    front, best = [], 0.0
    for label, (count, score) in sorted(points.items(), key=lambda item: (item[1][0], -item[1][1])):
        if score > best:
            front.append(label)
            best = score
    return front


def cheapest_first(points, keep=lambda score, best: score > best, start=float("-inf"), tie=lambda item: -item[1][1]):
    """The walk most answers take, cheapest first, keeping a method that beats the best so far; the arguments are
    where students go wrong."""
    front, best = [], start
    for label, (count, score) in sorted(points.items(), key=lambda item: (item[1][0], tie(item))):
        if keep(score, best):
            front.append(label)
            best = score
    return front


def best_from_minus_one(points):
    """Starts from −1, "the lowest a correlation can be": a method at exactly −1 never gets on."""
    return cheapest_first(points, start=-1.0)


def with_a_tolerance(points):
    """Treats scores within 1e-3 as equal, so a narrow win is dropped like a tie."""
    return cheapest_first(points, keep=lambda score, best: score > best + 1e-3)


def ties_by_name(points):
    """Breaks ties in the count by label, so of two equal counts the one named first is kept even when weaker."""
    return cheapest_first(points, tie=lambda item: item[0])


def by_inverted_dict(points):
    """Keys the methods by (count, score): exact twins overwrite each other."""
    by_point = {point: label for label, point in points.items()}
    kept = [by_point[point] for point in by_point if not any(
        c <= point[0] and s >= point[1] and (c, s) != point for c, s in by_point)]
    return sorted(kept, key=lambda label: points[label][0])


def calls_the_package(points):
    return tradeoff.pareto_front(points)


def listed_twice(points):
    front = by_brute_force(points)
    return front + front[-1:]


@pytest.mark.parametrize("answer, words", [
    (twins_dropped, "score exactly the same"),
    (best_from_zero, "best score of 0"),
    (best_from_minus_one, "best score of -1"),
    (with_a_tolerance, "tolerance"),
    (ties_by_name, "not by name"),
    (by_inverted_dict, "score exactly the same"),
    (calls_the_package, "tradeoff.pareto_front"),
    (pareto_front, "tradeoff.pareto_front"),
    (lambda points: list(pareto_front(dict(points))), "tradeoff.pareto_front"),  # the name imported above
    (listed_twice, "more than once"),
], ids=lambda value: getattr(value, "__name__", None) if callable(value) else None)
def test_ties_duplicates_scores_at_or_below_zero_and_the_package_s_own_front(answer, words):
    with pytest.raises(CheckFailed, match=words):
        check_pareto_front(answer)
    assert pareto_front({"a": (1, 0.5), "b": (2, 0.4)}) == ["a"]  # the package's front works again afterwards


def test_exact_twins_may_come_in_either_order(capsys):
    def twins_last_first(points):
        front = by_brute_force(points)
        return sorted(front, key=lambda label: (points[label][0], -points[label][1], [-ord(c) for c in label]))

    check_pareto_front(twins_last_first)
    assert capsys.readouterr().out.startswith("✔ ")


def test_a_crash_is_reported_with_its_error():
    with pytest.raises(CheckFailed, match="raised KeyError"):
        check_pareto_front(lambda points: points["nothing"])


def test_a_mistake_is_named_only_where_the_answer_makes_it_on_every_case():
    """An answer that compares with the neighbour on the first case alone, where that is what the neighbour mistake
    returns, and answers rightly elsewhere, made no such mistake in general: it is shown the case, not told "you
    compared each method only with the next cheaper one"."""
    wrong_on = []

    def neighbour_once(points):
        if not wrong_on and only_the_neighbour(points) != by_brute_force(points):
            wrong_on.append(dict(points))
            return only_the_neighbour(points)
        return by_brute_force(points)

    with pytest.raises(CheckFailed) as failure:
        check_pareto_front(neighbour_once)
    message = str(failure.value)
    assert wrong_on and f"your front is {only_the_neighbour(wrong_on[0])}" in message
    assert "next cheaper one" not in message and "no other method has at most" in message


def test_a_front_right_only_on_the_fixed_sets_is_shown_the_smallest_drawn_set_it_gets_wrong():
    """No fixed set has one method, or a front the scores' signs decide: answers written for the sets they were
    tried on fail on a drawn one, shrunk to the fewest methods and smallest numbers, and no mistake is named."""
    def needs_two(points):
        return solution(points) if len(points) > 1 else []

    with pytest.raises(CheckFailed) as failed:
        check_pareto_front(needs_two)
    message = str(failed.value)
    assert "the drawn set of 1 method {'m0': (1, 0.0)}" in message and "it is ['m0']" in message
    assert "You " not in message  # no mistake of the catalogue named

    def positive_scores_only(points):  # the fixed sets' zero and negative scores never decide alone
        front = solution(points)
        return front if any(points[label][1] > 0 for label in front) or len(front) != 1 else []

    with pytest.raises(CheckFailed, match="the drawn set of 1 method"):
        check_pareto_front(positive_scores_only)


@pytest.mark.parametrize("answer", [solution, by_brute_force])
def test_right_fronts_pass_every_drawn_set(answer, capsys):
    check_pareto_front(answer)
    assert "and on 150 drawn sets" in capsys.readouterr().out
