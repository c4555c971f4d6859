"""The OpenTelemetry span active when a retriever starts, read only when OpenTelemetry is in use.

The handler stores it with each retrieval so the OpenTelemetry sink can place the evaluation
events in the user's own trace. Nothing is imported here: when the application never imported
``opentelemetry.trace`` the read is a dict lookup and returns None.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["current_span_context"]


def current_span_context() -> Any:
    """The valid ``SpanContext`` of the current span, or None (no OpenTelemetry, no span)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    try:
        context = trace.get_current_span().get_span_context()
    except Exception:
        return None
    return context if context.is_valid else None
