"""OpenTelemetrySink through real exporters: OTLP/HTTP to a loopback receiver, and Prometheus."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from langchain_openai import ChatOpenAI
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from langchain_ragmetrics import (
    ContextPrecision,
    ContextRecall,
    InMemorySink,
    OnlineResult,
    OpenTelemetrySink,
    RagMetricsCallbackHandler,
)
from tests._support.openai_server import JudgeServer
from tests._support.otlp_receiver import OtlpReceiver
from tests._support.prometheus import prometheus_endpoint
from tests._support.rag import FAST, online_handler, question, rag_app

JudgeFactory = Callable[..., ChatOpenAI]
EXPORT_TIMEOUT_S = 600.0
"""The exporters' own request timeout: far above the bounds the tests assert."""
CEILING_S = 60.0
"""Generous bound for 'did not hang' (the exporters alone would wait 600 s per provider)."""


@dataclass
class Pipeline:
    receiver: OtlpReceiver
    tracer_provider: TracerProvider
    logger_provider: LoggerProvider
    meter_provider: MeterProvider

    def sink(self) -> OpenTelemetrySink:
        return OpenTelemetrySink(
            logger_provider=self.logger_provider,
            meter_provider=self.meter_provider,
            tracer_provider=self.tracer_provider,
            flush_timeout=2.0,
        )


@pytest.fixture
def pipeline() -> Iterator[Pipeline]:
    receiver = OtlpReceiver().start()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces", timeout=EXPORT_TIMEOUT_S)
        )
    )
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(
            OTLPLogExporter(endpoint=f"{receiver.url}/v1/logs", timeout=EXPORT_TIMEOUT_S)
        )
    )
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=f"{receiver.url}/v1/metrics", timeout=EXPORT_TIMEOUT_S),
        export_interval_millis=3_600_000,  # exported on force_flush only
    )
    meter_provider = MeterProvider(metric_readers=[reader])
    try:
        yield Pipeline(receiver, tracer_provider, logger_provider, meter_provider)
    finally:
        receiver.heal()  # held requests end now, so shutdown exports at once
        for provider in (meter_provider, logger_provider, tracer_provider):
            provider.shutdown()
        receiver.stop()


def requests_under_spans(app: Any, handler: Any, tracer_provider: Any, n: int) -> dict[str, Any]:
    tracer = tracer_provider.get_tracer("app")

    def one(i: int) -> tuple[str, Any]:
        with tracer.start_as_current_span(f"request-{i}") as span:
            app.chain.invoke(question(i), config={"callbacks": [handler]})
            return question(i), span.get_span_context()

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(one, range(n)))


def delivered(handler: Any) -> list[OnlineResult]:
    sink = handler.sinks[0]
    assert isinstance(sink, InMemorySink)
    return sink.results


def test_otlp_receiver_gets_parented_events_and_exact_metrics(
    judge_server: JudgeServer, make_judge: JudgeFactory, pipeline: Pipeline
) -> None:
    app = rag_app(judge_server, make_judge, max_retries=2)
    metrics = [ContextPrecision(llm=app.llm, retry=FAST), ContextRecall(llm=app.llm, retry=FAST)]
    handler = online_handler(app.llm, metrics=metrics, sinks=[InMemorySink(), pipeline.sink()])
    with handler:
        spans = requests_under_spans(app, handler, pipeline.tracer_provider, 8)
        assert handler.flush(timeout=60)
    assert pipeline.logger_provider.force_flush()
    assert pipeline.meter_provider.force_flush()
    assert pipeline.tracer_provider.force_flush()
    results = delivered(handler)
    by_run = {(str(r.run_id), r.metric): r for r in results}

    logs = pipeline.receiver.logs()
    assert len(logs) == len(results) == 16
    for record in logs:
        assert record.event_name == "gen_ai.evaluation.result"
        attributes = record.attributes
        item = by_run[attributes["ragmetrics.run_id"], attributes["gen_ai.evaluation.name"]]
        span = spans[item.question]
        assert record.trace_id == f"{span.trace_id:032x}"
        assert record.span_id == f"{span.span_id:016x}"
        if item.result.skipped:
            assert attributes["gen_ai.evaluation.score.label"] == "skipped"
        else:
            assert attributes["gen_ai.evaluation.score.value"] == item.score
    # the application's spans arrived too, and the events point at them
    span_ids = {s.span_id for s in pipeline.receiver.spans()}
    assert {r.span_id for r in logs} <= span_ids

    scored = [r for r in results if r.score is not None and not math.isnan(r.score)]
    (histogram,) = pipeline.receiver.points("ragmetrics.evaluation.score")
    assert histogram.count == len(scored) == 8
    assert histogram.sum == pytest.approx(sum(r.score or 0.0 for r in scored))
    (skipped,) = pipeline.receiver.points("ragmetrics.evaluation.skipped")
    assert skipped.value == 8


@pytest.mark.parametrize("fault", ["500", "never answers"])
def test_a_failing_collector_hangs_nothing(
    judge_server: JudgeServer, make_judge: JudgeFactory, pipeline: Pipeline, fault: str
) -> None:
    receiver = pipeline.receiver
    if fault == "500":
        receiver.fail_with = 500
    else:
        receiver.hold = True
    app = rag_app(judge_server, make_judge, max_retries=2)
    sink = pipeline.sink()
    handler = online_handler(app.llm, sinks=[InMemorySink(), sink])
    requests_under_spans(app, handler, pipeline.tracer_provider, 4)
    started = time.monotonic()
    assert handler.flush(timeout=60)  # includes the sink's flush, capped at flush_timeout=2
    assert time.monotonic() - started < CEILING_S
    assert len(delivered(handler)) == 4  # the other sinks got everything
    assert receiver.arrived.wait(CEILING_S)  # the exporters did reach the broken collector
    started = time.monotonic()
    sink.flush(timeout=0.5)
    handler.close(timeout=2.0)  # False is fair here (nothing could be exported): it returns
    assert time.monotonic() - started < CEILING_S
    assert handler.stats.sink_errors == 0


def test_prometheus_recipe_serves_the_metrics(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    with prometheus_endpoint() as endpoint:
        app = rag_app(judge_server, make_judge, max_retries=2)
        sink = OpenTelemetrySink(meter_provider=endpoint.meter_provider, events="span")
        handler = online_handler(app.llm, sinks=[InMemorySink(), sink])
        with handler:
            for i in range(5):
                app.chain.invoke(question(i), config={"callbacks": [handler]})
            assert handler.flush(timeout=60)
        results = delivered(handler)
        text = endpoint.scrape()
    labels = (
        'gen_ai_evaluation_name="context_relevance"',
        'ragmetrics_judge_model="judge-model"',
        'ragmetrics_retriever="VectorStoreRetriever"',
    )
    (count_line,) = [  # one series: a scrape must never list a series twice
        line for line in text.splitlines() if line.startswith("ragmetrics_evaluation_score_count")
    ]
    assert all(label in count_line for label in labels), count_line
    assert float(count_line.rsplit(" ", 1)[1]) == len(results) == 5
    sum_line = next(
        line for line in text.splitlines() if line.startswith("ragmetrics_evaluation_score_sum")
    )
    assert float(sum_line.rsplit(" ", 1)[1]) == pytest.approx(sum(r.score or 0 for r in results))
    assert "ragmetrics_judge_calls_total" in text
    assert "ragmetrics_judge_tokens_total" in text


def test_isolated_handler_events_keep_the_parent_process_spans(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    from functools import partial

    from langchain_ragmetrics.callbacks import ProcessIsolation
    from tests._support.otel_setups import otlp_setup

    app = rag_app(judge_server, make_judge, max_retries=2)
    tracer_provider = TracerProvider()
    with OtlpReceiver() as receiver:
        setup = partial(otlp_setup, judge_server.base_url, receiver.url)
        handler = RagMetricsCallbackHandler(isolation=ProcessIsolation(setup=setup, niceness=0))
        spans = requests_under_spans(app, handler, tracer_provider, 4)
        assert handler.flush(timeout=120)
        assert handler.close(timeout=60)
        events = receiver.logs()
    assert len(events) == 4
    expected = {(f"{s.trace_id:032x}", f"{s.span_id:016x}") for s in spans.values()}
    assert {(e.trace_id, e.span_id) for e in events} == expected
    assert {e.event_name for e in events} == {"gen_ai.evaluation.result"}
