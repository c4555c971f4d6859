"""LangSmith down (500, 429, hung, refused, silent): scoring and the other sinks go on.

The sink builds its own real ``langsmith.Client`` from ``LANGSMITH_ENDPOINT`` /
``LANGSMITH_API_KEY`` pointed at the loopback stub (or at a port that refuses or never
answers), as a user's deployment would.
"""

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import langsmith
import pytest
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import (
    ContextRelevance,
    InMemorySink,
    JsonlSink,
    LangSmithFeedbackSink,
)
from langchain_ragmetrics._ids import feedback_id
from langchain_ragmetrics._langsmith_feedback import error_feedback_id
from tests._support.langsmith_stub import LangSmithStub, refused_url, silent_server
from tests._support.openai_server import JudgeServer
from tests._support.rag import FAST, online_handler, ours, question, rag_app
from tests._support.sink_checks import deliver
from tests._support.sink_checks import run_item as item

JudgeFactory = Callable[..., ChatOpenAI]
TRACES = 8
FAULTS = ("500", "429", "hang", "refused", "silent")


@pytest.fixture(autouse=True)
def _project(langsmith_stub: LangSmithStub) -> None:
    """The project the runs are traced to exists (the app has traced to it before)."""
    langsmith_stub.create_project("app")


@contextlib.contextmanager
def langsmith_at(fault: str, stub: LangSmithStub) -> Iterator[str]:
    """The endpoint the sink talks to, in the given state of outage."""
    if fault in ("500", "429"):
        stub.fail("", int(fault), times=None)  # every route
        yield stub.url
    elif fault == "hang":
        stub.hang("")  # accepts every request and never answers
        try:
            yield stub.url
        finally:
            stub.release_hangs()
    elif fault == "refused":
        yield refused_url()
    else:
        with silent_server() as url:
            yield url


def outage_sink(timeout: float = 0.3, failure_threshold: int = 3) -> LangSmithFeedbackSink:
    """A sink that gives up fast on a hung LangSmith (``timeout=30`` where every request
    must succeed: a slow loopback answer on a loaded machine is not a fault there)."""
    return LangSmithFeedbackSink(
        project_name="app",
        timeout=timeout,
        max_retries=1,
        backoff=0.01,
        failure_threshold=failure_threshold,
        cooldown=600,
    )


@pytest.mark.parametrize("fault", FAULTS)
def test_langsmith_down_never_holds_scoring_or_the_other_sinks(
    fault: str,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_stub: LangSmithStub,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    app = rag_app(judge_server, make_judge)
    with langsmith_at(fault, langsmith_stub) as url:
        monkeypatch.setenv("LANGSMITH_ENDPOINT", url)
        monkeypatch.setenv("LANGSMITH_API_KEY", "test")
        # The first failed request opens it: how many of the concurrent sends share a failed
        # project lookup (and so make no request) is up to timing, so no higher threshold
        # is certain to be reached.
        feedback = outage_sink(failure_threshold=1)
        sinks = [feedback, JsonlSink(tmp_path / "scores.jsonl"), InMemorySink()]
        metrics = [ContextRelevance(llm=app.llm, retry=FAST)]
        with online_handler(app.llm, metrics=metrics, sinks=sinks) as handler:
            answers = [
                app.chain.invoke(question(i), config={"callbacks": [handler]})
                for i in range(TRACES)
            ]
            assert handler.flush(60)
            stats = handler.stats
        assert handler.closed
    assert answers == [f"Answer about item00{i}." for i in range(TRACES)]
    assert stats.scored == TRACES
    # JSONL and memory got every result while LangSmith was down.
    lines = (tmp_path / "scores.jsonl").read_text(encoding="utf-8").splitlines()
    assert sorted(json.loads(line)["question"] for line in lines) == sorted(
        question(i) for i in range(TRACES)
    )
    assert stats.sinks["JsonlSink"].delivered == TRACES
    assert stats.sinks["InMemorySink"].delivered == TRACES
    # The outage in numbers: the first failed request (a project lookup: every route fails)
    # opened the breaker; every later result was dropped at once, not piled up. Sends are
    # concurrent, so a few may have been under way when it opened: each of those fails
    # (an error) or is refused at its retry (dropped), never more than the sink's lanes.
    langsmith = stats.sinks["LangSmithFeedbackSink"]
    lanes = feedback.max_concurrency
    assert (langsmith.delivered, langsmith.pending) == (0, 0)
    assert 1 <= langsmith.errors <= lanes
    assert langsmith.errors + langsmith.dropped == TRACES
    assert stats.sink_errors == langsmith.errors
    for figures in stats.sinks.values():  # the accounting identity, per sink
        total = figures.delivered + figures.errors + figures.dropped + figures.pending
        assert total == stats.scored + stats.failed + stats.skipped
    if fault in ("500", "429"):
        assert langsmith_stub.feedback() == []
        # The project is never found, so no feedback is posted: the lookups are the requests,
        # one at a time, each failure counted inside it: none starts once the breaker opened.
        assert langsmith_stub.requests_to("POST", "/feedback") == []
        sent = langsmith_stub.requests_to("GET", "/sessions")
        assert [r.status for r in sent] == [int(fault)] * feedback.breaker.threshold
        assert feedback.breaker.is_open


def test_a_transient_failure_is_retried_without_duplicates(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_env: LangSmithStub,
) -> None:
    app = rag_app(judge_server, make_judge)
    langsmith_env.feedback_needs_run = False  # these runs are never traced here
    langsmith_env.fail("POST /feedback", 500, times=1)
    langsmith_env.fail("POST /feedback", 429, times=1)
    sink = LangSmithFeedbackSink(project_name="app", timeout=5, max_retries=2, backoff=0.01)
    roots = [uuid.uuid4() for _ in range(3)]
    with online_handler(app.llm, sinks=[sink]) as handler:
        for i, root in enumerate(roots):
            app.chain.invoke(question(i), config={"callbacks": [handler], "run_id": root})
        assert handler.flush(30)
        figures = handler.stats.sinks["LangSmithFeedbackSink"]
    assert (figures.delivered, figures.errors, figures.dropped) == (3, 0, 0)
    records = langsmith_env.feedback_records()
    assert len(records) == 3  # sent directly by the client the sink built, once each
    assert {transport for transport, _ in records} == {"POST /feedback"}
    assert {p["trace_id"] for _, p in records} == {str(r) for r in roots}
    for _, payload in records:  # the stable id: (retriever run, metric)
        assert payload["id"] == str(feedback_id(payload["run_id"], payload["key"]))
    assert len(langsmith_env.requests_to("POST", "/feedback")) == 5  # 2 failed + 3


def test_a_duplicate_id_counts_as_delivered(langsmith_env: LangSmithStub) -> None:
    langsmith_env.feedback_needs_run = False  # these runs are never traced here
    sink = outage_sink(timeout=30)
    result = item(uuid.uuid4())
    sink.emit(result)
    sink.emit(result)  # e.g. a retry after the first answer was lost: LangSmith says 409
    assert [r.status for r in langsmith_env.requests_to("POST", "/feedback")] == [200, 409]
    assert len(langsmith_env.feedback()) == 1
    assert not sink.breaker.is_open
    sink.close(5)


def test_the_breaker_pauses_then_resumes(
    langsmith_env: LangSmithStub,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from langchain_ragmetrics.callbacks import SinkUnavailableError

    langsmith_env.feedback_needs_run = False  # these runs are never traced here
    sink = LangSmithFeedbackSink(project_name="app", max_retries=0, failure_threshold=2)
    langsmith_env.fail("POST /feedback", 500, times=2)
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        for _ in range(2):
            with pytest.raises(Exception, match="500"):
                sink.emit(item(uuid.uuid4()))
        assert sink.breaker.is_open
        with pytest.raises(SinkUnavailableError, match="circuit open"):
            sink.emit(item(uuid.uuid4()))
        # the cool-down is over (the breaker's clock moved past it): one send is tried, works
        sink.breaker._clock = lambda: time.monotonic() + sink.breaker.cooldown + 1
        sink.emit(item(uuid.uuid4()))
    assert not sink.breaker.is_open
    messages = [r.getMessage() for r in caplog.records]
    assert sum("failed requests in a row" in m for m in messages) == 1
    assert sum("sending resumed" in m for m in messages) == 1
    assert len(langsmith_env.feedback()) == 1
    sink.close(5)


def test_skipped_results_are_not_sent_and_failed_ones_are_flagged(
    langsmith_env: LangSmithStub,
) -> None:
    langsmith_env.feedback_needs_run = False  # these runs are never traced here
    sink = outage_sink(timeout=30)
    sink.emit(item(uuid.uuid4(), score=None))  # not assessable: nothing to send
    sink.emit(item(uuid.uuid4(), score=float("nan")))  # NaN without error: a skip too
    sink.emit(item(uuid.uuid4(), score=float("nan"), error="JudgeError: boom"))
    (feedback,) = langsmith_env.feedback()
    assert feedback["error"] is True
    assert feedback.get("score") is None
    assert feedback["comment"] == "error: JudgeError: boom"
    sink.close(5)


@pytest.mark.parametrize("endpoint", ["unset", "refused"])
def test_without_an_api_key_the_sink_disables_itself_with_one_warning(
    endpoint: str,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if endpoint == "refused":
        monkeypatch.setenv("LANGSMITH_ENDPOINT", refused_url())
    app = rag_app(judge_server, make_judge)
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        sink = LangSmithFeedbackSink()
        assert not sink.enabled
        memory = InMemorySink()
        with online_handler(app.llm, sinks=[sink, memory]) as handler:
            for i in range(3):
                app.chain.invoke(question(i), config={"callbacks": [handler]})
            assert handler.flush(30)
            stats = handler.stats
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and ours(r)]
    assert len(warnings) == 1
    assert "LangSmithFeedbackSink disabled" in warnings[0]
    assert "LANGSMITH_API_KEY" in warnings[0]
    assert len(memory.results) == 3
    assert stats.sinks["LangSmithFeedbackSink"].dropped == 3
    assert stats.sinks["LangSmithFeedbackSink"].errors == 0


def test_the_default_breaker_opens_at_the_fifth_failure_in_a_row(
    langsmith_env: LangSmithStub,
) -> None:
    from langchain_ragmetrics.callbacks import SinkUnavailableError

    langsmith_env.create_project("app")
    langsmith_env.fail("POST /feedback", 500, times=None)
    sink = LangSmithFeedbackSink(project_name="app", max_retries=0)  # default threshold
    for _ in range(4):
        with pytest.raises(Exception, match="500"):
            sink.emit(item(uuid.uuid4()))
        assert not sink.breaker.is_open  # four failures in a row are not an outage yet
    with pytest.raises(Exception, match="500"):
        sink.emit(item(uuid.uuid4()))
    assert sink.breaker.is_open  # the fifth is
    with pytest.raises(SinkUnavailableError, match="circuit open"):
        sink.emit(item(uuid.uuid4()))
    assert len(langsmith_env.requests_to("POST", "/feedback")) == 5
    sink.close(5)


def test_feedback_on_a_run_not_ingested_yet_is_retried_and_not_a_breaker_failure(
    langsmith_env: LangSmithStub,
) -> None:
    sink = LangSmithFeedbackSink(
        project_name="app", max_retries=0, failure_threshold=1, backoff=0.01, ingest_retries=4
    )
    run_id = uuid.uuid4()
    with langsmith_env._lock:  # the run, which LangSmith will have ingested after three 404s
        langsmith_env._runs[str(run_id)] = {"id": str(run_id)}
    langsmith_env.fail("POST /feedback", 404, times=3)
    sink.emit(item(run_id))
    statuses = [r.status for r in langsmith_env.requests_to("POST", "/feedback")]
    assert statuses == [404, 404, 404, 200]
    assert not sink.breaker.is_open  # a threshold of 1, and still closed: 404 is an answer
    assert len(langsmith_env.held_feedback()) == 1
    # past ingest_retries, the 404 is the pair's failure (still not the breaker's)
    langsmith_env.fail("POST /feedback", 404, times=None)
    with pytest.raises(langsmith.utils.LangSmithNotFoundError):
        sink.emit(item(uuid.uuid4()))
    assert not sink.breaker.is_open
    sink.close(5)


def test_a_later_score_replaces_an_earlier_error_and_never_the_reverse(
    langsmith_env: LangSmithStub,
) -> None:
    langsmith_env.feedback_needs_run = False  # these runs are never traced here
    sink = outage_sink(timeout=30)
    first, second = uuid.uuid4(), uuid.uuid4()
    sink.emit(item(first, score=float("nan"), error="TimeoutError: judge"))
    sink.emit(item(first, score=0.75))  # e.g. the monitor or a retry scored it later
    sink.emit(item(second, score=0.25))
    sink.emit(item(second, score=float("nan"), error="TimeoutError: judge"))  # stale error
    held = {f["run_id"]: f for f in langsmith_env.held_feedback()}
    assert len(langsmith_env.held_feedback()) == 2
    assert (held[str(first)]["score"], held[str(first)].get("error")) == (0.75, None)
    assert (held[str(second)]["score"], held[str(second)].get("error")) == (0.25, None)
    assert held[str(first)]["id"] == str(feedback_id(first, "context_relevance"))
    # the stale error of the second was never posted: a score was already there
    assert len(langsmith_env.requests_to("POST", "/feedback")) == 3
    sink.close(5)


def test_a_score_is_one_request_unless_the_sink_sent_an_error_for_its_pair(
    langsmith_env: LangSmithStub,
) -> None:
    """No DELETE after a score of a pair this sink never erred on: one round trip, not two."""
    langsmith_env.feedback_needs_run = False  # these runs are never traced here
    sink = outage_sink(timeout=30)
    sink.project_id()  # resolved first, so only feedback requests are counted below
    before = len(langsmith_env.requests)
    scored = [uuid.uuid4() for _ in range(5)]
    for run_id in scored:
        sink.emit(item(run_id, score=0.5))
    sent = langsmith_env.requests[before:]
    assert [(r.method, r.path.split("?")[0]) for r in sent] == [("POST", "/feedback")] * 5
    # an error, then a score of the same pair: that score removes the error it replaces
    erred = uuid.uuid4()
    sink.emit(item(erred, score=float("nan"), error="TimeoutError: judge"))
    sink.emit(item(erred, score=0.75))
    deletes = langsmith_env.requests_to("DELETE", "/feedback")
    assert [r.path.split("?")[0] for r in deletes] == [
        f"/feedback/{error_feedback_id(erred, 'context_relevance')}"
    ]
    held = [(f["run_id"], f["score"]) for f in langsmith_env.held_feedback()]
    assert sorted(held) == sorted([(str(r), 0.5) for r in scored] + [(str(erred), 0.75)])
    assert not sink._errors_sent  # its error is gone: nothing left to remember
    sink.close(5)


def test_an_error_whose_post_failed_is_still_removed_by_a_later_score(
    langsmith_env: LangSmithStub,
) -> None:
    """A failed send may have landed (a lost answer): the pair is noted before it goes."""
    langsmith_env.feedback_needs_run = False
    sink = LangSmithFeedbackSink(project_name="app", max_retries=0, failure_threshold=10)
    run_id = uuid.uuid4()
    langsmith_env.fail("POST /feedback", 500, times=1)
    with pytest.raises(langsmith.utils.LangSmithError):
        sink.emit(item(run_id, score=float("nan"), error="TimeoutError: judge"))
    sink.emit(item(run_id, score=0.75))
    assert len(langsmith_env.requests_to("DELETE", "/feedback")) == 1
    sink.close(5)


def test_the_sink_remembers_its_most_recent_errors_only(
    langsmith_env: LangSmithStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bounded memory: past its size the oldest pair is forgotten, the newest kept."""
    from langchain_ragmetrics.callbacks import langsmith_feedback

    monkeypatch.setattr(langsmith_feedback, "_REMEMBERED_ERRORS", 3)
    langsmith_env.feedback_needs_run = False
    sink = outage_sink(timeout=30)
    runs = [uuid.uuid4() for _ in range(4)]
    for run_id in runs:
        sink.emit(item(run_id, score=float("nan"), error="TimeoutError: judge"))
    for run_id in runs:
        sink.emit(item(run_id, score=0.75))
    deleted = {r.path.split("?")[0] for r in langsmith_env.requests_to("DELETE", "/feedback")}
    assert deleted == {f"/feedback/{error_feedback_id(r, 'context_relevance')}" for r in runs[1:]}
    sink.close(5)


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_fails_at_once_and_pauses_sending(
    status: int, langsmith_stub: LangSmithStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong or unauthorised key: no retry (it cannot help), and the breaker counts it."""
    from langchain_ragmetrics.callbacks import SinkUnavailableError

    langsmith_stub.feedback_needs_run = False  # these runs are never traced here
    monkeypatch.setenv("LANGSMITH_ENDPOINT", langsmith_stub.url)
    monkeypatch.setenv("LANGSMITH_API_KEY", "wrong")
    langsmith_stub.fail("POST /feedback", status, times=None)
    sink = LangSmithFeedbackSink(
        project_name="app", max_retries=3, backoff=0.01, failure_threshold=2
    )
    for _ in range(2):
        with pytest.raises(langsmith.utils.LangSmithError, match=str(status)):
            sink.emit(item(uuid.uuid4()))
    assert sink.breaker.is_open  # the second refusal in a row is an outage of the key
    with pytest.raises(SinkUnavailableError, match="circuit open"):
        sink.emit(item(uuid.uuid4()))
    assert len(langsmith_stub.requests_to("POST", "/feedback")) == 2  # one per emit
    sink.close(5)


@pytest.mark.parametrize("status", [400, 422])
def test_a_rejected_feedback_fails_at_once_and_langsmith_counts_as_up(
    status: int, langsmith_env: LangSmithStub
) -> None:
    """A request LangSmith rejects cannot pass on a retry; LangSmith answered, so no outage."""
    langsmith_env.feedback_needs_run = False
    langsmith_env.fail("POST /feedback", status, times=2)
    sink = LangSmithFeedbackSink(
        project_name="app", max_retries=3, backoff=0.01, failure_threshold=1
    )
    for emitted in (1, 2):
        with pytest.raises(langsmith.utils.LangSmithError, match=str(status)):
            sink.emit(item(uuid.uuid4()))
        assert len(langsmith_env.requests_to("POST", "/feedback")) == emitted  # no retry
    assert not sink.breaker.is_open  # a threshold of 1, and still closed
    sink.emit(item(uuid.uuid4()))  # the next one is accepted
    assert len(langsmith_env.feedback()) == 1
    sink.close(5)


def _sink_on_stub(
    stub: LangSmithStub, monkeypatch: pytest.MonkeyPatch, **options: Any
) -> LangSmithFeedbackSink:
    """A sink built from the environment, pointed at the stub with its project "app"."""
    stub.feedback_needs_run = False
    monkeypatch.setenv("LANGSMITH_ENDPOINT", stub.url)
    monkeypatch.setenv("LANGSMITH_API_KEY", "test")
    stub.create_project("app")
    return LangSmithFeedbackSink(project_name="app", **options)


def test_feedback_goes_out_several_at_a_time_and_all_lands(
    langsmith_stub: LangSmithStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each send is a round trip: the sink keeps ``max_concurrency`` of them in flight."""
    from langchain_ragmetrics.callbacks._outbox import SinkOutbox
    from langchain_ragmetrics.callbacks._stats import FailureLog

    sink = _sink_on_stub(langsmith_stub, monkeypatch, max_concurrency=4, timeout=30)
    box = SinkOutbox(sink, key="ls", max_size=100, thread_name="ls", failures=FailureLog())
    langsmith_stub.hang("POST /feedback")  # accepted, held until released
    box.put([item(uuid.uuid4()) for _ in range(10)])
    try:
        deadline = time.monotonic() + 30
        while langsmith_stub.hung < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert langsmith_stub.hung == 4  # four at once (one at a time would stay at 1)
    finally:
        langsmith_stub.release_hangs()
    assert box.request(lambda: None).result(30) is None
    stats = box.stats()
    assert (stats.delivered, stats.errors, stats.dropped) == (10, 0, 0)
    assert len(langsmith_stub.held_feedback()) == 10
    box.stop()
    sink.close(5)


def test_a_bad_max_concurrency_is_refused_by_name() -> None:
    for value in (0, -2, 2.5):
        with pytest.raises(ValueError, match="`max_concurrency` must"):
            LangSmithFeedbackSink(max_concurrency=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("timeout", "x", "`timeout` must be a number above 0, got 'x'"),
        ("timeout", float("nan"), "`timeout` must be a number above 0, got nan"),
        ("max_retries", "x", "`max_retries` must be a whole number of at least 0, got 'x'"),
        ("backoff", "x", "`backoff` must be a number of at least 0, got 'x'"),
        ("ingest_retries", 1.5, "`ingest_retries` must be a whole number of at least 0, got 1.5"),
        ("ingest_retries", -1, "`ingest_retries` must be a whole number of at least 0, got -1"),
    ],
)
def test_bad_options_are_refused_by_name(option: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LangSmithFeedbackSink(**{option: value})  # type: ignore[arg-type]


def test_concurrent_sends_stop_at_the_breaker(
    langsmith_stub: LangSmithStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LangSmith fails every send: the lanes already under way finish, nothing new starts."""
    langsmith_stub.fail("POST /feedback", 500, times=None)
    sink = _sink_on_stub(
        langsmith_stub,
        monkeypatch,
        max_concurrency=4,
        max_retries=0,
        failure_threshold=3,
        cooldown=600,
    )
    stats = deliver(sink, [item(uuid.uuid4()) for _ in range(20)], timeout=30)
    posts = len(langsmith_stub.requests_to("POST", "/feedback"))
    assert 3 <= posts <= 3 - 1 + 4  # the threshold, plus at most the other lanes under way
    assert stats.errors == posts  # one failed request per failed send (no retries here)
    assert (stats.delivered, stats.dropped) == (0, 20 - posts)
    assert sink.breaker.is_open
    sink.close(5)
