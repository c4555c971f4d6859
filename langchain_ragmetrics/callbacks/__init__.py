"""Online evaluation: a callback handler that scores live retrievals, and result sinks."""

from langchain_ragmetrics._retrieval import OnlineResult
from langchain_ragmetrics.callbacks._isolation import ProcessIsolation, ScoringSetup
from langchain_ragmetrics.callbacks._settings import HandlerSettings
from langchain_ragmetrics.callbacks._stats import HandlerStats, SinkStats
from langchain_ragmetrics.callbacks.handler import RagMetricsCallbackHandler
from langchain_ragmetrics.callbacks.langsmith_feedback import LangSmithFeedbackSink
from langchain_ragmetrics.callbacks.sinks import (
    BaseSink,
    CallableSink,
    InMemorySink,
    JsonlSink,
    LoggingSink,
    SinkUnavailableError,
)

__all__ = [
    "BaseSink",
    "CallableSink",
    "HandlerSettings",
    "HandlerStats",
    "InMemorySink",
    "JsonlSink",
    "LangSmithFeedbackSink",
    "LoggingSink",
    "OnlineResult",
    "ProcessIsolation",
    "RagMetricsCallbackHandler",
    "ScoringSetup",
    "SinkStats",
    "SinkUnavailableError",
]
