"""Quality gates: thresholds a run must meet for a build to pass (``result.check`` and the CLI)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from langchain_ragmetrics._errors import QualityGateError
from langchain_ragmetrics._options import fraction

if TYPE_CHECKING:
    from langchain_ragmetrics.evaluation._model import ResultData

__all__ = ["QualityGateError", "gate_problems", "parse_thresholds"]


def parse_thresholds(text: str) -> dict[str, float]:
    """Read ``"context_recall=0.7,context_precision=0.6"`` into a dict.

    Raises:
        ValueError: A part is not ``name=number`` or the number is outside [0, 1].
    """
    out: dict[str, float] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        name = name.strip().lower()
        if not sep or not name:
            msg = f"expected metric=threshold, got {part.strip()!r}"
            raise ValueError(msg)
        try:
            number = float(value)
        except ValueError:
            msg = f"threshold of {name} must be a number, got {value.strip()!r}"
            raise ValueError(msg) from None
        if not 0.0 <= number <= 1.0:
            msg = f"threshold of {name} must be between 0 and 1, got {number:g}"
            raise ValueError(msg)
        if name in out and out[name] != number:  # which one was meant cannot be guessed
            msg = f"{name} is given two thresholds, {out[name]:g} and {number:g}"
            raise ValueError(msg)
        out[name] = number
    if not out:
        msg = "no threshold given (expected e.g. context_recall=0.7)"
        raise ValueError(msg)
    return out


def gate_problems(
    result: ResultData,
    *,
    fail_under: Mapping[str, float] | None = None,
    max_failed_rate: float | None = None,
) -> list[str]:
    """Why ``result`` fails its gates (empty when it passes).

    * ``fail_under``: the MEAN of each named metric over its scored rows (failed and skipped
      rows left out) must be at least the threshold; a metric with no score at all fails.
    * ``max_failed_rate``: failed jobs / all jobs must not exceed it.
    * Always: a run in which every job failed fails, and so does an interrupted run (its
      means and rates cover only the jobs that ran).

    Raises:
        KeyError: ``fail_under`` names a metric the run does not have.
        ValueError: A threshold or ``max_failed_rate`` is not a number from 0 to 1.
    """
    problems: list[str] = []
    aggregates = result.aggregates
    for name, given in (fail_under or {}).items():
        threshold = fraction(f"fail_under[{name!r}]", given)
        if name not in aggregates:
            msg = f"fail_under names {name!r}, which this run did not score; it has " + ", ".join(
                result.metrics
            )
            raise KeyError(msg)
        mean = aggregates[name].mean
        if math.isnan(mean):
            problems.append(f"{name}: no row was scored (threshold {threshold:g})")
        elif mean < threshold:
            problems.append(f"{name}: mean {mean:.4f} is below {threshold:g}")
    jobs = len(result.rows) * len(result.metrics)
    failed = sum(s.failed for s in aggregates.values())
    if max_failed_rate is not None:
        max_failed_rate = fraction("max_failed_rate", max_failed_rate)
        if jobs and failed / jobs > max_failed_rate:
            problems.append(
                f"{failed} of {jobs} jobs failed ({failed / jobs:.1%}), more than the "
                f"allowed {max_failed_rate:.1%}"
            )
    if result.interrupted:
        not_run = sum(s.not_run for s in aggregates.values())
        problems.append(f"the run was interrupted: {not_run} of {jobs} jobs never ran")
    if jobs and failed == jobs:
        first = next(iter(result.failures()), None)
        cause = f"; first error: {first[2]}" if first is not None else ""
        problems.append(f"every job failed ({failed} of {jobs}){cause}")
    return problems
