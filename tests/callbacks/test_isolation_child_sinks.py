"""Sinks the default child process builds again and delivers with (``for_child_process``).

Under ``isolation="auto"`` a ``LangSmithFeedbackSink`` that builds its own client is rebuilt
in the scoring process from its options and the credentials it read, so its requests (about
a millisecond of the application's CPU each, and GIL time taken from its requests) leave the
application's process. Everything the user reads stays right: ``flush`` returns once
LangSmith has the feedback, ``stats.sinks`` counts it under the sink's key in the user's
order, a child that dies with feedback in hand counts it as dropped, and a LangSmith that
refuses, fails or never answers reaches neither the application nor the other sinks. A sink
given a client, a disabled one and a subclass deliver in the application's process.
"""

from __future__ import annotations

import gc
import logging
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import langsmith
import pytest
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import (
    ContextRelevance,
    InMemorySink,
    LangSmithFeedbackSink,
    RagMetricsCallbackHandler,
)
from langchain_ragmetrics.callbacks import _auto, _exit
from langchain_ragmetrics.callbacks._isolated import ProcessRuntime
from tests._support.isolated_setups import BrokenInChild, FileInChild
from tests._support.langsmith_stub import LangSmithStub
from tests._support.openai_server import JudgeServer
from tests._support.rag import question, rag_app

JudgeFactory = Callable[..., ChatOpenAI]
START = 120.0
"""Generous bound for a child's start on a loaded machine, plus its work."""
N = 3


@pytest.fixture
def langsmith_app(langsmith_env: LangSmithStub) -> LangSmithStub:
    """The stub with the app's project, taking feedback on runs nothing traced here."""
    langsmith_env.create_project("app")
    langsmith_env.feedback_needs_run = False
    return langsmith_env


def _until(condition: Callable[[], bool], timeout: float = START) -> bool:
    """Poll ``condition`` (a child's report comes every 0.2 s) until true or ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class MySink(LangSmithFeedbackSink):
    """A subclass: it may override anything, so it is never rebuilt as the base class."""


def test_the_sink_is_rebuilt_from_its_options_and_the_credentials_it_read(
    langsmith_env: LangSmithStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = LangSmithFeedbackSink(
        run="root", project_name="app", timeout=3, max_retries=5, cooldown=7, max_concurrency=4
    )
    factory = sink.for_child_process()
    assert factory is not None
    monkeypatch.delenv("LANGSMITH_API_KEY")  # what the child's environment holds does not matter
    monkeypatch.delenv("LANGSMITH_ENDPOINT")
    built = pickle.loads(pickle.dumps(factory))()  # as the child gets it
    assert type(built) is LangSmithFeedbackSink
    assert built is not sink
    assert built.enabled
    assert (built._api_key, built._api_url) == ("test", langsmith_env.url)
    assert (built.run, built.project_name, built.timeout) == ("root", "app", 3)
    assert (built.max_retries, built.max_concurrency) == (5, 4)
    assert built.breaker.cooldown == sink.breaker.cooldown == 7
    assert built._client is None  # its client is built where it delivers


def test_a_given_client_a_disabled_sink_and_a_subclass_deliver_here(
    langsmith_client: langsmith.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert LangSmithFeedbackSink(langsmith_client).for_child_process() is None
    monkeypatch.setenv("LANGSMITH_API_KEY", "test")
    assert MySink().for_child_process() is None
    monkeypatch.delenv("LANGSMITH_API_KEY")
    disabled = LangSmithFeedbackSink()
    assert not disabled.enabled
    assert disabled.for_child_process() is None


def test_langsmith_feedback_is_sent_by_the_child_and_counted_here(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_app: LangSmithStub,
    fresh_warning: None,
) -> None:
    app = rag_app(judge_server, make_judge)
    memory, feedback = InMemorySink(), LangSmithFeedbackSink(project_name="app")
    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance(llm=make_judge())], sinks=[memory, feedback]
    )
    runtime = handler._background
    assert isinstance(runtime, ProcessRuntime)
    setup = handler.settings.process.setup  # type: ignore[union-attr]
    assert isinstance(setup, _auto.ShippedSetup)
    # what the child builds:
    assert [type(s) for s in setup().sinks or ()] == [LangSmithFeedbackSink]
    for i in range(N):
        app.chain.invoke(question(i), config={"callbacks": [handler]})
    assert handler.flush(START)
    # flush returned once LangSmith had every feedback, sent by the child.
    sent = langsmith_app.feedback(key="context_relevance")
    assert len(sent) == N
    assert [r.score for r in memory.results] == [0.5] * N
    assert feedback._client is None  # the object passed here never sent a thing
    stats = handler.stats
    assert list(stats.sinks) == ["InMemorySink", "LangSmithFeedbackSink"]  # the user's order
    for key, figures in stats.sinks.items():
        assert (figures.delivered, figures.errors, figures.dropped, figures.pending) == (
            N,
            0,
            0,
            0,
        ), key
    handler.reset_stats()
    assert handler.stats.sinks["LangSmithFeedbackSink"].delivered == 0
    app.chain.invoke(question(N), config={"callbacks": [handler]})
    assert handler.close(START)
    assert handler.stats.sinks["LangSmithFeedbackSink"].delivered == 1
    assert len(langsmith_app.feedback(key="context_relevance")) == N + 1


def test_keys_follow_the_users_order_when_sinks_of_a_class_are_split(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_app: LangSmithStub,
    langsmith_client: langsmith.Client,
    fresh_warning: None,
) -> None:
    """The first sink has a client (stays here), the second is rebuilt in the child, where it
    is the only one of its class: its figures still land under ``LangSmithFeedbackSink#2``."""
    app = rag_app(judge_server, make_judge)
    here = LangSmithFeedbackSink(langsmith_client, project_name="app")
    there = LangSmithFeedbackSink(project_name="app", run="root")
    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance(llm=make_judge())], sinks=[here, there]
    )
    for i in range(N):
        app.chain.invoke(question(i), config={"callbacks": [handler]})
    assert handler.flush(START)
    stats = handler.stats
    assert list(stats.sinks) == ["LangSmithFeedbackSink", "LangSmithFeedbackSink#2"]
    assert stats.sinks["LangSmithFeedbackSink"].delivered == N
    assert stats.sinks["LangSmithFeedbackSink#2"].delivered == N
    assert there._client is None
    assert handler.close(START)


@pytest.mark.parametrize("fault", ["500", "429", "refused"])
def test_a_failing_langsmith_in_the_child_is_counted_and_holds_up_nobody(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_app: LangSmithStub,
    monkeypatch: pytest.MonkeyPatch,
    fault: str,
    fresh_warning: None,
) -> None:
    app = rag_app(judge_server, make_judge)
    if fault == "refused":
        from tests._support.langsmith_stub import refused_url

        monkeypatch.setenv("LANGSMITH_ENDPOINT", refused_url())
    else:
        langsmith_app.fail("POST /feedback", status=int(fault), times=None)
    memory = InMemorySink()
    sink = LangSmithFeedbackSink(project_name="app", max_retries=0, failure_threshold=100)
    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance(llm=make_judge())], sinks=[memory, sink]
    )
    for i in range(N):
        app.chain.invoke(question(i), config={"callbacks": [handler]})
    assert handler.flush(START)  # a failed send is an outcome: nothing is left pending
    assert [r.score for r in memory.results] == [0.5] * N  # the other sink got everything
    figures = handler.stats.sinks["LangSmithFeedbackSink"]
    assert (figures.delivered, figures.errors, figures.pending) == (0, N, 0)
    assert langsmith_app.feedback() == []
    assert handler.close(START)


def test_a_child_killed_with_feedback_in_hand_counts_it_as_dropped(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_app: LangSmithStub,
    fresh_warning: None,
) -> None:
    """LangSmith accepts the feedback and never answers; the child dies meanwhile."""
    app = rag_app(judge_server, make_judge)
    langsmith_app.hang("POST /feedback")
    memory = InMemorySink()
    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance(llm=make_judge())],
        sinks=[memory, LangSmithFeedbackSink(project_name="app")],
    )
    runtime = handler._background
    assert isinstance(runtime, ProcessRuntime)
    try:
        for i in range(N):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        # Every result reached both sinks: this process's has them, the child's holds them.
        assert _until(lambda: len(memory.results) == N)
        assert _until(lambda: handler.stats.sinks["LangSmithFeedbackSink"].pending == N)
        # Held by the sink is not yet sent: wait for the request to reach LangSmith.
        assert _until(lambda: langsmith_app.hung >= 1)
        pid = runtime.child_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert _until(lambda: handler.stats.sinks["LangSmithFeedbackSink"].dropped == N)
        figures = handler.stats.sinks["LangSmithFeedbackSink"]
        assert (figures.delivered, figures.pending) == (0, 0)
        assert handler.stats.sinks["InMemorySink"].delivered == N
    finally:
        langsmith_app.release_hangs()
    assert handler.close(START)


def test_close_with_langsmith_never_answering_is_bounded_and_counts_what_was_held(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_app: LangSmithStub,
    fresh_warning: None,
) -> None:
    """LangSmith accepts the child's feedback and never answers: ``close`` keeps its timeout
    (the child is stopped at the deadline) and the feedback it held counts as dropped."""
    app = rag_app(judge_server, make_judge)
    langsmith_app.hang("POST /feedback")
    memory = InMemorySink()
    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance(llm=make_judge())],
        sinks=[memory, LangSmithFeedbackSink(project_name="app", timeout=600)],
    )
    try:
        for i in range(N):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert _until(lambda: handler.stats.sinks["LangSmithFeedbackSink"].pending == N)
        started = time.monotonic()
        assert handler.close(timeout=1.0) is False  # not everything was delivered
        assert time.monotonic() - started < 60  # bounded by its timeout, not by LangSmith's
        figures = handler.stats.sinks["LangSmithFeedbackSink"]
        assert (figures.delivered, figures.dropped, figures.pending) == (0, N, 0)
        assert [r.score for r in memory.results] == [0.5] * N  # this process's sink has all
    finally:
        langsmith_app.release_hangs()


def test_a_sink_of_your_own_can_opt_in_and_one_that_fails_to_build_only_drops_its_own(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    fresh_warning: None,
) -> None:
    """``FileInChild`` is built in the child as a ``JsonlSink`` (another class: its figures
    still land under its own key, matched by position); ``BrokenInChild``'s factory raises
    there: its results count as dropped, with a warning, and the other sinks get them all."""
    app = rag_app(judge_server, make_judge)
    path = tmp_path / "child.jsonl"
    memory = InMemorySink()
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        handler = RagMetricsCallbackHandler(
            metrics=[ContextRelevance(llm=make_judge())],
            sinks=[BrokenInChild(), memory, FileInChild(path)],
        )
        runtime = handler._background
        assert isinstance(runtime, ProcessRuntime)
        assert runtime.sinks_in_child == ["BrokenInChild", "FileInChild"]
        for i in range(N):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert handler.flush(START)
        stats = handler.stats
        assert list(stats.sinks) == ["BrokenInChild", "InMemorySink", "FileInChild"]
        assert (stats.sinks["BrokenInChild"].dropped, stats.sinks["BrokenInChild"].delivered) == (
            N,
            0,
        )
        assert stats.sinks["InMemorySink"].delivered == N
        assert stats.sinks["FileInChild"].delivered == N
        assert len(path.read_text(encoding="utf-8").splitlines()) == N  # written by the child
        assert (stats.processed, stats.scored) == (N, N)  # scoring stayed on
        assert handler.close(START)
    warned = [r.getMessage() for r in caplog.records if "could not be built" in r.getMessage()]
    assert len(warned) == 1
    assert "no backend here" in warned[0]


def test_the_child_sends_feedback_to_the_project_this_process_traces_to(
    langsmith_env: LangSmithStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``project_name``, the rebuilt sink gets the project this process uses now
    (langsmith keeps the first it read), not what the child's environment says later."""
    monkeypatch.setenv("LANGSMITH_PROJECT", "traced-here")
    sink = LangSmithFeedbackSink()
    expected = sink._project_name()
    factory = sink.for_child_process()
    assert factory is not None
    monkeypatch.setenv("LANGSMITH_PROJECT", "changed-later")
    assert factory().project_name == expected


def test_options_changed_after_construction_reach_the_child(langsmith_env: LangSmithStub) -> None:
    sink = LangSmithFeedbackSink(project_name="app")
    sink.run = "root"
    sink.timeout = 2.5
    sink.max_concurrency = 3
    factory = sink.for_child_process()
    assert factory is not None
    built = factory()
    assert (built.run, built.timeout, built.max_concurrency) == ("root", 2.5, 3)


def test_close_closes_the_idle_object_too(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_app: LangSmithStub,
    fresh_warning: None,
) -> None:
    """The object passed sends nothing, but ``close`` still closes it (and so any client the
    user had it build: ``sink.client``)."""
    sink = LangSmithFeedbackSink(project_name="app")
    assert sink.client is not None  # the user asked the object for its client: it built one
    handler = RagMetricsCallbackHandler(metrics=[ContextRelevance(llm=make_judge())], sinks=[sink])
    runtime = handler._background
    assert isinstance(runtime, ProcessRuntime)
    assert runtime.sinks_in_child == ["LangSmithFeedbackSink"]  # it owns that client: rebuilt
    assert not sink.delivery.requests.closing.is_set()
    assert handler.close(START)
    assert sink.delivery.requests.closing.is_set()  # LangSmithFeedbackSink.close ran


class _ClosingMemory(InMemorySink):
    """An in-memory sink (it stays in the application's process) that says when closed."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = threading.Event()

    def close(self, timeout: float | None = None) -> None:
        self.closed.set()
        super().close(timeout)


def test_a_collected_handler_closes_its_sinks_here_and_leaves_the_exit_registry(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    """A handler dropped by its user: its child finishes the queue and exits, then the sinks
    of this process are closed and the runtime leaves the exit registry (before, both waited
    for the interpreter's exit, one set of sinks and outbox threads per collected handler)."""
    app = rag_app(judge_server, make_judge)
    memory = _ClosingMemory()
    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance(llm=make_judge())], sinks=[memory]
    )
    runtime = handler._background
    assert isinstance(runtime, ProcessRuntime)
    for i in range(N):
        app.chain.invoke(question(i), config={"callbacks": [handler]})
    del handler
    gc.collect()  # the handler's finalizer asks the child to finish and exit
    assert memory.closed.wait(START), "the sinks here were not closed"
    assert len(memory.results) == N  # everything was scored and delivered first
    assert _until(lambda: not _exit.registered(runtime))
    for box in runtime._outboxes or ():
        thread = box.thread
        assert thread is not None
        thread.join(START)
        assert not thread.is_alive()
    assert runtime.close(1.0)  # the exit hook's close finds it done
