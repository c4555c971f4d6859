"""Use the metrics as LangSmith evaluators: ``langsmith.evaluate(target, evaluators=[...])``.

Example::

    from langsmith import evaluate
    from langchain_ragmetrics import ContextPrecision, ContextRecall
    from langchain_ragmetrics.integrations.langsmith import metric_to_langsmith_evaluator

    evaluate(
        rag_chain,  # or a function of the example inputs
        data="my-rag-dataset",
        evaluators=[
            metric_to_langsmith_evaluator(ContextRecall()),
            metric_to_langsmith_evaluator(ContextPrecision()),
        ],
    )

Where each sample field is read (the first key found wins; ``*_key`` options override):

* question: the example's inputs (``QUESTION_KEYS``: ``question``, ``input``, ``query``,
  ``user_input``, ``q``, ``prompt``; a chat history's last human turn; or the only string
  input), else the run's inputs, else the query of its first retriever run;
* answer: the run's outputs (``ANSWER_KEYS``: ``answer``, ``output``, ``result``,
  ``response``, ``generation``, ``text``, ``content``; a chat message, live or serialised,
  gives its text; or the only string output);
* contexts: the run's outputs (``contexts``, ``documents``, ``source_documents``, ``context``,
  ``retrieved_contexts``, ``docs``: strings, Documents or serialised Documents), else the
  documents of its retriever child runs, in run order without repeats;
* reference: the example's outputs (``reference``, ``ground_truth``, ``answer``, ``expected``,
  ``expected_answer``, ``reference_answer``, ``output``, or the only string output);
* reference contexts / ids: ``reference_contexts`` / ``reference_context_ids`` in the example's
  outputs, then its metadata, then the run's metadata (the keys the online callback reads);
* language: ``language`` in the example's metadata or inputs, else the run's metadata.

The mapping itself is :meth:`langchain_ragmetrics._retrieval.Retrieval.from_run_and_example`,
the same value the online handler and the monitor build.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from langsmith.evaluation import EvaluationResult, RunEvaluator
from langsmith.schemas import Example, Run
from typing_extensions import override

from langchain_ragmetrics._extract import ANSWER_KEYS, QUESTION_KEYS
from langchain_ragmetrics._retrieval import (
    CONTEXTS_KEYS,
    REFERENCE_KEYS,
    Retrieval,
)
from langchain_ragmetrics._schema import MetricInput, MetricResult, RagSample
from langchain_ragmetrics.metrics import BaseRagMetric

__all__ = [
    "ANSWER_KEYS",
    "CONTEXTS_KEYS",
    "QUESTION_KEYS",
    "REFERENCE_KEYS",
    "RagMetricEvaluator",
    "metric_to_langsmith_evaluator",
]

SamplePreparer = Callable[[Run, Example | None], MetricInput]
"""Custom mapping from a run and its example to the metric's input."""


class RagMetricEvaluator(RunEvaluator):
    """A metric as a LangSmith run evaluator returning ``{key, score, comment}``.

    A sample the metric cannot assess (no reference in the example, no contexts in the run)
    gives ``score=None`` with a comment saying which field is missing, rather than an
    evaluator error. A judge failure gives ``score=None`` with ``error: ...`` as comment.
    """

    def __init__(
        self,
        metric: BaseRagMetric,
        *,
        key: str | None = None,
        question_key: str | None = None,
        answer_key: str | None = None,
        contexts_key: str | None = None,
        reference_key: str | None = None,
        prepare: SamplePreparer | None = None,
    ) -> None:
        """Wrap ``metric``.

        Args:
            metric: The metric to run.
            key: Feedback key; defaults to the metric's key (``context_recall`` ...).
            question_key: Input key of the question (default: see module docs).
            answer_key: Run output key of the answer.
            contexts_key: Run output key of the retrieved contexts.
            reference_key: Example output key of the reference answer.
            prepare: Custom ``(run, example) -> RagSample | dict``; replaces the key lookups.
        """
        self.metric = metric
        self.key = key or metric.metric_name
        self.question_keys = (question_key,) if question_key else QUESTION_KEYS
        self.answer_keys = (answer_key,) if answer_key else ANSWER_KEYS
        self.contexts_keys = (contexts_key,) if contexts_key else CONTEXTS_KEYS
        self.reference_keys = (reference_key,) if reference_key else REFERENCE_KEYS
        self.prepare = prepare

    @property
    @override
    def feedback_keys(self) -> list[str]:
        return [self.key]

    def __repr__(self) -> str:
        return f"RagMetricEvaluator({type(self.metric).__name__}, key={self.key!r})"

    # ------------------------------------------------------------------ mapping

    def to_sample(self, run: Run, example: Example | None = None) -> MetricInput:
        """Build the metric input from a run and its dataset example."""
        if self.prepare is not None:
            return self.prepare(run, example)
        return Retrieval.from_run_and_example(
            run,
            example,
            question_keys=self.question_keys,
            answer_keys=self.answer_keys,
            contexts_keys=self.contexts_keys,
            reference_keys=self.reference_keys,
        ).to_sample()

    # ------------------------------------------------------------------ scoring

    def _convert(self, result: MetricResult) -> EvaluationResult:
        data = result.to_langsmith()
        return EvaluationResult(key=self.key, score=data["score"], comment=data["comment"])

    def _sample_or_skip(self, run: Run, example: Example | None) -> RagSample | EvaluationResult:
        """The validated sample, or the skip result naming the missing field."""
        try:
            return self.metric.validate_sample(self.to_sample(run, example))
        except ValueError as exc:
            return EvaluationResult(key=self.key, score=None, comment=f"skipped: {exc}")

    @override
    def evaluate_run(
        self,
        run: Run,
        example: Example | None = None,
        evaluator_run_id: uuid.UUID | None = None,
    ) -> EvaluationResult:
        sample = self._sample_or_skip(run, example)
        if isinstance(sample, EvaluationResult):
            return sample
        return self._convert(self.metric.invoke(sample))

    @override
    async def aevaluate_run(
        self,
        run: Run,
        example: Example | None = None,
        evaluator_run_id: uuid.UUID | None = None,
    ) -> EvaluationResult:
        sample = self._sample_or_skip(run, example)
        if isinstance(sample, EvaluationResult):
            return sample
        return self._convert(await self.metric.ainvoke(sample))


def metric_to_langsmith_evaluator(metric: BaseRagMetric, **options: Any) -> RagMetricEvaluator:
    """Convert a metric into an evaluator for ``langsmith.evaluate`` / ``aevaluate``.

    Args:
        metric: The metric (its ``llm`` is the judge).
        **options: Keyword options of :class:`RagMetricEvaluator` (``key``,
            ``question_key``, ``answer_key``, ``contexts_key``, ``reference_key``, ``prepare``).
    """
    return RagMetricEvaluator(metric, **options)
