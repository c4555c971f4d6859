"""The numeric and bool option checks every entry point shares, and the places that use them."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from langchain_ragmetrics import InMemorySink
from langchain_ragmetrics._breaker import CircuitBreaker
from langchain_ragmetrics._engine import ScoringEngine
from langchain_ragmetrics._options import (
    finite_number,
    flag,
    fraction,
    number_above_zero,
    number_at_least_zero,
    whole_number,
)
from langchain_ragmetrics._queue import BoundedQueue
from langchain_ragmetrics._threads import DaemonThreadPool
from langchain_ragmetrics.callbacks import ProcessIsolation

NOT_NUMBERS: list[object] = ["5", None, True, False, [1], math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("value", [*NOT_NUMBERS, 0, 0.0, -1, -0.5])
def test_number_above_zero_refuses_by_name(value: object) -> None:
    with pytest.raises(ValueError, match=r"^`wait` must be a number above 0, got ") as info:
        number_above_zero("wait", value)
    assert str(info.value).endswith(repr(value))


@pytest.mark.parametrize("value", [1, 0.001, 2.5, 10**6])
def test_number_above_zero_gives_a_float(value: float) -> None:
    checked = number_above_zero("wait", value)
    assert (checked, type(checked)) == (float(value), float)


@pytest.mark.parametrize("value", [*NOT_NUMBERS, -1, -0.5])
def test_number_at_least_zero_refuses_by_name(value: object) -> None:
    with pytest.raises(ValueError, match=r"^`backoff` must be a number of at least 0, got "):
        number_at_least_zero("backoff", value)


@pytest.mark.parametrize("value", [0, 0.0, 0.5, 3])
def test_number_at_least_zero_accepts_zero(value: float) -> None:
    assert number_at_least_zero("backoff", value) == float(value)


@pytest.mark.parametrize(
    ("value", "minimum"),
    [("3", 1), (1.0, 1), (1.5, 1), (True, 0), (None, 0), (0, 1), (-1, 0), (2, 3), (math.nan, 0)],
)
def test_whole_number_refuses_by_name_and_bound(value: object, minimum: int) -> None:
    expected = f"`retries` must be a whole number of at least {minimum}, got {value!r}"
    with pytest.raises(ValueError, match="must be a whole number") as info:
        whole_number("retries", value, minimum=minimum)
    assert str(info.value) == expected


def test_whole_number_keeps_the_int() -> None:
    assert whole_number("retries", 0, minimum=0) == 0
    assert whole_number("retries", 7) == 7


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: CircuitBreaker(threshold="5", cooldown=1), "`failure_threshold` must be a whole"),
        (lambda: CircuitBreaker(threshold=5, cooldown=math.nan), "`cooldown` must be a number"),
        (lambda: BoundedQueue(max_size=2.5), "`max_size` must be a whole number"),
        (lambda: DaemonThreadPool(name="t", size=0), "`size` must be a whole number"),
        (lambda: InMemorySink(max_results=1.5), "`max_results` must be a whole number"),
        (lambda: ScoringEngine(max_concurrency=0), "`max_concurrency` must be a whole number"),
        (lambda: ScoringEngine(timeout=math.inf), "`timeout` must be a number above 0, got inf"),
        # pydantic models: checked as given, before its lax mode coerces them
        (lambda: ProcessIsolation(hang_timeout="60"), "`hang_timeout` must be a finite number"),
        (lambda: ProcessIsolation(max_restarts=True), "`max_restarts` must be a finite number"),
    ],
)
def test_entry_points_use_the_shared_checks(build: Callable[[], Any], message: str) -> None:
    """Before, a string raised a comparison error and NaN or 1.5 passed."""
    with pytest.raises(ValueError, match=message):
        build()


@pytest.mark.parametrize("value", NOT_NUMBERS)
def test_finite_number_refuses_what_pydantic_would_coerce(value: object) -> None:
    with pytest.raises(ValueError, match=r"^`rate` must be a finite number, got "):
        finite_number("rate", value)
    assert finite_number("rate", -2) == -2  # the range is the caller's to check
    assert finite_number("rate", 0.5) == 0.5


@pytest.mark.parametrize("value", [*NOT_NUMBERS, -0.1, 1.01])
def test_fraction_is_zero_to_one(value: object) -> None:
    with pytest.raises(ValueError, match=r"^`share` must be a number between 0 and 1, got "):
        fraction("share", value)
    assert (fraction("share", 0), fraction("share", 1), fraction("share", 0.25)) == (0, 1, 0.25)


def test_numpy_scalars_are_numbers() -> None:
    """Options read from a pandas frame are NumPy scalars; np.int64 is not an ``int``."""
    import numpy as np

    assert whole_number("workers", np.int64(4)) == 4
    assert type(whole_number("workers", np.int64(4))) is int
    assert number_above_zero("timeout", np.float32(1.5)) == 1.5
    assert fraction("rate", np.float64(0.25)) == 0.25
    with pytest.raises(ValueError, match="whole number"):
        whole_number("workers", np.bool_(True))
    with pytest.raises(ValueError, match="finite number"):
        finite_number("rate", np.float64("nan"))


NOT_FLAGS: list[object] = ["no", "False", "", 0, 1, 0.0, None, [], [True]]


@pytest.mark.parametrize("value", NOT_FLAGS)
def test_flag_refuses_what_is_not_a_bool(value: object) -> None:
    """A string is truthy whatever it says, and 0 / 1 may be a number typed in the wrong place."""
    with pytest.raises(TypeError) as info:
        flag("follow", value)
    assert str(info.value) == f"`follow` must be True or False, got {value!r}"


@pytest.mark.parametrize("value", [True, False])
def test_flag_gives_the_bool_back(value: bool) -> None:
    assert flag("follow", value) is value
    assert flag("follow", value, allow_none=True) is value


def test_flag_with_allow_none_takes_none_and_says_so_when_refusing() -> None:
    assert flag("preflight", None, allow_none=True) is None
    with pytest.raises(TypeError) as info:
        flag("preflight", "no", allow_none=True)
    assert str(info.value) == "`preflight` must be True, False or None, got 'no'"
    with pytest.raises(TypeError, match=r"^`preflight` must be True or False, got None$"):
        flag("preflight", None)


def test_numpy_bools_are_bools() -> None:
    """A switch read from a pandas frame is a NumPy bool, which is no ``bool`` subclass."""
    import numpy as np

    for value in (np.bool_(True), np.bool_(False)):
        checked = flag("include_answer", value)
        assert (checked, type(checked)) == (bool(value), bool)
    assert flag("preflight", np.bool_(False), allow_none=True) is False
    with pytest.raises(TypeError, match=r"`include_answer` must be True or False, got "):
        flag("include_answer", np.int64(1))
