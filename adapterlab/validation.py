"""Argument checks shared by the package: one clear line for every bad value, before anything runs.

A lab's widget, a command-line flag or a JSON file can hand the package a value of the wrong kind: the
string ``"False"`` (which Python counts as true), a float where a size is meant, a NaN learning rate.
Each check below refuses such a value with a ``ValueError`` that names the argument, says what it must
be and shows what it got, and returns the value in its plain Python form (NumPy integers become ints).
"""

from __future__ import annotations

import math
import numbers


def check_positive_int(name: str, value) -> int:
    """A size: a true integer >= 1. A float or a bool would silently truncate or mislead.

    Any integral type (Python or NumPy) is accepted and returned as a plain int.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1; got {value!r}")
    return int(value)


def check_number(name: str, value, low: float, *, low_inclusive: bool, high: float | None = None,
                 high_inclusive: bool = True) -> float:
    """A finite real number within bounds (a bool or a numeric string is not a number); returned as a float."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value >= low if low_inclusive else value > low)
    ok = ok and (high is None or (value <= high if high_inclusive else value < high))
    if not ok:
        bounds = f"{'>=' if low_inclusive else '>'} {low:g}"
        if high is not None:
            bounds += f" and {'<=' if high_inclusive else '<'} {high:g}"
        raise ValueError(f"{name} must be a finite number {bounds}; got {value!r}")
    return float(value)


def check_init_scale(value) -> float:
    """An init scale is a standard deviation: finite and >= 0 (0 gives a zero-initialised adapter)."""
    return check_number("init_scale", value, 0, low_inclusive=True)


def check_choice(name: str, value, choices):
    """One of a fixed set of names, compared exactly (``"GELU"`` is not ``"gelu"``); returns it."""
    if isinstance(value, str) and value in choices:
        return value
    raise ValueError(f"{name} must be one of {', '.join(map(str, choices))}; got {value!r}")


def check_bool(name: str, value) -> bool:
    """True or False itself: the string ``"False"`` and the number 0 are refused, not guessed at."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False; got {value!r}")
    return value


#: The largest sizes a model of this lab can have: beyond them a value is a typo, and building it would
#: fill the memory (a classifier over 10^12 labels) long before saying so.
SIZE_LIMITS = {"num_labels": 100_000, "bottleneck": 65_536, "rank": 65_536, "top_k": 1_024,
               "batch_size": 1_000_000, "rows": 1_000_000_000, "steps": 1_000_000_000, "eval_every": 1_000_000_000}
#: Seeds are what NumPy and PyTorch take: 0 to 2^32 - 1.
MAX_SEED = 2**32 - 1


def check_size(name: str, value, limit: int) -> int:
    """A size within what a model can be: an integer from 1 to ``limit``."""
    value = check_positive_int(name, value)
    if value > limit:
        raise ValueError(f"{name} must be at most {limit:,}; got {value:,}")
    return value


def check_seed(name: str, value) -> int:
    """A random seed: an integer from 0 to 2^32 - 1 (what NumPy's generators take)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value <= MAX_SEED:
        raise ValueError(f"{name} must be an integer from 0 to {MAX_SEED} (2^32 - 1); got {value!r}")
    return int(value)


def json_safe(value):
    """``value`` with every non-finite float (NaN, ±inf) as None, since JSON has no NaN and a bare ``NaN`` in
    a file is not JSON; containers are copied, everything else is returned as it is."""
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, numbers.Integral)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value
