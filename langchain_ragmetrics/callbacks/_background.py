"""The handler's background side: worker loop, judge threads, sink thread, and their lifetime.

``submit`` is all the caller's thread pays. ``flush`` waits for earlier work, ``close``
flushes within a deadline and then stops everything, cancelling what is left.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from functools import partial

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig

from langchain_ragmetrics._engine import ScoringEngine
from langchain_ragmetrics._threads import DaemonThreadPool
from langchain_ragmetrics.callbacks._pipeline import (
    AnswerFrom,
    QuestionFrom,
    ReferenceProvider,
    ScoringPipeline,
)
from langchain_ragmetrics.callbacks._records import Capture
from langchain_ragmetrics.callbacks._setup import judge_callbacks, untraced
from langchain_ragmetrics.callbacks._stats import Counters, FailureLog
from langchain_ragmetrics.callbacks._worker import BackgroundWorker, deadline_after, remaining
from langchain_ragmetrics.callbacks.sinks import BaseSink
from langchain_ragmetrics.metrics._base import BaseRagMetric

__all__ = ["Background"]

_STOP_GRACE_SECONDS = 2.0
_IDLE_EXIT_CLOSE_SECONDS = 5.0


def _start_pools(pools: Sequence[DaemonThreadPool], then: Callable[[], object]) -> None:
    for pool in pools:
        pool.start()
    then()


def _shutdown(judges: DaemonThreadPool, pipeline: ScoringPipeline, timeout: float | None) -> bool:
    """Stop the judge threads (queued calls cancelled), then close the sinks."""
    stopped = judges.stop(timeout, cancel_pending=True)
    return pipeline.close(timeout) and stopped


class Background:
    """Everything the handler runs off the request path, started on the first ``submit``.

    Judge calls run through the metrics' sync ``invoke`` on dedicated threads (async model
    clients are often shared process-wide and bound to the application's event loop), under
    the engine's concurrency limit, timeout and rate limit, scheduled by the worker's loop.

    Args:
        metrics: The metrics.
        sinks: The sinks.
        question_from: See the handler.
        answer_from: See the handler.
        reference_provider: See the handler.
        max_queue_size: Bound on retrievals waiting or being scored.
        max_concurrency: Judge jobs at once (also the number of judge threads).
        rate_limit_per_minute: Cap on judge calls per minute.
        timeout: Seconds per metric job.
        trace_judge: None, a LangSmith project name or a tracer for the judge runs.
        name: Prefix of the thread names.
        counters: Shared counters.
        failures: Shared log-once reporter.
        on_start: Called once when the threads start (the handler registers its exit hook).
    """

    def __init__(
        self,
        *,
        metrics: Sequence[BaseRagMetric],
        sinks: Sequence[BaseSink],
        question_from: QuestionFrom,
        answer_from: AnswerFrom | None,
        reference_provider: ReferenceProvider | None,
        max_queue_size: int,
        max_concurrency: int,
        rate_limit_per_minute: float | None,
        timeout: float | None,
        trace_judge: str | BaseCallbackHandler | None,
        name: str,
        counters: Counters,
        failures: FailureLog,
        on_start: Callable[[], object],
    ) -> None:
        judge_config: RunnableConfig = {"callbacks": judge_callbacks(trace_judge)}
        self.judges = DaemonThreadPool(name=f"{name}-judge", size=max_concurrency)
        self.sink_pool = DaemonThreadPool(name=f"{name}-sinks")
        self.engine = ScoringEngine(
            max_concurrency=max_concurrency,
            timeout=timeout,
            rate_limit_per_minute=rate_limit_per_minute,
            config=judge_config,
            executor=self.judges,
        )
        self.pipeline = ScoringPipeline(
            metrics=metrics,
            sinks=sinks,
            engine=self.engine,
            question_from=question_from,
            answer_from=answer_from,
            reference_provider=reference_provider,
            counters=counters,
            failures=failures,
            sink_pool=self.sink_pool,
        )
        self.worker: BackgroundWorker[Capture] = BackgroundWorker(
            self.pipeline.process,
            max_queue_size=max_queue_size,
            max_active=max_concurrency,
            name=f"{name}-worker",
            counters=counters,
            failures=failures,
            thread_context=untraced if trace_judge is None else None,
            on_start=partial(_start_pools, (self.judges, self.sink_pool), on_start),
            on_idle_exit=partial(_shutdown, self.judges, self.pipeline, _IDLE_EXIT_CLOSE_SECONDS),
        )
        self._failures = failures

    @property
    def queued(self) -> int:
        """Retrievals waiting or being scored."""
        return self.worker.queued

    def submit(self, capture: Capture) -> bool:
        """Enqueue one retrieval (False when dropped)."""
        return self.worker.submit(capture)

    def owns_current_thread(self, action: str) -> bool:
        """True (and logged once) when called from a background thread: it would deadlock."""
        current = threading.current_thread()
        own = [self.worker.thread, *self.judges.threads, *self.sink_pool.threads]
        if not any(current is thread for thread in own):
            return False
        self._failures.report(
            f"{action}-from-worker",
            f"{action}() called from the handler's own background thread (a sink, a "
            "reference provider or a judge); ignored to avoid a deadlock",
        )
        return True

    def flush(self, timeout: float | None) -> bool:
        """Wait for the work submitted so far and flush the sinks, within ``timeout``."""
        if self.owns_current_thread("flush"):
            return False
        deadline = deadline_after(timeout)
        done = self.worker.flush(timeout)
        return self.pipeline.flush_sinks(remaining(deadline)) and done

    def close(self, timeout: float | None) -> bool:
        """Refuse new work, flush within ``timeout``, then stop and close the sinks."""
        if self.owns_current_thread("close"):
            return False
        deadline = deadline_after(timeout)
        self.worker.close_intake()
        flushed = self.flush(timeout)
        left = remaining(deadline)
        stopped = self.worker.stop(None if left is None else max(left, _STOP_GRACE_SECONDS))
        return _shutdown(self.judges, self.pipeline, remaining(deadline)) and stopped and flushed

    def stop_when_idle(self) -> None:
        """Finish queued work, then let the threads exit (the handler was collected)."""
        self.worker.stop_when_idle()
