"""Scores in Arize Phoenix: each result as an annotation on the request's retriever span.

The app is traced with OpenInference (``openinference-instrumentation-langchain``), which
sends a span per LangChain run to Phoenix; ``PhoenixSink`` adds every online result as a span
annotation (score, explanation, annotator kind LLM) on the retriever span of its request.

Needs: pip install "langchain-ragmetrics[phoenix]", and a Phoenix server, e.g.
    PHOENIX_HOST=127.0.0.1 phoenix serve        (pip install arize-phoenix)

Environment:
    OPENAI_API_KEY              judge and answering model (OPENAI_BASE_URL for a local
                                OpenAI-compatible server such as Ollama or vLLM)
    PHOENIX_COLLECTOR_ENDPOINT  the Phoenix server (default http://localhost:6006)

Run: python cookbook/11_phoenix_sink.py
"""

import os

from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import ChatOpenAI
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from phoenix.client import Client

from langchain_ragmetrics import ContextRelevance, InMemorySink, RagMetricsCallbackHandler
from langchain_ragmetrics.demo import LexicalEmbeddings, load_corpus
from langchain_ragmetrics.integrations.phoenix import PhoenixSink

phoenix_url = os.environ.get("PHOENIX_COLLECTOR_ENDPOINT", "http://localhost:6006")

# --- the application's tracing (phoenix.otel.register() does the same in one line) ----------
tracer_provider = TracerProvider()
tracer_provider.add_span_processor(
    BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix_url}/v1/traces"))
)
LangChainInstrumentor().instrument(tracer_provider=tracer_provider)

# --- the RAG chain ---------------------------------------------------------------------------
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

# --- online scoring, annotated in Phoenix ----------------------------------------------------
memory = InMemorySink()  # only to print what was sent
handler = RagMetricsCallbackHandler(
    metrics=[ContextRelevance(llm=ChatOpenAI(model="gpt-4o-mini", temperature=0))],
    sinks=[PhoenixSink(pass_threshold=0.5), memory],  # reads PHOENIX_COLLECTOR_ENDPOINT
)
for q in corpus.questions[:3]:
    rag_chain.invoke(q.question, config={"callbacks": [handler]})
tracer_provider.force_flush()
handler.flush(timeout=120)
handler.close()

client = Client(base_url=phoenix_url)
for item in memory.results:
    _, span_id = item.links["openinference"]
    (annotation,) = client.spans.get_span_annotations(
        span_ids=[span_id], project_identifier="default"
    )
    result = annotation["result"]
    print(f"{annotation['name']}={result['score']:.2f} ({result['label']}) on span {span_id}")
print(f"annotations sent: {handler.stats.sinks['PhoenixSink'].delivered}")
tracer_provider.shutdown()
