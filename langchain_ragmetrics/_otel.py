"""The OpenTelemetry span active when a retriever starts, read only when OpenTelemetry is in use.

The handler stores it with each retrieval so the OpenTelemetry sink can place the evaluation
events in the user's own trace. Nothing is imported here: when the application never imported
``opentelemetry.trace`` the read is a dict lookup and returns None.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = [
    "OTEL_TRACE_MODULE",
    "current_span_context",
    "plain_span_context",
    "span_context_from_plain",
]

OTEL_TRACE_MODULE = "opentelemetry.trace"
"""Without this module imported there is no current span (callers may check it inline)."""


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
