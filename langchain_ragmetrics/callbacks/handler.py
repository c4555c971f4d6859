"""The online evaluation callback: scores every retrieval of a live chain, off the request path.

On the caller's thread the handler only records and correlates callback events and, when
a trace's root run ends, enqueues one record per retrieval of that trace. A background
worker (its own thread and event loop) builds samples, runs the metrics through the
:class:`~langchain_ragmetrics._engine.ScoringEngine` and hands results to the sinks.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from typing_extensions import Self, override

from langchain_ragmetrics.callbacks import _exit
from langchain_ragmetrics.callbacks._background import Background
from langchain_ragmetrics.callbacks._isolated import IsolatedBackground, ProcessIsolation
from langchain_ragmetrics.callbacks._pipeline import AnswerFrom, QuestionFrom, ReferenceProvider
from langchain_ragmetrics.callbacks._sampling import check_rate, is_sampled
from langchain_ragmetrics.callbacks._setup import (
    check_metrics,
    check_positive,
    check_sinks,
    langsmith_trace_id,
)
from langchain_ragmetrics.callbacks._stats import Counters, FailureLog, HandlerStats, logger
from langchain_ragmetrics.callbacks._tracker import FinishedTrace, TraceTracker
from langchain_ragmetrics.callbacks.sinks import BaseSink
from langchain_ragmetrics.metrics._base import BaseRagMetric

if TYPE_CHECKING:
    from types import TracebackType

    from langchain_core.documents import Document

__all__ = ["RagMetricsCallbackHandler"]


def _register_exit(handler: weakref.ref[RagMetricsCallbackHandler]) -> None:
    """Flush ``handler`` at interpreter exit; holds it weakly so it can still be collected."""
    target = handler()
    if target is not None and target.exit_timeout is not None:
        _exit.register(target)


def _process_isolation(
    isolation: Literal["thread", "process"] | ProcessIsolation,
    metrics: object,
    sinks: object,
    reference_provider: object,
) -> ProcessIsolation | None:
    """The isolated mode's options, or None for in-process scoring; checks the conflicts."""
    if isolation == "thread":
        return None
    if isolation == "process":
        isolation = ProcessIsolation()
    if not isinstance(isolation, ProcessIsolation):
        msg = "`isolation` must be 'thread', 'process' or a ProcessIsolation"
        raise TypeError(msg)
    for option, value in (
        ("metrics", metrics),
        ("sinks", sinks),
        ("reference_provider", reference_provider),
    ):
        if value is not None:
            msg = (
                f"with isolation='process', `{option}` is built in the child process: "
                "return it from ProcessIsolation(setup=...) as part of a ScoringSetup"
            )
            raise ValueError(msg)
    return isolation


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
        isolation: ``"thread"`` (default): scoring runs on background threads of this
            process. ``"process"`` or a :class:`ProcessIsolation`: it runs in a child
            process that builds its own metrics and sinks (``ProcessIsolation.setup``; then
            ``metrics``, ``sinks`` and ``reference_provider`` must be None here), and the
            caller's thread only hands it plain data.
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
        isolation: Literal["thread", "process"] | ProcessIsolation = "thread",
    ) -> None:
        if question_from not in ("query", "input") and not callable(question_from):
            msg = "`question_from` must be 'query', 'input' or a callable"
            raise ValueError(msg)
        for option, hook in (
            ("answer_from", answer_from),
            ("reference_provider", reference_provider),
        ):
            if hook is not None and not callable(hook):
                msg = f"`{option}` must be a callable"
                raise TypeError(msg)
        if max_concurrency < 1:
            msg = "`max_concurrency` must be at least 1"
            raise ValueError(msg)
        check_positive("timeout", timeout)
        check_positive("exit_timeout", exit_timeout, allow_zero=True)
        process = _process_isolation(isolation, metrics, sinks, reference_provider)
        self.metrics = [] if process else check_metrics(metrics)
        self.sinks = [] if process else check_sinks(sinks)
        self.sample_rate = check_rate(sample_rate)
        self.exit_timeout = exit_timeout
        self.name = name
        self._counters = Counters()
        self._failures = FailureLog()
        self._tracker = TraceTracker(
            max_open_traces=max_open_traces, find_trace_id=langsmith_trace_id
        )
        shared: dict[str, Any] = {
            "question_from": question_from,
            "answer_from": answer_from,
            "max_queue_size": max_queue_size,
            "max_concurrency": max_concurrency,
            "rate_limit_per_minute": rate_limit_per_minute,
            "timeout": timeout,
            "trace_judge": trace_judge,
            "name": name,
            "counters": self._counters,
            "failures": self._failures,
            "on_start": partial(_register_exit, weakref.ref(self)),
        }
        self._background: Background | IsolatedBackground
        if process is not None:
            self._background = IsolatedBackground(isolation=process, **shared)
        else:
            self._background = Background(
                metrics=self.metrics,
                sinks=self.sinks,
                reference_provider=reference_provider,
                **shared,
            )
        self.engine = self._background.engine
        self._finalizer = weakref.finalize(self, self._background.stop_when_idle)
        self._close_lock = threading.Lock()
        self._closed = False

    # ----------------------------------------------------------------- public API

    @property
    def stats(self) -> HandlerStats:
        """A snapshot of the counters (see :class:`HandlerStats`)."""
        return self._counters.snapshot(
            queued=self._background.queued, open_traces=self._tracker.open_traces
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
        return self._background.flush(timeout)

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
        if self._background.owns_current_thread("close"):
            return False
        with self._close_lock:
            if self._closed:
                return True
            self._closed = True
        done = self._background.close(timeout)
        _exit.unregister(self)
        self._finalizer.detach()
        return done

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
                self._background.submit(capture)
