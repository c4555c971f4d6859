import logging
import threading
from collections.abc import Callable

import pytest
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import CallableSink, HandlerStats, InMemorySink, OnlineResult, Usage
from langchain_ragmetrics.callbacks import SinkStats
from langchain_ragmetrics.callbacks._stats import Counters, FailureLog
from tests._support.concurrency import wait_until
from tests._support.openai_server import JudgeServer, reply_hold
from tests._support.rag import online_handler, question, rag_app, rag_router
from tests._support.stats_checks import assert_identities, stalled_log

JudgeFactory = Callable[..., ChatOpenAI]
VERDICT = {"relevant_sentence_indices": [0], "reason": "held"}


def test_counters_add_snapshot_and_reset() -> None:
    counters = Counters()
    counters.add(seen=3, sampled=2)
    counters.add(dropped=1)
    counters.add_usage(Usage(input_tokens=5, judge_calls=1))
    counters.set("pending_at_deadline", 4)
    snap = counters.snapshot(queued=7, open_traces=2)
    assert isinstance(snap, HandlerStats)
    assert (snap.seen, snap.sampled, snap.dropped, snap.queued, snap.open_traces) == (
        3,
        2,
        1,
        7,
        2,
    )
    assert snap.pending_at_deadline == 4
    assert snap.usage.judge_calls == 1
    with pytest.raises(KeyError):
        counters.add(unknown=1)
    with pytest.raises(KeyError):
        counters.set("queued", 1)  # a gauge, not a counter
    counters.reset()
    # One of the two sampled retrievals was dropped; the other is in flight: carried over.
    assert counters.snapshot(queued=0, open_traces=0) == HandlerStats(seen=1, sampled=1)


def test_counters_are_thread_safe() -> None:
    counters = Counters()
    threads = [
        threading.Thread(target=lambda: [counters.add(seen=1) for _ in range(1000)])
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counters.snapshot(queued=0, open_traces=0).seen == 8000


def test_stats_snapshot_is_frozen() -> None:
    snap = HandlerStats()
    with pytest.raises(ValueError, match="frozen"):
        snap.seen = 3  # type: ignore[misc]


def test_failure_log_warns_once_per_kind(caplog: pytest.LogCaptureFixture) -> None:
    log = FailureLog(logging.getLogger("test.failures"))
    with caplog.at_level(logging.DEBUG, logger="test.failures"):
        for _ in range(3):
            log.report("judge:429", "judge failed")
        log.report("sink:x", "sink failed", ValueError("boom"))
        log.reset()
        log.report("judge:429", "judge failed again")
    levels = [(r.levelno, r.getMessage().split(" (")[0]) for r in caplog.records]
    assert levels == [
        (logging.WARNING, "judge failed"),
        (logging.DEBUG, "judge failed"),
        (logging.DEBUG, "judge failed"),
        (logging.WARNING, "sink failed"),
        (logging.WARNING, "judge failed again"),
    ]
    assert caplog.records[3].exc_info is not None


def test_a_reset_with_retrievals_held_at_the_judge_adds_up_once_they_are_done(
    judge_server: JudgeServer, make_judge: JudgeFactory, release: threading.Event
) -> None:
    """Two retrievals sampled before the reset are scored after it: they are carried over
    (``seen`` and ``sampled`` start at 2). Before, they counted processed and not sampled,
    for ever."""
    app = rag_app(judge_server, make_judge)
    judge_server.script = rag_router(RelevantSentences=lambda req: reply_hold(release, VERDICT))
    with online_handler(app.llm) as handler:
        config: dict[str, object] = {"callbacks": [handler]}
        for i in range(2):
            app.chain.invoke(question(i), config=config)  # type: ignore[arg-type]
        wait_until(lambda: judge_server.count("RelevantSentences") == 2, "both requests held")
        handler.reset_stats()
        assert (handler.stats.seen, handler.stats.sampled, handler.stats.queued) == (2, 2, 2)
        app.chain.invoke(question(2), config=config)  # type: ignore[arg-type]
        release.set()
        assert handler.flush(30)
        stats = handler.stats
    assert (stats.traces, stats.seen, stats.sampled, stats.processed) == (1, 3, 3, 3)
    assert stats.scored == 3
    assert stats.sinks["InMemorySink"].delivered == 3
    assert_identities(stats)


def test_a_reset_with_results_pending_in_a_sink_adds_up_once_they_are_delivered(
    judge_server: JudgeServer, make_judge: JudgeFactory, release: threading.Event
) -> None:
    """Results produced before the reset and still in a held sink's outbox are left out of
    its figures (they were counted before). Before, their delivery after the reset counted,
    and the sink's figures exceeded the results for ever."""
    app = rag_app(judge_server, make_judge)
    entered = threading.Event()

    def held(item: OnlineResult) -> None:
        entered.set()
        release.wait()

    with online_handler(app.llm, sinks=[CallableSink(held), InMemorySink()]) as handler:
        config: dict[str, object] = {"callbacks": [handler]}
        for i in range(2):
            app.chain.invoke(question(i), config=config)  # type: ignore[arg-type]
        wait_until(lambda: handler.stats.processed == 2, "both retrievals scored")
        assert entered.wait(30)
        assert handler.stats.sinks["CallableSink"].pending == 2
        handler.reset_stats()
        assert handler.stats.sinks["CallableSink"] == SinkStats()
        app.chain.invoke(question(2), config=config)  # type: ignore[arg-type]
        release.set()
        assert handler.flush(30)
        stats = handler.stats
    assert (stats.sampled, stats.processed, stats.scored) == (1, 1, 1)
    assert stats.sinks["CallableSink"] == stats.sinks["InMemorySink"] == SinkStats(delivered=1)
    assert_identities(stats)


def test_a_log_handler_that_stalls_on_the_outbox_warning_holds_up_no_application_call(
    judge_server: JudgeServer, make_judge: JudgeFactory, release: threading.Event
) -> None:
    """The "not keeping up" warning was logged under the counters' lock, which the
    application's threads take in the callbacks: a log handler that stalled (a full pipe, a
    log shipper down) stalled the application's chain calls and ``stats``. Now nothing is
    logged under it."""
    app = rag_app(judge_server, make_judge)
    held = threading.Event()
    sink = CallableSink(lambda item: held.wait())
    with (
        online_handler(app.llm, sinks=[sink], sink_queue_size=1) as handler,
        stalled_log("is not keeping up", release) as stalled,
    ):
        config: dict[str, object] = {"callbacks": [handler]}
        done = threading.Event()

        def call_and_read() -> None:
            app.chain.invoke(question(7), config=config)  # type: ignore[arg-type]
            assert handler.stats.traces == 7
            done.set()

        try:
            for i in range(6):  # one at the sink, one in its outbox of 1, the rest dropped
                app.chain.invoke(question(i), config=config)  # type: ignore[arg-type]
            assert stalled.wait(30), "no result was dropped"
            threading.Thread(target=call_and_read, daemon=True).start()
            assert done.wait(30), "the application's call waited for the log handler"
        finally:
            release.set()
            held.set()
        assert handler.flush(30)
        stats = handler.stats
    assert stats.sinks["CallableSink"].dropped >= 1
    assert_identities(stats)
