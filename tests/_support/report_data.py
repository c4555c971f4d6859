"""Two runs with realistic verdicts, for the HTML report tests (unit and browser)."""

from __future__ import annotations

from langchain_ragmetrics import MetricResult, RagSample, Usage
from langchain_ragmetrics.evaluation import EvaluationResult, EvaluationRow

__all__ = ["QUESTIONS", "report_runs"]

QUESTIONS = [
    "Who wrote <b>On the Origin of Species</b>?",  # markup in data must be shown, not run
    "When was the Eiffel Tower finished?",
    "What is the boiling point of water at sea level?",
    "Who painted the Mona Lisa?",
    "What is the capital of Australia?",
    "How many moons does Mars have?",
    "Which element has the symbol Fe?",
    "Who proposed the theory of general relativity?",
]
_RECALL_NEW = [0.25, 1.0, 0.5, 1.0, 0.75, 1.0, 0.0, 1.0]
_RECALL_BASE = [1.0, 1.0, 0.5, 1.0, 0.75, 1.0, 0.5, 1.0]
_PRECISION_NEW = [0.5, 1.0, 1.0, 0.83, 0.5, 1.0, 0.33, 1.0]
_PRECISION_BASE = [0.5, 1.0, 1.0, 0.83, 0.5, 1.0, 0.33, 1.0]


def _recall(score: float, i: int) -> MetricResult:
    total = 4
    supported = round(score * total)
    return MetricResult(
        metric="context_recall",
        score=score,
        reason=f"{supported} of {total} reference statements are supported by the contexts.",
        details={
            "statements": [
                {
                    "statement": f"Reference statement {n + 1} of row {i + 1}.",
                    "attributed": n < supported,
                    "reason": "found in context 1" if n < supported else "not in any context",
                }
                for n in range(total)
            ]
        },
        usage=Usage(input_tokens=420, output_tokens=90, judge_calls=1),
        judge="judge-model",
    )


def _precision(score: float, i: int) -> MetricResult:
    return MetricResult(
        metric="context_precision",
        score=score,
        reason=f"useful contexts ranked at {score:.2f} average precision",
        details={
            "contexts": [
                {"index": 0, "useful": score > 0.4, "reason": "mentions the answer"},
                {"index": 1, "useful": False, "reason": "off topic"},
            ]
        },
        usage=Usage(input_tokens=380, output_tokens=60, judge_calls=1),
        judge="judge-model",
    )


def _run(recall: list[float], precision: list[float], source: str) -> EvaluationResult:
    rows = []
    for i, question in enumerate(QUESTIONS):
        sample = RagSample(
            question=question,
            contexts=[f"Passage about {question}", "An unrelated passage about the weather."],
            reference=f"The reference answer to {question}",
            metadata={"id": f"q{i + 1}"},
        )
        rows.append(
            EvaluationRow(
                position=i,
                location=f"{source}, row {i + 1} (line {i + 1})",
                sample=sample,
                results={
                    "context_recall": _recall(recall[i], i),
                    "context_precision": _precision(precision[i], i),
                },
            )
        )
    failed = MetricResult(
        metric="context_recall", score=float("nan"), error="TimeoutError: judge took too long"
    )
    rows.append(
        EvaluationRow(
            position=len(rows),
            location=f"{source}, row {len(rows) + 1}",
            sample=RagSample(question="A question whose judge timed out", contexts=["c"]),
            results={"context_recall": failed, "context_precision": None},
        )
    )
    return EvaluationResult(
        metrics=["context_recall", "context_precision"], rows=rows, source=source, elapsed_s=3.2
    )


def report_runs() -> tuple[EvaluationResult, EvaluationResult]:
    """(new, base): recall dropped on two rows in the new run; precision unchanged."""
    return (
        _run(_RECALL_NEW, _PRECISION_NEW, "eval_new.jsonl"),
        _run(_RECALL_BASE, _PRECISION_BASE, "eval_base.jsonl"),
    )
