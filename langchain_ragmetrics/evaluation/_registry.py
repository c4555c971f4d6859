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

    Options another metric has but this one lacks (``llm`` for a non-LLM metric) are
    dropped, so one set of options can build a list of metrics; an option no metric has
    (a typo such as ``lm=``) is refused, since dropping it would, say, judge with the
    default model instead of the one meant.

    Raises:
        UnknownMetricError: No metric has that key.
        TypeError: An option is not an option of any metric.
    """
    classes = metric_classes()
    cls = classes.get(name.strip().lower())
    if cls is None:
        raise UnknownMetricError(name, classes)
    known = {field for each in classes.values() for field in each.model_fields}
    unknown = sorted(k for k in options if k not in known)
    if unknown:
        msg = f"no metric has the option(s) {', '.join(unknown)}"
        raise TypeError(msg)
    kept = {k: v for k, v in options.items() if k in cls.model_fields and v is not None}
    return cls(**kept)
