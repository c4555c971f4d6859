"""LangSmith feedback through the real ``langsmith.Client`` against the loopback stub."""

import threading
import uuid
from collections.abc import Callable
from typing import Any

import langsmith
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableLambda
from langchain_core.tracers import LangChainTracer
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import (
    ContextPrecision,
    ContextRecall,
    ContextRelevance,
    LangSmithFeedbackSink,
)
from langchain_ragmetrics._ids import feedback_id
from langchain_ragmetrics._langsmith_feedback import classify_langsmith_error
from langchain_ragmetrics.callbacks import langsmith_feedback
from tests._support.clock import HandClock
from tests._support.langsmith_stub import LangSmithStub, project_id_for
from tests._support.openai_server import JudgeServer, reply_error
from tests._support.rag import FAST, online_handler, question, rag_app, rag_router
from tests._support.sink_checks import run_item

JudgeFactory = Callable[..., ChatOpenAI]


def retriever_run(stub: LangSmithStub, trace_id: uuid.UUID) -> dict[str, Any]:
    (run,) = [
        r
        for r in stub.wait_for_runs(name="VectorStoreRetriever")
        if r.get("trace_id") == str(trace_id)
    ]
    return run


def test_feedback_payloads_alongside_langchains_tracer(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_client: langsmith.Client,
    langsmith_stub: LangSmithStub,
) -> None:
    app = rag_app(judge_server, make_judge)
    langsmith_stub.create_project("app")  # the app has traced to it before
    tracer = LangChainTracer(project_name="app", client=langsmith_client)
    sink = LangSmithFeedbackSink(langsmith_client, project_name="app")
    metrics = [ContextRelevance(llm=app.llm, retry=FAST), ContextPrecision(llm=app.llm)]
    roots = [uuid.uuid4() for _ in range(3)]
    with online_handler(app.llm, metrics=metrics, sinks=[sink]) as handler:
        for i, root in enumerate(roots):
            app.chain.invoke(question(i), config={"callbacks": [tracer, handler], "run_id": root})
        assert handler.flush(10)  # also flushes the client's background queue
    records = langsmith_stub.feedback_records()
    assert len(records) == 6  # one per metric per scored retrieval
    assert {transport for transport, _ in records} == {"multipart"}  # batched: trace_id set
    first = [p for _, p in records if p["trace_id"] == str(roots[0])]
    assert {p["key"] for p in first} == {"context_relevance", "context_precision"}
    relevance = next(p for p in first if p["key"] == "context_relevance")
    run = retriever_run(langsmith_stub, roots[0])
    assert relevance["run_id"] == run["id"]  # the traced retriever run, same id
    assert relevance["id"] == str(feedback_id(run["id"], "context_relevance"))  # stable id
    assert relevance["score"] == 0.5
    assert relevance["comment"].startswith("1 of 2 context sentences")
    assert relevance["session_id"] == project_id_for("app")
    source = relevance["feedback_source"]
    assert source["type"] == "model"
    assert source["metadata"]["judge"] == "judge-model"
    assert source["metadata"]["metric"] == "context_relevance"
    assert source["metadata"]["details"]["sentence_count"] == 2
    assert source["metadata"]["retriever"] == "VectorStoreRetriever"
    # The project id was resolved once, not once per feedback.
    lookups = [r for r in langsmith_stub.requests_to("GET", "/sessions") if r.query.get("name")]
    assert len(lookups) == 1


def test_feedback_on_the_root_run(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_client: langsmith.Client,
    langsmith_stub: LangSmithStub,
) -> None:
    app = rag_app(judge_server, make_judge)
    project = langsmith_stub.create_project("app")  # the app has traced to it before
    sink = LangSmithFeedbackSink(langsmith_client, run="root", project_name="app")
    root = uuid.uuid4()
    with online_handler(app.llm, sinks=[sink]) as handler:
        app.chain.invoke(question(1), config={"callbacks": [handler], "run_id": root})
        assert handler.flush(10)
    (feedback,) = langsmith_stub.feedback()
    assert feedback["run_id"] == feedback["trace_id"] == str(root)
    assert feedback["session_id"] == project


def test_failed_results_are_flagged_and_skipped_ones_not_sent(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_client: langsmith.Client,
    langsmith_stub: LangSmithStub,
) -> None:
    app = rag_app(judge_server, make_judge)
    judge_server.script = rag_router(RelevantSentences=lambda req: reply_error(500))
    metrics = [ContextRelevance(llm=app.llm, retry=FAST.model_copy(update={"max_retries": 0}))]
    metrics.append(ContextRecall(llm=app.llm))  # no reference: skipped
    langsmith_stub.create_project("app")  # the app has traced to it before
    sink = LangSmithFeedbackSink(langsmith_client, project_name="app")
    with online_handler(app.llm, metrics=metrics, sinks=[sink]) as handler:
        app.chain.invoke(question(1), config={"callbacks": [handler]})
        assert handler.flush(10)
        assert (handler.stats.failed, handler.stats.skipped) == (1, 1)
    (feedback,) = langsmith_stub.feedback()
    assert feedback["key"] == "context_relevance"
    assert feedback["score"] is None
    assert feedback["error"] is True
    assert feedback["comment"].startswith("error: ")
    assert "500" in feedback["feedback_source"]["metadata"]["error"]


def test_trace_id_is_found_when_the_handler_sits_below_the_root(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_client: langsmith.Client,
    langsmith_stub: LangSmithStub,
) -> None:
    app = rag_app(judge_server, make_judge)
    tracer = LangChainTracer(project_name="app", client=langsmith_client)
    sink = LangSmithFeedbackSink(langsmith_client, project_name="app")
    outer_root = uuid.uuid4()
    with online_handler(app.llm, sinks=[sink]) as handler:
        monitored = app.chain.with_config(callbacks=[handler])
        outer = RunnableLambda(monitored.invoke).with_config(run_name="request")
        outer.invoke(question(2), config={"callbacks": [tracer], "run_id": outer_root})
        assert handler.flush(10)
    (transport, feedback) = langsmith_stub.feedback_records()[0]
    assert transport == "multipart"
    assert feedback["trace_id"] == str(outer_root)
    assert feedback["run_id"] == retriever_run(langsmith_stub, outer_root)["id"]


def test_without_a_trace_id_feedback_is_posted_directly(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_client: langsmith.Client,
    langsmith_stub: LangSmithStub,
) -> None:
    app = rag_app(judge_server, make_judge)
    langsmith_stub.feedback_needs_run = False  # the run is never traced here
    langsmith_stub.create_project("app")  # the app has traced to it before
    sink = LangSmithFeedbackSink(langsmith_client, project_name="app")
    with online_handler(app.llm, sinks=[sink]) as handler:
        monitored = app.chain.with_config(callbacks=[handler])
        # An untraced outer runnable (with some other callback, so runs are linked to it):
        # the handler sees a parent it cannot place, and cannot know the real trace id.
        outer = RunnableLambda(monitored.invoke)
        outer.invoke(question(3), config={"callbacks": [BaseCallbackHandler()]})
        assert handler.flush(10)
    ((transport, feedback),) = langsmith_stub.feedback_records()
    assert transport == "POST /feedback"
    assert "trace_id" not in feedback or feedback["trace_id"] is None


def test_a_sink_given_api_url_and_api_key_builds_its_client_from_them(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_stub: LangSmithStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("API_KEY", "ENDPOINT"):  # nothing in the environment
        monkeypatch.delenv(f"LANGSMITH_{name}", raising=False)
        monkeypatch.delenv(f"LANGCHAIN_{name}", raising=False)
    app = rag_app(judge_server, make_judge)
    langsmith_stub.feedback_needs_run = False
    langsmith_stub.create_project("app")
    sink = LangSmithFeedbackSink(api_url=langsmith_stub.url, api_key="key-1", project_name="app")
    assert sink.enabled
    with online_handler(app.llm, sinks=[sink]) as handler:
        app.chain.invoke(question(1), config={"callbacks": [handler]})
        assert handler.flush(10)
    assert handler.stats.sinks["LangSmithFeedbackSink"].delivered == 1
    posts = langsmith_stub.requests_to("POST", "/feedback")
    assert [r.headers.get("x-api-key") for r in posts] == ["key-1"]


def test_a_client_and_credentials_for_another_are_refused_by_name(
    langsmith_client: langsmith.Client,
) -> None:
    with pytest.raises(ValueError, match=r"`client` or `api_url` / `api_key`"):
        LangSmithFeedbackSink(langsmith_client, api_key="key-1")
    with pytest.raises(ValueError, match=r"`client` or `api_url` / `api_key`"):
        LangSmithFeedbackSink(langsmith_client, api_url="http://127.0.0.1:1")
    assert LangSmithFeedbackSink(langsmith_client, api_key=" ").enabled  # blank: not given


def test_a_blank_api_key_counts_as_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("API_KEY", "ENDPOINT"):
        monkeypatch.delenv(f"LANGSMITH_{name}", raising=False)
        monkeypatch.delenv(f"LANGCHAIN_{name}", raising=False)
    assert not LangSmithFeedbackSink(api_key="  ").enabled  # disabled, as with no key at all
    monkeypatch.setenv("LANGSMITH_API_KEY", "from-env")
    sink = LangSmithFeedbackSink(api_key="", api_url=" ")
    assert (sink.enabled, sink._api_key, sink._api_url) == (True, "from-env", None)


def test_a_project_not_there_yet_is_waited_for_and_feedback_never_goes_without_it(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_client: langsmith.Client,
    langsmith_stub: LangSmithStub,
    recwarn: pytest.WarningsRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LangSmith requires the project of feedback on a run: a project its first traces have
    not created yet is looked up again, with backoff, as a run not ingested yet."""
    monkeypatch.setattr(langsmith_feedback, "_MAX_MISS_WAIT", 0.0)  # every retry looks
    app = rag_app(judge_server, make_judge)
    project = langsmith_stub.create_project("app")
    langsmith_stub.fail("GET /sessions", 404, times=2)  # the first two lookups: not there yet
    sink = LangSmithFeedbackSink(langsmith_client, project_name="app", backoff=0.01)
    with online_handler(app.llm, sinks=[sink]) as handler:
        app.chain.invoke(question(1), config={"callbacks": [handler]})
        assert handler.flush(10)
        assert handler.stats.sink_errors == 0
    lookups = [r.status for r in langsmith_stub.requests_to("GET", "/sessions")]
    assert lookups == [404, 404, 200]
    (feedback,) = langsmith_stub.feedback()
    assert feedback["session_id"] == project
    assert sink.project_id() == uuid.UUID(project)  # kept: no further lookup
    assert len(langsmith_stub.requests_to("GET", "/sessions")) == 3
    assert not [w for w in recwarn if "session_id" in str(w.message)]
    assert not sink.breaker.is_open


def test_a_project_that_never_appears_fails_the_result_by_its_name(
    langsmith_env: LangSmithStub,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(langsmith_feedback, "_MAX_MISS_WAIT", 0.0)  # every retry looks
    langsmith_env.feedback_needs_run = False
    sink = LangSmithFeedbackSink(
        project_name="nowhere", backoff=0.01, ingest_retries=2, failure_threshold=1
    )
    with pytest.raises(langsmith.utils.LangSmithNotFoundError, match="'nowhere' not found"):
        sink.emit(run_item(uuid.uuid4()))
    assert len(langsmith_env.requests_to("GET", "/sessions")) == 3  # 1 + ingest_retries
    assert langsmith_env.requests_to("POST", "/feedback") == []  # never without a project
    assert not sink.breaker.is_open  # LangSmith answered: not an outage
    assert sink.project_id() is None
    warned = [r for r in caplog.records if r.levelname == "WARNING" and "'nowhere'" in r.message]
    assert len(warned) == 1  # its own warning, once, naming the project and the option
    assert "project_name=" in warned[0].message
    sink.close(5)


def test_a_missing_project_costs_a_lookup_per_window_not_per_result(
    langsmith_env: LangSmithStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Results for a project LangSmith lacks: one lookup, then none until the window ends;
    the window doubles with each miss, from ``backoff`` to half the waits of one result's
    retries (4 + 8 + 8 + 8 s here: each wait is at most 8 s), so a result looks again."""
    clock = HandClock()
    monkeypatch.setattr(langsmith_feedback, "time", clock)
    sink = LangSmithFeedbackSink(project_name="nowhere", backoff=4.0, ingest_retries=4)
    for _ in range(5):
        assert sink.project_id() is None
    assert len(langsmith_env.requests_to("GET", "/sessions")) == 1
    windows = [4.0]
    for _ in range(4):
        clock.now += windows[-1] - 1  # inside the window: no lookup
        assert sink.project_id() is None
        clock.now += 1  # its end: one lookup, one more miss
        assert sink.project_id() is None
        windows.append(sink._missing_until - clock.now)
    assert windows == pytest.approx([4.0, 8.0, 14.0, 14.0, 14.0])  # 14 = (4 + 8 + 8 + 8) / 2
    assert len(langsmith_env.requests_to("GET", "/sessions")) == 5  # one per window
    langsmith_env.create_project("nowhere")
    clock.now += 30.0
    assert sink.project_id() is not None  # found: kept
    assert len(langsmith_env.requests_to("GET", "/sessions")) == 6
    sink.close(5)


class _CountingLock:
    """A lock that counts the threads that asked for it (a deterministic view of waiters)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.asked = 0
        self._count_lock = threading.Lock()

    def __enter__(self) -> None:
        with self._count_lock:
            self.asked += 1
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def _three_lookups_at_once(
    stub: LangSmithStub, sink: LangSmithFeedbackSink, *, then: Callable[[], None]
) -> list[BaseException]:
    """Three threads ask ``sink`` for its project while the first one's lookup is held;
    ``then`` runs once all three wait, before the lookup is let go. Their errors, in order."""
    lock = _CountingLock()
    sink._project_lock = lock  # type: ignore[assignment]
    stub.hang("GET /sessions")
    outcomes: list[BaseException | None] = [None] * 3

    def look(i: int) -> None:
        try:
            sink.session_id()
        except Exception as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=look, args=(i,)) for i in range(3)]
    threads[0].start()
    stub.wait_for(lambda: stub.hung == 1)
    for thread in threads[1:]:
        thread.start()
    stub.wait_for(lambda: lock.asked == 3)
    then()
    stub.release_hangs()
    for thread in threads:
        thread.join(30)
    assert all(e is not None for e in outcomes)
    return [e for e in outcomes if e is not None]


def test_the_sends_waiting_on_a_lookup_share_its_miss(langsmith_env: LangSmithStub) -> None:
    """Three sends at once, no project: one lookup, and all three told "not there yet"."""
    sink = LangSmithFeedbackSink(project_name="nowhere", timeout=30)
    outcomes = _three_lookups_at_once(langsmith_env, sink, then=lambda: None)
    assert len(langsmith_env.requests_to("GET", "/sessions")) == 1
    assert all(isinstance(e, langsmith.utils.LangSmithNotFoundError) for e in outcomes)
    sink._missing_until = 0.0  # once its window is over, a later send looks again
    with pytest.raises(langsmith.utils.LangSmithNotFoundError):
        sink.session_id()
    assert len(langsmith_env.requests_to("GET", "/sessions")) == 2
    sink.close(5)


def test_the_sends_waiting_on_a_failed_lookup_do_not_each_send_one(
    langsmith_env: LangSmithStub,
) -> None:
    """A lookup that gets no answer is one failure for the breaker, counted by the lookup;
    the sends that waited on it are told so without a request of their own (they retry
    after their backoff), and without telling the breaker anything either way."""
    langsmith_env.create_project("app")
    sink = LangSmithFeedbackSink(project_name="app", timeout=30, failure_threshold=2)
    outcomes = _three_lookups_at_once(
        langsmith_env, sink, then=lambda: langsmith_env.fail("GET /sessions", 500, times=1)
    )
    assert [r.status for r in langsmith_env.requests_to("GET", "/sessions")] == [500]
    first, *waiters = outcomes
    assert isinstance(first, langsmith.utils.LangSmithAPIError)
    assert "500" in str(first)
    assert all(waiter is first for waiter in waiters)  # told the lookup's own failure
    assert classify_langsmith_error(first) == "failed"  # so each send retries it
    # One failure counted, not three and not reset by the waiters: one more opens it.
    assert not sink.breaker.is_open
    langsmith_env.fail("GET /sessions", 500, times=1)
    assert sink.project_id() is None
    assert sink.breaker.is_open
    sink.close(5)


def test_a_miss_answered_from_memory_tells_the_breaker_nothing(
    langsmith_env: LangSmithStub,
) -> None:
    """A result that meets a "no such project" window makes no request, so it must not
    reset the breaker's count of failures in a row (only an answer may)."""
    sink = LangSmithFeedbackSink(
        project_name="nowhere", backoff=10.0, ingest_retries=0, failure_threshold=2
    )
    sink.delivery.requests.not_found_retries = 1  # a window (half of one 10 s wait)...
    assert sink.project_id() is None  # a real 404: the window opens
    sink.delivery.requests.not_found_retries = 0  # ...and results that do not wait it out
    sink.breaker.failure()  # one failure in a row (of some other request)
    with pytest.raises(langsmith.utils.LangSmithNotFoundError, match="no such project"):
        sink.emit(run_item(uuid.uuid4()))  # answered from memory: no request
    assert len(langsmith_env.requests_to("GET", "/sessions")) == 1
    sink.breaker.failure()  # the second in a row: it opens, as nothing answered between
    assert sink.breaker.is_open
    sink.close(5)


def test_a_closing_sink_starts_no_lookup(langsmith_env: LangSmithStub) -> None:
    from langchain_ragmetrics.callbacks import SinkUnavailableError

    sink = LangSmithFeedbackSink(project_name="app")
    sink.delivery.requests.closing.set()
    with pytest.raises(SinkUnavailableError, match="closing"):
        sink.session_id()
    assert langsmith_env.requests_to("GET", "/sessions") == []
    sink.close(5)


def test_a_send_that_waited_on_the_lookup_that_opened_the_breaker_sends_nothing(
    langsmith_env: LangSmithStub,
) -> None:
    from langchain_ragmetrics.callbacks import SinkUnavailableError

    sink = LangSmithFeedbackSink(project_name="app", timeout=30, failure_threshold=1)
    outcomes = _three_lookups_at_once(
        langsmith_env, sink, then=lambda: langsmith_env.fail("GET /sessions", 500, times=1)
    )
    assert len(langsmith_env.requests_to("GET", "/sessions")) == 1
    assert sink.breaker.is_open
    assert all(isinstance(e, SinkUnavailableError) for e in outcomes[1:])
    sink.close(5)


def test_a_refused_key_on_the_lookup_fails_at_once_and_counts_once(
    langsmith_env: LangSmithStub,
) -> None:
    langsmith_env.fail("GET /sessions", 401, times=None)
    sink = LangSmithFeedbackSink(project_name="app", max_retries=3, failure_threshold=2)
    with pytest.raises(langsmith.utils.LangSmithAuthError, match="401"):
        sink.emit(run_item(uuid.uuid4()))
    assert len(langsmith_env.requests_to("GET", "/sessions")) == 1  # no retry of a key
    assert not sink.breaker.is_open  # counted once: one more opens it
    with pytest.raises(langsmith.utils.LangSmithAuthError):
        sink.emit(run_item(uuid.uuid4()))
    assert sink.breaker.is_open
    sink.close(5)


def test_a_route_that_does_not_take_feedback_fails_at_once_and_opens_the_breaker(
    langsmith_env: LangSmithStub,
) -> None:
    """A 405 (a proxy's route, a wrong base path) meets every request: each send fails at
    once, without a retry, and two in a row open the breaker instead of one request per
    result going on."""
    langsmith_env.feedback_needs_run = False
    langsmith_env.create_project("app")
    langsmith_env.fail("POST /feedback", 405, times=None)
    sink = LangSmithFeedbackSink(project_name="app", max_retries=3, failure_threshold=2)
    for sent in (1, 2):
        with pytest.raises(langsmith.utils.LangSmithError) as raised:
            sink.emit(run_item(uuid.uuid4()))
        assert classify_langsmith_error(raised.value) == "refused"
        assert len(langsmith_env.requests_to("POST", "/feedback")) == sent  # never retried
    assert sink.breaker.is_open
    sink.close(5)


def test_a_rejected_project_lookup_is_an_answer_not_an_outage(
    langsmith_env: LangSmithStub,
) -> None:
    """LangSmith refusing the request (a 422) answered: no retry, no failure counted."""
    project = langsmith_env.create_project("app")
    langsmith_env.fail("GET /sessions", 422, times=1)
    sink = LangSmithFeedbackSink(project_name="app", max_retries=3, failure_threshold=1)
    with pytest.raises(langsmith.utils.LangSmithError) as raised:
        sink.emit(run_item(uuid.uuid4()))
    assert classify_langsmith_error(raised.value) == "rejected"
    assert [r.status for r in langsmith_env.requests_to("GET", "/sessions")] == [422]
    assert not sink.breaker.is_open  # one failure would have opened it
    assert sink.session_id() == uuid.UUID(project)  # the next send looks again
    assert len(langsmith_env.requests_to("GET", "/sessions")) == 2
    sink.close(5)


def test_a_failed_project_lookup_is_an_outage_for_the_breaker(langsmith_env: LangSmithStub) -> None:
    langsmith_env.create_project("app")
    langsmith_env.fail("GET /sessions", 500, times=None)
    sink = LangSmithFeedbackSink(
        project_name="app", backoff=0.01, max_retries=1, failure_threshold=2
    )
    with pytest.raises(langsmith.utils.LangSmithAPIError, match="500"):
        sink.emit(run_item(uuid.uuid4()))
    # retried once (max_retries=1), each failure counted once: the second opened it
    assert [r.status for r in langsmith_env.requests_to("GET", "/sessions")] == [500, 500]
    assert sink.breaker.is_open
    assert langsmith_env.requests_to("POST", "/feedback") == []
    sink.close(5)


def test_bad_run_option() -> None:
    with pytest.raises(ValueError, match="'retriever' or 'root'"):
        LangSmithFeedbackSink(run="trace")  # type: ignore[arg-type]


def test_a_sink_used_again_after_its_handler_closed_retries_and_delivers(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_env: LangSmithStub,
) -> None:
    """Closing stopped its retries for good and closed the client it built: in the next
    handler, a run not ingested yet (404) dropped the result at once."""
    app = rag_app(judge_server, make_judge)
    langsmith_env.feedback_needs_run = False  # the app's runs are not traced here
    langsmith_env.create_project("app")
    sink = LangSmithFeedbackSink(project_name="app", backoff=0.01)
    for i in range(2):
        if i == 1:
            langsmith_env.fail("POST /feedback", 404, times=1)  # not ingested yet: retried
        with online_handler(app.llm, sinks=[sink]) as handler:
            app.chain.invoke(question(i), config={"callbacks": [handler]})
            assert handler.flush(10)
            stats = handler.stats.sinks["LangSmithFeedbackSink"]
            assert (stats.delivered, stats.dropped, stats.errors) == (1, 0, 0), i
    assert len(langsmith_env.feedback()) == 2
    statuses = [r.status for r in langsmith_env.requests_to("POST", "/feedback")]
    assert statuses == [200, 404, 200]
