"""The spans other tracers opened for a retriever run: MLflow autologging and OpenInference.

Read on the caller's thread when the retriever starts and again when it ends. Which of our
handler and the tracer LangChain calls first varies (the tracers add themselves to callback
managers as they are built, and a child manager may list them before or after ours), but
the tracer's retriever span is open at one of the two moments: after its start when it goes
first, before its end when we go first. MLflow's span is the active span of the current
context; OpenInference keeps its spans by run id. :func:`merge_links` keeps, per tracer, the
reading that found the retriever's own span. Only tracers whose modules are already
imported are asked: when neither is in use a read is two dict lookups.

The links are plain strings, so they cross to an isolated child as they are.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from uuid import UUID

__all__ = ["MLFLOW", "OPENINFERENCE", "TraceLink", "TraceLinks", "merge_links", "trace_links"]

MLFLOW = "mlflow"
"""Key of the MLflow link: ``(trace id "tr-...", retriever span id or None)``."""
OPENINFERENCE = "openinference"
"""Key of the OpenInference link: ``(trace id, span id)`` as OpenTelemetry hex strings."""

TraceLink = tuple[str, "str | None"]
"""``(trace id, span id)``; the span id is None when only the trace is known."""
TraceLinks = Mapping[str, TraceLink]
"""Links by tracer key."""

_EMPTY: TraceLinks = {}


def trace_links(run_id: UUID) -> TraceLinks:
    """The links of the retriever run ``run_id``, starting or ending now (empty when none)."""
    links: dict[str, TraceLink] = {}
    if "mlflow.langchain.langchain_tracer" in sys.modules:
        link = _mlflow_link()
        if link is not None:
            links[MLFLOW] = link
    if "openinference.instrumentation.langchain" in sys.modules:
        link = _openinference_link(run_id)
        if link is not None:
            links[OPENINFERENCE] = link
    return links or _EMPTY


def merge_links(at_start: TraceLinks, at_end: TraceLinks) -> TraceLinks:
    """Per tracer, the reading that has a span id (else whichever has the trace)."""
    if not at_start:
        return at_end
    if not at_end:
        return at_start
    merged = dict(at_start)
    for key, link in at_end.items():
        if key not in merged or (link[1] is not None and merged[key][1] is None):
            merged[key] = link
    return merged


def _mlflow_link() -> TraceLink | None:
    """MLflow's active span: the retriever's own, else an enclosing span of the same request.

    The enclosing span (whose trace is still the request's) is what we see at the moment
    MLflow's retriever span is not open: before its start, or after its end. Read from the
    OpenTelemetry span under MLflow's (its attributes carry the trace id and span type),
    which is several times cheaper than building MLflow's span wrapper.
    """
    try:
        provider = sys.modules.get("mlflow.tracing.provider")
        constant = sys.modules.get("mlflow.tracing.constant")
        if provider is None or constant is None:
            return None
        span = provider.get_current_otel_span()
        attributes = getattr(span, "attributes", None)
        if not attributes:
            return None
        keys = constant.SpanAttributeKey
        trace_id = attributes.get(keys.REQUEST_ID)
        if not trace_id:
            return None
        retriever = attributes.get(keys.SPAN_TYPE) == '"RETRIEVER"'
        span_id = f"{span.get_span_context().span_id:016x}" if retriever else None
        return str(json.loads(trace_id)), span_id
    except Exception:
        return None


def _openinference_link(run_id: UUID) -> TraceLink | None:
    """The span OpenInference's LangChain instrumentation opened for ``run_id``."""
    module = sys.modules["openinference.instrumentation.langchain"]
    try:
        instrumentor = module.LangChainInstrumentor()
        if not instrumentor.is_instrumented_by_opentelemetry:
            return None
        span = instrumentor.get_span(run_id)
        if span is None:
            return None
        context = span.get_span_context()
        if not context.is_valid:
            return None
        return f"{context.trace_id:032x}", f"{context.span_id:016x}"
    except Exception:
        return None
