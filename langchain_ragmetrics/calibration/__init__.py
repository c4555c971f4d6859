"""Is this judge model good enough? A labelled set and :func:`check_judge` to find out."""

from langchain_ragmetrics.calibration._check import (
    DEFAULT_MIN_ANSWERED,
    DEFAULT_MIN_KAPPA,
    ChanceBaseline,
    JudgeGate,
    JudgeReport,
    MetricAgreement,
    acheck_judge,
    check_judge,
)
from langchain_ragmetrics.calibration._data import (
    CalibrationItem,
    CalibrationSetError,
    load_calibration_set,
)
from langchain_ragmetrics.calibration._protocols import DEFAULT_VARIANTS, variant_names
from langchain_ragmetrics.errors import UnknownMetricError

__all__ = [
    "DEFAULT_MIN_ANSWERED",
    "DEFAULT_MIN_KAPPA",
    "DEFAULT_VARIANTS",
    "CalibrationItem",
    "CalibrationSetError",
    "ChanceBaseline",
    "JudgeGate",
    "JudgeReport",
    "MetricAgreement",
    "UnknownMetricError",
    "acheck_judge",
    "check_judge",
    "load_calibration_set",
    "variant_names",
]
