"""The circuit breaker on its own, with a hand-driven clock (no sleeping)."""

import pytest

from langchain_ragmetrics._breaker import CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_opens_after_the_threshold_pauses_then_lets_one_try_through() -> None:
    clock = Clock()
    breaker = CircuitBreaker(threshold=3, cooldown=30, clock=clock)
    assert [breaker.failure() for _ in range(2)] == [False, False]
    assert not breaker.is_open
    assert not breaker.tripped
    assert breaker.failure() is True  # the third failure in a row opens it
    assert breaker.is_open
    assert breaker.retry_in == 30
    clock.now += 29.5
    assert breaker.is_open
    clock.now += 1  # cool-down over: half-open, one attempt may go
    assert not breaker.is_open
    assert breaker.tripped  # no success since the failures that opened it
    assert breaker.failure() is True  # that attempt failed: open again at once
    assert breaker.retry_in == 30
    clock.now += 31
    assert breaker.success() is True  # it worked: closed, and the count starts over
    assert not breaker.is_open
    assert not breaker.tripped
    assert breaker.failure() is False


def test_a_success_resets_the_count() -> None:
    breaker = CircuitBreaker(threshold=2, cooldown=1, clock=Clock())
    breaker.failure()
    assert breaker.success() is False  # it was not open
    assert breaker.failure() is False
    assert breaker.failure() is True


def test_with_no_cooldown_it_is_never_open_but_trips() -> None:
    breaker = CircuitBreaker(threshold=1, cooldown=0, clock=Clock())
    assert breaker.failure() is True
    assert not breaker.is_open
    assert breaker.tripped
    breaker.success()
    assert not breaker.tripped


@pytest.mark.parametrize(("threshold", "cooldown"), [(0, 1), (1, -1)])
def test_bad_options(threshold: int, cooldown: float) -> None:
    with pytest.raises(ValueError, match=r"failure_threshold|cooldown"):
        CircuitBreaker(threshold=threshold, cooldown=cooldown)


def test_failures_of_requests_under_way_when_it_opened_neither_extend_nor_warn_again() -> None:
    """Several lanes fail together: before, each failure past the threshold "opened" it again
    (a warning each) and pushed the cool-down further."""
    clock = Clock()
    breaker = CircuitBreaker(threshold=2, cooldown=30, clock=clock)
    breaker.failure()
    assert breaker.failure() is True
    clock.now += 10
    assert [breaker.failure() for _ in range(3)] == [False, False, False]
    assert breaker.retry_in == 20  # not extended


def test_after_the_cool_down_one_trial_goes_and_the_others_wait_for_it() -> None:
    clock = Clock()
    breaker = CircuitBreaker(threshold=1, cooldown=30, clock=clock)
    assert breaker.allow()
    assert breaker.failure() is True
    assert not breaker.allow()
    clock.now += 30
    assert breaker.allow()  # the trial
    assert not breaker.allow()  # everyone else waits for its outcome
    assert breaker.failure() is True  # the trial failed: open again, one warning
    assert not breaker.allow()
    clock.now += 30
    assert breaker.allow()  # the next trial
    assert breaker.success() is True
    assert breaker.allow()
    assert breaker.allow()


def test_a_trial_that_never_reports_holds_the_others_for_one_cool_down() -> None:
    clock = Clock()
    breaker = CircuitBreaker(threshold=1, cooldown=30, clock=clock)
    breaker.failure()
    clock.now += 30
    assert breaker.allow()  # the trial, whose outcome never comes
    clock.now += 29
    assert not breaker.allow()
    clock.now += 1
    assert breaker.allow()  # another trial
