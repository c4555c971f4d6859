"""Plain-text views: the summary table of a run (``print(result)``) and of a comparison."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from langchain_ragmetrics.evaluation._model import MetricSummary, ResultData

__all__ = ["render_summary"]

_MAX_FAILURES = 10
_HEADERS = ("metric", "mean", "std", "min", "max", "scored", "failed", "skipped", "not run")


def _number(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.4f}"


def _cells(summary: MetricSummary) -> tuple[str, ...]:
    return (
        summary.metric,
        _number(summary.mean),
        _number(summary.std),
        _number(summary.min),
        _number(summary.max),
        str(summary.count),
        str(summary.failed),
        str(summary.skipped),
        str(summary.not_run),
    )


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * width for width in widths))
    return lines


def render_summary(result: ResultData) -> str:
    """Headline, one table line per metric, usage, failures and an interruption note."""
    aggregates = result.aggregates
    jobs = len(result.rows) * len(result.metrics)
    lines = [
        f"Evaluation of {result.source}: {len(result.rows)} samples x "
        f"{len(result.metrics)} metrics = {jobs} jobs in {result.elapsed_s:.2f} s"
    ]
    lines += _table([_HEADERS, *(_cells(s) for s in aggregates.values())])
    usage = result.usage
    judges = sorted({s.judge for s in aggregates.values() if s.judge})
    if usage.judge_calls or judges:
        judge_note = f" ({', '.join(judges)})" if judges else ""
        lines.append(
            f"Judge calls: {usage.judge_calls}{judge_note}; tokens: "
            f"{usage.input_tokens:,} in + {usage.output_tokens:,} out"
        )
    elif result.interrupted:  # judged jobs may have been at work: none finished
        lines.append("Judge calls: 0 counted (no job finished before the interruption)")
    else:
        lines.append("Judge calls: 0 (no LLM-judged metric)")
    if usage.cache_hits or usage.cache_misses:
        lines.append(
            f"Verdict cache: {usage.cache_hits} hits, {usage.cache_misses} misses "
            "(a hit is a judge call not paid for)"
        )
    failures = result.failures()
    if failures:
        lines.append(f"Failed jobs ({len(failures)}):")
        for location, metric, error in failures[:_MAX_FAILURES]:
            lines.append(f"  - {location} [{metric}]: {error}")
        if len(failures) > _MAX_FAILURES:
            lines.append(f"  ... and {len(failures) - _MAX_FAILURES} more")
    if result.interrupted:
        missing = sum(s.not_run for s in aggregates.values())
        lines.append(
            f"Interrupted: {jobs - missing} of {jobs} jobs finished; {missing} did not run."
        )
    return "\n".join(lines)
