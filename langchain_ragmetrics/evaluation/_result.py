"""The outcome of an evaluation: per-sample rows, per-metric aggregates, usage and exports."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from typing_extensions import override

from langchain_ragmetrics._errors import QualityGateError
from langchain_ragmetrics._files import write_text_atomically
from langchain_ragmetrics.evaluation._compare import Comparison, compare_results
from langchain_ragmetrics.evaluation._gates import gate_problems
from langchain_ragmetrics.evaluation._html import render_report
from langchain_ragmetrics.evaluation._model import (
    NOT_RUN_ERROR,
    EvaluationRow,
    MetricSummary,
    ResultData,
    Status,
    json_text,
    status_of,
)
from langchain_ragmetrics.evaluation._report import render_summary
from langchain_ragmetrics.evaluation._saved import header_line, read_result

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping

__all__ = [
    "NOT_RUN_ERROR",
    "EvaluationResult",
    "EvaluationRow",
    "MetricSummary",
    "Status",
    "column_names",
    "status_of",
]


class EvaluationResult(ResultData):
    """Scores of a dataset: rows, aggregates, usage, exports and a printable summary.

    ``result["context_recall"]`` is the list of scores (NaN = failed, None = skipped or not
    run); ``result.aggregates`` holds mean / std / counts per metric; ``print(result)`` shows
    the summary table.
    """

    def to_jsonl(self, path: str | os.PathLike[str]) -> Path:
        """Write the run: a header line with its metadata, then one JSON object per sample.

        Each sample line holds the sample's fields, its metadata keys, ``location`` and the
        full result per metric under ``results`` (NaN scores are written as null; ``status``
        tells failed, skipped and not run apart). Missing parent directories are created.
        :meth:`load` reads the file back; the dataset loader reads it as a dataset.
        """
        records = self.jsonl_records()

        def write(out: TextIO) -> None:
            out.write(header_line(self) + "\n")
            for record in records:
                out.write(json_text(record) + "\n")

        return write_text_atomically(Path(path), write)

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
        return cls(**read_result(path))

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
        html = render_report(self, base=compare)
        if path is not None:
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(html, encoding="utf-8")
        return html

    def _repr_html_(self) -> str:
        """The report, inline in a notebook."""
        return render_report(self, base=None, standalone=False)

    def summary(self) -> str:
        """The summary table: per-metric aggregates, usage, and the first failures."""
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
