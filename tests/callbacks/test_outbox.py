"""Sink isolation: a hung, slow or failing sink holds up nobody but itself, in numbers."""

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable, Hashable

import pytest
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from langchain_ragmetrics import (
    CallableSink,
    ContextRelevance,
    HandlerStats,
    InMemorySink,
    OnlineResult,
    RagMetricsCallbackHandler,
)
from langchain_ragmetrics.callbacks import SinkStats
from langchain_ragmetrics.callbacks._outbox import SinkOutbox, close_all, flush_all
from langchain_ragmetrics.callbacks._stats import FailureLog
from langchain_ragmetrics.callbacks.sinks import BaseSink, SinkSkipError, SinkUnavailableError
from tests._support.concurrency import wait_until
from tests._support.openai_server import JudgeServer
from tests._support.rag import online_handler, question, rag_app
from tests._support.sink_checks import linked_item, run_item

JudgeFactory = Callable[..., ChatOpenAI]
TRACES = 6


class Counting:
    """A sink function that sets an event once it has seen ``expected`` results."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.items: list[OnlineResult] = []
        self.lock = threading.Lock()
        self.all_in = threading.Event()

    def __call__(self, item: OnlineResult) -> None:
        with self.lock:
            self.items.append(item)
            if len(self.items) >= self.expected:
                self.all_in.set()


def balanced(stats: HandlerStats) -> bool:
    produced = stats.scored + stats.failed + stats.skipped
    return all(
        s.delivered + s.errors + s.dropped + s.pending == produced for s in stats.sinks.values()
    )


def test_a_hung_sink_holds_up_nobody_and_its_backlog_is_counted(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    release: threading.Event,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = rag_app(judge_server, make_judge)
    entered = threading.Event()

    def hung(item: OnlineResult) -> None:
        entered.set()
        release.wait()  # accepts the first result and never returns (until released)

    healthy = Counting(TRACES)
    sinks = [CallableSink(hung), CallableSink(healthy), InMemorySink()]
    handler = online_handler(app.llm, sinks=sinks, sink_queue_size=3)
    app.chain.invoke(question(0), config={"callbacks": [handler]})
    assert entered.wait(30)  # the hung sink holds the first result
    memory = sinks[2]
    assert isinstance(memory, InMemorySink)
    for i in range(1, TRACES):
        app.chain.invoke(question(i), config={"callbacks": [handler]})
        # Each result reaches the healthy sinks before the next is scored: their outboxes
        # are bounded too (3 waiting), so a burst they had no turn to take could overflow.
        wait_until(
            lambda n=i + 1: len(healthy.items) == n and len(memory.results) == n,
            f"result {i + 1} at the healthy sinks",
        )
    # Scoring and the other sinks went on while the first sink is stuck.
    assert healthy.all_in.wait(30)
    assert handler.flush(0.2) is False  # the hung sink still holds results
    stats = handler.stats
    assert stats.scored == TRACES
    assert stats.sinks["CallableSink#2"].delivered == TRACES
    assert stats.sinks["InMemorySink"].delivered == TRACES
    hung_figures = stats.sinks["CallableSink"]
    # One result in the sink's hands, 3 waiting in its outbox, the overflow dropped.
    assert (hung_figures.delivered, hung_figures.pending, hung_figures.dropped) == (0, 4, 2)
    assert balanced(stats)

    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        assert handler.close(0.5) is False  # bounded although a sink hangs
    stats = handler.stats
    assert stats.sinks["CallableSink"].dropped == 5  # the 3 waiting were abandoned
    assert stats.sinks["CallableSink"].pending == 1  # still stuck in emit
    assert balanced(stats)
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert "results not delivered" in warnings
    # What was left, by sink, as the figures count it: before, "CallableSink: 4" said all
    # four were counted dropped, while the one in emit stays pending until emit returns.
    assert "CallableSink: 3 dropped, 1 still being delivered" in warnings

    release.set()  # the hung call returns: it was delivered after all
    thread = next(t for t in threading.enumerate() if t.name == f"{handler.name}-sink-0")
    thread.join(10)
    assert not thread.is_alive()
    stats = handler.stats
    assert (stats.sinks["CallableSink"].delivered, stats.sinks["CallableSink"].pending) == (1, 0)
    assert balanced(stats)


def test_a_failing_sink_is_counted_and_the_others_get_everything(
    judge_server: JudgeServer, make_judge: JudgeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app = rag_app(judge_server, make_judge)

    def broken(item: OnlineResult) -> None:
        raise ConnectionError("metrics backend down")

    memory = InMemorySink()
    handler = online_handler(app.llm, sinks=[CallableSink(broken), memory])
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"), handler:
        for i in range(TRACES):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert handler.flush(30)
        stats = handler.stats
    assert len(memory.results) == TRACES
    assert stats.sinks["CallableSink"].errors == TRACES
    assert stats.sink_errors == TRACES
    assert stats.sinks["InMemorySink"].delivered == TRACES
    assert balanced(stats)
    logged = [r for r in caplog.records if "failed to emit" in r.getMessage()]
    assert len(logged) == 1  # once per kind


def test_two_sinks_of_one_class_get_their_own_keys(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    first, second = InMemorySink(), InMemorySink()
    with online_handler(app.llm, sinks=[first, second]) as handler:
        app.chain.invoke(question(1), config={"callbacks": [handler]})
        assert handler.flush(30)
        assert set(handler.stats.sinks) == {"InMemorySink", "InMemorySink#2"}
    assert len(first.results) == len(second.results) == 1


def test_bad_sink_queue_size() -> None:
    with pytest.raises(ValueError, match="sink_queue_size"):
        online_handler(None, sink_queue_size=0)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- concurrent sinks

WAIT_S = 10.0
"""Generous bound for 'did not hang'."""


class _Concurrent(BaseSink):
    """A sink that records what it was given, how many emits overlapped, and per-key order."""

    def __init__(self, max_concurrency: int, *, keyed: bool = False) -> None:
        self.max_concurrency = max_concurrency
        self.keyed = keyed
        self.lock = threading.Lock()
        self.active = 0
        self.most = 0
        self.delivered: list[OnlineResult] = []
        self.gates: dict[uuid.UUID, threading.Event] = {}  # emit waits for its gate, if any
        self.started: dict[uuid.UUID, threading.Event] = {}
        self.overlaps: list[str] = []
        self.active_keys: set[Hashable] = set()
        self.barrier: threading.Barrier | None = None

    def order_key(self, item: OnlineResult) -> Hashable | None:
        return item.result.metric if self.keyed else None

    def emit(self, item: OnlineResult) -> None:
        key = item.result.metric if self.keyed else None
        with self.lock:
            self.active += 1
            self.most = max(self.most, self.active)
            if key is not None and key in self.active_keys:
                self.overlaps.append(str(key))
            self.active_keys.add(key)
        self.started.setdefault(item.run_id, threading.Event()).set()
        try:
            if self.barrier is not None:
                self.barrier.wait()  # every lane must be busy at once to pass
            gate = self.gates.get(item.run_id)
            if gate is not None:
                assert gate.wait(WAIT_S)
        finally:
            with self.lock:
                self.active -= 1
                self.active_keys.discard(key)
                self.delivered.append(item)


def _results(metrics: str) -> list[OnlineResult]:
    """One result per letter, the letter as its metric (its order key in a keyed sink)."""
    items = [linked_item("none", "t", "s") for _ in metrics]
    for item, metric in zip(items, metrics, strict=True):
        item.result = item.result.model_copy(update={"metric": metric})
    return items


def _outbox(sink: BaseSink) -> SinkOutbox:
    return SinkOutbox(
        sink, key=type(sink).__name__, max_size=100, thread_name="test", failures=FailureLog()
    )


def _flushed(box: SinkOutbox) -> None:
    assert box.request(lambda: None).result(WAIT_S) is None


def test_a_concurrent_sink_is_handed_that_many_results_at_once_never_more() -> None:
    sink = _Concurrent(4)
    sink.barrier = threading.Barrier(4, timeout=WAIT_S)  # breaks unless four run together
    box = _outbox(sink)
    box.put(_results("abcdefgh"))
    _flushed(box)
    stats = box.stats()
    assert (stats.delivered, stats.errors, stats.pending) == (8, 0, 0)
    assert sink.most == 4
    box.stop()


def test_results_of_one_key_wait_for_each_other_and_keep_their_order() -> None:
    sink = _Concurrent(4, keyed=True)
    first_a, b, second_a = _results("aba")
    sink.gates[first_a.run_id] = held = threading.Event()
    box = _outbox(sink)
    box.put([first_a, b, second_a])
    assert sink.started.setdefault(first_a.run_id, threading.Event()).wait(WAIT_S)
    # The second "a" either starts beside the first (wrong) or is held back (right).
    second = sink.started.setdefault(second_a.run_id, threading.Event())
    while not second.is_set() and box.held_back == 0:
        second.wait(0.01)
    assert not second.is_set()
    assert box.held_back == 1
    held.set()
    _flushed(box)
    assert sink.overlaps == []
    order = [item.run_id for item in sink.delivered if item.result.metric == "a"]
    assert order == [first_a.run_id, second_a.run_id]
    assert box.stats().delivered == 3
    box.stop()


def _held_outbox(
    max_concurrency: int, metrics: str
) -> tuple[_Concurrent, SinkOutbox, list[OnlineResult]]:
    """An outbox given one result per letter, each held in ``emit`` until its gate is set."""
    sink = _Concurrent(max_concurrency)
    items = _results(metrics)
    sink.gates = {item.run_id: threading.Event() for item in items}
    box = _outbox(sink)
    box.put(items)
    return sink, box, items


def test_a_flush_waits_for_every_result_in_flight() -> None:
    sink, box, items = _held_outbox(4, "abc")
    gates = sink.gates
    for item in items:
        assert sink.started.setdefault(item.run_id, threading.Event()).wait(WAIT_S)
    flushed = box.request(lambda: len(sink.delivered))
    for gate in gates.values():
        assert not flushed.done()  # a result is still being delivered
        gate.set()
    assert flushed.result(WAIT_S) == 3  # ran after all three were delivered
    box.stop()


def test_a_concurrent_sink_counts_each_outcome() -> None:
    class Mixed(_Concurrent):
        def emit(self, item: OnlineResult) -> None:
            if item.result.metric == "x":
                raise RuntimeError("backend said no")
            if item.result.metric == "u":
                raise SinkUnavailableError("circuit open")
            if item.result.metric == "s":
                raise SinkSkipError("no place for it")
            super().emit(item)

    box = _outbox(Mixed(3))
    box.put(_results("oxusoo"))
    _flushed(box)
    stats = box.stats()
    assert (stats.delivered, stats.errors, stats.dropped, stats.skipped) == (3, 1, 1, 1)
    box.stop()


@pytest.mark.parametrize(
    ("process_ends", "fate"),
    [
        (False, "stay in stats.sinks[...].pending until the sink's call returns"),
        (True, "are lost when the scoring process exits (then counted in dropped)"),
    ],
    ids=["here", "in the scoring process"],
)
def test_a_close_that_gives_up_says_what_it_dropped_and_what_is_still_being_delivered(
    caplog: pytest.LogCaptureFixture, process_ends: bool, fate: str
) -> None:
    """Two results in ``emit`` on helper threads, one taken and waiting for a free helper,
    two queued: the two are dropped, the three stay pending until their calls return.
    Before, the warning counted all five in ``dropped``, which held two."""
    sink, box, items = _held_outbox(2, "abcde")
    for item in items[:2]:
        assert sink.started.setdefault(item.run_id, threading.Event()).wait(WAIT_S)
    wait_until(lambda: box._queue.busy == 3, "the third result taken, waiting for a helper")
    try:
        with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
            assert close_all([box], 0, FailureLog(), process_ends=process_ends) is False
        assert box.stats() == SinkStats(dropped=2, pending=3)
        (warning,) = [r.getMessage() for r in caplog.records]
        assert "_Concurrent: 2 dropped, 3 still being delivered" in warning
        assert fate in warning
    finally:
        for gate in sink.gates.values():
            gate.set()
    assert box.thread is not None
    box.thread.join(WAIT_S)
    assert box.stats() == SinkStats(delivered=3, dropped=2)


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "4"])
def test_a_bad_max_concurrency_names_the_sink(value: object) -> None:
    sink = InMemorySink()
    sink.max_concurrency = value  # type: ignore[assignment]
    with pytest.raises(ValueError, match=r"InMemorySink: `max_concurrency` must be a whole number"):
        _outbox(sink)


def test_a_sink_whose_order_key_fails_is_delivered_one_at_a_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(_Concurrent):
        def order_key(self, item: OnlineResult) -> Hashable | None:
            if item.result.metric == "a":
                raise KeyError("no key")
            return [item.result.metric]  # type: ignore[return-value] - unhashable

    sink = Broken(4)
    box = _outbox(sink)
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        box.put(_results("abcd"))
        _flushed(box)
    assert sink.most == 1
    assert box.stats().delivered == 4
    messages = [r.getMessage() for r in caplog.records]
    assert any("failed to give an order key: KeyError" in m for m in messages)
    assert any("failed to give an order key: TypeError" in m for m in messages)
    box.stop()


def test_without_new_threads_results_are_delivered_on_the_outbox_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At interpreter exit no thread can start: results still go, one at a time."""
    from langchain_ragmetrics._threads import DaemonThreadPool

    def refuse(self: DaemonThreadPool) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(DaemonThreadPool, "start", refuse)
    sink = _Concurrent(4)
    box = _outbox(sink)
    box.put(_results("abcde"))
    _flushed(box)
    assert (sink.most, box.stats().delivered) == (1, 5)
    box.stop()


class _Cancelling(BaseSink):
    """``emit`` raises ``asyncio.CancelledError`` (a BaseException) for the first result."""

    def __init__(self) -> None:
        self.emitted: list[str] = []

    def emit(self, item: OnlineResult) -> None:
        if not self.emitted:
            self.emitted.append("cancelled")
            raise asyncio.CancelledError
        self.emitted.append(item.result.metric)


def test_a_sink_raising_a_base_exception_is_counted_and_its_thread_lives_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before, the delivery thread died on it: every later flush waited its whole timeout
    and the results piled up to the bound and were dropped."""
    sink = _Cancelling()
    box = _outbox(sink)
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        box.put(_results("abc"))
        _flushed(box)
    stats = box.stats()
    assert (stats.delivered, stats.errors, stats.pending) == (2, 1, 0)
    assert sink.emitted == ["cancelled", "b", "c"]
    assert any("CancelledError" in r.getMessage() for r in caplog.records)
    box.stop()


class _Closable(InMemorySink):
    """Records that its ``close`` ran, and on which thread."""

    def __init__(self) -> None:
        super().__init__()
        self.closed_on: list[str] = []

    def close(self, timeout: float | None = None) -> None:
        self.closed_on.append(threading.current_thread().name)


def test_a_sink_given_no_result_is_still_closed_on_its_own_thread() -> None:
    """Before, close_all skipped a sink whose outbox never started: a client or file it
    opened when it was built was never released."""
    sink = _Closable()
    box = _outbox(sink)
    assert box.thread is None
    assert close_all([box], WAIT_S, FailureLog())
    assert sink.closed_on == ["test"]  # the outbox's thread, not the caller's


def test_a_handler_that_scored_nothing_closes_its_sinks() -> None:
    sink = _Closable()
    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance(llm=ChatOpenAI(model="unused", api_key=SecretStr("unused")))],
        sinks=[sink],
        isolation="thread",
    )
    assert handler.close(WAIT_S)
    assert len(sink.closed_on) == 1


@pytest.mark.parametrize("end", ["delivered", "abandoned"])
def test_a_reset_leaves_the_results_queued_before_it_out_of_the_sinks_figures(
    end: str, release: threading.Event
) -> None:
    """Three results wait behind a held sink at the reset (one in ``emit``); two come after.
    The sink's figures count the two only, whether all are delivered or ``close`` gives up
    on them. Before, the three counted too (pending, then delivered or dropped)."""
    entered = threading.Event()

    def held(item: OnlineResult) -> None:
        entered.set()
        release.wait()

    failures = FailureLog()
    box = SinkOutbox(
        CallableSink(held), key="CallableSink", max_size=10, thread_name="reset", failures=failures
    )
    box.put([run_item(uuid.uuid4()) for _ in range(3)])
    assert entered.wait(30)
    box.reset()
    assert box.stats() == SinkStats()
    box.put([run_item(uuid.uuid4()) for _ in range(2)])
    assert box.stats() == SinkStats(pending=2)
    if end == "delivered":
        release.set()
        assert flush_all([box], 30, failures) == []
        assert close_all([box], 30, failures)
        expected = SinkStats(delivered=2)
    else:
        assert close_all([box], 0, failures) is False  # held: the queue is given up
        release.set()
        expected = SinkStats(dropped=2)
    assert box.thread is not None
    box.thread.join(30)
    assert box.stats() == expected


class _HttpError(Exception):
    """An SDK's one error class for every answer: the status on ``response``, maybe a code."""

    def __init__(self, status: int, error_code: str | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.response = type("Response", (), {"status_code": status})()
        self.error_code = error_code


class _Failing(BaseSink):
    """``emit`` raises the next of ``errors`` (one per result)."""

    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors

    def emit(self, item: OnlineResult) -> None:
        raise self.errors.pop(0)


def test_a_new_failure_of_a_sink_is_warned_about_though_of_the_same_class(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A 500 then a 401 (a key revoked during an outage): before, the log-once kind was the
    class alone, and the 401 was logged at DEBUG only."""
    sink = _Failing(
        [
            _HttpError(500),
            _HttpError(500),
            _HttpError(401),
            _HttpError(401, "UNAUTHENTICATED"),
            _HttpError(401, "UNAUTHENTICATED"),
        ]
    )
    box = _outbox(sink)
    with caplog.at_level(logging.DEBUG, logger="langchain_ragmetrics"):
        box.put(_results("abcde"))
        _flushed(box)
    box.stop()
    assert box.stats().errors == 5
    levels = [r.levelno for r in caplog.records if "failed to emit" in r.getMessage()]
    assert levels == [
        logging.WARNING,  # the 500
        logging.DEBUG,  # the same 500 again
        logging.WARNING,  # the 401
        logging.WARNING,  # a 401 with an error code
        logging.DEBUG,
    ]
