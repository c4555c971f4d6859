"""Offline evaluation: score a dataset with metrics and read the results as a table."""

from langchain_ragmetrics._dataset import (
    DatasetError,
    MissingFieldError,
    RowProblem,
    load_dataset,
)
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
]
