"""Reading saved runs for the ``compare`` and ``report`` commands, with their exit codes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from langchain_ragmetrics._cli._common import ExitCode, error

if TYPE_CHECKING:
    from langchain_ragmetrics.evaluation import EvaluationResult

__all__ = ["load_run"]


def load_run(path: Path) -> EvaluationResult | ExitCode:
    """The run saved in ``path``, or the exit code after printing why it cannot be read."""
    from langchain_ragmetrics.evaluation import EvaluationResult, ResultFileError

    if path.suffix.lower() == ".csv":
        error(
            f"{path}: a CSV export cannot be read back as a run; save runs with "
            "`ragmetrics evaluate ... --out run.jsonl`"
        )
        return ExitCode.USAGE
    try:
        return EvaluationResult.load(path)
    except FileNotFoundError:
        error(f"results file not found: {path}")
        return ExitCode.FILE_NOT_FOUND
    except (ResultFileError, OSError) as exc:
        error(str(exc))
        return ExitCode.INVALID_DATASET
