"""Send online scores to OpenTelemetry: evaluation events in your own traces, and metrics.

``OpenTelemetrySink`` turns every result into a ``gen_ai.evaluation.result`` event (the
OpenTelemetry GenAI semantic conventions), parented to the span that was active when the
retriever ran, plus a score histogram and counters. Here the application is instrumented
with the OpenTelemetry SDK and exports over OTLP/HTTP to a collector (Grafana Alloy, the
OpenTelemetry Collector, Datadog Agent, Honeycomb, Phoenix, Langfuse ...).

Needs: pip install "langchain-ragmetrics[otel]" opentelemetry-exporter-otlp-proto-http

Environment:
    OPENAI_API_KEY                judge and answering model (OPENAI_BASE_URL for a local
                                  OpenAI-compatible server such as Ollama or vLLM)
    OTEL_EXPORTER_OTLP_ENDPOINT   the collector (default http://localhost:4318)

Run: python cookbook/07_opentelemetry_export.py
"""

from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import ChatOpenAI
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from langchain_ragmetrics import (
    ContextPrecision,
    ContextRelevance,
    InMemorySink,
    OpenTelemetrySink,
    RagMetricsCallbackHandler,
)
from langchain_ragmetrics.demo import LexicalEmbeddings, load_corpus

# --- the application's OpenTelemetry setup (usually done once at start-up) -----------------
# The exporters read OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318).
resource = Resource.create({"service.name": "rag-api"})
tracer_provider = TracerProvider(resource=resource)
tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
logger_provider = LoggerProvider(resource=resource)
logger_provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
meter_provider = MeterProvider(
    resource=resource, metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())]
)
# (In a real app: trace.set_tracer_provider(...), set_logger_provider(...) and
# metrics.set_meter_provider(...); the sink then needs no arguments.)
tracer = tracer_provider.get_tracer("rag-api")

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

# --- online scoring, exported to OpenTelemetry -----------------------------------------------
otel_sink = OpenTelemetrySink(
    logger_provider=logger_provider,
    meter_provider=meter_provider,
    tracer_provider=tracer_provider,
    pass_threshold=0.5,  # adds gen_ai.evaluation.score.label = pass / fail
)
memory = InMemorySink()  # only to print what was sent
judge = ChatOpenAI(model="gpt-4o-mini", temperature=0)
handler = RagMetricsCallbackHandler(
    metrics=[ContextRelevance(llm=judge), ContextPrecision(llm=judge)],
    sinks=[otel_sink, memory],
)
otel_sink.observe(handler)  # also export the handler's dropped-retrieval count

request_spans = {}
for q in corpus.questions[:3]:
    # Your web framework's instrumentation opens this span; the events land inside it.
    with tracer.start_as_current_span("POST /ask") as span:
        rag_chain.invoke(q.question, config={"callbacks": [handler]})
        request_spans[q.question] = span.get_span_context()

handler.flush(timeout=120)
handler.close()
for provider in (logger_provider, meter_provider, tracer_provider):
    provider.force_flush()

for item in memory.results:
    span = request_spans[item.question]
    print(
        f"gen_ai.evaluation.result {item.metric}={item.score:.2f} "
        f"-> trace {span.trace_id:032x} span {span.span_id:016x}"
    )
print(f"events sent: {len(memory.results)}")
for provider in (logger_provider, meter_provider, tracer_provider):
    provider.shutdown()
