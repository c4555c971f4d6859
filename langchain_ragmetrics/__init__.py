"""Retrieval-quality metrics for LangChain RAG apps.

Context metrics as Runnables, an online evaluator callback and offline evaluation. Importing
the package is cheap: submodules load on first use of a name.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from langchain_ragmetrics._redact import install as _install_redaction
from langchain_ragmetrics._version import __version__

_install_redaction(logging.getLogger("langchain_ragmetrics"))  # no secret reaches a log record

if TYPE_CHECKING:
    from langchain_ragmetrics._errors import (
        BatchError,
        CacheError,
        CalibrationSetError,
        CheckpointError,
        ComparisonError,
        DatasetError,
        DeadlineExceededError,
        HookError,
        JudgeConfigError,
        JudgeError,
        JudgeSetupError,
        MissingFieldError,
        MonitorError,
        PreflightError,
        QualityGateError,
        RagMetricsError,
        ResultFileError,
        SinkSkipError,
        SinkUnavailableError,
        UnknownMetricError,
        UnsupportedLanguageError,
    )
    from langchain_ragmetrics._schema import MetricResult, RagSample, Usage
    from langchain_ragmetrics.calibration import check_judge
    from langchain_ragmetrics.callbacks import (
        BaseSink,
        CallableSink,
        HandlerStats,
        InMemorySink,
        JsonlSink,
        LangSmithFeedbackSink,
        LoggingSink,
        OnlineResult,
        RagMetricsCallbackHandler,
    )
    from langchain_ragmetrics.evaluation import (
        EvaluationResult,
        MetricSummary,
        VerdictCache,
        aevaluate,
        evaluate,
        load_dataset,
        preflight,
    )
    from langchain_ragmetrics.integrations.opentelemetry import OpenTelemetrySink
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
        RetryPolicy,
    )


_EXPORTS: dict[str, str] = {
    "BaseRagMetric": "langchain_ragmetrics.metrics",
    "BaseSink": "langchain_ragmetrics.callbacks",
    "BatchError": "langchain_ragmetrics._errors",
    "CacheError": "langchain_ragmetrics._errors",
    "CalibrationSetError": "langchain_ragmetrics._errors",
    "CallableSink": "langchain_ragmetrics.callbacks",
    "CheckpointError": "langchain_ragmetrics._errors",
    "ComparisonError": "langchain_ragmetrics._errors",
    "ContextEntityRecall": "langchain_ragmetrics.metrics",
    "ContextPrecision": "langchain_ragmetrics.metrics",
    "ContextRecall": "langchain_ragmetrics.metrics",
    "ContextRelevance": "langchain_ragmetrics.metrics",
    "DatasetError": "langchain_ragmetrics._errors",
    "DeadlineExceededError": "langchain_ragmetrics._errors",
    "EvaluationResult": "langchain_ragmetrics.evaluation",
    "HandlerStats": "langchain_ragmetrics.callbacks",
    "HookError": "langchain_ragmetrics._errors",
    "IDBasedContextPrecision": "langchain_ragmetrics.metrics",
    "IDBasedContextRecall": "langchain_ragmetrics.metrics",
    "InMemorySink": "langchain_ragmetrics.callbacks",
    "JsonlSink": "langchain_ragmetrics.callbacks",
    "JudgeConfigError": "langchain_ragmetrics._errors",
    "JudgeError": "langchain_ragmetrics._errors",
    "JudgeSetupError": "langchain_ragmetrics._errors",
    "JudgedMetric": "langchain_ragmetrics.metrics",
    "LangSmithFeedbackSink": "langchain_ragmetrics.callbacks",
    "LoggingSink": "langchain_ragmetrics.callbacks",
    "MetricResult": "langchain_ragmetrics._schema",
    "MetricSummary": "langchain_ragmetrics.evaluation",
    "MissingFieldError": "langchain_ragmetrics._errors",
    "MonitorError": "langchain_ragmetrics._errors",
    "NonLLMContextPrecision": "langchain_ragmetrics.metrics",
    "NonLLMContextRecall": "langchain_ragmetrics.metrics",
    "OnlineResult": "langchain_ragmetrics.callbacks",
    "OpenTelemetrySink": "langchain_ragmetrics.integrations.opentelemetry",
    "PreflightError": "langchain_ragmetrics._errors",
    "QualityGateError": "langchain_ragmetrics._errors",
    "RagMetricsCallbackHandler": "langchain_ragmetrics.callbacks",
    "RagMetricsError": "langchain_ragmetrics._errors",
    "RagSample": "langchain_ragmetrics._schema",
    "ResultFileError": "langchain_ragmetrics._errors",
    "RetryPolicy": "langchain_ragmetrics.metrics",
    "SinkSkipError": "langchain_ragmetrics._errors",
    "SinkUnavailableError": "langchain_ragmetrics._errors",
    "UnknownMetricError": "langchain_ragmetrics._errors",
    "UnsupportedLanguageError": "langchain_ragmetrics._errors",
    "Usage": "langchain_ragmetrics._schema",
    "VerdictCache": "langchain_ragmetrics.evaluation",
    "aevaluate": "langchain_ragmetrics.evaluation",
    "check_judge": "langchain_ragmetrics.calibration",
    "evaluate": "langchain_ragmetrics.evaluation",
    "load_dataset": "langchain_ragmetrics.evaluation",
    "preflight": "langchain_ragmetrics.evaluation",
}

__all__ = [
    "BaseRagMetric",
    "BaseSink",
    "BatchError",
    "CacheError",
    "CalibrationSetError",
    "CallableSink",
    "CheckpointError",
    "ComparisonError",
    "ContextEntityRecall",
    "ContextPrecision",
    "ContextRecall",
    "ContextRelevance",
    "DatasetError",
    "DeadlineExceededError",
    "EvaluationResult",
    "HandlerStats",
    "HookError",
    "IDBasedContextPrecision",
    "IDBasedContextRecall",
    "InMemorySink",
    "JsonlSink",
    "JudgeConfigError",
    "JudgeError",
    "JudgeSetupError",
    "JudgedMetric",
    "LangSmithFeedbackSink",
    "LoggingSink",
    "MetricResult",
    "MetricSummary",
    "MissingFieldError",
    "MonitorError",
    "NonLLMContextPrecision",
    "NonLLMContextRecall",
    "OnlineResult",
    "OpenTelemetrySink",
    "PreflightError",
    "QualityGateError",
    "RagMetricsCallbackHandler",
    "RagMetricsError",
    "RagSample",
    "ResultFileError",
    "RetryPolicy",
    "SinkSkipError",
    "SinkUnavailableError",
    "UnknownMetricError",
    "UnsupportedLanguageError",
    "Usage",
    "VerdictCache",
    "__version__",
    "aevaluate",
    "check_judge",
    "evaluate",
    "load_dataset",
    "preflight",
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
