"""Online evaluation: a callback handler that scores live retrievals, and result sinks."""

# Exceptions are documented once, at the root (``langchain_ragmetrics``); the aliases keep
# existing ``from <this package> import ...Error`` working without making them public here.
from langchain_ragmetrics._errors import SinkSkipError as SinkSkipError
from langchain_ragmetrics._errors import SinkUnavailableError as SinkUnavailableError
from langchain_ragmetrics._retrieval import OnlineResult
from langchain_ragmetrics.callbacks._isolation import ProcessIsolation, ScoringSetup
from langchain_ragmetrics.callbacks._stats import HandlerStats, SinkStats
from langchain_ragmetrics.callbacks.handler import RagMetricsCallbackHandler
from langchain_ragmetrics.callbacks.langsmith_feedback import LangSmithFeedbackSink
from langchain_ragmetrics.callbacks.sinks import (
    BaseSink,
    CallableSink,
    InMemorySink,
    JsonlSink,
    LoggingSink,
)

__all__ = [
    "BaseSink",
    "CallableSink",
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
]
