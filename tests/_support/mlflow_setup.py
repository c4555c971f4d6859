"""A real ``mlflow server`` (SQLite store) on 127.0.0.1 and an isolated child's MLflow setup.

Importable by name in a fresh interpreter: an isolated handler's child gets a
``functools.partial`` of :func:`mlflow_child_setup`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from langchain_ragmetrics.callbacks import ScoringSetup
from tests._support.servers import ServerProcess, free_port

__all__ = ["MLFLOW_CLIENT_ENV", "mlflow_child_setup", "mlflow_server", "start_mlflow_server"]

MLFLOW_CLIENT_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
    "MLFLOW_ENABLE_TELEMETRY": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
}
"""Client settings for the tests: few, quick retries of MLflow's own (its default backs off
for minutes) so that a stopped server cannot hold the interpreter's exit; a timeout a loaded
2-core machine meets; no telemetry."""


def start_mlflow_server(workdir: Path) -> ServerProcess:
    """Start ``mlflow server`` with a SQLite store under ``workdir`` on a free port."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        f"sqlite:///{workdir / 'mlflow.db'}",
        "--default-artifact-root",
        str(workdir / "artifacts"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    server = ServerProcess(
        command,
        url=f"http://127.0.0.1:{port}",
        health_url=f"http://127.0.0.1:{port}/health",
        log=workdir / "server.log",
        env=MLFLOW_CLIENT_ENV,
    )
    return server.start()


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One MLflow tracking server for the session (``.url``); killed at the end."""
    server = start_mlflow_server(tmp_path_factory.mktemp("mlflow"))
    try:
        yield server
    finally:
        server.kill()


def mlflow_child_setup(judge_url: str, tracking_uri: str) -> ScoringSetup:
    """ContextRelevance on the loopback judge, results to MLflow (in the isolated child)."""
    import mlflow
    from langchain_openai import ChatOpenAI

    from langchain_ragmetrics import ContextRelevance
    from langchain_ragmetrics.integrations.mlflow import MlflowSink
    from langchain_ragmetrics.metrics import RetryPolicy

    mlflow.set_tracking_uri(tracking_uri)
    judge = ChatOpenAI(
        model="judge-model", base_url=judge_url, api_key="test", max_retries=2, timeout=10
    )
    return ScoringSetup(
        metrics=[ContextRelevance(llm=judge, retry=RetryPolicy(initial_backoff=0.01))],
        sinks=[MlflowSink(request_timeout=5, not_found_wait=20)],
    )
