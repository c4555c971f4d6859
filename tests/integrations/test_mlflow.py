"""MlflowSink against a real ``mlflow server``: assessments read back with MLflow's client."""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
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
from tests._support.servers import ServerProcess  # noqa: E402
from tests._support.sink_checks import (  # noqa: E402
    HoldUntil,
    deliver,
    delivers_after_a_fork,
    linked_item,
    one_scored_item,
    outage_mid_run,
)
from tests._support.status_server import StatusServer  # noqa: E402

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

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # retries are the sink's
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

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
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
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    sink = MlflowSink(backoff=0.01, max_retries=2)
    original = MlflowSink._log
    tries: list[str] = []

    def refused_once(trace: str, feedback: Any) -> Any:
        tries.append(trace)
        if len(tries) == 1:
            raise ConnectionRefusedError("refused")  # never reached the server
        return original(trace, feedback)

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
    original = MlflowSink._log

    def counted(trace_id: str, feedback: Any) -> Any:
        calls.append(time.monotonic())
        return original(trace_id, feedback)

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
        # A refused connection fails at once, not after MLflow's own retries; the timeout
        # is long so a slow answer of the fresh server before the kill is not a failure.
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


@pytest.mark.parametrize(
    ("status", "payload", "match", "opens"),
    [
        # refused: every request would meet it
        (403, {"error_code": "PERMISSION_DENIED", "message": "m"}, "PERMISSION_DENIED", True),
        (401, {"error_code": "UNAUTHENTICATED", "message": "m"}, "UNAUTHENTICATED", True),
        # a route this server lacks, answered by the web server or a proxy (no JSON body)
        (404, _PAGE.format("Not Found"), "error code 404", True),
        (405, _PAGE.format("Method Not Allowed"), "error code 405", True),
        (410, _PAGE.format("Gone"), "error code 410", True),
        # rejected: MLflow (or what is in front of it) is up, this one request is wrong
        (400, {"error_code": "INVALID_PARAMETER_VALUE", "message": "m"}, "INVALID_PARAM", False),
        (413, _PAGE.format("Request Entity Too Large"), "error code 413", False),
    ],
    ids=["403", "401", "404-page", "405-page", "410-page", "400", "413-page"],
)
def test_a_refused_or_rejected_assessment_fails_at_once(
    status: int, payload: object, match: str, opens: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No retry for an answer retrying cannot change; only a refusal counts as an outage."""
    for name, value in MLFLOW_CLIENT_ENV.items():
        monkeypatch.setenv(name, value)
    with StatusServer(status, payload) as server:
        previous = mlflow.get_tracking_uri()
        mlflow.set_tracking_uri(server.url)
        sink = MlflowSink(max_retries=3, backoff=0.01, failure_threshold=2, cooldown=60)
        try:
            with pytest.raises(Exception, match=match):
                sink.emit(_linked_item())
            assert _posts(server) == 1  # not retried
            assert not sink.delivery.breaker.is_open  # one of the two in a row
            with pytest.raises(Exception, match=match):
                sink.emit(_linked_item())
            assert _posts(server) == 2
            assert sink.delivery.breaker.is_open is opens
        finally:
            mlflow.set_tracking_uri(previous)
            sink.close()


def test_a_bare_server_error_is_still_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 502 page (no JSON body) reads like a 405 page to MLflow's client: it stays retried."""
    for name, value in MLFLOW_CLIENT_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # count the sink's tries only
    with StatusServer(502, _PAGE.format("Bad Gateway")) as server:
        previous = mlflow.get_tracking_uri()
        mlflow.set_tracking_uri(server.url)
        sink = MlflowSink(max_retries=2, backoff=0.01, failure_threshold=5, cooldown=60)
        try:
            with pytest.raises(Exception, match="502"):
                sink.emit(_linked_item())
            # the try, then two retries; each retry first looks whether the try was stored
            # (a 502 may come after MLflow took it), and that look meets the 502 too
            assert [method for method, _ in server.requests] == ["POST", "GET", "GET"]
        finally:
            mlflow.set_tracking_uri(previous)
            sink.close()


def _posts(server: StatusServer) -> int:
    return sum(m == "POST" and "assessments" in p for m, p in server.requests)


def test_assessments_go_out_several_at_a_time_and_each_lands_once(
    tracking: str,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four results, ``max_concurrency=4``: MLflow holds four POSTs at once, then all land."""
    items = [_exported_item(judge_server, make_judge, 20 + i)[0] for i in range(4)]
    hold = HoldUntil(4, "assessments", CEILING_S)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
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
