"""Score the traces LangSmith already holds, from a worker off the application's machines.

The application only traces to LangSmith (no scoring in-process). ``LangSmithMonitor``
(the Python twin of ``ragmetrics monitor``) lists the project's retriever runs, joins each
with its trace's root run for the question and the answer, scores it and posts feedback on
the retriever run. A checkpoint file makes it restartable; ``shard=(i, n)`` splits the
project between n workers; ``follow=True`` keeps it polling.

Environment:
    OPENAI_API_KEY      judge and answering model (OPENAI_BASE_URL for a local server)
    LANGSMITH_API_KEY   LangSmith (LANGSMITH_ENDPOINT for a self-hosted instance)

Run: python cookbook/08_langsmith_monitor.py
"""

import uuid

from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.tracers import LangChainTracer
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import ChatOpenAI
from langsmith import Client

from langchain_ragmetrics import ContextPrecision, ContextRelevance
from langchain_ragmetrics.demo import LexicalEmbeddings, load_corpus
from langchain_ragmetrics.integrations.monitor import LangSmithMonitor

project = f"ragmetrics-cookbook-monitor-{uuid.uuid4().hex[:8]}"
client = Client()

# --- the application: a RAG chain traced to LangSmith --------------------------------------
corpus = load_corpus()
retriever = InMemoryVectorStore.from_documents(corpus.documents, LexicalEmbeddings()).as_retriever(
    search_kwargs={"k": 2}
)
prompt = ChatPromptTemplate.from_messages(
    [("system", "Answer using only this context:\n\n{context}"), ("human", "{question}")]
)


def format_docs(docs: list[Document]) -> str:
    return "\n\n".join(d.page_content for d in docs)


rag_chain = (
    {"context": retriever | format_docs, "question": RunnablePassthrough()}
    | prompt
    | ChatOpenAI(model="gpt-4o-mini", temperature=0)
    | StrOutputParser()
)
tracer = LangChainTracer(project_name=project, client=client)  # or LANGSMITH_TRACING=true
for q in corpus.questions[:4]:
    rag_chain.invoke(q.question, config={"callbacks": [tracer]})
tracer.wait_for_futures()
client.flush()

# --- the monitor worker (a cron job, a container, a Kubernetes deployment ...) --------------
judge = ChatOpenAI(model="gpt-4o-mini", temperature=0)
metrics = [ContextRelevance(llm=judge), ContextPrecision(llm=judge)]
summary = LangSmithMonitor(
    project,
    client=client,
    metrics=metrics,
    since="1h",
    checkpoint="monitor-checkpoint.sqlite",
).run()
print(summary.render())

# Run it again: the checkpoint says everything is scored, nothing is sent twice.
again = LangSmithMonitor(
    project, client=client, metrics=metrics, since="1h", checkpoint="monitor-checkpoint.sqlite"
).run()
print(f"second run: already scored {again.runs_already_scored}, sent {again.feedback_sent}")

for run in client.list_runs(project_name=project, run_type="retriever"):
    scores = {f.key: f.score for f in client.list_feedback(run_ids=[run.id])}
    shown = "  ".join(f"{k}={v:.2f}" for k, v in sorted(scores.items()))
    print(f"{run.inputs['query'][:50]:50}  {shown}")
