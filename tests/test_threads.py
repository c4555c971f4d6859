import asyncio
import contextvars
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from langchain_ragmetrics import ContextRelevance, RagSample
from langchain_ragmetrics._engine import Job, ScoringEngine
from langchain_ragmetrics._threads import DaemonThreadPool
from tests._support.judges import keyword_relevance
from tests._support.openai_server import JudgeServer

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("MARK", default="empty")


def test_single_thread_runs_calls_in_order_in_an_empty_context() -> None:
    pool = DaemonThreadPool(name="test-sinks")
    seen: list[tuple[int, str, str]] = []

    def record(i: int) -> None:
        seen.append((i, threading.current_thread().name, MARK.get()))

    token = MARK.set("caller")
    try:
        pool.start()
        futures = [pool.submit(record, i) for i in range(5)]
    finally:
        MARK.reset(token)
    for future in futures:
        future.result(10)
    assert seen == [(i, "test-sinks", "empty") for i in range(5)]
    assert pool.stop(10)
    assert not any(t.is_alive() for t in pool.threads)


def test_threads_exist_from_start_and_run_in_parallel() -> None:
    pool = DaemonThreadPool(name="test-pool", size=3)
    pool.start()
    assert [t.name for t in pool.threads] == ["test-pool-0", "test-pool-1", "test-pool-2"]
    barrier = threading.Barrier(3, timeout=10)
    futures = [pool.submit(barrier.wait) for _ in range(3)]  # deadlocks unless parallel
    assert sorted(f.result(10) for f in futures) == [0, 1, 2]
    pool.shutdown(wait=True)


def test_exceptions_go_to_the_future() -> None:
    pool = DaemonThreadPool(name="test-pool-err")
    pool.start()

    def boom() -> None:
        raise ValueError("sink broke")

    with pytest.raises(ValueError, match="sink broke"):
        pool.submit(boom).result(10)
    assert pool.submit(lambda: 42).result(10) == 42  # still alive
    pool.stop(10)


def test_stop_can_cancel_queued_calls() -> None:
    pool = DaemonThreadPool(name="test-pool-cancel")
    pool.start()
    gate = threading.Event()
    started = threading.Event()

    def busy() -> bool:
        started.set()
        return gate.wait(10)

    running = pool.submit(busy)
    queued = pool.submit(lambda: "never")
    assert started.wait(10)
    stopper = threading.Thread(target=pool.stop, kwargs={"timeout": 10, "cancel_pending": True})
    stopper.start()
    deadline = time.monotonic() + 10
    while not queued.cancelled() and time.monotonic() < deadline:
        time.sleep(0.005)  # the single thread is busy, so the queued call cannot start
    gate.set()
    stopper.join(10)
    assert running.result(10) is True
    assert queued.cancelled()


def test_submit_before_start_or_after_stop_fails_fast() -> None:
    pool = DaemonThreadPool(name="test-pool-idle")
    with pytest.raises(RuntimeError, match="not running"):
        pool.submit(lambda: 1).result(1)
    pool.start()
    assert pool.started
    pool.stop(10)
    assert not pool.started
    with pytest.raises(RuntimeError, match="not running"):
        pool.submit(lambda: 1).result(1)
    assert pool.stop(10)  # idempotent
    with pytest.raises(ValueError, match="size"):
        DaemonThreadPool(name="x", size=0)


async def test_engine_runs_sync_invoke_on_the_executor_with_the_loop_context(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    judge_server.script = keyword_relevance("boils")
    pool = DaemonThreadPool(name="test-judges", size=2)
    pool.start()
    threads: list[tuple[str, str]] = []
    metric = ContextRelevance(llm=make_judge())
    original = type(metric)._evaluate

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        threads.append((threading.current_thread().name, MARK.get()))
        return original(self, *args, **kwargs)

    MARK.set("loop")
    engine = ScoringEngine(max_concurrency=2, executor=pool)
    sample = RagSample(question="q", contexts=["Water boils at 100 degrees. Ice is cold."])
    try:
        type(metric)._evaluate = spy  # type: ignore[method-assign]
        results = await asyncio.gather(*(engine.ascore(Job(sample, metric)) for _ in range(2)))
    finally:
        type(metric)._evaluate = original  # type: ignore[method-assign]
        pool.stop(10)
    assert [r.score for r in results] == [0.5, 0.5]
    assert {name for name, _ in threads} <= {"test-judges-0", "test-judges-1"}
    assert {mark for _, mark in threads} == {"loop"}
