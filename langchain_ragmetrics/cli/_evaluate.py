"""``ragmetrics evaluate``: score a dataset file and print the summary table."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from langchain_ragmetrics.cli._common import (
    ExitCode,
    add_judge_options,
    build_judge,
    echo,
    error,
    exit_codes_help,
    no_key_message,
    positive_float,
    positive_int,
    split_names,
)

__all__ = ["register"]

_OUTPUT_SUFFIXES = (".jsonl", ".csv")


def register(commands: Any) -> None:
    """Add the ``evaluate`` sub-command to ``commands`` (an argparse sub-parsers action)."""
    from langchain_ragmetrics.evaluation import metric_classes

    known = ", ".join(metric_classes())
    evaluate = commands.add_parser(
        "evaluate",
        help="score a dataset file and print the summary table",
        description="Score every row of a .jsonl / .json / .csv dataset (RAGAS column names "
        "accepted; CSV list cells hold JSON lists) with the chosen metrics.",
        epilog=exit_codes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    evaluate.add_argument("dataset", type=Path, help="dataset file (.jsonl, .json or .csv)")
    evaluate.add_argument(
        "--metrics",
        required=True,
        help=f"comma-separated metric names; known: {known}",
    )
    add_judge_options(evaluate)
    evaluate.add_argument(
        "--concurrency",
        type=positive_int,
        default=16,
        help="jobs scored at the same time (default: %(default)s)",
    )
    evaluate.add_argument(
        "--timeout", type=positive_float, default=None, help="seconds before a job is abandoned"
    )
    evaluate.add_argument(
        "--language", default=None, help="language of rows that do not set one, e.g. ja"
    )
    evaluate.add_argument(
        "--out", type=Path, default=None, help="write per-row results to a .jsonl or .csv file"
    )
    evaluate.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    evaluate.set_defaults(handler=_evaluate_command)


def _evaluate_command(args: argparse.Namespace) -> int:
    from langchain_ragmetrics._dataset import read_dataset
    from langchain_ragmetrics._text import check_language
    from langchain_ragmetrics.evaluation import (
        DatasetError,
        JudgeSetupError,
        MissingFieldError,
        UnknownMetricError,
        evaluate,
        is_judged,
        metric_from_name,
    )

    out: Path | None = args.out
    if out is not None and out.suffix.lower() not in _OUTPUT_SUFFIXES:
        error(f"--out must end in {' or '.join(_OUTPUT_SUFFIXES)}, got {str(out)!r}")
        return ExitCode.USAGE
    names = split_names(args.metrics)
    if not names:
        error("--metrics is empty")
        return ExitCode.USAGE
    try:
        metrics = [metric_from_name(name) for name in names]
    except UnknownMetricError as exc:
        error(str(exc))
        return ExitCode.UNKNOWN_METRIC
    try:
        language = check_language(args.language, field="--language") if args.language else None
    except ValueError as exc:
        error(str(exc))
        return ExitCode.USAGE
    try:
        data = read_dataset(args.dataset)
    except FileNotFoundError:
        error(f"dataset file not found: {args.dataset}")
        return ExitCode.FILE_NOT_FOUND
    except DatasetError as exc:
        error(str(exc))
        return ExitCode.INVALID_DATASET

    judged = [m.metric_name for m in metrics if is_judged(m)]
    llm = build_judge(args.model, args.base_url) if judged else None
    try:
        result = evaluate(
            data,
            metrics,
            llm=llm,
            language=language,
            max_concurrency=args.concurrency,
            timeout=args.timeout,
            show_progress=not args.no_progress,
        )
    except MissingFieldError as exc:
        error(str(exc))
        return ExitCode.MISSING_COLUMNS
    except JudgeSetupError:
        error(no_key_message(judged))
        return ExitCode.NO_API_KEY

    echo(result.summary())
    if out is not None:
        try:
            written = result.to_csv(out) if out.suffix.lower() == ".csv" else result.to_jsonl(out)
        except OSError as exc:
            error(f"cannot write {out}: {exc.strerror or exc}")
            return ExitCode.ERROR
        echo(f"Results written to {written}")
    return ExitCode.INTERRUPTED if result.interrupted else ExitCode.OK
