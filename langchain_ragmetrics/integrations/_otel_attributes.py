"""Attribute sets of the OpenTelemetry sink's events and metrics (GenAI semantic conventions).

Plain functions of an :class:`OnlineResult`, so they need no OpenTelemetry import.
"""

from __future__ import annotations

import re

from langchain_ragmetrics._retrieval import OnlineResult
from langchain_ragmetrics._schema import MetricResult

__all__ = [
    "EVENT_NAME",
    "SCORE_BOUNDARIES",
    "error_type",
    "event_attributes",
    "metric_attributes",
    "score_label",
]

EVENT_NAME = "gen_ai.evaluation.result"
"""The event name the GenAI semantic conventions give to an evaluation result."""
SCORE_BOUNDARIES = tuple(round(0.1 * i, 1) for i in range(11))
"""Histogram bucket bounds of the score histogram: 0, 0.1, ..., 1."""

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_OTHER = "_OTHER"


def error_type(error: str | None) -> str:
    """A low-cardinality ``error.type`` from a result's error text.

    ``"TimeoutError: ..."`` gives ``TimeoutError``; the engine's ``"timed out after ..."``
    gives ``timeout``; anything else ``_OTHER`` (the conventions' fallback value).
    """
    if not error:
        return _OTHER
    if error.startswith("timed out"):
        return "timeout"
    head = error.split(":", 1)[0].strip()
    return head if _IDENTIFIER.fullmatch(head) else _OTHER


def score_label(result: MetricResult, pass_threshold: float | None) -> str | None:
    """``skipped`` (not assessed), ``pass``/``fail`` against a threshold, or None."""
    if result.failed:
        return None
    if result.skipped:  # no score, or NaN: as MetricResult and the sink's counters say
        return "skipped"
    if pass_threshold is None or result.score is None:
        return None
    return "pass" if result.score >= pass_threshold else "fail"


def metric_attributes(item: OnlineResult) -> dict[str, str]:
    """The attributes of the metric instruments: metric, retriever and judge model."""
    return {
        "gen_ai.evaluation.name": item.result.metric,
        "ragmetrics.retriever": item.retriever or "unknown",
        "ragmetrics.judge.model": item.result.judge or "none",
    }


def event_attributes(item: OnlineResult, label: str | None) -> dict[str, str | float]:
    """The attributes of one ``gen_ai.evaluation.result`` event."""
    result = item.result
    attributes: dict[str, str | float] = {"gen_ai.evaluation.name": result.metric}
    if result.failed:
        attributes["error.type"] = error_type(result.error)
        if result.error:
            attributes["gen_ai.evaluation.explanation"] = result.error
    else:
        if result.finite_score is not None:
            attributes["gen_ai.evaluation.score.value"] = float(result.finite_score)
        if result.reason:
            attributes["gen_ai.evaluation.explanation"] = result.reason
    if label is not None:
        attributes["gen_ai.evaluation.score.label"] = label
    if result.judge:
        attributes["ragmetrics.judge.model"] = result.judge
    if item.retriever:
        attributes["ragmetrics.retriever"] = item.retriever
    attributes["ragmetrics.run_id"] = str(item.run_id)
    if item.trace_id is not None:
        attributes["ragmetrics.trace_id"] = str(item.trace_id)
    return attributes
