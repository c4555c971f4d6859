"""Two runs side by side: per-metric means, paired differences with a bootstrap CI, worst rows."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import override

from langchain_ragmetrics._errors import ComparisonError
from langchain_ragmetrics._options import fraction
from langchain_ragmetrics.evaluation._report import _number, _table
from langchain_ragmetrics.evaluation._saved import sample_ids

if TYPE_CHECKING:
    from langchain_ragmetrics.evaluation._model import EvaluationRow, ResultData

__all__ = [
    "Comparison",
    "ComparisonError",
    "MetricComparison",
    "RowChange",
    "bootstrap_ci",
    "compare_results",
    "render_comparison",
]

_WORST_PER_METRIC = 5
_CHUNK = 256  # bootstrap resamples drawn at once (bounds memory on large runs)


class MetricComparison(BaseModel):
    """One metric in two runs."""

    model_config = ConfigDict(extra="forbid")

    metric: str
    """The metric column."""
    base_mean: float
    """Mean score of the base run (all its scored rows); NaN when none."""
    new_mean: float
    """Mean score of the new run (all its scored rows); NaN when none."""
    pairs: int
    """Rows scored in both runs, which the difference is computed on."""
    diff: float
    """Mean of (new - base) over the paired rows; NaN without pairs."""
    ci_low: float
    """Lower bound of the bootstrap 95 % interval of ``diff``."""
    ci_high: float
    """Upper bound of the bootstrap 95 % interval of ``diff``."""
    worse: int
    """Paired rows whose score went down."""
    better: int
    """Paired rows whose score went up."""


class RowChange(BaseModel):
    """One sample whose score changed between the runs."""

    model_config = ConfigDict(extra="forbid")

    sample_id: str
    """The id the rows were matched by."""
    metric: str
    """The metric column."""
    location: str
    """Where the row is in the new run."""
    question: str | None
    """The sample's question."""
    base_score: float
    """Score in the base run."""
    new_score: float
    """Score in the new run."""
    base_reason: str | None
    """The judge's reason in the base run."""
    new_reason: str | None
    """The judge's reason in the new run."""
    details: dict[str, object] = Field(default_factory=dict)
    """Verdicts of the new run (per statement, per context ...)."""

    @property
    def delta(self) -> float:
        """New - base."""
        return self.new_score - self.base_score


class Comparison(BaseModel):
    """A new run compared with a base run, row by row."""

    model_config = ConfigDict(extra="forbid")

    base_source: str
    """The base run's dataset."""
    new_source: str
    """The new run's dataset."""
    matched: int
    """Samples present in both runs."""
    only_base: int
    """Samples of the base run missing from the new one."""
    only_new: int
    """Samples of the new run missing from the base one."""
    metrics: dict[str, MetricComparison]
    """Per metric column present in both runs."""
    missing: list[str] = Field(default_factory=list)
    """Metric columns of the base run that the new run does not have."""
    worst: list[RowChange]
    """Per metric, the rows that got worse most (largest drop first)."""

    def regressions(self, max_drop: float) -> list[str]:
        """One line per metric whose mean paired score fell by more than ``max_drop``.

        A metric the new run lacks, or one no shared row has a score for in the new run
        while the base scored some, counts as a regression too: nothing can be compared,
        and a run that failed everywhere must not pass for one that held its scores.

        Raises:
            ValueError: ``max_drop`` is not a number from 0 to 1 (NaN would flag nothing).
        """
        max_drop = fraction("max_drop", max_drop)
        out = [f"{name}: the new run does not have this metric" for name in self.missing]
        for name, m in self.metrics.items():
            if m.pairs == 0 and not math.isnan(m.base_mean):
                out.append(
                    f"{name}: no row scored in the base run has a score in the new run "
                    "(failed, skipped or not run there)"
                )
            elif not math.isnan(m.diff) and -m.diff > max_drop:
                out.append(
                    f"{name}: dropped by {-m.diff:.4f} (95% CI of the change "
                    f"[{m.ci_low:+.4f}, {m.ci_high:+.4f}], {m.pairs} rows), more than {max_drop:g}"
                )
        return out

    def summary(self) -> str:
        """The comparison as text: a table per metric and the rows that got worse most."""
        return render_comparison(self)

    @override
    def __str__(self) -> str:
        return self.summary()


def bootstrap_ci(diffs: np.ndarray, *, seed: int = 0, resamples: int = 2000) -> tuple[float, float]:
    """Percentile bootstrap 95 % interval of the mean of ``diffs`` (seeded, reproducible)."""
    n = diffs.size
    if n == 0:
        return math.nan, math.nan
    if n == 1:
        value = float(diffs[0])
        return value, value
    rng = np.random.default_rng(seed)
    means = np.empty(resamples, dtype=np.float64)
    for start in range(0, resamples, _CHUNK):
        size = min(_CHUNK, resamples - start)
        picks = rng.integers(0, n, size=(size, n))
        means[start : start + size] = diffs[picks].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def _score(row: EvaluationRow, metric: str) -> float | None:
    result = row.results.get(metric)
    if result is None or result.score is None or math.isnan(result.score):
        return None
    return result.score


def compare_results(
    base: ResultData, new: ResultData, *, seed: int = 0, resamples: int = 2000
) -> Comparison:
    """Compare ``new`` with ``base`` (see :meth:`EvaluationResult.compare`).

    Raises:
        ComparisonError: The runs share no metric or no sample.
    """
    common = [m for m in new.metrics if m in base.metrics]
    if not common:
        msg = (
            f"the runs share no metric: base has {', '.join(base.metrics)}; "
            f"new has {', '.join(new.metrics)}"
        )
        raise ComparisonError(msg)
    base_rows = dict(zip(sample_ids(r.sample for r in base.rows), base.rows, strict=True))
    new_rows = dict(zip(sample_ids(r.sample for r in new.rows), new.rows, strict=True))
    shared = [sid for sid in new_rows if sid in base_rows]
    if not shared:
        msg = (
            "the runs share no sample: rows are matched by their `id` / `sample_id` column, "
            "else by question and reference; give both datasets the same ids"
        )
        raise ComparisonError(msg)
    base_summary, new_summary = base.aggregates, new.aggregates
    metrics: dict[str, MetricComparison] = {}
    worst: list[RowChange] = []
    for metric in common:
        changes: list[RowChange] = []
        for sid in shared:
            old_row, new_row = base_rows[sid], new_rows[sid]
            old, now = _score(old_row, metric), _score(new_row, metric)
            if old is None or now is None:
                continue
            old_result, new_result = old_row.results[metric], new_row.results[metric]
            changes.append(
                RowChange(
                    sample_id=sid,
                    metric=metric,
                    location=new_row.location,
                    question=new_row.sample.question,
                    base_score=old,
                    new_score=now,
                    base_reason=old_result.reason if old_result is not None else None,
                    new_reason=new_result.reason if new_result is not None else None,
                    details=dict(new_result.details) if new_result is not None else {},
                )
            )
        diffs = np.asarray([c.delta for c in changes], dtype=np.float64)
        low, high = bootstrap_ci(diffs, seed=seed, resamples=resamples)
        metrics[metric] = MetricComparison(
            metric=metric,
            base_mean=base_summary[metric].mean,
            new_mean=new_summary[metric].mean,
            pairs=int(diffs.size),
            diff=float(diffs.mean()) if diffs.size else math.nan,
            ci_low=low,
            ci_high=high,
            worse=int((diffs < 0).sum()),
            better=int((diffs > 0).sum()),
        )
        dropped = sorted((c for c in changes if c.delta < 0), key=lambda c: c.delta)
        worst.extend(dropped[:_WORST_PER_METRIC])
    return Comparison(
        base_source=base.source,
        new_source=new.source,
        matched=len(shared),
        only_base=sum(1 for sid in base_rows if sid not in new_rows),
        only_new=len(new_rows) - len(shared),
        metrics=metrics,
        missing=[m for m in base.metrics if m not in new.metrics],
        worst=worst,
    )


_COMPARE_HEADERS = ("metric", "base", "new", "change", "95% CI", "rows", "worse", "better")
_MAX_REASON = 160


def _signed(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:+.4f}"


def _clip(text: str | None) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 3] + "..."


def render_comparison(comparison: Comparison) -> str:
    """Per-metric means, change with its CI, and the rows that got worse most."""
    lines = [
        f"Comparison: {comparison.new_source} against {comparison.base_source}: "
        f"{comparison.matched} samples matched"
        + (f", {comparison.only_base} only in base" if comparison.only_base else "")
        + (f", {comparison.only_new} only in new" if comparison.only_new else "")
    ]
    rows: list[tuple[str, ...]] = [_COMPARE_HEADERS]
    for m in comparison.metrics.values():
        ci = "n/a" if math.isnan(m.ci_low) else f"[{m.ci_low:+.4f}, {m.ci_high:+.4f}]"
        rows.append(
            (
                m.metric,
                _number(m.base_mean),
                _number(m.new_mean),
                _signed(m.diff),
                ci,
                str(m.pairs),
                str(m.worse),
                str(m.better),
            )
        )
    lines += _table(rows)
    if comparison.worst:
        lines.append("Rows that got worse most:")
        for change in comparison.worst:
            lines.append(
                f"  - [{change.metric}] {change.base_score:.2f} -> {change.new_score:.2f} "
                f"{change.location}: {_clip(change.question)}"
            )
            if change.new_reason or change.base_reason:
                lines.append(f"      now:    {_clip(change.new_reason)}")
                lines.append(f"      before: {_clip(change.base_reason)}")
    return "\n".join(lines)
