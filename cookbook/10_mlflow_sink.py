"""Scores on your MLflow traces: each result as an MLflow 3 assessment on the retriever span.

With ``mlflow.langchain.autolog()`` MLflow records a trace per request; ``MlflowSink`` logs
every online result as a ``Feedback`` (value = score, rationale = the judge's reason,
source = LLM judge) on that request's retriever span, where the MLflow UI shows it.

Needs: pip install "langchain-ragmetrics[mlflow]", and a tracking server, e.g.
    mlflow server --backend-store-uri sqlite:///mlflow.db --host 127.0.0.1 --port 5000

Environment:
    OPENAI_API_KEY        judge and answering model (OPENAI_BASE_URL for a local
                          OpenAI-compatible server such as Ollama or vLLM)
    MLFLOW_TRACKING_URI   the tracking server (e.g. http://127.0.0.1:5000)

Run: python cookbook/10_mlflow_sink.py
"""

import mlflow
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import ContextRelevance, InMemorySink, RagMetricsCallbackHandler
from langchain_ragmetrics.demo import LexicalEmbeddings, load_corpus
from langchain_ragmetrics.integrations.mlflow import MlflowSink

mlflow.set_experiment("rag-api")
mlflow.langchain.autolog()  # before the chain runs: MLflow traces every request

corpus = load_corpus()
retriever = InMemoryVectorStore.from_documents(corpus.documents, LexicalEmbeddings()).as_retriever(
    search_kwargs={"k": 2}
)
prompt = ChatPromptTemplate.from_messages(
    [("system", "Answer using only this context:\n\n{context}"), ("human", "{question}")]
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

memory = InMemorySink()  # only to print what was sent
handler = RagMetricsCallbackHandler(
    metrics=[ContextRelevance(llm=ChatOpenAI(model="gpt-4o-mini", temperature=0))],
    sinks=[MlflowSink(), memory],
)
for q in corpus.questions[:3]:
    rag_chain.invoke(q.question, config={"callbacks": [handler]})
handler.flush(timeout=120)
handler.close()

mlflow.flush_trace_async_logging()
client = mlflow.MlflowClient()
for item in memory.results:
    trace_id, span_id = item.links["mlflow"]
    (feedback,) = client.get_trace(trace_id).info.assessments
    print(f"{feedback.name}={feedback.value:.2f} on trace {trace_id} span {feedback.span_id}")
print(f"assessments logged: {handler.stats.sinks['MlflowSink'].delivered}")
