"""check_judge: run the labelled set through a judge and measure how well it agrees."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from langchain_ragmetrics.calibration._agreement import accuracy, cohen_kappa, percentile
from langchain_ragmetrics.calibration._data import CalibrationItem, load_calibration_set
from langchain_ragmetrics.calibration._protocols import (
    DEFAULT_VARIANTS,
    Variant,
    custom_variant,
    label_score,
    resolve_variant,
    verdict_pairs,
)

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from langchain_ragmetrics._engine import Job
    from langchain_ragmetrics.metrics import JudgedMetric, RetryPolicy
    from langchain_ragmetrics.schema import MetricResult

__all__ = ["JudgeReport", "MetricAgreement", "acheck_judge", "check_judge"]

_PARSE_FAILURE = "invalid judge output"


class MetricAgreement(BaseModel):
    """How one metric (in one judging mode) fared against the labels."""

    model_config = ConfigDict(extra="forbid")

    metric: str
    """Row name: the metric key, plus ``:mode`` for a non-default judging mode."""
    items: int
    """Labelled items run."""
    answered: int
    """Items the judge answered with a usable verdict (not failed)."""
    verdicts: int
    """Verdicts compared with the labels (sentences, passages or entities)."""
    accuracy: float | None
    """Share of compared verdicts equal to the label; None when none could be compared."""
    kappa: float | None
    """Cohen's kappa of the compared verdicts (agreement beyond chance)."""
    score_mae: float | None
    """Mean absolute difference between the judge's score and the labelled score."""
    parse_failure_rate: float
    """Share of items that ended as unparseable answers after the parse retries."""
    error_rate: float
    """Share of items that failed for any reason (parse, HTTP, timeout)."""
    retry_rate: float
    """Extra judge calls (retries) per expected call."""
    judge_calls: int
    """Judge requests made, retries included."""
    calls_per_item: float
    """Judge requests per item."""
    input_tokens: int
    """Prompt tokens spent."""
    output_tokens: int
    """Completion tokens spent."""
    latency_p50_s: float | None
    """Median seconds per item."""
    latency_p95_s: float | None
    """95th percentile of seconds per item."""
    disagreements: list[str] = Field(default_factory=list)
    """Ids of items with at least one verdict that differs from the labels, or a failure."""

    @property
    def answered_rate(self) -> float:
        """Share of items answered."""
        return self.answered / self.items if self.items else 0.0

    def passes(self, min_agreement: float) -> bool | None:
        """Answered share and accuracy both at least ``min_agreement``.

        None when every item was answered but no verdict could be compared (statement-mode
        recall, whose units are the judge's own): such a row is not gated.
        """
        if self.answered_rate < min_agreement:
            return False
        if self.accuracy is None:
            return None
        return self.accuracy >= min_agreement


class JudgeReport(BaseModel):
    """What :func:`check_judge` measured, one row per metric."""

    model_config = ConfigDict(extra="forbid")

    judge: str | None
    """The judge's model name."""
    language: str | None
    """Language the set was restricted to (None: all)."""
    metrics: list[MetricAgreement]
    """One row per metric, in the order asked for."""

    def row(self, metric: str) -> MetricAgreement:
        """The row of one metric (KeyError when it was not run)."""
        for row in self.metrics:
            if row.metric == metric:
                return row
        raise KeyError(metric)

    def failing(self, min_agreement: float) -> list[str]:
        """Metrics whose accuracy or answered share is below ``min_agreement``."""
        return [m.metric for m in self.metrics if m.passes(min_agreement) is False]

    def table(self) -> str:
        """The report as a plain-text table."""
        from langchain_ragmetrics.evaluation._report import _table

        headers = (
            "metric",
            "items",
            "answered",
            "accuracy",
            "kappa",
            "score MAE",
            "parse fail",
            "retries/call",
            "calls/item",
            "tokens in",
            "tokens out",
            "p50 s",
            "p95 s",
        )
        rows = [headers, *(_cells(m) for m in self.metrics)]
        title = f"Judge check of {self.judge or 'the judge'} on the calibration set"
        if self.language:
            title += f" ({self.language} items)"
        return "\n".join([title + ":", *_table(rows)])


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _cells(m: MetricAgreement) -> tuple[str, ...]:
    return (
        m.metric,
        str(m.items),
        str(m.answered),
        _fmt(m.accuracy),
        _fmt(m.kappa),
        _fmt(m.score_mae),
        _fmt(m.parse_failure_rate),
        _fmt(m.retry_rate),
        _fmt(m.calls_per_item, 2),
        str(m.input_tokens),
        str(m.output_tokens),
        _fmt(m.latency_p50_s, 2),
        _fmt(m.latency_p95_s, 2),
    )


def _planned_calls(job: Job) -> int:
    """Judge calls the metric plans for the job's sample: the count without any retry."""
    from langchain_ragmetrics.metrics import JudgedMetric, Plan

    metric = job.metric
    if not isinstance(metric, JudgedMetric):
        return 0
    plan = metric.plan(job.sample)
    return len(plan.calls) if isinstance(plan, Plan) else 0


def _summarise(
    variant: Variant,
    key: str,
    items: Sequence[CalibrationItem],
    jobs: Sequence[Job],
    results: Sequence[MetricResult],
) -> MetricAgreement:
    labels: list[bool] = []
    judged: list[bool] = []
    errors: list[float] = []
    disagreements: list[str] = []
    compared_any = False
    for item, result in zip(items, results, strict=True):
        pairs = verdict_pairs(key, item, result)
        if pairs is not None:
            compared_any = True
            labels += pairs[0]
            judged += pairs[1]
        if result.failed or (pairs is not None and pairs[0] != pairs[1]):
            disagreements.append(item.id)
        expected = label_score(key, item)
        score = result.score
        if expected is not None and score is not None and not math.isnan(score):
            errors.append(abs(score - expected))
    failed = [r for r in results if r.failed]
    parse_failed = [r for r in failed if (r.error or "").startswith(_PARSE_FAILURE)]
    calls = sum(r.usage.judge_calls for r in results)
    expected_calls = sum(_planned_calls(job) for job in jobs)
    latencies = [r.latency_s for r in results if r.latency_s is not None]
    count = len(items)
    return MetricAgreement(
        metric=variant.name,
        items=count,
        answered=count - len(failed),
        verdicts=len(labels),
        accuracy=accuracy(labels, judged) if compared_any else None,
        kappa=cohen_kappa(labels, judged) if compared_any else None,
        score_mae=sum(errors) / len(errors) if errors else None,
        parse_failure_rate=len(parse_failed) / count if count else 0.0,
        error_rate=len(failed) / count if count else 0.0,
        retry_rate=max(0, calls - expected_calls) / expected_calls if expected_calls else 0.0,
        judge_calls=calls,
        calls_per_item=calls / count if count else 0.0,
        input_tokens=sum(r.usage.input_tokens for r in results),
        output_tokens=sum(r.usage.output_tokens for r in results),
        latency_p50_s=percentile(latencies, 50),
        latency_p95_s=percentile(latencies, 95),
        disagreements=disagreements,
    )


async def acheck_judge(
    llm: BaseChatModel,
    *,
    metrics: Sequence[str | JudgedMetric] | None = None,
    language: str | None = None,
    max_concurrency: int = 4,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
    show_progress: bool = False,
) -> JudgeReport:
    """Async twin of :func:`check_judge`."""
    from langchain_ragmetrics._engine import Job, ScoringEngine
    from langchain_ragmetrics._progress import Progress
    from langchain_ragmetrics._text import check_language
    from langchain_ragmetrics.metrics._judge import judge_name
    from langchain_ragmetrics.schema import RagSample

    variants: list[Variant] = []
    for entry in DEFAULT_VARIANTS if metrics is None else metrics:
        taken = {v.name for v in variants}
        if isinstance(entry, str):
            variants.append(resolve_variant(entry))
        else:
            variants.append(custom_variant(entry, taken))
    if not variants:
        msg = "`metrics`: name at least one metric"
        raise ValueError(msg)
    code = check_language(language) if language else None
    items = load_calibration_set(language=code)
    if not items:
        held = ", ".join(sorted({item.language for item in load_calibration_set()}))
        msg = f"`language`: the calibration set has no {code!r} items (it holds {held})"
        raise ValueError(msg)
    samples = [
        RagSample(
            question=item.question,
            contexts=item.contexts,
            reference=item.reference,
            language=item.language,
        )
        for item in items
    ]
    engine = ScoringEngine(max_concurrency=max_concurrency, timeout=timeout)
    progress = Progress(
        len(items) * len(variants),
        [v.name for v in variants],
        enabled=show_progress,
        desc="Checking the judge",
    )
    rows: list[MetricAgreement] = []
    try:
        # One metric at a time, so a row's latencies are not inflated by the others' calls.
        for variant in variants:
            metric = variant.build(llm)
            if retry is not None:
                metric.retry = retry
            jobs = [Job(s, metric, tag=i.id) for s, i in zip(samples, items, strict=True)]

            def tick(_job: Job, result: MetricResult, name: str = variant.name) -> None:
                progress.update(name, result)

            results = await engine.arun(jobs, on_result=tick)
            rows.append(_summarise(variant, metric.key, items, jobs, results))
    finally:
        progress.close()
    return JudgeReport(judge=judge_name(llm), language=code, metrics=rows)


def check_judge(
    llm: BaseChatModel,
    *,
    metrics: Sequence[str | JudgedMetric] | None = None,
    language: str | None = None,
    max_concurrency: int = 4,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
    show_progress: bool = False,
) -> JudgeReport:
    """Run the shipped labelled set through ``llm`` and measure its agreement with the labels.

    For every metric (default: the four LLM-judged metrics as built by default; names such as
    ``context_entity_recall:one-call`` select another judging mode) the report gives verdict
    accuracy and Cohen's kappa against careful-human labels, the score's mean absolute error,
    parse-failure and retry rates, judge calls, tokens and latency percentiles.

    Args:
        llm: The judge to check (any chat model with tool calling).
        metrics: Metric names (see ``ragmetrics check-judge --help``; default: all four), or
            metrics you built yourself (say with your own prompt), reported as
            ``<key>:custom`` and run with their own judge.
        language: Only items in this language (``en`` or ``ja``).
        max_concurrency: Items scored at the same time.
        timeout: Seconds before one item is abandoned (counted as a failure).
        retry: Retry policy for the metrics (default: the metrics' own).
        show_progress: Draw a progress bar on stderr (only on a terminal or notebook).

    Raises:
        UnknownMetricError: A name in ``metrics`` is not known.
        RuntimeError: Called from a running event loop (use :func:`acheck_judge`).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        msg = "check_judge() cannot run inside an event loop; use `await acheck_judge(...)`"
        raise RuntimeError(msg)
    return asyncio.run(
        acheck_judge(
            llm,
            metrics=metrics,
            language=language,
            max_concurrency=max_concurrency,
            timeout=timeout,
            retry=retry,
            show_progress=show_progress,
        )
    )
