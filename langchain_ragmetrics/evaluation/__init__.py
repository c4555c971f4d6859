"""Offline evaluation: score a dataset with metrics and read the results as a table."""

from langchain_ragmetrics._dataset import RowProblem, load_dataset
from langchain_ragmetrics.errors import (
    DatasetError,
    JudgeSetupError,
    MissingFieldError,
    UnknownMetricError,
)
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

__all__ = [
    "DatasetError",
    "EvaluationResult",
    "EvaluationRow",
    "JudgeSetupError",
    "MetricSummary",
    "MissingFieldError",
    "ResultCallback",
    "RowProblem",
    "Status",
    "UnknownMetricError",
    "aevaluate",
    "evaluate",
    "is_judged",
    "load_dataset",
    "metric_classes",
    "metric_from_name",
    "metric_names",
]
