"""The shared argument checks: what each accepts (and returns, as plain Python), what it refuses, and
that the message names the argument, what it must be and the value it got."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adapterlab.validation import check_bool, check_choice, check_init_scale, check_number, check_positive_int


@pytest.mark.parametrize("value", [1, 7, np.int64(64), np.int32(3)])
def test_positive_int_accepts_integers_and_returns_a_plain_int(value):
    result = check_positive_int("bottleneck", value)
    assert result == int(value) and type(result) is int


@pytest.mark.parametrize("value", [0, -3, 2.0, 2.5, True, "8", None, float("nan")])
def test_positive_int_refuses_everything_else(value):
    with pytest.raises(ValueError, match=rf"^bottleneck must be an integer >= 1; got {value!r}$"):
        check_positive_int("bottleneck", value)


@pytest.mark.parametrize(
    "value, low, low_inclusive, high, high_inclusive",
    [
        (0.0, 0, True, None, True),
        (1e-9, 0, False, None, True),
        (np.float32(0.5), 0, True, 1, False),
        (1, 0, True, 1, True),
    ],
)
def test_number_accepts_values_within_bounds(value, low, low_inclusive, high, high_inclusive):
    result = check_number("x", value, low, low_inclusive=low_inclusive, high=high, high_inclusive=high_inclusive)
    assert result == float(value) and type(result) is float


@pytest.mark.parametrize(
    "value, low, low_inclusive, high, high_inclusive, bounds",
    [
        (0.0, 0, False, None, True, "> 0"),
        (-1e-9, 0, True, None, True, ">= 0"),
        (1.0, 0, True, 1, False, ">= 0 and < 1"),
        (math.inf, 0, True, None, True, ">= 0"),
        (math.nan, 0, True, None, True, ">= 0"),
        (True, 0, True, None, True, ">= 0"),
        ("0.1", 0, True, None, True, ">= 0"),
        (None, 0, True, None, True, ">= 0"),
    ],
)
def test_number_refuses_and_states_the_bounds(value, low, low_inclusive, high, high_inclusive, bounds):
    with pytest.raises(ValueError, match=rf"^warmup_ratio must be a finite number {bounds}; got "):
        check_number("warmup_ratio", value, low, low_inclusive=low_inclusive, high=high, high_inclusive=high_inclusive)


def test_init_scale_is_a_non_negative_finite_number():
    assert check_init_scale(0) == 0.0 and check_init_scale(np.float64(1e-3)) == 1e-3
    for bad in (-1e-3, math.inf, "0.01", True, None):
        with pytest.raises(ValueError, match="^init_scale must be a finite number >= 0"):
            check_init_scale(bad)


def test_choice_is_exact_and_lists_the_choices():
    assert check_choice("activation", "gelu", ("gelu", "relu")) == "gelu"
    for bad in ("GELU", "sigmoid", ["gelu"], None, 1):
        with pytest.raises(ValueError, match=rf"^activation must be one of gelu, relu; got {bad!r}$".replace("[", r"\[")):
            check_choice("activation", bad, ("gelu", "relu"))


def test_bool_takes_only_true_and_false():
    assert check_bool("progress", True) is True and check_bool("progress", False) is False
    for bad in ("False", "True", 0, 1, None, np.bool_(False)):
        with pytest.raises(ValueError, match=rf"^train_layernorm must be True or False; got {bad!r}$"):
            check_bool("train_layernorm", bad)
