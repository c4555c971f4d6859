"""Judge runs stay out of the user's trace, even with LangSmith env tracing on."""

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import langsmith
import langsmith.run_trees
import langsmith.utils
import pytest
from langchain_core.tracers import LangChainTracer
from langchain_core.tracers.base import BaseTracer
from langchain_core.tracers.schemas import Run
from langchain_openai import ChatOpenAI
from typing_extensions import override

from tests._support.langsmith_stub import LangSmithStub
from tests._support.openai_server import JudgeServer
from tests._support.rag import online_handler, question, rag_app

JudgeFactory = Callable[..., ChatOpenAI]


class Collector(BaseTracer):
    """Keeps every finished root run tree in memory."""

    def __init__(self) -> None:
        super().__init__()
        self.roots: list[Run] = []

    @override
    def _persist_run(self, run: Run) -> None:
        self.roots.append(run)


def walk(run: Run) -> Iterator[Run]:
    yield run
    for child in run.child_runs:
        yield from walk(child)


@pytest.fixture
def env_tracing(
    monkeypatch: pytest.MonkeyPatch,
    langsmith_client: langsmith.Client,
    langsmith_stub: LangSmithStub,
) -> Iterator[langsmith.Client]:
    """LANGSMITH_TRACING=true for this test, with LangChain's env tracer on the stub client."""
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    monkeypatch.setenv("LANGSMITH_API_KEY", "test")
    monkeypatch.setenv("LANGSMITH_ENDPOINT", langsmith_stub.url)
    monkeypatch.setenv("LANGSMITH_PROJECT", "app")
    monkeypatch.setattr(langsmith.run_trees, "_CLIENT", langsmith_client)
    langsmith.utils.get_env_var.cache_clear()
    langsmith.utils.get_tracer_project.cache_clear()
    try:
        yield langsmith_client
    finally:
        monkeypatch.undo()
        langsmith.utils.get_env_var.cache_clear()
        langsmith.utils.get_tracer_project.cache_clear()


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_no_judge_runs_inside_the_users_trace(
    mode: str, judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    collector = Collector()
    with online_handler(app.llm) as handler:
        config: Any = {"callbacks": [collector, handler]}
        if mode == "sync":
            app.chain.invoke(question(1), config)
        else:
            await app.chain.ainvoke(question(1), config)
        assert handler.flush(10)
    assert judge_server.count("RelevantSentences") == 1  # the judge did run ...
    (root,) = collector.roots  # ... but not as a trace the user's callbacks saw
    names = [run.name for run in walk(root)]
    assert not [n for n in names if n.startswith("ragmetrics")]
    assert names.count("ChatOpenAI") == 1  # the answering model only
    assert "VectorStoreRetriever" in names


def test_env_tracing_does_not_trace_the_judge(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    env_tracing: langsmith.Client,
    langsmith_stub: LangSmithStub,
) -> None:
    app = rag_app(judge_server, make_judge)
    root = uuid.uuid4()
    with online_handler(app.llm) as handler:
        app.chain.invoke(question(2), config={"callbacks": [handler], "run_id": root})
        assert handler.flush(10)
    env_tracing.flush(10)
    runs = langsmith_stub.runs()
    assert judge_server.count("RelevantSentences") == 1
    assert runs  # env tracing is really on: the user's trace reached the stub
    assert {r.get("trace_id") for r in runs} == {str(root)}
    assert [r["name"] for r in runs].count("ChatOpenAI") == 1
    assert not [r for r in runs if str(r.get("name", "")).startswith("ragmetrics")]


def test_trace_judge_sends_judge_runs_to_their_own_project(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    env_tracing: langsmith.Client,
    langsmith_stub: LangSmithStub,
) -> None:
    app = rag_app(judge_server, make_judge)
    with online_handler(app.llm, trace_judge="judges") as handler:
        # The app runs inside a traced request: the first enqueue (which starts the worker
        # thread) happens while that trace is the current context.
        with langsmith.trace("request", client=env_tracing) as request:
            app.chain.invoke(question(3), config={"callbacks": [handler]})
            root = str(request.id)
        assert handler.flush(10)
    env_tracing.flush(10)
    runs = langsmith_stub.runs()
    user = [r for r in runs if r.get("trace_id") == root]
    judge = [r for r in runs if r.get("trace_id") != root]
    assert user
    assert judge
    assert {r.get("session_name") for r in user} == {"app"}
    assert {r.get("session_name") for r in judge} == {"judges"}
    (metric_run,) = [r for r in judge if r.get("name") == "ragmetrics:context_relevance"]
    assert metric_run.get("parent_run_id") is None
    metadata = (metric_run.get("extra") or {}).get("metadata") or {}
    assert metadata["ragmetrics_trace_id"] == root  # found in the LangSmith context
    assert not [r for r in user if str(r.get("name", "")).startswith("ragmetrics")]


def test_trace_judge_accepts_a_tracer(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_client: langsmith.Client,
    langsmith_stub: LangSmithStub,
) -> None:
    app = rag_app(judge_server, make_judge)
    tracer = LangChainTracer(project_name="judges", client=langsmith_client)
    with online_handler(app.llm, trace_judge=tracer) as handler:
        app.chain.invoke(question(4), config={"callbacks": [handler]})
        assert handler.flush(10)
    langsmith_client.flush(10)
    runs = langsmith_stub.runs()
    assert {r.get("session_name") for r in runs} == {"judges"}  # only judge runs: no env tracing
    assert "ragmetrics:context_relevance" in {r.get("name") for r in runs}
