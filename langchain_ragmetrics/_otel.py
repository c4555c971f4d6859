"""The OpenTelemetry span active when a retriever starts, read only when OpenTelemetry is in use.

The handler keeps it with each retrieval so the OpenTelemetry sink can place the evaluation
events in the user's own trace. On the caller's thread it only takes OpenTelemetry's current
context (an immutable mapping of OpenTelemetry's own values: the span, the baggage), the span
is read from it later, off the caller's thread (:func:`span_context_in`). Nothing is imported
here: when the application never imported ``opentelemetry.trace`` nothing is read.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = [
    "OTEL_TRACE_MODULE",
    "current_otel_context",
    "current_span_context",
    "plain_span_context",
    "span_context_from_plain",
    "span_context_in",
]

OTEL_TRACE_MODULE = "opentelemetry.trace"
"""Without this module imported there is no current span (callers may check it inline)."""
_OTEL_CONTEXT_MODULE = "opentelemetry.context"


def current_span_context() -> Any:
    """The valid ``SpanContext`` of the current span, or None (no OpenTelemetry, no span)."""
    trace = sys.modules.get(OTEL_TRACE_MODULE)
    if trace is None:
        return None
    try:
        context = trace.get_current_span().get_span_context()
    except Exception:
        return None
    return context if context.is_valid else None


def current_otel_context() -> Any:
    """OpenTelemetry's current ``Context`` (None without OpenTelemetry): cheap to take.

    Call it only when :data:`OTEL_TRACE_MODULE` is imported (which imports the context API).
    Only OpenTelemetry's own values are in it, so keeping it holds nothing of the app's.
    """
    try:
        return sys.modules[_OTEL_CONTEXT_MODULE].get_current()
    except Exception:
        return None


def span_context_in(context: Any) -> tuple[int, int, int] | None:
    """The plain span context (:func:`plain_span_context`) of the span valid in ``context``.

    ``context`` is what :func:`current_otel_context` returned when the retriever started
    (None: no OpenTelemetry then): reading the span from it later gives what reading it
    there and then would have, without the caller paying for the read.
    """
    trace = sys.modules.get(OTEL_TRACE_MODULE)
    if context is None or trace is None:
        return None
    try:
        span = trace.get_current_span(context).get_span_context()
    except Exception:
        return None
    return plain_span_context(span) if span.is_valid else None


def plain_span_context(context: Any) -> tuple[int, int, int] | None:
    """``(trace_id, span_id, trace_flags)`` of a span context: picklable, for isolated mode."""
    if context is None:
        return None
    return int(context.trace_id), int(context.span_id), int(context.trace_flags)


def span_context_from_plain(plain: tuple[int, int, int] | None) -> Any:
    """The span context back from :func:`plain_span_context` (None stays None)."""
    if plain is None:
        return None
    from opentelemetry.trace import SpanContext, TraceFlags

    trace_id, span_id, flags = plain
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))
