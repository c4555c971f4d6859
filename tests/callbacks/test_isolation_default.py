"""The default ``isolation="auto"``: a child process where that is safe, threads otherwise.

A handler with portable options (the default metrics and judge, a ``LoggingSink``) scores in
a child process started without re-running the application's script, and its sinks deliver in
this process; what cannot reach a child (a judge with its own HTTP client, a lambda reference
provider, a tracer) keeps scoring on this process's threads, with one warning per process; a
short script that exits without ``close`` still delivers its results. The production set-up
(a live ``ChatOpenAI`` judge, the user's own sinks) is tested in ``test_isolation_auto.py``.
"""

from __future__ import annotations

import logging
import multiprocessing.spawn
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import (
    CallableSink,
    ContextRelevance,
    InMemorySink,
    LoggingSink,
    OnlineResult,
    RagMetricsCallbackHandler,
)
from langchain_ragmetrics.callbacks import SinkStats, _auto, _isolated
from langchain_ragmetrics.callbacks._isolated import ProcessRuntime
from langchain_ragmetrics.callbacks._settings import DEFAULT_MAX_CONCURRENCY
from tests._support.concurrency import wait_until
from tests._support.isolated_setups import FileInChild, HeldInChild
from tests._support.openai_server import JudgeServer, reply_hold
from tests._support.rag import question, rag_app, rag_router
from tests._support.stats_checks import assert_identities, stalled_log

JudgeFactory = Callable[..., ChatOpenAI]
START = 120.0
"""Generous bound for a child's start on a loaded machine, plus its work."""
REPO = Path(__file__).resolve().parents[2]
VERDICT = {"relevant_sentence_indices": [0], "reason": "held"}


def provider(question: str | None, metadata: Any) -> str | None:
    """A module-level reference provider: it pickles by name, so it can reach a child."""
    return None


def _local_metric() -> ContextRelevance:
    """A metric whose class is local to a function: it cannot be pickled, judge or not."""

    class Local(ContextRelevance):
        pass

    return Local()


@pytest.fixture
def default_judge(judge_server: JudgeServer, monkeypatch: pytest.MonkeyPatch) -> JudgeServer:
    """The default judge (``ChatOpenAI`` from ``OPENAI_*``) pointed at the loopback server;
    a child process inherits the variables."""
    judge_server.script = rag_router()
    monkeypatch.setenv("OPENAI_BASE_URL", judge_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    return judge_server


def fallbacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "isolation='thread'" in r.getMessage()]


def test_the_default_handler_scores_in_a_child_process(
    default_judge: JudgeServer,
    make_judge: JudgeFactory,
    caplog: pytest.LogCaptureFixture,
    fresh_warning: None,
) -> None:
    app = rag_app(default_judge, make_judge)
    caplog.set_level(logging.INFO, logger="langchain_ragmetrics.online")  # LoggingSink lines
    with RagMetricsCallbackHandler(metrics=[ContextRelevance()]) as handler:
        runtime = handler._background
        assert isinstance(runtime, ProcessRuntime)
        assert handler.settings.max_concurrency == DEFAULT_MAX_CONCURRENCY == 16
        # The handler still shows what it scores with (the child holds copies).
        assert [m.metric_name for m in handler.metrics] == ["context_relevance"]
        assert [type(s) for s in handler.sinks] == [LoggingSink]
        assert handler.engine is None  # no judge client in this process
        for i in range(3):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert handler.flush(START)
        pid = runtime.child_pid
        stats = handler.stats
    assert pid is not None
    assert pid != os.getpid()
    assert (stats.sampled, stats.processed, stats.scored, stats.dropped) == (3, 3, 3, 0)
    assert default_judge.count("RelevantSentences") == 3
    logged = [r for r in caplog.records if r.name == "langchain_ragmetrics.online"]
    lines = [r for r in logged if "context_relevance=" in r.getMessage()]
    assert len(lines) == 3  # logged by the LoggingSink of this process
    assert {r.process for r in lines} == {os.getpid()}
    assert stats.sinks["LoggingSink"].delivered == 3
    assert fallbacks(caplog) == []


def test_live_objects_keep_scoring_here_with_one_warning(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    caplog: pytest.LogCaptureFixture,
    fresh_warning: None,
) -> None:
    app = rag_app(judge_server, make_judge)
    sink = InMemorySink()
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        handler = RagMetricsCallbackHandler(
            metrics=[ContextRelevance(llm=make_judge())],
            sinks=[sink],
            reference_provider=lambda q, m: None,
        )
        again = RagMetricsCallbackHandler(trace_judge=BaseCallbackHandler())
        chosen = RagMetricsCallbackHandler(
            metrics=[ContextRelevance(llm=make_judge())], isolation="thread"
        )
    assert (handler.settings.isolation, again.settings.isolation) == ("thread", "thread")
    assert chosen.settings.isolation == "thread"
    warned = fallbacks(caplog)
    assert len(warned) == 1  # once per process, not per handler
    assert "`reference_provider`" in warned[0]
    assert "isolation='thread'" in warned[0]
    with handler:
        app.chain.invoke(question(1), config={"callbacks": [handler]})
        assert handler.flush(START)
    assert [r.score for r in sink.results] == [0.5]  # the user's own sink got the result
    assert again.close()
    assert chosen.close()


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        (
            {
                "metrics": [
                    ContextRelevance(llm=ChatOpenAI(api_key="k", http_client=httpx.Client()))
                ]
            },
            "the judge ChatOpenAI's http_client cannot be sent",
        ),
        ({"metrics": [_local_metric()]}, "the metrics cannot be sent"),
        ({"reference_provider": lambda q, m: None}, "`reference_provider` cannot"),
        ({"trace_judge": BaseCallbackHandler()}, "`trace_judge` is a tracer object"),
    ],
    ids=["judge-http-client", "live-metric-field", "lambda-provider", "tracer"],
)
def test_each_unsafe_option_is_named_in_the_fallback(
    options: dict[str, Any], reason: str, fresh_warning: None
) -> None:
    handler = RagMetricsCallbackHandler(**options)
    resolved = _auto.resolve_auto(
        metrics=handler.metrics,
        reference_provider=handler.settings.reference_provider,
        trace_judge=handler.settings.trace_judge,
    )
    assert handler.settings.isolation == resolved.isolation == "thread"
    assert resolved.reason is not None
    assert resolved.reason.startswith(reason)
    assert handler.close()


def test_portable_options_go_to_the_child(fresh_warning: None) -> None:
    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance()], sinks=[LoggingSink()], reference_provider=provider
    )
    process = handler.settings.process
    assert process is not None
    shipped = process.setup
    assert isinstance(shipped, _auto.ShippedSetup)
    assert repr(shipped) == f"ShippedSetup(context_relevance; {len(shipped.blob):,} bytes)"
    setup = shipped()  # what the child calls
    assert setup.metrics is not None
    assert [type(m) for m in setup.metrics] == [ContextRelevance]
    assert setup.sinks == []  # the sinks stay in this process
    assert setup.reference_provider is provider
    assert handler.close()


def test_a_frozen_application_scores_here(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fresh_warning: None
) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        handler = RagMetricsCallbackHandler()
    assert handler.settings.isolation == "thread"
    assert "frozen executable" in fallbacks(caplog)[0]
    assert handler.close()


def test_an_embedding_server_binary_is_not_started_as_python(
    monkeypatch: pytest.MonkeyPatch, fresh_warning: None
) -> None:
    # uWSGI and the like report their own binary as the interpreter.
    monkeypatch.setattr(multiprocessing.spawn, "get_executable", lambda: "/usr/bin/uwsgi")
    assert "/usr/bin/uwsgi" in (_auto.platform_reason() or "")
    handler = RagMetricsCallbackHandler()
    assert handler.settings.isolation == "thread"
    assert handler.close()


def test_a_bad_option_raises_before_any_decision(
    caplog: pytest.LogCaptureFixture, fresh_warning: None
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"),
        pytest.raises(TypeError, match="trace_judge"),
    ):
        RagMetricsCallbackHandler(trace_judge=3)  # type: ignore[arg-type]
    assert fallbacks(caplog) == []


def test_close_right_after_the_first_retrieval_still_scores_it(
    default_judge: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(default_judge, make_judge)
    handler = RagMetricsCallbackHandler(metrics=[ContextRelevance()])
    app.chain.invoke(question(2), config={"callbacks": [handler]})
    assert handler.close(START)  # before or after the child started: it is scored
    stats = handler.stats
    assert (stats.processed, stats.scored, stats.abandoned) == (1, 1, 0)


class _SlowToClose(InMemorySink):
    """A sink whose ``close`` lasts until ``until`` (a ``time.monotonic`` value): it writes
    out a batch, say. The test sets ``until`` past the deadline of the handler's close."""

    def __init__(self) -> None:
        super().__init__()
        self.until = 0.0
        self.closed = threading.Event()

    def close(self, timeout: float | None = None) -> None:
        while time.monotonic() < self.until:  # the sink's own work, not a test's wait
            time.sleep(0.01)
        self.closed.set()


def test_this_processs_sinks_get_their_grace_however_long_the_child_took(
    default_judge: JudgeServer, make_judge: JudgeFactory
) -> None:
    """Before, the sinks here got what the child had left of ``timeout``: a sink whose
    close needs to run past the deadline was abandoned, as a hung one is. (``close``
    returns True only if the child, with nothing left to score, also answers within its
    graces, 6 s past the deadline: on a machine too loaded for that the test fails.)"""
    app = rag_app(default_judge, make_judge)
    sink = _SlowToClose()
    handler = RagMetricsCallbackHandler(metrics=[ContextRelevance()], sinks=[sink])
    assert isinstance(handler._background, ProcessRuntime)
    app.chain.invoke(question(0), config={"callbacks": [handler]})
    assert handler.flush(START)
    sink.until = time.monotonic() + 2.1  # past the deadline of the close below
    assert handler.close(timeout=2.0)
    assert sink.closed.is_set()
    assert [r.score for r in sink.results] == [0.5]
    assert handler.stats.sinks["_SlowToClose"].delivered == 1


def test_this_processs_sinks_are_closed_after_a_child_that_used_the_whole_budget(
    default_judge: JudgeServer, make_judge: JudgeFactory, release: threading.Event
) -> None:
    """With the judge held, the child uses its whole budget and its graces (or is killed
    past them, on a loaded machine); either way the sinks here then get their own grace.
    Before, they were abandoned with no time left: their ``close`` never ran."""
    app = rag_app(default_judge, make_judge)
    sink = _SlowToClose()
    handler = RagMetricsCallbackHandler(metrics=[ContextRelevance()], sinks=[sink])
    app.chain.invoke(question(0), config={"callbacks": [handler]})
    assert handler.flush(START)  # one scored, then one held
    default_judge.script = rag_router(RelevantSentences=lambda req: reply_hold(release, VERDICT))
    app.chain.invoke(question(1), config={"callbacks": [handler]})
    wait_until(lambda: default_judge.count("RelevantSentences") == 2, "the held request")
    assert handler.close(timeout=0.5) is False  # the held retrieval could not be scored
    stats = handler.stats
    assert (stats.abandoned, stats.processed) == (1, 1)
    assert sink.closed.is_set()  # closed in time, not left to its thread
    assert stats.sinks["_SlowToClose"].delivered == 1


SCRIPT = """
import logging
print("script body ran", flush=True)
from tests._support.rag import build_chain, corpus, make_retriever, question
from langchain_openai import ChatOpenAI
from langchain_ragmetrics import RagMetricsCallbackHandler

logging.basicConfig(level=logging.WARNING, format="%(name)s %(message)s")
logging.getLogger("langchain_ragmetrics.online").setLevel(logging.INFO)
handler = RagMetricsCallbackHandler(exit_timeout=600)  # a loaded machine starts slowly
print("mode:", "process" if handler.settings.process else "thread", flush=True)
llm = ChatOpenAI(model="answer", api_key="test", max_retries=0)
chain = build_chain(llm, make_retriever(corpus(30)))
print(chain.invoke(question(3), config={"callbacks": [handler]}), flush=True)
"""


def test_a_short_script_without_close_delivers_its_results_and_runs_once(
    default_judge: JudgeServer, tmp_path: Path
) -> None:
    script = tmp_path / "app.py"  # no `if __name__ == "__main__":` guard
    script.write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=2 * START,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "script body ran",  # once: the child never re-runs the application's script
        "mode: process",
        "Answer about item003.",
    ]
    results = [line for line in done.stderr.splitlines() if "ragmetrics context_" in line]
    assert len(results) == 2, done.stderr  # both default metrics, delivered at exit
    assert default_judge.count("RelevantSentences") == 1


def test_a_reset_with_retrievals_held_at_the_judge_adds_up_here_and_in_the_child(
    judge_server: JudgeServer, make_judge: JudgeFactory, release: threading.Event, tmp_path: Path
) -> None:
    """Reset while the child holds two retrievals at the judge: they are carried over, and
    the sinks here and in the child count the results produced after the reset only.
    Before, the carried retrievals counted processed and not sampled, for ever."""
    app = rag_app(judge_server, make_judge)
    judge_server.script = rag_router(RelevantSentences=lambda req: reply_hold(release, VERDICT))
    memory = InMemorySink()
    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance(llm=make_judge())],
        sinks=[memory, FileInChild(tmp_path / "child.jsonl")],
    )
    try:
        assert isinstance(handler._background, ProcessRuntime)
        for i in range(2):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        wait_until(
            lambda: judge_server.count("RelevantSentences") == 2, "both requests", timeout=START
        )
        handler.reset_stats()
        app.chain.invoke(question(2), config={"callbacks": [handler]})
        release.set()
        assert handler.flush(START)
        stats = handler.stats
    finally:
        release.set()
        handler.close(START)
    assert (stats.seen, stats.sampled, stats.processed, stats.scored) == (3, 3, 3, 3)
    assert stats.sinks["InMemorySink"] == stats.sinks["FileInChild"] == SinkStats(delivered=3)
    assert_identities(stats)


def test_a_reset_with_results_pending_in_sinks_here_and_in_the_child_adds_up(
    judge_server: JudgeServer, make_judge: JudgeFactory, release: threading.Event, tmp_path: Path
) -> None:
    """Reset while a sink here and one in the child hold two results each: those are left
    out of both sinks' figures (the child zeroes its own at the same moment as this process,
    see ``WasReset``). Before, their delivery after the reset counted in the sinks' figures
    and not in the results: the sinks' identity never held again."""
    app = rag_app(judge_server, make_judge)
    gate = tmp_path / "gate"
    entered = threading.Event()

    def held(item: OnlineResult) -> None:
        entered.set()
        release.wait()

    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance(llm=make_judge())],
        sinks=[CallableSink(held), HeldInChild(gate)],
    )
    keys = ("CallableSink", "HeldInChild")

    def both_hold_two() -> bool:
        sinks = handler.stats.sinks
        return all(sinks[key].pending == 2 for key in keys)

    try:
        assert isinstance(handler._background, ProcessRuntime)
        for i in range(2):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        wait_until(both_hold_two, "both sinks to hold both results", timeout=START)
        assert entered.wait(START)  # pending counts the results before the sink's thread
        handler.reset_stats()
        stats = handler.stats
        assert [stats.sinks[key] for key in keys] == [SinkStats(), SinkStats()]
        app.chain.invoke(question(2), config={"callbacks": [handler]})
        release.set()
        gate.touch()
        assert handler.flush(START)
        stats = handler.stats
    finally:
        release.set()
        gate.touch()
        handler.close(START)
    assert (stats.seen, stats.sampled, stats.processed, stats.scored) == (1, 1, 1, 1)
    assert [stats.sinks[key] for key in keys] == [SinkStats(delivered=1)] * 2
    assert_identities(stats)


def test_a_log_handler_that_stalls_on_the_outbox_warning_holds_up_no_application_call(
    judge_server: JudgeServer, make_judge: JudgeFactory, release: threading.Event
) -> None:
    """Results from the child were queued for this process's sinks, and the "not keeping
    up" warning logged, under the runtime's lock, which every retrieval of the application
    takes: a log handler that stalled stalled the application. Now it logs with no lock."""
    app = rag_app(judge_server, make_judge)
    held = threading.Event()
    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance(llm=make_judge())],
        sinks=[CallableSink(lambda item: held.wait())],
        sink_queue_size=1,
    )
    done = threading.Event()

    def call_and_read() -> None:
        app.chain.invoke(question(7), config={"callbacks": [handler]})
        assert handler.stats.traces == 7
        done.set()

    try:
        assert isinstance(handler._background, ProcessRuntime)
        with stalled_log("is not keeping up", release) as stalled:
            try:
                for i in range(6):  # one at the sink, one in its outbox of 1, the rest dropped
                    app.chain.invoke(question(i), config={"callbacks": [handler]})
                assert stalled.wait(START), "no result was dropped"
                threading.Thread(target=call_and_read, daemon=True).start()
                assert done.wait(START), "the application's call waited for the log handler"
            finally:
                release.set()
                held.set()
        assert handler.flush(START)
        stats = handler.stats
    finally:
        held.set()
        handler.close(START)
    assert stats.sinks["CallableSink"].dropped >= 1
    assert_identities(stats)


def test_a_reset_still_queued_when_a_close_gives_up_is_done(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    release: threading.Event,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reset queued behind the feeder, held in a user's hook that never returns, never
    reached the child; when close gave up on it, it was dropped: the figures of the period
    before it stayed. Now it is done then, before what close abandons is counted."""
    monkeypatch.setattr(_isolated, "_RESET_WAIT_SECONDS", 0.1)  # reset_stats waits no more
    app = rag_app(judge_server, make_judge)
    in_hook = threading.Event()

    def question_from(inputs: Any) -> str:
        if "item009" in str(inputs):
            in_hook.set()
            release.wait()  # no timeout bounds it: timeout=None
        return str(inputs)

    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance(llm=make_judge())], question_from=question_from, timeout=None
    )
    try:
        assert isinstance(handler._background, ProcessRuntime)
        for i in range(3):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert handler.flush(START)
        app.chain.invoke(question(9), config={"callbacks": [handler]})
        assert in_hook.wait(START)
        handler.reset_stats()  # queued behind the held feeder; it does not wait for it
        assert handler.stats.processed == 3  # not done yet
        assert not handler.close(1)
        stats = handler.stats
    finally:
        release.set()
        handler.close(START)
    assert (stats.traces, stats.processed, stats.scored) == (0, 0, 0)  # the new period
    assert (stats.seen, stats.sampled, stats.abandoned) == (1, 1, 1)  # the held retrieval
    assert_identities(stats)


def test_a_reset_from_a_users_hook_does_not_wait_on_the_thread_that_runs_it(
    judge_server: JudgeServer, make_judge: JudgeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``reset_stats()`` waits for the child's answer, which the feeder sends: called from
    a hook the feeder waits on, it waited its whole bound each time (5 s). Now, on the
    handler's own threads, it queues the reset and returns."""
    monkeypatch.setattr(_isolated, "_RESET_WAIT_SECONDS", 600.0)  # waiting would show
    app = rag_app(judge_server, make_judge)
    handler: RagMetricsCallbackHandler | None = None
    resets: list[str] = []

    def question_from(inputs: Any) -> str:
        assert handler is not None
        handler.reset_stats()
        resets.append(threading.current_thread().name)
        return str(inputs)

    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance(llm=make_judge())],
        sinks=[InMemorySink()],
        question_from=question_from,
    )
    try:
        assert isinstance(handler._background, ProcessRuntime)
        for i in range(3):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert handler.flush(START)
        stats = handler.stats
    finally:
        handler.close(START)
    assert len(resets) == 3
    assert stats.processed + stats.abandoned <= 3
    assert_identities(stats)


def test_a_hook_that_raises_system_exit_fails_only_its_retrieval(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    """A ``question_from`` that raised ``SystemExit`` (a ``sys.exit()`` deep in a user's
    code) ended the feeder thread silently: every later retrieval was stranded. Now it is
    that retrieval's error, as any exception of the user's is."""
    app = rag_app(judge_server, make_judge)

    def question_from(inputs: Any) -> str:
        if "item001" in str(inputs):
            raise SystemExit("user code called sys.exit()")
        return str(inputs)

    memory = InMemorySink()
    handler = RagMetricsCallbackHandler(
        metrics=[ContextRelevance(llm=make_judge())], sinks=[memory], question_from=question_from
    )
    try:
        assert isinstance(handler._background, ProcessRuntime)
        for i in range(4):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert handler.flush(START)
        stats = handler.stats
    finally:
        handler.close(START)
    assert (stats.processed, stats.scored, stats.failed) == (4, 3, 1)
    (failed,) = [r for r in memory.results if r.result.failed]
    assert failed.result.error is not None
    assert "question_from raised SystemExit: user code called sys.exit()" in failed.result.error
    assert_identities(stats)
