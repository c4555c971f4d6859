"""Data model: the sample a metric reads and the result it returns."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["MetricInput", "MetricResult", "RagSample", "Usage", "coerce_sample"]

# Column names of RAGAS datasets (v0.1 and v0.2+) and common synonyms -> our field names.
_ALIASES: dict[str, str] = {
    "user_input": "question",
    "query": "question",
    "retrieved_contexts": "contexts",
    "response": "answer",
    "ground_truth": "reference",
    "ground_truths": "reference",
    "retrieved_context_ids": "context_ids",
}
_ID_METADATA_KEYS = ("id", "doc_id", "document_id")


def _document_id(doc: Document) -> str | None:
    """Return a document's id: `Document.id`, else a conventional metadata key."""
    if doc.id is not None:
        return str(doc.id)
    for key in _ID_METADATA_KEYS:
        value = doc.metadata.get(key)
        if value is not None:
            return str(value)
    return None


def _as_text_list(value: Any, field: str) -> list[str]:
    """Coerce a context-like value (a string, a Document or a list of them) to strings."""
    if value is None:
        return []
    if isinstance(value, (str, Document)):
        value = [value]
    if not isinstance(value, Sequence):
        msg = f"`{field}` must be a list of strings or Documents, got {type(value).__name__}"
        raise ValueError(msg)
    out: list[str] = []
    for i, item in enumerate(value):
        if isinstance(item, Document):
            out.append(item.page_content)
        elif isinstance(item, str):
            out.append(item)
        else:
            msg = f"`{field}[{i}]` must be a string or a Document, got {type(item).__name__}"
            raise ValueError(msg)
    return out


class Usage(BaseModel):
    """Token usage and number of judge calls spent on a result."""

    model_config = ConfigDict(extra="forbid")

    input_tokens: int = 0
    """Prompt tokens reported by the judge."""
    output_tokens: int = 0
    """Completion tokens reported by the judge."""
    judge_calls: int = 0
    """Number of requests sent to the judge, retries included."""
    cache_hits: int = 0
    """Judge answers taken from the verdict cache (no request sent)."""
    cache_misses: int = 0
    """Judge answers the verdict cache did not have (asked for, then stored when valid)."""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    @classmethod
    def total(cls, usages: Iterable[Usage]) -> Usage:
        """The sum of many usages in one pass (chaining ``+`` builds a model per step)."""
        sums = dict.fromkeys(cls.model_fields, 0)
        for usage in usages:
            for name in sums:
                sums[name] += getattr(usage, name)
        return cls(**sums)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            judge_calls=self.judge_calls + other.judge_calls,
            cache_hits=self.cache_hits + other.cache_hits,
            cache_misses=self.cache_misses + other.cache_misses,
        )


def _comparable(value: Any) -> Any:
    """``value`` as two names of one field are compared: arrays and tuples as lists.

    Documents count as their text.
    """
    if hasattr(value, "tolist"):  # a NumPy array or scalar, as pandas gives
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_comparable(item) for item in value]
    if isinstance(value, Document):
        return value.page_content
    return value


def _absent(value: Any) -> bool:
    """None, NaN (an empty cell of a frame), or an empty text or list: nothing given."""
    value = _comparable(value)
    if isinstance(value, float):
        return math.isnan(value)
    return value is None or (isinstance(value, (str, list)) and not value)


def _same(first: Any, second: Any) -> bool:
    try:
        return bool(_comparable(first) == _comparable(second))
    except Exception:  # values that cannot be compared are not the same
        return False


def _has_documents(value: Any) -> bool:
    items = value if isinstance(value, (list, tuple)) else [value]
    return any(isinstance(item, Document) for item in items)


class RagSample(BaseModel):
    """One RAG interaction: a question, what was retrieved, the answer and the reference.

    Accepts RAGAS column names (``user_input``, ``retrieved_contexts``, ``response``,
    ``ground_truth`` ...) and Documents as contexts; unknown keys are kept in ``metadata``.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    question: str | None = None
    """The user's question (RAGAS: ``user_input``)."""
    contexts: list[str] = Field(default_factory=list)
    """The retrieved contexts in rank order (RAGAS: ``retrieved_contexts``)."""
    context_ids: list[str | None] | None = None
    """Ids of the retrieved contexts, from ``Document.id`` or metadata (RAGAS:
    ``retrieved_context_ids``)."""
    answer: str | None = None
    """The generated answer (RAGAS: ``response``)."""
    reference: str | None = None
    """The reference answer (RAGAS: ``ground_truth``)."""
    reference_contexts: list[str] | None = None
    """Contexts that should have been retrieved, for the string-similarity metrics."""
    reference_context_ids: list[str] | None = None
    """Ids of the contexts that should have been retrieved, for the id-based metrics."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form data; unknown input keys land here so nothing is lost."""
    language: str | None = None
    """Language code of the sample ("en", "ja", ...); overrides the metric's language."""

    @model_validator(mode="before")
    @classmethod
    def _map_columns(cls, data: Any) -> Any:
        """Map RAGAS column names, read Documents and keep unknown keys in metadata."""
        if isinstance(data, RagSample):
            return data
        if not isinstance(data, Mapping):
            return data
        out: dict[str, Any] = {}
        source: dict[str, str] = {}  # the key each field was read from
        given = data.get("metadata")
        metadata = dict(given) if isinstance(given, Mapping) else {}
        for key, value in data.items():
            if key == "metadata":
                continue
            target = _ALIASES.get(key, key)
            if target not in cls.model_fields:
                metadata.setdefault(key, value)
                continue
            if target == "reference" and isinstance(value, (list, tuple)):
                value = "\n".join(str(v) for v in value)  # noqa: PLW2901 - the field's form
            if target in out:  # a second name of a field already read
                if _absent(value):
                    continue
                if not _absent(out[target]):
                    if not _same(out[target], value):
                        msg = (
                            f"`{source[target]}` and `{key}` are two names of the field "
                            f"`{target}` and their values differ: give one of them"
                        )
                        raise ValueError(msg)
                    if not _has_documents(value):
                        continue  # equal: keep the first (its Documents and their ids)
            out[target] = value
            source[target] = key
        raw_contexts = out.get("contexts")
        if out.get("context_ids") is None and raw_contexts is not None:
            items = [raw_contexts] if isinstance(raw_contexts, Document) else raw_contexts
            if isinstance(items, Sequence) and not isinstance(items, str):
                ids = [_document_id(d) if isinstance(d, Document) else None for d in items]
                if any(i is not None for i in ids):
                    out["context_ids"] = ids
        # Not an object: left as given, so validation names the field.
        out["metadata"] = metadata if given is None or isinstance(given, Mapping) else given
        return out

    @field_validator("contexts", mode="before")
    @classmethod
    def _contexts(cls, value: Any) -> list[str]:
        return _as_text_list(value, "contexts")

    @field_validator("reference_contexts", mode="before")
    @classmethod
    def _reference_contexts(cls, value: Any) -> list[str] | None:
        return None if value is None else _as_text_list(value, "reference_contexts")

    @field_validator("reference_context_ids", mode="before")
    @classmethod
    def _reference_ids(cls, value: Any) -> Any:
        if isinstance(value, (str, int)):
            return [str(value)]
        if isinstance(value, Sequence):
            return [str(v) for v in value]
        return value

    @field_validator("context_ids", mode="before")
    @classmethod
    def _context_ids(cls, value: Any) -> Any:
        if isinstance(value, Sequence) and not isinstance(value, str):
            return [None if v is None else str(v) for v in value]
        return value

    @field_validator("language")
    @classmethod
    def _language(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from langchain_ragmetrics._text import check_language

        return check_language(value, field="language")

    def require(self, metric: str, *fields: str) -> None:
        """Raise a ValueError naming the metric and the first missing field.

        Args:
            metric: The metric's class name, used in the message.
            fields: Field names the metric needs (``None`` counts as missing).
        """
        for field in fields:
            if getattr(self, field) is None:
                hint = ""
                if self.metadata:
                    hint = f" (the sample has these other keys: {', '.join(sorted(self.metadata))})"
                msg = f"{metric} needs `{field}`{hint}"
                raise ValueError(msg)


MetricInput = RagSample | Mapping[str, Any]
"""What a metric accepts: a RagSample or a mapping with its fields (RAGAS names allowed)."""


def coerce_sample(value: MetricInput) -> RagSample:
    """Validate a metric input into a RagSample."""
    if isinstance(value, RagSample):
        return value
    if isinstance(value, Mapping):
        return RagSample.model_validate(dict(value))
    msg = f"expected a RagSample or a dict, got {type(value).__name__}"
    raise TypeError(msg)


class MetricResult(BaseModel):
    """The outcome of one metric on one sample.

    ``score`` is a float in [0, 1], NaN when the judge failed (``error`` says why), or None
    when the metric could not be assessed (e.g. no reference online: a skip, not a failure).
    One definition everywhere (online stats, sinks, LangSmith feedback, offline summary):
    :attr:`failed` = an error was recorded (score NaN); :attr:`skipped` = no score and no
    error (None, or a NaN without error: nothing to assess).
    """

    model_config = ConfigDict(extra="forbid")

    metric: str
    """The metric key, e.g. ``context_recall``."""
    score: float | None
    """Score in [0, 1]; NaN on failure; None when skipped."""
    reason: str | None = None
    """A short human-readable explanation of the score."""
    details: dict[str, Any] = Field(default_factory=dict)
    """Per-statement, per-context, per-entity or per-sentence verdicts."""
    error: str | None = None
    """Why the metric failed, when it did."""
    usage: Usage = Field(default_factory=Usage)
    """Tokens and judge calls spent."""
    judge: str | None = None
    """Name of the judge model, if one was used."""
    latency_s: float | None = None
    """Wall time spent on this result, in seconds."""

    @property
    def failed(self) -> bool:
        """True when the metric raised or the judge never gave a usable answer (``error`` set)."""
        return self.error is not None

    @property
    def skipped(self) -> bool:
        """True when there was nothing to assess: no error and no score (None or NaN)."""
        return self.error is None and (self.score is None or math.isnan(self.score))

    @property
    def finite_score(self) -> float | None:
        """The score, or None when there is none or it is NaN: what JSON and tables show."""
        return None if self.score is None or math.isnan(self.score) else self.score

    def to_langsmith(self) -> dict[str, Any]:
        """Convert to LangSmith's evaluator result shape ``{key, score, comment}``."""
        comment = self.reason if self.error is None else f"error: {self.error}"
        return {"key": self.metric, "score": self.finite_score, "comment": comment}
