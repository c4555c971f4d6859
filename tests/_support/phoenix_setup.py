"""A real Phoenix server (SQLite) on 127.0.0.1, OpenInference instrumentation, a child setup.

Importable by name in a fresh interpreter: an isolated handler's child gets a
``functools.partial`` of :func:`phoenix_child_setup`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import SpanExporter

from langchain_ragmetrics.callbacks import ScoringSetup
from tests._support.servers import ServerProcess, free_port

__all__ = [
    "RoutedExporter",
    "instrumented",
    "phoenix_child_setup",
    "phoenix_server",
    "start_phoenix_server",
]


def start_phoenix_server(workdir: Path) -> ServerProcess:
    """Start ``phoenix serve`` bound to 127.0.0.1 (HTTP and gRPC), data under ``workdir``."""
    port, grpc_port = free_port(), free_port()
    env = {
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_WORKING_DIR": str(workdir),
        "PHOENIX_SQL_DATABASE_URL": f"sqlite:///{workdir / 'phoenix.db'}",
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ENABLE_PROMETHEUS": "false",
        "DO_NOT_TRACK": "1",
    }
    command = [sys.executable, "-m", "phoenix.server.main", "serve"]
    server = ServerProcess(
        command,
        url=f"http://127.0.0.1:{port}",
        health_url=f"http://127.0.0.1:{port}/healthz",
        log=workdir / "server.log",
        env=env,
    )
    return server.start()


@pytest.fixture(scope="session")
def phoenix_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One Phoenix server for the session (``.url``); killed at the end."""
    server = start_phoenix_server(tmp_path_factory.mktemp("phoenix"))
    try:
        yield server
    finally:
        server.kill()


class RoutedExporter(SpanExporter):
    """An OTLP/HTTP span exporter whose Phoenix can be switched (a test may start its own)."""

    def __init__(self, url: str) -> None:
        self.route(url)

    def route(self, url: str) -> None:
        """Send the next spans to the Phoenix at ``url``."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        self.target = OTLPSpanExporter(endpoint=f"{url}/v1/traces", timeout=5)

    def export(self, spans: Sequence[Any]) -> Any:
        return self.target.export(spans)

    def shutdown(self) -> None:
        self.target.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


@pytest.fixture
def instrumented(phoenix_server: ServerProcess) -> Iterator[tuple[Any, RoutedExporter]]:
    """OpenInference's LangChain instrumentation for one test, exporting to the session's
    Phoenix as each span ends."""
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    exporter = RoutedExporter(phoenix_server.url)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield provider, exporter
    finally:
        instrumentor.uninstrument()
        provider.shutdown()


def phoenix_child_setup(judge_url: str, phoenix_url: str) -> ScoringSetup:
    """ContextRelevance on the loopback judge, results to Phoenix (in the isolated child)."""
    from langchain_openai import ChatOpenAI

    from langchain_ragmetrics import ContextRelevance
    from langchain_ragmetrics.integrations.phoenix import PhoenixSink
    from langchain_ragmetrics.metrics import RetryPolicy

    judge = ChatOpenAI(
        model="judge-model", base_url=judge_url, api_key="test", max_retries=2, timeout=10
    )
    return ScoringSetup(
        metrics=[ContextRelevance(llm=judge, retry=RetryPolicy(initial_backoff=0.01))],
        sinks=[PhoenixSink(endpoint=phoenix_url, request_timeout=10, not_found_wait=20)],
    )
