"""Hand-built EvaluationResults for the gate, compare, save and report tests."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_ragmetrics import MetricResult, RagSample, Usage
from langchain_ragmetrics.evaluation import EvaluationResult, EvaluationRow

__all__ = ["FAILED", "build_result"]

FAILED = math.nan
"""A score meaning "this job failed" (NaN with an error)."""


def _result(metric: str, score: float | None, row: int) -> MetricResult | None:
    if score is not None and math.isnan(score):
        return MetricResult(metric=metric, score=math.nan, error=f"TimeoutError: row {row}")
    if score is None:
        return None
    return MetricResult(
        metric=metric,
        score=score,
        reason=f"{metric} reason {row}",
        details={"verdicts": [{"index": 0, "useful": score >= 0.5, "reason": f"why {row}"}]},
        usage=Usage(input_tokens=10, output_tokens=2, judge_calls=1),
        judge="judge-model",
    )


def build_result(
    scores: Mapping[str, Sequence[float | None]],
    *,
    questions: Sequence[str] | None = None,
    ids: Sequence[str | None] | None = None,
    source: str = "data.jsonl",
    **extra: Any,
) -> EvaluationResult:
    """One row per position of the score lists: a float, FAILED (NaN) or None (not run)."""
    metrics = list(scores)
    count = len(next(iter(scores.values())))
    rows = []
    for i in range(count):
        metadata = {"id": ids[i]} if ids is not None and ids[i] is not None else {}
        question = questions[i] if questions is not None else f"question {i}"
        sample = RagSample(
            question=question,
            contexts=[f"context {i}a", f"context {i}b"],
            reference=f"reference of {question}",
            metadata=metadata,
        )
        rows.append(
            EvaluationRow(
                position=i,
                location=f"{source}, row {i + 1}",
                sample=sample,
                results={m: _result(m, scores[m][i], i) for m in metrics},
            )
        )
    return EvaluationResult(metrics=metrics, rows=rows, source=source, **extra)
