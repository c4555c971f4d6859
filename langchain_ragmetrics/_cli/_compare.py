"""``ragmetrics compare``: two saved runs side by side; exit 10 when a metric regressed."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from langchain_ragmetrics._cli._common import ExitCode, echo, error, exit_codes_help, fraction
from langchain_ragmetrics._cli._runs import load_run

__all__ = ["EXIT_CODES", "register"]

EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode.ERROR,
    ExitCode.FILE_NOT_FOUND,
    ExitCode.INVALID_DATASET,
    ExitCode.REGRESSION,
)
"""What this sub-command can return besides 0, 2 and 130 (its ``--help`` lists them)."""


def register(commands: Any) -> None:
    """Add the ``compare`` sub-command to ``commands`` (an argparse sub-parsers action)."""
    compare = commands.add_parser(
        "compare",
        help="compare two saved runs (results .jsonl files) metric by metric",
        description="Match the rows of two runs saved with `ragmetrics evaluate --out x.jsonl` "
        "(by the sample's id / sample_id column, else by question and reference) and print, "
        "per metric, both means, the mean paired change with a bootstrap 95% CI, and the rows "
        "that got worse most with the judge's reasons.",
        epilog=exit_codes_help(EXIT_CODES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compare.add_argument("base", type=Path, help="the earlier run (the baseline)")
    compare.add_argument("new", type=Path, help="the run to check against it")
    compare.add_argument(
        "--max-drop",
        type=fraction,
        default=None,
        metavar="DROP",
        help="exit 10 when a metric's mean paired score fell by more than DROP, e.g. 0.05",
    )
    compare.add_argument(
        "--seed", type=int, default=0, help="seed of the bootstrap (default: %(default)s)"
    )
    compare.set_defaults(handler=_compare_command)


def _compare_command(args: argparse.Namespace) -> int:
    from langchain_ragmetrics.evaluation import ComparisonError

    base = load_run(args.base)
    if isinstance(base, ExitCode):
        return base
    new = load_run(args.new)
    if isinstance(new, ExitCode):
        return new
    try:
        comparison = new.compare(base, seed=args.seed)
    except ComparisonError as exc:
        error(str(exc))
        return ExitCode.ERROR
    echo(comparison.summary())
    if args.max_drop is None:
        return ExitCode.OK
    regressions = comparison.regressions(args.max_drop)
    for line in regressions:
        error(f"regression: {line}")
    return ExitCode.REGRESSION if regressions else ExitCode.OK
