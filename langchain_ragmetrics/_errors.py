"""The package's exceptions: every error we raise on purpose derives from RagMetricsError.

Each one also derives from the builtin a caller would naturally catch (``ValueError`` for bad
data, ``RuntimeError`` for a judge that cannot be built or answer), so code written against
the builtins keeps working. They live here, in one public module, and are re-exported where
they are used (``langchain_ragmetrics``, ``langchain_ragmetrics.evaluation``, ...).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BatchError",
    "CacheError",
    "CalibrationSetError",
    "CheckpointError",
    "ComparisonError",
    "DatasetError",
    "DeadlineExceededError",
    "HookError",
    "JudgeConfigError",
    "JudgeError",
    "JudgeSetupError",
    "MissingFieldError",
    "MonitorError",
    "PreflightError",
    "QualityGateError",
    "RagMetricsError",
    "ResultFileError",
    "RowProblem",
    "RowRef",
    "SinkSkipError",
    "SinkUnavailableError",
    "UnknownMetricError",
    "UnsupportedLanguageError",
    "suggest",
]

_MAX_LISTED = 20
"""Bad rows spelled out in a DatasetError message (the rest are counted)."""


@dataclass(frozen=True)
class RowRef:
    """Where a sample came from, for error messages."""

    row: int
    """1-based position of the record in its source."""
    line: int | None = None
    """Line of the file where the record starts (JSONL, CSV), when there is one."""
    index: Any = None
    """Position or index label in an in-memory source (list, DataFrame)."""

    def describe(self, source: str) -> str:
        """Render as ``"data.csv, row 2 (line 3)"`` or ``"dataset, row 1 (index 0)"``."""
        if self.line is not None:
            return f"{source}, row {self.row} (line {self.line})"
        if self.index is not None:
            return f"{source}, row {self.row} (index {self.index!r})"
        return f"{source}, row {self.row}"


@dataclass(frozen=True)
class RowProblem:
    """One bad row: where it is, which field, and what is wrong."""

    source: str
    """File name, or ``"dataset"`` / ``"DataFrame"`` for in-memory data."""
    ref: RowRef
    """The row."""
    field: str | None
    """The column as the user named it (``retrieved_contexts`` ...), when one is to blame."""
    message: str
    """What is wrong."""

    def __str__(self) -> str:
        field = f", field `{self.field}`" if self.field else ""
        return f"{self.ref.describe(self.source)}{field}: {self.message}"


class RagMetricsError(Exception):
    """Base of every exception langchain-ragmetrics raises on purpose (catch this one)."""


class JudgeError(RagMetricsError, RuntimeError):
    """Raised instead of a NaN result when a metric is built with ``raise_on_error=True``."""


class JudgeConfigError(RagMetricsError, RuntimeError):
    """The judge could not be built (e.g. no API key for the default judge)."""


class JudgeSetupError(JudgeConfigError):
    """``evaluate()`` found, before any call, that a judged metric has no usable judge."""


class SinkUnavailableError(RagMetricsError, RuntimeError):
    """Raised by a sink's ``emit`` to refuse a result without trying (counted as dropped).

    For a sink that knows its backend is down (its circuit breaker is open) or that it is
    disabled (no API key): the result is counted in ``stats.sinks[key].dropped``, not as an
    error.
    """


class SinkSkipError(RagMetricsError, RuntimeError):
    """Raised by a sink's ``emit`` for a result it has no place for (counted as skipped).

    E.g. the MLflow sink, for a retrieval that no MLflow trace recorded: the result is not
    lost to an outage, it does not belong in that backend; ``stats.sinks[key].skipped``.
    """


class DatasetError(RagMetricsError, ValueError):
    """The dataset cannot be used; ``problems`` lists every bad row (file, row and field)."""

    def __init__(self, message: str, problems: Sequence[RowProblem] = ()) -> None:
        self.problems = list(problems)
        lines = [message]
        lines += [f"  - {p}" for p in self.problems[:_MAX_LISTED]]
        if len(self.problems) > _MAX_LISTED:
            lines.append(f"  ... and {len(self.problems) - _MAX_LISTED} more")
        super().__init__("\n".join(lines))


class CalibrationSetError(RagMetricsError, ValueError):
    """The shipped calibration set cannot be read (a packaging or editing mistake)."""


class MissingFieldError(DatasetError):
    """A metric needs a field (a column) that no row of the dataset has."""


class UnknownMetricError(RagMetricsError, ValueError):
    """A metric name that no metric has; the message suggests the closest and lists all."""

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        """The name as given."""
        self.known = sorted(known)
        """Every valid metric name."""
        self.suggestions = suggest(name, self.known)
        """The known names closest to ``name``, best first (may be empty)."""
        guess = " or ".join(map(repr, self.suggestions))
        hint = f" (did you mean {guess}?)" if guess else ""
        super().__init__(f"unknown metric {name!r}{hint}; known metrics: {', '.join(self.known)}")


class UnsupportedLanguageError(RagMetricsError, ValueError):
    """A language code pysbd cannot segment; the message names the field and lists the codes."""

    def __init__(self, code: str, *, field: str, supported: Iterable[str]) -> None:
        self.code = code
        """The code as given."""
        self.field = field
        """Where it came from (``language``, ``--language``, ...)."""
        listed = ", ".join(sorted(supported))
        super().__init__(f"`{field}`: unsupported language {code!r}; supported: {listed}")


class DeadlineExceededError(RagMetricsError, TimeoutError):
    """The job's deadline passed (or the engine gave up on it) before a judge request."""


class HookError(RagMetricsError, RuntimeError):
    """``question_from`` or ``answer_from`` raised on the caller's thread (isolated mode)."""


class MonitorError(RagMetricsError, RuntimeError):
    """The monitor cannot work on this project: LangSmith has no project of that name."""


class CheckpointError(RagMetricsError, ValueError):
    """The monitor's checkpoint file cannot be used (unreadable, another project's, in use).

    Or an earlier run pruned pairs of runs this run's ``since`` would list again.
    """


def suggest(name: str, known: Iterable[str], *, limit: int = 2) -> list[str]:
    """The known names closest to ``name`` (difflib ratio ≥ 0.6), best first, for "did you mean".

    Case, surrounding spaces and ``-`` versus ``_`` are ignored, so ``Context-Recall`` finds
    ``context_recall``.
    """
    norm = name.strip().lower().replace("-", "_").replace(" ", "_")
    return difflib.get_close_matches(norm, list(known), n=limit, cutoff=0.6)


class BatchError(RagMetricsError, RuntimeError):
    """A Batch API run cannot go on.

    A judge the Batch API cannot serve, nothing to cancel, or the batch service refused a
    file or a batch.
    """


class PreflightError(RagMetricsError, RuntimeError):
    """Before any paid call: the judge is unreachable, failing, or has no structured output."""

    def __init__(self, message: str, *, cause: str | None = None) -> None:
        super().__init__(message)
        self.cause = cause
        """Why, when no retry can heal it (``"insufficient quota"``, ``"authentication
        failed"``, ``"unknown model"`` ...); None otherwise."""


class CacheError(RagMetricsError, OSError):
    """The verdict cache file cannot be opened or created."""


class QualityGateError(RagMetricsError, AssertionError):
    """A run missed a quality gate; ``problems`` says which, one line each.

    An AssertionError, so ``result.check(...)`` reads as a failed assertion in pytest.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        """One line per missed gate."""
        super().__init__("quality gate failed:\n" + "\n".join(f"  - {p}" for p in problems))


class ResultFileError(RagMetricsError, ValueError):
    """A results file cannot be read back (the message names the file and line)."""


class ComparisonError(RagMetricsError, ValueError):
    """Two runs cannot be compared (no metric or no sample in common)."""
