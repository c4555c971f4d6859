"""Evaluate a dataset file and read the results: summary table, scores, pandas, JSONL.

``data/rag_eval.jsonl`` uses RAGAS column names (user_input, retrieved_contexts, reference,
...), so an existing RAGAS dataset works as is. The same run from the shell:

    ragmetrics evaluate cookbook/data/rag_eval.jsonl \
        --metrics context_recall,context_precision,context_entity_recall --out results.jsonl

Environment:
    OPENAI_API_KEY      the judge (OPENAI_BASE_URL for a local OpenAI-compatible server
                        such as Ollama or vLLM; any key works there)

Run: python cookbook/04_evaluate_dataset.py
"""

from pathlib import Path

from langchain_openai import ChatOpenAI

from langchain_ragmetrics import (
    ContextEntityRecall,
    ContextPrecision,
    ContextRecall,
    IDBasedContextPrecision,
    NonLLMContextRecall,
    evaluate,
)

DATA = Path(__file__).parent / "data" / "rag_eval.jsonl"

judge = ChatOpenAI(model="gpt-4o-mini", temperature=0)
metrics = [
    ContextRecall(),  # LLM-judged: the judge comes from llm= below
    ContextPrecision(),
    ContextEntityRecall(),
    NonLLMContextRecall(),  # string similarity to reference_contexts, no LLM
    IDBasedContextPrecision(),  # retrieved ids vs reference ids, no LLM
]

# Every (row x metric) job runs concurrently under one limit; a failed job becomes NaN.
result = evaluate(DATA, metrics, llm=judge, max_concurrency=8)

print(result)  # the summary table: mean, std, min, max and job counts per metric

print("\ncontext_entity_recall per row:", result["context_entity_recall"])

frame = result.to_pandas()  # one row per sample; needs pandas
worst = frame.sort_values("context_recall").head(2)
for _, row in worst.iterrows():
    print(f"\nlow recall ({row['context_recall']:.2f}): {row['question']}")
    print(f"  why: {row['context_recall_reason']}")

path = result.to_jsonl("rag_eval_results.jsonl")  # full per-row results, one JSON per line
print(f"\nper-row results written to {path}")
