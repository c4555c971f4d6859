"""Interpreter exit flushes pending work (bounded), even of a handler the user dropped."""

import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import RagMetricsCallbackHandler
from langchain_ragmetrics.callbacks import _exit
from tests._support.openai_server import JudgeServer
from tests._support.rag import online_handler, question, rag_app

JudgeFactory = Callable[..., ChatOpenAI]
REPO = Path(__file__).resolve().parents[2]

APP = """
import gc
import sys
import threading
from langchain_openai import ChatOpenAI
from langchain_ragmetrics import CallableSink, ContextRelevance, JsonlSink, RetryPolicy
from tests._support.openai_server import JudgeServer, reply_hold
from tests._support.rag import build_chain, corpus, make_retriever, online_handler, question
from tests._support.rag import rag_router

mode, isolation = sys.argv[2], sys.argv[3]
hold = mode == "hold"
never = threading.Event()
overrides = {{"RelevantSentences": lambda req: reply_hold(never, {{}})}} if hold else {{}}
server = JudgeServer(rag_router(**overrides)).start()
llm = ChatOpenAI(model="judge-model", base_url=server.base_url, api_key="test", max_retries=0)
# A held judge request is still in flight at exit whatever the load: the exit hook, not the
# judge timeout, must bound the exit.
judge = ChatOpenAI(
    model="judge-model", base_url=server.base_url, api_key="test", timeout=60, max_retries=0
)
metrics = [ContextRelevance(llm=judge, retry=RetryPolicy(max_retries=0))]
chain = build_chain(llm, make_retriever(corpus(10)))
all_written = threading.Event()


class CountingJsonlSink(JsonlSink):
    # Sets all_written once it has the three results (hung-sink mode waits for that).

    written = 0

    def emit(self, item):
        super().emit(item)
        self.written += 1
        if self.written == 3:
            all_written.set()


sinks = [CountingJsonlSink(sys.argv[1])]
if mode == "hung-sink":
    sinks.append(CallableSink(lambda item: never.wait()))  # accepts and never returns


def serve():
    # The handler lives in a local variable only: nothing references it after this returns.
    handler = online_handler(
        llm, metrics=metrics, sinks=sinks, exit_timeout={exit_timeout}, isolation=isolation
    )
    print("runtime:", type(handler._background).__name__, file=sys.stderr, flush=True)
    for i in range(3):
        print(chain.invoke(question(i), config={{"callbacks": [handler]}}), flush=True)
    if mode == "hung-sink":
        # Scoring has finished and the healthy sink holds all three (however loaded the
        # machine): what the exit hook then faces is only the hung sink. The handler is kept
        # (a module-level reference, as an app's would be) so that the exit hook closes it.
        assert all_written.wait(60), "the three results never reached the JSONL sink"
        kept.append(handler)


kept = []


serve()
gc.collect()
# No flush and no close: the exit hook has to deliver (or give up within exit_timeout).
"""


def run_app(
    tmp_path: Path, mode: str, exit_timeout: float, isolation: str = "thread"
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(APP.format(exit_timeout=exit_timeout)), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, str(script), str(tmp_path / "scores.jsonl"), mode, isolation],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard, not a timing assertion
        check=False,
    )


def test_a_dropped_handlers_results_are_delivered_at_interpreter_exit(tmp_path: Path) -> None:
    done = run_app(tmp_path, "normal", exit_timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"Answer about item00{i}." for i in range(3)]
    lines = [json.loads(x) for x in (tmp_path / "scores.jsonl").read_text().splitlines()]
    assert sorted(x["question"] for x in lines) == [question(i) for i in range(3)]
    assert {x["score"] for x in lines} == {0.5}


@pytest.mark.parametrize(
    ("isolation", "runtime"), [("thread", "ThreadRuntime"), ("auto", "ProcessRuntime")]
)
def test_the_exit_flush_is_bounded_and_reports_what_was_left(
    tmp_path: Path, isolation: str, runtime: str
) -> None:
    """In both modes; before, the default mode (a scoring process) gave up without a word."""
    done = run_app(tmp_path, "hold", exit_timeout=0.5, isolation=isolation)
    assert done.returncode == 0, done.stderr
    assert f"runtime: {runtime}" in done.stderr
    warned = [line for line in done.stderr.splitlines() if "retrievals were still pending" in line]
    assert len(warned) == 1, done.stderr  # the exit's, not also the close's it runs
    assert "3 retrievals were still pending at interpreter exit" in warned[0]
    assert "counted in stats.abandoned" in warned[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "scores.jsonl").exists()


def test_a_hung_sink_does_not_hold_the_exit_and_is_reported(tmp_path: Path) -> None:
    done = run_app(tmp_path, "hung-sink", exit_timeout=1)
    assert done.returncode == 0, done.stderr
    # The other sink got every result; the hung one is named with what it did not deliver.
    lines = (tmp_path / "scores.jsonl").read_text().splitlines()
    assert len(lines) == 3
    assert "results not delivered" in done.stderr
    # One result inside its emit (in pending until that returns), the two queued dropped.
    assert "CallableSink: 2 dropped, 1 still being delivered" in done.stderr
    assert "Traceback" not in done.stderr


def test_exit_registration_follows_the_worker_lifetime(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    handler = online_handler(app.llm)
    background = handler._background
    assert not _exit.registered(background)  # nothing started yet
    app.chain.invoke(question(1), config={"callbacks": [handler]})
    assert _exit.registered(background)  # held strongly while its threads run
    _exit.flush_all()  # what the exit hook runs: closes it within its exit_timeout
    assert handler.stats.processed == 1
    assert handler.stats.sinks["InMemorySink"].delivered == 1
    assert not _exit.registered(background)
    assert handler.close(10)  # idempotent

    opted_out = online_handler(app.llm, exit_timeout=None)
    app.chain.invoke(question(2), config={"callbacks": [opted_out]})
    assert not _exit.registered(opted_out._background)
    assert opted_out.close(10)


def test_a_dropped_handler_is_collected_and_its_threads_finish(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    handler: RagMetricsCallbackHandler | None = online_handler(app.llm)
    assert handler is not None
    app.chain.invoke(question(1), config={"callbacks": [handler]})
    prefix = f"{handler.name}-"
    sink = handler.sinks[0]
    background = handler._background
    ref = weakref.ref(handler)
    del handler
    gc.collect()
    assert ref() is None  # neither the worker nor the exit registry keeps the handler alive
    for thread in [t for t in threading.enumerate() if t.name.startswith(prefix)]:
        thread.join(10)
        assert not thread.is_alive(), f"{thread.name} did not exit"
    # The queued work was finished before the threads exited, and nothing is left to flush.
    assert len(sink.results) == 1  # type: ignore[attr-defined]
    assert not _exit.registered(background)


class _Closing:
    """An exit-hook target whose close waits until every other one is closing too."""

    def __init__(self, exit_timeout: float, together: threading.Barrier) -> None:
        self.exit_timeout = exit_timeout
        self.together = together
        self.given: float | None = None

    def _flush_at_exit(self, timeout: float) -> None:
        self.given = timeout
        self.together.wait()  # breaks (after its hang guard) unless all close at once


def test_handlers_are_closed_at_exit_at_once_each_within_its_own_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each close adds its graces past its budget (stop the worker, close the sinks, kill a
    child): closed one after another, three hung handlers with ``exit_timeout=2`` held the
    exit 9 s. Closed at once, the exit takes as long as the slowest of them."""
    together = threading.Barrier(3, timeout=30)  # a hang guard, not a measure
    targets = [_Closing(2, together), _Closing(2, together), _Closing(5, together)]
    monkeypatch.setattr(_exit, "_live", {id(t): t for t in targets})
    _exit.flush_all()
    assert [t.given for t in targets] == [2, 2, 5]
    assert not together.broken


class _Stuck:
    """An exit-hook target whose close does not keep its bound (a bug: it waits for ever)."""

    exit_timeout = 0.0

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def _flush_at_exit(self, timeout: float) -> None:
        self.entered.set()
        self.release.wait()


def test_a_close_that_does_not_keep_its_bound_does_not_hold_the_exit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stuck = _Stuck()
    monkeypatch.setattr(_exit, "_live", {id(stuck): stuck})
    monkeypatch.setattr(_exit, "_SLACK_SECONDS", 0.0)
    try:
        _exit.flush_all()  # returns, with the close still stuck (before: joined for ever)
        assert stuck.entered.wait(30)  # its close did start, on a thread of its own
    finally:
        stuck.release.set()
