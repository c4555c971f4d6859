"""The outcome of an evaluation: per-sample rows, per-metric aggregates, usage and exports."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import override

from langchain_ragmetrics.evaluation._saved import SAMPLE_FIELDS, RunInfo
from langchain_ragmetrics.schema import MetricResult, RagSample, Usage

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping

    import pandas as pd

    from langchain_ragmetrics.evaluation._compare import Comparison

__all__ = [
    "NOT_RUN_ERROR",
    "EvaluationResult",
    "EvaluationRow",
    "MetricSummary",
    "Status",
    "column_names",
    "status_of",
]

Status = Literal["scored", "failed", "skipped", "not_run"]
"""What happened to one (sample, metric) job."""

NOT_RUN_ERROR = "not run: the evaluation was interrupted"
"""The error exports show for jobs that never finished."""


def status_of(result: MetricResult | None) -> Status:
    """Classify a job: scored, failed (NaN with an error), skipped (None) or not run."""
    if result is None:
        return "not_run"
    if result.failed:
        return "failed"
    if result.skipped:
        return "skipped"
    return "scored"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


class MetricSummary(BaseModel):
    """Aggregates of one metric over the dataset (NaN-aware: failures do not pull the mean)."""

    model_config = ConfigDict(extra="forbid")

    metric: str
    """The metric's column name."""
    mean: float
    """Mean of the finite scores; NaN when there are none."""
    std: float
    """Sample standard deviation (ddof=1, as pandas) of the finite scores; NaN below two."""
    min: float
    """Lowest finite score; NaN when there are none."""
    max: float
    """Highest finite score; NaN when there are none."""
    count: int
    """Jobs that produced a score."""
    failed: int
    """Jobs that failed (NaN score with an error)."""
    skipped: int
    """Jobs the metric could not assess (score None, no error)."""
    not_run: int
    """Jobs that never finished because the evaluation was interrupted."""
    usage: Usage = Field(default_factory=Usage)
    """Tokens and judge calls spent on this metric."""
    judge: str | None = None
    """The judge model, for LLM-judged metrics."""


class EvaluationRow(BaseModel):
    """One sample of the dataset and its result for every metric."""

    model_config = ConfigDict(extra="forbid")

    position: int
    """0-based position in the dataset."""
    location: str
    """Where the row came from, e.g. ``data.csv, row 2 (line 3)``."""
    sample: RagSample
    """The sample as scored."""
    results: dict[str, MetricResult | None]
    """Result per metric column; None when the job never ran (interrupted)."""

    def status(self, metric: str) -> Status:
        """What happened to this row's ``metric`` job."""
        return status_of(self.results.get(metric))


class EvaluationResult(BaseModel):
    """Scores of a dataset: rows, aggregates, usage, exports and a printable summary.

    ``result["context_recall"]`` is the list of scores (NaN = failed, None = skipped or not
    run); ``result.aggregates`` holds mean / std / counts per metric; ``print(result)`` shows
    the summary table.
    """

    model_config = ConfigDict(extra="forbid")

    metrics: list[str]
    """Metric column names, in the order given (duplicates get ``_2``, ``_3`` ...)."""
    rows: list[EvaluationRow]
    """One row per sample, in dataset order."""
    source: str = "dataset"
    """The dataset's file name, or ``dataset`` / ``DataFrame``."""
    elapsed_s: float = 0.0
    """Wall time of the evaluation, in seconds."""
    interrupted: bool = False
    """True when the run was stopped (Ctrl-C) before every job finished."""
    info: RunInfo | None = None
    """Run metadata (package version, judge, prompt hashes, dataset fingerprint, time)."""

    # ------------------------------------------------------------------ access

    def __getitem__(self, metric: str) -> list[float | None]:
        """Scores of one metric, row by row."""
        self._check_metric(metric)
        out: list[float | None] = []
        for row in self.rows:
            result = row.results.get(metric)
            out.append(None if result is None else result.score)
        return out

    def __len__(self) -> int:
        return len(self.rows)

    def _check_metric(self, metric: str) -> None:
        if metric not in self.metrics:
            msg = f"no metric {metric!r} in this result; it has {', '.join(self.metrics)}"
            raise KeyError(msg)

    def results_of(self, metric: str) -> list[MetricResult | None]:
        """Full results of one metric, row by row (None = not run)."""
        self._check_metric(metric)
        return [row.results.get(metric) for row in self.rows]

    @property
    def aggregates(self) -> dict[str, MetricSummary]:
        """Mean, std, min, max and job counts of every metric."""
        return {name: self._summarise(name) for name in self.metrics}

    def _summarise(self, metric: str) -> MetricSummary:
        results = self.results_of(metric)
        statuses = [status_of(r) for r in results]
        finite = [s for r in results if r is not None and (s := r.finite_score) is not None]
        scores = np.asarray(finite, dtype=np.float64)
        nan = math.nan
        usage = Usage.total(r.usage for r in results if r is not None)
        judge = next((r.judge for r in results if r is not None and r.judge), None)
        return MetricSummary(
            metric=metric,
            mean=float(scores.mean()) if scores.size else nan,
            std=float(scores.std(ddof=1)) if scores.size > 1 else nan,
            min=float(scores.min()) if scores.size else nan,
            max=float(scores.max()) if scores.size else nan,
            count=len(finite),
            failed=statuses.count("failed"),
            skipped=statuses.count("skipped"),
            not_run=statuses.count("not_run"),
            usage=usage,
            judge=judge,
        )

    @property
    def usage(self) -> Usage:
        """Tokens and judge calls of the whole evaluation."""
        return Usage.total(
            r.usage for row in self.rows for r in row.results.values() if r is not None
        )

    @property
    def judge_calls(self) -> int:
        """Number of requests sent to judges, retries included."""
        return self.usage.judge_calls

    def failures(self) -> list[tuple[str, str, str]]:
        """``(location, metric, error)`` of every failed job, in dataset order."""
        out = []
        for row in self.rows:
            for name in self.metrics:
                result = row.results.get(name)
                if result is not None and result.error is not None:
                    out.append((row.location, name, result.error))
        return out

    # ------------------------------------------------------------------ exports

    def _sample_columns(self, row: EvaluationRow) -> dict[str, Any]:
        data = row.sample.model_dump()
        out: dict[str, Any] = {"row": row.position + 1}
        out.update({name: data[name] for name in SAMPLE_FIELDS})
        taken = (
            set(out)
            | {"location", "results"}
            | {f"{m}{suffix}" for m in self.metrics for suffix in ("", "_reason", "_error")}
        )
        for key, value in row.sample.metadata.items():
            out[key if key not in taken else f"metadata.{key}"] = value
        return out

    def to_records(self) -> list[dict[str, Any]]:
        """Flat rows, the shape of ``to_pandas`` and ``to_csv``.

        Columns: ``row``, the sample fields, the metadata keys, then per metric ``<metric>``,
        ``<metric>_reason``, ``<metric>_error`` and ``<metric>_details``.
        """
        records = []
        for row in self.rows:
            record = self._sample_columns(row)
            for name in self.metrics:
                result = row.results.get(name)
                if result is None:
                    record.update(
                        {name: None, f"{name}_reason": None, f"{name}_error": NOT_RUN_ERROR}
                    )
                    record[f"{name}_details"] = None
                    continue
                record[name] = result.score
                record[f"{name}_reason"] = result.reason
                record[f"{name}_error"] = result.error
                record[f"{name}_details"] = result.details or None
            records.append(record)
        return records

    def to_pandas(self) -> pd.DataFrame:
        """One row per sample with sample fields and per-metric score, reason, error, details.

        Raises:
            ImportError: pandas is not installed (``pip install pandas``).
        """
        try:
            import pandas as pd
        except ImportError as exc:
            msg = (
                "EvaluationResult.to_pandas() needs pandas: pip install pandas "
                "(or pip install 'langchain-ragmetrics[pandas]')"
            )
            raise ImportError(msg) from exc
        frame = pd.DataFrame.from_records(self.to_records())
        for name in self.metrics:
            frame[name] = frame[name].astype("float64")
        return frame

    def to_jsonl(self, path: str | os.PathLike[str]) -> Path:
        """Write the run: a header line with its metadata, then one JSON object per sample.

        Each sample line holds the sample's fields, its metadata keys, ``location`` and the
        full result per metric under ``results`` (NaN scores are written as null; ``status``
        tells failed, skipped and not run apart). Missing parent directories are created.
        :meth:`load` reads the file back; the dataset loader reads it as a dataset.
        """
        from langchain_ragmetrics.evaluation._saved import header_line

        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("w", encoding="utf-8") as out:
            out.write(header_line(self) + "\n")
            for record in self.jsonl_records():
                out.write(_json(record) + "\n")
        return target

    def jsonl_records(self) -> list[dict[str, Any]]:
        """The sample lines :meth:`to_jsonl` writes, as dicts (one per row, in order)."""
        records = []
        for row in self.rows:
            record = self._sample_columns(row)
            record["location"] = row.location
            record["results"] = {
                name: self._result_json(row.results.get(name)) for name in self.metrics
            }
            records.append(record)
        return records

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> EvaluationResult:
        """Read a run saved with :meth:`to_jsonl` (scores, reasons, details, usage, metadata).

        Raises:
            FileNotFoundError: The file does not exist.
            ResultFileError: A line cannot be read back (file and line named).
        """
        from langchain_ragmetrics.evaluation._saved import read_result

        return read_result(path)

    @staticmethod
    def _result_json(result: MetricResult | None) -> dict[str, Any]:
        if result is None:
            return {"status": "not_run", "score": None, "error": NOT_RUN_ERROR}
        data = result.model_dump(mode="json")
        data["score"] = result.finite_score
        return {"status": status_of(result), **data}

    def to_csv(self, path: str | os.PathLike[str]) -> Path:
        """Write the flat records as CSV; lists and details are JSON in their cells."""
        records = self.to_records()
        columns = list(dict.fromkeys(key for record in records for key in record))
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("w", encoding="utf-8", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=columns)
            writer.writeheader()
            for record in records:
                writer.writerow({k: self._csv_cell(v) for k, v in record.items()})
        return target

    @staticmethod
    def _csv_cell(value: Any) -> Any:
        if value is None:
            return ""
        if isinstance(value, float) and math.isnan(value):
            return "nan"
        if isinstance(value, (list, dict, tuple)):
            return _json(value)
        return value

    # ------------------------------------------------------------------ gates and comparison

    def check(
        self,
        *,
        fail_under: Mapping[str, float] | None = None,
        max_failed_rate: float | None = None,
    ) -> EvaluationResult:
        """Raise :class:`QualityGateError` when the run misses a gate; return self otherwise.

        Args:
            fail_under: Per metric, the lowest acceptable MEAN score (failed and skipped rows
                do not count), e.g. ``{"context_recall": 0.7}``.
            max_failed_rate: Highest acceptable share of failed jobs, e.g. ``0.05``.

        A run in which every job failed never passes. The error lists every missed gate.

        Raises:
            QualityGateError: A gate was missed (also an AssertionError, for pytest).
            KeyError: ``fail_under`` names a metric this run does not have.
        """
        from langchain_ragmetrics.errors import QualityGateError
        from langchain_ragmetrics.evaluation._gates import gate_problems

        problems = gate_problems(self, fail_under=fail_under, max_failed_rate=max_failed_rate)
        if problems:
            raise QualityGateError(problems)
        return self

    def compare(
        self, base: EvaluationResult, *, seed: int = 0, resamples: int = 2000
    ) -> Comparison:
        """Compare this run with an earlier one (``base``), row by row.

        Rows are matched by sample id (the sample's ``id`` / ``sample_id``, else a hash of
        its question and reference). Per metric: both means, the mean paired difference
        (this run minus base) with a seeded bootstrap 95 % interval, and the rows that got
        worse most.
        """
        from langchain_ragmetrics.evaluation._compare import compare_results

        return compare_results(base, self, seed=seed, resamples=resamples)

    # ------------------------------------------------------------------ display

    def to_html(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        compare: EvaluationResult | None = None,
    ) -> str:
        """A self-contained HTML report (inline CSS and SVG, opens offline).

        Summary table, a score histogram per metric, the worst samples with their reasons
        and verdicts, and, with ``compare`` (an earlier run), the comparison view.
        Written to ``path`` when given (parents created); the HTML is returned either way.
        """
        from langchain_ragmetrics.evaluation._html import render_report

        html = render_report(self, base=compare)
        if path is not None:
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(html, encoding="utf-8")
        return html

    def _repr_html_(self) -> str:
        """The report, inline in a notebook."""
        from langchain_ragmetrics.evaluation._html import render_report

        return render_report(self, base=None, standalone=False)

    def summary(self) -> str:
        """The summary table: per-metric aggregates, usage, and the first failures."""
        from langchain_ragmetrics.evaluation._report import render_summary

        return render_summary(self)

    @override
    def __str__(self) -> str:
        return self.summary()

    @override
    def __repr__(self) -> str:
        return self.summary()


def column_names(keys: Sequence[str]) -> list[str]:
    """Unique column names for metric keys: repeats get ``_2``, ``_3`` ..."""
    out: list[str] = []
    for key in keys:
        name, n = key, 1
        while name in out:
            n += 1
            name = f"{key}_{n}"
        out.append(name)
    return out
