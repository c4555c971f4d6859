"""The scoring engine: (sample x metric) jobs under one concurrency limit, with error capture.

``evaluate()`` and the online callback's worker both run their jobs through a
:class:`ScoringEngine`, so the package has a single concurrency system.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import merge_configs

from langchain_ragmetrics.metrics._base import BaseRagMetric, JudgedMetric
from langchain_ragmetrics.schema import MetricResult, RagSample, Usage

__all__ = ["EngineStats", "Job", "RateLimiter", "ScoringEngine", "expected_judge_calls"]


@dataclass(frozen=True)
class Job:
    """One metric on one sample; ``tag`` is the caller's own handle (row index, trace id ...).

    ``config`` is merged over the engine's config for this job only (e.g. run metadata).
    """

    sample: RagSample
    metric: BaseRagMetric
    tag: Any = None
    config: RunnableConfig | None = None


@dataclass
class EngineStats:
    """Running totals of an engine (read them at any time; reset with ``reset()``)."""

    started: int = 0
    finished: int = 0
    failed: int = 0
    timed_out: int = 0
    usage: Usage = field(default_factory=Usage)

    def reset(self) -> None:
        """Zero every counter."""
        self.started = self.finished = self.failed = self.timed_out = 0
        self.usage = Usage()


def expected_judge_calls(job: Job) -> int:
    """How many judge calls a job should make on the happy path (for rate limiting)."""
    metric = job.metric
    if not isinstance(metric, JudgedMetric):
        return 0
    if getattr(metric, "per_context", False):
        return max(1, len(job.sample.contexts))
    if getattr(metric, "single_call", True) is False:
        return 2
    return 1


class RateLimiter:
    """A token bucket of judge calls per minute; ``acquire(n)`` waits until n calls are allowed.

    Not thread-safe by design: it lives on one event loop (the engine's).
    """

    def __init__(self, per_minute: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if per_minute <= 0:
            msg = "`rate_limit_per_minute` must be positive"
            raise ValueError(msg)
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, per_minute / 60.0)
        self._tokens = self.capacity
        self._clock = clock
        self._stamp = clock()
        self._lock: asyncio.Lock | None = None

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    async def acquire(self, n: int = 1) -> None:
        """Wait until ``n`` calls fit in the budget, then spend them (n is capped at capacity)."""
        if n <= 0:
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        need = min(float(n), self.capacity)
        async with self._lock:
            self._refill()
            while self._tokens < need:
                await asyncio.sleep((need - self._tokens) / self.rate)
                self._refill()
            self._tokens -= need


class ScoringEngine:
    """Runs jobs with bounded concurrency, a per-job timeout and per-job error capture.

    A job never raises out of :meth:`ascore` (unless ``raise_exceptions``): invalid input,
    a timeout or a bug become a result with ``score=NaN`` and ``error`` set.

    With an ``executor``, each metric runs through its sync ``invoke`` on that executor
    instead of ``ainvoke`` on the loop: the online worker needs this because async model
    clients are often shared process-wide (langchain-openai caches one ``httpx.AsyncClient``
    per base URL) and must not be used from a second event loop.
    """

    def __init__(
        self,
        *,
        max_concurrency: int = 16,
        timeout: float | None = None,
        rate_limit_per_minute: float | None = None,
        raise_exceptions: bool = False,
        config: RunnableConfig | None = None,
        executor: Executor | None = None,
    ) -> None:
        if max_concurrency < 1:
            msg = "`max_concurrency` must be at least 1"
            raise ValueError(msg)
        self.max_concurrency = max_concurrency
        self.timeout = timeout
        self.raise_exceptions = raise_exceptions
        self.config: RunnableConfig = config or {}
        self.executor = executor
        self.limiter = RateLimiter(rate_limit_per_minute) if rate_limit_per_minute else None
        self.stats = EngineStats()
        self._gates: dict[int, asyncio.Semaphore] = {}

    def _gate(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        gate = self._gates.get(id(loop))
        if gate is None:
            gate = self._gates[id(loop)] = asyncio.Semaphore(self.max_concurrency)
        return gate

    def _error_result(self, job: Job, error: str) -> MetricResult:
        return MetricResult(metric=job.metric.metric_name, score=math.nan, error=error)

    def _call(self, job: Job) -> Awaitable[MetricResult]:
        config = self.config if job.config is None else merge_configs(self.config, job.config)
        if self.executor is None:
            return job.metric.ainvoke(job.sample, config)
        # Carry the loop's context into the thread, as asyncio.to_thread does.
        run = partial(contextvars.copy_context().run, job.metric.invoke, job.sample, config)
        return asyncio.get_running_loop().run_in_executor(self.executor, run)

    async def ascore(self, job: Job) -> MetricResult:
        """Score one job under the concurrency limit; never raises unless asked to."""
        async with self._gate():
            if self.limiter is not None:
                await self.limiter.acquire(expected_judge_calls(job))
            self.stats.started += 1
            start = time.perf_counter()
            try:
                call = self._call(job)
                if self.timeout is not None:
                    result = await asyncio.wait_for(call, self.timeout)
                else:
                    result = await call
            except asyncio.TimeoutError:
                self.stats.timed_out += 1
                if self.raise_exceptions:
                    raise
                result = self._error_result(job, f"timed out after {self.timeout:g}s")
            except Exception as exc:
                if self.raise_exceptions:
                    raise
                result = self._error_result(job, f"{type(exc).__name__}: {exc}")
            if result.latency_s is None:
                result.latency_s = time.perf_counter() - start
            self.stats.finished += 1
            self.stats.failed += int(result.failed)
            self.stats.usage = self.stats.usage + result.usage
            return result

    async def arun(
        self,
        jobs: Iterable[Job],
        *,
        on_result: Callable[[Job, MetricResult], None] | None = None,
    ) -> list[MetricResult]:
        """Score all jobs concurrently; results come back in job order.

        ``on_result`` is called as each job finishes (progress bars, sinks). If the run is
        cancelled, finished results are kept and the rest are cancelled.
        """
        job_list = list(jobs)

        async def one(job: Job) -> MetricResult:
            result = await self.ascore(job)
            if on_result is not None:
                on_result(job, result)
            return result

        return list(await asyncio.gather(*(one(job) for job in job_list)))
