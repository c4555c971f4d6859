"""Offline evaluation: score a dataset with metrics and read the results as a table."""

from langchain_ragmetrics._cache import VerdictCache
from langchain_ragmetrics._dataset import RowProblem, load_dataset
from langchain_ragmetrics.errors import (
    BatchError,
    CacheError,
    ComparisonError,
    DatasetError,
    JudgeSetupError,
    MissingFieldError,
    PreflightError,
    QualityGateError,
    ResultFileError,
    UnknownMetricError,
)
from langchain_ragmetrics.evaluation._batch_options import BatchOptions, BatchReport
from langchain_ragmetrics.evaluation._compare import Comparison, MetricComparison, RowChange
from langchain_ragmetrics.evaluation._preflight import preflight
from langchain_ragmetrics.evaluation._registry import (
    is_judged,
    metric_classes,
    metric_from_name,
    metric_names,
)
from langchain_ragmetrics.evaluation._result import (
    EvaluationResult,
    EvaluationRow,
    MetricSummary,
    Status,
)
from langchain_ragmetrics.evaluation._run import (
    ResultCallback,
    aevaluate,
    evaluate,
)
from langchain_ragmetrics.evaluation._saved import RunInfo, sample_id

__all__ = [
    "BatchError",
    "BatchOptions",
    "BatchReport",
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
    "metric_names",
    "preflight",
    "sample_id",
]
