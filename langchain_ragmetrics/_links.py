"""The spans other tracers opened for a retriever run: MLflow autologging and OpenInference.

Read on the caller's thread when the retriever starts and again when it ends. Which of our
handler and the tracer LangChain calls first varies (the tracers add themselves to callback
managers as they are built, and a child manager may list them before or after ours), but
the tracer's retriever span is open at one of the two moments: after its start when it goes
first, before its end when we go first. MLflow's span is the active span of the current
context; OpenInference keeps its spans by run id. :func:`merge_links` keeps, per tracer, the
reading that found the retriever's own span. Where one retriever calls another (an ensemble,
a compression or multi-query retriever), the other reading can be a retriever span too, the
outer one's: the inner retriever's own span is the one whose parent is the other reading.
Only tracers whose modules are already imported are asked: when neither is in use a read is
two dict lookups.

The links are plain strings, so they cross to an isolated child as they are.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from uuid import UUID

__all__ = [
    "MLFLOW",
    "OPENINFERENCE",
    "TRACER_MODULES",
    "Reading",
    "Readings",
    "TraceLink",
    "TraceLinks",
    "merge_links",
    "trace_links",
]

MLFLOW = "mlflow"
"""Key of the MLflow link: ``(trace id "tr-...", retriever span id or None)``."""
OPENINFERENCE = "openinference"
"""Key of the OpenInference link: ``(trace id, span id)`` as OpenTelemetry hex strings."""

TraceLink = tuple[str, "str | None"]
"""``(trace id, span id)``; the span id is None when only the trace is known."""
TraceLinks = Mapping[str, TraceLink]
"""Links by tracer key."""
Reading = tuple[str, "str | None", "str | None"]
"""One reading of a tracer's span: ``(trace id, span id or None, its parent's span id)``."""
Readings = Mapping[str, Reading]
"""Readings by tracer key (what :func:`trace_links` returns, :func:`merge_links` takes)."""

_MLFLOW_MODULE = "mlflow.langchain.langchain_tracer"
_OPENINFERENCE_MODULE = "openinference.instrumentation.langchain"
TRACER_MODULES = frozenset((_MLFLOW_MODULE, _OPENINFERENCE_MODULE))
"""The tracers' modules: when none is imported there is nothing to read (callers check
this inline, to spare a call on the caller's thread)."""

_EMPTY: Readings = {}
_NO_LINKS: TraceLinks = {}


def trace_links(run_id: UUID) -> Readings:
    """The readings for the retriever run ``run_id``, starting or ending now (empty: none)."""
    links: dict[str, Reading] = {}
    if _MLFLOW_MODULE in sys.modules:
        reading = _mlflow_link()
        if reading is not None:
            links[MLFLOW] = reading
    if _OPENINFERENCE_MODULE in sys.modules:
        reading = _openinference_link(run_id)
        if reading is not None:
            links[OPENINFERENCE] = reading
    return links or _EMPTY


def merge_links(at_start: Readings, at_end: Readings) -> TraceLinks:
    """Per tracer, the reading of the retriever's own span, as a link.

    The reading with a span id; of two with different span ids, the child of the other (the
    other is an enclosing retriever's span); else the start's.
    """
    if not at_start and not at_end:
        return _NO_LINKS
    merged: dict[str, TraceLink] = {}
    for key in at_start.keys() | at_end.keys():
        first, last = at_start.get(key), at_end.get(key)
        chosen = _own(first, last) if first is not None and last is not None else first or last
        if chosen is not None:
            merged[key] = (chosen[0], chosen[1])
    return merged


def _own(first: Reading, last: Reading) -> Reading:
    """Which of two readings of one tracer is the retriever's own span."""
    if first[1] is None:
        return last if last[1] is not None else first
    if last[1] is None or last[1] == first[1]:
        return first
    if last[2] == first[1]:  # the end's span is a child of the start's: we went first
        return last
    return first


def _mlflow_link() -> Reading | None:
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
        if attributes.get(keys.SPAN_TYPE) != '"RETRIEVER"':
            return str(json.loads(trace_id)), None, None
        parent = getattr(span, "parent", None)
        parent_id = None if parent is None else f"{parent.span_id:016x}"
        return str(json.loads(trace_id)), f"{span.get_span_context().span_id:016x}", parent_id
    except Exception:
        return None


def _openinference_link(run_id: UUID) -> Reading | None:
    """The span OpenInference's LangChain instrumentation opened for ``run_id``.

    None for a span its sampler dropped: its context is valid, but it is never exported, so
    no annotation could land on it (the sinks skip such a retrieval).
    """
    module = sys.modules["openinference.instrumentation.langchain"]
    try:
        instrumentor = module.LangChainInstrumentor()
        if not instrumentor.is_instrumented_by_opentelemetry:
            return None
        span = instrumentor.get_span(run_id)
        if span is None:
            return None
        context = span.get_span_context()
        if not context.is_valid or not context.trace_flags.sampled:
            return None
        return f"{context.trace_id:032x}", f"{context.span_id:016x}", None
    except Exception:
        return None
