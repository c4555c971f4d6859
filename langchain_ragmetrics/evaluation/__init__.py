"""Offline evaluation: score a dataset with metrics and read the results as a table."""

from langchain_ragmetrics._cache import VerdictCache
from langchain_ragmetrics._dataset import RowProblem, load_dataset

# Exceptions are documented once, at the root (``langchain_ragmetrics``); the aliases keep
# existing ``from <this package> import ...Error`` working without making them public here.
from langchain_ragmetrics._errors import BatchError as BatchError
from langchain_ragmetrics._errors import CacheError as CacheError
from langchain_ragmetrics._errors import ComparisonError as ComparisonError
from langchain_ragmetrics._errors import DatasetError as DatasetError
from langchain_ragmetrics._errors import JudgeSetupError as JudgeSetupError
from langchain_ragmetrics._errors import MissingFieldError as MissingFieldError
from langchain_ragmetrics._errors import PreflightError as PreflightError
from langchain_ragmetrics._errors import QualityGateError as QualityGateError
from langchain_ragmetrics._errors import ResultFileError as ResultFileError
from langchain_ragmetrics._errors import UnknownMetricError as UnknownMetricError
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
    "BatchOptions",
    "BatchReport",
    "Comparison",
    "EvaluationResult",
    "EvaluationRow",
    "MetricComparison",
    "MetricSummary",
    "ResultCallback",
    "RowChange",
    "RowProblem",
    "RunInfo",
    "Status",
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
