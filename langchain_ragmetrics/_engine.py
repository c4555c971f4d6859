"""The scoring engine: (sample x metric) jobs, per-request admission, timeouts, error capture.

``evaluate()``, ``aevaluate()`` and the online callback's worker all run their jobs through a
:class:`ScoringEngine`, so the package has a single concurrency system:

* a job holds one of ``max_concurrency`` slots per call at work and gives it back while it
  sleeps out a retry backoff (:class:`~langchain_ragmetrics._gate.Admission`), first to its
  own calls not started yet, so retries cost little throughput and a job's calls do not
  wait for each other's backoffs; ``rate_limit_per_minute`` meters every judge request, retries
  included, with langchain-core's ``InMemoryRateLimiter``;
* :meth:`ScoringEngine.run` scores jobs on threads with each metric's sync ``invoke`` (no
  event loop: it works the same from a script, a notebook or an async web handler, and it
  never touches async HTTP clients that belong to another loop); :meth:`ScoringEngine.run_feed`
  is the same loop for jobs that arrive while it runs (a :class:`JobFeed`: the worker
  processes of ``evaluate(workers=N)`` and their parent pull jobs from one feed);
* :meth:`ScoringEngine.arun` / :meth:`ScoringEngine.ascore` score on the caller's event loop
  with ``ainvoke``, or with ``invoke`` on an executor when one is given (the online worker).
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import merge_configs

from langchain_ragmetrics._gate import Admission, Gate, admitted
from langchain_ragmetrics._interrupts import DeferredInterrupt
from langchain_ragmetrics._options import number_above_zero, whole_number
from langchain_ragmetrics._schema import MetricResult, RagSample, Usage
from langchain_ragmetrics._transient import transient_thread
from langchain_ragmetrics._user_calls import UserCalls, held_limit
from langchain_ragmetrics.metrics._base import BaseRagMetric
from langchain_ragmetrics.metrics._judge import PERMANENT_CAUSES, cause_of

__all__ = [
    "EngineStats",
    "Job",
    "JobFeed",
    "ScoringEngine",
    "failure_report",
    "make_rate_limiter",
]

_WAIT_POLL_S = 0.2  # bounded waits keep the caller's thread interruptible by Ctrl-C


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
    """Running totals of an engine (read them at any time)."""

    started: int = 0
    finished: int = 0
    failed: int = 0
    timed_out: int = 0
    usage: Usage = field(default_factory=Usage)


def make_rate_limiter(per_minute: float | None) -> Any:
    """langchain-core's ``InMemoryRateLimiter`` for ``per_minute`` requests (None: no limit).

    The bucket starts full and holds one second of requests (at least one), so a run starts
    at once and never bursts above the rate for longer than a second.
    """
    if per_minute is None:
        return None
    per_minute = number_above_zero("rate_limit_per_minute", per_minute)
    from langchain_core.rate_limiters import InMemoryRateLimiter

    per_second = per_minute / 60.0
    limiter = InMemoryRateLimiter(
        requests_per_second=per_second,
        check_every_n_seconds=min(0.1, 1 / per_second),
        max_bucket_size=max(1.0, per_second),
    )
    limiter.available_tokens = limiter.max_bucket_size
    return limiter


def failure_report(result: MetricResult) -> tuple[str, str]:
    """The kind and message under which a failed result is logged once (online, monitor).

    A failure no retry can heal (no quota, a bad key, an unknown model ...) is one kind
    whatever the metric, so a judge out of credit gives one warning that names the cause,
    not one per metric; other failures are one kind per metric and error type.
    """
    cause = cause_of(result.error)
    if cause is not None:
        message = (
            f"{result.metric} failed: {result.error}. {PERMANENT_CAUSES[cause]} No retry can "
            f"heal this: results fail with cause {cause!r}, sent once each, and this warning "
            "stands for every metric"
        )
        return f"judge:{cause}", message
    kind = (result.error or "unknown").split(":", 1)[0]
    return f"metric:{result.metric}:{kind}", f"{result.metric} failed: {result.error}"


_FROM_CALLBACK = "_ragmetrics_from_callback"
"""Set on a KeyboardInterrupt that the caller's own result callback raised."""


class _JobTimeoutError(TimeoutError):
    """A job of :meth:`ScoringEngine.run` passed its deadline."""


class _Batch:
    """Shared state of one run of the engine: the job cursor, the jobs in flight."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        self.jobs = jobs
        self.spawn: Callable[[], None] = lambda: None
        """Starts one more job thread (set by the run)."""
        self.lock = threading.Lock()
        self.cursor = 0
        self.waiting = 0  # workers waiting for a slot (or, holding none, for a job)
        self.running: dict[int, tuple[float, Admission, float]] = {}
        """Per running job: its deadline, its admission, when it started (``perf_counter``)."""
        self.elapsed: dict[int, float] = {}
        """How long each settled job took (its latency, if its result has none: a failure)."""
        self.done: set[int] = set()
        self.outbox: queue.SimpleQueue[tuple[int, MetricResult | BaseException]] = (
            queue.SimpleQueue()
        )
        self.stop = threading.Event()

    @property
    def exhausted(self) -> bool:
        """No job is left to start."""
        return self.stop.is_set() or self.cursor >= len(self.jobs)

    @property
    def finished(self) -> bool:
        """Every job was settled, and none will come."""
        with self.lock:
            return len(self.done) == len(self.jobs)

    def take(self, admission: Admission) -> int | None:
        """The next job index for a worker holding a slot (None when none is left)."""
        with self.lock:
            if self.exhausted:
                return None
            return self._start(admission)

    def wait_for_job(self) -> None:
        """Wait for a job to take (a fixed list has them all at once: returns at once)."""

    def _start(self, admission: Admission) -> int:
        """Hand out the job at the cursor; call with the lock held."""
        index = self.cursor
        self.cursor += 1
        deadline = math.inf if admission.deadline is None else admission.deadline
        self.running[index] = (deadline, admission, time.perf_counter())
        return index

    def spare(self) -> None:
        """A slot came free mid-job (a backoff, an abandoned job): make sure a worker takes it."""
        with self.lock:
            start = self.waiting == 0 and not self.exhausted
            if start:
                self.waiting += 1  # counted until it waits for the slot itself
        if start:
            self.spawn()

    def settle(self, index: int, outcome: MetricResult | BaseException) -> bool:
        """Record a job's outcome once (a late result after its timeout is dropped)."""
        with self.lock:
            if index in self.done:
                return False
            self.done.add(index)
            running = self.running.pop(index, None)
            if running is not None:  # measured now, not when the caller gets to deliver it
                self.elapsed[index] = time.perf_counter() - running[2]
        self.outbox.put((index, outcome))
        return True

    def overdue(self) -> tuple[list[tuple[int, Admission]], float]:
        """Jobs past their deadline, and the seconds until the next deadline (capped)."""
        now = time.monotonic()
        with self.lock:
            late = [(i, a) for i, (deadline, a, _) in self.running.items() if deadline <= now]
            upcoming = [d for d, _, _ in self.running.values() if d > now]
        wait = min([_WAIT_POLL_S, *(d - now for d in upcoming)])
        return late, max(wait, 0.001)


class JobFeed(_Batch):
    """Jobs that arrive while :meth:`ScoringEngine.run_feed` runs; ``refill`` asks for more.

    ``refill(block)`` is called without the feed's lock, when the feed has run dry or is
    running low (``low`` jobs or fewer left, so the next ones arrive before they are needed).
    With ``block`` False it must not wait (a thread holding a slot asks); with ``block`` True
    (a thread holding none) it may wait for the answer. Jobs come in through :meth:`add`;
    :meth:`close` says no more will, :meth:`cancel` stops the run. ``refill`` returns True when
    it did either before returning (a local source; with ``block``, also when a job is at
    hand for the next ``refill(False)``), False when the answer comes later (a request to
    another process, or none at hand yet): then the taking thread waits for it, without a
    slot.
    """

    def __init__(self, refill: Callable[[bool], bool], *, low: int = 0) -> None:
        self.job_list: list[Job] = []
        super().__init__(self.job_list)
        self.refill = refill
        self.low = low
        self.closed = False
        self.arrived = threading.Condition(self.lock)

    @property
    def exhausted(self) -> bool:
        """No job is left to start, and none will come."""
        return self.stop.is_set() or (self.closed and self.cursor >= len(self.job_list))

    @property
    def finished(self) -> bool:
        """Every job that came was settled, and none will come."""
        with self.lock:
            return self.closed and len(self.done) == len(self.job_list)

    def add(self, jobs: Sequence[Job]) -> None:
        """More jobs, started after those that came before."""
        with self.lock:
            self.job_list.extend(jobs)
            self.arrived.notify_all()

    def close(self) -> None:
        """No more jobs will come: the run ends once those that came are settled."""
        with self.lock:
            self.closed = True
            self.arrived.notify_all()
        self.outbox.put((-1, _WakeUpError()))  # the waiting loop re-checks ``finished`` now

    def cancel(self) -> None:
        """End the run: no job starts any more; finished ones are still delivered."""
        self.stop.set()
        with self.lock:
            self.arrived.notify_all()

    def take(self, admission: Admission) -> int | None:
        """The next job for a worker thread holding a slot, or None when there is none now.

        It never waits with the slot: when the feed is dry it asks ``refill(False)`` (a job
        at hand, or a request on its way) and takes what came at once; else the thread gives
        its slot back and waits in :meth:`wait_for_job`.
        """
        for asked in (False, True):
            with self.lock:
                if self.stop.is_set():
                    return None
                if self.cursor < len(self.job_list):
                    index = self._start(admission)
                    left = len(self.job_list) - self.cursor
                    break
                if self.closed or asked:
                    return None
            if not self.refill(False):
                return None  # the answer comes later
        if self.low and left <= self.low:
            self.refill(False)
        return index

    def wait_for_job(self) -> None:
        """Wait, holding no slot, until a job is there to take or none will come.

        ``refill(True)`` may block until it has an answer (the parent's share of the feed
        waits for its workers' jobs); else this waits for jobs to arrive, a poll at most.
        """
        with self.lock:
            if self.stop.is_set() or self.closed or self.cursor < len(self.job_list):
                return
        if self.refill(True):
            return
        with self.lock:
            if self.cursor >= len(self.job_list) and not self.closed and not self.stop.is_set():
                self.arrived.wait(_WAIT_POLL_S)


class _WakeUpError(Exception):
    """Put in a batch's outbox to wake its waiting loop (not a job's outcome)."""


class ScoringEngine:
    """Runs jobs with bounded concurrency and rate, a per-job timeout and per-job error capture.

    A job never raises out of the engine (unless ``raise_exceptions``): invalid input, a
    timeout or a bug become a result with ``score=NaN`` and ``error`` set.

    Args:
        max_concurrency: Judge calls at work at once (a job holds one slot per call it has
            in flight, see :mod:`langchain_ragmetrics._gate`); a call sleeping out a retry
            backoff gives its slot back meanwhile.
        timeout: Seconds before a job is abandoned (it becomes NaN); None for no limit.
        rate_limit_per_minute: Judge requests per minute, retries included; None for no limit.
        raise_exceptions: Raise a job's error instead of recording it as NaN.
        config: RunnableConfig for every metric run (callbacks, tags, metadata).
        executor: Where :meth:`ascore` runs each metric's sync ``invoke`` instead of
            ``ainvoke`` on the loop (the online worker: async model clients are often shared
            process-wide and must not be used from a second event loop), and where the
            user's sync functions run (:attr:`user_calls`).
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
        self.max_concurrency = whole_number("max_concurrency", max_concurrency)
        self.timeout = None if timeout is None else number_above_zero("timeout", timeout)
        self.raise_exceptions = raise_exceptions
        self.config: RunnableConfig = config or {}
        self.executor = executor
        self.user_calls = (
            None
            if executor is None
            else UserCalls(executor, timeout=self.timeout, limit=held_limit(max_concurrency))
        )
        """Runs a user's sync functions on ``executor`` (None without one)."""
        self.limiter = make_rate_limiter(rate_limit_per_minute)
        """The ``InMemoryRateLimiter`` metering judge requests (None without a rate limit)."""
        self.gate = Gate(max_concurrency, self.limiter)
        self.stats = EngineStats()
        self._stats_lock = threading.Lock()

    # ------------------------------------------------------------------ one job

    def _config(self, job: Job) -> RunnableConfig:
        return self.config if job.config is None else merge_configs(self.config, job.config)

    def _deadline(self) -> float | None:
        return None if self.timeout is None else time.monotonic() + self.timeout

    def _begin(self) -> float:
        with self._stats_lock:
            self.stats.started += 1
        return time.perf_counter()

    def _finish(
        self, job: Job, outcome: MetricResult | BaseException, elapsed: float | None
    ) -> MetricResult:
        """Turn a job's outcome into its result (raising it when asked to) and count it."""
        timed_out = isinstance(outcome, (asyncio.TimeoutError, _JobTimeoutError))
        if timed_out:
            with self._stats_lock:
                self.stats.timed_out += 1
        if isinstance(outcome, BaseException):
            if self.raise_exceptions or not isinstance(outcome, Exception):
                raise outcome
            if timed_out and self.timeout is not None:
                error = f"timed out after {self.timeout:g}s"
            else:
                error = f"{type(outcome).__name__}: {outcome}"
            result = MetricResult(metric=job.metric.metric_name, score=math.nan, error=error)
        else:
            result = outcome
        if result.latency_s is None and elapsed is not None:
            result.latency_s = elapsed
        with self._stats_lock:
            self.stats.finished += 1
            self.stats.failed += int(result.failed)
            self.stats.usage = self.stats.usage + result.usage
        return result

    def _observed(self) -> bool:
        """Whether a callback handler or tracer listens to the metric runs, in this context.

        When none does, jobs skip the metric's own Runnable run (``score_unobserved``): the
        callback-manager setup it costs per call shows no effect anywhere.
        """
        from langchain_core.callbacks.manager import CallbackManager

        manager = CallbackManager.configure(
            inheritable_callbacks=self.config.get("callbacks"),
            inheritable_tags=self.config.get("tags"),
            inheritable_metadata=self.config.get("metadata"),
        )
        return bool(manager.handlers)

    def _invoke(self, job: Job, admission: Admission, observed: bool) -> MetricResult:
        """Run the metric synchronously as this admission's job, then free its slot."""
        config = self._config(job)
        try:
            with admitted(admission):
                if observed or (job.config is not None and job.config.get("callbacks")):
                    return job.metric.invoke(job.sample, config)
                return job.metric.score_unobserved(job.sample, config)
        finally:
            admission.close()

    def _invoke_in_slot(self, job: Job, admission: Admission, observed: bool) -> MetricResult:
        """Take a slot on this thread (an executor's), then run the job."""
        try:
            admission.enter()
        except BaseException:
            admission.close()
            raise
        return self._invoke(job, admission, observed)

    async def _ainvoke(self, job: Job, admission: Admission, observed: bool) -> MetricResult:
        config = self._config(job)
        try:
            with admitted(admission):
                if observed or (job.config is not None and job.config.get("callbacks")):
                    call = job.metric.ainvoke(job.sample, config)
                else:
                    call = job.metric.ascore_unobserved(job.sample, config)
                return await asyncio.wait_for(call, self.timeout)
        finally:
            admission.close()

    async def ascore(self, job: Job) -> MetricResult:
        """Score one job under the engine's limits; never raises unless asked to."""
        return await self._ascore(job, self._observed())

    async def _ascore(self, job: Job, observed: bool) -> MetricResult:
        start = self._begin()
        try:
            if self.executor is None:
                slots = self.gate.loop_slots()
                await slots.acquire()
                admission = Admission(self.gate, self._deadline(), holding=True, loop_slots=slots)
                outcome: MetricResult | BaseException = await self._ainvoke(
                    job, admission, observed
                )
            else:
                admission = Admission(self.gate, self._deadline())
                # Carry the loop's context into the thread, as asyncio.to_thread does.
                run = partial(
                    contextvars.copy_context().run, self._invoke_in_slot, job, admission, observed
                )
                future = asyncio.get_running_loop().run_in_executor(self.executor, run)
                try:
                    outcome = await asyncio.wait_for(future, self.timeout)
                finally:
                    admission.close()  # a call left running past its timeout frees its slot
        except Exception as exc:
            outcome = exc
        return self._finish(job, outcome, time.perf_counter() - start)

    # ------------------------------------------------------------------ many jobs

    async def arun(
        self,
        jobs: Iterable[Job],
        *,
        on_result: Callable[[Job, MetricResult], None] | None = None,
    ) -> list[MetricResult]:
        """Score all jobs on this event loop; results come back in job order.

        ``on_result`` is called as each job finishes (progress bars, sinks). Cancelling the
        awaiting task cancels the unfinished jobs and propagates ``CancelledError``: what was
        finished before is only in what ``on_result`` received (``aevaluate`` keeps it).
        """
        observed = self._observed()

        async def one(job: Job) -> MetricResult:
            result = await self._ascore(job, observed)
            if on_result is not None:
                on_result(job, result)
            return result

        return list(await asyncio.gather(*(one(job) for job in jobs)))

    def run(
        self,
        jobs: Iterable[Job],
        *,
        on_result: Callable[[Job, MetricResult], None] | None = None,
        stop: threading.Event | None = None,
    ) -> list[MetricResult | None]:
        """Score all jobs on worker threads and wait; results come back in job order.

        Jobs start in order, ``max_concurrency`` at a time; when one sleeps out a retry
        backoff another worker takes its slot, and when it is back it takes the next free
        slot before any job not started yet (its backoff overlapped the others' work, so
        retries do not pile up at the end of the run). The calling thread only waits and
        calls ``on_result`` (callbacks run one at a time, on the caller's thread); workers
        run in a copy of the caller's context. A job over ``timeout`` is recorded as NaN at its
        deadline, its slot goes to the next job and the abandoned call sends no further
        request. Setting ``stop`` ends the run: no new job starts, unfinished ones are left to
        their daemon threads and stay None. Ctrl-C (or a ``KeyboardInterrupt`` from
        ``on_result``) does the same and propagates.
        """
        job_list = list(jobs)
        results: list[MetricResult | None] = [None] * len(job_list)
        if not job_list:
            return results

        def record(index: int, result: MetricResult) -> None:
            results[index] = result
            if on_result is not None:
                on_result(job_list[index], result)

        self._drive(_Batch(job_list), record, stop, min(len(job_list), self.max_concurrency))
        return results

    def run_feed(
        self,
        feed: JobFeed,
        *,
        on_result: Callable[[Job, MetricResult], None],
        stop: threading.Event | None = None,
    ) -> None:
        """:meth:`run` for jobs that arrive while it runs (worker processes pull theirs).

        Returns once ``feed`` is closed and every job that came is delivered to
        ``on_result``, or when the feed is cancelled or ``stop`` is set (finished jobs are
        still delivered). The run keeps ``max_concurrency`` threads, which wait in
        :meth:`JobFeed.wait_for_job`, holding no slot, while the feed is empty.
        """

        def record(index: int, result: MetricResult) -> None:
            on_result(feed.job_list[index], result)

        self._drive(feed, record, stop, self.max_concurrency)

    def _drive(
        self,
        batch: _Batch,
        deliver: Callable[[int, MetricResult], None],
        stop: threading.Event | None,
        threads: int,
    ) -> None:
        """Start ``threads`` job threads on ``batch`` and deliver its results until it ends."""
        context = contextvars.copy_context()
        observed = self._observed()

        def spawn() -> None:
            transient_thread(
                context.copy().run, args=(self._work, batch, observed), name="ragmetrics-job"
            ).start()

        batch.spawn = spawn
        batch.waiting = threads
        for _ in range(threads):
            spawn()
        taken: list[tuple[int, MetricResult | BaseException]] = []  # off the queue, not handed

        def interrupted() -> None:  # Ctrl-C, deferred to the loop's top (see _interrupts)
            batch.outbox.put((-1, _WakeUpError()))  # SimpleQueue.put: safe in a handler

        try:
            with DeferredInterrupt(interrupted) as ctrl_c:
                self._wait(batch, deliver, stop, taken, ctrl_c)
        except KeyboardInterrupt as interrupt:
            batch.stop.set()  # no new job starts
            if not getattr(interrupt, _FROM_CALLBACK, False):
                # Ctrl-C while waiting: what finished is delivered, then it stops.
                self._deliver_finished(batch, deliver, taken, quiet=True)
            raise
        finally:
            batch.stop.set()

    def _wait(
        self,
        batch: _Batch,
        deliver: Callable[[int, MetricResult], None],
        stop: threading.Event | None,
        taken: list[tuple[int, MetricResult | BaseException]],
        ctrl_c: DeferredInterrupt,
    ) -> None:
        """Deliver ``batch``'s results as they come, until it ends or is stopped."""
        while True:
            ctrl_c.check()  # between two deliveries: nothing in hand is lost
            if batch.stop.is_set() or (stop is not None and stop.is_set()):
                self._deliver_finished(batch, deliver)
                return
            if batch.finished and batch.outbox.empty():
                return
            late, wait = batch.overdue()
            for index, admission in late:
                if batch.settle(index, _JobTimeoutError()):
                    admission.close()  # its slot goes to the next job
                    batch.spare()
            try:
                taken.append(batch.outbox.get(timeout=wait))
            except queue.Empty:
                continue
            self._hand_over(batch, deliver, taken)

    def _hand_over(
        self,
        batch: _Batch,
        deliver: Callable[[int, MetricResult], None],
        taken: list[tuple[int, MetricResult | BaseException]],
        *,
        quiet: bool = False,
    ) -> None:
        """Deliver the entry in ``taken`` (emptied first, so nothing is delivered twice).

        A ``KeyboardInterrupt`` from ``deliver`` (the caller's callback asking to stop) is
        marked, so the run does not call it again for the results still waiting. ``quiet``
        (after Ctrl-C): an outcome that would raise (``raise_exceptions``, or a job's own
        interrupt) is skipped, so the caller's interrupt is what propagates.
        """
        index, outcome = taken[0]
        elapsed = batch.elapsed.pop(index, None)  # for a result without latency (a failure)
        try:
            result = None if index < 0 else self._finish(batch.jobs[index], outcome, elapsed)
        except BaseException:  # the job's own error or interrupt, raised when asked to
            if not quiet:
                raise
            result = None
        taken.clear()
        if result is None:  # a wake-up call, or skipped
            return
        try:
            deliver(index, result)
        except KeyboardInterrupt as interrupt:
            setattr(interrupt, _FROM_CALLBACK, True)
            raise

    def _deliver_finished(
        self,
        batch: _Batch,
        deliver: Callable[[int, MetricResult], None],
        taken: list[tuple[int, MetricResult | BaseException]] | None = None,
        *,
        quiet: bool = False,
    ) -> None:
        """On stop: hand over the results of jobs that finished but were not delivered yet.

        The one already ``taken`` off the queue, if any, goes first.
        """
        taken = taken if taken is not None else []
        while True:
            if not taken:
                try:
                    taken.append(batch.outbox.get_nowait())
                except queue.Empty:
                    return
            self._hand_over(batch, deliver, taken, quiet=quiet)

    def _work(self, batch: _Batch, observed: bool) -> None:
        """A worker thread: take a slot, take the next job, run it; until none is left."""
        counted = True  # ``spare`` counted this worker as waiting already
        while not batch.exhausted:
            if not counted:
                with batch.lock:
                    batch.waiting += 1
            counted = False
            got = self.gate.acquire_fresh(timeout=_WAIT_POLL_S)
            index = None
            if got:
                admission = Admission(
                    self.gate, self._deadline(), holding=True, on_park=batch.spare
                )
                index = batch.take(admission)
                if index is None:
                    admission.close()
                    if not batch.exhausted:
                        # More may come (a feed): wait for it without the slot, which a job
                        # back from its backoff needs meanwhile. Still counted as waiting,
                        # so no thread is started for a slot while this one waits.
                        batch.wait_for_job()
                        counted = True
                        continue
            with batch.lock:
                batch.waiting -= 1
            if not got:
                continue
            if index is None:
                return
            with self._stats_lock:
                self.stats.started += 1
            try:
                outcome: MetricResult | BaseException = self._invoke(
                    batch.jobs[index], admission, observed
                )
            except Exception as exc:
                outcome = exc
            except BaseException as exc:  # delivered to the waiting thread, never lost
                batch.settle(index, exc)
                return
            batch.settle(index, outcome)
