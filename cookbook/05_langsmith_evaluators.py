"""Send context scores to LangSmith: an experiment whose evaluators are ragmetrics metrics.

Creates (once) a small LangSmith dataset of questions with reference answers and reference
document ids, runs a RAG chain on it with ``langsmith.evaluate`` and attaches one feedback score
per metric to every run. The evaluators read the question from the example inputs, the
retrieved documents from the chain's retriever run and the reference from the example outputs.

Environment:
    LANGSMITH_API_KEY   your LangSmith key (LANGSMITH_ENDPOINT for a self-hosted instance)
    OPENAI_API_KEY      judge and answering model (OPENAI_BASE_URL for a local
                        OpenAI-compatible server such as Ollama or vLLM; any key works there)

Run: python cookbook/05_langsmith_evaluators.py
"""

import langsmith
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import ContextPrecision, ContextRecall, IDBasedContextRecall
from langchain_ragmetrics.demo import LexicalEmbeddings, load_corpus
from langchain_ragmetrics.integrations.langsmith import metric_to_langsmith_evaluator

DATASET = "ragmetrics-cookbook"

corpus = load_corpus()
client = langsmith.Client()  # reads LANGSMITH_API_KEY and LANGSMITH_ENDPOINT

# 1. The dataset: inputs are what the chain gets, outputs what the evaluators compare with.
if not client.has_dataset(dataset_name=DATASET):
    dataset = client.create_dataset(DATASET, description="ragmetrics cookbook questions")
    client.create_examples(
        dataset_id=dataset.id,
        examples=[
            {
                "inputs": {"question": q.question},
                "outputs": {
                    "reference": q.reference,
                    "reference_context_ids": q.reference_context_ids,
                },
            }
            for q in corpus.questions
        ],
    )

# 2. The RAG chain under test (swap in your own retriever and model).
retriever = InMemoryVectorStore.from_documents(corpus.documents, LexicalEmbeddings()).as_retriever(
    search_kwargs={"k": 2}
)
prompt = ChatPromptTemplate.from_messages(
    [
        ("system", "Answer the question using only this context:\n\n{context}"),
        ("human", "{question}"),
    ]
)
llm = ChatOpenAI(model="gpt-4o-mini", temperature=0)
rag_chain = (
    RunnableLambda(lambda inputs: inputs["question"])
    | {
        "context": retriever | (lambda docs: "\n\n".join(d.page_content for d in docs)),
        "question": RunnablePassthrough(),
    }
    | prompt
    | llm
    | StrOutputParser()
)

# 3. The metrics, as LangSmith evaluators.
judge = ChatOpenAI(model="gpt-4o-mini", temperature=0)
evaluators = [
    metric_to_langsmith_evaluator(ContextRecall(llm=judge)),
    metric_to_langsmith_evaluator(ContextPrecision(llm=judge)),
    metric_to_langsmith_evaluator(IDBasedContextRecall()),
]

results = langsmith.evaluate(
    rag_chain,
    data=DATASET,
    evaluators=evaluators,
    experiment_prefix="ragmetrics-cookbook",
    client=client,
)

# 4. The same scores, locally: one line per question.
for row in results:
    scores = {r.key: r.score for r in row["evaluation_results"]["results"]}
    question = row["example"].inputs["question"]
    cells = "  ".join(f"{key}={score:.2f}" for key, score in sorted(scores.items()))
    print(f"{question}\n    {cells}")
client.flush()
print(f"Scores sent to LangSmith as feedback of experiment {results.experiment_name!r}.")
