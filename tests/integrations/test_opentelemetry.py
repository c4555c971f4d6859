"""OpenTelemetrySink with the SDK's in-memory exporters, a real chain and the real handler."""

from __future__ import annotations

import asyncio
import math
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from langchain_openai import ChatOpenAI
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from langchain_ragmetrics import (
    ContextPrecision,
    ContextRecall,
    InMemorySink,
    OnlineResult,
    OpenTelemetrySink,
    RagMetricsCallbackHandler,
)
from langchain_ragmetrics._otel import current_span_context
from langchain_ragmetrics.integrations._otel_attributes import error_type
from langchain_ragmetrics.integrations.opentelemetry import EVENT_NAME
from tests._support.openai_server import JudgeServer, reply_error
from tests._support.rag import (
    FAST,
    corpus,
    make_retriever,
    online_handler,
    question,
    rag_app,
    rag_router,
)
from tests._support.sink_checks import linked_item

JudgeFactory = Callable[..., ChatOpenAI]


@dataclass
class Otel:
    """In-memory OpenTelemetry pipeline: spans, logs and metrics."""

    tracer_provider: TracerProvider
    spans: InMemorySpanExporter
    logger_provider: LoggerProvider
    logs: InMemoryLogRecordExporter
    meter_provider: MeterProvider
    metrics: InMemoryMetricReader

    def sink(self, **options: Any) -> OpenTelemetrySink:
        return OpenTelemetrySink(
            logger_provider=self.logger_provider,
            meter_provider=self.meter_provider,
            tracer_provider=self.tracer_provider,
            **options,
        )

    def points(self, name: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]

    def events(self) -> list[Any]:
        return [r.log_record for r in self.logs.get_finished_logs()]


@pytest.fixture
def otel() -> Iterator[Otel]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Otel(tracer_provider, spans, logger_provider, logs, meter_provider, reader)
    meter_provider.shutdown()
    logger_provider.shutdown()
    tracer_provider.shutdown()


def memory(handler: RagMetricsCallbackHandler) -> list[OnlineResult]:
    sink = handler.sinks[0]
    assert isinstance(sink, InMemorySink)
    return sink.results


def run_requests(app: Any, handler: Any, otel: Otel, n: int) -> dict[str, Any]:
    """``n`` concurrent requests, each under its own application span; question -> span."""
    tracer = otel.tracer_provider.get_tracer("app")

    def one(i: int) -> tuple[str, Any]:
        with tracer.start_as_current_span(f"request-{i}") as span:
            app.chain.invoke(question(i), config={"callbacks": [handler]})
            return question(i), span.get_span_context()

    with ThreadPoolExecutor(max_workers=6) as pool:
        found = dict(pool.map(one, range(n)))
    assert handler.flush(timeout=60)
    return found


def test_events_land_in_the_span_of_their_own_request(
    judge_server: JudgeServer, make_judge: JudgeFactory, otel: Otel
) -> None:
    app = rag_app(judge_server, make_judge, max_retries=2)
    sink = otel.sink()
    handler = online_handler(app.llm, sinks=[InMemorySink(), sink])
    with handler:
        spans = run_requests(app, handler, otel, 12)
    delivered = memory(handler)
    assert len(delivered) == 12
    by_run = {str(item.run_id): item for item in delivered}
    events = otel.events()
    assert len(events) == 12
    for event in events:
        assert event.event_name == EVENT_NAME
        item = by_run[event.attributes["ragmetrics.run_id"]]
        expected = spans[item.question]
        assert (event.trace_id, event.span_id) == (expected.trace_id, expected.span_id)
        assert event.attributes["gen_ai.evaluation.name"] == "context_relevance"
        assert event.attributes["gen_ai.evaluation.score.value"] == item.score
        assert event.attributes["gen_ai.evaluation.explanation"] == item.result.reason
        assert "error.type" not in event.attributes
        assert "gen_ai.evaluation.score.label" not in event.attributes
    # only the application's spans: the sink adds none when logs are configured
    assert {s.name for s in otel.spans.get_finished_spans()} == {f"request-{i}" for i in range(12)}


async def test_async_concurrent_traces_keep_their_parents(
    judge_server: JudgeServer, make_judge: JudgeFactory, otel: Otel
) -> None:
    app = rag_app(judge_server, make_judge, max_retries=2)
    handler = online_handler(app.llm, sinks=[InMemorySink(), otel.sink()])
    tracer = otel.tracer_provider.get_tracer("app")

    async def one(i: int) -> tuple[str, Any]:
        with tracer.start_as_current_span(f"request-{i}") as span:
            await app.chain.ainvoke(question(i), config={"callbacks": [handler]})
            return question(i), span.get_span_context()

    spans = dict(await asyncio.gather(*(one(i) for i in range(10))))
    assert await handler.aflush(timeout=60)
    await handler.aclose()
    by_run = {str(item.run_id): item for item in memory(handler)}
    events = otel.events()
    assert len(events) == len(by_run) == 10
    for event in events:
        expected = spans[by_run[event.attributes["ragmetrics.run_id"]].question]
        assert (event.trace_id, event.span_id) == (expected.trace_id, expected.span_id)


def test_histogram_and_counters_equal_the_results_delivered(
    judge_server: JudgeServer, make_judge: JudgeFactory, otel: Otel
) -> None:
    app = rag_app(judge_server, make_judge, max_retries=2)
    metrics = [
        ContextPrecision(llm=app.llm, retry=FAST),
        ContextRecall(llm=app.llm, retry=FAST),  # no reference online: skipped
    ]
    handler = online_handler(app.llm, metrics=metrics, sinks=[InMemorySink(), otel.sink()])
    with handler:
        run_requests(app, handler, otel, 9)
    delivered = memory(handler)
    scored = [i for i in delivered if i.score is not None and not math.isnan(i.score)]
    skipped = [i for i in delivered if i.result.skipped]
    assert len(scored) == len(skipped) == 9

    (histogram,) = otel.points("ragmetrics.evaluation.score")
    assert histogram.attributes == {
        "gen_ai.evaluation.name": "context_precision",
        "ragmetrics.retriever": "VectorStoreRetriever",
        "ragmetrics.judge.model": "judge-model",
    }
    assert histogram.count == len(scored)
    assert histogram.sum == pytest.approx(sum(i.score or 0.0 for i in scored))
    assert list(histogram.explicit_bounds) == pytest.approx([i / 10 for i in range(11)])
    assert sum(histogram.bucket_counts) == len(scored)
    (skip_point,) = otel.points("ragmetrics.evaluation.skipped")
    assert skip_point.value == 9
    assert skip_point.attributes["gen_ai.evaluation.name"] == "context_recall"
    assert otel.points("ragmetrics.evaluation.failed") == []
    calls = sum(p.value for p in otel.points("ragmetrics.judge.calls"))
    assert calls == sum(i.result.usage.judge_calls for i in delivered) > 0
    tokens = {
        p.attributes["gen_ai.token.type"]: p.value for p in otel.points("ragmetrics.judge.tokens")
    }
    assert tokens == {
        "input": sum(i.result.usage.input_tokens for i in delivered),
        "output": sum(i.result.usage.output_tokens for i in delivered),
    }
    labels = {e.attributes.get("gen_ai.evaluation.score.label") for e in otel.events()}
    assert labels == {None, "skipped"}


def test_failed_results_carry_error_type_and_count(
    judge_server: JudgeServer, make_judge: JudgeFactory, otel: Otel
) -> None:
    app = rag_app(judge_server, make_judge)
    judge_server.script = rag_router(RelevantSentences=reply_error(500))
    handler = online_handler(app.llm, sinks=[InMemorySink(), otel.sink()])
    with handler:
        run_requests(app, handler, otel, 3)
    delivered = memory(handler)
    assert all(i.result.failed for i in delivered)
    events = otel.events()
    assert len(events) == 3
    for event in events:
        assert event.attributes["error.type"] == "OpenAIAPIError"
        assert "gen_ai.evaluation.score.value" not in event.attributes
        assert event.severity_number.name == "WARN"
    (failed,) = otel.points("ragmetrics.evaluation.failed")
    assert failed.value == 3
    assert otel.points("ragmetrics.evaluation.score") == []


@pytest.mark.parametrize("events", ["logs", "span"])
def test_a_nan_score_without_an_error_is_skipped_not_failed(otel: Otel, events: str) -> None:
    """A NaN score with no error is "skipped" (MetricResult, the handler's stats and the
    sink's counter say so): before, its event carried ``error.type`` and its span ERROR."""
    from opentelemetry.trace import StatusCode

    item = linked_item("none", "t", "s")
    item = item.model_copy(update={"result": item.result.model_copy(update={"score": math.nan})})
    assert item.result.skipped
    otel.sink(events=events, pass_threshold=0.5).emit(item)
    if events == "logs":
        (event,) = otel.events()
        attributes = event.attributes
        assert event.severity_number.name == "INFO"
    else:
        (span,) = otel.spans.get_finished_spans()
        (event,) = span.events
        attributes = event.attributes
        assert span.status.status_code is StatusCode.UNSET
    assert "error.type" not in attributes
    assert "gen_ai.evaluation.score.value" not in attributes
    assert attributes["gen_ai.evaluation.score.label"] == "skipped"
    (skipped,) = otel.points("ragmetrics.evaluation.skipped")
    assert skipped.value == 1
    assert otel.points("ragmetrics.evaluation.failed") == []


def test_pass_threshold_labels(
    judge_server: JudgeServer, make_judge: JudgeFactory, otel: Otel
) -> None:
    app = rag_app(judge_server, make_judge, max_retries=2)
    handler = online_handler(app.llm, sinks=[InMemorySink(), otel.sink(pass_threshold=0.5)])
    with handler:
        run_requests(app, handler, otel, 4)
    for event in otel.events():
        score = event.attributes["gen_ai.evaluation.score.value"]
        assert event.attributes["gen_ai.evaluation.score.label"] == (
            "pass" if score >= 0.5 else "fail"
        )


def test_span_event_fallback_without_a_logger_provider(
    judge_server: JudgeServer, make_judge: JudgeFactory, otel: Otel
) -> None:
    app = rag_app(judge_server, make_judge, max_retries=2)
    sink = OpenTelemetrySink(
        meter_provider=otel.meter_provider, tracer_provider=otel.tracer_provider
    )
    handler = online_handler(app.llm, sinks=[InMemorySink(), sink])
    with handler:
        spans = run_requests(app, handler, otel, 5)
    assert otel.events() == []
    by_run = {str(i.run_id): i for i in memory(handler)}
    evaluations = [s for s in otel.spans.get_finished_spans() if s.name == "ragmetrics.evaluation"]
    assert len(evaluations) == 5
    for span in evaluations:
        (event,) = span.events
        assert event.name == EVENT_NAME
        parent = spans[by_run[event.attributes["ragmetrics.run_id"]].question]
        assert span.parent is not None
        assert (span.context.trace_id, span.parent.span_id) == (parent.trace_id, parent.span_id)


def test_without_a_span_events_have_no_parent(
    judge_server: JudgeServer, make_judge: JudgeFactory, otel: Otel
) -> None:
    app = rag_app(judge_server, make_judge, max_retries=2)
    handler = online_handler(app.llm, sinks=[InMemorySink(), otel.sink()])
    with handler:
        app.chain.invoke(question(1), config={"callbacks": [handler]})
        assert handler.flush(timeout=30)
    (event,) = otel.events()
    assert event.trace_id == 0
    assert memory(handler)[0].otel_context is None


def test_dropped_retrievals_are_observed(otel: Otel, make_judge: JudgeFactory) -> None:
    sink = otel.sink()
    handler = RagMetricsCallbackHandler(
        metrics=[ContextPrecision(llm=make_judge())], sinks=[sink], name="dropper"
    )
    assert sink.observe(handler) is handler
    handler.close()  # a closed handler drops every retrieval
    retriever = make_retriever(corpus(3))
    for i in range(3):
        retriever.invoke(question(i), config={"callbacks": [handler]})
    assert handler.stats.dropped == 3
    (point,) = otel.points("ragmetrics.retrievals.dropped")
    assert point.value == 3
    assert point.attributes == {"ragmetrics.handler": "dropper"}


def test_two_sinks_on_one_meter_provider_both_report_their_handlers(
    otel: Otel, make_judge: JudgeFactory
) -> None:
    """Two APIs of one process, each with its sink and handler on the app's provider: before,
    the second sink's observable counters were the first's (a meter keeps one instrument per
    name), and the second handler's dropped counts were never exported."""
    retriever = make_retriever(corpus(3))
    handlers = []  # the apps hold their handlers (observed weakly)
    for name, drops in (("api-a", 1), ("api-b", 2)):
        sink = otel.sink()
        handler = RagMetricsCallbackHandler(
            metrics=[ContextPrecision(llm=make_judge())], sinks=[sink], name=name
        )
        handlers.append(sink.observe(handler))
        handler.close()
        for i in range(drops):
            retriever.invoke(question(i), config={"callbacks": [handler]})
    by_handler = {
        p.attributes["ragmetrics.handler"]: p.value
        for p in otel.points("ragmetrics.retrievals.dropped")
    }
    assert by_handler == {"api-a": 1, "api-b": 2}


def test_bad_options_name_the_field() -> None:
    with pytest.raises(ValueError, match="`events`"):
        OpenTelemetrySink(events="stdout")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`pass_threshold`"):
        OpenTelemetrySink(pass_threshold=2)
    for odd in ("0.5", True, math.nan):  # a raw TypeError, or taken as 1.0, or never a pass
        with pytest.raises(ValueError, match="`pass_threshold` must be a number between 0 and 1"):
            OpenTelemetrySink(pass_threshold=odd)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`flush_timeout`"):
        OpenTelemetrySink(flush_timeout=0)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ("InternalServerError: Error code: 500", "InternalServerError"),
        ("timed out after 5s", "timeout"),
        ("the judge said something odd", "_OTHER"),
        (None, "_OTHER"),
    ],
)
def test_error_type_is_low_cardinality(error: str | None, expected: str) -> None:
    assert error_type(error) == expected


def test_span_context_capture_is_skipped_when_opentelemetry_is_not_loaded(
    otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    with otel.tracer_provider.get_tracer("t").start_as_current_span("s"):
        monkeypatch.delitem(sys.modules, "opentelemetry.trace")
        assert current_span_context() is None


def test_span_context_capture_reads_the_current_span(otel: Otel) -> None:
    assert current_span_context() is None
    with otel.tracer_provider.get_tracer("t").start_as_current_span("s") as span:
        assert current_span_context() == span.get_span_context()


def test_the_context_taken_at_the_start_gives_its_span_later_on_another_thread(
    otel: Otel,
) -> None:
    # The caller's thread only takes OpenTelemetry's context; the feeder reads the span
    # from it after the span ended, on a thread where no span is current.
    import threading

    from langchain_ragmetrics._otel import current_otel_context, span_context_in

    with otel.tracer_provider.get_tracer("t").start_as_current_span("s") as span:
        taken = current_otel_context()
    without = current_otel_context()
    read: list[object] = []
    thread = threading.Thread(target=lambda: read.extend(map(span_context_in, [taken, without])))
    thread.start()
    thread.join()
    original = span.get_span_context()
    assert read == [(original.trace_id, original.span_id, original.trace_flags), None]
    assert span_context_in(None) is None


def test_the_context_taken_holds_nothing_of_the_app(otel: Otel) -> None:
    # Only OpenTelemetry's own values: an app's context variable (LangChain's config, with
    # the handler in it) is not kept alive by a queued retrieval.
    import contextvars
    import gc
    import weakref

    from langchain_ragmetrics._otel import current_otel_context

    class Big:
        pass

    var: contextvars.ContextVar[Big] = contextvars.ContextVar("app_var")
    value = Big()
    ref = weakref.ref(value)
    token = var.set(value)
    with otel.tracer_provider.get_tracer("t").start_as_current_span("s"):
        taken = current_otel_context()
    var.reset(token)
    del value
    gc.collect()
    assert ref() is None
    assert taken is not None


def test_the_package_imports_opentelemetry_only_when_the_sink_is_used() -> None:
    import subprocess

    code = (
        "import sys, langchain_ragmetrics as m\n"
        "before = 'opentelemetry' in sys.modules\n"
        "m.OpenTelemetrySink\n"
        "print(before, 'opentelemetry.metrics' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "False True"


def test_span_context_crosses_to_an_isolated_child_as_plain_ints(otel: Otel) -> None:
    import pickle

    from langchain_ragmetrics._otel import plain_span_context, span_context_from_plain

    with otel.tracer_provider.get_tracer("t").start_as_current_span("s") as span:
        plain = plain_span_context(current_span_context())
    back = span_context_from_plain(pickle.loads(pickle.dumps(plain)))
    original = span.get_span_context()
    assert (back.trace_id, back.span_id, back.trace_flags) == (
        original.trace_id,
        original.span_id,
        original.trace_flags,
    )
    assert plain_span_context(None) is None
    assert span_context_from_plain(None) is None


OTEL_FORK_SCRIPT = """
import os
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from langchain_ragmetrics import ContextRelevance, RagMetricsCallbackHandler
from langchain_ragmetrics.integrations.opentelemetry import OpenTelemetrySink

class Told(SpanProcessor):
    def force_flush(self, timeout_millis=30000):
        print("flushed in", "child" if os.getpid() != parent else "parent", flush=True)
        return True

parent = os.getpid()
tracer_provider = TracerProvider()
tracer_provider.add_span_processor(Told())
sink = OpenTelemetrySink(
    tracer_provider=tracer_provider, meter_provider=MeterProvider(), events="span",
    flush_timeout=2.0,
)
handler = RagMetricsCallbackHandler(
    metrics=[ContextRelevance()], sinks=[sink], isolation="thread"
)
sink.flush()  # the flush thread starts in the parent
pid = os.fork()
if pid == 0:  # the handler's fork hook hands the sink to after_fork
    sink.flush()
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_a_forked_workers_sink_flushes_on_a_thread_of_its_own() -> None:
    """Before, the worker's flush was handed to the parent's flush thread, which does not
    exist in a forked process: nothing was exported, and every flush waited its timeout."""
    from tests._support.processes import script_output

    assert script_output(OTEL_FORK_SCRIPT) == ["flushed in parent", "flushed in child"]
