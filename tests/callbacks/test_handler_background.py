"""The background side: judge faults, slow judges, overflow, flush and close, failing sinks."""

import asyncio
import logging
import math
import threading
from collections.abc import Callable
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import (
    CallableSink,
    ContextRelevance,
    HandlerStats,
    IDBasedContextRecall,
    InMemorySink,
    OnlineResult,
    RagMetricsCallbackHandler,
)
from langchain_ragmetrics.callbacks import SinkStats
from langchain_ragmetrics.callbacks._background import ThreadRuntime
from langchain_ragmetrics.callbacks._isolated import ProcessRuntime
from langchain_ragmetrics.callbacks._settings import HandlerSettings
from langchain_ragmetrics.callbacks._stats import Counters, FailureLog
from langchain_ragmetrics.metrics import RetryPolicy
from tests._support.captures import make_capture
from tests._support.concurrency import wait_until
from tests._support.openai_server import (
    JudgeServer,
    reply_error,
    reply_garbage,
    reply_hold,
)
from tests._support.rag import RagApp, online_handler, question, rag_app, rag_router

JudgeFactory = Callable[..., ChatOpenAI]
ONE_RETRY = RetryPolicy(max_retries=1, parse_retries=1, initial_backoff=0.01, max_backoff=0.02)
VERDICT = {"relevant_sentence_indices": [0], "reason": "held"}
START = 120.0
"""Generous bound for a scoring process's start on a loaded machine, plus its work."""
WAIT_S = 30.0
"""Generous bound for 'did not hang'."""


def results(handler: RagMetricsCallbackHandler) -> list[OnlineResult]:
    sink = handler.sinks[0]
    assert isinstance(sink, InMemorySink)
    return sink.results


def held_app(server: JudgeServer, make_judge: JudgeFactory, release: threading.Event) -> RagApp:
    app = rag_app(server, make_judge)
    server.script = rag_router(RelevantSentences=lambda req: reply_hold(release, VERDICT))
    return app


def threads_of(handler: RagMetricsCallbackHandler) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"{handler.name}-")]


FAULTS: dict[str, Any] = {
    "429": lambda req: reply_error(429),
    "500": lambda req: reply_error(500),
    "garbage": lambda req: reply_garbage(),
    "timeout": "hold",
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_judge_faults_never_reach_the_users_call(
    fault: str,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    release: threading.Event,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = rag_app(judge_server, make_judge)
    script = FAULTS[fault]
    if script == "hold":
        script = lambda req: reply_hold(release, VERDICT)  # noqa: E731
    judge_server.script = rag_router(RelevantSentences=script)
    # The judge's own client timeout: short where the fault is a hang; elsewhere the default,
    # so a slow loopback answer on a loaded machine adds no second kind of failure.
    judge = make_judge(timeout=0.2) if fault == "timeout" else make_judge()
    metrics = [ContextRelevance(llm=judge, retry=ONE_RETRY)]
    with online_handler(app.llm, metrics=metrics) as handler:
        with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
            answers = [
                app.chain.invoke(question(i), config={"callbacks": [handler]}) for i in range(3)
            ]
            assert handler.flush(30)
        stats = handler.stats
        items = results(handler)
    assert answers == [f"Answer about item00{i}." for i in range(3)]
    assert (stats.failed, stats.scored, stats.processed) == (3, 0, 3)
    assert all(math.isnan(r.score or 0.0) and r.result.error for r in items)
    assert judge_server.count("RelevantSentences") >= 6  # each result was retried once
    failures = [r for r in caplog.records if "context_relevance failed" in r.getMessage()]
    assert len(failures) == 1  # logged once per kind


def test_a_slow_judge_does_not_hold_the_users_call(
    judge_server: JudgeServer, make_judge: JudgeFactory, release: threading.Event
) -> None:
    app = held_app(judge_server, make_judge, release)
    with online_handler(app.llm) as handler:
        answer = app.chain.invoke(question(1), config={"callbacks": [handler]})
        # The call returned while the judge is still held: the work is queued, not done.
        assert answer == "Answer about item001."
        assert handler.stats.queued == 1
        assert handler.stats.processed == 0
        wait_until(lambda: judge_server.count("RelevantSentences") == 1, "the judge request")
        assert handler.stats.processed == 0
        release.set()
        assert handler.flush(10)
        assert handler.stats.scored == 1


async def test_a_slow_judge_does_not_hold_async_calls(
    judge_server: JudgeServer, make_judge: JudgeFactory, release: threading.Event
) -> None:
    app = held_app(judge_server, make_judge, release)
    with online_handler(app.llm, max_concurrency=2) as handler:
        config: Any = {"callbacks": [handler]}
        first = await app.chain.ainvoke(question(1), config)
        more = await asyncio.gather(*(app.chain.ainvoke(question(i), config) for i in (2, 3)))
        assert [first, *more] == [f"Answer about item00{i}." for i in (1, 2, 3)]
        assert handler.stats.processed == 0
        release.set()
        assert await handler.aflush(10)
        assert handler.stats.scored == 3


def test_full_queue_drops_the_newest_and_counts_it(
    judge_server: JudgeServer, make_judge: JudgeFactory, release: threading.Event
) -> None:
    app = held_app(judge_server, make_judge, release)
    with online_handler(app.llm, max_queue_size=3, max_concurrency=1) as handler:
        for i in range(10):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        stats = handler.stats
        assert (stats.seen, stats.sampled, stats.queued, stats.dropped) == (10, 10, 3, 7)
        release.set()
        assert handler.flush(10)
        stats = handler.stats
        items = results(handler)
    assert (stats.processed, stats.scored, stats.dropped, stats.queued) == (3, 3, 7, 0)
    assert sorted(i.question or "" for i in items) == [question(i) for i in range(3)]
    assert judge_server.count("RelevantSentences") == 3


def test_flush_deadline_reports_pending_work(
    judge_server: JudgeServer, make_judge: JudgeFactory, release: threading.Event
) -> None:
    app = held_app(judge_server, make_judge, release)
    with online_handler(app.llm) as handler:
        app.chain.invoke(question(1), config={"callbacks": [handler]})
        assert handler.flush(0.1) is False
        assert handler.stats.pending_at_deadline == 1
        assert handler.stats.queued == 1
        release.set()
        assert handler.flush(10) is True
        assert handler.stats.pending_at_deadline == 0
        assert handler.stats.scored == 1


def test_close_reports_and_abandons_work_left_at_the_deadline(
    judge_server: JudgeServer, make_judge: JudgeFactory, release: threading.Event
) -> None:
    app = held_app(judge_server, make_judge, release)
    handler = online_handler(app.llm, max_concurrency=1)
    for i in range(2):
        app.chain.invoke(question(i), config={"callbacks": [handler]})
    wait_until(lambda: judge_server.count("RelevantSentences") == 1, "the first judge request")
    assert handler.close(timeout=0.1) is False
    stats = handler.stats
    assert (stats.pending_at_deadline, stats.abandoned, stats.queued, stats.processed) == (
        2,
        2,
        0,
        0,
    )
    # Closed: new work is dropped (counted), the call itself is unaffected.
    assert app.chain.invoke(question(5), config={"callbacks": [handler]})
    assert handler.stats.dropped == 1
    release.set()  # the judge thread blocked in its HTTP call can now finish and exit
    for thread in threads_of(handler):  # each exits once its call returns: join, no polling
        thread.join(10)
        assert not thread.is_alive(), f"{thread.name} did not exit"
    assert results(handler) == []
    assert handler.close(0) is False  # again: the first close's outcome, not a bare True


def pending_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "were still pending" in r.getMessage()]


@pytest.mark.parametrize(
    ("isolation", "runtime"), [("thread", ThreadRuntime), ("auto", ProcessRuntime)]
)
def test_a_close_that_gives_up_warns_once_of_the_retrievals_it_abandoned(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    release: threading.Event,
    caplog: pytest.LogCaptureFixture,
    isolation: str,
    runtime: type,
) -> None:
    """In both modes, with the exit hook's wording; before, close gave up without a word
    about retrievals (only a sink's leftovers were warned of)."""
    app = held_app(judge_server, make_judge, release)
    handler = online_handler(app.llm, max_concurrency=1, isolation=isolation)
    assert isinstance(handler._background, runtime)
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        for i in range(2):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        wait_until(
            lambda: judge_server.count("RelevantSentences") == 1,
            "the first judge request",
            timeout=START,
        )
        assert handler.close(timeout=0.1) is False
    assert handler.stats.abandoned == 2
    (warning,) = pending_warnings(caplog)  # the child's close leaves it to this process
    assert warning == (
        "ragmetrics: 2 retrievals were still pending when close() gave up (not scored, "
        "counted in stats.abandoned); raise its timeout or flush() before closing"
    )


@pytest.mark.parametrize("in_child", [False, True])
def test_the_scoring_processs_close_leaves_the_warnings_to_the_application(
    caplog: pytest.LogCaptureFixture, release: threading.Event, in_child: bool
) -> None:
    """The child's close would warn of the retrievals it abandoned, which the application's
    process warns of (with those the child's death leaves); and a result a sink is still
    delivering is lost when the child exits (counted dropped there), not left pending."""
    entered = threading.Event()

    def held(item: OnlineResult) -> None:
        entered.set()
        release.wait()

    def question_from(inputs: Any) -> str:
        if inputs["question"] == "held":
            release.wait()  # holds its retrieval until the test ends: close abandons it
        return str(inputs["question"])

    settings = HandlerSettings(
        metrics=[IDBasedContextRecall()],
        sinks=[CallableSink(held)],
        question_from=question_from,
        name="child-close",
    )
    background = ThreadRuntime(
        settings, counters=Counters(), failures=FailureLog(), in_child=in_child
    )
    try:
        assert background.submit(make_capture("first", ("doc",)))
        assert entered.wait(WAIT_S)  # its result is in the sink's emit
        assert background.submit(make_capture("held", ("doc",)))
        with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
            assert background.close(0.1) is False
    finally:
        release.set()
    (sinks,) = [r.getMessage() for r in caplog.records if "results not delivered" in r.getMessage()]
    assert "CallableSink: 0 dropped, 1 still being delivered" in sinks
    if in_child:
        assert "lost when the scoring process exits" in sinks
        assert pending_warnings(caplog) == []
    else:
        assert "stay in stats.sinks[...].pending" in sinks
        assert [w.split(" (")[0] for w in pending_warnings(caplog)] == [
            "ragmetrics: 1 retrievals were still pending when close() gave up"
        ]


def test_a_hook_that_never_returns_holds_its_retrieval_only(
    judge_server: JudgeServer, make_judge: JudgeFactory, release: threading.Event
) -> None:
    """On isolation="thread" a user's hook runs on a judge thread, not on the loop that
    schedules every judge call: one that blocks holds its own retrieval, the others are
    scored, and the app's calls, flush and close return by their deadlines. Before, the
    hook ran on the loop and held all scoring (nothing else was scored)."""
    app = rag_app(judge_server, make_judge)
    entered = threading.Event()

    def question_from(inputs: Any) -> str:
        if inputs == question(0):
            entered.set()
            release.wait()
        return str(inputs)

    handler = online_handler(app.llm, question_from=question_from)
    try:
        for i in range(3):
            assert app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert entered.wait(10), "the hook never ran"
        wait_until(lambda: len(results(handler)) == 2, "the two other retrievals scored")
        assert handler.flush(0.2) is False  # the held one
        assert handler.close(0.2) is False  # its judge thread is still in the hook
        stats = handler.stats
        assert (stats.sampled, stats.processed, stats.dropped, stats.scored) == (3, 2, 0, 2)
        assert (stats.abandoned, stats.pending_at_deadline, stats.queued) == (1, 1, 0), stats
        assert sorted(item.sample.question for item in results(handler)) == [
            question(1),
            question(2),
        ]
    finally:
        release.set()
    for thread in threads_of(handler):  # the blocked one exits once the hook returns
        thread.join(10)
        assert not thread.is_alive(), f"{thread.name} did not exit"
    assert len(results(handler)) == 2
    assert handler.stats.abandoned == 1


def test_a_hook_that_does_not_return_in_time_fails_its_retrieval(
    judge_server: JudgeServer, make_judge: JudgeFactory, release: threading.Event
) -> None:
    """The per-job ``timeout`` bounds a hook as it bounds a judge call or a reference
    provider: the retrieval's metrics fail with an error that names the hook."""
    app = rag_app(judge_server, make_judge)

    def answer_from(outputs: Any) -> str:
        release.wait()  # until the test ends: only the timeout can end the wait
        return str(outputs)

    handler = online_handler(app.llm, answer_from=answer_from, timeout=0.3)
    try:
        assert app.chain.invoke(question(0), config={"callbacks": [handler]})
        wait_until(lambda: len(results(handler)) == 1, "the retrieval's failed result")
        (item,) = results(handler)
        assert math.isnan(item.result.score)
        assert item.result.error is not None
        assert "answer_from did not return within 0.3s" in item.result.error
        assert item.sample.question == question(0)  # the query, as for a hook that raised
        assert judge_server.count("RelevantSentences") == 0  # nothing was sent to the judge
        stats = handler.stats
        assert (stats.processed, stats.failed, stats.scored) == (1, 1, 0), stats
    finally:
        release.set()
        handler.close(5)


def test_late_hooks_hold_at_most_a_quarter_of_the_judge_threads(
    judge_server: JudgeServer, make_judge: JudgeFactory, release: threading.Event
) -> None:
    """Before, each late hook call kept a judge thread for as long as it hung: a hook that
    hangs on some inputs took every judge thread in turn, and then no judge call ran.
    With ``max_concurrency=4`` one late call may hold a thread; the next retrievals fail at
    once, without calling the hook, until it returns."""
    app = rag_app(judge_server, make_judge)
    entered: list[str] = []

    def question_from(inputs: Any) -> str:
        entered.append(str(inputs))
        if inputs == question(0):
            release.wait()  # until released: only the timeout can end the wait
        return str(inputs)

    handler = online_handler(app.llm, question_from=question_from, timeout=0.3, max_concurrency=4)
    calls = handler.engine.user_calls
    assert calls is not None
    try:
        assert app.chain.invoke(question(0), config={"callbacks": [handler]})
        wait_until(lambda: len(results(handler)) == 1, "the late retrieval's result")
        assert calls.held == 1
        assert app.chain.invoke(question(1), config={"callbacks": [handler]})
        wait_until(lambda: len(results(handler)) == 2, "the refused retrieval's result")
        late, refused = (item.result.error for item in results(handler))
        assert late == "HookError: question_from did not return within 0.3s"
        assert refused == (
            "HookError: question_from was not called: 1 earlier calls have not returned yet, "
            "and none is made until one does"
        )
        assert entered == [question(0)]  # the hook was not called for question 1
        assert judge_server.count("RelevantSentences") == 0
        release.set()
        wait_until(lambda: calls.held == 0, "the late call to return")
        assert app.chain.invoke(question(2), config={"callbacks": [handler]})
        assert handler.flush(10)
        assert results(handler)[-1].result.score is not None
        assert entered == [question(0), question(2)]
        stats = handler.stats
        assert (stats.processed, stats.failed, stats.scored) == (3, 2, 1), stats
    finally:
        release.set()
        handler.close(5)


def test_a_second_close_waits_for_the_first_and_returns_its_outcome(
    judge_server: JudgeServer, make_judge: JudgeFactory, release: threading.Event
) -> None:
    """Before, a close called while another was under way returned True at once: its
    caller went on (and exited) with the results not yet delivered."""
    app = held_app(judge_server, make_judge, release)
    handler = online_handler(app.llm)
    app.chain.invoke(question(0), config={"callbacks": [handler]})
    wait_until(lambda: judge_server.count("RelevantSentences") == 1, "the held request")
    outcome: list[bool] = []
    first = threading.Thread(target=lambda: outcome.append(handler.close(30)))
    first.start()
    try:
        wait_until(lambda: handler.closed, "the first close under way")
        assert handler.close(timeout=0.05) is False  # the first is held by the judge
        assert results(handler) == []
    finally:
        release.set()
    first.join(30)
    assert outcome == [True]
    assert handler.close(0) is True
    assert len(results(handler)) == 1


class _Buffering(InMemorySink):
    """A sink that keeps what it is given until flushed or closed (as a batching one does)."""

    def __init__(self) -> None:
        super().__init__()
        self.buffered: list[OnlineResult] = []
        self.calls: list[str] = []

    def emit(self, item: OnlineResult) -> None:
        self.buffered.append(item)

    def flush(self, timeout: float | None = None) -> None:
        self.calls.append("flush")

    def close(self, timeout: float | None = None) -> None:
        self.calls.append("close")
        for item in self.buffered:
            super().emit(item)
        self.buffered.clear()


def test_a_judge_that_uses_the_whole_close_budget_still_lets_the_sinks_close(
    judge_server: JudgeServer, make_judge: JudgeFactory, release: threading.Event
) -> None:
    """The sinks get a grace of their own: before, the held judge used the whole budget and
    an idle sink was never closed, so what it buffered was lost."""
    app = rag_app(judge_server, make_judge)
    asked: list[object] = []

    def first_answered_then_held(req: object) -> object:
        asked.append(req)
        return VERDICT if len(asked) == 1 else reply_hold(release, VERDICT)

    judge_server.script = rag_router(RelevantSentences=first_answered_then_held)
    sink = _Buffering()
    handler = online_handler(app.llm, sinks=[sink], max_concurrency=1)
    try:
        app.chain.invoke(question(0), config={"callbacks": [handler]})
        wait_until(lambda: len(sink.buffered) == 1, "the first result")
        app.chain.invoke(question(1), config={"callbacks": [handler]})
        wait_until(lambda: judge_server.count("RelevantSentences") == 2, "the held request")
        assert handler.close(timeout=0.1) is False  # the held judge: not everything finished
        assert sink.calls[-1:] == ["close"]  # (after the flush close asked for first)
        assert [r.question for r in sink.results] == [question(0)]  # delivered at its close
    finally:
        release.set()


def test_close_flushes_delivers_and_stops(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    handler = online_handler(app.llm)
    app.chain.invoke(question(1), config={"callbacks": [handler]})
    assert threads_of(handler)
    assert handler.close(10) is True
    assert handler.close() is True
    assert handler.stats.scored == 1
    assert len(results(handler)) == 1
    assert not threads_of(handler)


def test_handler_timeout_fails_a_stuck_job(
    judge_server: JudgeServer, make_judge: JudgeFactory, release: threading.Event
) -> None:
    app = held_app(judge_server, make_judge, release)
    with online_handler(app.llm, timeout=0.2) as handler:
        app.chain.invoke(question(1), config={"callbacks": [handler]})
        assert handler.flush(10)
        (item,) = results(handler)
        release.set()
    assert item.result.error == "timed out after 0.2s"
    assert handler.stats.failed == 1


def test_a_failing_sink_is_counted_and_does_not_stop_the_others(
    judge_server: JudgeServer, make_judge: JudgeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app = rag_app(judge_server, make_judge)

    def broken(_: OnlineResult) -> None:
        raise ConnectionError("metrics backend down")

    keep = InMemorySink()
    with online_handler(app.llm, sinks=[CallableSink(broken), keep]) as handler:
        with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
            for i in range(3):
                app.chain.invoke(question(i), config={"callbacks": [handler]})
            assert handler.flush(10)
        stats = handler.stats
    assert len(keep.results) == 3
    assert (stats.sink_errors, stats.scored) == (3, 3)
    logged = [r for r in caplog.records if "metrics backend down" in r.getMessage()]
    assert len(logged) == 1


def test_rate_limit_reaches_the_engine() -> None:
    # The engine lives in this process only with isolation="thread" (the default would send
    # these portable metrics to a child process, see test_isolation_default.py).
    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance()], sinks=[], rate_limit_per_minute=120, isolation="thread"
    )
    assert handler.engine.limiter is not None
    assert handler.engine.limiter.requests_per_second == 2.0
    assert handler.close()


@pytest.mark.parametrize("caller", ["sink", "hook"])
def test_flush_or_close_from_a_sink_or_a_hook_is_refused_not_deadlocked(
    caller: str, judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    """From the handler's own threads (a sink's; a judge thread, where a user's function
    runs) a flush or close would wait for itself: it is refused at once."""
    app = rag_app(judge_server, make_judge)
    outcomes: list[bool] = []
    holder: list[RagMetricsCallbackHandler] = []

    def reentrant(value: Any) -> str:
        outcomes.append(holder[0].flush(60))
        outcomes.append(holder[0].close(60))
        return str(value)

    options: dict[str, Any] = (
        {"sinks": [InMemorySink(), CallableSink(reentrant)]}
        if caller == "sink"
        else {"answer_from": reentrant}
    )
    with online_handler(app.llm, **options) as handler:
        holder.append(handler)
        app.chain.invoke(question(1), config={"callbacks": [handler]})
        assert handler.flush(10)
        assert not handler.closed
    assert outcomes == [False, False]
    assert len(results(handler)) == 1


def test_reset_stats_zeroes_counters_and_logs_again(
    judge_server: JudgeServer, make_judge: JudgeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app = rag_app(judge_server, make_judge)
    judge_server.script = rag_router(RelevantSentences=lambda req: reply_error(400))
    with online_handler(app.llm) as handler:
        with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
            for _ in range(2):
                app.chain.invoke(question(1), config={"callbacks": [handler]})
                assert handler.flush(10)
                handler.reset_stats()
        # Every counter back to zero, the sink's figures included.
        assert handler.stats == HandlerStats(sinks={"InMemorySink": SinkStats()})
    failures = [r for r in caplog.records if "context_relevance failed" in r.getMessage()]
    assert len(failures) == 2  # once per kind, again after the reset


def test_a_hook_that_raises_system_exit_fails_only_its_retrieval(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    """On isolation="thread" too, a ``SystemExit`` from a user's hook (a ``sys.exit()`` deep
    in its code) is that retrieval's error; the others are scored."""
    app = rag_app(judge_server, make_judge)

    def question_from(inputs: Any) -> str:
        if inputs == question(1):
            raise SystemExit("user code called sys.exit()")
        return str(inputs)

    with online_handler(app.llm, question_from=question_from) as handler:
        for i in range(3):
            assert app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert handler.flush(30)
        stats = handler.stats
        scored = results(handler)
    assert (stats.processed, stats.scored, stats.failed) == (3, 2, 1)
    (failed,) = [item for item in scored if item.result.failed]
    assert failed.result.error is not None
    assert "question_from raised SystemExit: user code called sys.exit()" in failed.result.error
