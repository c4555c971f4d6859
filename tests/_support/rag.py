"""A real RAG app for the online tests: an LCEL chain and a LangGraph graph, fully offline.

Retrieval is an ``InMemoryVectorStore`` over ``LexicalEmbeddings``; the answering model and
the judges are real ``ChatOpenAI`` clients pointed at the loopback ``JudgeServer``, whose
script (:func:`rag_router`) answers plain-text requests as the answering model and
structured requests as the judge, by schema name.

The corpus has one fact per *item* (``item007`` ...): the question about an item retrieves
that item's fact first, so every result can be checked for correct attribution.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import (
    Runnable,
    RunnableConfig,
    RunnableLambda,
    RunnableParallel,
    RunnablePassthrough,
)
from langchain_core.vectorstores import InMemoryVectorStore
from langgraph.graph import END, START, StateGraph

from langchain_ragmetrics import ContextRelevance, InMemorySink, RagMetricsCallbackHandler
from langchain_ragmetrics.demo._embeddings import LexicalEmbeddings
from langchain_ragmetrics.metrics import RetryPolicy
from tests._support.judges import payload
from tests._support.openai_server import JudgeRequest, JudgeServer, Script, router

__all__ = [
    "ANSWER_PROMPT",
    "FAST",
    "GraphState",
    "RagApp",
    "answer_script",
    "build_chain",
    "build_graph",
    "build_two_retriever_chain",
    "corpus",
    "fact",
    "item",
    "items_in",
    "make_retriever",
    "online_handler",
    "precision_judge",
    "question",
    "rag_app",
    "rag_router",
    "relevance_judge",
]

_ITEM = re.compile(r"\bitem\d{3}\b")

ANSWER_PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "Answer the question from the context only."),
        ("human", "Question: {question}\nContext:\n{context}"),
    ]
)


def item(i: int) -> str:
    """The token naming item ``i`` (one word, so lexical retrieval keys on it)."""
    return f"item{i:03d}"


def fact(i: int) -> str:
    """The single-sentence fact about item ``i``."""
    return f"The code word of {item(i)} is word{i * 7919 % 10007}."


def question(i: int) -> str:
    """The question about item ``i``."""
    return f"What is the code word of {item(i)}?"


def items_in(text: str) -> set[str]:
    """Item tokens mentioned in a text."""
    return set(_ITEM.findall(text))


def corpus(n: int, *, prefix: str = "fact") -> list[Document]:
    """``n`` documents, one fact each, with ids ``<prefix>-<i>``."""
    return [Document(page_content=fact(i), id=f"{prefix}-{i}") for i in range(n)]


def make_retriever(docs: Sequence[Document], *, k: int = 2) -> BaseRetriever:
    """A vector-store retriever over ``docs`` (lexical embeddings, in memory)."""
    store = InMemoryVectorStore(LexicalEmbeddings())
    store.add_documents(list(docs))
    return store.as_retriever(search_kwargs={"k": k})


def _format_docs(docs: Sequence[Document]) -> str:
    return "\n".join(d.page_content for d in docs)


def build_chain(llm: BaseChatModel, retriever: BaseRetriever) -> Runnable[str, str]:
    """An LCEL RAG chain whose retriever sits four levels below the root run.

    root ``rag`` -> ``answer`` sequence -> ``RunnableParallel`` -> ``context`` sequence
    -> retriever.
    """
    context = (RunnablePassthrough() | retriever | RunnableLambda(_format_docs)).with_config(
        run_name="context"
    )
    answer = (
        RunnableParallel(context=context, question=RunnablePassthrough())
        | ANSWER_PROMPT
        | llm
        | StrOutputParser()
    ).with_config(run_name="answer")
    return (RunnableLambda(lambda q: q.strip()) | answer).with_config(run_name="rag")


def build_two_retriever_chain(
    llm: BaseChatModel, first: BaseRetriever, second: BaseRetriever
) -> Runnable[str, str]:
    """A chain that retrieves from two retrievers in parallel and answers from both."""
    both = RunnableParallel(
        primary=first.with_config(run_name="primary"),
        secondary=second.with_config(run_name="secondary"),
        question=RunnablePassthrough(),
    )
    merge = RunnableLambda(
        lambda x: {
            "context": _format_docs([*x["primary"], *x["secondary"]]),
            "question": x["question"],
        }
    )
    return (both | merge | ANSWER_PROMPT | llm | StrOutputParser()).with_config(run_name="rag2")


class GraphState(TypedDict, total=False):
    """State of the RAG graph."""

    question: str
    context: list[Document]
    answer: str


def build_graph(llm: BaseChatModel, retriever: BaseRetriever) -> Any:
    """A compiled LangGraph ``StateGraph``: ``retrieve`` (calls the retriever) -> ``generate``.

    The nodes pass their ``config`` on, as LangGraph asks: on Python 3.10 the run context
    does not reach async tasks through context variables, so callbacks would be lost.
    """

    def retrieve(state: GraphState, config: RunnableConfig) -> GraphState:
        return {"context": retriever.invoke(state["question"], config)}

    def generate(state: GraphState, config: RunnableConfig) -> GraphState:
        messages = ANSWER_PROMPT.format_messages(
            question=state["question"], context=_format_docs(state["context"])
        )
        return {"answer": str(llm.invoke(messages, config).content)}

    graph = StateGraph(GraphState)
    graph.add_node("retrieve", retrieve)
    graph.add_node("generate", generate)
    graph.add_edge(START, "retrieve")
    graph.add_edge("retrieve", "generate")
    graph.add_edge("generate", END)
    return graph.compile()


# --------------------------------------------------------------------------- scripts


def answer_script(req: JudgeRequest) -> str:
    """The answering model: names the items of the question it was asked."""
    match = re.search(r"Question: (.*)", req.user)
    asked = match.group(1) if match else req.user
    return f"Answer about {' '.join(sorted(items_in(asked))) or 'nothing'}."


def relevance_judge(req: JudgeRequest) -> dict[str, Any]:
    """ContextRelevance judge: a sentence is relevant when it names an item of the question."""
    data = payload(req)
    wanted = items_in(data["question"])
    picked = [s["index"] for s in data["sentences"] if items_in(s["text"]) & wanted]
    return {"relevant_sentence_indices": picked, "reason": "item match"}


def precision_judge(req: JudgeRequest) -> dict[str, Any]:
    """ContextPrecision judge: a passage is useful when it names an item of the question."""
    data = payload(req)
    wanted = items_in(data["question"])
    if "passage" in data:
        return {"reason": "item match", "useful": bool(items_in(data["passage"]) & wanted)}
    return {
        "verdicts": [
            {
                "index": p["index"],
                "reason": "item match",
                "useful": bool(items_in(p["text"]) & wanted),
            }
            for p in data["passages"]
        ]
    }


def rag_router(**overrides: object) -> Script:
    """The server script: plain text -> answering model, structured -> judge by schema name."""
    table: dict[str, object] = {
        "default": answer_script,
        "RelevantSentences": relevance_judge,
        "ContextVerdicts": precision_judge,
        "SingleContextVerdict": precision_judge,
    }
    table.update(overrides)
    return router(table)


# --------------------------------------------------------------------------- wiring

FAST = RetryPolicy(initial_backoff=0.01, max_backoff=0.02)
"""Retries with tiny backoffs, so fault tests stay fast."""

_names = itertools.count()


@dataclass
class RagApp:
    """The loopback server, the answering model, a retriever, the chain and the graph."""

    server: JudgeServer
    llm: BaseChatModel
    retriever: BaseRetriever
    chain: Runnable[str, str]
    graph: Any


def rag_app(
    server: JudgeServer, make_judge: Callable[..., BaseChatModel], n: int = 30, **llm: Any
) -> RagApp:
    """Script ``server`` with :func:`rag_router` and build the app over ``n`` facts.

    ``llm`` options go to ``make_judge`` (e.g. ``max_retries`` for bursts of connections).
    """
    server.script = rag_router()
    llm_model = make_judge(**llm)
    retriever = make_retriever(corpus(n))
    return RagApp(
        server,
        llm_model,
        retriever,
        build_chain(llm_model, retriever),
        build_graph(llm_model, retriever),
    )


def online_handler(llm: BaseChatModel, **overrides: Any) -> RagMetricsCallbackHandler:
    """A handler with a ContextRelevance judge on ``llm`` and an ``InMemorySink``.

    Each handler gets a unique ``name`` so tests can find its threads. Its live judge and
    sink score on this process's threads: ``isolation="thread"`` says so (the default
    ``"auto"`` would choose the same, with a warning that tests counting warnings would see).
    """
    options: dict[str, Any] = {
        "metrics": [ContextRelevance(llm=llm, retry=FAST)],
        "sinks": [InMemorySink()],
        "isolation": "thread",
        "name": f"ragmetrics-test-{next(_names)}",
    }
    options.update(overrides)
    return RagMetricsCallbackHandler(**options)


def ours(record: logging.LogRecord) -> bool:
    """True for a record the package logged: "warns once" counts ours, not other libraries'
    (a client another test left behind may log when it is collected)."""
    return record.name == "langchain_ragmetrics" or record.name.startswith("langchain_ragmetrics.")
