"""The context metrics, each a LangChain Runnable ``RagSample | dict -> MetricResult``.

Each LLM-judged metric ends in a pure scorer (``score_context_recall``, ...): call it with
hand-written verdicts to check a score without any judge.
"""

# Exceptions are documented once, at the root (``langchain_ragmetrics``); the aliases keep
# existing ``from <this package> import ...Error`` working without making them public here.
from langchain_ragmetrics._errors import JudgeError as JudgeError
from langchain_ragmetrics.metrics._base import (
    BaseRagMetric,
    JudgedMetric,
    Plan,
    Verdict,
)
from langchain_ragmetrics.metrics._context_entity_recall import (
    ContextEntityRecall,
    score_entity_recall,
)
from langchain_ragmetrics.metrics._context_precision import (
    ContextPrecision,
    SingleContextVerdict,
    score_context_precision,
)
from langchain_ragmetrics.metrics._context_recall import (
    ContextRecall,
    RecallStatements,
    StatementVerdict,
    score_context_recall,
)
from langchain_ragmetrics.metrics._context_relevance import (
    ContextRelevance,
    ContextSentence,
    score_context_relevance,
)
from langchain_ragmetrics.metrics._id_based import IDBasedContextPrecision, IDBasedContextRecall
from langchain_ragmetrics.metrics._judge import RetryPolicy
from langchain_ragmetrics.metrics._string_similarity import (
    NonLLMContextPrecision,
    NonLLMContextRecall,
)

__all__ = [
    "BaseRagMetric",
    "ContextEntityRecall",
    "ContextPrecision",
    "ContextRecall",
    "ContextRelevance",
    "ContextSentence",
    "IDBasedContextPrecision",
    "IDBasedContextRecall",
    "JudgedMetric",
    "NonLLMContextPrecision",
    "NonLLMContextRecall",
    "Plan",
    "RecallStatements",
    "RetryPolicy",
    "SingleContextVerdict",
    "StatementVerdict",
    "Verdict",
    "score_context_precision",
    "score_context_recall",
    "score_context_relevance",
    "score_entity_recall",
]
