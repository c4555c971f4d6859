"""Who gets a free slot: jobs not started yet before jobs back from a backoff, within bounds.

Each test holds the gate's slots itself and waits on the gate's own counters (threads queued
as resumed or new), so the order it asserts never depends on timing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from langchain_ragmetrics._gate import HELD_PER_SLOT, RESUME_AFTER_S, Gate

WAIT_S = 30.0  # bound of every wait below; reached only when the gate is broken


def until(condition: Callable[[], bool]) -> None:
    """Wait until ``condition()`` holds (a gate counter moved), failing after ``WAIT_S``."""
    limit = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < limit, "the gate never got there"
        time.sleep(0.001)


class Waiter:
    """A thread taking a slot as a new or a resumed job; records when it got one."""

    def __init__(self, gate: Gate, name: str, order: list[str], *, resumed: bool) -> None:
        self.got = threading.Event()
        acquire = gate.acquire_resumed if resumed else gate.acquire_fresh

        def take() -> None:
            if acquire(WAIT_S):
                order.append(name)
                self.got.set()

        self.thread = threading.Thread(target=take, daemon=True)
        self.thread.start()


def fresh_waiting(gate: Gate) -> int:
    return gate._fresh_waiting  # the test waits on the gate's own counter


def test_a_new_job_goes_before_a_job_back_from_its_backoff() -> None:
    gate = Gate(1, resume_after=WAIT_S * 10)
    assert gate.acquire_fresh(0)  # the test holds the only slot
    order: list[str] = []
    resumed = Waiter(gate, "resumed", order, resumed=True)
    until(lambda: gate.resuming == 1)
    fresh = Waiter(gate, "new", order, resumed=False)
    until(lambda: fresh_waiting(gate) == 1)
    gate.release()
    assert fresh.got.wait(WAIT_S)
    assert not resumed.got.is_set()  # it yields while the new job holds the slot
    gate.release()  # the new job is done; nothing else is left to start
    assert resumed.got.wait(WAIT_S)
    assert order == ["new", "resumed"]
    gate.release()
    assert gate.free == 1


def test_a_resumed_job_that_waited_resume_after_goes_first() -> None:
    gate = Gate(1, resume_after=0)  # every resumed job is overdue at once: the old order
    assert gate.acquire_fresh(0)
    order: list[str] = []
    resumed = Waiter(gate, "resumed", order, resumed=True)
    until(lambda: gate.resuming == 1)
    fresh = Waiter(gate, "new", order, resumed=False)
    until(lambda: fresh_waiting(gate) == 1)
    gate.release()
    assert resumed.got.wait(WAIT_S)
    gate.release()
    assert fresh.got.wait(WAIT_S)
    assert order == ["resumed", "new"]


def test_beyond_max_held_the_oldest_resumed_job_goes_first() -> None:
    gate = Gate(1, resume_after=WAIT_S * 10, max_held=1)
    assert gate.acquire_fresh(0)
    order: list[str] = []
    first = Waiter(gate, "resumed 1", order, resumed=True)
    until(lambda: gate.resuming == 1)
    second = Waiter(gate, "resumed 2", order, resumed=True)
    until(lambda: gate.resuming == 2)
    fresh = Waiter(gate, "new", order, resumed=False)
    until(lambda: fresh_waiting(gate) == 1)
    gate.release()  # two held back, one allowed: the oldest goes before the new job
    assert first.got.wait(WAIT_S)
    gate.release()  # one held back again: the new job goes first
    assert fresh.got.wait(WAIT_S)
    gate.release()
    assert second.got.wait(WAIT_S)
    assert order == ["resumed 1", "new", "resumed 2"]


def test_a_resumed_job_yields_to_a_batch_with_jobs_left_until_it_runs_out() -> None:
    """No worker waits yet, but the batch has jobs left: the free slot stays theirs."""
    gate = Gate(1, resume_after=WAIT_S * 10)
    left = threading.Event()
    left.set()
    order: list[str] = []
    with gate.fresh_work(left.is_set):
        resumed = Waiter(gate, "resumed", order, resumed=True)
        until(lambda: gate.resuming == 1)
        assert not resumed.got.is_set()
        assert gate.free == 1  # kept for the batch's next job
        left.clear()  # the batch's last job started elsewhere
        gate.wake()
        assert resumed.got.wait(WAIT_S)
    assert gate.free == 0


def test_a_resumed_job_takes_a_free_slot_at_once_when_nothing_is_left_to_start() -> None:
    gate = Gate(2, resume_after=WAIT_S * 10)
    assert gate.acquire_resumed(0)
    assert gate.free == 1


def test_timeouts_and_bounds() -> None:
    gate = Gate(1)
    assert (gate.resume_after, gate.max_held) == (RESUME_AFTER_S, HELD_PER_SLOT)
    assert gate.acquire_fresh(None)
    assert not gate.acquire_fresh(0)
    assert not gate.acquire_resumed(0)
    assert (gate.resuming, fresh_waiting(gate)) == (0, 0)  # who gave up left no trace
    gate.release()
    with pytest.raises(ValueError, match="released more"):
        gate.release()
    with pytest.raises(ValueError, match="must not be negative"):
        Gate(1, resume_after=-1)
    with pytest.raises(ValueError, match="must not be negative"):
        Gate(1, max_held=-1)
