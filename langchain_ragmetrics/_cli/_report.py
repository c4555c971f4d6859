"""``ragmetrics report``: a saved run as one self-contained HTML file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_ragmetrics._cli._common import ExitCode, echo, error, exit_codes_help
from langchain_ragmetrics._cli._runs import load_run

if TYPE_CHECKING:
    from langchain_ragmetrics.evaluation import EvaluationResult

__all__ = ["EXIT_CODES", "register"]

EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode.ERROR,
    ExitCode.FILE_NOT_FOUND,
    ExitCode.INVALID_DATASET,
)
"""What this sub-command can return besides 0, 2 and 130 (its ``--help`` lists them)."""


def register(commands: Any) -> None:
    """Add the ``report`` sub-command to ``commands`` (an argparse sub-parsers action)."""
    report = commands.add_parser(
        "report",
        help="write a saved run as a self-contained HTML report",
        description="Render a run saved with `ragmetrics evaluate --out x.jsonl` as one HTML "
        "file that opens offline (inline CSS and SVG): the summary table, a score histogram "
        "per metric, the worst samples with their reasons and verdicts and, with --compare, "
        "the comparison with an earlier run.",
        epilog=exit_codes_help(EXIT_CODES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("results", type=Path, help="the run (a results .jsonl file)")
    report.add_argument(
        "--compare", type=Path, default=None, metavar="BASE", help="an earlier run to compare with"
    )
    report.add_argument(
        "-o",
        "--out",
        type=Path,
        default=None,
        help="the HTML file to write (default: the results file with .html)",
    )
    report.set_defaults(handler=_report_command)


def _report_command(args: argparse.Namespace) -> int:
    from langchain_ragmetrics.evaluation import ComparisonError

    result = load_run(args.results)
    if isinstance(result, ExitCode):
        return result
    base: EvaluationResult | None = None
    if args.compare is not None:
        loaded = load_run(args.compare)
        if isinstance(loaded, ExitCode):
            return loaded
        base = loaded
    out: Path = args.out or args.results.with_suffix(".html")
    try:
        result.to_html(out, compare=base)
    except ComparisonError as exc:
        error(str(exc))
        return ExitCode.ERROR
    except OSError as exc:
        error(f"cannot write {out}: {exc.strerror or exc}")
        return ExitCode.ERROR
    echo(f"Report written to {out}")
    return ExitCode.OK
