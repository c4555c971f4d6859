"""Option checks and defaults of the online handler, and the context it judges in."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from langchain_ragmetrics.callbacks.sinks import BaseSink, LoggingSink
from langchain_ragmetrics.metrics._base import BaseRagMetric

__all__ = [
    "check_metrics",
    "check_sinks",
    "judge_callbacks",
    "langsmith_trace_id",
    "untraced",
]


def _check_is_a_list(name: str, value: object, what: str) -> None:
    """Refuse one object (or a string) where a list of them is expected."""
    one = isinstance(value, (BaseRagMetric, BaseSink))  # (a pydantic model is iterable)
    if one or isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        msg = f"`{name}` must be a list of {what}s, got {type(value).__name__}"
        if one:
            msg += f" (one {what}: pass [{what}])"
        raise TypeError(msg)


def check_metrics(metrics: Sequence[BaseRagMetric] | None) -> list[BaseRagMetric]:
    """The metrics (default ``ContextRelevance`` and ``ContextPrecision``), checked."""
    if metrics is None:
        from langchain_ragmetrics.metrics import ContextPrecision, ContextRelevance

        return [ContextRelevance(), ContextPrecision()]
    _check_is_a_list("metrics", metrics, "metric")
    out = list(metrics)
    if not out:
        msg = "`metrics` must name at least one metric"
        raise ValueError(msg)
    keys: set[str] = set()
    for i, metric in enumerate(out):
        if not isinstance(metric, BaseRagMetric):
            msg = f"`metrics[{i}]` must be a metric (BaseRagMetric), got {type(metric).__name__}"
            raise TypeError(msg)
        if metric.metric_name in keys:
            msg = f"`metrics[{i}]`: two metrics share the key {metric.metric_name!r}"
            raise ValueError(msg)
        keys.add(metric.metric_name)
    return out


def check_sinks(sinks: Sequence[BaseSink] | None) -> list[BaseSink]:
    """The sinks (default a ``LoggingSink``), checked."""
    if sinks is not None:
        _check_is_a_list("sinks", sinks, "sink")
    out: list[BaseSink] = [LoggingSink()] if sinks is None else list(sinks)
    for i, sink in enumerate(out):
        if not isinstance(sink, BaseSink):
            msg = (
                f"`sinks[{i}]` must be a sink (BaseSink), got {type(sink).__name__}; "
                "wrap a function in CallableSink(fn)"
            )
            raise TypeError(msg)
    return out


def judge_callbacks(trace_judge: str | BaseCallbackHandler | None) -> list[BaseCallbackHandler]:
    """Callbacks of the judge runs: none (but see :func:`_mlflow_silencer`), or a tracer."""
    if trace_judge is None:
        return _mlflow_silencer()
    if isinstance(trace_judge, BaseCallbackHandler):
        return [trace_judge]
    if isinstance(trace_judge, str) and trace_judge:
        from langchain_core.tracers import LangChainTracer

        return [LangChainTracer(project_name=trace_judge)]
    msg = "`trace_judge` must be a LangSmith project name or a callback handler (a tracer)"
    raise TypeError(msg)


def _mlflow_silencer() -> list[BaseCallbackHandler]:
    """A stand-in that keeps MLflow's autologging off the judge runs, when MLflow is loaded.

    Autologging adds its tracer to every callback manager that holds none: an instance of
    its tracer class that listens to nothing holds that place (else each judge call would
    be a trace of its own in the user's experiment, with the sample's texts in it). Seen
    when the handler is built: autologging turned on later still traces the judge runs.
    """
    if "mlflow.langchain" not in sys.modules:  # autologging imports it; its tracer is lazy
        return []
    try:
        module = importlib.import_module("mlflow.langchain.langchain_tracer")
    except Exception:  # another MLflow version: the judge runs may then be traced
        return []
    tracer = getattr(module, "MlflowLangchainTracer", None)
    if not isinstance(tracer, type) or not issubclass(tracer, BaseCallbackHandler):
        return []

    def nothing(*_args: Any, **_kwargs: Any) -> None:
        return None

    quiet: dict[str, Any] = {
        name: nothing for name in dir(BaseCallbackHandler) if name.startswith("on_")
    }
    quiet.update({name: True for name in dir(BaseCallbackHandler) if name.startswith("ignore_")})
    quiet["__doc__"] = "MLflow's tracer class, listening to nothing (see _mlflow_silencer)."
    try:
        return [type("QuietMlflowTracer", (tracer,), quiet)()]
    except Exception:  # another MLflow version: the judge runs may then be traced
        return []


def untraced() -> AbstractContextManager[Any]:
    """Disable tracing for everything on the worker: LangSmith's, and OpenTelemetry's.

    LangSmith/LangChain tracing is off whatever the environment says; OpenTelemetry
    instrumentations are suppressed (OpenInference's LangChain tracer honours that).
    """
    from langsmith.run_helpers import tracing_context

    stack = ExitStack()
    stack.enter_context(tracing_context(enabled=False))
    if "opentelemetry.context" in sys.modules:
        from opentelemetry import context

        quiet = context.set_value(context._SUPPRESS_INSTRUMENTATION_KEY, True)
        token = context.attach(quiet)
        stack.callback(context.detach, token)
    return stack


def langsmith_trace_id(parent_run_id: UUID) -> UUID | None:
    """The trace id of ``parent_run_id`` when it is the current LangSmith run (a context read).

    Lets feedback carry the real trace id when the handler is attached to a chain called
    inside a ``@traceable`` function or a traced parent runnable.
    """
    from langsmith.run_helpers import get_current_run_tree

    run = get_current_run_tree()
    if run is None or run.id != parent_run_id:
        return None
    return UUID(str(run.trace_id))
