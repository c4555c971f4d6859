"""LangSmith feedback through the real ``langsmith.Client`` against the loopback stub."""

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
from tests._support.langsmith_stub import LangSmithStub, project_id_for
from tests._support.openai_server import JudgeServer, reply_error
from tests._support.rag import FAST, online_handler, question, rag_app, rag_router

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
    sink = LangSmithFeedbackSink(langsmith_client, run="root", project_name="app")
    root = uuid.uuid4()
    with online_handler(app.llm, sinks=[sink]) as handler:
        app.chain.invoke(question(1), config={"callbacks": [handler], "run_id": root})
        assert handler.flush(10)
    (feedback,) = langsmith_stub.feedback()
    assert feedback["run_id"] == feedback["trace_id"] == str(root)


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


def test_project_lookup_failure_is_retried_later_and_not_fatal(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_client: langsmith.Client,
    langsmith_stub: LangSmithStub,
    recwarn: pytest.WarningsRecorder,
) -> None:
    app = rag_app(judge_server, make_judge)
    langsmith_stub.fail("GET /sessions", 404, times=None)  # the project does not exist yet
    sink = LangSmithFeedbackSink(langsmith_client, project_name="app")
    with online_handler(app.llm, sinks=[sink]) as handler:
        app.chain.invoke(question(1), config={"callbacks": [handler]})
        assert handler.flush(10)
        assert handler.stats.sink_errors == 0
    assert any(
        issubclass(w.category, langsmith.utils.LangSmithWarning) and "session_id" in str(w.message)
        for w in recwarn
    )
    (feedback,) = langsmith_stub.feedback()
    assert feedback.get("session_id") is None
    assert sink.project_id() is None  # still within the retry interval: no new lookup


def test_bad_run_option() -> None:
    with pytest.raises(ValueError, match="'retriever' or 'root'"):
        LangSmithFeedbackSink(run="trace")  # type: ignore[arg-type]
