"""The package's one bounded queue: bounds, order, flush and close by deadline, wake-ups."""

from __future__ import annotations

import threading

import pytest

from langchain_ragmetrics._queue import BoundedQueue, deadline_after, remaining, remaining_or


def test_put_refuses_beyond_the_bound_and_controls_ignore_it() -> None:
    queue: BoundedQueue[str] = BoundedQueue(max_size=2)
    assert queue.put_many(["a", "b", "c"]) == 2
    assert not queue.put("d")
    assert queue.put("flush", counted=False)  # a control entry rides over the bound
    assert (queue.waiting, queue.size) == (2, 2)
    taken = [queue.take(0), queue.take(0), queue.take(0)]
    assert [e.item for e in taken if e is not None] == ["a", "b", "flush"]
    assert (queue.waiting, queue.busy) == (0, 2)  # only counted entries are busy
    assert queue.put("e")  # a taken entry no longer counts (count_active=False)


def test_count_active_keeps_taken_entries_in_the_bound() -> None:
    queue: BoundedQueue[int] = BoundedQueue(max_size=1, count_active=True)
    assert queue.put(1)
    entry = queue.take(0)
    assert entry is not None
    assert not queue.put(2)  # still being worked on
    queue.done(entry)
    assert queue.put(2)


def test_flush_waits_for_earlier_entries_only_and_reports_what_is_left() -> None:
    queue: BoundedQueue[int] = BoundedQueue()
    queue.put_many([1, 2])
    first = queue.take(0)
    assert first is not None
    assert queue.flush(0) == (False, 2)  # one busy, one waiting
    worker_done = threading.Event()

    def consume() -> None:
        assert first is not None
        queue.done(first)
        second = queue.take()
        assert second is not None
        queue.done(second)
        worker_done.set()

    thread = threading.Thread(target=consume)
    thread.start()
    assert queue.flush(10) == (True, 0)
    thread.join(10)
    assert worker_done.is_set()


def test_close_lets_consumers_drain_then_take_returns_none() -> None:
    queue: BoundedQueue[str] = BoundedQueue()
    queue.put("a")
    queue.close()
    assert not queue.put("b")
    entry = queue.take()
    assert entry is not None
    assert entry.item == "a"
    assert not queue.drained
    queue.done(entry)
    assert queue.drained
    assert queue.take() is None  # closed and empty: no wait
    assert queue.wait_drained(0)


def test_abandon_drops_waiting_entries_and_returns_them() -> None:
    queue: BoundedQueue[str] = BoundedQueue()
    queue.put_many(["a", "b"])
    queue.put("ctl", counted=False)
    busy = queue.take(0)
    assert busy is not None
    dropped = queue.abandon()
    assert [e.item for e in dropped] == ["b", "ctl"]
    assert (queue.waiting, queue.busy, queue.closed) == (0, 1, True)


def test_an_idle_event_loop_consumer_is_woken_once_per_idle_spell() -> None:
    wakes: list[int] = []
    queue: BoundedQueue[int] = BoundedQueue(on_wake=lambda: wakes.append(1))
    queue.put(1)
    assert wakes == []  # the consumer never said it was idle
    assert [e.item for e in queue.take_ready(5)] == [1]
    assert queue.take_ready(5) == []  # now idle
    queue.put(2)
    queue.put(3)
    assert len(wakes) == 1  # woken by the first put only
    assert [e.item for e in queue.take_ready(1)] == [2]


def test_bad_bound_and_deadline_helpers() -> None:
    with pytest.raises(ValueError, match="max_size"):
        BoundedQueue(max_size=0)
    assert deadline_after(None) is None
    assert remaining(None) is None
    deadline = deadline_after(0)
    assert deadline is not None
    assert remaining(deadline - 5) == 0.0
    assert remaining_or(None, 2.0) is None  # no deadline: no limit, grace or not
    assert remaining_or(deadline - 5, 2.0) == 2.0  # past the deadline: the grace
    far = remaining_or(deadline + 60, 2.0)
    assert far is not None
    assert 2.0 < far <= 60.0
