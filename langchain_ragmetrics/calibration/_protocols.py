"""How each judged metric (and each of its judging modes) is compared with the labels."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_ragmetrics._errors import UnknownMetricError
from langchain_ragmetrics._text import normalize_for_match

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from langchain_ragmetrics._schema import MetricResult
    from langchain_ragmetrics.calibration._data import CalibrationItem
    from langchain_ragmetrics.metrics import JudgedMetric

__all__ = [
    "DEFAULT_VARIANTS",
    "Variant",
    "custom_variant",
    "label_score",
    "resolve_variant",
    "variant_names",
    "verdict_pairs",
]

Pairs = tuple[list[bool], list[bool]]
"""(labelled verdicts, the judge's verdicts), aligned."""


@dataclass(frozen=True)
class Variant:
    """One way of judging a metric that check_judge can run, under a display name."""

    name: str
    """Row name, e.g. ``context_entity_recall:one-call``."""
    build: Callable[[BaseChatModel], JudgedMetric]
    """Makes the metric with the judge under test."""
    description: str
    """What the variant is (shown in ``--help``)."""


def _recall(llm: BaseChatModel, **options: Any) -> JudgedMetric:
    from langchain_ragmetrics.metrics import ContextRecall

    return ContextRecall(llm=llm, **options)


def _precision(llm: BaseChatModel, **options: Any) -> JudgedMetric:
    from langchain_ragmetrics.metrics import ContextPrecision

    return ContextPrecision(llm=llm, **options)


def _entity(llm: BaseChatModel, **options: Any) -> JudgedMetric:
    from langchain_ragmetrics.metrics import ContextEntityRecall

    return ContextEntityRecall(llm=llm, **options)


def _relevance(llm: BaseChatModel, **options: Any) -> JudgedMetric:
    from langchain_ragmetrics.metrics import ContextRelevance

    return ContextRelevance(llm=llm, **options)


_VARIANTS: tuple[Variant, ...] = (
    Variant("context_recall", _recall, "one verdict per reference sentence (default)"),
    Variant(
        "context_recall:statement",
        lambda llm: _recall(llm, unit="statement"),
        "the judge splits the reference into statements (score only)",
    ),
    Variant("context_precision", _precision, "all passages in one call (default)"),
    Variant(
        "context_precision:per-context",
        lambda llm: _precision(llm, per_context=True),
        "one call per passage",
    ),
    Variant(
        "context_entity_recall",
        _entity,
        "reference and passages read in two independent calls (default)",
    ),
    Variant(
        "context_entity_recall:one-call",
        lambda llm: _entity(llm, single_call=True),
        "both entity lists in one call",
    ),
    Variant("context_relevance", _relevance, "the judge picks the needed sentence indices"),
)

DEFAULT_VARIANTS: tuple[str, ...] = (
    "context_recall",
    "context_precision",
    "context_entity_recall",
    "context_relevance",
)
"""What check_judge runs when no metrics are named: each metric as it is built by default."""


def variant_names() -> list[str]:
    """Every name check_judge accepts in ``metrics``."""
    return [v.name for v in _VARIANTS]


def custom_variant(metric: JudgedMetric, taken: set[str]) -> Variant:
    """A caller-built metric (own prompt, own judge) as a variant named ``<key>:custom``."""
    name = f"{metric.key}:custom"
    n = 2
    while name in taken:
        name, n = f"{metric.key}:custom{n}", n + 1
    if metric.key not in {v.name for v in _VARIANTS}:
        raise UnknownMetricError(metric.key, [v.name for v in _VARIANTS if ":" not in v.name])
    return Variant(name, lambda _llm: metric, "a metric built by the caller")


def resolve_variant(name: str) -> Variant:
    """The variant called ``name`` (case and spacing ignored).

    Raises:
        UnknownMetricError: No variant has that name (the message suggests the closest).
    """
    wanted = name.strip().lower()
    for variant in _VARIANTS:
        if variant.name == wanted:
            return variant
    raise UnknownMetricError(name, variant_names())


def label_score(key: str, item: CalibrationItem) -> float | None:
    """The labelled score of ``item`` for the metric ``key`` (None: not assessable)."""
    labels = item.labels
    scores: dict[str, float | None] = {
        "context_recall": labels.context_recall.score,
        "context_precision": labels.context_precision.score,
        "context_entity_recall": labels.context_entity_recall.score,
        "context_relevance": labels.context_relevance.score,
    }
    return scores[key]


def _recall_pairs(item: CalibrationItem, result: MetricResult) -> Pairs | None:
    if result.details.get("unit") != "sentence":
        return None  # statement mode: the judge's units cannot be lined up with the labels
    judged = [bool(s["attributed"]) for s in result.details["statements"]]
    labels = list(item.labels.context_recall.attributed)
    return (labels, judged) if len(judged) == len(labels) else None


def _precision_pairs(item: CalibrationItem, result: MetricResult) -> Pairs | None:
    judged = [bool(v["useful"]) for v in result.details["verdicts"]]
    labels = list(item.labels.context_precision.useful)
    return (labels, judged) if len(judged) == len(labels) else None


def _relevance_pairs(item: CalibrationItem, result: MetricResult) -> Pairs | None:
    label = item.labels.context_relevance
    if result.details.get("sentence_count") != len(label.sentences):
        return None
    picked = set(result.details["relevant_indices"])
    wanted = set(label.relevant)
    indices = range(len(label.sentences))
    return [i in wanted for i in indices], [i in picked for i in indices]


def _entity_pairs(item: CalibrationItem, result: MetricResult) -> Pairs | None:
    label = item.labels.context_entity_recall
    if label.score is None:
        return None
    found = {normalize_for_match(name) for name in result.details.get("found", [])}
    labels = [bool(e.found) for e in label.reference_entities]
    judged = [
        any(normalize_for_match(form) in found for form in e.forms())
        for e in label.reference_entities
    ]
    return labels, judged


_PAIRS: dict[str, Callable[[CalibrationItem, MetricResult], Pairs | None]] = {
    "context_recall": _recall_pairs,
    "context_precision": _precision_pairs,
    "context_entity_recall": _entity_pairs,
    "context_relevance": _relevance_pairs,
}


def verdict_pairs(key: str, item: CalibrationItem, result: MetricResult) -> Pairs | None:
    """Labelled and judged verdicts of one answered item, aligned; None when not comparable."""
    if result.failed or result.score is None or math.isnan(result.score):
        return None
    return _PAIRS[key](item, result)
