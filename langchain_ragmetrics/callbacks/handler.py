"""The online evaluation callback: scores every retrieval of a live chain, off the request path.

On the caller's thread the handler only records and correlates callback events and, when
a trace's root run ends, enqueues one record per retrieval of that trace. A background
worker (its own thread and event loop) builds samples, runs the metrics through the
:class:`~langchain_ragmetrics._engine.ScoringEngine` and hands results to the sinks.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from typing_extensions import Self, override

from langchain_ragmetrics._retrieval import AnswerFrom, QuestionFrom, ReferenceProvider
from langchain_ragmetrics.callbacks._auto import resolve_auto
from langchain_ragmetrics.callbacks._isolation import ProcessIsolation
from langchain_ragmetrics.callbacks._runtime import start_runtime
from langchain_ragmetrics.callbacks._sampling import is_sampled
from langchain_ragmetrics.callbacks._settings import (
    DEFAULT_CLOSE_TIMEOUT,
    DEFAULT_MAX_CONCURRENCY,
    HandlerSettings,
)
from langchain_ragmetrics.callbacks._setup import langsmith_trace_id
from langchain_ragmetrics.callbacks._stats import Counters, FailureLog, HandlerStats
from langchain_ragmetrics.callbacks._tracker import FinishedTrace, TraceTracker
from langchain_ragmetrics.callbacks.sinks import BaseSink
from langchain_ragmetrics.metrics._base import BaseRagMetric

if TYPE_CHECKING:
    from types import TracebackType

    from langchain_core.documents import Document
    from langchain_core.outputs import ChatGenerationChunk, GenerationChunk

__all__ = ["RagMetricsCallbackHandler"]


_HANDLERS: weakref.WeakSet[RagMetricsCallbackHandler] = weakref.WeakSet()
"""Live handlers, started afresh in a forked process (see ``_after_fork``)."""


def _after_fork_in_child() -> None:
    for handler in list(_HANDLERS):
        with contextlib.suppress(Exception):  # a fork must never fail because of us
            handler._after_fork()


if hasattr(os, "register_at_fork"):  # POSIX only
    os.register_at_fork(after_in_child=_after_fork_in_child)


class RagMetricsCallbackHandler(BaseCallbackHandler):
    """Scores every (sampled) retrieval of a live chain or graph, in the background.

    Attach it like any callback: ``chain.invoke(q, config={"callbacks": [handler]})`` or
    ``chain.with_config(callbacks=[handler])``. Works for LCEL chains, LangGraph graphs,
    agents whose tools retrieve, a retriever on its own, several retrievers per trace, sync
    and async, batch and stream, and many concurrent requests sharing one handler.

    A retrieval is scored once its trace's root run ends (so the answer is known); a root
    run that raises is not scored, a stream the consumer closed early is (with the answer
    streamed so far). Each sink has its own outbox and thread, so a sink whose backend is
    down delays nothing else; ``flush``, ``close`` and the exit hook are bounded (30 s by
    default). Options are checked once into :attr:`settings`. Each retrieval becomes a
    sample: question = the
    retriever's query (see ``question_from``), contexts = the documents, answer = the root
    output (see ``answer_from``), references = run metadata keys ``reference``,
    ``reference_contexts``, ``reference_context_ids`` or the ``reference_provider``.
    A metric with nothing to assess gives a *skipped* result (no score, no error), never 0.

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
            Both functions run in the background, in this process, each call within
            ``timeout``: one that does not return in time fails that retrieval, and a few
            late calls at most may hold a thread (past that, calls fail without running).
        reference_provider: ``fn(question, metadata) -> str | dict | None`` (or async),
            called in the background when run metadata lacks a reference field; a dict may
            set ``reference``, ``reference_contexts`` and ``reference_context_ids``. It
            gets ``timeout`` seconds too: one that does not answer fails the retrieval's
            metrics, and late sync calls hold at most a quarter of the judge threads.
        max_queue_size: Bound on retrievals waiting or being scored; when full, new ones
            are dropped and counted in ``stats.dropped``.
        max_concurrency: Judge calls at work at once in the background (default 16: with
            a 200 ms judge and 2 metrics that keeps up with 40 retrievals a second; see
            the online docs for sizing).
        rate_limit_per_minute: Optional cap on judge calls per minute.
        timeout: Seconds allowed per metric job before it fails (None: no limit).
        trace_judge: None (judge runs are never traced: not by LangSmith, OpenTelemetry
            instrumentations, nor MLflow autologging turned on before), a LangSmith
            project name, or a tracer to which the judge runs are traced, apart from the
            user's traces.
        max_open_traces: Bound on traces in progress (an abandoned stream never ends).
        sink_queue_size: Bound on results waiting in each sink's own outbox; a sink that
            cannot keep up (LangSmith down) drops the overflow, counted in
            ``stats.sinks[key].dropped``, and never slows scoring or the other sinks.
        exit_timeout: Seconds the interpreter-exit hook may spend flushing before it closes
            the handler (unfinished work is reported, then dropped); None disables it.
            Queued work is flushed at exit even if the handler was dropped.
        name: Prefix of the background threads' names.
        isolation: ``"auto"`` (default): judges and segmentation in a child process when
            that is safe (POSIX, not frozen; the metrics and ``reference_provider`` pickle,
            or the metrics' judges can be rebuilt there from a recipe, as ``ChatOpenAI``
            can; ``trace_judge`` is not a tracer object), with the results delivered to
            ``sinks`` here, in this process (a sink the child can build again, such as a
            ``LangSmithFeedbackSink`` with its own client, delivers from the child); else
            on this process's threads with one warning saying why. ``"thread"``: on
            background threads of this process.
            ``"process"`` or a :class:`ProcessIsolation`: in a child process that builds
            its own metrics and sinks (``ProcessIsolation.setup``; then ``metrics``,
            ``sinks`` and ``reference_provider`` must be None here); the caller's thread
            only hands it plain data.
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
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        rate_limit_per_minute: float | None = None,
        timeout: float | None = 120.0,
        trace_judge: str | BaseCallbackHandler | None = None,
        max_open_traces: int = 10_000,
        sink_queue_size: int = 10_000,
        exit_timeout: float | None = DEFAULT_CLOSE_TIMEOUT,
        name: str = "ragmetrics",
        isolation: Literal["auto", "thread", "process"] | ProcessIsolation = "auto",
    ) -> None:
        options: dict[str, Any] = {
            "metrics": metrics,
            "sinks": sinks,
            "sample_rate": sample_rate,
            "question_from": question_from,
            "answer_from": answer_from,
            "reference_provider": reference_provider,
            "max_queue_size": max_queue_size,
            "max_concurrency": max_concurrency,
            "rate_limit_per_minute": rate_limit_per_minute,
            "timeout": timeout,
            "trace_judge": trace_judge,
            "max_open_traces": max_open_traces,
            "sink_queue_size": sink_queue_size,
            "exit_timeout": exit_timeout,
            "name": name,
        }
        # Every option is checked first (a bad one raises before anything is decided).
        auto = isolation == "auto"
        self.settings = HandlerSettings(**options, isolation="thread" if auto else isolation)
        self.metrics = self.settings.metrics
        """The metrics scored with (in a child process: copies of these)."""
        self.sinks = self.settings.sinks
        """The sinks results go to: these objects, in this process, except those the child
        process builds again and delivers with (``BaseSink.for_child_process``: a
        ``LangSmithFeedbackSink`` with its own client) and those an explicit
        ``ProcessIsolation(setup=...)`` builds in the child."""
        local_sinks: list[BaseSink] | None = None
        in_child: tuple[int, ...] = ()
        if auto:
            resolved = resolve_auto(
                metrics=self.metrics,
                reference_provider=self.settings.reference_provider,
                trace_judge=self.settings.trace_judge,
                sinks=self.sinks,
            )
            if resolved.isolation != "thread":
                options.update(metrics=None, sinks=None, reference_provider=None)
                self.settings = HandlerSettings(**options, isolation=resolved.isolation)
                local_sinks = self.sinks  # the child sends its results here (but see in_child)
                in_child = resolved.in_child
        self.sample_rate = self.settings.sample_rate
        self.exit_timeout = self.settings.exit_timeout
        self.name = name
        self._local = (local_sinks, in_child, max_open_traces)
        self._closed = False
        self._start_runtime()
        _HANDLERS.add(self)

    def _start_runtime(self) -> None:
        """Counters, tracker and runtime, new (at construction, and in a forked process)."""
        local_sinks, in_child, max_open_traces = self._local
        self._counters = Counters()
        self._failures = FailureLog()
        self._tracker = TraceTracker(
            max_open_traces=max_open_traces, find_trace_id=langsmith_trace_id
        )
        self._background = start_runtime(
            self.settings,
            counters=self._counters,
            failures=self._failures,
            sinks=local_sinks,
            in_child=in_child,
        )
        self.engine = self._background.engine
        self._finalizer = weakref.finalize(self, self._background.stop_when_idle)
        self._close_lock = threading.Lock()
        self._close_done = threading.Event()  # set with ``_close_ok`` once a close returned
        self._close_ok = False

    def _after_fork(self) -> None:
        """In a forked process (a pre-forking server's worker), start afresh.

        The parent's threads and scoring process are not ours: they are let go untouched.
        The counters are this process's own; a handler closed before the fork stays closed.
        """
        self._finalizer.detach()
        self._background.forget()
        for sink in self.sinks or ():
            with contextlib.suppress(Exception):
                sink.after_fork()
        if self._closed:
            return
        self._start_runtime()

    # ----------------------------------------------------------------- public API

    @property
    def stats(self) -> HandlerStats:
        """A snapshot of the counters and of each sink's figures (see :class:`HandlerStats`)."""
        return self._counters.snapshot(
            queued=self._background.queued,
            open_traces=self._tracker.open_traces,
            sinks=self._background.sink_stats(),
        )

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (a closed handler drops new work)."""
        return self._closed

    def reset_stats(self) -> None:
        """Start a new period of the counters and log every failure kind once again.

        Safe at any moment, work in flight or not: once what was in flight at the reset has
        finished, both identities of :class:`HandlerStats` hold exactly. A retrieval
        sampled before the reset and not finished is carried over (``seen`` and ``sampled``
        start at their number; each ends as processed, dropped or abandoned after it); results
        produced before the reset are left out of every sink's figures, wherever they end.
        With a scoring process, the reset is taken at one moment there too: this call waits
        for its answer, 5 s at most, and not at all from the handler's own threads (a sink's
        ``emit``, a ``question_from``), which that answer may need.
        """
        self._background.reset_stats()
        self._failures.reset()

    def flush(self, timeout: float | None = DEFAULT_CLOSE_TIMEOUT) -> bool:
        """Wait until the retrievals enqueued before this call are scored and delivered.

        Args:
            timeout: Seconds to wait at most (default 30; None: until done, which a hung
                sink or judge can make forever).

        Returns:
            True when everything was done in time; otherwise False:
            ``stats.pending_at_deadline`` says how many retrievals were still being scored
            and ``stats.sinks[key].pending`` how many results each sink still holds.
            Nothing is dropped by a flush.
        """
        return self._background.flush(timeout)

    async def aflush(self, timeout: float | None = DEFAULT_CLOSE_TIMEOUT) -> bool:
        """:meth:`flush` without blocking the event loop."""
        return await asyncio.to_thread(self.flush, timeout)

    def close(self, timeout: float | None = DEFAULT_CLOSE_TIMEOUT) -> bool:
        """Flush, then stop the background threads and close the sinks (once).

        Returns within ``timeout`` (default 30 s, plus up to 2 s to stop the worker and 2 s
        for the sinks to close) even when a judge or a sink hangs. New retrievals are
        dropped from now on. Work still
        unfinished at the deadline is cancelled: retrievals are counted in
        ``stats.abandoned`` (and ``stats.pending_at_deadline``), undelivered results in
        ``stats.sinks[key].dropped`` (those a sink is still delivering stay ``pending``
        until its call returns), and warnings say how many of each were left.

        A second call waits, within its own ``timeout``, for the first to end and returns
        its outcome.

        Returns:
            True when everything finished and shut down in time.
        """
        if self._background.owns_current_thread("close"):
            return False
        with self._close_lock:
            first = not self._closed
            self._closed = True
        if not first:  # another close, finished or under way: its outcome, within timeout
            return self._close_done.wait(timeout) and self._close_ok
        done = False
        try:
            done = self._background.close(timeout)
            self._finalizer.detach()
        finally:
            self._close_ok = done
            self._close_done.set()
        return done

    async def aclose(self, timeout: float | None = DEFAULT_CLOSE_TIMEOUT) -> bool:
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
        self.close()

    def __copy__(self) -> Self:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self

    # --------------------------------------------------------------- what LangChain sees

    # Model runs are not tracked (they never parent a retrieval); of their events only the
    # streamed tokens matter (the partial answer of a stream closed early), which come with
    # ``ignore_llm`` off. Chat-model starts stay ignored: that saves a dispatch per call.
    # Agent events stay on: in langchain-core ``ignore_agent`` also silences the tool
    # callbacks, and a retriever called by a tool must be linked to the request's trace.

    @property
    @override
    def ignore_chat_model(self) -> bool:
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
        # The hot path (every runnable of every request): the tracker directly, no helper.
        try:
            evicted = self._tracker.start(run_id, parent_run_id, inputs=inputs, metadata=metadata)
        except Exception as exc:
            self._internal_error("on_chain_start", exc)
            return
        if evicted:
            self._counters.add(evicted=evicted)

    @override
    def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: GenerationChunk | ChatGenerationChunk | None = None,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        text = token if isinstance(token, str) else ("" if chunk is None else chunk.text)
        if not text or parent_run_id is None:
            return
        try:
            self._tracker.token(run_id, parent_run_id, text)
        except Exception as exc:
            self._internal_error("on_llm_new_token", exc)

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
        # A hot path too (once per retrieval): the tracker directly, no helper.
        name = kwargs.get("name") or (serialized or {}).get("name")
        retrieval = (query, name if isinstance(name, str) else None, tags or ())
        try:
            evicted = self._tracker.start(
                run_id, parent_run_id, inputs=query, metadata=metadata, retrieval=retrieval
            )
        except Exception as exc:
            self._internal_error("on_retriever_start", exc)
            return
        if evicted:
            self._counters.add(evicted=evicted)

    @override
    def on_chain_end(
        self,
        outputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        # The hot path, like ``on_chain_start``: only a root's end has anything to dispatch.
        try:
            finished = self._tracker.end(run_id, outputs=outputs, inputs=kwargs.get("inputs"))
            if finished is not None:
                self._dispatch(finished)
        except Exception as exc:
            self._internal_error("on_chain_end", exc)

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
        try:  # the tracker directly, as in on_chain_end
            finished = self._tracker.end(run_id, documents=documents)
            if finished is not None:
                self._dispatch(finished)
        except Exception as exc:
            self._internal_error("on_retriever_end", exc)

    @override
    def on_chain_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        # GeneratorExit: the consumer closed a stream early; the trace is finished, not failed.
        self._fail("on_chain_error", run_id, closed_early=isinstance(error, GeneratorExit))

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
    ) -> None:
        try:
            evicted = self._tracker.start(run_id, parent_run_id, inputs=inputs, metadata=metadata)
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
    ) -> None:
        try:
            finished = self._tracker.end(run_id, outputs=outputs, inputs=inputs)
            if finished is not None:
                self._dispatch(finished)
        except Exception as exc:
            self._internal_error(event, exc)

    def _fail(self, event: str, run_id: UUID, *, closed_early: bool = False) -> None:
        try:
            finished = self._tracker.fail(run_id, closed_early=closed_early)
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
        sampled = trace_id is not None and is_sampled(trace_id, self.settings.sample_rate)
        count = len(captures)
        self._counters.add_trace(seen=count, sampled=count if sampled else 0)
        if sampled:
            for capture in captures:
                self._background.submit(capture)
