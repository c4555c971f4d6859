"""``ragmetrics check-judge``: measure a judge model against the shipped labelled set."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from langchain_ragmetrics._cli._common import (
    ExitCode,
    add_judge_options,
    build_judge,
    check_writable,
    echo,
    error,
    exit_codes_help,
    fraction,
    no_key_message,
    positive_float,
    positive_int,
    split_names,
)

__all__ = ["EXIT_CODES", "register"]

EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode.ERROR,
    ExitCode.UNKNOWN_METRIC,
    ExitCode.NO_API_KEY,
    ExitCode.PREFLIGHT_FAILED,
    ExitCode.JUDGE_DISAGREES,
)
"""What this sub-command can return besides 0, 2 and 130 (its ``--help`` lists them)."""


def register(commands: Any) -> None:
    """Add the ``check-judge`` sub-command to ``commands`` (an argparse sub-parsers action)."""
    from langchain_ragmetrics.calibration._check import DEFAULT_MIN_ANSWERED, DEFAULT_MIN_KAPPA
    from langchain_ragmetrics.calibration._protocols import DEFAULT_VARIANTS, variant_names

    parser = commands.add_parser(
        "check-judge",
        help="measure a judge model against the shipped labelled set",
        description="Run the shipped calibration set (hand-labelled English and Japanese items) "
        "through a judge model and print, per metric, its agreement with the labels: Cohen's "
        "kappa and verdict accuracy with 95 % bootstrap intervals, what an always-yes and an "
        "always-no judge would score, score mean absolute error, parse-failure and retry rates, "
        "tokens and latency. Exits 11 when a metric's kappa is below --min-kappa, its share of "
        "answered items below --min-answered, or (if given) its accuracy below --min-agreement.",
        epilog=exit_codes_help(EXIT_CODES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_judge_options(parser)
    parser.add_argument(
        "--metrics",
        default=",".join(DEFAULT_VARIANTS),
        help="comma-separated metrics or judging modes (default: %(default)s); "
        f"known: {', '.join(variant_names())}",
    )
    parser.add_argument(
        "--min-kappa",
        type=fraction,
        default=DEFAULT_MIN_KAPPA,
        help="lowest acceptable Cohen's kappa per metric (default: %(default)s, the lower edge "
        "of 'substantial' agreement in Landis & Koch 1977; a judge answering one fixed "
        "verdict scores 0)",
    )
    parser.add_argument(
        "--min-answered",
        type=fraction,
        default=DEFAULT_MIN_ANSWERED,
        help="lowest acceptable share of items answered usably (default: %(default)s)",
    )
    parser.add_argument(
        "--min-agreement",
        type=fraction,
        default=None,
        help="also require this verdict accuracy per metric (default: not gated; accuracy "
        "alone is passed by an always-yes judge on unbalanced labels, so kappa is the gate)",
    )
    parser.add_argument("--language", default=None, help="only items in this language: en or ja")
    parser.add_argument(
        "--concurrency",
        type=positive_int,
        default=4,
        help="items scored at the same time (default: %(default)s)",
    )
    parser.add_argument(
        "--timeout", type=positive_float, default=None, help="seconds before an item is abandoned"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(handler=_check_judge_command)


def _check_judge_command(args: argparse.Namespace) -> int:
    from langchain_ragmetrics._errors import UnknownMetricError
    from langchain_ragmetrics._text import check_language
    from langchain_ragmetrics.calibration import check_judge, load_calibration_set
    from langchain_ragmetrics.calibration._protocols import resolve_variant

    names = split_names(args.metrics)
    if not names:
        error("--metrics is empty")
        return ExitCode.USAGE
    try:
        for name in names:
            resolve_variant(name)
    except UnknownMetricError as exc:
        error(str(exc))
        return ExitCode.UNKNOWN_METRIC
    try:
        language = check_language(args.language, field="--language") if args.language else None
    except ValueError as exc:
        error(str(exc))
        return ExitCode.USAGE
    held = sorted({item.language for item in load_calibration_set()})
    if language and language not in held:
        listed = ", ".join(held)
        error(f"--language: the calibration set has no {language!r} items (it holds {listed})")
        return ExitCode.USAGE
    llm = build_judge(args.model, args.base_url)
    if llm is None:
        error(no_key_message(sorted({n.split(":")[0] for n in names})))
        return ExitCode.NO_API_KEY
    if args.json is not None and (problem := check_writable(args.json, option="--json")):
        error(problem)
        return ExitCode.PREFLIGHT_FAILED
    report = check_judge(
        llm,
        metrics=names,
        language=language,
        max_concurrency=args.concurrency,
        timeout=args.timeout,
        show_progress=not args.no_progress,
        min_kappa=args.min_kappa,
        min_answered=args.min_answered,
        min_accuracy=args.min_agreement,
    )
    echo(report.table())
    if args.json is not None:
        try:
            args.json.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            error(f"cannot write {args.json}: {exc.strerror or exc}")
            return ExitCode.ERROR
        echo(f"Report written to {args.json}")
    failing = report.failing()
    if failing:
        error(f"below the gate ({report.gate.describe()}): {', '.join(failing)} (see the table)")
        return ExitCode.JUDGE_DISAGREES
    ungated = [m.metric for m in report.metrics if m.passes(report.gate) is None]
    note = f" ({', '.join(ungated)}: kappa undefined, not gated)" if ungated else ""
    echo(f"Every checked metric meets the gate: {report.gate.describe()}.{note}")
    return ExitCode.OK
