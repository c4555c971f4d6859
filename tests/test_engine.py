import asyncio
import math
import threading
from collections.abc import Callable
from typing import Any

import pytest

from langchain_ragmetrics import ContextPrecision, ContextRecall, NonLLMContextRecall, RagSample
from langchain_ragmetrics._engine import Job, RateLimiter, ScoringEngine, expected_judge_calls
from tests._support.held import HeldRequests
from tests._support.judges import EINSTEIN_CONTEXT, EINSTEIN_REFERENCE, EINSTEIN_VERDICTS
from tests._support.openai_server import JudgeServer, reply_hold

SAMPLE = RagSample(question="q", contexts=[EINSTEIN_CONTEXT], reference=EINSTEIN_REFERENCE)


async def test_runs_jobs_in_order_and_captures_errors(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    judge_server.script = lambda req: EINSTEIN_VERDICTS
    engine = ScoringEngine(max_concurrency=4)
    recall = ContextRecall(llm=make_judge())
    bad = RagSample(question="q", contexts=["c"])  # no reference: invalid input
    jobs = [Job(SAMPLE, recall, 0), Job(bad, recall, 1), Job(SAMPLE, recall, 2)]
    seen: list[Any] = []
    results = await engine.arun(jobs, on_result=lambda job, r: seen.append(job.tag))
    assert [r.score for r in results][0::2] == [0.5, 0.5]
    assert math.isnan(results[1].score or 0.0)
    assert "ContextRecall needs `reference`" in (results[1].error or "")
    assert sorted(seen) == [0, 1, 2]
    assert engine.stats.finished == 3
    assert engine.stats.failed == 1
    assert engine.stats.usage.judge_calls == 2


async def test_concurrency_is_bounded(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    held = HeldRequests(lambda req: EINSTEIN_VERDICTS)
    judge_server.script = held
    engine = ScoringEngine(max_concurrency=3)
    recall = ContextRecall(llm=make_judge())
    task = asyncio.create_task(engine.arun([Job(SAMPLE, recall) for _ in range(8)]))
    try:
        # Released one by one: each release lets exactly one waiting job in.
        await asyncio.to_thread(held.drain, 8, 3)
    finally:
        held.release_all()
    results = await task
    assert held.peak == 3  # never more than 3 in flight, and the limit was used
    assert [r.score for r in results] == [0.5] * 8


async def test_timeout_becomes_nan(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    release = threading.Event()
    judge_server.script = lambda req: reply_hold(release, EINSTEIN_VERDICTS)
    engine = ScoringEngine(timeout=0.2)
    (result,) = await engine.arun([Job(SAMPLE, ContextRecall(llm=make_judge()))])
    release.set()
    assert math.isnan(result.score or 0.0)
    assert result.error == "timed out after 0.2s"
    assert engine.stats.timed_out == 1


async def test_raise_exceptions() -> None:
    engine = ScoringEngine(raise_exceptions=True)
    with pytest.raises(ValueError, match="needs `reference_contexts`"):
        await engine.arun([Job(RagSample(contexts=["c"]), NonLLMContextRecall())])


def test_expected_judge_calls() -> None:
    sample = RagSample(contexts=["a", "b", "c"], reference="r")
    assert expected_judge_calls(Job(sample, ContextRecall())) == 1
    assert expected_judge_calls(Job(sample, ContextPrecision(per_context=True))) == 3
    assert expected_judge_calls(Job(sample, NonLLMContextRecall())) == 0


async def test_rate_limiter_uses_the_clock() -> None:
    now = [0.0]
    limiter = RateLimiter(60, clock=lambda: now[0])  # one call per second, burst of one
    await limiter.acquire()
    waiter = asyncio.create_task(limiter.acquire())
    for _ in range(5):  # loop turns, not time: acquire does no I/O, so it would be done by now
        await asyncio.sleep(0)
    assert not waiter.done()  # waiting for the (fake) clock
    now[0] = 1.0
    await asyncio.wait_for(waiter, 2)
    with pytest.raises(ValueError, match="rate_limit_per_minute"):
        RateLimiter(0)


def test_bad_concurrency() -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        ScoringEngine(max_concurrency=0)
