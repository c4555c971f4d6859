"""``evaluate(..., workers=N)``: the parent and its workers share one feed of jobs.

Where a test needs one side to score (or not), it holds the other at a seam: the parent's own
scoring (``_Pool.run_own``) waits for an event, or the worker's entry point is replaced by a
function of this module that the spawned child imports. No test waits on luck.

The tests that matter run under both start methods (``start_method`` fixture, set through
``$RAGMETRICS_START_METHOD``): this test process runs other threads (the judge server's), so
left alone it would always spawn. The automatic choice itself, and a fork from a truly
single-threaded process, are checked in fresh interpreters.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import json
import logging
import math
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig
from langchain_openai import ChatOpenAI
from typing_extensions import override

from langchain_ragmetrics import (
    ContextPrecision,
    ContextRecall,
    MetricResult,
    RagSample,
    VerdictCache,
)
from langchain_ragmetrics._cli._common import ExitCode
from langchain_ragmetrics._cli._evaluate import _workers_arg
from langchain_ragmetrics._engine import Job, JobFeed, ScoringEngine
from langchain_ragmetrics._schema import coerce_sample
from langchain_ragmetrics._transient import is_transient, transient_thread
from langchain_ragmetrics.evaluation import _run as run_module
from langchain_ragmetrics.evaluation import _workers as workers_module
from langchain_ragmetrics.evaluation import evaluate
from langchain_ragmetrics.evaluation._recipe import JudgeRecipe, ScoringRecipe, _RecipeError
from langchain_ragmetrics.evaluation._workers import START_METHOD_ENV, start_method, worker_count
from langchain_ragmetrics.metrics import _base as metrics_base
from tests._support.judges import payload
from tests._support.lexical_judge import lexical_judge
from tests._support.openai_server import JudgeRequest, JudgeServer
from tests._support.processes import interrupt_when
from tests.test_cli import clean_env

# The CLI from this interpreter and tree (the shared venv's console script may be stale).
RAGMETRICS = [
    sys.executable,
    "-c",
    "import sys; from langchain_ragmetrics._cli import main; sys.exit(main())",
]

METRICS = [ContextRecall(), ContextPrecision()]
REPO = Path(__file__).resolve().parents[2]


def run_python(*args: str, method: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python args`` with this tree importable and no keys; it must exit 0.

    ``method`` sets the workers' start method (None: the package's own choice).
    """
    env = {**clean_env(), "PYTHONPATH": str(REPO)}
    if method is None:
        env.pop(START_METHOD_ENV, None)
    else:
        env[START_METHOD_ENV] = method
    proc = subprocess.run(
        [sys.executable, *args],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc


def rows(count: int) -> list[dict[str, Any]]:
    """Distinct rows whose lexical scores differ from row to row."""
    return [
        {
            "question": f"Who wrote paper {i}?",
            "contexts": [
                f"Einstein wrote paper {i} in {1900 + i}.",
                "Paris is the capital of France.",
            ][:: 1 if i % 2 else -1],
            "reference": f"Einstein wrote paper {i}. It appeared in {1900 + i}."
            + (" Bohr replied." if i % 3 == 0 else ""),
        }
        for i in range(count)
    ]


def scores(result: Any, metric: str) -> list[float]:
    return [round(s, 6) for s in result[metric]]


HOLD_S = 120.0  # an upper bound on waiting for a spawned worker, never reached when all is well


@pytest.fixture(params=["fork", "spawn"])
def start_method_used(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """Workers start this way in the test (forced: this process runs other threads)."""
    method: str = request.param
    monkeypatch.setenv(START_METHOD_ENV, method)
    methods: list[str] = []
    original = workers_module._Pool.start_workers

    def start_workers(self: Any) -> None:
        original(self)
        methods.extend(type(w.process).__name__ for w in self.workers)

    monkeypatch.setattr(workers_module._Pool, "start_workers", start_workers)
    yield method
    assert methods, "no worker was started"
    assert set(methods) == {f"{method.capitalize()}Process"}, methods


def hold_parent(monkeypatch: pytest.MonkeyPatch, until: threading.Event | None) -> None:
    """The parent's own scoring starts only once ``until`` is set (None: it scores nothing)."""
    original = workers_module._Pool.run_own

    def run_own(self: Any) -> None:
        if until is None:
            return
        until.wait(HOLD_S)
        original(self)

    monkeypatch.setattr(workers_module._Pool, "run_own", run_own)


def watch_workers(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Record what the parent hears from its workers: results, and workers that exited."""
    seen: dict[str, Any] = {
        "results": 0,
        "first_result": threading.Event(),
        "retired": threading.Event(),
        "exit_codes": [],
    }
    handle, retire = workers_module._Pool._handle, workers_module._Pool._retire

    def on_message(self: Any, worker: Any, message: tuple[Any, ...]) -> None:
        handle(self, worker, message)
        if message[0] == "results":
            seen["results"] += len(message[1])
            seen["first_result"].set()

    def on_retire(self: Any, worker: Any) -> None:
        retire(self, worker)
        seen["exit_codes"].append(worker.process.exitcode)
        seen["retired"].set()

    monkeypatch.setattr(workers_module._Pool, "_handle", on_message)
    monkeypatch.setattr(workers_module._Pool, "_retire", on_retire)
    return seen


WORKER_MAIN = workers_module._worker_main
"""The real entry point (a forked child inherits the test's replacement of the module's)."""


def never_ready(recipe: ScoringRecipe, conn: Any, control: Any) -> None:
    """A worker that never comes up: it waits for the parent to stop it (spawned child)."""
    del recipe, conn
    with contextlib.suppress(EOFError, OSError):
        control.recv()


def dies_on_first_jobs(recipe: ScoringRecipe, conn: Any, control: Any) -> None:
    """A worker that SIGKILLs itself the moment its first jobs arrive (spawned child)."""

    def add(self: Any, jobs: Any) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    JobFeed.add = add  # type: ignore[method-assign]
    WORKER_MAIN(recipe, conn, control)


def test_the_parent_and_a_worker_give_the_same_results_in_input_order(
    judge_server: JudgeServer,
    make_judge: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    start_method_used: str,
) -> None:
    judge_server.script = lexical_judge()
    data = rows(12)
    one = evaluate(data, METRICS, llm=make_judge(), workers=1, show_progress=False)
    requests_one = judge_server.count()
    seen = watch_workers(monkeypatch)
    hold_parent(monkeypatch, seen["first_result"])  # both sides score: the worker first
    delivered: list[tuple[int, str]] = []
    two = evaluate(
        data,
        METRICS,
        llm=make_judge(),
        workers=2,
        max_concurrency=4,
        show_progress=False,
        on_result=lambda row, name, _: delivered.append((row, name)),
    )
    assert seen["results"] >= 1  # the worker scored some
    assert type(two) is type(one)
    assert two.metrics == one.metrics
    for name in one.metrics:
        assert scores(two, name) == scores(one, name)
        assert not any(math.isnan(s) for s in scores(two, name))
    assert [r.sample.question for r in two.rows] == [r["question"] for r in data]
    assert sorted(delivered) == sorted((r, m) for r in range(12) for m in one.metrics)  # once
    assert two.usage.judge_calls == one.usage.judge_calls == requests_one
    assert judge_server.count() == 2 * requests_one  # no job scored twice
    assert not two.interrupted
    assert not multiprocessing.active_children()


def test_the_parent_scores_every_job_when_no_worker_comes_up(
    judge_server: JudgeServer,
    make_judge: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    start_method_used: str,
) -> None:
    judge_server.script = lexical_judge()
    monkeypatch.setattr(workers_module, "_worker_main", never_ready)
    started: list[int] = []
    original = workers_module._Pool.start_workers

    def start_workers(self: Any) -> None:
        original(self)
        started.extend(w.process.pid for w in self.workers)

    monkeypatch.setattr(workers_module._Pool, "start_workers", start_workers)
    result = evaluate(
        rows(10), METRICS, llm=make_judge(), workers=3, max_concurrency=6, show_progress=False
    )
    assert len(started) == 2  # two workers were started, and neither ever asked for a job
    assert all(r.status(m) == "scored" for r in result.rows for m in result.metrics)
    assert judge_server.count() == 20
    assert not result.interrupted
    assert not multiprocessing.active_children()  # the waiting workers were ended


def test_the_verdict_cache_is_shared_across_processes(
    tmp_path: Path,
    judge_server: JudgeServer,
    make_judge: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    start_method_used: str,
) -> None:
    judge_server.script = lexical_judge()
    path = tmp_path / "verdicts.sqlite3"
    data = rows(6)
    mine = VerdictCache(path)
    with monkeypatch.context() as patch:
        hold_parent(patch, None)  # the worker scores every job and fills the file
        first = evaluate(
            data, METRICS, llm=make_judge(), cache=mine, workers=2, show_progress=False
        )
    assert first.usage.cache_misses == judge_server.count() == 12
    # The worker's lookups count on the caller's object too (before: 0 and 0).
    assert (mine.hits, mine.misses) == (0, 12)
    here = evaluate(data, METRICS, llm=make_judge(), cache=VerdictCache(path), workers=1)
    assert here.usage.cache_hits == 12  # this process reads what the worker wrote
    hold_parent(monkeypatch, None)
    again = evaluate(data, METRICS, llm=make_judge(), cache=mine, workers=2, show_progress=False)
    assert again.usage.cache_hits == 12
    assert (mine.hits, mine.misses) == (12, 12)
    assert judge_server.count() == 12  # every later answer came from the shared file
    assert scores(again, "context_recall") == scores(first, "context_recall")


def test_a_dead_workers_jobs_go_back_to_the_feed_and_are_scored_once(
    judge_server: JudgeServer,
    make_judge: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    start_method_used: str,
) -> None:
    judge_server.script = lexical_judge()
    monkeypatch.setattr(workers_module, "_worker_main", dies_on_first_jobs)
    seen = watch_workers(monkeypatch)
    hold_parent(monkeypatch, seen["retired"])  # the parent starts once the worker is dead
    delivered: list[tuple[int, str]] = []
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        result = evaluate(
            rows(10),
            [ContextRecall()],
            llm=make_judge(),
            workers=2,
            max_concurrency=4,
            show_progress=False,
            on_result=lambda r, n, _: delivered.append((r, n)),
        )
    assert seen["exit_codes"] == [-signal.SIGKILL]  # it died holding jobs
    said = [r.getMessage() for r in caplog.records if "a worker process (pid" in r.getMessage()]
    assert len(said) == 1, said  # before, a death went unsaid
    assert " was killed by SIGKILL; the results it sent are kept, its " in said[0]
    assert "unfinished jobs go back to the other processes; the judge calls it made " in said[0]
    assert said[0].endswith(" are not in the run's usage")  # the judge saw calls we cannot count
    assert sorted(delivered) == [(r, "context_recall") for r in range(10)]  # once each
    assert all(r.status("context_recall") == "scored" for r in result.rows)
    assert judge_server.count() == 10  # the dead worker sent nothing, the parent the rest
    assert not result.interrupted


def test_a_frozen_worker_is_ended_and_its_jobs_are_scored_by_the_others(
    judge_server: JudgeServer,
    make_judge: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker that holds jobs and sends nothing for far longer than a job may take (here
    stopped by SIGSTOP before its first jobs, as a deadlock or a hung extension would leave
    it) is killed, and its jobs are scored by the others. Before, the run waited for it for
    ever, whatever the timeout."""
    judge_server.script = lexical_judge()
    monkeypatch.setenv(START_METHOD_ENV, "fork")
    monkeypatch.setattr(workers_module, "_STALL_GRACE_S", 0.5)
    frozen: list[int] = []
    send_jobs = workers_module._Pool._send_jobs

    def freeze_then_send(self: Any, worker: Any, count: int) -> None:
        if not frozen:  # its first jobs arrive in a stopped process
            frozen.append(worker.process.pid)
            os.kill(worker.process.pid, signal.SIGSTOP)
        send_jobs(self, worker, count)

    monkeypatch.setattr(workers_module._Pool, "_send_jobs", freeze_then_send)
    seen = watch_workers(monkeypatch)
    hold_parent(monkeypatch, seen["retired"])  # the parent scores once the worker is ended
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        result = evaluate(
            rows(6), [ContextRecall()], llm=make_judge(), workers=2, max_concurrency=4,
            timeout=1, show_progress=False,
        )  # fmt: skip
    assert len(frozen) == 1
    assert seen["exit_codes"] == [-signal.SIGKILL]
    assert all(r.status("context_recall") == "scored" for r in result.rows)
    assert judge_server.count() == 6  # the frozen worker sent nothing
    said = [r.getMessage() for r in caplog.records if "has sent nothing" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith(f"a worker process (pid {frozen[0]}) holds ")
    assert "longer than a job may take (timeout 1s): it was ended" in said[0]
    assert not multiprocessing.active_children()


def test_a_job_held_only_by_frozen_workers_fails_saying_so(
    judge_server: JudgeServer,
    make_judge: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The job's error names the silence that ended its worker, not the SIGKILL it took."""
    judge_server.script = lexical_judge()
    monkeypatch.setenv(START_METHOD_ENV, "fork")
    monkeypatch.setattr(workers_module, "_STALL_GRACE_S", 0.5)
    monkeypatch.setattr(workers_module, "WORKER_RESTARTS", 0)
    send_jobs = workers_module._Pool._send_jobs

    def freeze_then_send(self: Any, worker: Any, count: int) -> None:
        os.kill(worker.process.pid, signal.SIGSTOP)  # every worker is stopped on its jobs
        send_jobs(self, worker, count)

    monkeypatch.setattr(workers_module._Pool, "_send_jobs", freeze_then_send)
    seen = watch_workers(monkeypatch)
    hold_parent(monkeypatch, seen["retired"])
    result = evaluate(
        rows(6), [ContextRecall()], llm=make_judge(), workers=2, max_concurrency=4,
        timeout=1, show_progress=False,
    )  # fmt: skip
    assert seen["exit_codes"] == [-signal.SIGKILL]
    errors = [r.results["context_recall"].error for r in result.rows]
    failed = [e for e in errors if e]
    assert failed, errors
    assert all("was ended after sending nothing for over 2 s (frozen)" in e for e in failed)
    assert all("SIGKILL" not in e for e in failed)
    assert not multiprocessing.active_children()


def test_a_worker_is_not_ended_for_silence_without_a_timeout() -> None:
    """Without a timeout a job may take any time: silence says nothing, no worker is ended."""
    from langchain_ragmetrics.metrics import NonLLMContextRecall

    pool = workers_module._Pool(
        samples=[], metrics=[NonLLMContextRecall()], engine=ScoringEngine(),
        recipe=ScoringRecipe([NonLLMContextRecall()]), processes=2, stop=threading.Event(),
    )  # fmt: skip
    assert pool.stall_s is None
    timed = workers_module._Pool(
        samples=[], metrics=[NonLLMContextRecall()], engine=ScoringEngine(timeout=30),
        recipe=ScoringRecipe([NonLLMContextRecall()]), processes=2, stop=threading.Event(),
    )  # fmt: skip
    assert timed.stall_s == 30 + max(workers_module._STALL_GRACE_S, 30)


def test_a_job_whose_holders_all_die_fails_with_the_cause(
    judge_server: JudgeServer,
    make_judge: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    start_method_used: str,
) -> None:
    monkeypatch.setattr(workers_module, "WORKER_RESTARTS", 0)
    judge_server.script = lexical_judge()
    monkeypatch.setattr(workers_module, "_worker_main", dies_on_first_jobs)
    seen = watch_workers(monkeypatch)
    hold_parent(monkeypatch, seen["retired"])
    result = evaluate(
        rows(10),
        [ContextRecall()],
        llm=make_judge(),
        workers=2,
        max_concurrency=4,
        show_progress=False,
    )
    failed = [row.results["context_recall"] for row in result.rows]
    errors = [r.error for r in failed if r is not None and r.error]
    assert len(errors) == 1  # its one job (a quarter of its 2 slots, rounded up) failed
    assert "WorkerDiedError" in errors[0], errors
    assert "SIGKILL" in errors[0], errors
    assert all(r is not None for r in failed)  # every job accounted for
    assert sum(s is not None and not math.isnan(s) for s in result["context_recall"]) == 9


@pytest.mark.parametrize("live", ["function", "ctypes pointer"])  # AttributeError, ValueError
def test_a_row_that_cannot_be_pickled_is_scored_by_the_parent(
    judge_server: JudgeServer,
    make_judge: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    start_method_used: str,
    live: str,
) -> None:
    """A row holding a live object (kept in its metadata) cannot go to a worker: the parent
    scores it, the run gives what workers=1 gives, and says so once. Before, the parent's
    message thread died on the pickling error and evaluate() never returned; and a pickling
    error that is a ValueError (a ctypes pointer) was taken for a worker gone: its jobs
    stayed with a worker that never got them, and evaluate() waited for them for ever."""
    judge_server.script = lexical_judge()
    data = rows(6)
    for i in (1, 4):
        data[i]["handle"] = (lambda: None) if live == "function" else ctypes.pointer(ctypes.c_int())
    served = threading.Event()
    send_jobs = workers_module._Pool._send_jobs

    def on_more(self: Any, worker: Any, count: int) -> None:
        send_jobs(self, worker, count)
        served.set()

    monkeypatch.setattr(workers_module._Pool, "_send_jobs", on_more)
    seen = watch_workers(monkeypatch)
    hold_parent(monkeypatch, seen["retired"])  # the worker takes every job it can
    with caplog.at_level(logging.DEBUG, logger="langchain_ragmetrics"):
        result = evaluate(
            data, [ContextRecall()], llm=make_judge(), workers=2, max_concurrency=4,
            show_progress=False,
        )  # fmt: skip
    assert served.is_set()
    assert seen["results"] == 4  # the worker scored the four that could cross
    alone = evaluate(data, [ContextRecall()], llm=make_judge(), show_progress=False)
    assert scores(result, "context_recall") == scores(alone, "context_recall")
    assert all(r.status("context_recall") == "scored" for r in result.rows)
    said = [r for r in caplog.records if "cannot be sent to a worker" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG]
    assert said[0].getMessage().startswith("row(s) 1 cannot be sent")


class LiveDetails(ContextRecall):
    """ContextRecall whose odd rows' details hold what cannot be pickled (a dict view, a lock).

    Every row's details also hold a dict keyed by a number: picklable (so sent as it is),
    but not plain data (so converted where the rest of its result must be).
    """

    key: ClassVar[str] = "live_details"

    @override
    def _evaluate(self, sample: RagSample, config: RunnableConfig) -> MetricResult:
        result = super()._evaluate(sample, config)
        result.details["by_number"] = {1: "one"}
        if int(str(sample.question).rstrip("?").rsplit(" ", 1)[1]) % 2:
            result.details["keys"] = {"a": 1}.keys()
            result.details["nested"] = [{"lock": threading.Lock()}, ("kept", 2.5, None)]
        return result


LIVE_KEYS = ("by_number", "keys", "nested")


def test_a_result_a_worker_cannot_pickle_keeps_its_score_with_plain_details(
    judge_server: JudgeServer,
    make_judge: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    start_method_used: str,
) -> None:
    """A worker sends such a result with its details as plain data (other values as their
    text), and only such a result; the run says so once for the metric. Before, the run
    ended with TypeError and every scored row was lost."""
    judge_server.script = lexical_judge()
    data = rows(6)
    alone = evaluate(data, [LiveDetails()], llm=make_judge(), show_progress=False)
    seen = watch_workers(monkeypatch)
    hold_parent(monkeypatch, seen["retired"])  # the worker scores every job
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        result = evaluate(
            data, [LiveDetails()], llm=make_judge(), workers=2, max_concurrency=4,
            show_progress=False,
        )  # fmt: skip
    assert seen["results"] == 6
    assert scores(result, "live_details") == scores(alone, "live_details")
    for row, (here, there) in enumerate(zip(alone.rows, result.rows, strict=True)):
        mine, sent = here.results["live_details"], there.results["live_details"]
        assert mine is not None
        assert sent is not None
        assert (sent.score, sent.reason) == (mine.score, mine.reason)
        if row % 2 == 0:
            assert sent.details == mine.details  # it pickled: sent as it was
            assert sent.details["by_number"] == {1: "one"}
            continue
        own = {k: v for k, v in mine.details.items() if k not in LIVE_KEYS}
        assert {k: sent.details[k] for k in own} == own  # plain data already: unchanged
        assert sent.details["by_number"] == {"1": "one"}
        assert sent.details["keys"] == ["a"]
        lock, kept = sent.details["nested"]
        assert lock["lock"].startswith("<unlocked _thread.lock object")
        assert kept == ["kept", 2.5, None]
    said = [r for r in caplog.records if "converted to plain data" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING]
    message = said[0].getMessage()
    assert message.startswith("metric 'live_details' returned details that cannot be pickled")
    assert "to send them from a worker process" in message


def test_a_workers_timer_sends_a_result_it_cannot_pickle() -> None:
    """The timer's flush (a thread of its own) sends results that do not fill a batch: one
    that cannot be pickled goes with plain details, the others as they are, and the parent
    is told of the metric once. Before, the timer thread died on it, with the batch."""
    from langchain_ragmetrics.metrics import NonLLMContextRecall

    recipe = ScoringRecipe([NonLLMContextRecall()])
    parent_end, conn = multiprocessing.Pipe()
    control_parent, control = multiprocessing.Pipe()
    side = workers_module._WorkerSide(recipe, conn, control)
    name = "non_llm_context_recall"
    plain = MetricResult(metric=name, score=1.0, details={"by_number": {1: "one"}})
    live = MetricResult(metric=name, score=0.5, reason="half", details={"keys": {}.keys()})
    sample = coerce_sample({"question": "q", "contexts": ["c"], "reference": "c"})

    def deliver(row: int, result: MetricResult) -> None:
        side.deliver(Job(sample, side.metrics[0], (row, 0)), result)

    def received() -> Any:
        assert parent_end.poll(HOLD_S)
        return parent_end.recv()

    for row, result in enumerate([plain, live]):
        deliver(row, result)
    assert not parent_end.poll()  # under a batch: the timer sends them
    ticking = threading.Thread(target=side._tick, daemon=True)
    ticking.start()
    try:
        assert received() == ("converted", [name])
        kind, sent = received()
        assert kind == "results"
        assert [(row, r.score, r.reason, r.details) for row, _, r in sent] == [
            (0, 1.0, None, {"by_number": {1: "one"}}),
            (1, 0.5, "half", {"keys": []}),
        ]
        deliver(2, live)
        assert received()[0] == "results"  # the parent was told of this metric already
    finally:
        side.finished.set()
        ticking.join(HOLD_S)
    for end in (parent_end, conn, control_parent, control):
        end.close()


UNREADABLE_SCRIPT = """
import sys, threading
from dataclasses import dataclass
from langchain_ragmetrics import evaluate
from langchain_ragmetrics.metrics import NonLLMContextRecall
from langchain_ragmetrics.evaluation import _workers as W


@dataclass
class Source:  # defined here: a spawned worker that leaves __main__ alone cannot rebuild it
    name: str


heard = threading.Event()
handle, run_own = W._Pool._handle, W._Pool.run_own


def on_message(self, worker, message):
    handle(self, worker, message)
    if message[0] == "unreadable":
        heard.set()


def held(self):
    heard.wait(120)  # the worker asks for jobs first
    run_own(self)


W._Pool._handle, W._Pool.run_own = on_message, held
if __name__ == "__main__":
    rows = [
        {"question": f"q{i}", "contexts": ["a b c"], "reference_contexts": ["a b c"],
         "source": Source("wiki")}
        for i in range(8)
    ]
    result = evaluate(rows, [NonLLMContextRecall()], workers=2, show_progress=False)
    print("heard", heard.is_set())
    print("scored", sum(r.status("non_llm_context_recall") == "scored" for r in result.rows))
"""


def test_a_spawned_worker_that_cannot_read_its_jobs_hands_them_to_the_parent(
    tmp_path: Path,
) -> None:
    """Before, its message thread died: it held the jobs for good, evaluate() never returned,
    and the worker outlived a killed parent."""
    script = tmp_path / "app.py"
    script.write_text(UNREADABLE_SCRIPT, encoding="utf-8")
    proc = run_python(str(script), method="spawn")
    assert proc.stdout.splitlines() == ["heard True", "scored 8"], proc.stderr
    assert "a worker process could not read its jobs (AttributeError" in proc.stderr


class _KeywordOnlyError(Exception):
    """Pickles, but cannot be rebuilt from its args (keyword-only ``__init__``)."""

    def __init__(self, *, code: int) -> None:
        super().__init__(f"code {code}")


class _FailingSide:
    """A worker side that is built, then fails while scoring (raise_exceptions=True)."""

    def __init__(self, recipe: Any, conn: Any, control: Any) -> None:
        self.conn = conn

    def run(self) -> None:
        raise _KeywordOnlyError(code=7)

    def send(self, *message: Any) -> None:
        self.conn.send(message)


def test_a_workers_error_the_parent_could_not_rebuild_goes_up_as_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # the worker's SIGINT setting
    monkeypatch.setattr(workers_module, "_WorkerSide", _FailingSide)
    receiver, sender = multiprocessing.Pipe(duplex=False)
    listener, control = multiprocessing.Pipe(duplex=False)
    workers_module._worker_main(None, sender, listener)  # type: ignore[arg-type]
    kind, exc = receiver.recv()  # before: TypeError here, which killed the parent's thread
    assert kind == "raise"
    assert type(exc) is RuntimeError
    assert str(exc) == "_KeywordOnlyError: code 7"
    control.close()


def test_a_worker_that_cannot_start_costs_the_parent_nothing(
    judge_server: JudgeServer,
    make_judge: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its metrics or judge cannot be built there (a missing package, a setting of its
    environment): the parent scores every job and says why, even with raise_exceptions
    (before, the run raised the worker's error and dropped what the parent had scored)."""
    monkeypatch.setenv(START_METHOD_ENV, "fork")  # the worker inherits the failing build
    judge_server.script = lexical_judge()
    parent = os.getpid()
    build = ScoringRecipe.build_metrics

    def build_here_only(self: Any) -> Any:
        if os.getpid() != parent:
            raise ImportError("no module named 'judge_plugin'")
        return build(self)

    monkeypatch.setattr(ScoringRecipe, "build_metrics", build_here_only)
    seen = watch_workers(monkeypatch)
    hold_parent(monkeypatch, seen["retired"])
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        result = evaluate(
            rows(6), [ContextRecall()], llm=make_judge(), workers=2, show_progress=False,
            raise_exceptions=True,
        )  # fmt: skip
    assert seen["exit_codes"] == [0]
    assert all(r.status("context_recall") == "scored" for r in result.rows)
    assert judge_server.count() == 6
    said = [r.getMessage() for r in caplog.records if "could not start" in r.getMessage()]
    assert said == [
        "a worker process could not start (ImportError: no module named 'judge_plugin'); "
        "this process scores without it"
    ]


def test_a_worker_the_system_refuses_to_start_costs_the_run_nothing(
    judge_server: JudgeServer,
    make_judge: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    start_method_used: str,
) -> None:
    """A fork or spawn the system refuses (EAGAIN from a pids limit, ENOMEM) is warned about
    once; the run goes on with the worker already started and this process. Before, it
    ended evaluate() with BlockingIOError."""
    from multiprocessing import popen_fork, popen_spawn_posix  # POSIX only

    judge_server.script = lexical_judge()
    launches: list[int] = []

    def refused_after_first(launch: Callable[..., None]) -> Callable[..., None]:
        def refuse(self: Any, process_obj: Any) -> None:
            launches.append(1)
            if len(launches) > 1:
                raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
            launch(self, process_obj)

        return refuse

    for popen in (popen_fork.Popen, popen_spawn_posix.Popen):
        launch = popen._launch  # type: ignore[attr-defined]
        monkeypatch.setattr(popen, "_launch", refused_after_first(launch))
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        result = evaluate(
            rows(10), [ContextRecall()], llm=make_judge(), workers=4, max_concurrency=8,
            show_progress=False,
        )  # fmt: skip
    assert len(launches) == 2  # the second was refused, and no third was tried
    assert all(r.status("context_recall") == "scored" for r in result.rows)
    assert judge_server.count() == 10
    assert not result.interrupted
    said = [r for r in caplog.records if "refused to start a worker" in r.getMessage()]
    assert [r.getMessage() for r in said] == [
        "the system refused to start a worker process (BlockingIOError: [Errno 11] Resource "
        "temporarily unavailable); the run continues with 1 of 3 worker processes and this "
        "process scores the rest"
    ]
    assert not multiprocessing.active_children()


def reports_sigint(recipe: ScoringRecipe, conn: Any, control: Any) -> None:
    """A worker that says whether SIGINT was blocked at its first act and, once told to go
    on, whether a Ctrl-C was held pending; then ignores it as a worker does."""
    del recipe
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    conn.send(("blocked", blocked))
    control.recv()  # the parent has sent its Ctrl-C
    pending = signal.SIGINT in signal.sigpending()
    workers_module._ignore_sigint()  # discards it
    conn.send(("held", pending, signal.SIGINT in signal.sigpending()))
    with contextlib.suppress(EOFError, OSError):
        control.recv()


@pytest.mark.skipif(sys.platform != "linux", reason="signal masks: POSIX; /proc: Linux")
def test_a_spawned_worker_holds_ctrl_c_back_from_its_first_instant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A terminal's Ctrl-C goes to the whole process group: a spawned worker used to get it
    while importing, before it ignored SIGINT itself, and print a traceback. Now it is born
    with SIGINT blocked (the mask is inherited through exec), so a Ctrl-C during its
    imports waits, and its first act discards it. This process's handler is back after."""
    from langchain_ragmetrics.metrics import NonLLMContextRecall

    monkeypatch.setattr(workers_module, "_worker_main", reports_sigint)
    pool = workers_module._Pool(
        samples=[], metrics=[NonLLMContextRecall()], engine=ScoringEngine(),
        recipe=ScoringRecipe([NonLLMContextRecall()]), processes=2, stop=threading.Event(),
        method="spawn",
    )  # fmt: skip
    assert threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGINT)
    assert handler is not signal.SIG_IGN
    pool.start_workers()
    try:
        (worker,) = pool.workers
        assert signal.getsignal(signal.SIGINT) is handler  # put back here
        assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        os.kill(worker.process.pid, signal.SIGINT)  # wherever its start-up is
        assert worker.conn.poll(HOLD_S)
        assert worker.conn.recv() == ("blocked", True)  # before its own code ran
        worker.control.send("go")
        assert worker.conn.poll(HOLD_S)
        assert worker.conn.recv() == ("held", True, False)  # held back, then discarded
        assert worker.process.is_alive()
    finally:
        pool.close(lambda *_: None)
    assert not multiprocessing.active_children()
    elsewhere: list[Any] = []

    def off_the_main_thread() -> None:
        with workers_module._sigint_deferred():  # signal.signal would raise here: left alone
            elsewhere.append(signal.getsignal(signal.SIGINT))
            elsewhere.append(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))

    thread = threading.Thread(target=off_the_main_thread)
    thread.start()
    thread.join(HOLD_S)
    assert elsewhere == [handler, False]


@pytest.mark.skipif(sys.platform != "linux", reason="signal masks: POSIX")
@pytest.mark.parametrize("taken_by", ["this thread", "another thread"])
def test_a_ctrl_c_while_a_worker_starts_is_raised_right_after(taken_by: str) -> None:
    """Before, SIGINT was ignored while a worker started, and a Ctrl-C then was lost (a
    review lost one at every moment of 16 workers' start). Now it is held back and raised
    under the previous handler as the start ends, whichever thread the kernel gave it to."""
    assert threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGINT)
    body: list[str] = []

    def start() -> None:  # what ``_start`` does around ``process.start()``
        with workers_module._sigint_deferred():
            if taken_by == "this thread":
                signal.raise_signal(signal.SIGINT)  # blocked here: pending
                body.append(f"pending: {signal.SIGINT in signal.sigpending()}")
            else:
                sender = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT))
                sender.start()
                sender.join(HOLD_S)
            body.append("ran to its end")  # the start is not cut short

    with pytest.raises(KeyboardInterrupt):
        start()
    assert body == (["pending: True"] if taken_by == "this thread" else []) + ["ran to its end"]
    assert signal.getsignal(signal.SIGINT) is handler
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert signal.SIGINT not in signal.sigpending()


def test_a_worker_message_the_parent_cannot_read_ends_the_worker_and_its_jobs_come_back(
    judge_server: JudgeServer,
    make_judge: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    start_method_used: str,
) -> None:
    judge_server.script = lexical_judge()
    loads = pickle.loads
    spoiled = threading.Event()

    def spoil_first_results(data: Any) -> Any:
        message = loads(data)
        if type(message) is tuple and message[:1] == ("results",) and not spoiled.is_set():
            spoiled.set()
            raise TypeError("cannot rebuild")
        return message

    monkeypatch.setattr(workers_module.pickle, "loads", spoil_first_results)
    seen = watch_workers(monkeypatch)
    hold_parent(monkeypatch, seen["retired"])  # the parent starts once the worker is ended
    delivered: list[int] = []
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        result = evaluate(
            rows(10), [ContextRecall()], llm=make_judge(), workers=2, max_concurrency=4,
            show_progress=False, on_result=lambda r, _n, _res: delivered.append(r),
        )  # fmt: skip
    assert spoiled.is_set()
    assert seen["exit_codes"] == [-signal.SIGTERM]
    assert sorted(delivered) == list(range(10))  # each once
    assert all(r.status("context_recall") == "scored" for r in result.rows)
    assert any("sent what cannot be read" in r.getMessage() for r in caplog.records)


def test_a_keyboard_interrupt_from_on_result_keeps_the_partial_results(
    judge_server: JudgeServer, make_judge: Callable[..., Any], start_method_used: str
) -> None:
    judge_server.script = lexical_judge()

    def stop_after_two(_row: int, _name: str, _result: MetricResult) -> None:
        stop_after_two.calls += 1  # type: ignore[attr-defined]
        if stop_after_two.calls == 2:  # type: ignore[attr-defined]
            raise KeyboardInterrupt

    stop_after_two.calls = 0  # type: ignore[attr-defined]
    result = evaluate(
        rows(40), [ContextRecall()], llm=make_judge(), workers=2, max_concurrency=2,
        show_progress=False, on_result=stop_after_two,
    )  # fmt: skip
    assert result.interrupted
    statuses = [r.status("context_recall") for r in result.rows]
    assert statuses.count("scored") >= 2
    assert "not_run" in statuses
    assert not multiprocessing.active_children()


def test_ctrl_c_while_a_result_is_recorded_loses_nothing(
    judge_server: JudgeServer, make_judge: Callable[..., Any], start_method_used: str
) -> None:
    """Ctrl-C in the middle of recording a result (here in ``on_result``) lets the recording
    end, then stops the run: every row the partial result holds as scored was seen by
    ``on_result``. Before, the interrupt was raised mid-recording and that row was lost to
    it (in ``ragmetrics evaluate``, between taking a result off the queue and keeping it)."""
    judge_server.script = lexical_judge()
    seen: list[int] = []

    def record(row: int, _name: str, _result: MetricResult) -> None:
        if not seen:
            signal.raise_signal(signal.SIGINT)  # what the terminal's Ctrl-C sends
        seen.append(row)

    result = evaluate(
        rows(40), [ContextRecall()], llm=make_judge(), workers=2, max_concurrency=2,
        show_progress=False, on_result=record,
    )  # fmt: skip
    assert result.interrupted
    scored = {i for i, r in enumerate(result.rows) if r.status("context_recall") == "scored"}
    assert scored
    assert sorted(seen) == sorted(scored)  # each once, none missing
    assert "not_run" in [r.status("context_recall") for r in result.rows]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert not multiprocessing.active_children()


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"jobs": 1000, "max_concurrency": 16, "cores": 2}, 2),  # issue 18's check
        ({"jobs": 1000, "max_concurrency": 16, "cores": 1}, 1),  # one core
        ({"jobs": 300, "max_concurrency": 16, "cores": 2}, 1),  # too short to pay off
        ({"jobs": 300, "max_concurrency": 16, "cores": 2, "forked": True}, 2),  # forked: it does
        ({"jobs": 199, "max_concurrency": 16, "cores": 2, "forked": True}, 1),
        ({"jobs": 400, "max_concurrency": 64, "cores": 8, "forked": True}, 4),
        ({"jobs": 1000, "max_concurrency": 8, "cores": 2}, 1),  # the judge is the limit
        ({"jobs": 4000, "max_concurrency": 64, "cores": 2}, 2),  # never above the cores
        ({"jobs": 4000, "max_concurrency": 64, "cores": 8}, 8),
        ({"jobs": 1000, "max_concurrency": 16, "cores": 2, "rate_limit_per_minute": 600}, 1),
        ({"jobs": 1000, "max_concurrency": 16, "cores": 2, "rate_limit_per_minute": 6e4}, 2),
    ],
)
def test_auto_uses_more_processes_only_where_they_pay_off(
    kwargs: dict[str, Any], expected: int
) -> None:
    assert worker_count("auto", **kwargs) == expected


def test_auto_forks_a_worker_for_a_shorter_run_than_it_would_spawn_one_for(
    judge_server: JudgeServer, make_judge: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 jobs: 2 processes when workers would be forked, 1 when they would be spawned."""
    judge_server.script = lexical_judge()
    monkeypatch.setattr(workers_module, "available_cores", lambda: 2)
    monkeypatch.setattr(run_module, "available_cores", lambda: 2)
    calls: list[tuple[int, str | None]] = []

    def spy(*args: Any, processes: int, method: str | None = None, **kwargs: Any) -> None:
        calls.append((processes, method))
        monkeypatch.setattr(workers_module._Pool, "start_workers", lambda self: None)
        workers_module.score_in_processes(*args, processes=processes, method=method, **kwargs)

    monkeypatch.setattr(run_module, "score_in_processes", spy)
    data = rows(100)  # x 2 metrics = 200 jobs
    for chosen in ("spawn", "fork"):
        monkeypatch.setenv(START_METHOD_ENV, chosen)
        evaluate(data, METRICS, llm=make_judge(), show_progress=False)
    assert calls == [(2, "fork")]  # spawn: in process (no call); fork: a second process


@pytest.mark.parametrize(("forced", "used"), [(None, "spawn"), ("fork", "fork")])
def test_a_fork_chosen_before_a_thread_started_becomes_a_spawn(
    judge_server: JudgeServer,
    make_judge: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    forced: str | None,
    used: str,
) -> None:
    """``workers="auto"`` picks fork while the process is single-threaded; a thread started
    since (a pre-flight request's, a tracer's) makes forking unsafe, so the workers are
    spawned. A start method the user forced stands."""
    judge_server.script = lexical_judge()
    monkeypatch.setattr(workers_module, "available_cores", lambda: 2)
    monkeypatch.setattr(run_module, "available_cores", lambda: 2)
    monkeypatch.setattr(run_module, "start_method", lambda: "fork")  # single-threaded then
    if forced is None:
        monkeypatch.delenv(START_METHOD_ENV, raising=False)
    else:
        monkeypatch.setenv(START_METHOD_ENV, forced)
    methods: list[str] = []
    monkeypatch.setattr(
        workers_module._Pool, "start_workers", lambda self: methods.append(self.method)
    )
    assert threading.active_count() > 1  # the judge server's threads, at least
    result = evaluate(rows(100), METRICS, llm=make_judge(), show_progress=False)
    assert methods == [used]
    assert all(r.status("context_recall") == "scored" for r in result.rows)


@pytest.mark.parametrize("defined_in_script", [True, False])
def test_auto_decides_again_when_the_preflight_turned_its_fork_into_a_spawn(
    judge_server: JudgeServer,
    make_judge: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    defined_in_script: bool,
) -> None:
    """``"auto"`` chose to fork (single-threaded then); the pre-flight request left a thread,
    so the workers would be spawned. Before, they were: a metric class defined in the
    caller's script made the spawned worker re-run the script, and 200 jobs are too few for
    a spawned worker to pay off. Now ``"auto"`` decides again as for a spawn: one process."""
    judge_server.script = lexical_judge()
    monkeypatch.setattr(workers_module, "available_cores", lambda: 2)
    monkeypatch.setattr(run_module, "available_cores", lambda: 2)
    monkeypatch.setattr(run_module, "start_method", lambda: "fork")  # single-threaded then
    monkeypatch.delenv(START_METHOD_ENV, raising=False)
    monkeypatch.setattr(run_module, "needs_main", lambda recipe: defined_in_script)
    preflights: list[int] = []
    monkeypatch.setattr(run_module, "_preflight", lambda run: preflights.append(run.workers))
    started: list[str] = []
    monkeypatch.setattr(
        workers_module._Pool, "start_workers", lambda self: started.append(self.method)
    )
    assert threading.active_count() > 1  # as the pre-flight's would: the judge server's
    result = evaluate(rows(100), METRICS, llm=make_judge(), show_progress=False, preflight=True)
    assert preflights == [2]  # a fork was chosen: two processes
    assert started == []  # decided again after it: no worker
    assert all(r.status("context_recall") == "scored" for r in result.rows)


def test_an_explicit_count_is_capped_by_jobs_and_slots() -> None:
    assert worker_count(4, jobs=1000, max_concurrency=16) == 4
    count = worker_count(numpy.int64(2), jobs=1000, max_concurrency=16)
    assert count == 2  # a NumPy integer is a number, as for max_concurrency
    assert type(count) is int
    assert worker_count(4, jobs=3, max_concurrency=16) == 3
    assert worker_count(4, jobs=1000, max_concurrency=2) == 2
    assert worker_count(1, jobs=1000, max_concurrency=16) == 1


def test_auto_stays_in_process_quietly_when_metrics_cannot_cross(
    judge_server: JudgeServer, make_judge: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    judge_server.script = lexical_judge()
    monkeypatch.setattr(workers_module, "AUTO_MIN_JOBS", 1)
    monkeypatch.setattr(workers_module, "AUTO_SLOTS_PER_PROCESS", 1)
    monkeypatch.setattr(workers_module, "available_cores", lambda: 2)
    calls: list[int] = []
    original = workers_module.score_in_processes

    def spy(*args: Any, processes: int, **kwargs: Any) -> None:
        calls.append(processes)
        original(*args, processes=processes, **kwargs)

    monkeypatch.setattr(run_module, "score_in_processes", spy)
    base = make_judge()
    private = _Unserializable(model="m", base_url=base.openai_api_base, api_key="test")
    data = rows(4)
    quiet = evaluate(data, [ContextRecall(llm=private)], show_progress=False)  # auto
    assert calls == []  # no worker: the judge cannot cross, and auto says nothing
    assert all(r.status("context_recall") == "scored" for r in quiet.rows)
    with pytest.raises(ValueError, match="_Unserializable cannot be rebuilt"):
        evaluate(data, [ContextRecall(llm=private)], workers=2, show_progress=False)
    crossing = evaluate(data, [ContextRecall()], llm=make_judge(), show_progress=False)
    assert calls == [2]  # a judge that can cross: auto took the second core
    assert scores(crossing, "context_recall") == scores(quiet, "context_recall")


UNGUARDED_SCRIPT = """
import sys
print("script body ran", flush=True)
from langchain_openai import ChatOpenAI
from langchain_ragmetrics import ContextRecall, evaluate
from langchain_ragmetrics.evaluation import _workers

_workers._Pool.run_own = lambda self: None  # the worker scores every job
llm = ChatOpenAI(model="m", base_url=sys.argv[1], api_key="test", max_retries=0)
rows = [{"question": f"q{i}", "contexts": [f"c{i}."], "reference": f"c{i}."} for i in range(4)]
result = evaluate(rows, [ContextRecall()], llm=llm, workers=2, show_progress=False)
print("scored", sum(r.status("context_recall") == "scored" for r in result.rows), flush=True)
"""


@pytest.mark.parametrize("method", ["spawn", "auto"])  # auto: forked (one thread, Linux)
def test_a_script_without_the_main_guard_is_not_rerun_by_its_workers(
    judge_server: JudgeServer, tmp_path: Path, method: str
) -> None:
    judge_server.script = lexical_judge()
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED_SCRIPT, encoding="utf-8")
    proc = run_python(str(script), judge_server.base_url, method=method)
    assert proc.stdout.splitlines() == ["script body ran", "scored 4"], proc.stderr
    assert judge_server.count() == 4


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_ctrl_c_on_the_cli_with_workers_keeps_the_partial_results(
    judge_server: JudgeServer, tmp_path: Path, method: str
) -> None:
    release = threading.Event()
    lexical = lexical_judge()

    def script(req: JudgeRequest) -> Any:
        if payload(req)["question"] == "Who wrote paper 0?":
            return lexical(req)
        return _held(release, lexical, req)

    judge_server.script = script
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows(4)), encoding="utf-8")
    out_file = tmp_path / "partial.jsonl"
    proc = subprocess.Popen(
        [*RAGMETRICS, "evaluate", str(data), "--metrics", "context_recall",
         "--concurrency", "2", "--workers", "2", "--out", str(out_file), "--no-preflight",
         "--no-cache"],
        env=clean_env(
            OPENAI_API_KEY="test",
            OPENAI_BASE_URL=judge_server.base_url,
            **{START_METHOD_ENV: method},
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:  # row 0 answered; rows 1 and 2 held, one per worker
        stdout, stderr = interrupt_when(proc, lambda: judge_server.count() >= 3)
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, stderr
    assert "Interrupted: 1 of 4 jobs finished; 3 did not run." in stdout
    header, *records = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert header["ragmetrics_run"]["interrupted"] is True
    statuses = [r["results"]["context_recall"]["status"] for r in records]
    assert statuses == ["scored", "not_run", "not_run", "not_run"]
    assert judge_server.count() == 3  # the stopped workers sent nothing more


def _held(
    release: threading.Event, lexical: Callable[[JudgeRequest], Any], req: JudgeRequest
) -> Any:
    release.wait(60)
    return lexical(req)


class _Unserializable(ChatOpenAI):
    """A judge LangChain cannot serialize (as many custom wrappers are)."""

    @classmethod
    def is_lc_serializable(cls) -> bool:
        return False


def test_bad_workers_and_what_cannot_cross_are_refused_up_front(
    make_judge: Callable[..., Any],
) -> None:
    data = rows(4)
    for bad in (0, -1, 1.5, True, numpy.bool_(True), numpy.float64(2.0), "2"):
        with pytest.raises(ValueError, match="`workers` must be a whole number of at least 1 or"):
            evaluate(data, METRICS, llm=make_judge(), workers=bad, show_progress=False)  # type: ignore[arg-type]
    base = make_judge()
    private = _Unserializable(model="m", base_url=base.openai_api_base, api_key="test")
    with pytest.raises(ValueError, match="_Unserializable cannot be rebuilt"):
        evaluate(data, [ContextRecall(llm=private)], workers=2, show_progress=False)
    with pytest.raises(ValueError, match="callbacks cannot be sent"):
        evaluate(
            data,
            METRICS,
            llm=make_judge(),
            workers=2,
            config={"callbacks": [BaseCallbackHandler()]},
            show_progress=False,
        )
    assert not multiprocessing.active_children()


def test_a_judge_recipe_rebuilds_the_same_judge(make_judge: Callable[..., Any]) -> None:
    llm = make_judge(timeout=7, model="m-1")
    rebuilt = JudgeRecipe.from_llm(llm).build()
    assert type(rebuilt) is type(llm)
    assert rebuilt.model_name == "m-1"
    assert rebuilt.openai_api_base == llm.openai_api_base
    assert rebuilt.request_timeout == 7
    assert rebuilt.openai_api_key.get_secret_value() == "test"
    assert rebuilt is not llm
    made = JudgeRecipe(model="m-2", base_url="http://127.0.0.1:9/v1", api_key="k").build()
    assert made.model_name == "m-2"  # type: ignore[attr-defined]


def test_a_recipe_shares_concurrency_and_rate_among_workers(
    make_judge: Callable[..., Any],
) -> None:
    metrics = [ContextRecall(llm=make_judge()), ContextPrecision(llm=make_judge())]
    recipe = ScoringRecipe(metrics, max_concurrency=64, rate_limit_per_minute=600)
    share = recipe.split(2)
    assert (share.max_concurrency, share.rate_limit_per_minute) == (32, 300)
    assert (recipe.max_concurrency, recipe.rate_limit_per_minute) == (64, 600)  # unchanged
    assert len(recipe.judge_recipes) == 1  # one judge for both metrics, built once per worker
    built = pickle.loads(pickle.dumps(share)).build_metrics()
    assert built[0].llm is built[1].llm
    assert built[0].llm.openai_api_base == make_judge().openai_api_base


def test_a_ready_workers_share_of_the_rate_leaves_the_parents_limiter(
    make_judge: Callable[..., Any],
) -> None:
    engine = ScoringEngine(max_concurrency=8, rate_limit_per_minute=600)
    recipe = ScoringRecipe(
        [ContextRecall(llm=make_judge())], max_concurrency=8, rate_limit_per_minute=600
    )
    pool = workers_module._Pool(
        samples=[], metrics=[ContextRecall()], engine=engine, recipe=recipe, processes=2,
        stop=threading.Event(),
    )  # fmt: skip
    worker = SimpleNamespace(ready=True, rate=pool.share_recipe.rate_limit_per_minute)
    assert worker.rate == 300
    pool._rate_to(worker)  # type: ignore[arg-type]
    assert engine.limiter.requests_per_second == pytest.approx(5.0)  # 600 a minute in all
    assert engine.limiter.available_tokens <= engine.limiter.max_bucket_size == 5.0
    worker.ready = False  # it died: its share comes back
    pool._rate_to(worker)  # type: ignore[arg-type]
    assert engine.limiter.requests_per_second == pytest.approx(10.0)


def test_the_cli_takes_auto_or_a_number_of_workers() -> None:
    assert _workers_arg("auto") == "auto"
    assert _workers_arg("3") == 3
    for bad in ("0", "two"):
        with pytest.raises(argparse.ArgumentTypeError):
            _workers_arg(bad)


def test_a_judge_with_live_parts_is_not_rebuilt_without_them(
    make_judge: Callable[..., Any],
) -> None:
    from langchain_core.rate_limiters import InMemoryRateLimiter

    limited = make_judge(rate_limiter=InMemoryRateLimiter(requests_per_second=5))
    with pytest.raises(
        _RecipeError, match="rate_limiter cannot be sent to another process"
    ) as info:
        JudgeRecipe.from_llm(limited)
    # The reason stands alone (the handler's fallback warning quotes it); the advice follows.
    assert "workers=1" not in info.value.reason
    assert info.value.advice == "drop it from the judge, or use workers=1"
    assert str(info.value) == f"{info.value.reason}; {info.value.advice}"
    with pytest.raises(ValueError, match="rate_limiter cannot be sent"):
        evaluate(rows(4), [ContextRecall(llm=limited)], workers=2, show_progress=False)


def test_auto_stays_at_one_inside_a_daemonic_process(monkeypatch: pytest.MonkeyPatch) -> None:
    this = multiprocessing.current_process()
    monkeypatch.setitem(this._config, "daemon", True)  # type: ignore[attr-defined]
    assert this.daemon  # as in a multiprocessing pool's worker, which may not have children
    assert worker_count("auto", jobs=1000, max_concurrency=16, cores=2) == 1
    assert worker_count(2, jobs=1000, max_concurrency=16, cores=2) == 2  # asked for: tried


CHOICE_SCRIPT = """
import multiprocessing, sys, threading, tqdm
from langchain_ragmetrics.evaluation._workers import start_method

print(start_method())  # one thread: fork (Linux)
release = threading.Event()
other = threading.Thread(target=release.wait)
other.start()
print(start_method())  # another thread is alive: spawn
release.set()
other.join()
tqdm.tqdm(total=1, file=sys.stderr).close()  # fixes the default method, starts a monitor
tqdm.tqdm.monitor.exit()
tqdm.tqdm.monitor.join()
print(multiprocessing.get_start_method(allow_none=True), start_method())  # still decided
multiprocessing.set_start_method("spawn", force=True)
print(start_method())  # the program's own choice
"""


def test_workers_fork_only_while_the_process_runs_one_thread() -> None:
    proc = run_python("-c", CHOICE_SCRIPT)
    default = multiprocessing.get_all_start_methods()[0]
    alone = "fork" if sys.platform == "linux" else "spawn"
    assert proc.stdout.splitlines() == [alone, "spawn", f"{default} {alone}", "spawn"]


def test_workers_are_spawned_while_another_thread_is_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(START_METHOD_ENV, raising=False)
    with monkeypatch.context() as alone:
        alone.setattr(threading, "active_count", lambda: 1)
        assert start_method() == ("fork" if sys.platform == "linux" else "spawn")
    release = threading.Event()
    other = threading.Thread(target=release.wait, name="held")
    other.start()
    try:
        assert start_method() == "spawn"
    finally:
        release.set()
        other.join()


def test_a_users_thread_named_like_ours_is_the_users(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only threads the package made are waited for; a same-named user thread means spawn."""
    monkeypatch.delenv(START_METHOD_ENV, raising=False)
    told: list[str] = []
    gate = threading.Event()

    def retire() -> None:  # what ending our idle helper threads does: ours may now end
        told.append("retire")
        gate.set()

    monkeypatch.setattr(metrics_base, "retire_idle_call_threads", retire)

    def alone_with(thread: threading.Thread) -> None:  # xdist's own threads left out
        monkeypatch.setattr(threading, "enumerate", lambda: [threading.current_thread(), thread])
        monkeypatch.setattr(threading, "active_count", lambda: 1 + thread.is_alive())

    theirs = threading.Thread(target=gate.wait, name="ragmetrics-job", daemon=True)
    theirs.start()
    alone_with(theirs)
    try:
        assert not is_transient(theirs)
        assert start_method() == "spawn"
        assert told == []  # nothing was ended or waited for on the user's account
    finally:
        gate.set()
        theirs.join()
    gate.clear()
    ours = transient_thread(gate.wait, name="any-name")
    assert is_transient(ours)
    ours.start()
    alone_with(ours)
    assert start_method() == ("fork" if sys.platform == "linux" else "spawn")
    if sys.platform == "linux":
        assert told == ["retire"]  # told to end, then waited for
        assert not ours.is_alive()


def test_the_start_method_variable_wins_and_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(START_METHOD_ENV, "spawn")
    assert start_method() == "spawn"
    monkeypatch.setenv(START_METHOD_ENV, " Fork ")
    assert start_method() == "fork"
    monkeypatch.setenv(START_METHOD_ENV, "thread")
    with pytest.raises(
        ValueError, match=r"\$RAGMETRICS_START_METHOD must be one of auto, .*'thread'"
    ):
        start_method()


FORK_SCRIPT = """
import json, sys, threading, warnings
from langchain_openai import ChatOpenAI
from langchain_ragmetrics import ContextPrecision, ContextRecall, evaluate
from langchain_ragmetrics.evaluation import _workers

llm = ChatOpenAI(model="m", base_url=sys.argv[1], api_key="test", max_retries=0)
rows = json.loads(sys.argv[2])
metrics = [ContextRecall(), ContextPrecision(per_context=True)]  # helper threads
one = evaluate(rows, metrics, llm=llm, workers=1, show_progress=False)
lingering = sorted({t.name for t in threading.enumerate()} - {"MainThread"})
warm = {"question": "warm-up?", "contexts": ["Warm."], "reference": "Warm."}
ContextRecall(llm=llm).invoke(warm)  # the last request of this process before the workers'
methods = []
choose = _workers.start_method
_workers.start_method = lambda: methods.append(choose()) or methods[-1]
_workers._Pool.run_own = lambda self: None  # the worker scores every job
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    two = evaluate(rows, metrics, llm=llm, workers=2, show_progress=False)
print(json.dumps({
    "lingering": lingering,
    "methods": methods,
    "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
    "same": all(list(one[m]) == list(two[m]) for m in one.metrics),
    "scored": sum(r.status(m) == "scored" for r in two.rows for m in two.metrics),
}))
"""


def test_a_forked_worker_opens_its_own_connections_and_scores_the_same(
    judge_server: JudgeServer,
) -> None:
    judge_server.script = lexical_judge()
    data = rows(6)
    proc = run_python("-c", FORK_SCRIPT, judge_server.base_url, json.dumps(data))
    report = json.loads(proc.stdout.splitlines()[-1])
    # helper threads of the first run were still alive: they were ended, and the run forked
    assert "ragmetrics-call" in report["lingering"], report
    assert report["methods"] == ["fork" if sys.platform == "linux" else "spawn"]
    assert report["warnings"] == []  # no DeprecationWarning / RuntimeWarning about the fork
    assert report["same"]
    assert report["scored"] == 12
    requests = judge_server.requests
    (warm,) = [i for i, r in enumerate(requests) if "warm-up?" in r.text]
    parent, worker = requests[: warm + 1], requests[warm + 1 :]
    assert len(worker) == len(parent) - 1  # the same jobs as the first run, all the worker's
    parent_ports = {r.client_port for r in parent}
    worker_ports = {r.client_port for r in worker}
    assert None not in parent_ports | worker_ports
    assert worker_ports.isdisjoint(parent_ports)  # no connection of the parent's pool reused


def test_a_worker_sends_its_results_in_batches_and_all_before_done() -> None:
    """Full batches go at once; the rest goes by the tick, and every result before ``done``."""
    from langchain_ragmetrics.metrics import NonLLMContextRecall

    recipe = ScoringRecipe([NonLLMContextRecall()])
    parent_end, conn = multiprocessing.Pipe()
    control_parent, control = multiprocessing.Pipe()
    side = workers_module._WorkerSide(recipe, conn, control)
    result = MetricResult(metric="non_llm_context_recall", score=1.0)
    batch = workers_module._RESULT_BATCH
    sample = metrics_base.coerce_sample({"question": "q", "contexts": ["c"], "reference": "c"})
    for i in range(batch + 3):
        side.deliver(workers_module.Job(sample, side.metrics[0], (i, 0)), result)
    kind, sent = parent_end.recv()
    assert kind == "results"
    assert [row for row, _, _ in sent] == list(range(batch))  # the full batch, at once
    assert not parent_end.poll()  # the other 3 wait for the tick
    side.batch.cancel()  # no job will come: run() returns at once, flushing on its way out
    side.granted.set()
    side.run()
    messages = []
    while parent_end.poll():
        messages.append(parent_end.recv())
    kinds = [m[0] for m in messages]
    assert kinds[0] == "ready"
    assert kinds[-1] == "done"
    leftovers = [row for m in messages if m[0] == "results" for row, _, _ in m[1]]
    assert leftovers == [batch, batch + 1, batch + 2]  # delivered, before "done"
    for end in (parent_end, conn, control_parent, control):
        end.close()


MAIN_METRIC_SCRIPT = """
import json, sys
from langchain_openai import ChatOpenAI
from langchain_ragmetrics import ContextRecall, evaluate
from langchain_ragmetrics.evaluation import _run

class Mine(ContextRecall):  # defined in the running script: a spawned worker would re-run it
    pass

seen = []
real = _run.score_in_processes
def spy(*args, processes, method=None, **kwargs):
    seen.append([processes, method])
    real(*args, processes=processes, method=method, **kwargs)
_run.score_in_processes = spy
llm = ChatOpenAI(model="m", base_url=sys.argv[1], api_key="test", max_retries=0)
result = evaluate(json.loads(sys.argv[2]), [Mine(), ContextRecall()], llm=llm, show_progress=False)
scored = sum(r.status(m) == "scored" for r in result.rows for m in result.metrics)
print(json.dumps({"seen": seen, "scored": scored}))
"""


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_auto_uses_a_forked_worker_for_metrics_defined_in_the_script(
    judge_server: JudgeServer, method: str
) -> None:
    """A forked worker has the script's classes: auto uses it; spawned, it stays in process."""
    if method == "fork" and sys.platform != "linux":
        pytest.skip("fork is chosen on Linux only")
    judge_server.script = lexical_judge()
    data = rows(100)  # x 2 metrics = 200 jobs
    proc = run_python(
        "-c", MAIN_METRIC_SCRIPT, judge_server.base_url, json.dumps(data), method=method
    )
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["scored"] == 200
    if (os.cpu_count() or 1) < 2:
        assert report["seen"] == []
    else:
        assert report["seen"] == ([[2, "fork"]] if method == "fork" else [])


def test_the_parents_share_of_the_feed_waits_for_the_workers_last_jobs_and_takes_none() -> None:
    """A thread holding a slot is answered at once: nothing now, more may come while a worker
    holds jobs. A thread holding none waits: for a dead worker's jobs back in the feed, which
    it leaves there (a thread takes one once it holds a slot, so the parent hoards none and a
    live worker still gets its share), or for the last job to finish."""
    feed = workers_module._Feed([(0, 0), (1, 0)])
    worker = SimpleNamespace(holding=set())
    assert feed.take_for(worker, 2) == [(0, 0), (1, 0)]  # type: ignore[arg-type]
    assert feed.take_own() == (None, True)

    woke: list[bool] = []
    waiters = [threading.Thread(target=lambda: woke.append(feed.wait_own())) for _ in range(3)]
    for waiter in waiters:
        waiter.start()
    waiters[0].join(0.3)
    assert all(waiter.is_alive() for waiter in waiters)  # nothing to take yet: they wait
    feed.reclaim(worker, restarts=1)  # type: ignore[arg-type]  # the worker died
    for waiter in waiters:
        waiter.join(30)
    assert woke == [True, True, True]
    assert feed.take_own() == ((0, 0), True)  # both jobs are still in the feed, in order
    assert feed.take_own() == ((1, 0), True)
    assert feed.take_own() == (None, False)

    feed = workers_module._Feed([(0, 0)])
    assert feed.take_for(worker, 1) == [(0, 0)]  # type: ignore[arg-type]
    waiter = threading.Thread(target=lambda: woke.append(feed.wait_own()))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()
    feed.finished(worker, (0, 0))  # type: ignore[arg-type]
    waiter.join(30)
    assert woke[-1] is False
    assert feed.take_own() == (None, False)  # the parent's share of the run ends
    feed.stop()
    assert feed.wait_own() is False
