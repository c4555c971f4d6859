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
* language: ``language`` in the example's metadata or inputs.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from langchain_core.documents import Document
from langsmith.evaluation import EvaluationResult, RunEvaluator
from langsmith.schemas import Example, Run
from typing_extensions import override

from langchain_ragmetrics._extract import ANSWER_KEYS, QUESTION_KEYS, answer_in, question_in
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

CONTEXTS_KEYS = (
    "contexts",
    "documents",
    "source_documents",
    "context",
    "retrieved_contexts",
    "docs",
)
"""Run output keys read as the retrieved contexts, in order."""
REFERENCE_KEYS = (
    "reference",
    "ground_truth",
    "answer",
    "expected",
    "expected_answer",
    "reference_answer",
    "output",
)
"""Example output keys read as the reference answer, in order."""
_REFERENCE_LISTS = ("reference_contexts", "reference_context_ids")

SamplePreparer = Callable[[Run, Example | None], MetricInput]
"""Custom mapping from a run and its example to the metric's input."""


def _document(item: Any) -> Document | str:
    """A Document or a string from a context item (live, ``model_dump``-ed or lc-serialised)."""
    if isinstance(item, (Document, str)):
        return item
    if isinstance(item, Mapping):
        data = item.get("kwargs", item) if item.get("lc") else item
        if "page_content" in data:
            return Document(
                page_content=str(data["page_content"]),
                metadata=dict(data.get("metadata") or {}),
                id=data.get("id"),
            )
    return str(item)


def _documents(value: Any) -> list[Document | str]:
    if value is None:
        return []
    if isinstance(value, (str, Document, Mapping)):
        value = [value]
    return [_document(item) for item in value]


def _walk(run: Any) -> Iterator[Any]:
    """Every descendant run, depth first, in the order they were started."""
    for child in getattr(run, "child_runs", None) or []:
        yield child
        yield from _walk(child)


def _retriever_runs(run: Any) -> list[Any]:
    return [r for r in _walk(run) if getattr(r, "run_type", None) == "retriever"]


def _dedupe(items: Iterable[Document | str]) -> list[Document | str]:
    seen: set[tuple[str | None, str]] = set()
    out = []
    for item in items:
        mark = (item.id, item.page_content) if isinstance(item, Document) else (None, item)
        if mark not in seen:
            seen.add(mark)
            out.append(item)
    return out


def _run_metadata(run: Any) -> Mapping[str, Any]:
    extra = getattr(run, "extra", None) or {}
    return extra.get("metadata") or {}


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
        inputs = example.inputs if example is not None else None
        expected = (example.outputs if example is not None else None) or {}
        example_meta = (example.metadata if example is not None else None) or {}
        outputs = run.outputs or {}
        retrievers = _retriever_runs(run)

        keys = self.question_keys
        question = question_in(inputs, keys, sole_string=True) or question_in(
            run.inputs, keys, sole_string=True
        )
        if question is None and retrievers:
            question = question_in(retrievers[0].inputs, ("query", *keys))
        contexts: list[Document | str] | None = None
        for key in self.contexts_keys:
            if outputs.get(key) is not None:
                contexts = _documents(outputs[key])
                break
        if contexts is None and retrievers:
            contexts = _dedupe(
                doc for r in retrievers for doc in _documents((r.outputs or {}).get("documents"))
            )
        data: dict[str, Any] = {
            "question": question,
            "answer": answer_in(outputs, self.answer_keys, sole_string=True),
            "reference": answer_in(expected, self.reference_keys, sole_string=True),
            "language": example_meta.get("language") or (inputs or {}).get("language"),
        }
        if contexts is not None:
            data["contexts"] = contexts
        for name in _REFERENCE_LISTS:
            for source in (expected, example_meta, _run_metadata(run)):
                if source.get(name) is not None:
                    data[name] = source[name]
                    break
        return {k: v for k, v in data.items() if v is not None}

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
