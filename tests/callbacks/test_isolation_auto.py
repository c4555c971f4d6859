"""The default ``isolation="auto"`` with a production set-up: a live judge and the user's sinks.

A judge given as ``llm=ChatOpenAI(base_url=..., api_key=...)`` is rebuilt in the child from a
recipe, so scoring (judge calls, segmentation) leaves the application's process; the results
come back up the pipe and the application's own sink objects deliver them, each on its own
thread: an ``InMemorySink`` the test holds fills up, a callable runs in this process, a JSONL
file is written by it. A sink that raises or hangs holds up nobody else; a judge that is down
(refused, 500, 429, a request that never gets an answer) never reaches the application's
calls, and what it costs is counted. A judge the recipe cannot rebuild (its own
``http_client``) keeps scoring on this process's threads, with one warning naming why.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import (
    BaseSink,
    CallableSink,
    ContextPrecision,
    ContextRelevance,
    InMemorySink,
    JsonlSink,
    OnlineResult,
    RagMetricsCallbackHandler,
)
from langchain_ragmetrics.callbacks import _auto
from langchain_ragmetrics.callbacks._isolated import ProcessRuntime
from tests._support.langsmith_stub import refused_url
from tests._support.openai_server import (
    JudgeRequest,
    JudgeServer,
    ReplyValue,
    reply_error,
    reply_hold,
    reply_openai_error,
)
from tests._support.rag import FAST, question, rag_app, rag_router

JudgeFactory = Callable[..., ChatOpenAI]
START = 120.0
"""Generous bound for a child's start on a loaded machine, plus its work."""
N = 4
VERDICT = {"relevant_sentence_indices": [0], "reason": "held"}


def fallbacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "isolation='thread'" in r.getMessage()]


class Recording(BaseSink):
    """Counts its calls and says which process made them (a sink defined in a test module
    never has to reach the child: it stays here)."""

    def __init__(self) -> None:
        self.pids: set[int] = set()
        self.emitted = 0
        self.flushed = 0
        self.closed = 0

    def emit(self, item: OnlineResult) -> None:
        self.pids.add(os.getpid())
        self.emitted += 1

    def flush(self, timeout: float | None = None) -> None:
        self.flushed += 1

    def close(self, timeout: float | None = None) -> None:
        self.closed += 1


class Hanging(BaseSink):
    """Blocks in ``emit`` (and ``close``) until released; says when the first call came."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.entered = threading.Event()

    def emit(self, item: OnlineResult) -> None:
        self.entered.set()
        self.release.wait()

    def close(self, timeout: float | None = None) -> None:
        self.release.wait()


class Counting(BaseSink):
    """Sets ``done`` once it has received ``expected`` results."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.received = 0
        self.done = threading.Event()

    def emit(self, item: OnlineResult) -> None:
        self.received += 1
        if self.received >= self.expected:
            self.done.set()


def test_a_live_judge_and_the_users_sinks_score_in_a_child_and_deliver_here(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    fresh_warning: None,
) -> None:
    app = rag_app(judge_server, make_judge)
    memory, recording = InMemorySink(), Recording()
    called: list[tuple[int, str]] = []
    path = tmp_path / "scores.jsonl"

    def record(item: OnlineResult) -> None:
        called.append((os.getpid(), item.result.metric))

    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        handler = RagMetricsCallbackHandler(
            metrics=[ContextRelevance(llm=make_judge())],
            sinks=[memory, CallableSink(record), JsonlSink(path), recording],
        )
    runtime = handler._background
    assert isinstance(runtime, ProcessRuntime)
    assert handler.engine is None  # no judge client in this process
    assert handler.sinks[0] is memory
    for i in range(N):
        app.chain.invoke(question(i), config={"callbacks": [handler]})
    assert handler.flush(START)
    pid = runtime.child_pid
    stats = handler.stats
    # flush returned after this process's sinks had every result (and were flushed).
    assert [r.score for r in memory.results] == [0.5] * N
    assert called == [(os.getpid(), "context_relevance")] * N
    assert len(path.read_text(encoding="utf-8").splitlines()) == N
    assert (recording.pids, recording.emitted, recording.flushed) == ({os.getpid()}, N, 1)
    assert pid is not None
    assert pid != os.getpid()
    assert judge_server.count("RelevantSentences") == N  # the rebuilt judge, same endpoint
    assert (stats.sampled, stats.processed, stats.scored, stats.dropped) == (N, N, N, 0)
    assert set(stats.sinks) == {"InMemorySink", "CallableSink", "JsonlSink", "Recording"}
    for key, figures in stats.sinks.items():
        assert (figures.delivered, figures.errors, figures.dropped, figures.pending) == (
            N,
            0,
            0,
            0,
        ), key
    assert handler.close(START)
    assert recording.closed == 1  # close closes the application's sinks
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert {r["metric"] for r in records} == {"context_relevance"}
    assert fallbacks(caplog) == []


def test_a_raising_and_a_hanging_sink_hold_up_nobody(
    judge_server: JudgeServer, make_judge: JudgeFactory, fresh_warning: None
) -> None:
    app = rag_app(judge_server, make_judge)
    release = threading.Event()
    hanging, counting, memory = Hanging(release), Counting(N), InMemorySink()

    def boom(item: OnlineResult) -> None:
        raise RuntimeError("sink down")

    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance(llm=make_judge())],
        sinks=[memory, CallableSink(boom), counting, hanging],  # the hanging one last
    )
    assert isinstance(handler._background, ProcessRuntime)
    try:
        answers = [app.chain.invoke(question(i), config={"callbacks": [handler]}) for i in range(N)]
        assert answers == [f"Answer about item{i:03d}." for i in range(N)]
        assert counting.done.wait(START)  # every result reached the others, the hang holds
        assert hanging.entered.wait(START)
        assert not handler.flush(1.0)  # bounded by the hanging sink: False at the deadline
        stats = handler.stats
        assert len(memory.results) == N
        assert stats.sinks["CallableSink"].errors == N  # raised, counted, others unaffected
        assert stats.sink_errors == N
        held = stats.sinks["Hanging"]
        assert (held.delivered, held.pending) == (0, N)  # one in emit, the rest queued
        assert not handler.close(1.0)  # bounded too: the hanging sink is given up
        held = handler.stats.sinks["Hanging"]
        assert held.delivered + held.errors + held.dropped + held.pending == N
        assert held.dropped >= N - 1  # the queued ones, counted
        assert handler.stats.processed == N
    finally:
        release.set()


def _refused(server: JudgeServer, make_judge: JudgeFactory) -> ChatOpenAI:
    return make_judge(base_url=refused_url() + "/v1")


def _status(reply: Callable[[], ReplyValue]) -> Callable[[JudgeServer, JudgeFactory], ChatOpenAI]:
    def judge(server: JudgeServer, make_judge: JudgeFactory) -> ChatOpenAI:
        server.script = rag_router(RelevantSentences=lambda req: reply())
        return make_judge()

    return judge


@pytest.mark.parametrize(
    "broken_judge",
    [
        _refused,
        _status(lambda: reply_error(500)),
        _status(lambda: reply_openai_error("rate_limit_exceeded")),
    ],
    ids=["refused", "500", "429"],
)
def test_a_judge_outage_is_counted_and_never_reaches_the_app(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    broken_judge: Callable[[JudgeServer, JudgeFactory], ChatOpenAI],
    fresh_warning: None,
) -> None:
    app = rag_app(judge_server, make_judge)
    judge = broken_judge(judge_server, make_judge)
    memory = InMemorySink()
    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance(llm=judge, retry=FAST)], sinks=[memory]
    )
    assert isinstance(handler._background, ProcessRuntime)
    answers = [app.chain.invoke(question(i), config={"callbacks": [handler]}) for i in range(N)]
    assert answers == [f"Answer about item{i:03d}." for i in range(N)]
    assert handler.flush(START)
    stats = handler.stats
    assert (stats.processed, stats.scored, stats.failed) == (N, 0, N)
    assert len(memory.results) == N
    assert all(r.result.failed for r in memory.results)  # a failure is a result, delivered
    assert stats.sinks["InMemorySink"].delivered == N
    assert handler.close(START)


def test_a_reset_logs_the_judges_failures_once_again(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    caplog: pytest.LogCaptureFixture,
    fresh_warning: None,
) -> None:
    """The child logs its judges' failures, once per kind: ``reset_stats()`` starts that
    again there too, as on ``isolation="thread"``. Before, the child's log never forgot."""
    app = rag_app(judge_server, make_judge)
    judge_server.script = rag_router(RelevantSentences=lambda req: reply_error(400))
    handler = RagMetricsCallbackHandler(metrics=[ContextRelevance(llm=make_judge())])
    assert isinstance(handler._background, ProcessRuntime)
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        for period in range(2):
            for i in range(2):
                app.chain.invoke(question(i), config={"callbacks": [handler]})
            assert handler.flush(START)  # the child's records come before its answer
            assert handler.stats.failed == 2, period
            handler.reset_stats()
        assert handler.close(START)
    failures = [r for r in caplog.records if "context_relevance failed" in r.getMessage()]
    assert len(failures) == 2  # once per kind, again after the reset
    assert all(r.processName != "MainProcess" for r in failures)  # logged in the child


def test_a_judge_that_never_answers_is_cut_off_by_close(
    judge_server: JudgeServer, make_judge: JudgeFactory, fresh_warning: None
) -> None:
    app = rag_app(judge_server, make_judge)
    release, arrived = threading.Event(), threading.Event()

    def held(req: JudgeRequest) -> ReplyValue:
        arrived.set()
        return reply_hold(release, VERDICT)

    judge_server.script = rag_router(RelevantSentences=held)
    memory = InMemorySink()
    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance(llm=make_judge(timeout=600))], sinks=[memory]
    )
    assert isinstance(handler._background, ProcessRuntime)
    try:
        answers = [app.chain.invoke(question(i), config={"callbacks": [handler]}) for i in range(N)]
        assert answers == [f"Answer about item{i:03d}." for i in range(N)]
        assert arrived.wait(START)  # the child's judge call is in flight and held
        assert not handler.flush(0.5)  # bounded: False at the deadline, nothing dropped
        assert not handler.close(2.0)  # the child is cut off at the deadline
        stats = handler.stats
        assert stats.processed + stats.abandoned == N
        assert stats.abandoned >= 1  # the held one at least, counted
        assert stats.pending_at_deadline == stats.abandoned
        assert len(memory.results) == stats.processed
    finally:
        release.set()


def test_a_killed_child_counts_its_work_as_abandoned_and_the_next_one_delivers_here(
    judge_server: JudgeServer, make_judge: JudgeFactory, fresh_warning: None
) -> None:
    app = rag_app(judge_server, make_judge)
    release, arrived = threading.Event(), threading.Event()
    calls = iter(range(1_000))

    def first_held(req: JudgeRequest) -> ReplyValue:
        if next(calls) == 0:
            arrived.set()
            return reply_hold(release, VERDICT)
        return rag_router()(req)

    judge_server.script = rag_router(RelevantSentences=first_held)
    memory = InMemorySink()
    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance(llm=make_judge())], sinks=[memory]
    )
    runtime = handler._background
    assert isinstance(runtime, ProcessRuntime)
    try:
        app.chain.invoke(question(1), config={"callbacks": [handler]})
        assert arrived.wait(START)
        pid = runtime.child_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        # False if the death is noticed during the flush, True if before: counted either way.
        handler.flush(START)
        assert handler.stats.abandoned == 1  # the child died with the retrieval
        app.chain.invoke(question(2), config={"callbacks": [handler]})
        assert handler.flush(START)  # a new child scored it; this process delivered it
        assert runtime.children_started == 2
        assert [r.score for r in memory.results] == [0.5]
        stats = handler.stats
        assert (stats.processed, stats.scored, stats.abandoned) == (1, 1, 1)
        assert handler.close(START)
    finally:
        release.set()


def test_a_judge_with_its_own_http_client_scores_here_with_one_warning(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    caplog: pytest.LogCaptureFixture,
    fresh_warning: None,
) -> None:
    app = rag_app(judge_server, make_judge)
    memory = InMemorySink()
    with httpx.Client() as client, caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        handler = RagMetricsCallbackHandler(
            metrics=[ContextRelevance(llm=make_judge(http_client=client))], sinks=[memory]
        )
        again = RagMetricsCallbackHandler(
            metrics=[ContextRelevance(llm=make_judge(http_client=client))]
        )
        assert handler.settings.isolation == again.settings.isolation == "thread"
        warned = fallbacks(caplog)
        assert len(warned) == 1  # once per process, not per handler
        assert "http_client" in warned[0]
        assert "workers=1" not in warned[0]  # the recipe's advice for evaluate() is cut
        with handler:
            app.chain.invoke(question(1), config={"callbacks": [handler]})
            assert handler.flush(START)
        assert [r.score for r in memory.results] == [0.5]
        assert again.close()


def test_the_shipped_setup_rebuilds_the_judge_and_carries_no_sink(
    make_judge: JudgeFactory, fresh_warning: None
) -> None:
    judge = make_judge(model="judge-a")
    metrics: list[Any] = [ContextRelevance(llm=judge), ContextPrecision(llm=judge, language="fr")]
    handler = RagMetricsCallbackHandler(metrics=metrics, sinks=[InMemorySink()])
    process = handler.settings.process
    assert process is not None
    shipped = process.setup
    assert isinstance(shipped, _auto.ShippedSetup)
    assert repr(shipped).startswith("ShippedSetup(context_relevance, context_precision; 1 judge")
    setup = shipped()  # what the child calls
    assert setup.sinks == []
    assert setup.metrics is not None
    built = [m.llm for m in setup.metrics]  # type: ignore[attr-defined]
    assert built[0] is built[1]  # one judge per distinct recipe
    assert isinstance(built[0], ChatOpenAI)
    assert built[0] is not judge
    assert (built[0].model_name, built[0].openai_api_base) == ("judge-a", judge.openai_api_base)
    assert [m.language for m in setup.metrics] == [metrics[0].language, "fr"]
    assert handler.close()
