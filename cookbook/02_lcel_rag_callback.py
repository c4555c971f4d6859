"""Score every retrieval of an LCEL RAG chain while it serves requests (online evaluation).

``RagMetricsCallbackHandler`` records each retrieval on the caller's thread and scores it in
the background, so the chain never waits for a judge. References come from a
``reference_provider`` (here: a lookup in the questions you have reference answers for);
retrievals without one still get the reference-free metrics, and the others are *skipped*
(score None), never counted as 0.

Environment:
    OPENAI_API_KEY      judge and answering model (OPENAI_BASE_URL for a local
                        OpenAI-compatible server such as Ollama or vLLM; any key works there)

Run: python cookbook/02_lcel_rag_callback.py
"""

from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import (
    ContextPrecision,
    ContextRecall,
    ContextRelevance,
    IDBasedContextRecall,
    InMemorySink,
    JsonlSink,
    RagMetricsCallbackHandler,
)
from langchain_ragmetrics.demo import LexicalEmbeddings, load_corpus

corpus = load_corpus()  # a few bundled documents and questions; use your own data here

# The RAG chain: retriever -> prompt -> model -> text.
retriever = InMemoryVectorStore.from_documents(corpus.documents, LexicalEmbeddings()).as_retriever(
    search_kwargs={"k": 2}
)
prompt = ChatPromptTemplate.from_messages(
    [
        ("system", "Answer the question using only this context:\n\n{context}"),
        ("human", "{question}"),
    ]
)


def format_docs(docs: list[Document]) -> str:
    return "\n\n".join(d.page_content for d in docs)


llm = ChatOpenAI(model="gpt-4o-mini", temperature=0)
rag_chain = (
    {"context": retriever | format_docs, "question": RunnablePassthrough()}
    | prompt
    | llm
    | StrOutputParser()
)

# References for the questions we know the answer to (a database or a dataset in practice).
known = {q.question: q for q in corpus.questions}


def reference_provider(question: str | None, metadata: dict) -> dict | None:
    # ``metadata`` is the retriever run's metadata (e.g. a user or document-set id).
    q = known.get(question or "")
    if q is None:
        return None
    return {"reference": q.reference, "reference_context_ids": q.reference_context_ids}


judge = ChatOpenAI(model="gpt-4o-mini", temperature=0)
memory = InMemorySink()
handler = RagMetricsCallbackHandler(
    metrics=[
        ContextRelevance(llm=judge),  # needs only the question
        ContextPrecision(llm=judge),  # judged against the reference, else the answer
        ContextRecall(llm=judge),  # needs a reference
        IDBasedContextRecall(),  # needs reference document ids; no LLM
    ],
    sinks=[memory, JsonlSink("online_scores.jsonl")],
    sample_rate=1.0,  # score every request here; 0.05 is a typical production rate
    reference_provider=reference_provider,
)

# Attach it per call ...
for q in corpus.questions[:2]:
    answer = rag_chain.invoke(q.question, config={"callbacks": [handler]})
    print(f"Q: {q.question}\nA: {answer}\n")

# ... or bind it once; batch, stream and async calls are scored too.
monitored = rag_chain.with_config(callbacks=[handler])
monitored.batch([q.question for q in corpus.questions[2:4]])
monitored.invoke("Where is the Eiffel Tower?")  # no reference known: recall is skipped

handler.flush(timeout=120)  # wait for the background scoring (a server would not)
for item in memory.results:
    score = item.result.score
    shown = "skipped" if score is None else f"{score:.2f}"
    print(f"{item.query[:58]:58}  {item.result.metric:24} {shown}")

stats = handler.stats
print(f"\nretrievals seen: {stats.seen}, scored: {stats.scored}, skipped: {stats.skipped}")
handler.close()
