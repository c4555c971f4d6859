"""Correlation of callback events into traces: which retrievals belong to which root run.

Every start event maps ``run_id`` to its trace (the parent's trace, or a new one when the
parent is unknown); retriever starts also keep their query, name, tags and metadata because
``on_retriever_end`` carries none of it. Tool runs are ordinary runs here, so a retriever
called by a tool (an agent's retriever tool) belongs to the request's trace. Tokens a
model streams are kept per trace (the last streaming model run only), so that a stream the
consumer closes early can still be scored with the answer streamed so far. When the root
ends, the trace's finished retrievals come out as :class:`Capture` records and all its
state is released.

This runs on the caller's thread for every run of every request, so each event is a few
dictionary operations under one lock: runs map straight to their trace object, and the
per-trace records are slotted dataclasses (``bench/handler_dispatch.py`` measures what it adds).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from langchain_ragmetrics._links import (
    TRACER_MODULES,
    Readings,
    TraceLinks,
    merge_links,
    trace_links,
)
from langchain_ragmetrics._options import whole_number
from langchain_ragmetrics._otel import OTEL_TRACE_MODULE, current_otel_context
from langchain_ragmetrics._retrieval import Capture

__all__ = ["FinishedTrace", "TraceTracker"]

_EMPTY: Mapping[str, Any] = {}
_NO_READINGS: Readings = {}
_NO_LINKS: TraceLinks = {}


class _Retrieval:
    """A retriever run of an open trace: what its start said, and its documents once ended.

    A plain slotted class with a positional ``__init__``: one is built on the caller's
    thread per retrieval, and a dataclass's keyword-only ``__init__`` and ``__post_init__``
    are two more calls there.
    """

    __slots__ = (
        "documents",
        "links",
        "metadata",
        "name",
        "otel_context",
        "parent_run_id",
        "query",
        "readings",
        "run_id",
        "run_key",
        "tags",
    )

    def __init__(  # noqa: PLR0917 - positional on purpose: see the class docstring
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        query: str,
        name: str | None,
        tags: Sequence[str],
        metadata: Mapping[str, Any],
        otel_context: Any,
        readings: Readings,
    ) -> None:
        self.run_id = run_id
        self.run_key = run_id.int
        """``run_id.int``, computed once: the tracker's dictionary key for the run."""
        self.parent_run_id = parent_run_id
        self.query = query
        self.name = name
        self.tags = tags
        self.metadata = metadata
        self.otel_context = otel_context
        """OpenTelemetry's context at the start: its span is read later, off the caller's
        thread (``_otel.span_context_in``)."""
        self.readings = readings
        """Other tracers' spans as read when the run started (merged with the end's)."""
        self.links: TraceLinks = _NO_LINKS
        """The spans the retriever run is linked to, set when it ends."""
        self.documents: Sequence[Any] | None = None


class _Trace:
    """An open trace: its root's input and metadata, its runs, retrievals and streamed tokens.

    Slotted, with a positional ``__init__``, like :class:`_Retrieval` (one per request).
    """

    __slots__ = (
        "inputs",
        "metadata",
        "retrievals",
        "root_id",
        "root_key",
        "runs",
        "stream_run",
        "tokens",
        "trace_id",
    )

    def __init__(
        self, root_id: UUID, trace_id: UUID | None, inputs: Any, metadata: Mapping[str, Any]
    ) -> None:
        self.root_id = root_id
        self.trace_id = trace_id
        self.inputs = inputs
        self.metadata = metadata
        self.root_key = root_id.int
        self.runs: list[int] = [self.root_key]
        """Keys of every run ever started in the trace (ended ones too), released together."""
        self.retrievals: list[_Retrieval] = []
        self.stream_run: UUID | None = None
        self.tokens: list[str] = []

    def streamed(self) -> str | None:
        return "".join(self.tokens) if self.stream_run is not None else None


@dataclass(slots=True)
class FinishedTrace:
    """A root run that ended: its retrievals, or ``errored`` when it raised.

    Slotted and not frozen, like the records above: one is made per request on the caller's
    thread, and a frozen dataclass sets each field the slow way.
    """

    root_run_id: UUID
    errored: bool
    captures: list[Capture]


class TraceTracker:
    """Thread-safe, constant-work-per-event bookkeeping of open traces.

    Args:
        max_open_traces: Bound on traces in progress; beyond it the oldest is forgotten
            (a stream abandoned without being closed never ends its root run).
        find_trace_id: For a run whose parent the tracker never saw (the handler was
            attached below the real root), returns the real trace id if it can tell.
    """

    def __init__(
        self,
        *,
        max_open_traces: int,
        find_trace_id: Callable[[UUID], UUID | None] | None = None,
    ) -> None:
        whole_number("max_open_traces", max_open_traces)
        self.max_open_traces = max_open_traces
        self._find_trace_id = find_trace_id
        self._lock = threading.Lock()
        # Keys are ``UUID.int``: hashing an int is done in C, a ``UUID``'s hash is Python code.
        # run key -> its open trace (every started run not yet ended or released)
        self._runs: dict[int, _Trace] = {}
        # root run key -> open trace, oldest first (dicts keep insertion order)
        self._traces: dict[int, _Trace] = {}

    @property
    def open_traces(self) -> int:
        """Traces in progress."""
        with self._lock:
            return len(self._traces)

    @property
    def open_runs(self) -> int:
        """Runs in progress across all traces."""
        with self._lock:
            return len(self._runs)

    def start(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        *,
        inputs: Any = None,
        metadata: Mapping[str, Any] | None = None,
        retrieval: tuple[str, str | None, Sequence[str]] | None = None,
    ) -> int:
        """Record a run start; ``retrieval`` is ``(query, name, tags)`` for retrievers.

        Returns:
            How many unfinished traces were evicted to stay under the bound (usually 0).
        """
        if retrieval is not None:
            return self._start_retrieval(run_id, parent_run_id, inputs, metadata, retrieval)
        key = run_id.int
        with self._lock:
            trace = None if parent_run_id is None else self._runs.get(parent_run_id.int)
            if trace is not None:
                self._runs[key] = trace
                trace.runs.append(key)
                return 0
            return self._open(run_id, parent_run_id, inputs, metadata)[1]

    def end(
        self,
        run_id: UUID,
        *,
        outputs: Any = None,
        inputs: Any = None,
        documents: Sequence[Any] | None = None,
    ) -> FinishedTrace | None:
        """Record a run end; returns the finished trace when ``run_id`` is its root.

        Args:
            run_id: The run that ended.
            outputs: Its output (the answer, for a root run).
            inputs: The final input when the start event deferred it (streaming).
            documents: The documents, for a retriever run.
        """
        # The tracers' modules are looked up here, not in a call: this runs for every run.
        links = (
            trace_links(run_id)
            if documents is not None and not sys.modules.keys().isdisjoint(TRACER_MODULES)
            else _NO_READINGS
        )
        key = run_id.int
        with self._lock:
            trace = self._runs.pop(key, None)
            if trace is None:
                return None
            if documents is not None:
                for retrieval in trace.retrievals:
                    if retrieval.run_key == key:
                        retrieval.documents = documents
                        retrieval.links = merge_links(retrieval.readings, links)
                        break
            if key != trace.root_key:
                return None
            self._close(trace)
        if inputs is not None:
            trace.inputs = inputs
        return FinishedTrace(run_id, False, _captures(trace, outputs))

    def fail(self, run_id: UUID, *, closed_early: bool = False) -> FinishedTrace | None:
        """Record a run error; returns the finished trace when ``run_id`` is its root.

        Args:
            run_id: The run that raised.
            closed_early: The error is the consumer closing a stream (``GeneratorExit``):
                for the root, the trace is finished, not errored, and its retrievals are
                scored with the answer streamed so far.
        """
        key = run_id.int
        with self._lock:
            trace = self._runs.pop(key, None)
            if trace is None:
                return None
            if not closed_early:
                trace.retrievals = [r for r in trace.retrievals if r.run_key != key]
            if key != trace.root_key:
                return None
            self._close(trace)
        if closed_early:
            return FinishedTrace(run_id, False, _captures(trace, None))
        return FinishedTrace(run_id, True, [])

    def token(self, run_id: UUID, parent_run_id: UUID | None, text: str) -> None:
        """Keep a token a model run streamed inside a known trace (the last such run wins)."""
        if parent_run_id is None:
            return
        with self._lock:
            trace = self._runs.get(parent_run_id.int)
            if trace is None:
                return
            if trace.stream_run != run_id:
                trace.stream_run = run_id
                trace.tokens = []
            trace.tokens.append(text)

    def _start_retrieval(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        inputs: Any,
        metadata: Mapping[str, Any] | None,
        retrieval: tuple[str, str | None, Sequence[str]],
    ) -> int:
        query, name, tags = retrieval
        modules = sys.modules
        record = _Retrieval(
            run_id,
            parent_run_id,
            query,
            name,
            tags,
            metadata or _EMPTY,
            current_otel_context() if OTEL_TRACE_MODULE in modules else None,
            _NO_READINGS if modules.keys().isdisjoint(TRACER_MODULES) else trace_links(run_id),
        )
        evicted = 0
        key = run_id.int
        with self._lock:
            trace = None if parent_run_id is None else self._runs.get(parent_run_id.int)
            if trace is not None:
                self._runs[key] = trace
                trace.runs.append(key)
            else:
                trace, evicted = self._open(run_id, parent_run_id, inputs, metadata)
            trace.retrievals.append(record)
        return evicted

    def _open(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        inputs: Any,
        metadata: Mapping[str, Any] | None,
    ) -> tuple[_Trace, int]:
        """Open a trace rooted at ``run_id`` (lock held); evict the oldest beyond the bound."""
        trace_id = run_id if parent_run_id is None else self._external(parent_run_id)
        trace = _Trace(run_id, trace_id, inputs, metadata or _EMPTY)
        self._traces[trace.root_key] = trace
        self._runs[trace.root_key] = trace
        evicted = 0
        while len(self._traces) > self.max_open_traces:
            self._close(self._traces[next(iter(self._traces))])
            evicted += 1
        return trace, evicted

    def _external(self, parent_run_id: UUID) -> UUID | None:
        if self._find_trace_id is None:
            return None
        try:
            return self._find_trace_id(parent_run_id)
        except Exception:
            return None

    def _close(self, trace: _Trace) -> None:
        """Forget a trace and every run of it still open (lock held)."""
        del self._traces[trace.root_key]
        runs = self._runs
        for run in trace.runs:
            if runs.get(run) is trace:
                del runs[run]
        trace.runs = []


def _captures(trace: _Trace, outputs: Any) -> list[Capture]:
    """The trace's finished retrievals as :class:`Capture` records, in start order."""
    streamed = trace.streamed()
    return [
        Capture(
            root_run_id=trace.root_id,
            trace_id=trace.trace_id,
            run_id=r.run_id,
            parent_run_id=r.parent_run_id,
            retriever=r.name,
            query=r.query,
            documents=r.documents,
            tags=r.tags,
            metadata=r.metadata,
            root_metadata=trace.metadata,
            root_inputs=trace.inputs,
            root_outputs=None if r.run_key == trace.root_key else outputs,
            otel_context=r.otel_context,
            links=r.links,
            streamed_answer=None if r.run_key == trace.root_key else streamed,
        )
        for r in trace.retrievals
        if r.documents is not None
    ]
