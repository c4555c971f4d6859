"""Retrievers called by tools (agentic RAG) and streams closed early.

The agents are LangChain's ``create_agent`` (LangChain 1.x) and LangGraph's prebuilt ReAct
agent (``create_react_agent``, deprecated for the former but still what many apps run), each
with ``create_retriever_tool``, driven by the real ``ChatOpenAI`` against the loopback server,
which scripts the tool calls.
"""

import asyncio
import re
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, create_retriever_tool, tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph

from langchain_ragmetrics import InMemorySink, OnlineResult
from tests._support.openai_server import JudgeRequest, JudgeServer, Reply
from tests._support.rag import (
    answer_script,
    corpus,
    item,
    make_retriever,
    online_handler,
    question,
    rag_app,
    rag_router,
)

JudgeFactory = Callable[..., ChatOpenAI]
TOOL = "search_facts"


def agent_script(req: JudgeRequest) -> Reply | str:
    """The agent model: one tool call per item of the question, then a final answer."""
    asked = sorted(set(re.findall(r"item\d{3}", req.user)))
    done = [m for m in req.messages if m.get("role") == "tool"]
    if len(done) < len(asked):
        return Reply(obj={"query": f"What about {asked[len(done)]}?"}, tool_name=TOOL)
    return f"Final answer about {' '.join(asked)}."


def langchain_agent(llm: BaseChatModel, tools: list[BaseTool]) -> Any:
    """LangChain 1.x's agent (a LangGraph graph under the hood)."""
    from langchain.agents import create_agent

    return create_agent(llm, tools)


def langgraph_react_agent(llm: BaseChatModel, tools: list[BaseTool]) -> Any:
    """LangGraph's prebuilt ReAct agent (its deprecation in favour of the above silenced)."""
    from langgraph.prebuilt import create_react_agent
    from langgraph.warnings import LangGraphDeprecatedSinceV10

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
        return create_react_agent(llm, tools)


def results(handler: Any) -> list[OnlineResult]:
    sink = handler.sinks[0]
    assert isinstance(sink, InMemorySink)
    return sink.results


@pytest.mark.parametrize("build", [langchain_agent, langgraph_react_agent])
def test_retrievals_made_by_an_agent_belong_to_the_request(
    build: Callable[[BaseChatModel, list[BaseTool]], Any],
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
) -> None:
    app = rag_app(judge_server, make_judge)
    judge_server.script = rag_router(**{TOOL: agent_script})
    retriever_tool = create_retriever_tool(
        make_retriever(corpus(30)), TOOL, "Search the facts about an item."
    )
    agent = build(app.llm, [retriever_tool])
    with online_handler(app.llm) as handler:
        one = agent.invoke(
            {"messages": [HumanMessage(question(3))]}, config={"callbacks": [handler]}
        )
        two = agent.invoke(  # two tool calls (two retrievals) in one request
            {"messages": [HumanMessage(f"Tell me about {item(4)} and {item(5)}")]},
            config={"callbacks": [handler]},
        )
        assert handler.flush(30)
        stats = handler.stats
        items = results(handler)
    assert one["messages"][-1].content == f"Final answer about {item(3)}."
    assert two["messages"][-1].content == f"Final answer about {item(4)} {item(5)}."
    assert (stats.traces, stats.seen, stats.scored, stats.errored) == (2, 3, 3, 0)
    by_query = {i.query: i for i in items}
    assert set(by_query) == {f"What about {item(n)}?" for n in (3, 4, 5)}
    # Each retrieval got the request's final answer (the last AI message) and its trace.
    first = by_query[f"What about {item(3)}?"]
    assert first.sample.answer == f"Final answer about {item(3)}."
    fourth, fifth = by_query[f"What about {item(4)}?"], by_query[f"What about {item(5)}?"]
    assert fourth.sample.answer == fifth.sample.answer == two["messages"][-1].content
    assert fourth.trace_id == fifth.trace_id != first.trace_id
    assert first.retriever == "VectorStoreRetriever"
    assert first.score == 0.5  # one of the two retrieved facts names the item


def test_a_retriever_in_a_custom_tool_node(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    retriever = make_retriever(corpus(30))

    @tool
    def lookup(query: str) -> str:
        """Look up facts."""
        return "\n".join(d.page_content for d in retriever.invoke(query))

    def call_tool(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        asked = str(state["messages"][0].content)
        found = lookup.invoke({"query": asked}, config)
        return {"messages": [ToolMessage(found, tool_call_id="manual")]}

    def answer(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [AIMessage(f"Answer from {len(state['messages'])} messages.")]}

    graph = StateGraph(MessagesState)
    graph.add_node("tools", call_tool)
    graph.add_node("answer", answer)
    graph.add_edge(START, "tools")
    graph.add_edge("tools", "answer")
    graph.add_edge("answer", END)
    compiled = graph.compile()
    with online_handler(app.llm) as handler:
        compiled.invoke({"messages": [HumanMessage(question(7))]}, {"callbacks": [handler]})
        assert handler.flush(30)
        stats = handler.stats
        (result,) = results(handler)
    assert (stats.traces, stats.seen, stats.scored) == (1, 1, 1)
    assert result.sample.answer == "Answer from 2 messages."
    assert result.query == question(7)


def test_a_sync_stream_closed_early_is_scored_with_the_partial_answer(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge, streaming=True)
    with online_handler(app.llm) as handler:
        stream = app.chain.stream(question(2), config={"callbacks": [handler]})
        first = next(chunk for chunk in stream if chunk)
        stream.close()  # the consumer hangs up after the first words
        assert handler.flush(30)
        stats = handler.stats
        (result,) = results(handler)
    assert first
    assert (stats.traces, stats.errored, stats.scored) == (1, 0, 1)
    partial = result.sample.answer
    assert partial  # scored with the answer streamed so far, never None
    assert f"Answer about {item(2)}.".startswith(partial)


async def test_an_async_stream_closed_early_is_scored_not_errored(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge, streaming=True)
    with online_handler(app.llm) as handler:
        stream = app.chain.astream(question(2), config={"callbacks": [handler]})
        first = ""
        async for chunk in stream:
            first = chunk
            if first:
                break
        await stream.aclose()
        # LangChain reports the close from the generators' cleanup, on a later loop turn.
        for _ in range(1000):
            if handler.stats.traces:
                break
            await asyncio.sleep(0.01)
        assert await handler.aflush(30)
        stats = handler.stats
        (result,) = results(handler)
    assert first
    assert (stats.traces, stats.errored, stats.scored) == (1, 0, 1)
    partial = result.sample.answer
    assert partial
    assert f"Answer about {item(2)}.".startswith(partial)


def test_a_model_streamed_outside_any_trace_is_ignored(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = answer_script
    llm = make_judge(streaming=True)
    with online_handler(llm) as handler:
        assert "Answer" in str(llm.invoke("Question: x", config={"callbacks": [handler]}).content)
        assert handler.flush(10)
        assert (handler.stats.traces, handler.stats.handler_errors) == (0, 0)
        assert handler.stats.open_traces == 0
