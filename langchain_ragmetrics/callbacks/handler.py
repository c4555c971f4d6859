"""The online evaluation callback: scores every retrieval of a live chain, off the request path.

On the caller's thread the handler only records and correlates callback events and, when
a trace's root run ends, enqueues one record per retrieval of that trace. A background
worker (its own thread and event loop) builds samples, runs the metrics through the
:class:`~langchain_ragmetrics.engine.ScoringEngine` and hands results to the sinks.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from functools import partial
from typing import TYPE_CHECKING, Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig
from typing_extensions import Self, override

from langchain_ragmetrics.callbacks import _exit
from langchain_ragmetrics.callbacks._pipeline import (
    AnswerFrom,
    QuestionFrom,
    ReferenceProvider,
    ScoringPipeline,
)
from langchain_ragmetrics.callbacks._records import Capture
from langchain_ragmetrics.callbacks._sampling import check_rate, is_sampled
from langchain_ragmetrics.callbacks._stats import Counters, FailureLog, HandlerStats, logger
from langchain_ragmetrics.callbacks._threads import DaemonThreadPool
from langchain_ragmetrics.callbacks._tracker import FinishedTrace, TraceTracker
from langchain_ragmetrics.callbacks._worker import BackgroundWorker, deadline_after, remaining
from langchain_ragmetrics.callbacks.sinks import BaseSink, LoggingSink
from langchain_ragmetrics.engine import ScoringEngine
from langchain_ragmetrics.metrics._base import BaseRagMetric

if TYPE_CHECKING:
    from types import TracebackType

    from langchain_core.documents import Document

__all__ = ["RagMetricsCallbackHandler"]

_STOP_GRACE_SECONDS = 2.0
_IDLE_EXIT_CLOSE_SECONDS = 5.0


def _default_metrics() -> list[BaseRagMetric]:
    from langchain_ragmetrics.metrics import ContextPrecision, ContextRelevance

    return [ContextRelevance(), ContextPrecision()]


def _untraced() -> AbstractContextManager[Any]:
    """Disable LangSmith/LangChain tracing (env or context) for everything on the worker."""
    from langsmith.run_helpers import tracing_context

    return tracing_context(enabled=False)


def _langsmith_trace_id(parent_run_id: UUID) -> UUID | None:
    """The trace id of ``parent_run_id`` when it is the current LangSmith run (a context read).

    Lets feedback carry the real trace id when the handler is attached to a chain called
    inside a ``@traceable`` function or a traced parent runnable.
    """
    from langsmith.run_helpers import get_current_run_tree

    run = get_current_run_tree()
    if run is None or run.id != parent_run_id:
        return None
    return UUID(str(run.trace_id))


def _judge_callbacks(trace_judge: str | BaseCallbackHandler | None) -> list[BaseCallbackHandler]:
    if trace_judge is None:
        return []
    if isinstance(trace_judge, BaseCallbackHandler):
        return [trace_judge]
    if isinstance(trace_judge, str) and trace_judge:
        from langchain_core.tracers import LangChainTracer

        return [LangChainTracer(project_name=trace_judge)]
    msg = "`trace_judge` must be a LangSmith project name or a callback handler (a tracer)"
    raise TypeError(msg)


def _on_worker_start(
    pools: Sequence[DaemonThreadPool], handler: weakref.ref[RagMetricsCallbackHandler]
) -> None:
    """Start the judge and sink threads and the exit hook with the worker.

    Holds the handler weakly: the worker must not keep a dropped handler alive.
    """
    for pool in pools:
        pool.start()
    target = handler()
    if target is not None and target.exit_timeout is not None:
        _exit.register(target)


def _shutdown_pools(
    judges: DaemonThreadPool, pipeline: ScoringPipeline, timeout: float | None
) -> bool:
    """Stop the judge threads (queued calls cancelled), then close the sinks."""
    stopped = judges.stop(timeout, cancel_pending=True)
    return pipeline.close(timeout) and stopped


def _check_metrics(metrics: Sequence[BaseRagMetric]) -> list[BaseRagMetric]:
    out = list(metrics)
    if not out:
        msg = "`metrics` must name at least one metric"
        raise ValueError(msg)
    keys: set[str] = set()
    for i, metric in enumerate(out):
        if not isinstance(metric, BaseRagMetric):
            msg = f"`metrics[{i}]` must be a metric (BaseRagMetric), got {type(metric).__name__}"
            raise TypeError(msg)
        if metric.metric_name in keys:
            msg = f"`metrics[{i}]`: two metrics share the key {metric.metric_name!r}"
            raise ValueError(msg)
        keys.add(metric.metric_name)
    return out


def _check_sinks(sinks: Sequence[BaseSink]) -> list[BaseSink]:
    out = list(sinks)
    for i, sink in enumerate(out):
        if not isinstance(sink, BaseSink):
            msg = (
                f"`sinks[{i}]` must be a sink (BaseSink), got {type(sink).__name__}; "
                "wrap a function in CallableSink(fn)"
            )
            raise TypeError(msg)
    return out


class RagMetricsCallbackHandler(BaseCallbackHandler):
    """Scores every (sampled) retrieval of a live chain or graph, in the background.

    Attach it like any callback: ``chain.invoke(q, config={"callbacks": [handler]})`` or
    ``chain.with_config(callbacks=[handler])``. Works for LCEL chains, LangGraph graphs, a
    retriever on its own, several retrievers per trace, sync and async, batch and stream,
    and many concurrent requests sharing one handler.

    A retrieval is scored once its trace's root run ends (so the answer is known); a root
    run that raises is not scored. Each retrieval becomes a sample: question = the
    retriever's query (see ``question_from``), contexts = the documents, answer = the root
    output (see ``answer_from``), references = run metadata keys ``reference``,
    ``reference_contexts``, ``reference_context_ids`` or the ``reference_provider``.
    A metric whose input is missing gives a *skipped* result (score None), never 0.

    Args:
        metrics: The metrics; default ``[ContextRelevance(), ContextPrecision()]`` (both work
            without a reference; precision then judges against the answer).
        sinks: Where results go; default ``[LoggingSink()]``.
        sample_rate: Fraction of traces scored, decided by a hash of the trace id.
        question_from: ``"query"`` (the retriever's query), ``"input"`` (the root input:
            a string, a message, or a dict key such as ``question``/``input``/``query``), or
            ``fn(root_input) -> str | None`` (None falls back to the query).
        answer_from: ``fn(root_output) -> str | None``; the default reads strings, messages,
            dict keys such as ``answer``/``output``/``result`` and the last AI message.
        reference_provider: ``fn(question, metadata) -> str | dict | None`` (or async),
            called in the background when run metadata lacks a reference field; a dict may
            set ``reference``, ``reference_contexts`` and ``reference_context_ids``.
        max_queue_size: Bound on retrievals waiting or being scored; when full, new ones
            are dropped and counted in ``stats.dropped``.
        max_concurrency: Judge jobs running at once in the background.
        rate_limit_per_minute: Optional cap on judge calls per minute.
        timeout: Seconds allowed per metric job before it fails (None: no limit).
        trace_judge: None (judge runs are never traced), a LangSmith project name, or a
            tracer to which the judge runs are traced, apart from the user's traces.
        max_open_traces: Bound on traces in progress (an abandoned stream never ends).
        exit_timeout: Seconds the interpreter-exit hook may spend flushing before it closes
            the handler (unfinished work is reported, then dropped); None disables it.
        name: Prefix of the background threads' names.
    """

    run_inline: bool = True
    """Called directly on the caller's thread or loop: the methods only record and enqueue."""
    raise_error: bool = False
    """Errors never propagate to the user's code."""

    def __init__(
        self,
        *,
        metrics: Sequence[BaseRagMetric] | None = None,
        sinks: Sequence[BaseSink] | None = None,
        sample_rate: float = 1.0,
        question_from: QuestionFrom = "query",
        answer_from: AnswerFrom | None = None,
        reference_provider: ReferenceProvider | None = None,
        max_queue_size: int = 1000,
        max_concurrency: int = 4,
        rate_limit_per_minute: float | None = None,
        timeout: float | None = 120.0,
        trace_judge: str | BaseCallbackHandler | None = None,
        max_open_traces: int = 10_000,
        exit_timeout: float | None = 10.0,
        name: str = "ragmetrics",
    ) -> None:
        if question_from not in ("query", "input") and not callable(question_from):
            msg = "`question_from` must be 'query', 'input' or a callable"
            raise ValueError(msg)
        if answer_from is not None and not callable(answer_from):
            msg = "`answer_from` must be a callable"
            raise TypeError(msg)
        if reference_provider is not None and not callable(reference_provider):
            msg = "`reference_provider` must be a callable"
            raise TypeError(msg)
        if max_concurrency < 1:
            msg = "`max_concurrency` must be at least 1"
            raise ValueError(msg)
        if timeout is not None and timeout <= 0:
            msg = "`timeout` must be positive (or None)"
            raise ValueError(msg)
        if exit_timeout is not None and exit_timeout < 0:
            msg = "`exit_timeout` must be >= 0 (or None)"
            raise ValueError(msg)
        self.metrics = _check_metrics(_default_metrics() if metrics is None else metrics)
        self.sinks = _check_sinks([LoggingSink()] if sinks is None else sinks)
        self.sample_rate = check_rate(sample_rate)
        self.exit_timeout = exit_timeout
        self.name = name
        self._counters = Counters()
        self._failures = FailureLog()
        self._tracker = TraceTracker(
            max_open_traces=max_open_traces, find_trace_id=_langsmith_trace_id
        )
        judge_config: RunnableConfig = {"callbacks": _judge_callbacks(trace_judge)}
        judges = DaemonThreadPool(name=f"{name}-judge", size=max_concurrency)
        sinks_pool = DaemonThreadPool(name=f"{name}-sinks")
        self.engine = ScoringEngine(
            max_concurrency=max_concurrency,
            timeout=timeout,
            rate_limit_per_minute=rate_limit_per_minute,
            config=judge_config,
            executor=judges,
        )
        self._pipeline = ScoringPipeline(
            metrics=self.metrics,
            sinks=self.sinks,
            engine=self.engine,
            question_from=question_from,
            answer_from=answer_from,
            reference_provider=reference_provider,
            counters=self._counters,
            failures=self._failures,
            sink_pool=sinks_pool,
        )
        self._worker: BackgroundWorker[Capture] = BackgroundWorker(
            self._pipeline.process,
            max_queue_size=max_queue_size,
            max_active=max_concurrency,
            name=f"{name}-worker",
            counters=self._counters,
            failures=self._failures,
            thread_context=_untraced if trace_judge is None else None,
            on_start=partial(_on_worker_start, (judges, sinks_pool), weakref.ref(self)),
            on_idle_exit=partial(_shutdown_pools, judges, self._pipeline, _IDLE_EXIT_CLOSE_SECONDS),
        )
        self._judges = judges
        self._finalizer = weakref.finalize(self, self._worker.stop_when_idle)
        self._close_lock = threading.Lock()
        self._closed = False

    # ----------------------------------------------------------------- public API

    @property
    def stats(self) -> HandlerStats:
        """A snapshot of the counters (see :class:`HandlerStats`)."""
        return self._counters.snapshot(
            queued=self._worker.queued, open_traces=self._tracker.open_traces
        )

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (a closed handler drops new work)."""
        return self._closed

    def reset_stats(self) -> None:
        """Zero the counters and log every failure kind once again."""
        self._counters.reset()
        self._failures.reset()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the retrievals enqueued before this call are scored and delivered.

        Args:
            timeout: Seconds to wait at most (None: until done).

        Returns:
            True when everything was done in time; otherwise False, and
            ``stats.pending_at_deadline`` says how many retrievals were still pending.
        """
        if self._on_own_thread("flush"):
            return False
        deadline = deadline_after(timeout)
        done = self._worker.flush(timeout)
        return self._pipeline.flush_sinks(remaining(deadline)) and done

    async def aflush(self, timeout: float | None = None) -> bool:
        """:meth:`flush` without blocking the event loop."""
        return await asyncio.to_thread(self.flush, timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Flush, then stop the background threads and close the sinks (idempotent).

        New retrievals are dropped from now on. Work still unfinished at the deadline is
        cancelled and counted in ``stats.abandoned`` (and ``stats.pending_at_deadline``).

        Returns:
            True when everything finished and shut down in time.
        """
        if self._on_own_thread("close"):
            return False
        with self._close_lock:
            if self._closed:
                return True
            self._closed = True
        deadline = deadline_after(timeout)
        self._worker.close_intake()
        flushed = self.flush(timeout)
        left = remaining(deadline)
        stopped = self._worker.stop(None if left is None else max(left, _STOP_GRACE_SECONDS))
        sinks_closed = _shutdown_pools(self._judges, self._pipeline, remaining(deadline))
        _exit.unregister(self)
        self._finalizer.detach()
        return flushed and stopped and sinks_closed

    async def aclose(self, timeout: float | None = None) -> bool:
        """:meth:`close` without blocking the event loop."""
        return await asyncio.to_thread(self.close, timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(self.exit_timeout)

    def __copy__(self) -> Self:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self

    def _flush_at_exit(self) -> None:
        """The interpreter-exit hook: close within ``exit_timeout``; never raises.

        Work still queued at the deadline is cancelled and reported. A judge request already
        in flight is not interrupted: give the judge a request timeout to bound it.
        """
        with contextlib.suppress(Exception):
            self.close(self.exit_timeout)
            left = self._counters.snapshot(queued=0, open_traces=0).pending_at_deadline
            if left:
                logger.warning(
                    "ragmetrics: %d retrievals were still pending at interpreter exit "
                    "(not scored); raise exit_timeout or flush() before exiting",
                    left,
                )

    # --------------------------------------------------------------- what LangChain sees

    @property
    @override
    def ignore_llm(self) -> bool:
        return True  # model runs never parent a retrieval; skipping them saves per-token calls

    @property
    @override
    def ignore_chat_model(self) -> bool:
        return True

    @property
    @override
    def ignore_agent(self) -> bool:
        return True

    @property
    @override
    def ignore_retry(self) -> bool:
        return True

    @property
    @override
    def ignore_custom_event(self) -> bool:
        return True

    @override
    def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start("on_chain_start", run_id, parent_run_id, inputs, metadata)

    @override
    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        given = input_str if inputs is None else inputs
        self._start("on_tool_start", run_id, parent_run_id, given, metadata)

    @override
    def on_retriever_start(
        self,
        serialized: dict[str, Any],
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = kwargs.get("name") or (serialized or {}).get("name")
        retrieval = (query, name if isinstance(name, str) else None, tags or ())
        self._start(
            "on_retriever_start", run_id, parent_run_id, query, metadata, retrieval=retrieval
        )

    @override
    def on_chain_end(
        self,
        outputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._end("on_chain_end", run_id, outputs, kwargs.get("inputs"))

    @override
    def on_tool_end(
        self,
        output: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._end("on_tool_end", run_id, output, None)

    @override
    def on_retriever_end(
        self,
        documents: Sequence[Document],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._end("on_retriever_end", run_id, None, None, documents)

    @override
    def on_chain_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._fail("on_chain_error", run_id)

    @override
    def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._fail("on_tool_error", run_id)

    @override
    def on_retriever_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._fail("on_retriever_error", run_id)

    # ------------------------------------------------------------------ internals

    def _on_own_thread(self, action: str) -> bool:
        """True (and logged) when called from a sink, a provider or a judge: it would deadlock."""
        current = threading.current_thread()
        own = [self._worker.thread, *self._judges.threads, *self._pipeline.sink_pool.threads]
        if not any(current is thread for thread in own):
            return False
        self._failures.report(
            f"{action}-from-worker",
            f"{action}() called from the handler's own background thread (a sink, a "
            "reference provider or a judge); ignored to avoid a deadlock",
        )
        return True

    def _internal_error(self, event: str, exc: Exception) -> None:
        self._counters.add(handler_errors=1)
        self._failures.report(
            f"handler:{event}:{type(exc).__name__}", f"{event} failed: {exc!r}", exc
        )

    def _start(
        self,
        event: str,
        run_id: UUID,
        parent_run_id: UUID | None,
        inputs: Any,
        metadata: Mapping[str, Any] | None,
        *,
        retrieval: tuple[str, str | None, Sequence[str]] | None = None,
    ) -> None:
        try:
            evicted = self._tracker.start(
                run_id, parent_run_id, inputs=inputs, metadata=metadata, retrieval=retrieval
            )
            if evicted:
                self._counters.add(evicted=evicted)
        except Exception as exc:
            self._internal_error(event, exc)

    def _end(
        self,
        event: str,
        run_id: UUID,
        outputs: Any,
        inputs: Any,
        documents: Sequence[Document] | None = None,
    ) -> None:
        try:
            finished = self._tracker.end(
                run_id, outputs=outputs, inputs=inputs, documents=documents
            )
            if finished is not None:
                self._dispatch(finished)
        except Exception as exc:
            self._internal_error(event, exc)

    def _fail(self, event: str, run_id: UUID) -> None:
        try:
            finished = self._tracker.fail(run_id)
            if finished is not None:
                self._dispatch(finished)
        except Exception as exc:
            self._internal_error(event, exc)

    def _dispatch(self, finished: FinishedTrace) -> None:
        """Count a finished trace and enqueue its retrievals if the trace is sampled."""
        if finished.errored:
            self._counters.add(traces=1, errored=1)
            return
        captures = finished.captures
        trace_id = (captures[0].trace_id or finished.root_run_id) if captures else None
        sampled = trace_id is not None and is_sampled(trace_id, self.sample_rate)
        count = len(captures)
        self._counters.add(traces=1, seen=count, sampled=count if sampled else 0)
        if sampled:
            for capture in captures:
                self._worker.submit(capture)
