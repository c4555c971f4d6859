"""Capture and correlation through real chains and graphs, in every invocation mode."""

import asyncio
import copy
import logging
import math
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import (
    ContextPrecision,
    ContextRelevance,
    InMemorySink,
    LoggingSink,
    OnlineResult,
    RagMetricsCallbackHandler,
)
from langchain_ragmetrics.callbacks._sampling import is_sampled
from langchain_ragmetrics.callbacks._settings import HandlerSettings
from tests._support.openai_server import JudgeServer
from tests._support.rag import (
    FAST,
    build_two_retriever_chain,
    corpus,
    items_in,
    make_retriever,
    online_handler,
    question,
    rag_app,
)

JudgeFactory = Callable[..., ChatOpenAI]


def results(handler: RagMetricsCallbackHandler) -> list[OnlineResult]:
    sink = handler.sinks[0]
    assert isinstance(sink, InMemorySink)
    return sink.results


def assert_attributed(
    item: OnlineResult, retriever: BaseRetriever, *, answered: bool = True
) -> None:
    """The result carries its own question's contexts and answer, and was judged on them."""
    asked = items_in(item.question or "")
    assert len(asked) == 1, item.question
    expected = [d.page_content for d in retriever.invoke(item.question or "")]
    assert item.sample.contexts == expected
    if answered:
        assert items_in(item.sample.answer or "") == asked
    relevant = sum(1 for c in expected if items_in(c) & asked)
    assert item.score == relevant / len(expected), (item.question, item.result)


def assert_released(handler: RagMetricsCallbackHandler) -> None:
    assert handler.stats.open_traces == 0
    assert handler._tracker.open_runs == 0  # internal map of run ids is empty


def test_lcel_chain_with_a_deeply_nested_retriever(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    root = uuid.uuid4()
    with online_handler(app.llm) as handler:
        answer = app.chain.invoke(question(3), config={"callbacks": [handler], "run_id": root})
        assert answer == "Answer about item003."
        assert handler.flush(10)
        (item,) = results(handler)
        stats = handler.stats
    assert_attributed(item, app.retriever)
    assert item.trace_id == item.root_run_id == root
    assert item.parent_run_id not in (None, root)
    assert item.retriever == "VectorStoreRetriever"
    assert item.query == item.question == question(3)
    assert item.sample.answer == answer
    assert item.sample.context_ids is not None
    assert item.sample.context_ids[0] == "fact-3"
    assert "InMemoryVectorStore" in item.tags
    assert judge_server.count("RelevantSentences") == 1
    assert (stats.traces, stats.seen, stats.sampled, stats.processed, stats.scored) == (
        1,
        1,
        1,
        1,
        1,
    )
    assert (stats.queued, stats.failed, stats.skipped, stats.dropped) == (0, 0, 0, 0)
    assert stats.usage.judge_calls == 1
    assert_released(handler)


def test_langgraph_graph_with_a_retrieval_node(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    root = uuid.uuid4()
    with online_handler(app.llm) as handler:
        state = app.graph.invoke(
            {"question": question(7)}, config={"callbacks": [handler], "run_id": root}
        )
        assert handler.flush(10)
        (item,) = results(handler)
    assert state["answer"] == "Answer about item007."
    assert_attributed(item, app.retriever)
    assert item.trace_id == root
    assert item.sample.answer == state["answer"]
    assert_released(handler)


def test_a_retriever_invoked_on_its_own_is_its_own_trace(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    metrics = [ContextRelevance(llm=app.llm, retry=FAST), ContextPrecision(llm=app.llm)]
    with online_handler(app.llm, metrics=metrics) as handler:
        docs = app.retriever.invoke(question(4), config={"callbacks": [handler]})
        assert handler.flush(10)
        relevance, precision = sorted(results(handler), key=lambda r: r.metric)[::-1]
        stats = handler.stats
    assert docs[0].id == "fact-4"
    assert relevance.trace_id == relevance.root_run_id == relevance.run_id
    assert relevance.sample.answer is None
    assert_attributed(relevance, app.retriever, answered=False)
    # No answer and no reference: precision cannot be assessed -> skipped, never 0.
    assert precision.metric == "context_precision"
    assert precision.score is None
    assert precision.result.skipped
    assert "reference" in (precision.result.reason or "")
    assert (stats.scored, stats.skipped, stats.failed) == (1, 1, 0)
    assert judge_server.count("ContextVerdicts") == 0
    assert_released(handler)


def test_two_retrievers_in_one_trace_are_scored_separately(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    first = make_retriever(corpus(10, prefix="a"))
    second = make_retriever(corpus(10, prefix="b"))
    chain = build_two_retriever_chain(app.llm, first, second)
    root = uuid.uuid4()
    with online_handler(app.llm) as handler:
        chain.invoke(question(2), config={"callbacks": [handler], "run_id": root})
        assert handler.flush(10)
        items = sorted(results(handler), key=lambda r: r.retriever or "")
        stats = handler.stats
    assert [i.retriever for i in items] == ["primary", "secondary"]
    assert {i.trace_id for i in items} == {root}
    assert len({i.run_id for i in items}) == 2
    assert [i.sample.context_ids[0] for i in items if i.sample.context_ids] == ["a-2", "b-2"]
    for item, retriever in zip(items, (first, second), strict=True):
        assert_attributed(item, retriever)
    assert (stats.traces, stats.seen, stats.processed) == (1, 2, 2)
    assert_released(handler)


async def _run(mode: str, target: Any, inputs: list[Any], config: dict[str, Any]) -> list[Any]:
    if mode == "invoke":
        return [target.invoke(x, config=config) for x in inputs]
    if mode == "ainvoke":
        return [await target.ainvoke(x, config=config) for x in inputs]
    if mode == "batch":
        return list(target.batch(inputs, config=config))
    if mode == "abatch":
        return list(await target.abatch(inputs, config=config))
    if mode == "stream":
        return [list(target.stream(x, config=config)) for x in inputs]
    if mode == "astream":
        streamed = []
        for x in inputs:
            streamed.append([c async for c in target.astream(x, config=config)])
        return streamed
    raise AssertionError(mode)


MODES = ["invoke", "ainvoke", "batch", "abatch", "stream", "astream"]


@pytest.mark.parametrize("mode", MODES)
async def test_chain_in_every_invocation_mode(
    mode: str, judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    asked = [question(i) for i in (1, 5, 9)]
    with online_handler(app.llm) as handler:
        outputs = await _run(mode, app.chain, asked, {"callbacks": [handler]})
        assert await handler.aflush(10)
        items = results(handler)
    answers = ["".join(o) if isinstance(o, list) else o for o in outputs]
    assert answers == [f"Answer about item00{i}." for i in (1, 5, 9)]
    assert sorted(i.question or "" for i in items) == sorted(asked)
    assert len({i.trace_id for i in items}) == 3
    for item in items:
        assert_attributed(item, app.retriever)
    assert_released(handler)


@pytest.mark.parametrize("mode", MODES)
async def test_graph_in_every_invocation_mode(
    mode: str, judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    asked = [question(i) for i in (2, 6)]
    with online_handler(app.llm) as handler:
        await _run(mode, app.graph, [{"question": q} for q in asked], {"callbacks": [handler]})
        assert await handler.aflush(10)
        items = results(handler)
    assert sorted(i.question or "" for i in items) == sorted(asked)
    for item in items:
        assert_attributed(item, app.retriever)
    assert_released(handler)


def test_with_config_attaches_the_handler_without_changing_the_chain(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    with online_handler(app.llm) as handler:
        monitored = app.chain.with_config(callbacks=[handler])
        assert monitored.invoke(question(8)) == "Answer about item008."
        assert handler.flush(10)
        (item,) = results(handler)
    assert_attributed(item, app.retriever)


def test_200_concurrent_threads_are_attributed_correctly(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge, n=200, max_retries=5)
    with online_handler(app.llm, max_queue_size=400, max_concurrency=16) as handler:
        config: Any = {"callbacks": [handler]}
        with ThreadPoolExecutor(max_workers=24) as pool:
            answers = list(pool.map(lambda i: app.chain.invoke(question(i), config), range(200)))
        assert handler.flush(60)
        items = results(handler)
        stats = handler.stats
    assert answers == [f"Answer about {question(i).split()[-1][:-1]}." for i in range(200)]
    assert len(items) == 200
    assert {i.question for i in items} == {question(i) for i in range(200)}
    assert len({i.trace_id for i in items}) == 200
    for item in items:
        assert_attributed(item, app.retriever)
    assert (stats.seen, stats.scored, stats.dropped, stats.failed) == (200, 200, 0, 0)
    assert_released(handler)


async def test_200_concurrent_asyncio_tasks_are_attributed_correctly(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge, n=200, max_retries=5)
    with online_handler(app.llm, max_queue_size=400, max_concurrency=16) as handler:
        config: Any = {"callbacks": [handler]}
        answers = await asyncio.gather(
            *(app.chain.ainvoke(question(i), config) for i in range(200))
        )
        assert await handler.aflush(60)
        items = results(handler)
        stats = handler.stats
    assert len(set(answers)) == 200
    assert len(items) == 200
    assert {i.question for i in items} == {question(i) for i in range(200)}
    for item in items:
        assert_attributed(item, app.retriever)
    assert (stats.seen, stats.scored, stats.failed) == (200, 200, 0)
    assert_released(handler)


def test_sampling_is_deterministic_by_trace_id(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    roots = [uuid.uuid5(uuid.NAMESPACE_DNS, f"trace-{i}") for i in range(30)]
    expected = {r for r in roots if is_sampled(r, 0.5)}
    assert 0 < len(expected) < 30
    scored: list[set[uuid.UUID | None]] = []
    for _ in range(2):  # two handlers, same traces: same decisions
        with online_handler(app.llm, sample_rate=0.5) as handler:
            for i, root in enumerate(roots):
                app.chain.invoke(question(i), config={"callbacks": [handler], "run_id": root})
            assert handler.flush(30)
            scored.append({r.trace_id for r in results(handler)})
            stats = handler.stats
        assert (stats.seen, stats.sampled, stats.processed) == (30, len(expected), len(expected))
    assert scored[0] == scored[1] == expected


def test_sample_rate_zero_scores_nothing(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    with online_handler(app.llm, sample_rate=0.0) as handler:
        app.chain.invoke(question(1), config={"callbacks": [handler]})
        assert handler.flush(10)
        stats = handler.stats
    assert (stats.seen, stats.sampled) == (1, 0)
    assert judge_server.count("RelevantSentences") == 0
    assert not any(t.name.startswith(f"{handler.name}-") for t in threading.enumerate())


def test_an_errored_root_is_not_scored_and_is_counted(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)

    def explode(_: str) -> str:
        raise ValueError("user's own bug")

    failing = app.chain | RunnableLambda(explode)
    with online_handler(app.llm) as handler:
        with pytest.raises(ValueError, match="user's own bug"):
            failing.invoke(question(1), config={"callbacks": [handler]})
        assert handler.flush(10)
        stats = handler.stats
    assert (stats.traces, stats.errored, stats.seen, stats.processed) == (1, 1, 0, 0)
    assert judge_server.count("RelevantSentences") == 0
    assert_released(handler)


def test_an_early_closed_stream_is_scored_with_its_partial_answer(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    # LangChain reports a stream closed by the consumer as ended, with the output so far.
    app = rag_app(judge_server, make_judge)
    with online_handler(app.llm) as handler:
        stream = app.chain.stream(question(1), config={"callbacks": [handler]})
        next(iter(stream))
        stream.close()
        assert handler.flush(10)
        (item,) = results(handler)
        stats = handler.stats
    assert (stats.errored, stats.processed) == (0, 1)
    assert "Answer about item001.".startswith(item.sample.answer or "")
    assert_attributed(item, app.retriever, answered=False)
    assert_released(handler)


def test_internal_errors_never_reach_the_user(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = rag_app(judge_server, make_judge)
    with online_handler(app.llm) as handler:

        def broken(*args: Any, **kwargs: Any) -> int:
            raise KeyError("tracker bug")

        monkeypatch.setattr(handler._tracker, "start", broken)
        with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
            for i in range(3):
                assert app.chain.invoke(question(i), config={"callbacks": [handler]})
        stats = handler.stats
    assert stats.handler_errors >= 3
    logged = [r for r in caplog.records if "on_chain_start failed" in r.getMessage()]
    assert len(logged) == 1  # once per kind


def test_judge_calls_do_not_reenter_the_handler(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    with online_handler(app.llm) as handler:
        for i in range(3):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert handler.flush(10)
        stats = handler.stats
    assert judge_server.count("RelevantSentences") == 3
    assert stats.traces == 3  # the judge runs (chains and models) created no traces here


def test_handler_is_shared_not_copied() -> None:
    handler = RagMetricsCallbackHandler(metrics=[ContextRelevance()], sinks=[])
    assert copy.copy(handler) is handler
    assert copy.deepcopy({"callbacks": [handler]})["callbacks"][0] is handler
    assert handler.close()


def test_options_are_checked_once_and_handed_down_as_one_settings_object() -> None:
    handler = RagMetricsCallbackHandler(sample_rate=0.25, max_concurrency=2, name="rm-settings")
    settings = handler.settings
    assert isinstance(settings, HandlerSettings)
    assert (settings.sample_rate, settings.max_concurrency) == (0.25, 2)
    assert handler._background.settings is settings  # the same object, not a relay
    assert handler.close(1)


def test_defaults_and_lazy_threads() -> None:
    handler = RagMetricsCallbackHandler(name="ragmetrics-lazy")
    assert [m.metric_name for m in handler.metrics] == ["context_relevance", "context_precision"]
    assert isinstance(handler.sinks[0], LoggingSink)
    assert handler.run_inline
    # Model events carry the streamed tokens (chat-model starts are not needed); agent
    # events must stay on for the tool callbacks.
    assert not handler.ignore_llm
    assert handler.ignore_chat_model
    assert not handler.ignore_agent
    assert not any(t.name.startswith("ragmetrics-lazy") for t in threading.enumerate())
    assert handler.flush(1)
    assert handler.close(1)
    assert handler.closed
    assert handler.close()  # idempotent


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"metrics": []}, ValueError, "at least one metric"),
        ({"metrics": ["context_relevance"]}, TypeError, r"metrics\[0\]"),
        (
            {"metrics": [ContextRelevance(), ContextRelevance()]},
            ValueError,
            r"metrics\[1\].*context_relevance",
        ),
        ({"sinks": [print]}, TypeError, r"sinks\[0\].*CallableSink"),
        (
            {"metrics": ContextRelevance()},
            TypeError,
            r"`metrics` must be a list of metrics, got ContextRelevance \(one metric: pass",
        ),
        ({"metrics": "context_relevance"}, TypeError, "`metrics` must be a list of metrics"),
        ({"sinks": "x"}, TypeError, "`sinks` must be a list of sinks, got str"),
        (
            {"sinks": InMemorySink()},
            TypeError,
            r"`sinks` must be a list of sinks, got InMemorySink \(one sink: pass",
        ),
        (
            {"isolation": "bogus"},
            TypeError,
            "`isolation` must be 'auto', 'thread', 'process' or a ProcessIsolation, got 'bogus'",
        ),
        ({"sample_rate": 2}, ValueError, "sample_rate"),
        ({"question_from": "answer"}, ValueError, "question_from"),
        ({"answer_from": "output"}, TypeError, "answer_from"),
        ({"reference_provider": {"q": "r"}}, TypeError, "reference_provider"),
        ({"max_queue_size": 0}, ValueError, "max_queue_size"),
        ({"max_concurrency": 0}, ValueError, "max_concurrency"),
        ({"timeout": 0}, ValueError, "timeout"),
        ({"max_open_traces": 0}, ValueError, "max_open_traces"),
        ({"trace_judge": 3}, TypeError, "trace_judge"),
        ({"exit_timeout": -1}, ValueError, "exit_timeout"),
        # Before, pydantic's lax coercion took these: every trace scored, a string rate.
        ({"sample_rate": True}, ValueError, "`sample_rate` must be a finite number, got True"),
        ({"sample_rate": "0.5"}, ValueError, "`sample_rate` must be a finite number, got '0.5'"),
        ({"timeout": "5"}, ValueError, "`timeout` must be a finite number, got '5'"),
        ({"max_concurrency": True}, ValueError, "`max_concurrency` must be a finite number"),
        ({"exit_timeout": math.inf}, ValueError, "`exit_timeout` must be a finite number"),
    ],
)
def test_bad_options_fail_with_a_clear_message(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        RagMetricsCallbackHandler(**kwargs)
