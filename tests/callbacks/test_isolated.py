"""The isolated mode: scoring in a child process, fed plain data, supervised by the parent.

Each test drives the real chain with the real handler (``isolation=ProcessIsolation(...)``)
against the loopback judge; the child builds its metrics and sinks from a setup in
``tests/_support/isolated_setups.py`` and writes results to a JSONL file the test reads.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tracers import LangChainTracer
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from langchain_ragmetrics import ContextRelevance, RagMetricsCallbackHandler
from langchain_ragmetrics._retrieval import Capture, Retrieval
from langchain_ragmetrics._threads import DaemonThreadPool
from langchain_ragmetrics.callbacks import ProcessIsolation, ScoringSetup
from langchain_ragmetrics.callbacks._isolated import ProcessRuntime
from langchain_ragmetrics.callbacks._launch import ScriptProcess
from langchain_ragmetrics.callbacks._messages import FlushRequest
from langchain_ragmetrics.callbacks._settings import HandlerSettings
from langchain_ragmetrics.callbacks._stats import Counters, FailureLog
from tests._support import isolated_setups
from tests._support.captures import make_capture
from tests._support.concurrency import wait_until
from tests._support.langsmith_stub import LangSmithStub
from tests._support.openai_server import JudgeServer, reply_hold
from tests._support.rag import RagApp, question, rag_app, rag_router

JudgeFactory = Callable[..., ChatOpenAI]

VERDICT = {"relevant_sentence_indices": [0], "reason": "held"}
START = 120.0
"""Generous bound for a child's start (a fresh interpreter importing the judge stack on a
loaded machine) plus its work."""
CEILING = 30.0
"""Generous ceiling on calls that must be bounded (close with a hung child)."""


@pytest.fixture
def jsonl(tmp_path: Path) -> Path:
    return tmp_path / "scores.jsonl"


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def background(handler: RagMetricsCallbackHandler) -> ProcessRuntime:
    found = handler._background
    assert isinstance(found, ProcessRuntime)
    return found


def isolated_handler(setup: Any, **options: Any) -> RagMetricsCallbackHandler:
    hang = options.pop("hang_timeout", 60.0)
    niceness = options.pop("niceness", 10)
    idle = options.pop("idle_priority", True)
    isolation = ProcessIsolation(
        setup=setup, hang_timeout=hang, niceness=niceness, idle_priority=idle
    )
    return RagMetricsCallbackHandler(isolation=isolation, **options)


def run_app(*args: str) -> subprocess.CompletedProcess[str]:
    """``python *args`` from the repository root, as a user's app with no judge or LangSmith
    settings in its environment; it must exit 0."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LANGSMITH_"))}
    env["PYTHONPATH"] = str(root)  # a script's own directory comes first on its path
    done = subprocess.run(
        [sys.executable, *args],
        cwd=root,
        env=env,
        timeout=300,
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done


def ask(app: RagApp, handler: RagMetricsCallbackHandler, items: range) -> list[str]:
    return [app.chain.invoke(question(i), config={"callbacks": [handler]}) for i in items]


def policies(pid: int) -> set[int]:
    """The scheduling policies of every thread of process ``pid`` (Linux)."""
    return {os.sched_getscheduler(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


@pytest.mark.parametrize("idle", [True, False], ids=["idle_priority", "niceness only"])
def test_the_childs_scoring_threads_give_way_to_any_other_thread(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    jsonl: Path,
    idle: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before, the child only had ``nice 10``, with which a scoring thread finishes its time
    slice before a request's thread gets the CPU (the online p99 probe: the caller waited
    for a CPU 2 to 4 ms while the child ran). Its scoring threads now run under SCHED_IDLE,
    while the heartbeat and the priority guard keep the normal policy (a starved heartbeat
    would get the child killed as hung; the guard lifts SCHED_IDLE while the CPUs are
    saturated: tests/callbacks/test_priority.py)."""
    app = rag_app(judge_server, make_judge)
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    caplog.set_level(logging.DEBUG, logger="langchain_ragmetrics")  # the child mirrors it
    with isolated_handler(setup, idle_priority=idle) as handler:
        ask(app, handler, range(2))
        assert handler.flush(START)
        pid = background(handler).child_pid
        assert pid is not None
        found = policies(pid)
    assert handler.stats.scored == 2
    assert os.SCHED_OTHER in found  # the heartbeat
    # On a machine busy enough to starve them, the guard had put them back under the normal
    # policy when they were looked at: it says so in the log, which is then read instead.
    lifted = any("the CPUs are saturated" in r.getMessage() for r in caplog.records)
    assert (os.SCHED_IDLE in found or lifted) is idle


def test_results_are_scored_in_the_child_and_reach_its_sink(
    judge_server: JudgeServer, make_judge: JudgeFactory, jsonl: Path
) -> None:
    app = rag_app(judge_server, make_judge)
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    with isolated_handler(setup) as handler:
        answers = ask(app, handler, range(4))
        assert handler.flush(START)
        stats = handler.stats
        pid = background(handler).child_pid
        assert pid is not None
        niceness = os.getpriority(os.PRIO_PROCESS, pid)  # scoring yields to the app
        assert niceness == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10)
    assert answers == [f"Answer about item00{i}." for i in range(4)]
    assert pid is not None
    assert pid != os.getpid()
    assert (handler.metrics, handler.sinks, handler.engine) == ([], [], None)
    assert (stats.traces, stats.sampled, stats.processed, stats.scored, stats.queued) == (
        4,
        4,
        4,
        4,
        0,
    )
    assert stats.usage.judge_calls == judge_server.count("RelevantSentences") == 4
    records = lines(jsonl)
    assert sorted(r["question"] for r in records) == [question(i) for i in range(4)]
    for record in records:
        asked = record["question"].split()[-1].rstrip("?")
        assert record["answer"] == f"Answer about {asked}."
        assert asked in record["contexts"][0]  # the retrieval's own documents, in order
        assert record["context_ids"][0].startswith("fact-")
        assert record["metric"] == "context_relevance"
        assert record["score"] == 0.5  # one of the two retrieved facts names the item
    assert background(handler).child_pid is None  # closed: the child exited


def test_hooks_run_in_this_process_off_the_callers_thread_and_their_errors_reach_the_result(
    judge_server: JudgeServer, make_judge: JudgeFactory, jsonl: Path
) -> None:
    # The hooks read the live root input and output, so they run in this process; on a
    # helper of the feeder's, so that they cost the caller nothing and one that hangs holds
    # the feeder for `timeout` at most.
    app = rag_app(judge_server, make_judge)
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    callers: list[tuple[int, str]] = []

    def question_from(inputs: Any) -> str:
        callers.append((os.getpid(), threading.current_thread().name))
        if "item001" in inputs:
            msg = "no question in this input"
            raise ValueError(msg)
        return f"Asked: {inputs}"

    with isolated_handler(setup, question_from=question_from) as handler:
        ask(app, handler, range(2))
        assert handler.flush(START)
        stats = handler.stats
    by_query = {r["error"] is None: r for r in lines(jsonl)}
    assert [pid for pid, _ in callers] == [os.getpid()] * 2
    assert all(name.endswith("-hooks") for _, name in callers), callers
    assert by_query[True]["question"] == f"Asked: {question(0)}"
    assert by_query[False]["error"] == (
        "HookError: question_from raised ValueError: no question in this input"
    )
    assert (stats.scored, stats.failed) == (1, 1)


def test_a_hook_that_never_returns_holds_the_feeder_but_not_the_caller_flush_or_close(
    judge_server: JudgeServer, make_judge: JudgeFactory, jsonl: Path, release: threading.Event
) -> None:
    # The feeder waits for a user's hook up to `timeout` (120 s here): one that blocks (a
    # lock, a network call with no timeout) stops the conversions meanwhile, never the app's
    # calls, and flush and close still return by their deadlines, saying what was left.
    app = rag_app(judge_server, make_judge)
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    entered = threading.Event()

    def question_from(inputs: Any) -> str:
        entered.set()
        release.wait()
        return str(inputs)

    handler = isolated_handler(setup, question_from=question_from)
    try:
        answers = ask(app, handler, range(3))  # returns: the hook runs on the feeder
        assert len(answers) == 3
        assert entered.wait(START), "the feeder never ran the hook"
        started = time.monotonic()
        assert handler.flush(0.2) is False
        assert handler.close(0.2) is False
        assert time.monotonic() - started < CEILING
        stats = handler.stats
        assert (stats.sampled, stats.scored, stats.dropped) == (3, 0, 0)
        assert (stats.abandoned, stats.pending_at_deadline, stats.queued) == (3, 3, 0), stats
    finally:
        release.set()
    # Once the hook returns, the feeder drops the batch close already counted, and exits.
    feeder = background(handler)._feeder
    assert feeder is not None
    feeder.join(CEILING)
    assert not feeder.is_alive()
    assert (handler.stats.abandoned, handler.stats.scored) == (3, 0)
    assert background(handler).children_started == 0
    assert lines(jsonl) == []


def test_a_hook_past_the_timeout_fails_its_retrieval_and_the_feeder_goes_on(
    judge_server: JudgeServer, make_judge: JudgeFactory, jsonl: Path, release: threading.Event
) -> None:
    """The feeder waits for a user's hook at most `timeout`, then sends that retrieval with
    an error and goes on with the next ones. Before, it waited for the hook as long as the
    hook took (here: until the end of the test), and nothing was scored."""
    app = rag_app(judge_server, make_judge)
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))

    def question_from(inputs: Any) -> str:
        if inputs == question(0):
            release.wait()  # until the test ends: only the timeout ends the feeder's wait
        return f"Asked: {inputs}"

    with isolated_handler(setup, question_from=question_from, timeout=4.0) as handler:
        assert len(ask(app, handler, range(3))) == 3
        assert handler.flush(START) is True
        stats = handler.stats
    rows = {r["question"]: r for r in lines(jsonl)}
    # the query stands for the question, as for a hook that raised
    assert sorted(rows) == sorted([question(0), *(f"Asked: {question(i)}" for i in (1, 2))])
    assert rows[question(0)]["error"] == "HookError: question_from did not return within 4s"
    assert all(rows[f"Asked: {question(i)}"]["error"] is None for i in (1, 2))
    assert (stats.processed, stats.scored, stats.failed) == (3, 2, 1)


def test_the_feeder_hands_a_batch_to_the_hooks_helper_once_and_a_hang_costs_one_retrieval(
    monkeypatch: pytest.MonkeyPatch, release: threading.Event
) -> None:
    """The feeder's conversion of a batch (``_plain``) with a user's function: one task for
    the helper per batch, controls kept in place. Before, one task (and a wait, two thread
    wake-ups) per retrieval: 5 and 5 here instead of 1 and 2. A hang in the middle still
    costs its retrieval only, the rest go to a new helper. No child: nothing is submitted."""
    handed: list[DaemonThreadPool] = []
    submit = DaemonThreadPool.submit

    def counted(pool: DaemonThreadPool, fn: Callable[..., Any], /, *args: Any) -> Future[Any]:
        if pool.name == "feeder-batch-hooks":
            handed.append(pool)
        return submit(pool, fn, *args)

    monkeypatch.setattr(DaemonThreadPool, "submit", counted)

    def question_from(inputs: Any) -> str:
        if inputs["question"] == "held":
            release.wait()  # only the timeout ends the feeder's wait
        return f"asked {inputs['question']}"

    judge = ChatOpenAI(model="judge", api_key=SecretStr("unused"), base_url="http://127.0.0.1:9/v1")
    settings = HandlerSettings(
        metrics=[ContextRelevance(llm=judge)],
        name="feeder-batch",
        question_from=question_from,
        timeout=1.0,
    )
    runtime = ProcessRuntime(
        settings, ProcessIsolation(), counters=Counters(), failures=FailureLog()
    )
    hooks = runtime._hooks
    assert hooks is not None

    def captured(*names: str) -> list[Capture]:
        return [make_capture(n, (f"doc {n}",), root_inputs={"question": n}) for n in names]

    flush = FlushRequest(1, None)
    try:
        first = runtime._plain([*captured("a", "b"), flush, *captured("c", "d", "e")])
        assert [e.question if isinstance(e, Retrieval) else e for e in first] == [
            "asked a",
            "asked b",
            flush,
            "asked c",
            "asked d",
            "asked e",
        ]
        assert len(handed) == 1
        second = runtime._plain(captured("f", "g", "held", "h", "i"))
        assert [e.question for e in second if isinstance(e, Retrieval)] == [
            "asked f",
            "asked g",
            "held",
            "asked h",
            "asked i",
        ]
        held = second[2]
        assert isinstance(held, Retrieval)
        assert held.error == "question_from did not return within 1s"
        assert len(handed) == 3  # that batch, then its rest to a new helper
        assert handed[0] is handed[1] is not handed[2]
    finally:
        release.set()
        hooks.stop()


def test_flush_or_close_from_a_hook_is_refused_not_deadlocked(
    judge_server: JudgeServer, make_judge: JudgeFactory, jsonl: Path
) -> None:
    """The hooks' helper is one of the handler's own threads: a flush from there would wait
    for the feeder, which waits for the helper; it is refused at once, as from a sink."""
    app = rag_app(judge_server, make_judge)
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    outcomes: list[bool] = []
    holder: list[RagMetricsCallbackHandler] = []

    def question_from(inputs: Any) -> str:
        outcomes.append(holder[0].flush(60))
        outcomes.append(holder[0].close(60))
        return str(inputs)

    with isolated_handler(setup, question_from=question_from) as handler:
        holder.append(handler)
        ask(app, handler, range(1))
        assert handler.flush(START)
        assert not handler.closed
    assert outcomes == [False, False]
    assert [r["question"] for r in lines(jsonl)] == [question(0)]


class _Unreadable:
    """A retrieved item that cannot be turned into text (its ``__str__`` raises)."""

    def __str__(self) -> str:
        msg = "unreadable document"
        raise RuntimeError(msg)


def test_a_retrieval_that_cannot_be_made_plain_is_counted_and_the_others_are_scored(
    judge_server: JudgeServer, make_judge: JudgeFactory, jsonl: Path
) -> None:
    # The conversion runs on the feeder thread: a retrieval it cannot convert is a handler
    # error there, the caller's call returns normally and the next retrieval is scored.
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    class Mixed(BaseRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            if query == "bad":
                return [_Unreadable()]  # type: ignore[list-item]
            return [Document(page_content=f"Facts about {query}.")]

    rag_app(judge_server, make_judge)  # scripts the judge
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    with isolated_handler(setup) as handler:
        for query in ("bad", "good"):
            Mixed().invoke(query, config={"callbacks": [handler]})
        assert handler.flush(START)
        stats = handler.stats
    assert [r["question"] for r in lines(jsonl)] == ["good"]
    assert (stats.handler_errors, stats.scored, stats.dropped) == (1, 1, 0)
    # Counted as processed, as the thread runtime counts a retrieval whose scoring raised:
    # before, it was in none of the buckets and the identity did not hold.
    assert (stats.sampled, stats.processed, stats.queued, stats.abandoned) == (2, 2, 0, 0)


def test_values_of_classes_from_the_apps_main_are_scored_as_their_text(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    jsonl: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ``str`` enum in the run metadata, a query and an answer of a ``str`` type, all from
    the app's ``__main__`` (a script, a notebook): the child, a fresh interpreter, cannot
    import them. Before, their pickles crashed it, 25 ordinary retrievals sent with them
    were lost, and four such crashes turned scoring off for the process's life."""
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda

    main = sys.modules["__main__"]

    class Tier(str, enum.Enum):
        GOLD = "gold"

    class Text(str):
        pass

    for cls in (Tier, Text):  # as if the app's script had defined them
        cls.__module__, cls.__qualname__ = "__main__", cls.__name__
        monkeypatch.setattr(main, cls.__name__, cls, raising=False)

    class Facts(BaseRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            return [Document(page_content=f"Facts about {query}.")]

    chain = RunnableLambda(lambda q: Facts().invoke(q)) | RunnableLambda(
        lambda docs: Text(f"Answer from {len(docs)} document.")
    )
    rag_app(judge_server, make_judge)  # scripts the judge
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    with isolated_handler(setup) as handler:
        for i in range(3):
            config = {"callbacks": [handler], "metadata": {"tier": Tier.GOLD}, "tags": [Text("t")]}
            chain.invoke(Text(f"item00{i}"), config=config)
        chain.invoke("item003", config={"callbacks": [handler]})  # an ordinary one after them
        assert handler.flush(START)
        stats = handler.stats
        children = background(handler)._children
    records = lines(jsonl)
    assert sorted(r["question"] for r in records) == [f"item00{i}" for i in range(4)]
    assert {r["answer"] for r in records} == {"Answer from 1 document."}
    assert sorted(r["tags"] for r in records) == [[], ["t"], ["t"], ["t"]]
    assert (stats.scored, stats.abandoned, stats.handler_errors) == (4, 0, 0)
    assert children == 1  # one child served them all: none crashed


def test_a_killed_child_is_counted_and_replaced(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    jsonl: Path,
    release: threading.Event,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = rag_app(judge_server, make_judge)
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    handler = isolated_handler(setup)
    judge_server.script = rag_router(RelevantSentences=lambda req: reply_hold(release, VERDICT))
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        ask(app, handler, range(3))
        wait_until(
            lambda: judge_server.count("RelevantSentences") == 3,
            "the held judge calls",
            timeout=START,
        )
        pid = background(handler).child_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_until(
            lambda: handler.stats.abandoned == 3, "the parent to notice the death", timeout=START
        )
        assert handler.stats.queued == 0
        release.set()
        judge_server.script = rag_router()
        answers = ask(app, handler, range(3, 5))  # the app goes on; a new child scores
        assert handler.flush(START)
    stats = handler.stats
    assert handler.close(CEILING)
    assert answers == ["Answer about item003.", "Answer about item004."]
    assert background(handler).children_started == 2
    assert (stats.sampled, stats.abandoned, stats.processed, stats.scored) == (5, 3, 2, 2)
    assert stats.sampled == stats.dropped + stats.processed + stats.queued + stats.abandoned
    assert sorted(r["question"] for r in lines(jsonl)) == [question(3), question(4)]
    deaths = [r for r in caplog.records if "3 retrievals lost" in r.getMessage()]
    assert len(deaths) == 1


def test_scoring_turned_off_after_too_many_crashes_is_a_warning_of_its_own(
    caplog: pytest.LogCaptureFixture,
    release: threading.Event,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    jsonl: Path,
) -> None:
    """Two children killed in a row with ``max_restarts=1``: the second death turns scoring
    off. Before, that was said under the first death's log-once kind, so only at DEBUG."""
    app = rag_app(judge_server, make_judge)
    judge_server.script = rag_router(RelevantSentences=lambda req: reply_hold(release, VERDICT))
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    handler = RagMetricsCallbackHandler(isolation=ProcessIsolation(setup=setup, max_restarts=1))
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        for crash in (1, 2):
            ask(app, handler, range(crash, crash + 1))
            wait_until(
                lambda n=crash: judge_server.count("RelevantSentences") == n,
                "the held judge call",
                timeout=START,
            )
            pid = background(handler).child_pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)  # before it finished anything: a crash in a row
            wait_until(
                lambda n=crash: handler.stats.abandoned == n, "the death noticed", timeout=START
            )
        ask(app, handler, range(3, 4))  # scoring is off: dropped
        assert handler.close(CEILING)
    stats = handler.stats
    assert (stats.sampled, stats.abandoned, stats.dropped, stats.processed) == (3, 2, 1, 0)
    assert background(handler).children_started == 2
    died = [r for r in caplog.records if "the scoring process exited" in r.getMessage()]
    assert [r.levelno for r in died] == [logging.WARNING] * 2
    assert "a new one starts with the next retrieval" in died[0].getMessage()
    assert "1 retrievals lost; online scoring is off (2 crashes in a row" in died[1].getMessage()


def test_a_child_that_dies_by_itself_mid_run_is_replaced(
    judge_server: JudgeServer, make_judge: JudgeFactory, jsonl: Path, tmp_path: Path
) -> None:
    app = rag_app(judge_server, make_judge)
    marker = tmp_path / "die-now"
    setup = partial(
        isolated_setups.kill_on_emit_setup, judge_server.base_url, str(jsonl), str(marker)
    )
    with isolated_handler(setup) as handler:
        ask(app, handler, range(2))
        assert handler.flush(START)
        marker.touch()  # the next result kills the child inside its sink
        ask(app, handler, range(2, 3))
        assert handler.flush(START) is False  # the child died holding that retrieval
        ask(app, handler, range(3, 5))
        assert handler.flush(START)
        stats = handler.stats
    assert not marker.exists()
    # Each sink has its own outbox in the child: retrieval 2 was scored and handed to the
    # sinks before one of them killed the process. Whether the child reported it processed
    # before dying is a race; either way it is accounted for exactly once.
    assert stats.sampled == 5
    assert stats.processed + stats.abandoned == 5
    assert stats.abandoned in (0, 1)
    written = {r["question"] for r in lines(jsonl)}
    assert {question(i) for i in (0, 1, 3, 4)} <= written <= {question(i) for i in range(5)}


def test_a_silent_child_is_killed_and_replaced(
    judge_server: JudgeServer, make_judge: JudgeFactory, jsonl: Path
) -> None:
    app = rag_app(judge_server, make_judge)
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    # 8 s, at normal priority: a healthy child (this one before the stop, and its
    # replacement) reports every 1 s, so only a starved machine could make it look hung.
    with isolated_handler(setup, hang_timeout=8.0, niceness=0) as handler:
        ask(app, handler, range(1))
        assert handler.flush(START)
        pid = background(handler).child_pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # hung: alive, but silent
        ask(app, handler, range(1, 3))
        assert handler.flush(0.2) is False  # bounded: the child cannot answer
        assert handler.stats.pending_at_deadline == 2
        wait_until(
            lambda: handler.stats.abandoned == 2, "the parent to give up on it", timeout=START
        )
        ask(app, handler, range(3, 4))  # starts a replacement
        assert handler.flush(START)
        assert background(handler).children_started == 2
        stats = handler.stats
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the hung child was killed and reaped
    assert (stats.processed, stats.abandoned) == (2, 2)
    assert sorted(r["question"] for r in lines(jsonl)) == [question(0), question(3)]


class _StuckPipe:
    """The parent's end of a full pipe to a child that reads no more: a send blocks until
    the child exits, then fails as a broken pipe (what the kernel does)."""

    def __init__(self, conn: Any, process: Any) -> None:
        self._conn, self._process = conn, process
        self.blocked = threading.Event()

    def send_bytes(self, data: bytes) -> None:
        self.blocked.set()
        self._process.join()
        raise BrokenPipeError(32, "Broken pipe")

    def close(self) -> None:
        self._conn.close()


def test_a_close_that_gives_up_starts_no_new_child(
    judge_server: JudgeServer, make_judge: JudgeFactory, jsonl: Path
) -> None:
    """The feeder is blocked sending to a child that reads no more, with retrievals queued
    behind it. close() gives up at its deadline and kills the child; the feeder, free again,
    must abandon what is queued, not start a new child to score it after close() returned
    (with paid judge calls, and at exit a process that outlives the application)."""
    app = rag_app(judge_server, make_judge)
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    handler = isolated_handler(setup)
    runtime = background(handler)
    ask(app, handler, range(1))
    assert handler.flush(START)
    child = runtime._child
    assert child is not None
    stuck = child.send = _StuckPipe(child.send, child.process)  # type: ignore[assignment]
    ask(app, handler, range(1, 2))
    assert stuck.blocked.wait(CEILING), "the feeder never sent"
    ask(app, handler, range(2, 4))  # queued behind the blocked send
    assert runtime._queue.size == 2
    assert handler.close(1.0) is False
    feeder = runtime._feeder
    assert feeder is not None
    feeder.join(CEILING)
    assert not feeder.is_alive()
    assert runtime.children_started == 1
    stats = handler.stats
    assert (stats.sampled, stats.processed, stats.abandoned, stats.queued) == (4, 1, 3, 0)
    assert [r["question"] for r in lines(jsonl)] == [question(0)]


class _FailingPipe(_StuckPipe):
    """A pipe end whose send fails with an error other than OSError: what a send meets when
    another thread closed the connection under it (``write(None, ...)``: TypeError)."""

    def send_bytes(self, data: bytes) -> None:
        self.blocked.set()
        raise TypeError("'NoneType' object cannot be interpreted as an integer")


def test_a_send_that_fails_in_any_way_counts_the_child_dead_and_the_feeder_goes_on(
    judge_server: JudgeServer, make_judge: JudgeFactory, jsonl: Path
) -> None:
    app = rag_app(judge_server, make_judge)
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    with isolated_handler(setup) as handler:
        runtime = background(handler)
        ask(app, handler, range(1))
        assert handler.flush(START)
        child = runtime._child
        assert child is not None
        failing = child.send = _FailingPipe(child.send, child.process)  # type: ignore[assignment]
        ask(app, handler, range(1, 2))
        assert failing.blocked.wait(CEILING)
        wait_until(lambda: handler.stats.abandoned == 1, "the child counted dead")
        ask(app, handler, range(2, 3))  # a new child scores it: the feeder lived on
        assert handler.flush(START)
        assert runtime.children_started == 2
        stats = handler.stats
    assert (stats.sampled, stats.processed, stats.abandoned) == (3, 2, 1)
    assert sorted(r["question"] for r in lines(jsonl)) == [question(0), question(2)]


def test_a_message_from_the_child_that_cannot_be_read_is_reported_and_skipped(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    jsonl: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """E.g. a result holding an exception whose class cannot be rebuilt here: the listener
    reports it and reads on (before, it died, and nothing read the child's pipe again)."""
    from langchain_ragmetrics.callbacks import _isolated
    from langchain_ragmetrics.callbacks._messages import Report

    loads = pickle.loads
    spoiled = threading.Event()

    def spoil_one_report(data: bytes) -> Any:
        message = loads(data)
        if isinstance(message, Report) and not spoiled.is_set():
            spoiled.set()
            raise TypeError("__init__() missing 1 required positional argument: 'code'")
        return message

    monkeypatch.setattr(_isolated.pickle, "loads", spoil_one_report)
    app = rag_app(judge_server, make_judge)
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    with (
        caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"),
        isolated_handler(setup) as handler,
    ):
        ask(app, handler, range(1))
        assert spoiled.wait(START), "the child sent no report"  # one every 0.2 s when busy
        ask(app, handler, range(1, 2))
        assert handler.flush(START)
        child = background(handler)._child
        assert child is not None
        assert child.listener is not None
        assert child.listener.is_alive()
        stats = handler.stats
    assert (stats.processed, stats.abandoned, background(handler).children_started) == (2, 0, 1)
    warned = [r.getMessage() for r in caplog.records if "could not be read" in r.getMessage()]
    assert len(warned) == 1
    assert "missing 1 required positional argument" in warned[0]


def test_the_childs_pipe_ends_are_not_inherited_by_what_it_starts(
    judge_server: JudgeServer, make_judge: JudgeFactory, jsonl: Path
) -> None:
    """A process the child's setup or sinks start (os.system, close_fds=False) must not hold
    the pipes, or the parent would not see the child's end until the hang timeout."""
    app = rag_app(judge_server, make_judge)
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    with isolated_handler(setup) as handler:
        ask(app, handler, range(1))
        assert handler.flush(START)
        pid = background(handler).child_pid
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        fds = [int(arg) for arg in argv[-5:-2]]  # bootstrap's recv, send and alive fds
        for fd in fds:
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text(encoding="utf-8")
            flags = next(line for line in info.splitlines() if line.startswith("flags:"))
            assert int(flags.split()[1], 8) & os.O_CLOEXEC, (fd, flags)


@pytest.mark.parametrize("dead", [False, True])
def test_a_retrieval_that_cannot_be_pickled_is_counted_once(
    judge_server: JudgeServer, jsonl: Path, dead: bool
) -> None:
    """Sent without it, counted an error and abandoned; but a child that died meanwhile
    counted everything sent to it abandoned already, so it is not counted again."""
    from langchain_ragmetrics._retrieval import Retrieval
    from langchain_ragmetrics.callbacks._isolated import _Child
    from langchain_ragmetrics.callbacks._messages import ScoreItems

    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    handler = isolated_handler(setup)  # no child is started: nothing is submitted
    runtime = background(handler)
    child = _Child(process=None, send=None, recv=None, sent=2, dead=dead)  # type: ignore[arg-type]
    good = Retrieval("a query")
    bad = good._replace(metadata={"lock": threading.Lock()})
    data = runtime._pickle_each(child, ScoreItems([good, bad]), TypeError("cannot pickle"))
    assert pickle.loads(data).items == [good]
    stats = handler.stats
    assert (stats.handler_errors, stats.abandoned, child.sent) == ((1, 0, 2) if dead else (1, 1, 1))
    assert handler.close(CEILING)


def test_the_childs_reporter_reads_and_sends_its_counters_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The counters are read and sent under the channel's ordering lock (as a Flushed or
    Closed answer is), so an older report cannot land after a newer answer."""
    from langchain_ragmetrics.callbacks import _child
    from langchain_ragmetrics.callbacks._stats import Counters

    monkeypatch.setattr(_child, "_REPORT_EVERY_SECONDS", 0.0)
    held: list[tuple[str, bool]] = []

    class Conn:
        def send(self, message: object) -> None:
            held.append((type(message).__name__, channel.in_order.locked()))

    channel = _child._Channel(Conn())  # type: ignore[arg-type]
    stop = threading.Event()

    def read() -> Any:
        held.append(("read", channel.in_order.locked()))
        stop.set()  # one round
        return Counters().snapshot(queued=0, open_traces=0), []

    _child._report(channel, read, stop, 0.0, None)
    assert held == [("read", True), ("Report", True)]


def test_close_is_bounded_when_the_child_hangs(
    judge_server: JudgeServer, make_judge: JudgeFactory, jsonl: Path
) -> None:
    app = rag_app(judge_server, make_judge)
    setup = partial(isolated_setups.hanging_sink_setup, judge_server.base_url, str(jsonl))
    handler = isolated_handler(setup, hang_timeout=None)
    ask(app, handler, range(2))
    # Sinks have their own outboxes: the hung sink holds up neither scoring nor the JSONL sink.
    wait_until(lambda: len(lines(jsonl)) == 2, "the other sink to get both results", timeout=START)
    wait_until(
        lambda: handler.stats.processed == 2, "the child to report them processed", timeout=START
    )

    def sinks_reported() -> bool:  # the sinks' figures come in a later report of the child
        figures = handler.stats.sinks
        hung = figures.get("CallableSink")
        jsonl_sink = figures.get("JsonlSink")
        return (
            hung is not None
            and jsonl_sink is not None
            and hung.dropped + hung.pending == 2
            and jsonl_sink.delivered == 2
        )

    wait_until(sinks_reported, "the child to report the sinks' figures", timeout=START)
    pid = background(handler).child_pid
    started = time.monotonic()
    assert handler.close(timeout=1.0) is False  # the hung sink cannot close in time
    assert time.monotonic() - started < CEILING
    stats = handler.stats
    assert (stats.abandoned, stats.queued, stats.processed) == (0, 0, 2)
    hung = stats.sinks["CallableSink"]
    assert (hung.delivered, hung.dropped + hung.pending) == (0, 2)  # its results, lost
    assert stats.sinks["JsonlSink"].delivered == 2
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert ask(app, handler, range(1))  # closed: the app still works, the work is dropped
    assert handler.stats.dropped == 1


def test_a_full_queue_drops_the_newest_and_the_identity_holds(
    judge_server: JudgeServer, make_judge: JudgeFactory, jsonl: Path, release: threading.Event
) -> None:
    app = rag_app(judge_server, make_judge)
    judge_server.script = rag_router(RelevantSentences=lambda req: reply_hold(release, VERDICT))
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    with isolated_handler(setup, max_queue_size=3, max_concurrency=1) as handler:
        ask(app, handler, range(8))
        stats = handler.stats
        assert (stats.sampled, stats.queued, stats.dropped) == (8, 3, 5)
        release.set()
        assert handler.flush(START)
        stats = handler.stats
    assert (stats.processed, stats.dropped, stats.queued, stats.abandoned) == (3, 5, 0, 0)
    assert sorted(r["question"] for r in lines(jsonl)) == [question(i) for i in range(3)]


@pytest.mark.parametrize("then", ["answered late", "child killed"])
def test_a_flush_that_gave_up_keeps_nothing_of_its_late_answer(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    jsonl: Path,
    release: threading.Event,
    then: str,
) -> None:
    app = rag_app(judge_server, make_judge)
    judge_server.script = rag_router(RelevantSentences=lambda req: reply_hold(release, VERDICT))
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    with isolated_handler(setup) as handler:
        runtime = background(handler)
        ask(app, handler, range(1))
        wait_until(lambda: judge_server.count("RelevantSentences") == 1, "the held call")
        assert handler.flush(0.2) is False  # the judge holds the only call
        if then == "answered late":
            release.set()
            # The child answers the flushes in order, so the first answer was read by now.
            assert handler.flush(START)
        else:
            pid = runtime.child_pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: handler.stats.abandoned == 1, "the death", timeout=START)
            release.set()
        with runtime._cond:
            assert (runtime._flushed, runtime._waiting) == ({}, set())


def test_a_listener_that_cannot_start_stops_and_releases_its_child(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    jsonl: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No thread for the listener (a thread limit, interpreter shutdown): nothing would read
    or release the child, so the spawn stops and releases it, and scoring turns off."""
    from langchain_ragmetrics.callbacks import _isolated

    started: list[Any] = []
    start_child = _isolated.start_child

    def recorded(*args: Any, **kwargs: Any) -> Any:
        found = start_child(*args, **kwargs)
        started.append(found[0])
        return found

    thread_start = threading.Thread.start

    def no_listener(thread: threading.Thread) -> None:
        if thread.name.endswith("-listener"):
            raise RuntimeError("can't start new thread")
        thread_start(thread)

    monkeypatch.setattr(_isolated, "start_child", recorded)
    monkeypatch.setattr(threading.Thread, "start", no_listener)
    app = rag_app(judge_server, make_judge)
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        handler = isolated_handler(setup)
        assert ask(app, handler, range(1))
        wait_until(lambda: handler.stats.abandoned == 1, "the spawn to give up")
        assert ask(app, handler, range(1, 2))  # scoring is off: dropped, the app unharmed
        assert handler.close(CEILING)
    stats = handler.stats
    assert (stats.sampled, stats.abandoned, stats.dropped, stats.processed) == (2, 1, 1, 0)
    [process] = started
    assert isinstance(process, ScriptProcess)
    assert process.exitcode is not None  # stopped and reaped...
    assert process.sentinel == -1  # ...and released
    warned = [r.getMessage() for r in caplog.records if "listener thread" in r.getMessage()]
    assert len(warned) == 1
    assert "can't start new thread" in warned[0]


def test_a_failing_setup_turns_scoring_off_with_one_warning(
    judge_server: JudgeServer, make_judge: JudgeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app = rag_app(judge_server, make_judge)
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        handler = isolated_handler(isolated_setups.crashing_setup)
        ask(app, handler, range(1))
        wait_until(lambda: handler.stats.abandoned == 1, "the setup failure", timeout=START)
        answers = ask(app, handler, range(1, 3))
        assert handler.flush(CEILING)
        assert handler.close(CEILING)
    stats = handler.stats
    assert answers == ["Answer about item001.", "Answer about item002."]
    assert (stats.sampled, stats.abandoned, stats.dropped, stats.processed) == (3, 1, 2, 0)
    warnings = [r.getMessage() for r in caplog.records if "scoring process" in r.getMessage()]
    assert len(warnings) == 1
    assert "RuntimeError: no judge configured for this test" in warnings[0]


def test_default_setup_uses_the_environments_judge_and_logs_in_the_parent(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = rag_app(judge_server, make_judge)
    monkeypatch.setenv("OPENAI_BASE_URL", judge_server.base_url)  # the child inherits it
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    with (
        caplog.at_level(logging.INFO, logger="langchain_ragmetrics"),
        RagMetricsCallbackHandler(isolation="process") as handler,
    ):
        ask(app, handler, range(1))
        assert handler.flush(START)
        stats = handler.stats
    assert (stats.scored, stats.processed) == (2, 1)  # relevance and precision
    logged = [r for r in caplog.records if r.getMessage().startswith("ragmetrics context_")]
    assert sorted(r.name for r in logged) == ["langchain_ragmetrics.online"] * 2
    assert {r.ragmetrics["question"] for r in logged} == {question(0)}  # type: ignore[attr-defined]
    assert all(r.processName != "MainProcess" for r in logged)


def test_a_setup_defined_in_the_users_script_runs_in_a_multiprocessing_child(
    judge_server: JudgeServer, tmp_path: Path
) -> None:
    """A setup the script itself defines needs the script's ``__main__`` in the child: the
    child is then a ``multiprocessing`` spawn (not the ``subprocess`` one); it scores, and is
    reaped and released when the handler closes."""
    jsonl = tmp_path / "scores.jsonl"
    script = tmp_path / "app.py"
    script.write_text(
        f"""
from langchain_openai import ChatOpenAI
from langchain_ragmetrics import RagMetricsCallbackHandler
from langchain_ragmetrics.callbacks import ProcessIsolation
from langchain_ragmetrics.callbacks._isolated import ProcessRuntime
from tests._support import isolated_setups
from tests._support.rag import build_chain, corpus, make_retriever, question


def setup():
    return isolated_setups.jsonl_setup({judge_server.base_url!r}, {str(jsonl)!r})


if __name__ == "__main__":
    llm = ChatOpenAI(model="m", base_url={judge_server.base_url!r}, api_key="test")
    chain = build_chain(llm, make_retriever(corpus(10)))
    handler = RagMetricsCallbackHandler(isolation=ProcessIsolation(setup=setup))
    for i in range(2):
        chain.invoke(question(i), config={{"callbacks": [handler]}})
    assert handler.flush(120)
    runtime = handler._background
    assert isinstance(runtime, ProcessRuntime)
    child = runtime._child
    print(type(child.process).__module__, type(child.process).__name__)
    assert handler.close(60)
    child.listener.join(60)
    assert not child.listener.is_alive()
    print("released", child.process._closed)  # Process.close() ran
""",
        encoding="utf-8",
    )
    judge_server.script = rag_router()
    done = run_app(str(script))
    assert done.stdout.splitlines() == ["multiprocessing.context SpawnProcess", "released True"]
    assert sorted(r["question"] for r in lines(jsonl)) == [question(0), question(1)]


@pytest.mark.parametrize("reference", ["kept", "dropped"])
def test_the_exit_hook_flushes_the_child(
    reference: str, judge_server: JudgeServer, tmp_path: Path
) -> None:
    """Exit waits (bounded) for the child, whether the handler is still referenced or not."""
    jsonl = tmp_path / "scores.jsonl"
    drop = (
        "del handler  # collected: the child's own exit registration is left"
        if (reference == "dropped")
        else ""
    )
    script = f"""
from functools import partial
from langchain_openai import ChatOpenAI
from langchain_ragmetrics import RagMetricsCallbackHandler
from langchain_ragmetrics.callbacks import ProcessIsolation
from tests._support import isolated_setups
from tests._support.rag import build_chain, corpus, make_retriever, question

llm = ChatOpenAI(model="m", base_url={judge_server.base_url!r}, api_key="test")
chain = build_chain(llm, make_retriever(corpus(10)))
setup = partial(isolated_setups.jsonl_setup, {judge_server.base_url!r}, {str(jsonl)!r})
handler = RagMetricsCallbackHandler(isolation=ProcessIsolation(setup=setup), exit_timeout=120)
for i in range(2):
    chain.invoke(question(i), config={{"callbacks": [handler]}})
{drop}
"""
    judge_server.script = rag_router()
    run_app("-c", script)
    assert sorted(r["question"] for r in lines(jsonl)) == [question(0), question(1)]


FORK_SCRIPT = """
import os, sys
from langchain_openai import ChatOpenAI
from langchain_ragmetrics import ContextRelevance, InMemorySink, RagMetricsCallbackHandler
from tests._support.rag import build_chain, corpus, make_retriever, question

base_url, isolation = sys.argv[1], sys.argv[2]
judge = ChatOpenAI(model="m", base_url=base_url, api_key="test", max_retries=0, timeout=30)
chain = build_chain(judge, make_retriever(corpus(10)))
memory = InMemorySink()
options = {} if isolation == "auto" else {"isolation": isolation}
metrics = [ContextRelevance(llm=judge)]
handler = RagMetricsCallbackHandler(metrics=metrics, sinks=[memory], **options)
chain.invoke(question(0), config={"callbacks": [handler]})  # a warm-up before the fork
assert handler.flush(120)
parent_runtime = type(handler._background).__name__
pid = os.fork()
if pid == 0:  # a pre-forking server's worker
    for i in range(1, 4):
        chain.invoke(question(i), config={"callbacks": [handler]})
    flushed = handler.flush(120)
    stats = handler.stats
    closed = handler.close(60)
    held = len(memory.results)
    print("worker", flushed, closed, stats.sampled, stats.processed, held, flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert status == 0, status
chain.invoke(question(4), config={"callbacks": [handler]})  # the parent's runtime still works
assert handler.flush(120)
stats = handler.stats
print("parent", handler.close(60), parent_runtime, stats.sampled, stats.processed, flush=True)
"""


@pytest.mark.parametrize("isolation", ["auto", "thread"])
def test_a_forked_worker_scores_with_a_runtime_of_its_own(
    judge_server: JudgeServer, tmp_path: Path, isolation: str
) -> None:
    """A handler that ran before a fork (gunicorn --preload with a warm-up, Celery prefork):
    the worker's copy starts afresh, scores its own traffic and leaves the parent's child
    process alone; before, its flush and close waited for threads that did not exist."""
    judge_server.script = rag_router()
    script = tmp_path / "app.py"
    script.write_text(FORK_SCRIPT, encoding="utf-8")
    done = run_app(str(script), judge_server.base_url, isolation)
    runtime = "ProcessRuntime" if isolation == "auto" else "ThreadRuntime"
    # the worker's copy of the sink holds the parent's one result, then its own three
    assert done.stdout.splitlines() == ["worker True True 3 3 4", f"parent True {runtime} 2 2"]
    assert judge_server.count("RelevantSentences") == 5


FORK_SINK_SCRIPT = """
import os, sys, threading
from langchain_openai import ChatOpenAI
from langchain_ragmetrics import ContextRelevance, LangSmithFeedbackSink, RagMetricsCallbackHandler
from tests._support.rag import build_chain, corpus, make_retriever, question

judge_url, langsmith_url = sys.argv[1], sys.argv[2]
judge = ChatOpenAI(model="m", base_url=judge_url, api_key="test", max_retries=0, timeout=30)
chain = build_chain(judge, make_retriever(corpus(10)))
sink = LangSmithFeedbackSink(project_name="app", api_url=langsmith_url, api_key="test")
metrics = [ContextRelevance(llm=judge)]
handler = RagMetricsCallbackHandler(metrics=metrics, sinks=[sink], isolation="thread")
sink._project_lock.acquire()  # a project lookup under way on a thread of the parent's
pid = os.fork()
if pid == 0:
    chain.invoke(question(1), config={"callbacks": [handler]})
    flushed = handler.flush(60)
    stats = handler.stats.sinks["LangSmithFeedbackSink"]
    print("worker", flushed, stats.delivered, stats.dropped, stats.errors, flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert status == 0, status
"""


def test_a_forked_workers_sinks_drop_what_the_parent_held(
    judge_server: JudgeServer, langsmith_stub: LangSmithStub
) -> None:
    """The parent held the LangSmith sink's project lock (a lookup under way) when it
    forked: the worker's sink starts afresh. Before, every send in the worker waited on
    that lock for good."""
    judge_server.script = rag_router()
    langsmith_stub.feedback_needs_run = False
    langsmith_stub.create_project("app")
    done = run_app("-c", FORK_SINK_SCRIPT, judge_server.base_url, langsmith_stub.url)
    assert done.stdout.splitlines() == ["worker True 1 0 0"], done.stderr
    assert len(langsmith_stub.feedback()) == 1


def test_options_are_checked_in_the_application(judge_server: JudgeServer) -> None:
    def local_setup() -> ScoringSetup:  # a local function cannot be pickled
        return ScoringSetup()

    with pytest.raises(ValueError, match="picklable"):
        ProcessIsolation(setup=local_setup)
    with pytest.raises(ValueError, match="cannot be found"):
        ProcessIsolation(setup="tests._support.isolated_setups:missing")
    with pytest.raises(ValueError, match="module:function"):
        ProcessIsolation(setup="no_colon_here")
    with pytest.raises(ValueError, match="`metrics` is built in the child"):
        RagMetricsCallbackHandler(isolation="process", metrics=[ContextRelevance()])
    with pytest.raises(TypeError, match="trace_judge"):
        RagMetricsCallbackHandler(isolation="process", trace_judge=LangChainTracer())
    with pytest.raises(TypeError, match="isolation"):
        RagMetricsCallbackHandler(isolation="processes")  # type: ignore[arg-type]
    handler = RagMetricsCallbackHandler(isolation="process")
    assert isinstance(handler._background, ProcessRuntime)
    assert handler.flush(1)  # nothing was started
    assert handler.close(1)
    assert background(handler).children_started == 0


def test_a_setup_of_the_wrong_type_is_reported(
    judge_server: JudgeServer, make_judge: JudgeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app = rag_app(judge_server, make_judge)
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        handler = isolated_handler("tests._support.isolated_setups:setup_that_returns_nothing")
        ask(app, handler, range(1))
        wait_until(lambda: handler.stats.abandoned == 1, "the setup failure", timeout=START)
        assert handler.close(CEILING)
    assert any("must return a ScoringSetup" in r.getMessage() for r in caplog.records)


def test_a_retrieval_from_a_live_trace_keeps_only_plain_data() -> None:
    from langchain_core.documents import Document
    from langchain_core.messages import AIMessage

    from langchain_ragmetrics._retrieval import Retrieval, RetrievedDocument
    from tests._support.captures import make_capture

    lock = threading.Lock()
    capture = make_capture(
        "q?",
        [
            Document(page_content="a", id="d1"),
            Document(page_content="b", metadata={"id": "d2", "lock": lock}),
        ],
        tags=("t",),
        metadata={"reference": "ref", "reference_context_ids": ["d1"], "user": 7, "x": lock},
        root_metadata={"tenant": "acme", "client": object()},
        root_inputs={"question": "What is a?"},
        root_outputs={"messages": [AIMessage(content="It is a.")]},
    )

    def broken(_output: Any) -> str:
        msg = "no answer here"
        raise KeyError(msg)

    item = Retrieval.from_trace(capture, question_from="input")
    assert item.question == "What is a?"
    assert item.answer == "It is a."
    assert item.documents == (RetrievedDocument("a", "d1"), RetrievedDocument("b", "d2"))
    assert item.metadata == {
        "tenant": "acme",
        "reference": "ref",
        "reference_context_ids": ["d1"],
        "user": 7,
    }
    assert (item.reference, item.reference_context_ids) == ("ref", ("d1",))
    assert item.tags == ("t",)
    assert item.error is None
    assert pickle.loads(pickle.dumps(item)) == item
    failed = Retrieval.from_trace(capture, answer_from=broken)
    assert failed.question == "q?"  # the query, as question_from="query" says
    assert failed.error == "answer_from raised KeyError: 'no answer here'"


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("reset_between", [False, True])
def test_a_report_read_after_the_childs_death_moves_its_retrievals_out_of_abandoned(
    judge_server: JudgeServer, make_judge: JudgeFactory, jsonl: Path, reset_between: bool
) -> None:
    """close() gives up on a child that does not settle in time and counts what it held as
    abandoned at once; the child's report of those retrievals, still in the pipe, is read
    after that. It counts them processed and no longer abandoned: each retrieval is counted
    once. Before, both counted (processed + abandoned above sampled), and the listener then
    died on the sentinel close() had closed (ValueError in its thread); the sentinel is now
    the listener's to release. With the counters
    reset in between, the abandoned count it would correct is gone: nothing is taken off,
    and the retrievals, which end in the new period, are carried into it as sampled (before,
    they counted processed and not sampled: the identity never held again)."""
    from langchain_ragmetrics.callbacks._messages import Closed, Flushed, Report, Results

    app = rag_app(judge_server, make_judge)
    setup = partial(isolated_setups.jsonl_setup, judge_server.base_url, str(jsonl))
    handler = isolated_handler(setup)
    runtime = background(handler)
    holding, hold = threading.Event(), threading.Event()
    handle = runtime._handle

    def held_handle(child: Any, message: Any) -> None:
        reports = (Results, Report, Flushed, Closed)
        stats = getattr(message, "stats", None)
        if isinstance(message, reports) and stats is not None and stats.processed:
            holding.set()  # the listener reads nothing more until the test lets it
            hold.wait(CEILING)
        handle(child, message)

    runtime._handle = held_handle  # type: ignore[method-assign]
    try:
        ask(app, handler, range(2))
        assert holding.wait(START), "the child never reported a processed retrieval"
        child = runtime._child
        assert child is not None
        # Both scored (their reports wait in the pipe) before close gives up on the child.
        wait_until(lambda: len(lines(jsonl)) == 2, "both results written", timeout=START)
        assert handler.close(1.0) is False  # not settled in time: killed, counted abandoned
        assert handler.stats.abandoned == 2
        assert isinstance(child.process, ScriptProcess)
        assert child.process.exitcode is not None  # killed and reaped by close()...
        assert child.process.sentinel >= 0  # ...yet the fd the listener waits on stays open
        if reset_between:
            handler.reset_stats()
    finally:
        hold.set()
    wait_until(lambda: handler.stats.processed == 2, "the late report", timeout=CEILING)
    assert child.listener is not None
    child.listener.join(CEILING)
    assert not child.listener.is_alive()
    assert child.process.sentinel == -1  # released by the listener, once done with it
    stats = handler.stats
    assert (stats.sampled, stats.processed, stats.abandoned) == (2, 2, 0)
    assert stats.sampled == stats.dropped + stats.processed + stats.queued + stats.abandoned
