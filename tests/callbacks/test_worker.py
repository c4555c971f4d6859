import asyncio
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from langchain_ragmetrics import _loops
from langchain_ragmetrics.callbacks._stats import Counters, FailureLog
from langchain_ragmetrics.callbacks._worker import BackgroundWorker

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("MARK", default="empty")


class Recorder:
    """A process function whose items can be held on events."""

    def __init__(self) -> None:
        self.done: list[str] = []
        self.contexts: list[str] = []
        self.threads: list[str] = []
        self.holds: dict[str, threading.Event] = {}
        self.started: dict[str, threading.Event] = {}
        self.handlers: list[object] = []

    def hold(self, item: str) -> threading.Event:
        self.started[item] = threading.Event()
        self.holds[item] = threading.Event()
        return self.holds[item]

    async def __call__(self, item: str) -> None:
        self.contexts.append(MARK.get())
        self.threads.append(threading.current_thread().name)
        self.handlers.append(asyncio.get_running_loop().get_exception_handler())
        if item in self.holds:
            self.started[item].set()
            await asyncio.to_thread(self.holds[item].wait, 10)
        if item.startswith("boom"):
            raise RuntimeError(item)
        self.done.append(item)


def make(recorder: Recorder, **kw: object) -> tuple[BackgroundWorker[str], Counters]:
    counters = Counters()
    options: dict[str, object] = {
        "max_queue_size": 10,
        "max_active": 2,
        "name": "test-worker",
        "counters": counters,
        "failures": FailureLog(),
    }
    options.update(kw)
    return BackgroundWorker(recorder, **options), counters  # type: ignore[arg-type]


def stats(counters: Counters) -> dict[str, int]:
    snap = counters.snapshot(queued=0, open_traces=0)
    return {
        k: getattr(snap, k)
        for k in ("dropped", "processed", "abandoned", "pending_at_deadline", "handler_errors")
    }


def test_starts_lazily_in_an_empty_context() -> None:
    recorder = Recorder()
    worker, counters = make(recorder)
    assert worker.thread is None
    token = MARK.set("caller")
    try:
        assert worker.submit("a")
    finally:
        MARK.reset(token)
    assert worker.flush(10)
    assert recorder.done == ["a"]
    assert recorder.contexts == ["empty"]  # the caller's context did not leak
    assert recorder.threads == ["test-worker"]
    assert recorder.handlers == [_loops._handle]  # a stale client's close stays quiet here
    assert stats(counters)["processed"] == 1
    assert worker.stop(10)
    assert worker.thread is not None
    assert not worker.thread.is_alive()


def test_thread_context_wraps_the_loop() -> None:
    @contextlib.contextmanager
    def marked() -> Iterator[None]:
        token = MARK.set("worker")
        try:
            yield
        finally:
            MARK.reset(token)

    recorder = Recorder()
    worker, _ = make(recorder, thread_context=marked)
    worker.submit("a")
    assert worker.flush(10)
    assert recorder.contexts == ["worker"]
    worker.stop(10)


def test_full_queue_drops_the_newest_and_counts_it() -> None:
    recorder = Recorder()
    release = recorder.hold("a")
    recorder.holds["b"] = release
    recorder.started["b"] = threading.Event()
    worker, counters = make(recorder, max_queue_size=2, max_active=1)
    accepted = [worker.submit(x) for x in ("a", "b", "c", "d", "e")]
    assert accepted == [True, True, False, False, False]
    assert worker.queued == 2
    assert stats(counters)["dropped"] == 3
    release.set()
    assert worker.flush(10)
    assert recorder.done == ["a", "b"]
    assert worker.queued == 0
    assert worker.submit("f")  # room again
    assert worker.flush(10)
    assert stats(counters)["processed"] == 3
    worker.stop(10)


def test_flush_deadline_reports_pending_work() -> None:
    recorder = Recorder()
    release = recorder.hold("slow")
    worker, counters = make(recorder)
    worker.submit("slow")
    assert recorder.started["slow"].wait(10)
    assert worker.flush(0.05) is False
    assert stats(counters)["pending_at_deadline"] == 1
    assert worker.queued == 1
    release.set()
    assert worker.flush(10) is True
    assert stats(counters)["pending_at_deadline"] == 0
    worker.stop(10)


def test_concurrency_is_bounded_by_max_active() -> None:
    recorder = Recorder()
    holds = [recorder.hold(x) for x in ("a", "b", "c")]
    worker, _ = make(recorder, max_active=2)
    for x in ("a", "b", "c"):
        worker.submit(x)
    assert recorder.started["a"].wait(10)
    assert recorder.started["b"].wait(10)
    # The worker's loop takes what it may start, then goes idle: once it has (two busy,
    # nothing more taken), c waits for a free slot. Past that point a broken limit would
    # already have started c, so this fails every time the limit is wrong.
    queue = worker._queue
    deadline = time.monotonic() + 30
    while not (queue._idle and queue.busy == 2) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (queue._idle, queue.busy, queue.size) == (True, 2, 3)
    assert not recorder.started["c"].is_set()  # third waits for a free slot
    holds[0].set()
    assert recorder.started["c"].wait(10)
    holds[1].set()
    holds[2].set()
    assert worker.flush(10)
    assert sorted(recorder.done) == ["a", "b", "c"]
    worker.stop(10)


def test_stop_cancels_unfinished_work_and_refuses_more() -> None:
    recorder = Recorder()
    recorder.hold("a")
    worker, counters = make(recorder, max_active=1)
    worker.submit("a")
    worker.submit("b")
    assert recorder.started["a"].wait(10)
    assert worker.stop(10)
    assert stats(counters)["abandoned"] == 2  # a was cancelled, b never started
    assert worker.queued == 0
    assert worker.submit("c") is False
    assert stats(counters)["dropped"] == 1
    assert recorder.done == []
    recorder.holds["a"].set()


def test_stop_when_idle_drains_then_exits() -> None:
    recorder = Recorder()
    release = recorder.hold("a")
    exited = threading.Event()
    worker, counters = make(recorder, on_idle_exit=exited.set)
    worker.submit("a")
    assert recorder.started["a"].wait(10)
    worker.stop_when_idle()
    assert worker.submit("late") is False
    assert worker.thread is not None
    assert worker.thread.is_alive()
    release.set()
    worker.thread.join(10)
    assert not worker.thread.is_alive()
    assert exited.is_set()
    assert recorder.done == ["a"]
    assert stats(counters)["processed"] == 1


def test_a_raising_process_is_counted_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder()
    worker, counters = make(recorder)
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        for item in ("boom1", "boom2", "ok"):
            worker.submit(item)
        assert worker.flush(10)
    assert stats(counters)["handler_errors"] == 2
    assert stats(counters)["processed"] == 3
    assert recorder.done == ["ok"]
    assert len([r for r in caplog.records if "online scoring raised" in r.getMessage()]) == 1
    worker.stop(10)


def test_flush_from_the_worker_thread_does_not_deadlock() -> None:
    outcome: list[bool] = []
    holder: list[BackgroundWorker[str]] = []

    async def process(item: str) -> None:
        outcome.append(holder[0].flush(1))

    counters = Counters()
    worker = BackgroundWorker(
        process,
        max_queue_size=5,
        max_active=1,
        name="self-flush",
        counters=counters,
        failures=FailureLog(),
    )
    holder.append(worker)
    worker.submit("x")
    assert worker.flush(10)
    assert outcome == [False]
    worker.stop(10)


def test_rejects_bad_bounds() -> None:
    with pytest.raises(ValueError, match="max_queue_size"):
        make(Recorder(), max_queue_size=0)
    with pytest.raises(ValueError, match="max_concurrency"):
        make(Recorder(), max_active=0)


def test_items_taken_just_before_a_stop_are_counted_abandoned() -> None:
    """A stop landing between taking items and their tasks' first step: those tasks are
    cancelled before they run, so their own accounting never runs. Before, the items stayed
    counted as queued for good and every later flush returned False."""
    recorder = Recorder()
    worker, counters = make(recorder)
    take = worker._queue.take_ready

    def take_then_stop(count: int) -> Any:
        batch = take(count)
        if batch:
            worker._stop = "now"  # the stop lands right after the take
        return batch

    worker._queue.take_ready = take_then_stop  # type: ignore[method-assign]
    assert worker.submit("a")
    thread = worker.thread
    assert thread is not None
    thread.join(10)
    assert not thread.is_alive()
    assert recorder.done == []  # none ran
    assert worker.queued == 0
    assert stats(counters)["abandoned"] == 1
    assert worker.flush(0.1)
