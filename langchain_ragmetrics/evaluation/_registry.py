"""The one list of built-in metrics, by name (the ``.key`` of each class).

Everything that enumerates metrics reads it: the package root, the CLI, ``evaluate(metrics=
["context_recall", ...])``, the demo and the benchmarks.
"""

from __future__ import annotations

from typing import Any

from langchain_ragmetrics._errors import UnknownMetricError
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

__all__ = ["UnknownMetricError", "is_judged", "metric_classes", "metric_from_name", "metric_names"]

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


def metric_classes() -> dict[str, type[BaseRagMetric]]:
    """Every built-in metric class by its key (``context_recall`` -> ``ContextRecall``)."""
    return {cls.key: cls for cls in _CLASSES}


def metric_names(*, judged: bool | None = None) -> list[str]:
    """Names of the built-in metrics in registry order; ``judged`` keeps only LLM / non-LLM ones."""
    return [
        key for key, cls in metric_classes().items() if judged is None or is_judged(cls) == judged
    ]


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
        raise UnknownMetricError(name, metric_classes())
    kept = {k: v for k, v in options.items() if k in cls.model_fields and v is not None}
    return cls(**kept)
