"""check_judge: run the labelled set through a judge and measure how well it agrees."""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from langchain_ragmetrics.calibration._agreement import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    Agreement,
    ItemVerdicts,
    agreement,
    percentile,
)
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
    from collections.abc import Callable, Generator

    from langchain_core.language_models import BaseChatModel

    from langchain_ragmetrics._engine import Job, ScoringEngine
    from langchain_ragmetrics._progress import Progress
    from langchain_ragmetrics._schema import MetricResult, RagSample
    from langchain_ragmetrics.metrics import JudgedMetric, RetryPolicy

__all__ = [
    "DEFAULT_MIN_ANSWERED",
    "DEFAULT_MIN_KAPPA",
    "ChanceBaseline",
    "JudgeGate",
    "JudgeReport",
    "MetricAgreement",
    "acheck_judge",
    "check_judge",
]

_PARSE_FAILURE = "invalid judge output"

DEFAULT_MIN_KAPPA = 0.6
"""Lowest Cohen's kappa that passes: the lower edge of "substantial" agreement (0.61-0.80) in
Landis & Koch (1977), the usual reading of kappa; below it agreement is at best "moderate".
Chance alone scores 0, so a judge that answers "yes" (or "no") to everything always fails."""
DEFAULT_MIN_ANSWERED = 0.9
"""Lowest share of items the judge must answer usably: agreement measured on a judge that
fails many items says little about the scores it would give (the failed ones are NaN)."""


class JudgeGate(BaseModel):
    """What a metric must reach to pass a judge check."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_kappa: float = Field(default=DEFAULT_MIN_KAPPA, ge=-1.0, le=1.0)
    """Lowest Cohen's kappa (point estimate) against the labels."""
    min_answered: float = Field(default=DEFAULT_MIN_ANSWERED, ge=0.0, le=1.0)
    """Lowest share of items answered with a usable verdict."""
    min_accuracy: float | None = Field(default=None, ge=0.0, le=1.0)
    """Optional extra floor on raw accuracy (None: not gated; kappa is the gate)."""

    def describe(self) -> str:
        """The gate in one line, e.g. ``kappa >= 0.60 and answered >= 0.90``."""
        parts = [f"kappa >= {self.min_kappa:.2f}", f"answered >= {self.min_answered:.2f}"]
        if self.min_accuracy is not None:
            parts.append(f"accuracy >= {self.min_accuracy:.2f}")
        return " and ".join(parts)


class ChanceBaseline(BaseModel):
    """What a judge giving one fixed answer to every verdict would score on the same items."""

    model_config = ConfigDict(extra="forbid")

    accuracy: float
    """Its accuracy: the share of labels equal to its one answer."""
    accuracy_ci: tuple[float, float] | None
    """95 % bootstrap interval of that accuracy."""
    kappa: float | None
    """Its kappa: 0 whenever the labels hold both answers (chance agreement, no more)."""
    kappa_ci: tuple[float, float] | None
    """95 % bootstrap interval of that kappa."""


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
    label_yes_rate: float | None
    """Share of the compared labels that say "yes" (attributed, useful, found, needed)."""
    accuracy: float | None
    """Share of compared verdicts equal to the label; None when none could be compared."""
    accuracy_ci: tuple[float, float] | None
    """95 % interval of ``accuracy`` (percentile bootstrap over items)."""
    kappa: float | None
    """Cohen's kappa of the compared verdicts (agreement beyond chance): what the gate reads."""
    kappa_ci: tuple[float, float] | None
    """95 % interval of ``kappa`` (percentile bootstrap over items)."""
    always_yes: ChanceBaseline | None
    """What a judge answering "yes" to every one of these verdicts would score."""
    always_no: ChanceBaseline | None
    """What a judge answering "no" to every one of these verdicts would score."""
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

    def passes(self, gate: JudgeGate | None = None) -> bool | None:
        """Whether the row meets ``gate`` (default: :class:`JudgeGate` defaults).

        False when too few items were answered, kappa is below the gate, or accuracy is below
        its optional floor. None when enough items were answered but kappa is undefined: no
        verdict could be compared (statement-mode recall, whose units are the judge's own) or
        the labels hold one answer only. Such a row is not gated.
        """
        gate = gate or JudgeGate()
        if self.answered_rate < gate.min_answered:
            return False
        if self.kappa is None:
            return None
        if gate.min_accuracy is not None and (self.accuracy or 0.0) < gate.min_accuracy:
            return False
        return self.kappa >= gate.min_kappa


class JudgeReport(BaseModel):
    """What :func:`check_judge` measured, one row per metric."""

    model_config = ConfigDict(extra="forbid")

    judge: str | None
    """The judge's model name."""
    language: str | None
    """Language the set was restricted to (None: all)."""
    gate: JudgeGate
    """What each metric had to reach."""
    metrics: list[MetricAgreement]
    """One row per metric, in the order asked for."""

    def row(self, metric: str) -> MetricAgreement:
        """The row of one metric (KeyError when it was not run)."""
        for row in self.metrics:
            if row.metric == metric:
                return row
        raise KeyError(metric)

    def failing(self) -> list[str]:
        """Metrics that miss the report's gate (kappa, answered share, optional accuracy)."""
        return [m.metric for m in self.metrics if m.passes(self.gate) is False]

    @property
    def passed(self) -> bool:
        """True when no metric misses the gate (rows that cannot be gated do not count)."""
        return not self.failing()

    def table(self) -> str:
        """The report as two plain-text tables: agreement with the labels, then cost."""
        from langchain_ragmetrics.evaluation._report import _table

        agreement_headers = (
            "metric",
            "verdicts",
            "yes",
            "accuracy",
            "95% CI",
            "kappa",
            "95% CI",
            "gate",
        )
        chance_headers = (
            "metric",
            "always-yes accuracy",
            "95% CI",
            "kappa",
            "95% CI",
            "always-no accuracy",
            "95% CI",
            "kappa",
            "95% CI",
        )
        cost_headers = (
            "metric",
            "items",
            "answered",
            "score MAE",
            "parse fail",
            "retries/call",
            "calls/item",
            "tokens in",
            "tokens out",
            "p50 s",
            "p95 s",
        )
        title = f"Judge check of {self.judge or 'the judge'} on the calibration set"
        if self.language:
            title += f" ({self.language} items)"
        return "\n".join(
            [
                title + ":",
                *_table([agreement_headers, *(self._agreement_cells(m) for m in self.metrics)]),
                f"Gate: {self.gate.describe()}. Intervals: 95 % percentile bootstrap over items "
                f"({BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED}).",
                "",
                "Chance baselines: what a judge that does not read would score on these verdicts:",
                *_table([chance_headers, *(_chance_cells(m) for m in self.metrics)]),
                "",
                *_table([cost_headers, *(_cost_cells(m) for m in self.metrics)]),
            ]
        )

    def _agreement_cells(self, m: MetricAgreement) -> tuple[str, ...]:
        verdict = {True: "pass", False: "FAIL", None: "not gated"}[m.passes(self.gate)]
        return (
            m.metric,
            str(m.verdicts),
            _fmt(m.label_yes_rate, 2),
            _fmt(m.accuracy),
            _fmt_ci(m.accuracy_ci),
            _fmt(m.kappa),
            _fmt_ci(m.kappa_ci),
            verdict,
        )


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _fmt_ci(ci: tuple[float, float] | None) -> str:
    return "n/a" if ci is None else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def _chance_cells(m: MetricAgreement) -> tuple[str, ...]:
    cells = [m.metric]
    for baseline in (m.always_yes, m.always_no):
        if baseline is None:
            cells += ["n/a"] * 4
        else:
            cells += [
                _fmt(baseline.accuracy),
                _fmt_ci(baseline.accuracy_ci),
                _fmt(baseline.kappa),
                _fmt_ci(baseline.kappa_ci),
            ]
    return tuple(cells)


def _cost_cells(m: MetricAgreement) -> tuple[str, ...]:
    return (
        m.metric,
        str(m.items),
        str(m.answered),
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


def _baseline(compared: Sequence[ItemVerdicts], *, answer: bool) -> ChanceBaseline | None:
    """The figures of a judge giving ``answer`` to every verdict, over the same resamples."""
    fixed: Agreement = agreement([(labels, [answer] * len(labels)) for labels, _ in compared])
    if fixed.accuracy is None:
        return None
    return ChanceBaseline(
        accuracy=fixed.accuracy,
        accuracy_ci=fixed.accuracy_ci,
        kappa=fixed.kappa,
        kappa_ci=fixed.kappa_ci,
    )


def _summarise(
    variant: Variant,
    key: str,
    items: Sequence[CalibrationItem],
    jobs: Sequence[Job],
    results: Sequence[MetricResult],
) -> MetricAgreement:
    compared: list[ItemVerdicts] = []
    errors: list[float] = []
    disagreements: list[str] = []
    for item, result in zip(items, results, strict=True):
        pairs = verdict_pairs(key, item, result)
        if pairs is not None:
            compared.append(pairs)
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
    labels = [v for item_labels, _ in compared for v in item_labels]
    judge = agreement(compared)
    return MetricAgreement(
        metric=variant.name,
        items=count,
        answered=count - len(failed),
        verdicts=len(labels),
        label_yes_rate=sum(labels) / len(labels) if labels else None,
        accuracy=judge.accuracy,
        accuracy_ci=judge.accuracy_ci,
        kappa=judge.kappa,
        kappa_ci=judge.kappa_ci,
        always_yes=_baseline(compared, answer=True),
        always_no=_baseline(compared, answer=False),
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


@dataclass
class _Check:
    """One check's parts, shared by :func:`check_judge` and :func:`acheck_judge`."""

    llm: BaseChatModel
    variants: list[Variant]
    items: list[CalibrationItem]
    samples: list[RagSample]
    language: str | None
    retry: RetryPolicy | None
    gate: JudgeGate
    engine: ScoringEngine
    progress: Progress

    rows: list[MetricAgreement] = field(default_factory=list)

    def rounds(
        self,
    ) -> Generator[
        tuple[
            list[Job],
            Callable[[Job, MetricResult], None],
            Callable[[Sequence[MetricResult | None]], None],
        ],
        None,
        None,
    ]:
        """Per variant: its jobs, the progress callback, and where their results go.

        The caller scores the jobs and hands the results to the third item. One variant at
        a time, so a row's latencies are not inflated by the others' calls. The progress
        bar closes when the rounds end (close the generator if you stop early).
        """
        from langchain_ragmetrics._engine import Job

        try:
            for variant in self.variants:
                metric = variant.build(self.llm)
                if self.retry is not None:
                    metric.retry = self.retry
                jobs = [
                    Job(s, metric, tag=i.id) for s, i in zip(self.samples, self.items, strict=True)
                ]

                def tick(_job: Job, result: MetricResult, name: str = variant.name) -> None:
                    self.progress.update(name, result)

                def done(
                    results: Sequence[MetricResult | None],
                    variant: Variant = variant,
                    key: str = metric.key,
                    jobs: list[Job] = jobs,
                ) -> None:
                    # None marks a job not run: nothing stops these runs, so none is left
                    # out (and _summarise pairs results with items strictly).
                    finished = [r for r in results if r is not None]
                    self.rows.append(_summarise(variant, key, self.items, jobs, finished))

                yield jobs, tick, done
        finally:
            self.progress.close()

    def report(self) -> JudgeReport:
        """The report of the rows, under this check's gate."""
        from langchain_ragmetrics.metrics._judge import judge_name

        return JudgeReport(
            judge=judge_name(self.llm), language=self.language, gate=self.gate, metrics=self.rows
        )


def _prepare(
    llm: BaseChatModel,
    *,
    metrics: Sequence[str | JudgedMetric] | None,
    language: str | None,
    max_concurrency: int,
    timeout: float | None,
    retry: RetryPolicy | None,
    show_progress: bool,
    min_kappa: float,
    min_answered: float,
    min_accuracy: float | None,
) -> _Check:
    """Check the options and build a check (what both entry points share)."""
    from langchain_ragmetrics._engine import ScoringEngine
    from langchain_ragmetrics._progress import Progress
    from langchain_ragmetrics._schema import RagSample
    from langchain_ragmetrics._text import check_language
    from langchain_ragmetrics.metrics._judge import RetryPolicy

    gate = JudgeGate(min_kappa=min_kappa, min_answered=min_answered, min_accuracy=min_accuracy)
    if isinstance(metrics, str):  # its letters would be taken as metric names
        msg = f"`metrics` must be a list of metric names or metrics, got the string {metrics!r}"
        raise TypeError(msg)
    if retry is not None:  # checked now: a dict would fail every call, each as a judge error
        retry = RetryPolicy.model_validate(retry)
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
    return _Check(
        llm=llm,
        variants=variants,
        items=items,
        samples=samples,
        language=code,
        retry=retry,
        gate=gate,
        engine=ScoringEngine(max_concurrency=max_concurrency, timeout=timeout),
        progress=Progress(
            len(items) * len(variants),
            [v.name for v in variants],
            enabled=show_progress,
            desc="Checking the judge",
        ),
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
    min_kappa: float = DEFAULT_MIN_KAPPA,
    min_answered: float = DEFAULT_MIN_ANSWERED,
    min_accuracy: float | None = None,
) -> JudgeReport:
    """Async twin of :func:`check_judge`: the judge's async calls, on the running loop."""
    check = _prepare(
        llm,
        metrics=metrics,
        language=language,
        max_concurrency=max_concurrency,
        timeout=timeout,
        retry=retry,
        show_progress=show_progress,
        min_kappa=min_kappa,
        min_answered=min_answered,
        min_accuracy=min_accuracy,
    )
    with closing(check.rounds()) as rounds:
        for jobs, tick, done in rounds:
            done(await check.engine.arun(jobs, on_result=tick))
    return check.report()


def check_judge(
    llm: BaseChatModel,
    *,
    metrics: Sequence[str | JudgedMetric] | None = None,
    language: str | None = None,
    max_concurrency: int = 4,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
    show_progress: bool = False,
    min_kappa: float = DEFAULT_MIN_KAPPA,
    min_answered: float = DEFAULT_MIN_ANSWERED,
    min_accuracy: float | None = None,
) -> JudgeReport:
    """Run the shipped labelled set through ``llm`` and measure its agreement with the labels.

    For every metric (default: the four LLM-judged metrics as built by default; names such as
    ``context_entity_recall:one-call`` select another judging mode) the report gives Cohen's
    kappa and accuracy against careful-human labels, each with a 95 % bootstrap interval, what
    an always-yes and an always-no judge would score, the score's mean absolute error,
    parse-failure and retry rates, judge calls, tokens and latency percentiles.

    The gate is on kappa, not accuracy: the labels are not balanced, so a judge that answers
    "yes" to everything can reach a high accuracy, but its kappa is 0.

    It scores on threads with the judge's sync calls, as :func:`~langchain_ragmetrics.evaluate`
    does: it works the same from a script and inside a running event loop (a notebook), and
    builds no event loop whose connections a later call could meet closed.

    Args:
        llm: The judge to check (any chat model with tool calling).
        metrics: Metric names (see ``ragmetrics check-judge --help``; default: all four), or
            metrics you built yourself (say with your own prompt), reported as
            ``<key>:custom`` and run with their own judge.
        language: Only items in this language (``en`` or ``ja``).
        max_concurrency: Judge calls at work at the same time.
        timeout: Seconds before one item is abandoned (counted as a failure).
        retry: Retry policy for the metrics (default: the metrics' own).
        show_progress: Draw a progress bar on stderr (only on a terminal or notebook).
        min_kappa: Lowest kappa that passes (default 0.6, see :data:`DEFAULT_MIN_KAPPA`).
        min_answered: Lowest share of items answered usably (default 0.9).
        min_accuracy: Optional extra floor on accuracy (default: none).

    Raises:
        UnknownMetricError: A name in ``metrics`` is not known.
        ValueError: A gate threshold is out of range, or ``language`` holds no items.
    """
    check = _prepare(
        llm,
        metrics=metrics,
        language=language,
        max_concurrency=max_concurrency,
        timeout=timeout,
        retry=retry,
        show_progress=show_progress,
        min_kappa=min_kappa,
        min_answered=min_answered,
        min_accuracy=min_accuracy,
    )
    with closing(check.rounds()) as rounds:
        for jobs, tick, done in rounds:
            done(check.engine.run(jobs, on_result=tick))
    return check.report()
