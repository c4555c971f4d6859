"""One path from a retrieval to its scores: the :class:`Retrieval` value, :func:`score_retrieval`.

Every way in produces a :class:`Retrieval` (a frozen, picklable value) through one adapter:

* a live trace of the online handler: :meth:`Retrieval.from_trace` (a :class:`Capture`);
* a LangSmith retriever run and its root (the monitor): :meth:`Retrieval.from_langsmith_run`;
* a LangSmith run and its dataset example (the evaluator): :meth:`Retrieval.from_run_and_example`.

:meth:`Retrieval.to_sample` is the only way a retrieval becomes a ``RagSample``, and
:func:`score_retrieval` (called by the handler's thread runtime, in this process or in the
isolated child, and by the LangSmith monitor) owns the rules that follow: a reference
provider fills missing references, a metric with nothing to assess is *skipped*, a
retrieval that cannot become a sample fails every metric.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal, NamedTuple
from uuid import UUID

from langchain_core.documents import Document
from pydantic import BaseModel, ConfigDict, Field

from langchain_ragmetrics._engine import Job, ScoringEngine
from langchain_ragmetrics._errors import HookError
from langchain_ragmetrics._extract import ANSWER_KEYS, QUESTION_KEYS, answer_in, question_in
from langchain_ragmetrics._otel import span_context_from_plain, span_context_in
from langchain_ragmetrics._plain import exact_scalar
from langchain_ragmetrics._schema import MetricResult, RagSample, _document_id
from langchain_ragmetrics._user_calls import late_message

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

    from langchain_ragmetrics.metrics._base import BaseRagMetric

__all__ = [
    "CONTEXTS_KEYS",
    "REFERENCE_FIELDS",
    "REFERENCE_KEYS",
    "AnswerFrom",
    "Capture",
    "OnlineResult",
    "QuestionFrom",
    "ReferenceProvider",
    "Retrieval",
    "RetrievedDocument",
    "judge_config",
    "provided_references",
    "references_in",
    "run_metadata",
    "score_retrieval",
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

REFERENCE_FIELDS = ("reference", "reference_contexts", "reference_context_ids")
"""Run-metadata keys (and ``reference_provider`` dict keys) that carry references."""
LANGUAGE_KEY = "language"
"""Run-metadata (or example metadata / input) key of the sample's language."""
CONTEXTS_KEYS = (
    "contexts",
    "documents",
    "source_documents",
    "context",
    "retrieved_contexts",
    "docs",
)
"""Run output keys read as the retrieved contexts by the evaluator, in order."""
REFERENCE_KEYS = (
    "reference",
    "ground_truth",
    "answer",
    "expected",
    "expected_answer",
    "reference_answer",
    "output",
)
"""Example output keys read as the reference answer by the evaluator, in order."""

_SCALARS = (str, int, float, bool, type(None))
_SCALAR_TYPES = frozenset(_SCALARS)
_new_tuple = tuple.__new__
"""Builds a named tuple from its values without the keyword-handling ``__new__``."""
_METADATA_FIELDS = frozenset((*REFERENCE_FIELDS, LANGUAGE_KEY))
_NO_METADATA: Mapping[str, Any] = {}
"""The shared, never mutated, metadata of a retrieval without any."""
_PLAIN_DEPTH = 4


# --------------------------------------------------------------------------- what a trace gave


@dataclass(slots=True)
class Capture:
    """One finished retrieval of a finished live trace, as recorded on the caller's thread.

    Only references are kept here (no copies, no conversion): :meth:`Retrieval.from_trace`
    turns it into a plain value, off the caller's thread in both runtimes. Slotted and not
    frozen: one is built per retrieval on the caller's thread, and a frozen dataclass sets
    each of its fields the slow way. Nothing changes it once built.
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
    """OpenTelemetry's ``Context`` when the retriever started (None without OpenTelemetry):
    the span active then is read from it off the caller's thread."""
    streamed_answer: str | None = None
    """Text the trace's last model run streamed (tokens), kept for streams closed early."""
    links: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)
    """Spans other tracers (MLflow, OpenInference) opened for the retriever run, by tracer:
    ``(trace id, span id or None)`` (plain strings, see ``_links.trace_links``)."""


# --------------------------------------------------------------------------- the value


class RetrievedDocument(NamedTuple):
    """A retrieved document reduced to what the metrics read: its text and its id.

    Attributes:
        text: The document's text (``page_content``).
        id: ``Document.id`` or a conventional metadata id (``id``, ``doc_id``,
            ``document_id``).
    """

    text: str
    id: str | None = None

    @classmethod
    def of(cls, item: Any) -> RetrievedDocument:
        """From a Document, a string, or a Document read back from LangSmith (a dict)."""
        if isinstance(item, Document):
            return cls(item.page_content, _document_id(item))
        if isinstance(item, str):
            return cls(exact_scalar(item))
        if isinstance(item, Mapping):
            data = item.get("kwargs", item) if item.get("lc") else item
            if "page_content" in data:
                doc = Document(
                    page_content=str(data["page_content"]),
                    metadata=dict(data.get("metadata") or {}),
                    id=data.get("id"),
                )
                return cls(doc.page_content, _document_id(doc))
        return cls(str(item))


class Retrieval(NamedTuple):
    """One retrieval with everything scoring needs, whichever way it came in.

    Immutable and made of plain data (strings, ids, numbers, JSON-like metadata), so it can
    be pickled to the isolated mode's child process and compared in tests. A named tuple:
    cheap to build (one per retrieval scored online).

    Attributes:
        query: The query the retriever received.
        documents: What it returned, in rank order.
        question: The question the metrics judge against (usually the query; see
            ``question_from``).
        answer: The trace's answer (None for a retriever on its own).
        language: The sample's language (``language`` in the run metadata, the example's
            metadata or inputs); None: each metric's own language.
        reference: The reference answer.
        reference_contexts: Contexts that should have been retrieved.
        reference_context_ids: Ids of the contexts that should have been retrieved.
        tags: The retriever run's tags.
        metadata: Run metadata (the root's, overridden by the retriever's), JSON-like values
            only: what a ``reference_provider`` receives. Never mutated.
        run_id: The retriever run (for a run+example pair: the evaluated run).
        root_run_id: The topmost run known (the retriever's own id when it is the root).
        trace_id: The trace id, when known.
        parent_run_id: The retriever's parent run.
        retriever: The retriever run's name.
        span_context: ``(trace_id, span_id, trace_flags)`` of the OpenTelemetry span active
            when the retriever started (None without one).
        error: Why this retrieval cannot become a sample (a user hook raised): every metric
            fails with it.
        links: Spans other tracers (MLflow, OpenInference) opened for the retriever run, by
            tracer: ``(trace id, span id or None)``; the MLflow and Phoenix sinks use them.
    """

    query: str
    documents: tuple[RetrievedDocument, ...] = ()
    question: str | None = None
    answer: str | None = None
    language: str | None = None
    reference: str | None = None
    reference_contexts: tuple[str, ...] | None = None
    reference_context_ids: tuple[str, ...] | None = None
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = _NO_METADATA
    run_id: UUID | None = None
    root_run_id: UUID | None = None
    trace_id: UUID | None = None
    parent_run_id: UUID | None = None
    retriever: str | None = None
    span_context: tuple[int, int, int] | None = None
    error: str | None = None
    links: Mapping[str, tuple[str, str | None]] = _NO_METADATA

    # ------------------------------------------------------------------ adapters

    @classmethod
    def from_trace(
        cls,
        capture: Capture,
        *,
        question_from: QuestionFrom = "query",
        answer_from: AnswerFrom | None = None,
    ) -> Retrieval:
        """A live trace's retrieval: the user's hooks read the root input and output.

        A hook that raises or returns something other than a string or None makes a
        retrieval whose ``error`` fails every metric (the user's code is never interrupted).
        """
        metadata = _plain_mapping({**capture.root_metadata, **capture.metadata})
        # Every text as an exact str: a subclass (an app's enum or its own str type) pickles
        # as its class, which the scoring process may be unable to import.
        query = exact_scalar(capture.query)
        tags = capture.tags
        error = None
        try:
            question = _question(question_from, query, capture.root_inputs)
            answer = None
            if capture.root_outputs is not None:
                answer = _hook(answer_from or answer_in, capture.root_outputs, "answer_from")
        except HookError as exc:
            question, answer, error = query, None, str(exc)
        found = _from_metadata(metadata)
        get = found.get
        # Positional, in field order (``_make``): one is built per retrieval, and keyword
        # construction of a 17-field named tuple costs twice as much.
        return cls._make(
            (
                query,
                _documents(capture.documents),
                question,
                answer or capture.streamed_answer or answer,
                get("language"),
                get("reference"),
                get("reference_contexts"),
                get("reference_context_ids"),
                tuple(tags) if all(type(t) is str for t in tags) else _exact_all(tags),
                metadata,
                capture.run_id,
                capture.root_run_id,
                capture.trace_id,
                capture.parent_run_id,
                exact_scalar(capture.retriever),
                span_context_in(capture.otel_context),
                error,
                capture.links or _NO_METADATA,
            )
        )

    @classmethod
    def from_langsmith_run(
        cls, run: Any, root: Any | None, *, question_from: QuestionFrom = "query"
    ) -> Retrieval:
        """A retriever run read back from LangSmith, joined with its trace's root run.

        The answer is the root's output; metadata (references, language) is the root's
        overridden by the retriever's, as online.
        """
        inputs = run.inputs or {}
        query = inputs.get("query") if isinstance(inputs.get("query"), str) else None
        query = query or question_in(inputs) or ""
        answer = None
        if root is not None and root.id != run.id:
            answer = answer_in(root.outputs or {})
        root_inputs = root.inputs if root is not None else None
        mode = question_from if root is not None else "query"
        metadata = _plain_mapping({**run_metadata(root), **run_metadata(run)})
        error = None
        try:
            question = _question(mode, query, root_inputs)
        except HookError as exc:
            question, error = query, str(exc)
        root_id = root.id if root is not None else run.id
        return cls(
            query=query,
            documents=_documents((run.outputs or {}).get("documents")),
            question=question,
            answer=answer,
            tags=tuple(run.tags or ()),
            metadata=metadata,
            run_id=_uuid(run.id),
            root_run_id=_uuid(root_id),
            trace_id=_uuid(run.trace_id),
            parent_run_id=_uuid(run.parent_run_id),
            retriever=run.name,
            error=error,
            **_from_metadata(metadata),
        )

    @classmethod
    def from_run_and_example(
        cls,
        run: Any,
        example: Any | None,
        *,
        question_keys: Sequence[str] = QUESTION_KEYS,
        answer_keys: Sequence[str] = ANSWER_KEYS,
        contexts_keys: Sequence[str] = CONTEXTS_KEYS,
        reference_keys: Sequence[str] = REFERENCE_KEYS,
    ) -> Retrieval:
        """A run of ``langsmith.evaluate`` and its dataset example (see the evaluator's docs).

        References and language come from the example first (outputs, then metadata), then
        the run's metadata, as online.
        """
        inputs = example.inputs if example is not None else None
        expected = (example.outputs if example is not None else None) or {}
        example_meta = (example.metadata if example is not None else None) or {}
        outputs = run.outputs or {}
        run_meta = run_metadata(run)
        retrievers = _retriever_runs(run)
        question = question_in(inputs, question_keys, sole_string=True) or question_in(
            run.inputs, question_keys, sole_string=True
        )
        if question is None and retrievers:
            question = question_in(retrievers[0].inputs, ("query", *question_keys))
        documents: tuple[RetrievedDocument, ...] | None = None
        for key in contexts_keys:
            if outputs.get(key) is not None:
                documents = _documents(outputs[key])
                break
        if documents is None:
            found = (_documents((r.outputs or {}).get("documents")) for r in retrievers)
            documents = tuple(dict.fromkeys(doc for docs in found for doc in docs))
        lists: dict[str, Any] = {}
        for name in REFERENCE_FIELDS[1:]:
            for source in (expected, example_meta, run_meta):
                if source.get(name) is not None:
                    lists[name] = _strings(source[name])
                    break
        language = next(
            (
                value
                for source in (
                    example_meta,
                    inputs if isinstance(inputs, Mapping) else {},
                    run_meta,
                )
                if (value := source.get(LANGUAGE_KEY)) is not None
            ),
            None,
        )
        query = (retrievers[0].inputs or {}).get("query") if retrievers else None
        return cls(
            query=query if isinstance(query, str) else (question or ""),
            documents=documents,
            question=question,
            answer=answer_in(outputs, answer_keys, sole_string=True),
            language=language,
            reference=answer_in(expected, reference_keys, sole_string=True),
            tags=tuple(getattr(run, "tags", None) or ()),
            metadata=_plain_mapping(run_meta),
            run_id=_uuid(run.id),
            root_run_id=_uuid(run.id),
            trace_id=_uuid(getattr(run, "trace_id", None)),
            retriever=retrievers[0].name if retrievers else None,
            **lists,
        )

    # ------------------------------------------------------------------ to a sample

    @property
    def has_all_references(self) -> bool:
        """Whether every reference field is set (a provider has nothing to add)."""
        return all(getattr(self, name) is not None for name in REFERENCE_FIELDS)

    def with_references(self, provided: Mapping[str, Any]) -> Retrieval:
        """This retrieval with the reference fields it lacks taken from ``provided``."""
        update: dict[str, Any] = {
            k: (v if k == "reference" else _strings(v))
            for k, v in provided.items()
            if getattr(self, k) is None and v is not None
        }
        return self._replace(**update) if update else self

    def to_sample(self) -> RagSample:
        """The sample the metrics judge (the only way a retrieval becomes a ``RagSample``).

        Raises:
            ValueError: A field is invalid (e.g. an unsupported language), or the retrieval
                carries an ``error``.
        """
        if self.error is not None:
            raise HookError(self.error)
        ids = [doc.id for doc in self.documents]
        data: dict[str, Any] = {
            "question": self.question,
            "contexts": [doc.text for doc in self.documents],
            "context_ids": ids if any(i is not None for i in ids) else None,
            "answer": self.answer,
            "reference": self.reference,
            "reference_contexts": _list(self.reference_contexts),
            "reference_context_ids": _list(self.reference_context_ids),
            "language": self.language,
        }
        return RagSample.model_validate(data)


# --------------------------------------------------------------------------- the result


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


# --------------------------------------------------------------------------- scoring


async def score_retrieval(
    retrieval: Retrieval,
    metrics: Sequence[BaseRagMetric],
    engine: ScoringEngine,
    *,
    reference_provider: ReferenceProvider | None = None,
    on_error: Callable[[Exception], object] | None = None,
) -> list[OnlineResult]:
    """Score one retrieval with every metric: one result each, never raises.

    The rules, in one place: missing references are asked of ``reference_provider`` (run on
    the engine's executor when it is sync, within the engine's per-job timeout); a metric
    the sample cannot feed is *skipped* (score None, ``reason`` names the field), never 0;
    a retrieval that cannot become a sample (a hook raised, a provider failed, a field is
    invalid) fails every metric (score NaN, the same ``error``) and is reported once to
    ``on_error``.

    Args:
        retrieval: What to score.
        metrics: The metrics (each gives one result, in this order).
        engine: Runs the judge jobs (concurrency, timeout, rate limit, error capture).
        reference_provider: ``fn(question, metadata)`` for references the retrieval lacks.
        on_error: Called with the exception when no sample could be built.
    """
    try:
        if reference_provider is not None and not retrieval.has_all_references:
            provided = await _provide(reference_provider, retrieval, engine)
            retrieval = retrieval.with_references(provided)
        sample = retrieval.to_sample()
    except Exception as exc:
        if on_error is not None:
            on_error(exc)
        error = f"{type(exc).__name__}: {exc}"
        sample = RagSample(question=retrieval.query)
        results = [MetricResult(metric=m.metric_name, score=math.nan, error=error) for m in metrics]
    else:
        results = list(
            await asyncio.gather(*(_score(m, sample, retrieval, engine) for m in metrics))
        )
    now = datetime.now(timezone.utc)
    otel_context = span_context_from_plain(retrieval.span_context)
    run_id = retrieval.run_id or retrieval.root_run_id
    if run_id is None:  # pragma: no cover - every adapter sets one
        msg = "a retrieval without a run id cannot be delivered"
        raise ValueError(msg)
    return [
        OnlineResult(
            trace_id=retrieval.trace_id,
            root_run_id=retrieval.root_run_id or run_id,
            run_id=run_id,
            parent_run_id=retrieval.parent_run_id,
            retriever=retrieval.retriever,
            tags=list(retrieval.tags),
            query=retrieval.query,
            sample=sample,
            result=result,
            timestamp=now,
            otel_context=otel_context,
            links=dict(retrieval.links),
        )
        for result in results
    ]


def judge_config(retrieval: Retrieval, metric: BaseRagMetric) -> RunnableConfig:
    """Run name, tags and metadata of one judge run (visible with ``trace_judge``)."""
    return {
        "run_name": f"ragmetrics:{metric.metric_name}",
        "tags": ["ragmetrics"],
        "metadata": {
            "ragmetrics_trace_id": str(retrieval.trace_id or retrieval.root_run_id),
            "ragmetrics_run_id": str(retrieval.run_id),
        },
    }


async def _score(
    metric: BaseRagMetric, sample: RagSample, retrieval: Retrieval, engine: ScoringEngine
) -> MetricResult:
    """One metric on the sample; a missing field makes a skipped result, not a failure."""
    try:
        metric.validate_sample(sample)
    except ValueError as exc:
        return MetricResult(metric=metric.metric_name, score=None, reason=f"skipped: {exc}")
    config = judge_config(retrieval, metric)
    return await engine.ascore(Job(sample, metric, tag=retrieval.run_id, config=config))


async def _provide(
    provider: ReferenceProvider, retrieval: Retrieval, engine: ScoringEngine
) -> dict[str, Any]:
    """Ask the provider, within the engine's per-job timeout (a hung lookup fails the sample)."""
    question, metadata = retrieval.question, retrieval.metadata

    async def ask() -> Any:
        if inspect.iscoroutinefunction(provider):
            value = await provider(question, metadata)
        elif engine.user_calls is not None:
            what = "reference_provider"
            value = await engine.user_calls.run(provider, question, metadata, what=what)
        else:
            value = provider(question, metadata)
        if inspect.isawaitable(value):
            value = await value
        return value

    try:
        value = await asyncio.wait_for(ask(), engine.timeout)
    except (asyncio.TimeoutError, TimeoutError) as exc:  # the judge threads' own says why
        raise TimeoutError(str(exc) or late_message("reference_provider", engine.timeout)) from None
    return provided_references(value)


# --------------------------------------------------------------------------- helpers


def references_in(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The reference fields present (not None) in run metadata."""
    return {k: metadata[k] for k in REFERENCE_FIELDS if metadata.get(k) is not None}


def provided_references(value: Any) -> dict[str, Any]:
    """Normalise what a ``reference_provider`` returned: a string, a dict or None.

    Raises:
        ValueError: If a dict has keys other than the reference fields.
        TypeError: If the value is neither.
    """
    if value is None:
        return {}
    if isinstance(value, str):
        return {"reference": value}
    if isinstance(value, Mapping):
        unknown = sorted(str(k) for k in value if k not in REFERENCE_FIELDS)
        if unknown:
            msg = (
                f"reference_provider returned unknown keys {unknown}; "
                f"expected some of {list(REFERENCE_FIELDS)}"
            )
            raise ValueError(msg)
        return {k: v for k, v in value.items() if v is not None}
    msg = f"reference_provider must return a str, a dict or None, got {type(value).__name__}"
    raise TypeError(msg)


def _from_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The reference fields and the language found in run metadata, as Retrieval fields."""
    if _METADATA_FIELDS.isdisjoint(metadata):
        return {}
    found: dict[str, Any] = {
        k: (v if k == "reference" else _strings(v)) for k, v in references_in(metadata).items()
    }
    language = metadata.get(LANGUAGE_KEY)
    if language is not None:
        found["language"] = language
    return found


def _hook(fn: Callable[[Any], Any], value: Any, name: str) -> str | None:
    """``fn(value)``, which must be a string or None; anything else is a :class:`HookError`.

    Whatever ``fn`` raises is the retrieval's error, ``SystemExit`` and the like too: it
    runs on one of the handler's threads, which must go on (only a Ctrl-C on the main
    thread goes through).
    """
    try:
        found = fn(value)
    except BaseException as exc:
        if (
            isinstance(exc, KeyboardInterrupt)
            and threading.current_thread() is threading.main_thread()
        ):
            raise
        msg = f"{name} raised {type(exc).__name__}: {exc}"
        raise HookError(msg) from exc
    if found is not None and not isinstance(found, str):
        msg = f"{name} must return a str or None, got {type(found).__name__}"
        raise HookError(msg)
    return None if found is None else str.__str__(found)  # a subclass may not load elsewhere


def _question(mode: QuestionFrom, query: str, root_inputs: Any) -> str:
    """The question by ``question_from``: the query, the root input, or the user's hook."""
    if mode == "query":
        return query
    fn = question_in if mode == "input" else mode
    if not callable(fn):
        msg = f"question_from must be 'query', 'input' or a callable, got {mode!r}"
        raise HookError(msg)
    found = _hook(fn, root_inputs, "question_from")
    return query if found is None else found


def _documents(value: Any) -> tuple[RetrievedDocument, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, Document, Mapping)):
        value = [value]
    return tuple(
        [
            _new_tuple(RetrievedDocument, (item.page_content, _document_id(item)))
            if type(item) is Document  # the live case, once per document: kept short
            else RetrievedDocument.of(item)
            for item in value
        ]
    )


def _strings(value: Any) -> Any:
    """A list field as a tuple (frozen); a lone string stays one (the sample validates it)."""
    if isinstance(value, (str, Document)) or not isinstance(value, Iterable):
        return value
    return tuple(item.page_content if isinstance(item, Document) else item for item in value)


def _exact_all(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(exact_scalar(value) for value in values)


def _list(value: Sequence[str] | None) -> list[str] | Sequence[str] | None:
    return list(value) if isinstance(value, tuple) else value


def _plain(value: Any, depth: int = 0) -> tuple[bool, Any]:
    """``(True, value)`` when ``value`` is JSON-like data (picklable, no live objects)."""
    if isinstance(value, _SCALARS):  # a subclass (an enum) as its text or number
        return True, exact_scalar(value)
    if depth >= _PLAIN_DEPTH:
        return False, None
    if isinstance(value, (list, tuple)):
        items = [_plain(item, depth + 1) for item in value]
        return all(ok for ok, _ in items), [item for _, item in items]
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        entries = {k: _plain(v, depth + 1) for k, v in value.items()}
        return all(ok for ok, _ in entries.values()), {k: v for k, (_, v) in entries.items()}
    return False, None


def _plain_mapping(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-like entries of run metadata (live objects such as clients are left out)."""
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if type(value) in _SCALAR_TYPES and type(key) is str:  # the common case, fast
            out[key] = value
            continue
        ok, plain = _plain(value)
        if ok and isinstance(key, str):
            out[key] = plain
    return out


def _uuid(value: Any) -> UUID | None:
    return value if value is None or isinstance(value, UUID) else UUID(str(value))


def run_metadata(run: Any) -> Mapping[str, Any]:
    """The metadata of a LangSmith run (``extra.metadata``), or an empty mapping."""
    extra = getattr(run, "extra", None) or {}
    return extra.get("metadata") or {}


def _walk(run: Any) -> Iterator[Any]:
    """Every descendant run, depth first, in the order they were started."""
    for child in getattr(run, "child_runs", None) or []:
        yield child
        yield from _walk(child)


def _retriever_runs(run: Any) -> list[Any]:
    return [r for r in _walk(run) if getattr(r, "run_type", None) == "retriever"]
