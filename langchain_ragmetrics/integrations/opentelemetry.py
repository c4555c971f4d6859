"""Online results as OpenTelemetry events and metrics (extra ``[otel]``).

Each result becomes one ``gen_ai.evaluation.result`` event as the OpenTelemetry GenAI
semantic conventions define it, placed in the trace that was active when the retriever
started, and feeds a score histogram and a few counters. Works with any exporter the
application configured (OTLP to a collector, Prometheus, the console).

Example::

    from langchain_ragmetrics import RagMetricsCallbackHandler
    from langchain_ragmetrics.integrations.opentelemetry import OpenTelemetrySink

    sink = OpenTelemetrySink()
    handler = RagMetricsCallbackHandler(sinks=[sink])
    sink.observe(handler)  # also export the handler's dropped-retrieval count
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterable
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from typing_extensions import override

from langchain_ragmetrics._options import fraction, number_above_zero
from langchain_ragmetrics._retrieval import OnlineResult
from langchain_ragmetrics._threads import DaemonThreadPool
from langchain_ragmetrics.callbacks.sinks import BaseSink
from langchain_ragmetrics.integrations._otel_attributes import (
    EVENT_NAME,
    SCORE_BOUNDARIES,
    error_type,
    event_attributes,
    metric_attributes,
    score_label,
)

if TYPE_CHECKING:
    from opentelemetry._logs import Logger, LoggerProvider
    from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
    from opentelemetry.trace import Tracer, TracerProvider

    from langchain_ragmetrics.callbacks.handler import RagMetricsCallbackHandler

__all__ = ["EVENT_NAME", "SCORE_BOUNDARIES", "OpenTelemetrySink"]

_SCOPE = "langchain_ragmetrics"
_Handlers = weakref.WeakSet["RagMetricsCallbackHandler"]
_OBSERVED: weakref.WeakKeyDictionary[Any, _Handlers] = weakref.WeakKeyDictionary()
"""The handlers each meter provider's observable counters report, across sinks."""
_OBSERVED_LOCK = threading.Lock()


def _observed_handlers(provider: Any, meter: Meter) -> _Handlers:
    """The handlers ``provider``'s observable counters report: one set per provider.

    A meter keeps one instrument per name: a second sink's observable counters on the same
    provider would be the first's, with the second's callbacks never called. So the counters
    are registered once per provider, over a set that every sink on it adds its handlers to.
    """
    with _OBSERVED_LOCK:
        try:
            handlers = _OBSERVED.get(provider)
        except TypeError:  # a provider that cannot be weakly referenced: one set per sink
            handlers, provider = None, None
        if handlers is None:
            handlers = weakref.WeakSet()
            _register_observers(meter, handlers)
            if provider is not None:
                _OBSERVED[provider] = handlers
        return handlers


def _register_observers(meter: Meter, handlers: _Handlers) -> None:
    """The observable counters of the handlers' dropped retrievals and sink figures."""
    meter.create_observable_counter(
        "ragmetrics.retrievals.dropped",
        callbacks=[partial(_observe_dropped, handlers)],
        unit="{retrieval}",
        description="Sampled retrievals the handler dropped (queue full or closed).",
    )
    meter.create_observable_counter(
        "ragmetrics.sink.dropped",
        callbacks=[partial(_observe_sinks, handlers, "dropped")],
        unit="{result}",
        description="Results a sink never delivered (its outbox full, circuit open, closed).",
    )
    meter.create_observable_counter(
        "ragmetrics.sink.errors",
        callbacks=[partial(_observe_sinks, handlers, "errors")],
        unit="{result}",
        description="Results whose delivery to a sink raised.",
    )


def _observe_dropped(handlers: _Handlers, _options: CallbackOptions) -> Iterable[Observation]:
    from opentelemetry.metrics import Observation

    return [
        Observation(handler.stats.dropped, {"ragmetrics.handler": handler.name})
        for handler in list(handlers)
    ]


def _observe_sinks(
    handlers: _Handlers, field: Literal["dropped", "errors"], _options: CallbackOptions
) -> Iterable[Observation]:
    """One per-sink figure of every observed handler."""
    from opentelemetry.metrics import Observation

    return [
        Observation(
            getattr(figures, field),
            {"ragmetrics.handler": handler.name, "ragmetrics.sink": sink},
        )
        for handler in list(handlers)
        for sink, figures in handler.stats.sinks.items()
    ]


_MISSING_EXTRA = (
    "OpenTelemetrySink needs the OpenTelemetry API: pip install 'langchain-ragmetrics[otel]'"
)
EventsVia = Literal["auto", "logs", "span"]


def _import_api() -> None:
    try:
        import opentelemetry._logs
        import opentelemetry.metrics
        import opentelemetry.trace  # noqa: F401
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(_MISSING_EXTRA) from exc


def _logs_configured(provider: Any) -> bool:
    """Whether a real logger provider is installed (not the API's proxy or no-op default)."""
    from opentelemetry._logs import NoOpLoggerProvider

    return type(provider).__name__ != "ProxyLoggerProvider" and not isinstance(
        provider, NoOpLoggerProvider
    )


class OpenTelemetrySink(BaseSink):
    """Sends each online result to OpenTelemetry as an evaluation event plus metrics.

    **Events.** One ``gen_ai.evaluation.result`` event per result with
    ``gen_ai.evaluation.name`` (the metric key), ``gen_ai.evaluation.score.value``,
    ``gen_ai.evaluation.score.label`` (``pass``/``fail`` with ``pass_threshold``;
    ``skipped`` when the metric could not be assessed), ``gen_ai.evaluation.explanation``
    (the reason) and ``error.type`` when the judge failed, plus ``ragmetrics.*`` ids. The
    event is parented to the span that was active when the retriever started, so it shows
    up in the application's own trace. It is emitted through the OpenTelemetry logs API
    (a log record with ``event_name``, the current guidance for events); when no logger
    provider is configured it falls back to a span event on a short ``ragmetrics.evaluation``
    span, child of that same span.

    **Metrics.** ``ragmetrics.evaluation.score`` (histogram of scores, buckets every 0.1),
    counters ``ragmetrics.evaluation.failed`` and ``ragmetrics.evaluation.skipped``, with
    attributes ``gen_ai.evaluation.name``, ``ragmetrics.retriever`` and
    ``ragmetrics.judge.model``; ``ragmetrics.judge.calls`` and ``ragmetrics.judge.tokens``
    (``gen_ai.token.type`` = input/output); and, for handlers passed to :meth:`observe`,
    ``ragmetrics.retrievals.dropped`` plus, per sink (``ragmetrics.sink``),
    ``ragmetrics.sink.dropped`` and ``ragmetrics.sink.errors``: an outage of one sink shows
    up as a rising count there (see ``deploy/`` for a Grafana dashboard and alert rules).

    Args:
        logger_provider: Where events go; default the global one.
        meter_provider: Where metrics go; default the global one.
        tracer_provider: Used by the span-event fallback; default the global one.
        events: ``"auto"`` (logs when a logger provider is configured, else span events),
            ``"logs"`` or ``"span"``.
        pass_threshold: When set, scored results get the label ``pass`` (score at or above
            it) or ``fail``.
        flush_timeout: Seconds :meth:`flush` waits at most for the providers to export.
    """

    def __init__(
        self,
        *,
        logger_provider: LoggerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
        events: EventsVia = "auto",
        pass_threshold: float | None = None,
        flush_timeout: float = 10.0,
    ) -> None:
        _import_api()
        if events not in ("auto", "logs", "span"):
            msg = f"`events` must be 'auto', 'logs' or 'span', got {events!r}"
            raise ValueError(msg)
        if pass_threshold is not None:
            pass_threshold = fraction("pass_threshold", pass_threshold)
        number_above_zero("flush_timeout", flush_timeout)
        from opentelemetry import metrics, trace

        self.events = events
        self.pass_threshold = pass_threshold
        self.flush_timeout = flush_timeout
        self._logger_provider = logger_provider
        self._tracer_provider = tracer_provider
        self._logger: tuple[LoggerProvider, Logger] | None = None
        self._tracer: Tracer | None = None
        self._lock = threading.Lock()
        self._flusher = DaemonThreadPool(name="ragmetrics-otel-flush")
        self._flushing: Future[None] | None = None

        provider = meter_provider or metrics.get_meter_provider()
        meter = provider.get_meter(_SCOPE)
        self._score = meter.create_histogram(
            "ragmetrics.evaluation.score",
            unit="1",
            description="Scores of the retrieval-quality metrics (0 to 1).",
            explicit_bucket_boundaries_advisory=SCORE_BOUNDARIES,
        )
        self._failed = meter.create_counter(
            "ragmetrics.evaluation.failed",
            unit="{result}",
            description="Metric results that failed (judge error, timeout, bad output).",
        )
        self._skipped = meter.create_counter(
            "ragmetrics.evaluation.skipped",
            unit="{result}",
            description="Metric results that could not be assessed (e.g. no reference).",
        )
        self._judge_calls = meter.create_counter(
            "ragmetrics.judge.calls", unit="{call}", description="Judge model calls."
        )
        self._judge_tokens = meter.create_counter(
            "ragmetrics.judge.tokens", unit="{token}", description="Judge model tokens."
        )
        self._handlers = _observed_handlers(provider, meter)
        self._trace_api = trace

    # ------------------------------------------------------------------ public

    def observe(self, handler: RagMetricsCallbackHandler) -> RagMetricsCallbackHandler:
        """Also export ``handler``'s dropped counts and sink figures (held weakly); returns it."""
        self._handlers.add(handler)
        return handler

    @override
    def emit(self, item: OnlineResult) -> None:
        result = item.result
        attributes = metric_attributes(item)
        if result.failed:
            self._failed.add(1, attributes)
        elif result.skipped or result.score is None:
            self._skipped.add(1, attributes)
        else:
            self._score.record(result.score, attributes)
        usage = result.usage
        judge = {k: v for k, v in attributes.items() if k != "ragmetrics.retriever"}
        if usage.judge_calls:
            self._judge_calls.add(usage.judge_calls, judge)
        if usage.input_tokens:
            self._judge_tokens.add(usage.input_tokens, {**judge, "gen_ai.token.type": "input"})
        if usage.output_tokens:
            self._judge_tokens.add(usage.output_tokens, {**judge, "gen_ai.token.type": "output"})
        self._emit_event(item)

    @override
    def after_fork(self) -> None:
        """A lock and flush thread of its own (the parent's are not usable here).

        The OpenTelemetry SDK restarts its own exporters' threads after a fork.
        """
        self._lock = threading.Lock()
        self._flusher = DaemonThreadPool(name=self._flusher.name)
        self._flushing = None

    @override
    def flush(self, timeout: float | None = None) -> None:
        """Ask the logger and tracer providers to export; waits ``timeout``/``flush_timeout``.

        The export runs on a helper thread, so a collector that never answers cannot hold
        the caller (the handler's sink thread) beyond that bound.
        """
        wait = self.flush_timeout if timeout is None else min(timeout, self.flush_timeout)
        with self._lock:
            running = self._flushing
            if running is None or running.done():
                self._flusher.start()
                running = self._flushing = self._flusher.submit(self._force_flush, wait)
        with contextlib.suppress(Exception):  # a timeout or an exporter error: best effort
            running.result(wait)

    @override
    def close(self, timeout: float | None = None) -> None:
        """Flush; the providers stay open (they belong to the application)."""
        self.flush(timeout)
        self._flusher.stop(0)

    # ------------------------------------------------------------------ internals

    def _logs_provider(self) -> LoggerProvider | None:
        """The logger provider to use now, or None for the span-event fallback."""
        if self.events == "span":
            return None
        if self._logger_provider is not None:
            return self._logger_provider
        from opentelemetry._logs import get_logger_provider

        provider = get_logger_provider()
        return provider if self.events == "logs" or _logs_configured(provider) else None

    def _emit_event(self, item: OnlineResult) -> None:
        from opentelemetry.trace import NonRecordingSpan, set_span_in_context

        attributes = event_attributes(item, score_label(item.result, self.pass_threshold))
        parent = item.otel_context
        context = set_span_in_context(NonRecordingSpan(parent)) if parent is not None else None
        timestamp = int(item.timestamp.timestamp() * 1e9)
        provider = self._logs_provider()
        if provider is not None:
            from opentelemetry._logs import LogRecord, SeverityNumber

            if self._logger is None or self._logger[0] is not provider:
                self._logger = (provider, provider.get_logger(_SCOPE))
            failed = "error.type" in attributes
            self._logger[1].emit(
                LogRecord(
                    timestamp=timestamp,
                    context=context,
                    severity_number=SeverityNumber.WARN if failed else SeverityNumber.INFO,
                    event_name=EVENT_NAME,
                    attributes=attributes,
                )
            )
            return
        if self._tracer is None:
            self._tracer = self._tracer_provider_now().get_tracer(_SCOPE)
        span = self._tracer.start_span(
            "ragmetrics.evaluation",
            context=context,
            start_time=timestamp,
            attributes={"gen_ai.evaluation.name": item.result.metric},
        )
        span.add_event(EVENT_NAME, attributes, timestamp=timestamp)
        if "error.type" in attributes:
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR, error_type(item.result.error)))
        span.end(end_time=timestamp)

    def _tracer_provider_now(self) -> TracerProvider:
        return self._tracer_provider or self._trace_api.get_tracer_provider()

    def _force_flush(self, timeout: float) -> None:
        # Not the meter provider: a forced collection makes a pull reader (Prometheus)
        # serve the same series twice; push readers export on their period and at shutdown.
        millis = max(1, int(timeout * 1000))
        for provider in (self._logs_provider(), self._tracer_provider_now()):
            flush = getattr(provider, "force_flush", None)
            if flush is not None:
                flush(millis)
