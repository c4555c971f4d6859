"""Metric names: the ``.key`` of each metric class, for the CLI and ``evaluate(metrics=[...])``."""

from __future__ import annotations

import difflib
from typing import Any

from langchain_ragmetrics.metrics import (
    BaseRagMetric,
    ContextEntityRecall,
    ContextPrecision,
    ContextRecall,
    ContextRelevance,
    IDBasedContextPrecision,
    IDBasedContextRecall,
    JudgedMetric,
    NonLLMContextPrecision,
    NonLLMContextRecall,
)

__all__ = [
    "UnknownMetricError",
    "close_metric_names",
    "is_judged",
    "metric_classes",
    "metric_from_name",
]

_CLASSES: tuple[type[BaseRagMetric], ...] = (
    ContextRecall,
    ContextPrecision,
    ContextEntityRecall,
    ContextRelevance,
    NonLLMContextRecall,
    NonLLMContextPrecision,
    IDBasedContextRecall,
    IDBasedContextPrecision,
)


class UnknownMetricError(ValueError):
    """A metric name that no metric class has; the message lists the known names."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.known = sorted(metric_classes())
        close = close_metric_names(name)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        super().__init__(f"unknown metric {name!r}; {hint}known metrics: {', '.join(self.known)}")


def close_metric_names(name: str) -> list[str]:
    """The known metric name closest to ``name`` (a typo), if one is close enough."""
    return difflib.get_close_matches(name.strip().lower(), list(metric_classes()), n=1, cutoff=0.6)


def metric_classes() -> dict[str, type[BaseRagMetric]]:
    """Every built-in metric class by its key (``context_recall`` -> ``ContextRecall``)."""
    return {cls.key: cls for cls in _CLASSES}


def is_judged(metric: BaseRagMetric | type[BaseRagMetric]) -> bool:
    """True when the metric asks an LLM judge (and so needs a chat model)."""
    cls = metric if isinstance(metric, type) else type(metric)
    return issubclass(cls, JudgedMetric)


def metric_from_name(name: str, **options: Any) -> BaseRagMetric:
    """Build a metric from its key, e.g. ``metric_from_name("context_recall", llm=judge)``.

    Options a metric does not have (``llm`` for a non-LLM metric) are dropped.

    Raises:
        UnknownMetricError: No metric has that key.
    """
    cls = metric_classes().get(name.strip().lower())
    if cls is None:
        raise UnknownMetricError(name)
    kept = {k: v for k, v in options.items() if k in cls.model_fields and v is not None}
    return cls(**kept)
