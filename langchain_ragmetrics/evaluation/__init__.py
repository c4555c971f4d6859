"""Offline evaluation: score a dataset with metrics and read the results as a table."""

from langchain_ragmetrics._cache import CacheError, VerdictCache
from langchain_ragmetrics._dataset import (
    DatasetError,
    MissingFieldError,
    RowProblem,
    load_dataset,
)
from langchain_ragmetrics.evaluation._compare import (
    Comparison,
    ComparisonError,
    MetricComparison,
    RowChange,
)
from langchain_ragmetrics.evaluation._gates import QualityGateError
from langchain_ragmetrics.evaluation._preflight import PreflightError, preflight
from langchain_ragmetrics.evaluation._registry import (
    UnknownMetricError,
    is_judged,
    metric_classes,
    metric_from_name,
)
from langchain_ragmetrics.evaluation._result import (
    EvaluationResult,
    EvaluationRow,
    MetricSummary,
    Status,
)
from langchain_ragmetrics.evaluation._run import (
    JudgeSetupError,
    ResultCallback,
    aevaluate,
    evaluate,
)
from langchain_ragmetrics.evaluation._saved import ResultFileError, RunInfo, sample_id

__all__ = [
    "CacheError",
    "Comparison",
    "ComparisonError",
    "DatasetError",
    "EvaluationResult",
    "EvaluationRow",
    "JudgeSetupError",
    "MetricComparison",
    "MetricSummary",
    "MissingFieldError",
    "PreflightError",
    "QualityGateError",
    "ResultCallback",
    "ResultFileError",
    "RowChange",
    "RowProblem",
    "RunInfo",
    "Status",
    "UnknownMetricError",
    "VerdictCache",
    "aevaluate",
    "evaluate",
    "is_judged",
    "load_dataset",
    "metric_classes",
    "metric_from_name",
    "preflight",
    "sample_id",
]
