"""Correlation of callback events into traces: which retrievals belong to which root run.

Every start event maps ``run_id -> root`` (the parent's root, or the run itself when the
parent is unknown); retriever starts also keep their query, name, tags and metadata because
``on_retriever_end`` carries none of it. Tool runs are ordinary runs here, so a retriever
called by a tool (an agent's retriever tool) belongs to the request's trace. Tokens a
model streams are kept per trace (the last streaming model run only), so that a stream the
consumer closes early can still be scored with the answer streamed so far. When the root
ends, the trace's finished retrievals come out as :class:`Capture` records and all its
state is released.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_ragmetrics._links import TraceLinks, merge_links, trace_links
from langchain_ragmetrics._otel import current_span_context
from langchain_ragmetrics._retrieval import Capture

__all__ = ["FinishedTrace", "TraceTracker"]

_EMPTY: Mapping[str, Any] = {}


@dataclass
class _Retrieval:
    run_id: UUID
    parent_run_id: UUID | None
    query: str
    name: str | None
    tags: Sequence[str]
    metadata: Mapping[str, Any]
    documents: Sequence[Any] | None = None
    otel_context: Any = None
    links: TraceLinks = field(default_factory=dict)


@dataclass
class _Trace:
    root_id: UUID
    trace_id: UUID | None
    inputs: Any
    metadata: Mapping[str, Any]
    runs: set[UUID] = field(default_factory=set)
    retrievals: dict[UUID, _Retrieval] = field(default_factory=dict)
    stream_run: UUID | None = None
    tokens: list[str] = field(default_factory=list)

    def streamed(self) -> str | None:
        return "".join(self.tokens) if self.stream_run is not None else None


@dataclass(frozen=True)
class FinishedTrace:
    """A root run that ended: its retrievals, or ``errored`` when it raised."""

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
        if max_open_traces < 1:
            msg = "`max_open_traces` must be at least 1"
            raise ValueError(msg)
        self.max_open_traces = max_open_traces
        self._find_trace_id = find_trace_id
        self._lock = threading.Lock()
        self._runs: dict[UUID, UUID] = {}
        self._traces: OrderedDict[UUID, _Trace] = OrderedDict()

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
        evicted = 0
        links = trace_links(run_id) if retrieval is not None else None
        with self._lock:
            root = self._runs.get(parent_run_id) if parent_run_id is not None else None
            trace = self._traces.get(root) if root is not None else None
            if trace is None:
                trace_id = run_id if parent_run_id is None else self._external(parent_run_id)
                trace = _Trace(run_id, trace_id, inputs, metadata or _EMPTY)
                self._traces[run_id] = trace
                while len(self._traces) > self.max_open_traces:
                    _, old = self._traces.popitem(last=False)
                    for run in old.runs:
                        self._runs.pop(run, None)
                    evicted += 1
            self._runs[run_id] = trace.root_id
            trace.runs.add(run_id)
            if retrieval is not None:
                query, name, tags = retrieval
                trace.retrievals[run_id] = _Retrieval(
                    run_id,
                    parent_run_id,
                    query,
                    name,
                    tags,
                    metadata or _EMPTY,
                    otel_context=current_span_context(),
                    links=links or {},
                )
        return evicted

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
        links = trace_links(run_id) if documents is not None else None
        with self._lock:
            trace = self._release(run_id)
            if trace is None:
                return None
            if documents is not None:
                retrieval = trace.retrievals.get(run_id)
                if retrieval is not None:
                    retrieval.documents = documents
                    retrieval.links = merge_links(retrieval.links, links or {})
            if run_id != trace.root_id:
                return None
            self._close(trace)
        if inputs is not None:
            trace.inputs = inputs
        return FinishedTrace(run_id, False, self._captures(trace, outputs))

    def fail(self, run_id: UUID, *, closed_early: bool = False) -> FinishedTrace | None:
        """Record a run error; returns the finished trace when ``run_id`` is its root.

        Args:
            run_id: The run that raised.
            closed_early: The error is the consumer closing a stream (``GeneratorExit``):
                for the root, the trace is finished, not errored, and its retrievals are
                scored with the answer streamed so far.
        """
        with self._lock:
            trace = self._release(run_id)
            if trace is None:
                return None
            if not closed_early:
                trace.retrievals.pop(run_id, None)
            if run_id != trace.root_id:
                return None
            self._close(trace)
        if closed_early:
            return FinishedTrace(run_id, False, self._captures(trace, None))
        return FinishedTrace(run_id, True, [])

    def token(self, run_id: UUID, parent_run_id: UUID | None, text: str) -> None:
        """Keep a token a model run streamed inside a known trace (the last such run wins)."""
        if parent_run_id is None:
            return
        with self._lock:
            root = self._runs.get(parent_run_id)
            trace = self._traces.get(root) if root is not None else None
            if trace is None:
                return
            if trace.stream_run != run_id:
                trace.stream_run = run_id
                trace.tokens = []
            trace.tokens.append(text)

    def _external(self, parent_run_id: UUID) -> UUID | None:
        if self._find_trace_id is None:
            return None
        try:
            return self._find_trace_id(parent_run_id)
        except Exception:
            return None

    def _release(self, run_id: UUID) -> _Trace | None:
        root = self._runs.pop(run_id, None)
        if root is None:
            return None
        trace = self._traces.get(root)
        if trace is not None:
            trace.runs.discard(run_id)
        return trace

    def _close(self, trace: _Trace) -> None:
        del self._traces[trace.root_id]
        for run in trace.runs:
            self._runs.pop(run, None)
        trace.runs.clear()

    @staticmethod
    def _captures(trace: _Trace, outputs: Any) -> list[Capture]:
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
                root_outputs=None if r.run_id == trace.root_id else outputs,
                otel_context=r.otel_context,
                links=r.links,
                streamed_answer=None if r.run_id == trace.root_id else streamed,
            )
            for r in trace.retrievals.values()
            if r.documents is not None
        ]
