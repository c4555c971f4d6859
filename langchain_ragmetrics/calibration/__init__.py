"""Is this judge model good enough? A labelled set and :func:`check_judge` to find out."""

# Exceptions are documented once, at the root (``langchain_ragmetrics``); the aliases keep
# existing ``from <this package> import ...Error`` working without making them public here.
from langchain_ragmetrics._errors import CalibrationSetError as CalibrationSetError
from langchain_ragmetrics._errors import UnknownMetricError as UnknownMetricError
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
from langchain_ragmetrics.calibration._data import CalibrationItem, load_calibration_set
from langchain_ragmetrics.calibration._protocols import DEFAULT_VARIANTS, variant_names

__all__ = [
    "DEFAULT_MIN_ANSWERED",
    "DEFAULT_MIN_KAPPA",
    "DEFAULT_VARIANTS",
    "CalibrationItem",
    "ChanceBaseline",
    "JudgeGate",
    "JudgeReport",
    "MetricAgreement",
    "acheck_judge",
    "check_judge",
    "load_calibration_set",
    "variant_names",
]
