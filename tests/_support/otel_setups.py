"""An isolated handler's child setup that exports evaluation events over OTLP (tests only).

Importable by name in a fresh interpreter: the child is started with ``spawn`` and gets a
``functools.partial`` of :func:`otlp_setup`.
"""

from __future__ import annotations

from langchain_openai import ChatOpenAI

from langchain_ragmetrics import ContextRelevance, OpenTelemetrySink
from langchain_ragmetrics.callbacks import ScoringSetup
from langchain_ragmetrics.metrics import RetryPolicy

__all__ = ["otlp_setup"]


def otlp_setup(judge_url: str, receiver_url: str) -> ScoringSetup:
    """ContextRelevance on the loopback judge; events to a loopback OTLP/HTTP receiver."""
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor

    logs = LoggerProvider()
    logs.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{receiver_url}/v1/logs", timeout=10))
    )
    judge = ChatOpenAI(
        model="judge-model", base_url=judge_url, api_key="test", max_retries=2, timeout=10
    )
    return ScoringSetup(
        metrics=[ContextRelevance(llm=judge, retry=RetryPolicy(initial_backoff=0.01))],
        sinks=[OpenTelemetrySink(logger_provider=logs)],
    )
