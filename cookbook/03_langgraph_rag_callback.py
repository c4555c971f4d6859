"""Score the retrievals of a LangGraph RAG graph with the same callback handler.

The graph has a ``retrieve`` node and a ``generate`` node. The handler finds the retriever
run wherever it sits under the graph run, takes the answer from the graph's final state
(the ``answer`` key) and reads the references from the run metadata keys ``reference`` and
``reference_context_ids``.

Environment:
    OPENAI_API_KEY      judge and answering model (OPENAI_BASE_URL for a local
                        OpenAI-compatible server such as Ollama or vLLM; any key works there)

Run: python cookbook/03_langgraph_rag_callback.py
"""

from typing import TypedDict

from langchain_core.documents import Document
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableConfig
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

from langchain_ragmetrics import (
    CallableSink,
    ContextPrecision,
    ContextRecall,
    IDBasedContextPrecision,
    OnlineResult,
    RagMetricsCallbackHandler,
)
from langchain_ragmetrics.demo import LexicalEmbeddings, load_corpus

corpus = load_corpus()
retriever = InMemoryVectorStore.from_documents(corpus.documents, LexicalEmbeddings()).as_retriever(
    search_kwargs={"k": 2}
)
llm = ChatOpenAI(model="gpt-4o-mini", temperature=0)
prompt = ChatPromptTemplate.from_messages(
    [
        ("system", "Answer the question using only this context:\n\n{context}"),
        ("human", "{question}"),
    ]
)


class State(TypedDict, total=False):
    question: str
    documents: list[Document]
    answer: str


# Nodes pass `config` on to what they call: LangGraph needs this on Python 3.10, where the
# run context (and so the callback handler) does not flow into async tasks by itself.
def retrieve(state: State, config: RunnableConfig) -> State:
    return {"documents": retriever.invoke(state["question"], config)}


def generate(state: State, config: RunnableConfig) -> State:
    context = "\n\n".join(d.page_content for d in state["documents"])
    messages = prompt.format_messages(context=context, question=state["question"])
    return {"answer": str(llm.invoke(messages, config).content)}


graph = (
    StateGraph(State)
    .add_node("retrieve", retrieve)
    .add_node("generate", generate)
    .add_edge(START, "retrieve")
    .add_edge("retrieve", "generate")
    .add_edge("generate", END)
    .compile()
)


def show(item: OnlineResult) -> None:  # runs on the handler's sink thread
    score = item.result.score
    shown = "skipped" if score is None else f"{score:.2f}"
    print(f"scored  {item.query[:50]:50}  {item.result.metric:26} {shown}", flush=True)


judge = ChatOpenAI(model="gpt-4o-mini", temperature=0)
handler = RagMetricsCallbackHandler(
    metrics=[ContextRecall(llm=judge), ContextPrecision(llm=judge), IDBasedContextPrecision()],
    sinks=[CallableSink(show)],
)

for q in corpus.questions[:3]:
    state = graph.invoke(
        {"question": q.question},
        config={
            "callbacks": [handler],
            "metadata": {
                "reference": q.reference,
                "reference_context_ids": q.reference_context_ids,
            },
        },
    )
    print(f"answered  {q.question}  ->  {state['answer']}", flush=True)

handler.flush(timeout=120)
stats = handler.stats
print(f"retrievals seen: {stats.seen}, results scored: {stats.scored}, failed: {stats.failed}")
handler.close()
