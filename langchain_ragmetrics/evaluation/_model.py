"""The data of an evaluation run: rows, per-metric summaries, run metadata, and the table itself.

The bottom of the ``evaluation`` package: the saved-file reader, the text and HTML reports,
the gates and the comparison all read a :class:`ResultData`; :class:`EvaluationResult`
(``_result``) adds the methods that call them, so no module here imports one above it.
"""

from __future__ import annotations

import csv
import json
import math
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from langchain_ragmetrics._files import write_text_atomically
from langchain_ragmetrics._schema import _ALIASES, MetricResult, RagSample, Usage

if TYPE_CHECKING:
    import os

    import pandas as pd

__all__ = [
    "FORMAT_VERSION",
    "NOT_RUN_ERROR",
    "SAMPLE_FIELDS",
    "EvaluationRow",
    "MetricInfo",
    "MetricSummary",
    "ResultData",
    "RunInfo",
    "Status",
    "json_text",
    "status_of",
]

FORMAT_VERSION = 1
"""Version of the results-file layout (the header's ``format``)."""

SAMPLE_FIELDS = (
    "question",
    "contexts",
    "context_ids",
    "answer",
    "reference",
    "reference_contexts",
    "reference_context_ids",
    "language",
)
"""The sample fields written as columns of every export, in order."""


class MetricInfo(BaseModel):
    """How one metric column was computed."""

    model_config = ConfigDict(extra="ignore")

    key: str
    """The metric key (``context_recall``)."""
    class_name: str
    """The metric's class."""
    judge: str | None = None
    """Judge model name, for LLM-judged metrics."""
    prompt_hash: str | None = None
    """SHA-256 (first 16 hex digits) of the metric's prompt(s): a changed prompt shows here."""


class RunInfo(BaseModel):
    """Metadata of an evaluation run, saved as the header line of a results file."""

    model_config = ConfigDict(extra="ignore")

    format: int = FORMAT_VERSION
    """Layout version of the results file."""
    package_version: str
    """langchain-ragmetrics version that produced the run."""
    created_at: datetime
    """When the run finished (UTC)."""
    dataset_fingerprint: str
    """SHA-256 (first 16 hex digits) of the scored samples: equal data gives equal prints."""
    metrics: dict[str, MetricInfo] = Field(default_factory=dict)
    """Per metric column: key, class, judge and prompt hash."""

    @property
    def judges(self) -> list[str]:
        """The judge models of the run, sorted."""
        return sorted({m.judge for m in self.metrics.values() if m.judge})


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


def json_text(value: Any) -> str:
    """``value`` as compact JSON text (non-ASCII kept, unknown types as strings)."""
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


class ResultData(BaseModel):
    """The table of a run: rows, aggregates, usage and flat exports (see ``EvaluationResult``)."""

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
        # A metadata key that a reader would take for something else goes under
        # "metadata.": a field, a RAGAS name of a field (loaded as a dataset, "response"
        # would become the answer), a metric column, or a key already so prefixed.
        taken = (
            set(out)
            | set(_ALIASES)
            | {"location", "results"}
            | {f"{m}{suffix}" for m in self.metrics for suffix in ("", "_reason", "_error")}
        )
        for key, value in row.sample.metadata.items():
            clash = key in taken or key.startswith("metadata.")
            out[f"metadata.{key}" if clash else key] = value
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

        def write(out: TextIO) -> None:
            writer = csv.DictWriter(out, fieldnames=columns)
            writer.writeheader()
            for record in records:
                writer.writerow({k: self._csv_cell(v) for k, v in record.items()})

        return write_text_atomically(Path(path), write, newline="")

    @staticmethod
    def _csv_cell(value: Any) -> Any:
        if value is None:
            return ""
        if isinstance(value, float) and math.isnan(value):
            return "nan"
        if isinstance(value, (list, dict, tuple)):
            return json_text(value)
        return value
