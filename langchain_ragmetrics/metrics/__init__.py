"""The context metrics, each a LangChain Runnable ``RagSample | dict -> MetricResult``."""

from langchain_ragmetrics.metrics._base import (
    BaseRagMetric,
    JudgedMetric,
    JudgeError,
    Plan,
    Verdict,
)
from langchain_ragmetrics.metrics._judge import RetryPolicy
from langchain_ragmetrics.metrics.context_entity_recall import ContextEntityRecall
from langchain_ragmetrics.metrics.context_precision import ContextPrecision
from langchain_ragmetrics.metrics.context_recall import ContextRecall
from langchain_ragmetrics.metrics.context_relevance import ContextRelevance
from langchain_ragmetrics.metrics.id_based import IDBasedContextPrecision, IDBasedContextRecall
from langchain_ragmetrics.metrics.string_similarity import (
    NonLLMContextPrecision,
    NonLLMContextRecall,
)

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
    "NonLLMContextPrecision",
    "NonLLMContextRecall",
    "Plan",
    "RetryPolicy",
    "Verdict",
]
