"""Re-run an evaluation for free with the verdict cache, gate on it, and write the HTML report.

The cache keeps every validated judge verdict in a SQLite file, keyed by the judge (model,
endpoint, temperature ...), the prompt and the data. Run the same evaluation again and no
judge call is made; change one row and only that row is judged again. The same from the
shell (the CLI caches by default, under the user's cache directory):

    ragmetrics evaluate cookbook/data/rag_eval.jsonl --metrics context_recall,context_precision \
        --fail-under context_recall=0.4 --out runs/today.jsonl
    ragmetrics report runs/today.jsonl -o report.html

Environment:
    OPENAI_API_KEY      the judge (OPENAI_BASE_URL for a local OpenAI-compatible server
                        such as Ollama or vLLM; any key works there)

Run: python cookbook/09_cache_gate_report.py
"""

from pathlib import Path

from langchain_openai import ChatOpenAI

from langchain_ragmetrics import (
    ContextPrecision,
    ContextRecall,
    EvaluationResult,
    QualityGateError,
    VerdictCache,
    evaluate,
)

DATA = Path(__file__).parent / "data" / "rag_eval.jsonl"

judge = ChatOpenAI(model="gpt-4o-mini", temperature=0)
cache = VerdictCache("verdicts.sqlite3")  # VerdictCache() alone uses the user's cache dir
metrics = [ContextRecall(), ContextPrecision()]

for attempt in ("first", "second"):
    result = evaluate(DATA, metrics, llm=judge, cache=cache, show_progress=False)
    usage = result.usage
    print(
        f"{attempt} run: {usage.judge_calls} judge calls, {usage.cache_hits} cache hits, "
        f"{usage.cache_misses} misses; context_recall mean "
        f"{result.aggregates['context_recall'].mean:.4f}"
    )

# A quality gate, as CI would apply it (the CLI's --fail-under exits with code 9 instead).
try:
    result.check(fail_under={"context_recall": 0.4, "context_precision": 0.9})
except QualityGateError as exc:
    print(exc)

# Save the run with its metadata, read it back, and write the self-contained report.
saved = EvaluationResult.load(result.to_jsonl("runs/today.jsonl"))
assert saved.info is not None
print(f"saved run: judge {', '.join(saved.info.judges)}, data {saved.info.dataset_fingerprint}")
saved.to_html("report.html")
print("report written to report.html (one file, opens offline)")
