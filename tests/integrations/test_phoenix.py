"""PhoenixSink against a real Phoenix server: annotations read back with Phoenix's client."""

from __future__ import annotations

import json
import logging
import math
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

from tests._support.concurrency import wait_until
from tests._support.extras import require_extra

require_extra("phoenix.client", "phoenix")
require_extra("openinference.instrumentation.langchain", "phoenix")
require_extra("phoenix.server", "phoenix")  # the server the tests start (arize-phoenix)

import httpx  # noqa: E402
from phoenix.client import Client  # noqa: E402

from langchain_ragmetrics import (  # noqa: E402
    InMemorySink,
    OnlineResult,
    RagMetricsCallbackHandler,
)
from langchain_ragmetrics.callbacks import ProcessIsolation  # noqa: E402
from langchain_ragmetrics.integrations.phoenix import PhoenixSink  # noqa: E402
from tests._support.openai_server import JudgeServer  # noqa: E402
from tests._support.phoenix_setup import (  # noqa: E402
    instrumented,
    phoenix_child_setup,
    phoenix_server,
    start_phoenix_server,
)
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
from tests._support.status_server import StatusServer  # noqa: E402

__all__ = ["instrumented", "phoenix_server"]

JudgeFactory = Callable[..., ChatOpenAI]
CEILING_S = 20.0
"""Generous bound for 'did not hang'."""


def annotations(url: str, span_id: str) -> list[dict[str, Any]]:
    return list(
        Client(base_url=url).spans.get_span_annotations(
            span_ids=[span_id], project_identifier="default"
        )
    )


def spans_by_id(url: str) -> dict[str, Any]:
    spans = Client(base_url=url).spans.get_spans(project_identifier="default", limit=1000)
    return {span["context"]["span_id"]: span for span in spans}


def test_scores_land_on_the_retriever_span_of_their_own_request(
    phoenix_server: ServerProcess,
    instrumented: Any,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
) -> None:
    app = rag_app(judge_server, make_judge, max_retries=2)
    memory = InMemorySink()
    handler = online_handler(
        app.llm, sinks=[memory, PhoenixSink(endpoint=phoenix_server.url, pass_threshold=0.4)]
    )
    with handler, ThreadPoolExecutor(4) as pool:
        list(
            pool.map(
                lambda i: app.chain.invoke(question(i), config={"callbacks": [handler]}),
                range(8),
            )
        )
        assert handler.flush(timeout=90)
    results = memory.results
    assert len(results) == 8
    assert handler.stats.sinks["PhoenixSink"].delivered == 8
    stored = spans_by_id(phoenix_server.url)
    for item in results:
        trace_id, span_id = item.links["openinference"]
        span = stored[span_id]
        assert span["context"]["trace_id"] == trace_id
        assert span["span_kind"] == "RETRIEVER"
        assert span["attributes"]["input.value"] == item.query  # its own request
        (annotation,) = annotations(phoenix_server.url, span_id)
        assert annotation["name"] == "context_relevance"
        assert annotation["annotator_kind"] == "LLM"
        assert annotation["result"]["score"] == item.result.score
        assert annotation["result"]["label"] == "pass"
        assert annotation["result"]["explanation"] == item.result.reason
        assert annotation["metadata"]["judge"] == "judge-model"
        assert annotation["metadata"]["run_id"] == str(item.run_id)
        assert annotation["metadata"]["details"] == item.result.details
    assert len({r.links["openinference"][0] for r in results}) == 8


def test_a_failed_result_is_replaced_by_a_later_success(
    phoenix_server: ServerProcess,
    instrumented: Any,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
) -> None:
    item = one_scored_item(rag_app(judge_server, make_judge, max_retries=2), 3)
    span_id = item.links["openinference"][1]
    assert span_id is not None
    sink = PhoenixSink(endpoint=phoenix_server.url)
    failed = item.model_copy(
        update={
            "result": item.result.model_copy(
                update={"score": math.nan, "error": "TimeoutError: judge timed out"}
            )
        }
    )
    sink.emit(failed)
    (error,) = annotations(phoenix_server.url, span_id)
    assert error["result"]["label"] == "error"
    assert error["result"]["explanation"] == "TimeoutError: judge timed out"
    assert error["metadata"]["error_type"] == "TimeoutError"
    sink.emit(item)
    sink.close()
    (success,) = annotations(phoenix_server.url, span_id)
    assert success["result"]["score"] == item.result.score
    assert success["result"]["label"] is None


def test_a_reply_lost_after_phoenix_stored_the_annotation_leaves_one_annotation(
    phoenix_server: ServerProcess,
    instrumented: Any,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
) -> None:
    """The retry of a stored annotation whose reply a gateway lost: Phoenix upserts it."""
    item = one_scored_item(rag_app(judge_server, make_judge, max_retries=2), 5)
    span_id = item.links["openinference"][1]
    assert span_id is not None
    # Phoenix stores exported spans in the background: until the span is stored, an
    # annotation is answered 404 (and retried), which is not what this test is about.
    wait_until(lambda: span_id in spans_by_id(phoenix_server.url), "Phoenix to store the span")
    lost_once: list[str] = []

    def answer(method: str, path: str) -> int | None:
        if method == "POST" and "span_annotations" in path and not lost_once:
            lost_once.append(path)
            return 502  # stored by Phoenix, reported to the client as failed
        return None

    with LossyProxy(phoenix_server.url, answer) as proxy:
        sink = PhoenixSink(endpoint=proxy.url, backoff=0.01)
        sink.emit(item)
        sink.close()
        posts = proxy.requests_to("span_annotations")
    assert [status for _, _, status in posts] == [200, 200]  # stored, then stored again
    (annotation,) = annotations(phoenix_server.url, span_id)  # one: the second replaced it
    assert annotation["result"]["score"] == item.result.score


def test_without_an_openinference_span_results_are_skipped_with_one_warning(
    phoenix_server: ServerProcess,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    assert not LangChainInstrumentor().is_instrumented_by_opentelemetry
    app = rag_app(judge_server, make_judge, max_retries=2)
    handler = online_handler(
        app.llm, sinks=[InMemorySink(), PhoenixSink(endpoint=phoenix_server.url)]
    )
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"), handler:
        for i in range(3):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert handler.flush(timeout=60)
    figures = handler.stats.sinks["PhoenixSink"]
    assert (figures.skipped, figures.delivered, figures.errors) == (3, 0, 0)
    assert len([r for r in caplog.records if "no OpenInference span" in r.getMessage()]) == 1


def _item(span_id: str) -> OnlineResult:
    return linked_item("openinference", "0" * 32, span_id)


def test_a_span_not_stored_yet_is_retried_then_counted(phoenix_server: ServerProcess) -> None:
    """When the wait runs out the error names the span, the wait and Phoenix's answer:
    before, it was httpx's "Client error '404 Not Found' for url ...", read as a wrong URL."""
    sink = PhoenixSink(
        endpoint=phoenix_server.url, not_found_wait=1.0, backoff=0.1, failure_threshold=1
    )
    span_id = f"{uuid.uuid4().int & (2**64 - 1):016x}"
    with pytest.raises(LookupError, match="not_found_wait=1 s") as raised:
        sink.emit(_item(span_id))
    message = str(raised.value)
    assert f"no span {span_id}" in message
    assert f"Spans with IDs {span_id} do not exist" in message  # Phoenix's own words
    assert phoenix_server.url in message
    assert not sink.delivery.breaker.is_open  # Phoenix answered: it is up
    sink.close()


@pytest.mark.parametrize(
    "variable", ["PHOENIX_ENDPOINT", "PHOENIX_COLLECTOR_ENDPOINT", "PHOENIX_BASE_URL"]
)
def test_the_environment_configures_the_sink_and_the_option_overrides_it(
    variable: str, phoenix_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, phoenix_server.url)
    assert str(PhoenixSink().client._client.base_url).rstrip("/") == phoenix_server.url
    other = "http://127.0.0.1:9"
    assert str(PhoenixSink(endpoint=other).client._client.base_url).rstrip("/") == other


def test_isolated_mode_scores_land_on_the_parent_process_spans(
    phoenix_server: ServerProcess,
    instrumented: Any,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
) -> None:
    app = rag_app(judge_server, make_judge, max_retries=2)
    setup = partial(phoenix_child_setup, judge_server.base_url, phoenix_server.url)
    handler = RagMetricsCallbackHandler(isolation=ProcessIsolation(setup=setup, niceness=0))
    for i in range(10, 13):
        app.chain.invoke(question(i), config={"callbacks": [handler]})
    assert handler.flush(timeout=120)
    assert handler.close(timeout=60)
    assert handler.stats.sinks["PhoenixSink"].delivered == 3
    stored = spans_by_id(phoenix_server.url)
    asked = {question(i) for i in range(10, 13)}
    found = {
        span["attributes"]["input.value"]
        for span_id, span in stored.items()
        if span["span_kind"] == "RETRIEVER"
        and span["attributes"]["input.value"] in asked
        and annotations(phoenix_server.url, span_id)
    }
    assert found == asked


def test_server_killed_mid_run_nothing_raised_everything_counted(
    tmp_path: Any,
    instrumented: Any,
    phoenix_server: ServerProcess,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
) -> None:
    _, exporter = instrumented
    server = start_phoenix_server(tmp_path)
    exporter.route(server.url)
    try:
        app = rag_app(judge_server, make_judge, max_retries=2)
        sink = PhoenixSink(
            endpoint=server.url,
            request_timeout=30,  # a slow answer of the fresh server is not a failure
            max_retries=1,
            backoff=0.05,
            cooldown=60,
            max_concurrency=1,
        )

        def stop() -> None:
            server.kill()
            exporter.route(phoenix_server.url)  # the app's own spans: not what is tested

        outage_mid_run(app, sink, "PhoenixSink", stop)
        assert sink.delivery.breaker.is_open
    finally:
        exporter.route(phoenix_server.url)
        server.kill()


def test_a_server_that_never_answers_costs_one_bounded_wait() -> None:
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        sink = PhoenixSink(endpoint=url, request_timeout=1, max_retries=0, failure_threshold=1)
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=f"no answer from {url}"):
            sink.emit(_item("00000000000000ab"))
        with pytest.raises(Exception, match="circuit open"):
            sink.emit(_item("00000000000000ab"))
        closed = threading.Thread(target=sink.close)
        closed.start()
        closed.join(5)
        assert not closed.is_alive()
        assert time.monotonic() - started < CEILING_S


def test_cookbook_script_annotates_phoenix_spans(
    phoenix_server: ServerProcess, tmp_path: Any
) -> None:
    from tests._support.examples import REPO, run_example

    done = run_example(
        cwd=tmp_path,
        script=REPO / "cookbook" / "11_phoenix_sink.py",
        env={"PHOENIX_COLLECTOR_ENDPOINT": phoenix_server.url},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("context_relevance=")]
    assert len(lines) == 3, done.stdout
    assert "annotations sent: 3" in done.stdout


def test_docs_page_example_runs(phoenix_server: ServerProcess, tmp_path: Any) -> None:
    from tests._support.examples import REPO, python_blocks, run_example

    (block,) = python_blocks(REPO / "docs" / "integrations" / "phoenix.md")
    done = run_example(
        cwd=tmp_path,
        code=block,
        env={"PHOENIX_COLLECTOR_ENDPOINT": phoenix_server.url},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "delivered=1 skipped=0 errors=0 dropped=0 pending=0" in done.stdout


@pytest.mark.parametrize(
    ("status", "opens"),
    [
        (403, True),  # refused: every request would meet it
        (401, True),
        (405, True),  # a wrong path (behind a proxy): every request would meet it too
        (422, False),  # rejected: Phoenix is up
    ],
)
def test_a_refused_or_rejected_annotation_fails_at_once(status: int, opens: bool) -> None:
    """No retry for an answer retrying cannot change; only a refusal counts as an outage."""
    with StatusServer(status, {"detail": "scripted"}) as server:
        sink = PhoenixSink(
            endpoint=server.url, max_retries=3, backoff=0.01, failure_threshold=2, cooldown=60
        )
        try:
            for emitted in (1, 2):
                with pytest.raises(httpx.HTTPStatusError, match=str(status)):
                    sink.emit(_item("00000000000000ab"))
                assert sum(m == "POST" for m, _ in server.requests) == emitted  # not retried
            assert sink.delivery.breaker.is_open is opens  # two in a row, when they count
        finally:
            sink.close()


def test_annotations_go_out_several_at_a_time_and_each_lands_once(
    phoenix_server: ServerProcess,
    instrumented: Any,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
) -> None:
    """Four results, ``max_concurrency=4``: Phoenix holds four POSTs at once, then all land."""
    app = rag_app(judge_server, make_judge, max_retries=2)
    items = [one_scored_item(app, 20 + i) for i in range(4)]
    spans = {item.links["openinference"][1] for item in items}
    # Spans are exported in the background: wait until stored (else the first POST may
    # meet a 404 and be retried, and the one-POST-each check below would fail for that).
    wait_until(lambda: spans <= set(spans_by_id(phoenix_server.url)), "the 4 spans stored")
    hold = HoldUntil(4, "annotations", CEILING_S)
    with LossyProxy(phoenix_server.url, hold) as proxy:
        sink = PhoenixSink(endpoint=proxy.url, max_concurrency=4, request_timeout=CEILING_S + 10)
        try:
            stats = deliver(sink, items)
        finally:
            sink.close()
        posts = proxy.requests_to("annotations")
    assert hold.all_in.is_set()  # four at once (one at a time would hold one)
    assert (stats.delivered, stats.errors, stats.dropped) == (4, 0, 0)
    assert [status for _, _, status in posts] == [200] * 4  # one POST each: none retried
    for item in items:
        (annotation,) = annotations(phoenix_server.url, item.links["openinference"][1])
        assert annotation["result"]["score"] == item.result.score


def test_a_forked_workers_sink_sends_on_threads_of_its_own() -> None:
    """A sink used before a fork (a pre-forking server's warm-up): before, the worker's
    requests were handed to the parent's request threads, which do not exist there, and
    every one of them waited out its timeout; now the sink starts afresh in the worker."""
    assert delivers_after_a_fork(PhoenixSink) == ["child child True", "parent again"]


def test_text_and_numbers_no_json_body_can_hold_are_made_plain_and_delivered(
    phoenix_server: ServerProcess,
    instrumented: Any,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
) -> None:
    """A lone surrogate in a reason and a NaN in the details: before, building the request
    raised on every try, each counted as a server failure (the breaker opened for the good
    results)."""
    from langchain_ragmetrics.integrations.phoenix import _classify

    app = rag_app(judge_server, make_judge, max_retries=2)
    item = one_scored_item(app, 0)
    changes = {"reason": "relevant \ud800 text", "details": {"x": math.nan, "kept": [1]}}
    odd = item.model_copy(update={"result": item.result.model_copy(update=changes)})
    sink = PhoenixSink(endpoint=phoenix_server.url, max_concurrency=1, failure_threshold=1)
    stats = deliver(sink, [odd, odd])
    assert (stats.delivered, stats.errors) == (2, 0)
    _, span_id = odd.links["openinference"]
    (annotation,) = annotations(phoenix_server.url, span_id)  # the second replaced the first
    assert annotation["result"]["explanation"] == "relevant \\ud800 text"
    assert annotation["metadata"]["details"] == {"x": None, "kept": [1]}
    assert _classify(UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogate")) == "rejected"


def test_judge_runs_are_not_spans_in_phoenix(
    phoenix_server: ServerProcess,
    instrumented: Any,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
) -> None:
    """With OpenInference instrumenting LangChain, each judge call was exported as a trace
    of its own (named ``ragmetrics:<metric>``): judge runs are never traced."""
    app = rag_app(judge_server, make_judge, max_retries=2)
    memory = InMemorySink()
    handler = online_handler(app.llm, sinks=[memory, PhoenixSink(endpoint=phoenix_server.url)])
    with handler:
        app.chain.invoke(question(31), config={"callbacks": [handler]})
        assert handler.flush(timeout=90)
    (item,) = memory.results
    assert "openinference" in item.links  # the app's request was traced
    names = {span["name"] for span in spans_by_id(phoenix_server.url).values()}
    assert not any(name.startswith("ragmetrics:") for name in names), names
    assert handler.stats.sinks["PhoenixSink"].delivered == 1  # the app's own spans are there


@pytest.mark.parametrize(
    ("detail", "breaker_opens"),
    [
        ({"detail": "Not Found"}, True),  # a proxy's or a wrong route's 404: no span named
        # a gateway's JSON echoing the path, an HTML page with a <span>: "span" is no proof
        ({"error": "Not Found", "path": "/v1/span_annotations"}, True),
        ("<html><body><span>Page not found</span></body></html>", True),
        ({"detail": "Span annotations are not found"}, True),  # not Phoenix's words
        # Phoenix's own answer (plain text; JSON's "detail" too): not stored yet
        ("Spans with IDs 00000000000000ff do not exist.", False),
        ({"detail": "Spans with IDs 00000000000000ff do not exist."}, False),
    ],
)
def test_a_404_that_names_no_span_fails_at_once_and_opens_the_breaker(
    detail: object, breaker_opens: bool
) -> None:
    """A 404 that is not Phoenix's "Spans with IDs ... do not exist" (a wrong base path
    behind a proxy) is not "span not stored yet": before, each result was retried for
    ``not_found_wait`` and the breaker never opened, so the outbox filled while every
    request failed; a body that merely held the word "span" was taken for Phoenix's."""
    with StatusServer(404, detail) as server:
        sink = PhoenixSink(
            endpoint=server.url,
            not_found_wait=0.2,
            backoff=0.01,
            failure_threshold=3,
            max_concurrency=1,
        )
        items = [linked_item("openinference", "ab" * 16, f"{i:016x}") for i in range(5)]
        stats = deliver(sink, items)
        sink.close()
        posts = len(server.requests)
    assert stats.delivered == 0
    assert sink.delivery.breaker.is_open is breaker_opens
    if breaker_opens:  # each failed at once, the breaker refused the last two unsent
        assert (stats.errors, stats.dropped, posts) == (3, 2, 3)
    else:  # each "not stored yet" retried for its 0.2 s
        assert (stats.errors, stats.dropped) == (5, 0)
        assert posts > 5


def test_a_retrieval_whose_trace_the_sampler_dropped_is_skipped(
    phoenix_server: ServerProcess,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
) -> None:
    """A sampler that keeps nothing: the spans are never exported. Before, each result was
    linked to its dropped span, retried "not found" for ``not_found_wait`` and counted an
    error; a retrieval OpenInference did not trace is skipped."""
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    provider = TracerProvider(sampler=ALWAYS_OFF)
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        app = rag_app(judge_server, make_judge, max_retries=2)
        memory = InMemorySink()
        sink = PhoenixSink(endpoint=phoenix_server.url, not_found_wait=0.5, backoff=0.05)
        handler = online_handler(app.llm, sinks=[memory, sink])
        with handler:
            for i in range(2):
                app.chain.invoke(question(40 + i), config={"callbacks": [handler]})
            assert handler.flush(timeout=60)
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    figures = handler.stats.sinks["PhoenixSink"]
    assert (figures.skipped, figures.delivered, figures.errors) == (2, 0, 0)
    assert [item.links.get("openinference") for item in memory.results] == [None, None]


@pytest.mark.parametrize("status", [429, 503])
def test_a_retry_waits_at_least_the_retry_after_phoenix_asked_for(
    status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the retry came after ``backoff`` alone (0.01 s), whatever Retry-After said.
    The waits are recorded, not slept: nothing here depends on the clock."""
    with StatusServer(status, {"detail": "slow down"}, {"Retry-After": "5"}) as server:
        sink = PhoenixSink(endpoint=server.url, backoff=0.01, max_retries=1)
        waits: list[float] = []
        monkeypatch.setattr(sink.delivery, "_pause", lambda seconds, _cause: waits.append(seconds))
        try:
            with pytest.raises(httpx.HTTPStatusError, match=str(status)):
                sink.emit(_item("00000000000000ab"))
        finally:
            sink.close()
        assert len(server.requests) == 2
    assert len(waits) == 1
    assert waits[0] >= 5


def test_an_infinite_score_is_an_error_annotation_and_never_trips_the_breaker(
    phoenix_server: ServerProcess,
    instrumented: Any,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
) -> None:
    """A custom metric's ``inf``: before, building the request raised "Out of range float
    values are not JSON compliant", counted as a server failure, so two of them opened the
    breaker and the good results after them were dropped."""
    from langchain_ragmetrics.integrations.phoenix import _classify

    item = one_scored_item(rag_app(judge_server, make_judge, max_retries=2), 6)
    span_id = item.links["openinference"][1]
    assert span_id is not None
    infinite = item.model_copy(
        update={"result": item.result.model_copy(update={"score": math.inf})}
    )
    sink = PhoenixSink(
        endpoint=phoenix_server.url, max_retries=0, failure_threshold=2, max_concurrency=1
    )
    stats = deliver(sink, [infinite, infinite])
    sink.close()
    assert (stats.delivered, stats.errors, stats.dropped) == (2, 0, 0)
    assert not sink.delivery.breaker.is_open
    (annotation,) = annotations(phoenix_server.url, span_id)
    assert annotation["result"]["label"] == "error"
    assert annotation["result"]["score"] is None
    assert "not a finite number (inf)" in annotation["result"]["explanation"]
    assert annotation["metadata"]["error_type"] == "ValueError"
    # an encoding error of the client's own is the request's fault, not the server's
    assert _classify(ValueError("Out of range float values are not JSON compliant")) == "rejected"
    assert _classify(json.JSONDecodeError("Expecting value", "<html>", 0)) == "failed"


def test_an_unreachable_endpoint_is_named_in_the_error_and_the_breaker_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: "ConnectError('[Errno 111] Connection refused')" and "PhoenixSink: 1 failed
    requests in a row", neither saying where. The URL's credentials are never shown."""
    where = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    endpoint = where.replace("http://", "http://user:s3cret@")
    sink = PhoenixSink(endpoint=endpoint, max_retries=0, failure_threshold=1, cooldown=60)
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        with pytest.raises(ConnectionError, match=f"could not reach {where}") as raised:
            sink.emit(_item("00000000000000ab"))
        sink.close()
    (warning,) = [r.getMessage() for r in caplog.records if "in a row" in r.getMessage()]
    assert where in warning
    assert "s3cret" not in str(raised.value) + warning


def test_request_timeout_is_the_http_timeout_of_the_client_the_sink_builds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, Phoenix's client kept its own 30 s read timeout: ``request_timeout=60`` failed
    at 30 s, and the default 10 s left a request holding its thread for up to 30 s."""
    monkeypatch.setenv("PHOENIX_CLIENT_HEADERS", "x-team=rag")
    for timeout in (60, 2.5):
        http = PhoenixSink(endpoint="http://127.0.0.1:9", request_timeout=timeout).client._client
        assert http.timeout == httpx.Timeout(timeout)
        assert http.headers["x-team"] == "rag"  # Phoenix's own environment still applies


@pytest.mark.parametrize("answer", [{"data": []}, {"data": [{}]}])
def test_an_answer_without_the_annotation_id_is_not_a_delivery(answer: object) -> None:
    """A 200 without the stored annotation's id (a catch-all gateway, another service):
    before, counted as delivered though nothing was stored."""
    with StatusServer(200, answer) as server:
        sink = PhoenixSink(endpoint=server.url, max_retries=0, max_concurrency=1)
        try:
            stats = deliver(sink, [_item("00000000000000ab")])
            with pytest.raises(RuntimeError, match=f"{server.url} answered 200 without the"):
                sink.emit(_item("00000000000000ab"))
        finally:
            sink.close()
    assert (stats.delivered, stats.errors) == (0, 1)
