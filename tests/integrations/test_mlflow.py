"""MlflowSink against a real ``mlflow server``: assessments read back with MLflow's client."""

from __future__ import annotations

import logging
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import partial
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

from tests._support.extras import require_extra

mlflow = require_extra("mlflow", "mlflow")

from mlflow.entities import Feedback  # noqa: E402

from langchain_ragmetrics import (  # noqa: E402
    InMemorySink,
    MetricResult,
    OnlineResult,
    RagMetricsCallbackHandler,
    RagSample,
)
from langchain_ragmetrics._errors import SinkSkipError  # noqa: E402
from langchain_ragmetrics.callbacks import ProcessIsolation  # noqa: E402
from langchain_ragmetrics.integrations.mlflow import _DELIVERY_KEY, MlflowSink  # noqa: E402
from tests._support.mlflow_setup import (  # noqa: E402
    MLFLOW_CLIENT_ENV,
    mlflow_child_setup,
    mlflow_server,
    start_mlflow_server,
)
from tests._support.openai_server import JudgeServer  # noqa: E402
from tests._support.proxy import LossyProxy  # noqa: E402
from tests._support.rag import online_handler, question, rag_app  # noqa: E402
from tests._support.servers import ServerProcess, free_port  # noqa: E402
from tests._support.sink_checks import (  # noqa: E402
    HoldUntil,
    deliver,
    delivers_after_a_fork,
    linked_item,
    one_scored_item,
    outage_mid_run,
)
from tests._support.status_server import SilentServer, StatusServer  # noqa: E402

__all__ = ["mlflow_server"]

JudgeFactory = Callable[..., ChatOpenAI]
CEILING_S = 20.0
"""Generous bound for 'did not hang' (MLflow's client alone would wait 120 s per request)."""


@pytest.fixture
def tracking(mlflow_server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Autologging on, tracking to the session's server, in a fresh experiment."""
    for name, value in MLFLOW_CLIENT_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    mlflow.set_tracking_uri(mlflow_server.url)
    mlflow.set_experiment(f"ragmetrics-{time.monotonic_ns()}")
    mlflow.langchain.autolog()
    try:
        yield mlflow_server.url
    finally:
        mlflow.langchain.autolog(disable=True)
        mlflow.flush_trace_async_logging(terminate=False)


def read_trace(trace_id: str) -> Any:
    """The stored trace, once MLflow has exported it (its export is asynchronous)."""
    mlflow.flush_trace_async_logging(terminate=False)
    return mlflow.MlflowClient().get_trace(trace_id)


def assessments(trace_id: str) -> list[Any]:
    return [a for a in read_trace(trace_id).info.assessments if isinstance(a, Feedback)]


def test_scores_land_on_the_retriever_span_of_their_own_trace(
    tracking: str, judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge, max_retries=2)
    memory = InMemorySink()
    handler = online_handler(app.llm, sinks=[memory, MlflowSink()])
    with handler, ThreadPoolExecutor(4) as pool:
        list(
            pool.map(
                lambda i: app.chain.invoke(question(i), config={"callbacks": [handler]}),
                range(8),
            )
        )
        assert handler.flush(timeout=60)
    results = memory.results
    assert len(results) == 8
    assert handler.stats.sinks["MlflowSink"].delivered == 8
    for item in results:
        trace_id, span_id = item.links["mlflow"]
        trace = read_trace(trace_id)
        (span,) = [s for s in trace.data.spans if s.span_id == span_id]
        assert span.span_type == "RETRIEVER"
        assert span.inputs == item.query  # the request that retrieved, not a neighbour
        (feedback,) = assessments(trace_id)
        assert feedback.name == "context_relevance"
        assert feedback.value == item.result.score
        assert feedback.rationale == item.result.reason
        assert feedback.span_id == span_id
        assert feedback.source.source_type == "LLM_JUDGE"
        assert feedback.source.source_id == "judge-model"
        assert feedback.metadata["ragmetrics.run_id"] == str(item.run_id)
        assert feedback.metadata["ragmetrics.retriever"] == "VectorStoreRetriever"
        assert feedback.metadata["ragmetrics.input_tokens"] == str(item.result.usage.input_tokens)
        assert '"relevant_indices"' in feedback.metadata["ragmetrics.details"]
    assert len({r.links["mlflow"][0] for r in results}) == 8


def test_a_retriever_inside_a_retriever_scores_on_its_own_span(tracking: str) -> None:
    """An outer retriever that calls an inner one (ensemble, compression, multi-query):
    before, the inner retrieval was linked to the outer retriever's span."""
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    from langchain_ragmetrics import NonLLMContextPrecision

    class Inner(BaseRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            return [Document(page_content=f"inner about {query}")]

    class Outer(BaseRetriever):
        inner: BaseRetriever

        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            found = self.inner.invoke(query, config={"callbacks": run_manager.get_child()})
            return [*found, Document(page_content="outer")]

    memory = InMemorySink()
    handler = RagMetricsCallbackHandler(
        metrics=[NonLLMContextPrecision()],
        sinks=[memory],
        isolation="thread",
        reference_provider=lambda q, m: {"reference_contexts": [f"inner about {q}"]},
    )
    with handler:
        Outer(inner=Inner()).invoke("q", config={"callbacks": [handler]})
        assert handler.flush(timeout=30)
    by_name = {item.retriever: item for item in memory.results}
    assert set(by_name) == {"Inner", "Outer"}
    spans = {}
    for name, item in by_name.items():
        trace_id, span_id = item.links["mlflow"]
        (span,) = [s for s in read_trace(trace_id).data.spans if s.span_id == span_id]
        spans[name] = span
    assert spans["Inner"].name == "Inner"
    assert spans["Outer"].name == "Outer"
    assert spans["Inner"].parent_id == spans["Outer"].span_id


def _result(item: OnlineResult, **changes: Any) -> OnlineResult:
    return item.model_copy(update={"result": item.result.model_copy(update=changes)})


def test_a_failed_result_is_an_error_that_a_later_success_overrides(
    tracking: str, judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    item = one_scored_item(rag_app(judge_server, make_judge, max_retries=2), 1)
    sink = MlflowSink()
    failed = _result(item, score=math.nan, error="TimeoutError: judge timed out", reason="")
    sink.emit(failed)
    trace_id, span_id = item.links["mlflow"]
    (error,) = assessments(trace_id)
    assert error.value is None
    assert error.error.error_code == "TimeoutError"
    assert error.error.error_message == "TimeoutError: judge timed out"
    assert error.span_id == span_id
    sink.emit(item)
    sink.close()
    stored = {a.assessment_id: a for a in assessments(trace_id)}
    assert len(stored) == 2
    (success,) = [a for a in stored.values() if a.value is not None]
    assert success.value == item.result.score
    assert success.overrides == error.assessment_id
    assert stored[error.assessment_id].valid is False


def _stored_span(name: str) -> tuple[str, str]:
    """A trace with one span, stored on the server: its trace and span ids."""
    with mlflow.start_span(name) as span:
        trace_id, span_id = span.trace_id, span.span_id
    mlflow.flush_trace_async_logging(terminate=False)
    return trace_id, span_id


def _on_trace(item: OnlineResult, trace_id: str, span_id: str | None) -> OnlineResult:
    return item.model_copy(update={"links": {"mlflow": (trace_id, span_id)}})


def test_a_score_overrides_only_the_error_of_its_own_retrieval_on_a_trace_without_span(
    tracking: str,
) -> None:
    """Two retrievals of one trace linked without a span (the documented fallback): before,
    the second's score overrode the first's error, and MLflow marked a real failure invalid."""
    trace_id, _ = _stored_span("request")
    primary = _on_trace(linked_item("mlflow", trace_id, "0" * 16), trace_id, None)
    primary = _result(primary, score=math.nan, error="TimeoutError: judge timed out")
    secondary = _on_trace(linked_item("mlflow", trace_id, "0" * 16), trace_id, None)
    sink = MlflowSink(backoff=0.01)
    try:
        sink.emit(primary)
        sink.emit(secondary)
    finally:
        sink.close()
    by_run = {a.metadata["ragmetrics.run_id"]: a for a in assessments(trace_id)}
    error, score = by_run[str(primary.run_id)], by_run[str(secondary.run_id)]
    assert error.error.error_code == "TimeoutError"
    assert error.valid is not False  # still a failure on the trace
    assert score.value == 0.5
    assert score.overrides is None
    assert sink.order_key(primary) != sink.order_key(secondary)


def test_a_score_that_is_not_finite_is_logged_as_an_error_and_opens_no_breaker(
    tracking: str,
) -> None:
    """``inf`` from a buggy custom metric: before, encoding it failed inside every try, each
    counted as a server failure, and the breaker dropped the good results after it."""
    trace_id, span_id = _stored_span("request")
    good = linked_item("mlflow", trace_id, span_id)
    infinite = _result(good, score=math.inf)
    sink = MlflowSink(backoff=0.01, max_retries=0, failure_threshold=1, cooldown=60)
    try:
        stats = deliver(sink, [infinite, infinite, good])
    finally:
        sink.close()
    assert (stats.delivered, stats.errors, stats.dropped) == (3, 0, 0)
    assert not sink.delivery.breaker.is_open
    stored = assessments(trace_id)
    errors = [a for a in stored if a.error is not None]
    assert len(errors) == 2
    assert {a.error.error_code for a in errors} == {"ValueError"}
    assert all("inf" in a.error.error_message for a in errors)
    (score,) = [a for a in stored if a.value is not None]
    assert score.value == 0.5


def test_a_body_that_cannot_be_encoded_is_no_server_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Building the request's JSON fails locally: raised once from ``emit``, nothing sent,
    nothing counted by the breaker (before, each try was counted as a server failure)."""
    import mlflow.utils.proto_json_utils as proto_json_utils

    def unencodable(message: Any) -> str:
        raise ValueError("Out of range float values are not JSON compliant")

    with StatusServer(500, {"error": "down"}) as server, _tracking_to(server.url, monkeypatch):
        monkeypatch.setattr(proto_json_utils, "message_to_json", unencodable)
        sink = MlflowSink(backoff=0.01, max_retries=2, failure_threshold=1, cooldown=60)
        try:
            with pytest.raises(ValueError, match="not JSON compliant"):
                sink.emit(_linked_item())
        finally:
            sink.close()
        assert server.requests == []
    assert not sink.delivery.breaker.is_open


def test_mlflow_2_is_refused_when_the_sink_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow 2 has ``mlflow.entities`` without the assessment classes: before, the sink was
    built and every result then failed with an ImportError."""
    import types

    monkeypatch.setitem(sys.modules, "mlflow.entities", types.ModuleType("mlflow.entities"))
    with pytest.raises(ImportError, match="needs MLflow 3"):
        MlflowSink()


def _exported_item(
    judge_server: JudgeServer, make_judge: JudgeFactory, i: int
) -> tuple[OnlineResult, str]:
    """A scored result for question ``i`` and its trace id, the trace stored on the server."""
    item = one_scored_item(rag_app(judge_server, make_judge, max_retries=2), i)
    mlflow.flush_trace_async_logging(terminate=False)
    return item, item.links["mlflow"][0]


@pytest.mark.parametrize("lost", [502, 504])
def test_a_reply_lost_after_mlflow_stored_the_assessment_is_not_stored_twice(
    lost: int,
    tracking: str,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A gateway loses MLflow's reply to the first POST: the retry finds it and sends nothing."""
    item, trace_id = _exported_item(judge_server, make_judge, 3)
    failed = _result(item, score=math.nan, error="TimeoutError: judge timed out", reason="")
    lost_once: list[str] = []

    def answer(method: str, path: str) -> int | None:
        if method == "POST" and "assessments" in path and not lost_once:
            lost_once.append(path)
            return lost  # stored by MLflow, reported to the client as failed
        return None

    with LossyProxy(tracking, answer) as proxy:
        mlflow.set_tracking_uri(proxy.url)
        sink = MlflowSink(backoff=0.01, max_retries=2)
        try:
            sink.emit(failed)  # the error: lost reply, then found
            sink.emit(item)  # the score: delivered at once
        finally:
            mlflow.set_tracking_uri(tracking)
            sink.close()
        posts = proxy.requests_to("assessments")
    assert lost_once  # the reply was lost once
    assert [status for _, _, status in posts] == [200, 200]  # one POST per emit: no resend
    stored = assessments(trace_id)
    assert len(stored) == 2
    (error,) = [a for a in stored if a.value is None]
    (score,) = [a for a in stored if a.value is not None]
    assert error.metadata[_DELIVERY_KEY] != score.metadata[_DELIVERY_KEY]
    assert score.overrides == error.assessment_id  # the found error was remembered
    assert sink.delivery.breaker.is_open is False


def test_a_look_mlflow_holds_without_answering_is_bounded_and_sends_nothing_again(
    tracking: str,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reply to the POST is lost, then MLflow holds the look (reading the trace).

    The sink gives up within its bounds, never sends the assessment a second time while it
    cannot tell whether the first one was stored, and MLflow keeps exactly one.
    """
    item, trace_id = _exported_item(judge_server, make_judge, 5)
    release = threading.Event()
    lost: list[str] = []
    held: list[str] = []

    def answer(method: str, path: str) -> int | None:
        if method == "POST" and "assessments" in path and not lost:
            lost.append(path)
            return 502  # stored by MLflow, reported to the client as failed
        if method == "GET" and lost:
            held.append(path)
            release.wait(CEILING_S)  # accepted, not answered (until the test ends)
        return None

    with LossyProxy(tracking, answer) as proxy:
        mlflow.set_tracking_uri(proxy.url)
        sink = MlflowSink(request_timeout=1, backoff=0.01, max_retries=2)
        started = time.monotonic()
        try:
            with pytest.raises(TimeoutError):
                sink.emit(item)
            elapsed = time.monotonic() - started
        finally:
            release.set()
            mlflow.set_tracking_uri(tracking)
            sink.close()
        posts = proxy.requests_to("assessments")
    assert lost
    assert held  # the look was sent, and held
    assert len(posts) == 1  # no resend without an answer to the look
    assert elapsed < CEILING_S
    (stored,) = assessments(trace_id)
    assert stored.metadata[_DELIVERY_KEY]


def test_a_retry_sends_again_when_the_first_try_was_not_stored(
    tracking: str,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Refused before MLflow stored it: the sink looks, finds nothing, and sends again."""
    item, trace_id = _exported_item(judge_server, make_judge, 4)
    sink = MlflowSink(backoff=0.01, max_retries=2)
    original = sink._log
    tries: list[str] = []

    def refused_once(trace: str, *args: Any) -> Any:
        tries.append(trace)
        if len(tries) == 1:
            raise ConnectionRefusedError("refused")  # never reached the server
        return original(trace, *args)

    sink._log = refused_once  # type: ignore[method-assign]
    sink.emit(item)
    sink.close()
    assert len(tries) == 2
    (score,) = assessments(trace_id)
    assert score.value == item.result.score


def test_without_an_mlflow_trace_results_are_skipped_with_one_warning(
    tracking: str,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    mlflow.langchain.autolog(disable=True)
    app = rag_app(judge_server, make_judge, max_retries=2)
    handler = online_handler(app.llm, sinks=[InMemorySink(), MlflowSink()])
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"), handler:
        for i in range(3):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert handler.flush(timeout=60)
    figures = handler.stats.sinks["MlflowSink"]
    assert (figures.skipped, figures.delivered, figures.errors) == (3, 0, 0)
    warnings = [r for r in caplog.records if "no MLflow trace" in r.getMessage()]
    assert len(warnings) == 1


def test_the_warning_for_a_retrieval_without_trace_names_trace_sampling_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With autologging on, MLflow's trace sampling leaves requests untraced: before, the
    warning only said to call ``mlflow.langchain.autolog()``, which was already done."""
    item = linked_item("mlflow", "tr-" + "0" * 32, "0" * 16).model_copy(update={"links": {}})
    with (
        caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"),
        pytest.raises(SinkSkipError, match="no MLflow trace"),
    ):
        MlflowSink().emit(item)
    (warning,) = [r.getMessage() for r in caplog.records if "no MLflow trace" in r.getMessage()]
    assert "MLFLOW_TRACE_SAMPLING_RATIO" in warning
    assert "mlflow.langchain.autolog()" in warning


def test_a_trace_not_stored_yet_is_retried_then_counted(tracking: str) -> None:
    """MLflow answers RESOURCE_DOES_NOT_EXIST: retried with backoff, without opening the breaker."""
    sink = MlflowSink(not_found_wait=1.0, backoff=0.1, failure_threshold=1)
    item = OnlineResult(
        trace_id=None,
        root_run_id=_uuid(),
        run_id=_uuid(),
        query="q",
        sample=RagSample(question="q", contexts=["c"]),
        result=MetricResult(metric="context_relevance", score=0.5, judge="judge-model"),
        timestamp=datetime.now(timezone.utc),
        links={"mlflow": ("tr-" + "0" * 32, None)},
    )
    calls: list[float] = []
    original = sink._log

    def counted(trace_id: str, *args: Any) -> Any:
        calls.append(time.monotonic())
        return original(trace_id, *args)

    sink._log = counted  # type: ignore[method-assign]
    with pytest.raises(mlflow.exceptions.MlflowException, match="not found"):
        sink.emit(item)
    # Retried while waiting for the trace: the wait starts at the first "not found", so a
    # second try always comes; how many more fit in 1 s depends on the machine.
    assert len(calls) >= 2
    assert not sink.delivery.breaker.is_open
    sink.close()


def _uuid() -> Any:
    import uuid

    return uuid.uuid4()


def test_isolated_mode_scores_land_on_the_parent_process_traces(
    tracking: str, judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge, max_retries=2)
    setup = partial(mlflow_child_setup, judge_server.base_url, tracking)
    handler = RagMetricsCallbackHandler(isolation=ProcessIsolation(setup=setup, niceness=0))
    traces: dict[str, str] = {}
    for i in range(3):
        with mlflow.start_span("request") as span:
            app.chain.invoke(question(i), config={"callbacks": [handler]})
            traces[span.trace_id] = question(i)
    assert handler.flush(timeout=120)
    assert handler.close(timeout=60)
    assert handler.stats.sinks["MlflowSink"].delivered == 3
    for trace_id, asked in traces.items():
        (feedback,) = assessments(trace_id)
        assert feedback.name == "context_relevance"
        assert feedback.value == 0.5
        spans = read_trace(trace_id).data.spans
        (span,) = [s for s in spans if s.span_id == feedback.span_id]
        assert span.span_type == "RETRIEVER"
        assert span.inputs == asked


def test_server_killed_mid_run_nothing_raised_everything_counted(
    tmp_path: Any,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = start_mlflow_server(tmp_path)
    try:
        for name, value in MLFLOW_CLIENT_ENV.items():
            monkeypatch.setenv(name, value)
        # The app's own MLflow requests (its trace export) fail at once once the server is
        # gone (the sink's never take MLflow's retries); the sink's timeout is long so a
        # slow answer of the fresh server before the kill is not a failure.
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        mlflow.set_tracking_uri(server.url)
        mlflow.set_experiment("killed")
        mlflow.langchain.autolog()
        app = rag_app(judge_server, make_judge, max_retries=2)
        sink = MlflowSink(
            request_timeout=30, max_retries=1, backoff=0.05, cooldown=60, max_concurrency=1
        )
        outage_mid_run(app, sink, "MlflowSink", server.kill)
        assert sink.delivery.breaker.is_open
    finally:
        mlflow.langchain.autolog(disable=True)
        server.kill()
        # The app's traces for the dead server wait in MLflow's export queue: drop them now,
        # while MLflow does not retry, not at the interpreter's exit with its default
        # retries (minutes of backoff per trace).
        mlflow.flush_trace_async_logging(terminate=False)


def test_a_server_that_never_answers_costs_one_bounded_wait(
    tracking: str, judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    item = one_scored_item(rag_app(judge_server, make_judge, max_retries=2), 2)
    mlflow.flush_trace_async_logging(terminate=False)  # the app's trace, before the switch
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        mlflow.set_tracking_uri(f"http://127.0.0.1:{silent.getsockname()[1]}")
        sink = MlflowSink(request_timeout=1, max_retries=0, failure_threshold=1, cooldown=60)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            sink.emit(item)
        with pytest.raises(Exception, match="circuit open"):
            sink.emit(item)
        closed = threading.Thread(target=sink.close)
        closed.start()
        closed.join(5)
        assert not closed.is_alive()
        assert time.monotonic() - started < CEILING_S
    assert float(os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"]) > 1  # the bound was the sink's


def test_cookbook_script_puts_scores_on_mlflow_traces(
    mlflow_server: ServerProcess, tmp_path: Any
) -> None:
    from tests._support.examples import REPO, run_example

    done = run_example(
        cwd=tmp_path,
        script=REPO / "cookbook" / "10_mlflow_sink.py",
        env={"MLFLOW_TRACKING_URI": mlflow_server.url, **MLFLOW_CLIENT_ENV},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("context_relevance=")]
    assert len(lines) == 3, done.stdout
    assert all(" on trace tr-" in line and " span " in line for line in lines)
    assert "assessments logged: 3" in done.stdout


def test_docs_page_example_runs(mlflow_server: ServerProcess, tmp_path: Any) -> None:
    from tests._support.examples import REPO, python_blocks, run_example

    (block,) = python_blocks(REPO / "docs" / "integrations" / "mlflow.md")
    done = run_example(
        cwd=tmp_path,
        code=block,
        env={"MLFLOW_TRACKING_URI": mlflow_server.url, **MLFLOW_CLIENT_ENV},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "delivered=1 skipped=0 errors=0 dropped=0 pending=0" in done.stdout


def _linked_item() -> OnlineResult:
    return linked_item("mlflow", "tr-" + "0" * 32, "0" * 16)


_PAGE = "<html><body><h1>{}</h1></body></html>"

_MLFLOW_RETRIES_OF_THE_APP = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "4",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}
"""MLflow's client told to retry much and wait long: the application's choice for its own
MLflow requests, which the sink's requests must not follow (nor change)."""


@contextmanager
def _tracking_to(url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """MLflow's client pointed at ``url`` with the application's retry settings; the
    environment checked unchanged afterwards (the sink sets nothing process-wide)."""
    for name, value in {**MLFLOW_CLIENT_ENV, **_MLFLOW_RETRIES_OF_THE_APP}.items():
        monkeypatch.setenv(name, value)
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(url)  # MLflow puts it in os.environ too
    before = dict(os.environ)
    try:
        yield
        assert dict(os.environ) == before
    finally:
        mlflow.set_tracking_uri(previous)


def _request_threads(sink: MlflowSink) -> list[threading.Thread]:
    """The sink's request threads still alive."""
    pool = sink.delivery._pool
    return [] if pool is None else [t for t in pool.threads if t.is_alive()]


_REFUSED_OR_REJECTED = [
    # (status, body, message, counts toward the breaker)
    # refused: every request would meet it
    (403, {"error_code": "PERMISSION_DENIED", "message": "m"}, "PERMISSION_DENIED", True),
    (401, {"error_code": "UNAUTHENTICATED", "message": "m"}, "UNAUTHENTICATED", True),
    # a route this server lacks, answered by the web server or a proxy as a page ...
    (404, _PAGE.format("Not Found"), "error code 404", True),
    (405, _PAGE.format("Method Not Allowed"), "error code 405", True),
    (410, _PAGE.format("Gone"), "error code 410", True),
    (415, _PAGE.format("Unsupported Media Type"), "error code 415", True),
    # ... or with a JSON body: MLflow's client then keeps no status, only the body's code
    # (INTERNAL_ERROR when it has none), and the sink read a 405 as a 500 and retried it
    (404, {"detail": "Not Found"}, "HTTP 404", True),
    (405, {"error": "method not allowed"}, "HTTP 405", True),
    (405, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no route"}, "HTTP 405", True),
    (410, {"message": "this API is gone"}, "HTTP 410", True),
    (415, {"error_code": "INVALID_PARAMETER_VALUE", "message": "media"}, "HTTP 415", True),
    (415, ["unsupported", "media", "type"], "error code 415", True),
    # rejected: MLflow (or what is in front of it) is up, this one request is wrong
    (400, {"error_code": "INVALID_PARAMETER_VALUE", "message": "m"}, "INVALID_PARAM", False),
    (413, _PAGE.format("Request Entity Too Large"), "error code 413", False),
    (413, {"error": "payload too large"}, "HTTP 413", False),
    (413, {"error_code": "TEMPORARILY_UNAVAILABLE", "message": "too big"}, "HTTP 413", False),
]


@pytest.mark.parametrize(
    ("status", "payload", "match", "opens"),
    _REFUSED_OR_REJECTED,
    ids=[
        "403",
        "401",
        "404-page",
        "405-page",
        "410-page",
        "415-page",
        "404-json-detail",
        "405-json-error",
        "405-json-not-found-code",
        "410-json-message",
        "415-json-invalid-code",
        "415-json-list",
        "400",
        "413-page",
        "413-json-error",
        "413-json-unavailable-code",
    ],
)
def test_a_refused_or_rejected_assessment_fails_at_once(
    status: int, payload: object, match: str, opens: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No retry for an answer retrying cannot change; only a refusal counts as an outage.

    The status decides, whatever the body says: a code in a JSON body may contradict it
    (a proxy's 405 that says RESOURCE_DOES_NOT_EXIST was retried for ``not_found_wait``).
    """
    with StatusServer(status, payload) as server, _tracking_to(server.url, monkeypatch):
        sink = MlflowSink(max_retries=3, backoff=0.01, failure_threshold=2, cooldown=60)
        try:
            with pytest.raises(Exception, match=match):
                sink.emit(_linked_item())
            assert _posts(server) == 1  # not retried
            assert len(server.requests) == 1  # nor looked for
            assert not sink.delivery.breaker.is_open  # one of the two in a row
            with pytest.raises(Exception, match=match):
                sink.emit(_linked_item())
            assert _posts(server) == 2
            assert sink.delivery.breaker.is_open is opens
        finally:
            sink.close()


@pytest.mark.parametrize(
    ("status", "payload"),
    [
        (502, _PAGE.format("Bad Gateway")),
        (500, {"error_code": "INTERNAL_ERROR", "message": "m"}),
        (503, {"error": "upstream unavailable"}),
        (504, {"error_code": "PERMISSION_DENIED", "message": "a code no retry could fix"}),
        (429, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "a code that waits"}),
        (500, ["not", "an", "object"]),
    ],
    ids=["502-page", "500-json", "503-json-error", "504-json-denied-code", "429-json", "500-list"],
)
def test_a_server_error_or_429_is_retried_whatever_its_body(
    status: int, payload: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retried by the sink alone (MLflow is told to retry 4 times: not for these requests),
    each retry after a 5xx looking first whether the try was stored (a 5xx may come after
    MLflow took it; a 429 never does, so it is sent again at once: before, a look came
    first); every try counts toward the breaker."""
    with StatusServer(status, payload) as server, _tracking_to(server.url, monkeypatch):
        sink = MlflowSink(max_retries=2, backoff=0.01, failure_threshold=5, cooldown=60)
        try:
            with pytest.raises(Exception, match=str(status)):
                sink.emit(_linked_item())
            # the try, then two retries; after a 5xx each looks for the try first, and the
            # look meets the same answer
            expected = ["POST"] * 3 if status == 429 else ["POST", "GET", "GET"]
            assert [method for method, _ in server.requests] == expected
            assert not sink.delivery.breaker.is_open  # 3 failures of the 5
            with pytest.raises(Exception, match=r"\b(HTTP|error code) \d{3}"):
                sink.emit(_linked_item())
            assert len(server.requests) == 5  # the 5th failure opened the breaker
            assert sink.delivery.breaker.is_open
        finally:
            sink.close()


def _posts(server: StatusServer) -> int:
    return sum(m == "POST" and "assessments" in p for m, p in server.requests)


class _ConnectionAttempts:
    """Counts the connections MLflow's HTTP client tries to ``port`` (urllib3's connect)."""

    def __init__(self, port: int, monkeypatch: pytest.MonkeyPatch) -> None:
        import urllib3.connection

        self.times: list[float] = []
        original = urllib3.connection.HTTPConnection.connect
        attempts = self

        def connect(conn: Any) -> None:
            if conn.port == port:
                attempts.times.append(time.monotonic())
            original(conn)

        monkeypatch.setattr(urllib3.connection.HTTPConnection, "connect", connect)

    def count_since(self, moment: float) -> int:
        return sum(t > moment for t in self.times)


@contextmanager
def _failing(kind: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Any]]:
    """A server that fails every request one way: its URL and what counts its requests."""
    if kind == "refused":
        port = free_port()  # nothing listens there
        yield f"http://127.0.0.1:{port}", _ConnectionAttempts(port, monkeypatch)
    elif kind == "silent":
        with SilentServer() as silent:
            yield silent.url, silent
    else:
        status, payload, headers = {
            "500": (500, {"error_code": "INTERNAL_ERROR", "message": "down"}, {}),
            "429-retry-after": (
                429,
                {"error_code": "REQUEST_LIMIT_EXCEEDED"},
                {"Retry-After": "1"},
            ),
            "malformed-json": (200, b'{"assessment": {"assessment_id": ', {}),
        }[kind]
        with StatusServer(status, payload, headers) as server:
            yield server.url, server


@pytest.mark.parametrize(
    ("kind", "match"),
    [
        ("refused", "Connection refused|Failed to establish"),
        ("500", "HTTP 500"),
        ("429-retry-after", "HTTP 429"),
        ("silent", "no answer within 0.5 s"),
        ("malformed-json", "not JSON"),
    ],
)
def test_one_result_costs_at_most_one_request_per_try_and_nothing_after_close(
    kind: str, match: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sink owns retrying: ``max_retries=2`` is three requests per result, whatever
    MLflow's client is told for the application's requests (4 retries, 30 s timeout).

    Before, each try of the sink was a whole retry loop of MLflow's (here five requests
    over 14 s, or a 30 s wait for a silent server): the sink stopped waiting after
    ``request_timeout`` and reported "no answer" whatever the server had said, and the loop
    went on on its thread, sending after ``close()``. Now each try is one request bounded
    by ``request_timeout``, and ``close()`` returns with none left running.
    """
    with _failing(kind, monkeypatch) as (url, counter), _tracking_to(url, monkeypatch):
        sink = MlflowSink(request_timeout=0.5, max_retries=2, backoff=0.01, failure_threshold=9)
        started = time.monotonic()
        try:
            with pytest.raises(Exception, match=match):
                sink.emit(_linked_item())
            elapsed = time.monotonic() - started
        finally:
            sink.close()
        closed = time.monotonic()
        assert _request_threads(sink) == []  # nothing left running
        assert counter.count_since(started) == 3  # the try and two retries, one request each
        if kind == "429-retry-after":
            assert elapsed >= 2  # each retry waited the second the server asked for
        assert elapsed < CEILING_S
        time.sleep(1.5)  # MLflow's own retry loop would send again within this (backoff 1)
        assert counter.count_since(closed) == 0


def test_an_outage_costs_a_bounded_number_of_requests_and_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Twenty results against a server that answers 500: the breaker stops the sends after
    ``failure_threshold`` failures, at most ``max_concurrency`` tries are out at once, each
    one request, and nothing is sent or running after close."""
    with StatusServer(500, {"error": "down"}) as server, _tracking_to(server.url, monkeypatch):
        sink = MlflowSink(
            request_timeout=2,
            max_retries=2,
            backoff=0.01,
            failure_threshold=5,
            cooldown=60,
            max_concurrency=4,
        )
        started = time.monotonic()
        try:
            stats = deliver(sink, [_linked_item() for _ in range(20)])
        finally:
            sink.close()
        closed = time.monotonic()
        assert stats.delivered == 0
        assert stats.errors + stats.dropped == 20
        assert sink.delivery.breaker.is_open
        # the 5 failures that open it, and at most one per other send already under way
        assert len(server.requests) <= 5 + 3
        assert _request_threads(sink) == []
        assert time.monotonic() - started < CEILING_S
        time.sleep(1.5)
        assert server.count_since(closed) == 0


def test_a_store_without_http_still_gets_the_assessment(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tracking URI that is no MLflow server (here a local database; Databricks too) is
    written through MLflow's API, as before: the sink's own requests are for http(s)."""
    for name, value in MLFLOW_CLIENT_ENV.items():
        monkeypatch.setenv(name, value)
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'local.db'}")
    sink = MlflowSink(request_timeout=5)
    try:  # its artifacts (the traces) in tmp_path: the default is ./mlruns, here the checkout
        artifacts = (tmp_path / "artifacts").as_uri()
        mlflow.set_experiment(experiment_id=mlflow.create_experiment("local", artifacts))
        with mlflow.start_span("request") as span:
            trace_id, span_id = span.trace_id, span.span_id
        mlflow.flush_trace_async_logging(terminate=False)
        sink.emit(linked_item("mlflow", trace_id, span_id))
        (stored,) = mlflow.MlflowClient().get_trace(trace_id).info.assessments
    finally:
        sink.close()
        mlflow.set_tracking_uri(previous)
    assert stored.value == 0.5
    assert stored.span_id == span_id


def test_an_mlflow_without_the_pieces_of_the_sinks_requests_still_gets_the_assessment(
    tracking: str,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The sink's own requests use MLflow's HTTP helper, which is not public API: an MLflow
    whose helper takes other options (here one without ``retry_codes``) is written through
    ``mlflow.log_assessment`` instead, with one INFO line, rather than fail every result."""
    import mlflow.utils.rest_utils as rest_utils

    from langchain_ragmetrics.integrations import mlflow as sink_module

    real = rest_utils.http_request

    def older(host_creds: Any, endpoint: str, method: str, **kwargs: Any) -> Any:
        if "retry_codes" in kwargs:  # what an older helper would do with it
            raise TypeError("http_request() got an unexpected keyword argument 'retry_codes'")
        return real(host_creds, endpoint, method, **kwargs)

    sink_module._can_send_itself.cache_clear()
    try:
        with monkeypatch.context() as patch:
            patch.setattr(rest_utils, "http_request", older)
            with caplog.at_level(logging.INFO, logger="langchain_ragmetrics"):
                assert sink_module._rest_store() is None
            item = one_scored_item(rag_app(judge_server, make_judge, max_retries=2), 2)
            sink = MlflowSink()
            sink.emit(item)
            sink.close()
    finally:
        sink_module._can_send_itself.cache_clear()
    (stored,) = assessments(item.links["mlflow"][0])
    assert stored.value == item.result.score
    said = [r.getMessage() for r in caplog.records if "lacks what the sink" in r.getMessage()]
    assert said == [
        "MlflowSink: this MLflow lacks what the sink's own requests use (http_request takes "
        "no ['backoff_factor', 'max_retries', 'raise_on_status', 'retry_codes', 'timeout']); "
        "assessments go through mlflow.log_assessment, with MLflow's HTTP retries inside "
        "each try"
    ]
    assert sink_module._rest_store() is not None  # the real helper: the sink's own requests


def test_assessments_go_out_several_at_a_time_and_each_lands_once(
    tracking: str,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four results, ``max_concurrency=4``: MLflow holds four POSTs at once, then all land."""
    items = [_exported_item(judge_server, make_judge, 20 + i)[0] for i in range(4)]
    hold = HoldUntil(4, "assessments", CEILING_S)
    with LossyProxy(tracking, hold) as proxy:
        mlflow.set_tracking_uri(proxy.url)
        sink = MlflowSink(max_concurrency=4, request_timeout=CEILING_S + 10)
        try:
            stats = deliver(sink, items)
        finally:
            mlflow.set_tracking_uri(tracking)
            sink.close()
        posts = proxy.requests_to("assessments")
    assert hold.all_in.is_set()  # four at once (one at a time would hold one)
    assert (stats.delivered, stats.errors, stats.dropped) == (4, 0, 0)
    assert len(posts) == 4  # one POST each: nothing retried
    for item in items:
        (stored,) = assessments(item.links["mlflow"][0])
        assert stored.value == item.result.score


def test_a_forked_workers_sink_sends_on_threads_of_its_own() -> None:
    """A sink used before a fork (a pre-forking server's warm-up): before, the worker's
    requests were handed to the parent's request threads, which do not exist there, and
    every one of them waited out its timeout; now the sink starts afresh in the worker."""
    assert delivers_after_a_fork(MlflowSink) == ["child child True", "parent again"]


def test_text_no_json_body_can_hold_is_escaped_and_delivered(
    tracking: str, judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    """A lone surrogate in a reason (text from a model or a document): before, building the
    request raised on every try, each counted as a server failure, and such results opened
    the breaker for the good ones."""
    from langchain_ragmetrics.integrations.mlflow import _classify

    app = rag_app(judge_server, make_judge, max_retries=2)
    item = one_scored_item(app, 0)
    odd = _result(item, reason="relevant \ud800 text", judge="judge-\udc80")
    stats = deliver(MlflowSink(max_concurrency=1, failure_threshold=1), [odd, odd])
    assert (stats.delivered, stats.errors) == (2, 0)
    trace_id, _ = odd.links["mlflow"]
    stored = assessments(trace_id)
    assert {f.rationale for f in stored} == {"relevant \\ud800 text"}
    assert {f.source.source_id for f in stored} == {"judge-\\udc80"}
    assert _classify(TypeError("not JSON serializable")) == "rejected"  # never retried


def test_judge_runs_are_not_traces_in_the_users_experiment(
    tracking: str, judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    """With autologging on, each judge call was a trace of its own in the experiment (the
    sample's question, contexts and answer in its preview): judge runs are never traced."""
    app = rag_app(judge_server, make_judge, max_retries=2)
    handler = online_handler(app.llm)  # the judges run on this process's threads
    with handler:
        for i in range(2):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert handler.flush(timeout=60)
    assert handler.stats.scored == 2
    mlflow.flush_trace_async_logging(terminate=False)
    traces = mlflow.search_traces(return_type="list")
    assert len(traces) == 2  # the app's two requests, and nothing else
    assert judge_server.count("RelevantSentences") == 2


def test_ainvoke_is_linked_with_the_tracer_run_inline(tracking: str) -> None:
    """What the docs tell users of ``ainvoke``: with ``run_tracer_inline=True`` MLflow's span
    is in the caller's context, so the score finds its retriever span."""
    import asyncio

    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda

    from langchain_ragmetrics import NonLLMContextPrecision

    class Found(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
            return [Document(page_content=f"doc {query}")]

        async def _aget_relevant_documents(
            self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
        ) -> list[Document]:
            return [Document(page_content=f"doc {query}")]

    mlflow.langchain.autolog(run_tracer_inline=True)
    chain = Found() | RunnableLambda(lambda docs: docs[0].page_content)
    memory = InMemorySink()
    handler = RagMetricsCallbackHandler(
        metrics=[NonLLMContextPrecision()],
        sinks=[memory],
        isolation="thread",
        reference_provider=lambda q, m: {"reference_contexts": [f"doc {q}"]},
    )
    with handler:
        asyncio.run(chain.ainvoke("q", config={"callbacks": [handler]}))
        assert handler.flush(timeout=30)
    (item,) = memory.results
    trace_id, span_id = item.links["mlflow"]
    (span,) = [s for s in read_trace(trace_id).data.spans if s.span_id == span_id]
    assert span.span_type == "RETRIEVER"
