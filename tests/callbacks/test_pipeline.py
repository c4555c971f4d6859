"""Building samples online: questions, answers and references from runs, hooks and providers."""

import asyncio
import logging
import math
import threading
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from langchain_core.runnables import RunnableLambda, RunnableParallel
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import (
    ContextRecall,
    ContextRelevance,
    IDBasedContextRecall,
    InMemorySink,
    NonLLMContextRecall,
    OnlineResult,
    RagMetricsCallbackHandler,
)
from tests._support.judges import payload
from tests._support.openai_server import JudgeRequest, JudgeServer
from tests._support.rag import FAST, fact, items_in, online_handler, question, rag_app, rag_router

JudgeFactory = Callable[..., ChatOpenAI]


def recall_judge(req: JudgeRequest) -> dict[str, Any]:
    """ContextRecall judge: a reference sentence is supported if its item was found."""
    data = payload(req)
    found = set().union(*(items_in(p) for p in data["passages"]))
    return {
        "statements": [
            {
                "index": s["index"],
                "reason": "item",
                "attributed": bool(items_in(s["text"]) & found),
            }
            for s in data["reference_sentences"]
        ]
    }


def by_metric(handler: RagMetricsCallbackHandler) -> dict[str, OnlineResult]:
    sink = handler.sinks[0]
    assert isinstance(sink, InMemorySink)
    return {r.metric: r for r in sink.results}


def test_reference_from_run_metadata(judge_server: JudgeServer, make_judge: JudgeFactory) -> None:
    app = rag_app(judge_server, make_judge)
    judge_server.script = rag_router(RecallStatements=recall_judge)
    metrics = [ContextRecall(llm=app.llm, retry=FAST)]
    with online_handler(app.llm, metrics=metrics) as handler:
        config: Any = {"callbacks": [handler], "metadata": {"reference": fact(3)}}
        app.chain.invoke(question(3), config=config)
        assert handler.flush(10)
        item = by_metric(handler)["context_recall"]
    assert item.score == 1.0
    assert item.sample.reference == fact(3)
    (request,) = [r for r in judge_server.requests if r.schema_name == "RecallStatements"]
    assert [s["text"] for s in payload(request)["reference_sentences"]] == [fact(3)]


def test_language_in_run_metadata_picks_the_segmenter_per_request(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    # Japanese rules keep a quoted sentence inside its clause; English rules cut it out.
    reference = "「東京が首都です。」と教科書は言う。大阪は西日本の中心です。"
    app = rag_app(judge_server, make_judge)
    judge_server.script = rag_router(RecallStatements=recall_judge)
    metrics = [ContextRecall(llm=app.llm, retry=FAST)]
    with online_handler(app.llm, metrics=metrics) as handler:
        for metadata in ({"reference": reference, "language": "ja"}, {"reference": reference}):
            config: Any = {"callbacks": [handler], "metadata": metadata}
            app.chain.invoke(question(3), config=config)
            assert handler.flush(10)
        sink = handler.sinks[0]
        assert isinstance(sink, InMemorySink)
        languages = [r.sample.language for r in sink.results]
    counts = [
        len(payload(r)["reference_sentences"])
        for r in judge_server.requests
        if r.schema_name == "RecallStatements"
    ]
    assert languages == ["ja", None]
    assert counts == [2, 3]


def test_missing_reference_is_skipped_never_zero(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    metrics = [ContextRelevance(llm=app.llm, retry=FAST), ContextRecall(llm=app.llm, retry=FAST)]
    with online_handler(app.llm, metrics=metrics) as handler:
        for i in range(3):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert handler.flush(10)
        stats = handler.stats
        items = by_metric(handler)
    recall = items["context_recall"]
    assert recall.score is None
    assert recall.result.skipped
    assert recall.result.error is None
    assert "needs `reference`" in (recall.result.reason or "")
    assert (stats.scored, stats.skipped, stats.failed) == (3, 3, 0)
    assert judge_server.count("RecallStatements") == 0


def test_reference_contexts_and_ids_run_deterministic_metrics_online(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    metrics = [NonLLMContextRecall(), IDBasedContextRecall()]
    with online_handler(app.llm, metrics=metrics) as handler:
        metadata = {"reference_contexts": [fact(5)], "reference_context_ids": ["fact-5"]}
        app.chain.invoke(question(5), config={"callbacks": [handler], "metadata": metadata})
        app.chain.invoke(question(6), config={"callbacks": [handler]})  # nothing to compare to
        assert handler.flush(10)
        stats = handler.stats
        sink = handler.sinks[0]
        assert isinstance(sink, InMemorySink)
        scored = {(r.metric, r.score) for r in sink.results if r.score is not None}
    assert scored == {("non_llm_context_recall", 1.0), ("id_based_context_recall", 1.0)}
    assert (stats.scored, stats.skipped) == (2, 2)
    assert judge_server.count("RecallStatements") == 0


def test_a_reference_provider_that_never_answers_fails_its_retrieval_within_the_timeout(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    """Before, a provider stuck on a lookup held its retrieval (and a slot) for good."""
    app = rag_app(judge_server, make_judge)
    judge_server.script = rag_router(RecallStatements=recall_judge)
    release = threading.Event()

    def provider(question_: str | None, metadata: Mapping[str, Any]) -> str:
        release.wait(30)
        return fact(4)

    metrics = [ContextRecall(llm=app.llm, retry=FAST)]
    handler = online_handler(app.llm, metrics=metrics, reference_provider=provider, timeout=0.2)
    try:
        app.chain.invoke(question(4), config={"callbacks": [handler]})
        assert handler.flush(10)
        item = by_metric(handler)["context_recall"]
        assert item.result.failed
        assert item.result.error == "TimeoutError: reference_provider did not return within 0.2s"
        assert handler.stats.failed == 1
    finally:
        release.set()
        handler.close(10)
    assert judge_server.count("RecallStatements") == 0


def test_a_late_reference_provider_holds_its_judge_thread_and_the_next_calls_are_refused(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    """With ``max_concurrency=4`` one late lookup may hold a judge thread; before, each late
    lookup kept one, until none was left for the judge calls."""
    app = rag_app(judge_server, make_judge)
    release = threading.Event()
    asked: list[str | None] = []

    def provider(question_: str | None, metadata: Mapping[str, Any]) -> str:
        asked.append(question_)
        release.wait(30)
        return fact(4)

    metrics = [ContextRecall(llm=app.llm, retry=FAST)]
    handler = online_handler(
        app.llm, metrics=metrics, reference_provider=provider, timeout=0.2, max_concurrency=4
    )
    try:
        for i in (4, 5):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
            assert handler.flush(10)
        late, refused = (item.result.error for item in handler.sinks[0].results)
        assert late == "TimeoutError: reference_provider did not return within 0.2s"
        assert refused == (
            "TimeoutError: reference_provider was not called: 1 earlier calls have not "
            "returned yet, and none is made until one does"
        )
        assert asked == [question(4)]
    finally:
        release.set()
        handler.close(10)
    assert judge_server.count("RecallStatements") == 0


def test_sync_reference_provider_runs_in_the_background(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    judge_server.script = rag_router(RecallStatements=recall_judge)
    calls: list[tuple[str | None, dict[str, Any], str]] = []
    caller = threading.current_thread().name

    def provider(question_: str | None, metadata: Mapping[str, Any]) -> str:
        calls.append((question_, dict(metadata), threading.current_thread().name))
        return fact(int(sorted(items_in(question_ or ""))[0][4:]))

    metrics = [ContextRecall(llm=app.llm, retry=FAST)]
    with online_handler(app.llm, metrics=metrics, reference_provider=provider) as handler:
        app.chain.invoke(question(4), config={"callbacks": [handler], "metadata": {"user": "u1"}})
        assert handler.flush(10)
        item = by_metric(handler)["context_recall"]
    assert item.score == 1.0
    assert item.sample.reference == fact(4)
    ((asked, metadata, thread),) = calls
    assert asked == question(4)
    assert metadata["user"] == "u1"
    assert thread != caller
    assert thread.startswith(handler.name)


def test_metadata_wins_over_the_provider_which_fills_the_gaps(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)

    async def provider(question_: str | None, metadata: Mapping[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"reference": "from provider", "reference_context_ids": ["fact-8"]}

    metrics = [IDBasedContextRecall()]
    with online_handler(app.llm, metrics=metrics, reference_provider=provider) as handler:
        config: Any = {"callbacks": [handler], "metadata": {"reference": "from metadata"}}
        app.chain.invoke(question(8), config=config)
        assert handler.flush(10)
        item = by_metric(handler)["id_based_context_recall"]
    assert item.sample.reference == "from metadata"
    assert item.sample.reference_context_ids == ["fact-8"]
    assert item.score == 1.0


@pytest.mark.parametrize(
    ("provider", "message"),
    [
        (lambda q, m: 1 / 0, "ZeroDivisionError"),
        (lambda q, m: {"answer": "x"}, "unknown keys ['answer']"),
    ],
)
def test_a_failing_provider_fails_the_results_not_the_call(
    provider: Any,
    message: str,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = rag_app(judge_server, make_judge)
    metrics = [ContextRelevance(llm=app.llm, retry=FAST), ContextRecall(llm=app.llm)]
    with online_handler(app.llm, metrics=metrics, reference_provider=provider) as handler:
        with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
            for i in range(2):
                assert app.chain.invoke(question(i), config={"callbacks": [handler]})
            assert handler.flush(10)
        stats = handler.stats
        sink = handler.sinks[0]
        assert isinstance(sink, InMemorySink)
        results = sink.results
    assert len(results) == 4
    assert all(math.isnan(r.score or 0.0) and message in (r.result.error or "") for r in results)
    assert (stats.failed, stats.scored, stats.processed) == (4, 0, 2)
    building = [r for r in caplog.records if "cannot build the sample" in r.getMessage()]
    assert len(building) == 1


def test_question_and_answer_hooks_for_custom_shapes(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    # A dict-in, dict-out app that rewrites the question before retrieving.
    rewrite = RunnableLambda(lambda x: f"lookup {x['question']}")
    custom = RunnableParallel(
        docs=rewrite | app.retriever, reply=RunnableLambda(lambda x: {"text": "custom reply"})
    )
    inputs = {"question": question(2), "user": "u"}
    outputs: list[OnlineResult] = []
    for question_from in ("query", "input", lambda x: x["question"].upper()):
        with online_handler(app.llm, question_from=question_from) as handler:
            custom.invoke(inputs, config={"callbacks": [handler]})
            assert handler.flush(10)
            outputs.append(by_metric(handler)["context_relevance"])
    by_query, by_input, by_hook = outputs
    assert by_query.question == f"lookup {question(2)}"
    assert by_input.question == question(2)
    assert by_hook.question == question(2).upper()
    assert by_query.sample.answer is None  # no conventional key in {"docs", "reply"}

    with online_handler(app.llm, answer_from=lambda o: o["reply"]["text"]) as handler:
        custom.invoke(inputs, config={"callbacks": [handler]})
        assert handler.flush(10)
        assert by_metric(handler)["context_relevance"].sample.answer == "custom reply"


def test_a_hook_returning_a_non_string_fails_with_a_clear_error(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    with online_handler(app.llm, answer_from=lambda o: 42) as handler:
        assert app.chain.invoke(question(1), config={"callbacks": [handler]})
        assert handler.flush(10)
        item = by_metric(handler)["context_relevance"]
    assert "answer_from must return a str or None, got int" in (item.result.error or "")


def test_a_reading_of_the_childs_figures_never_counts_a_result_that_no_sink_holds(
    monkeypatch: pytest.MonkeyPatch, release: threading.Event
) -> None:
    """The child reads its counters and its sinks' figures for a report while a result is
    between its count and its outbox (held there): the reading waits, and counts it and
    holds it pending, or neither. Before, it counted it with no sink holding it; sent just
    before a kill, that report left the sink's identity off by it for ever."""
    from langchain_ragmetrics.callbacks import _child
    from langchain_ragmetrics.callbacks._background import ThreadRuntime
    from langchain_ragmetrics.callbacks._settings import HandlerSettings
    from langchain_ragmetrics.callbacks._stats import Counters, FailureLog
    from tests._support.captures import make_capture
    from tests._support.concurrency import wait_until
    from tests._support.stats_checks import ContendedLock

    counters = Counters()
    lock = ContendedLock()
    monkeypatch.setattr(counters, "_lock", lock)  # says when the reading has to wait
    settings = HandlerSettings(
        metrics=[IDBasedContextRecall()], sinks=[InMemorySink()], name="reading-test"
    )
    failures = FailureLog()
    runtime = ThreadRuntime(settings, counters=counters, failures=failures)
    (box,) = runtime.outboxes
    put, entered = box.put, threading.Event()

    def held_put(items: Any) -> None:  # the step from the count to the outbox, held open
        entered.set()
        release.wait()
        put(items)

    monkeypatch.setattr(box, "put", held_put)
    read = _child._Reading(None, counters, runtime, None, failures)  # type: ignore[arg-type]
    readings: list[Any] = []
    try:
        assert runtime.submit(make_capture("q", ("doc",)))
        assert entered.wait(30)
        reader = threading.Thread(target=lambda: readings.append(read()[0]))
        reader.start()
        wait_until(lambda: lock.waited.is_set() or bool(readings), "the reading to wait or end")
        release.set()
        reader.join(30)
        (stats,) = readings
        produced = stats.scored + stats.failed + stats.skipped
        sink = stats.sinks["InMemorySink"]
        assert produced == sink.delivered + sink.skipped + sink.errors + sink.dropped + sink.pending
        assert produced == 1
    finally:
        release.set()
        assert runtime.close(30)
