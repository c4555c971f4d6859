"""What the worker does with one captured retrieval: sample, score, count, hand over.

Runs on the worker's event loop. Metrics go through the shared ``ScoringEngine`` (bounded
concurrency, timeout, rate limit, error capture); results are appended to each sink's
outbox, whose own thread delivers them (see ``_outbox``), so no sink can hold up scoring.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timezone
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.runnables import RunnableConfig

from langchain_ragmetrics._engine import Job, ScoringEngine, failure_report
from langchain_ragmetrics._schema import MetricResult, RagSample
from langchain_ragmetrics.callbacks._mapping import (
    REFERENCE_FIELDS,
    default_answer,
    default_question,
    provided_references,
    references_in,
)
from langchain_ragmetrics.callbacks._records import Capture, OnlineResult
from langchain_ragmetrics.callbacks._stats import Counters, FailureLog
from langchain_ragmetrics.metrics._base import BaseRagMetric

if TYPE_CHECKING:
    from langchain_ragmetrics.callbacks._outbox import SinkOutbox
    from langchain_ragmetrics.callbacks._settings import HandlerSettings

__all__ = [
    "AnswerFrom",
    "QuestionFrom",
    "ReferenceProvider",
    "ScoringPipeline",
]

QuestionFrom = Literal["query", "input"] | Callable[[Any], str | None]
"""Where a retrieval's question comes from: the retriever query, the root input, or a hook."""
AnswerFrom = Callable[[Any], str | None]
"""Turns the root run's output into the answer text."""
ReferenceProvider = Callable[
    [str | None, Mapping[str, Any]],
    str | Mapping[str, Any] | Awaitable[str | Mapping[str, Any] | None] | None,
]
"""``(question, run_metadata) -> reference | {reference fields} | None`` (sync or async)."""


class ScoringPipeline:
    """Turns a :class:`Capture` into metric results and puts them in the sinks' outboxes.

    Args:
        settings: The handler's options (metrics, mappings, reference provider).
        engine: The scoring engine.
        outboxes: One per sink.
        counters: Shared counters.
        failures: Shared log-once reporter.
    """

    def __init__(
        self,
        *,
        settings: HandlerSettings,
        engine: ScoringEngine,
        outboxes: Sequence[SinkOutbox],
        counters: Counters,
        failures: FailureLog,
    ) -> None:
        self.metrics = list(settings.metrics)
        self.engine = engine
        self.outboxes = list(outboxes)
        self.question_from: QuestionFrom = settings.question_from
        self.answer_from: AnswerFrom = settings.answer_from or default_answer
        self.reference_provider = settings.reference_provider
        self._counters = counters
        self._failures = failures

    # ---------------------------------------------------------------- building samples

    def question(self, capture: Capture) -> str:
        """The question a retrieval is judged against."""
        mode = self.question_from
        if isinstance(mode, str):
            found = capture.query if mode == "query" else default_question(capture.root_inputs)
        else:
            found = mode(capture.root_inputs)
        if found is None:
            return capture.query
        if not isinstance(found, str):
            msg = f"question_from must return a str or None, got {type(found).__name__}"
            raise TypeError(msg)
        return found

    def answer(self, capture: Capture) -> str | None:
        """The answer of the trace (None for a retriever invoked on its own).

        A stream closed early has no usable root output (none, or an empty one): the text
        the model streamed so far stands in for it.
        """
        found = None if capture.root_outputs is None else self.answer_from(capture.root_outputs)
        if found is not None and not isinstance(found, str):
            msg = f"answer_from must return a str or None, got {type(found).__name__}"
            raise TypeError(msg)
        return found or capture.streamed_answer or found

    async def references(self, question: str, capture: Capture) -> dict[str, Any]:
        """Reference fields from run metadata, completed by the ``reference_provider``."""
        metadata = {**capture.root_metadata, **capture.metadata}
        found = references_in(metadata)
        provider = self.reference_provider
        if provider is None or all(k in found for k in REFERENCE_FIELDS):
            return found
        if inspect.iscoroutinefunction(provider):
            value = await provider(question, metadata)
        elif self.engine.executor is not None:
            call = partial(contextvars.copy_context().run, provider, question, metadata)
            value = await asyncio.get_running_loop().run_in_executor(self.engine.executor, call)
        else:
            value = provider(question, metadata)
        if inspect.isawaitable(value):
            value = await value
        return {**provided_references(value), **found}

    async def sample(self, capture: Capture) -> RagSample:
        """The sample the metrics judge."""
        question = self.question(capture)
        return RagSample.model_validate(
            {
                "question": question,
                "contexts": list(capture.documents),
                "answer": self.answer(capture),
                **await self.references(question, capture),
            }
        )

    # ---------------------------------------------------------------------- scoring

    @staticmethod
    def job_config(capture: Capture, metric: BaseRagMetric) -> RunnableConfig:
        """Run name, tags and metadata of the judge runs (visible with ``trace_judge``)."""
        return {
            "run_name": f"ragmetrics:{metric.metric_name}",
            "tags": ["ragmetrics"],
            "metadata": {
                "ragmetrics_trace_id": str(capture.trace_id or capture.root_run_id),
                "ragmetrics_run_id": str(capture.run_id),
            },
        }

    async def score(
        self, metric: BaseRagMetric, sample: RagSample, capture: Capture
    ) -> MetricResult:
        """One metric on the sample; a missing field makes a skipped result, not a failure."""
        try:
            metric.validate_sample(sample)
        except ValueError as exc:
            return MetricResult(metric=metric.metric_name, score=None, reason=f"skipped: {exc}")
        job = Job(sample, metric, tag=capture.run_id, config=self.job_config(capture, metric))
        return await self.engine.ascore(job)

    async def process(self, capture: Capture) -> None:
        """Score one retrieval with every metric and deliver the results."""
        try:
            sample = await self.sample(capture)
        except Exception as exc:
            kind = f"mapping:{type(exc).__name__}"
            self._failures.report(kind, f"cannot build the sample of a retrieval: {exc!r}", exc)
            error = f"{type(exc).__name__}: {exc}"
            sample = RagSample(question=capture.query)
            results = [
                MetricResult(metric=m.metric_name, score=math.nan, error=error)
                for m in self.metrics
            ]
        else:
            results = list(
                await asyncio.gather(*(self.score(m, sample, capture) for m in self.metrics))
            )
        self._count(results)
        now = datetime.now(timezone.utc)
        items = [
            OnlineResult(
                trace_id=capture.trace_id,
                root_run_id=capture.root_run_id,
                run_id=capture.run_id,
                parent_run_id=capture.parent_run_id,
                retriever=capture.retriever,
                tags=list(capture.tags),
                query=capture.query,
                sample=sample,
                result=result,
                timestamp=now,
                otel_context=capture.otel_context,
                links=dict(capture.links),
            )
            for result in results
        ]
        for outbox in self.outboxes:
            outbox.put(items)

    def _count(self, results: Sequence[MetricResult]) -> None:
        scored = failed = skipped = 0
        for result in results:
            self._counters.add_usage(result.usage)
            if result.failed:
                failed += 1
                self._failures.report(*failure_report(result))
            elif result.skipped:
                skipped += 1
            else:
                scored += 1
        self._counters.add(scored=scored, failed=failed, skipped=skipped)
