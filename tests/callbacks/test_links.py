"""Trace links: read at retriever start and end, merged, carried to sinks and to the child."""

from __future__ import annotations

import sys
import types
import uuid
from typing import Any

import pytest

from langchain_ragmetrics._links import merge_links, trace_links
from langchain_ragmetrics.callbacks._tracker import TraceTracker


def test_nothing_is_read_when_no_tracer_is_loaded() -> None:
    assert "mlflow.langchain.langchain_tracer" not in sys.modules
    assert "openinference.instrumentation.langchain" not in sys.modules
    assert trace_links(uuid.uuid4()) == {}


def test_merge_keeps_the_reading_that_found_the_span() -> None:
    trace_only = {"mlflow": ("tr-1", None, None)}
    with_span = {"mlflow": ("tr-1", "s1", "p")}
    assert merge_links(trace_only, with_span) == {"mlflow": ("tr-1", "s1")}
    assert merge_links(with_span, trace_only) == {"mlflow": ("tr-1", "s1")}
    assert merge_links({}, trace_only) == {"mlflow": ("tr-1", None)}
    assert merge_links({}, {}) == {}
    both = merge_links({"openinference": ("t", "a", None)}, {"mlflow": ("tr-1", None, None)})
    assert both == {"openinference": ("t", "a"), "mlflow": ("tr-1", None)}


@pytest.mark.parametrize("we_go_first", [True, False])
def test_a_retriever_inside_a_retriever_links_to_its_own_span(we_go_first: bool) -> None:
    """Both readings are retriever spans: the outer retriever's, and the inner's own, whose
    parent is the outer one. Before, the start's reading won: with our handler first that was
    the outer retriever's span, so the inner's score landed on the outer span."""
    outer = ("tr-1", "outer", "chain")
    inner = ("tr-1", "inner", "outer")
    # our handler first: the outer span is active at our start, the inner's own at our end;
    # the tracer first: the inner's own at our start, the outer again at our end
    start, end = (outer, inner) if we_go_first else (inner, outer)
    assert merge_links({"mlflow": start}, {"mlflow": end}) == {"mlflow": ("tr-1", "inner")}


class _Span:
    def __init__(self, span_id: int) -> None:
        self.span_id = span_id

    def get_span_context(self) -> Any:
        flags = types.SimpleNamespace(sampled=True)
        return types.SimpleNamespace(
            trace_id=7, span_id=self.span_id, is_valid=True, trace_flags=flags
        )


def test_a_tracer_whose_span_exists_only_at_start_still_links(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OpenInference's handler may run before ours (span open at our start, gone at our end)."""
    spans: dict[uuid.UUID, _Span] = {}
    instrumentor = types.SimpleNamespace(is_instrumented_by_opentelemetry=True, get_span=spans.get)
    module = types.ModuleType("openinference.instrumentation.langchain")
    module.LangChainInstrumentor = lambda: instrumentor  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "openinference.instrumentation.langchain", module)
    tracker = TraceTracker(max_open_traces=10)
    root, retriever = uuid.uuid4(), uuid.uuid4()
    tracker.start(root, None, inputs="q")
    spans[retriever] = _Span(0xAB)
    tracker.start(retriever, root, retrieval=("q", "r", []))
    del spans[retriever]  # the tracer ended its span before our end ran
    tracker.end(retriever, documents=["doc"])
    finished = tracker.end(root, outputs="a")
    assert finished is not None
    (capture,) = finished.captures
    assert capture.links == {"openinference": (f"{7:032x}", f"{0xAB:016x}")}


def test_a_span_the_sampler_dropped_gives_no_link(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dropped span's context is valid but it is never exported: before, it was linked and
    the Phoenix sink retried "not found" for ``not_found_wait``, then counted an error."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

    run_id = uuid.uuid4()
    spans: dict[uuid.UUID, Any] = {}
    instrumentor = types.SimpleNamespace(is_instrumented_by_opentelemetry=True, get_span=spans.get)
    module = types.ModuleType("openinference.instrumentation.langchain")
    module.LangChainInstrumentor = lambda: instrumentor  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "openinference.instrumentation.langchain", module)
    links = {}
    for name, sampler in (("dropped", ALWAYS_OFF), ("kept", ALWAYS_ON)):
        span = TracerProvider(sampler=sampler).get_tracer("t").start_span("retriever")
        assert span.get_span_context().is_valid
        spans[run_id] = span
        links[name] = trace_links(run_id).get("openinference")
        span.end()
    assert links["dropped"] is None
    assert links["kept"] is not None
