"""What the handler captures for one retrieval, and the scored result handed to sinks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from langchain_ragmetrics._schema import MetricResult, RagSample
from langchain_ragmetrics.callbacks._links import TraceLinks

__all__ = ["Capture", "OnlineResult"]


@dataclass(frozen=True)
class Capture:
    """One finished retrieval of a finished trace, as recorded on the caller's thread.

    Only references are kept here (no copies, no conversion): turning it into a
    ``RagSample`` is the background worker's job.
    """

    root_run_id: UUID
    """The topmost run the handler saw for this trace."""
    trace_id: UUID | None
    """The trace id: the root run id when that run has no parent, else the id found in the
    LangSmith context, else unknown."""
    run_id: UUID
    """The retriever run."""
    parent_run_id: UUID | None
    """The retriever's parent run."""
    retriever: str | None
    """The retriever's run name."""
    query: str
    """The query the retriever received."""
    documents: Sequence[Any]
    """The documents it returned."""
    tags: Sequence[str]
    """The retriever run's tags."""
    metadata: Mapping[str, Any]
    """The retriever run's metadata (includes what the caller passed in the config)."""
    root_metadata: Mapping[str, Any]
    """The root run's metadata."""
    root_inputs: Any
    """The root run's input."""
    root_outputs: Any
    """The root run's output (None when the retriever is the root or the stream was closed
    before the root run could end)."""
    otel_context: Any = None
    """The OpenTelemetry ``SpanContext`` active when the retriever started (None without one)."""
    streamed_answer: str | None = None
    """Text the trace's last model run streamed (tokens), kept for streams closed early."""
    links: TraceLinks = field(default_factory=dict)
    """Spans other tracers (MLflow, OpenInference) opened for the retriever run."""


class OnlineResult(BaseModel):
    """One metric result for one retrieval of a live trace: what every sink receives."""

    model_config = ConfigDict(extra="forbid")

    trace_id: UUID | None
    """The trace (root run) id; None when the handler was attached below the real root and
    the trace could not be found in the LangSmith context."""
    root_run_id: UUID
    """The topmost run the handler saw (the trace id when the handler sits on the root)."""
    run_id: UUID
    """The retriever run this result is about."""
    parent_run_id: UUID | None = None
    """The retriever's parent run."""
    retriever: str | None = None
    """The retriever's run name."""
    tags: list[str] = Field(default_factory=list)
    """The retriever run's tags."""
    query: str
    """The query the retriever received."""
    sample: RagSample
    """What the metric judged: question, contexts, answer and references."""
    result: MetricResult
    """The metric's result (``result.failed``: error set, score NaN; ``result.skipped``:
    nothing to assess)."""
    timestamp: datetime
    """When the result was produced (UTC)."""
    otel_context: Any = Field(default=None, exclude=True, repr=False)
    """The OpenTelemetry ``SpanContext`` active when the retriever started (None without one):
    the OpenTelemetry sink parents its events to it."""
    links: dict[str, tuple[str, str | None]] = Field(default_factory=dict, exclude=True, repr=False)
    """Spans other tracers opened for the retriever run, by tracer (``"mlflow"``,
    ``"openinference"``): ``(trace id, span id or None)``; the MLflow and Phoenix sinks
    attach their results there."""

    @property
    def metric(self) -> str:
        """The metric key."""
        return self.result.metric

    @property
    def score(self) -> float | None:
        """The score (NaN = failed, None = skipped)."""
        return self.result.score

    @property
    def question(self) -> str | None:
        """The question the metric judged against."""
        return self.sample.question

    def to_record(
        self, *, include_contexts: bool = False, include_answer: bool = False
    ) -> dict[str, Any]:
        """A flat, JSON-ready dict (NaN becomes null; ``error`` says why).

        Args:
            include_contexts: Add the retrieved contexts and their ids.
            include_answer: Add the generated answer.
        """
        result = self.result
        record: dict[str, Any] = {
            "timestamp": self.timestamp.isoformat(),
            "trace_id": None if self.trace_id is None else str(self.trace_id),
            "root_run_id": str(self.root_run_id),
            "run_id": str(self.run_id),
            "retriever": self.retriever,
            "tags": list(self.tags),
            "question": self.sample.question,
            "metric": result.metric,
            "score": result.finite_score,
            "skipped": result.skipped,
            "reason": result.reason,
            "error": result.error,
            "details": result.details,
            "usage": result.usage.model_dump(),
            "judge": result.judge,
            "latency_s": result.latency_s,
        }
        if include_answer:
            record["answer"] = self.sample.answer
        if include_contexts:
            record["contexts"] = list(self.sample.contexts)
            record["context_ids"] = self.sample.context_ids
        return record
