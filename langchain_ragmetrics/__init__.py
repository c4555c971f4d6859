"""Retrieval-quality metrics for LangChain RAG apps.

Context metrics as Runnables, an online evaluator callback and offline evaluation. Importing
the package is cheap: submodules load on first use of a name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_ragmetrics.metrics import (
        BaseRagMetric,
        ContextEntityRecall,
        ContextPrecision,
        ContextRecall,
        ContextRelevance,
        IDBasedContextPrecision,
        IDBasedContextRecall,
        JudgedMetric,
        JudgeError,
        NonLLMContextPrecision,
        NonLLMContextRecall,
        RetryPolicy,
    )
    from langchain_ragmetrics.schema import MetricResult, RagSample, Usage

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "BaseRagMetric": "langchain_ragmetrics.metrics",
    "ContextEntityRecall": "langchain_ragmetrics.metrics",
    "ContextPrecision": "langchain_ragmetrics.metrics",
    "ContextRecall": "langchain_ragmetrics.metrics",
    "ContextRelevance": "langchain_ragmetrics.metrics",
    "IDBasedContextPrecision": "langchain_ragmetrics.metrics",
    "IDBasedContextRecall": "langchain_ragmetrics.metrics",
    "JudgeError": "langchain_ragmetrics.metrics",
    "JudgedMetric": "langchain_ragmetrics.metrics",
    "MetricResult": "langchain_ragmetrics.schema",
    "NonLLMContextPrecision": "langchain_ragmetrics.metrics",
    "NonLLMContextRecall": "langchain_ragmetrics.metrics",
    "RagSample": "langchain_ragmetrics.schema",
    "RetryPolicy": "langchain_ragmetrics.metrics",
    "Usage": "langchain_ragmetrics.schema",
}

__all__ = [
    "BaseRagMetric",
    "ContextEntityRecall",
    "ContextPrecision",
    "ContextRecall",
    "ContextRelevance",
    "IDBasedContextPrecision",
    "IDBasedContextRecall",
    "JudgeError",
    "JudgedMetric",
    "MetricResult",
    "NonLLMContextPrecision",
    "NonLLMContextRecall",
    "RagSample",
    "RetryPolicy",
    "Usage",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        msg = f"module 'langchain_ragmetrics' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
