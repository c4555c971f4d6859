"""The ``ragmetrics`` command: ``ragmetrics evaluate data.jsonl ...`` and ``ragmetrics demo``.

Every failure the user can fix has its own exit code and a message that says how to fix it
(see :class:`ExitCode`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

__all__ = ["ExitCode", "build_judge", "build_parser", "main", "no_key_message"]

_OUTPUT_SUFFIXES = (".jsonl", ".csv")


class ExitCode(IntEnum):
    """Exit statuses of ``ragmetrics`` (``ragmetrics evaluate --help`` lists their meaning)."""

    OK = 0
    ERROR = 1
    USAGE = 2
    FILE_NOT_FOUND = 3
    UNKNOWN_METRIC = 4
    INVALID_DATASET = 5
    MISSING_COLUMNS = 6
    NO_API_KEY = 7
    INTERRUPTED = 130


_MEANING: dict[ExitCode, str] = {
    ExitCode.OK: "done (single jobs may still have failed: see the table)",
    ExitCode.ERROR: "unexpected error, or the results could not be written",
    ExitCode.USAGE: "bad command line (unknown option, bad value, unsupported --out type)",
    ExitCode.FILE_NOT_FOUND: "the dataset file does not exist",
    ExitCode.UNKNOWN_METRIC: "a name in --metrics is not a known metric",
    ExitCode.INVALID_DATASET: "the dataset cannot be read or has malformed rows (all listed)",
    ExitCode.MISSING_COLUMNS: "a metric needs a column that no row has",
    ExitCode.NO_API_KEY: "an LLM-judged metric was asked for but no judge is configured",
    ExitCode.INTERRUPTED: "Ctrl-C: the partial results were printed (and written with --out)",
}


def _exit_codes_help() -> str:
    lines = ["exit codes:"]
    lines += [f"  {code.value:>3}  {text}" for code, text in _MEANING.items()]
    return "\n".join(lines)


def _echo(text: str, stream: TextIO | None = None) -> None:
    """Write a line to stdout (or ``stream``)."""
    out = stream or sys.stdout
    out.write(text + "\n")
    out.flush()


def _error(message: str) -> None:
    _echo(f"ragmetrics: error: {message}", sys.stderr)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value:g}")
    return value


def _add_judge_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default="gpt-4o-mini",
        help="judge model name (default: %(default)s)",
    )
    parser.add_argument(
        "--base-url",
        default=None,
        help="OpenAI-compatible endpoint of the judge, e.g. http://localhost:11434/v1 (Ollama) "
        "or http://localhost:8000/v1 (vLLM); default: $OPENAI_BASE_URL or OpenAI",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``ragmetrics``."""
    from langchain_ragmetrics import __version__
    from langchain_ragmetrics.evaluation import metric_classes

    parser = argparse.ArgumentParser(
        prog="ragmetrics",
        description="Retrieval-quality metrics for RAG: evaluate a dataset, or run the demo.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="{evaluate,demo}")
    commands.required = True

    known = ", ".join(metric_classes())
    evaluate = commands.add_parser(
        "evaluate",
        help="score a dataset file and print the summary table",
        description="Score every row of a .jsonl / .json / .csv dataset (RAGAS column names "
        "accepted; CSV list cells hold JSON lists) with the chosen metrics.",
        epilog=_exit_codes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    evaluate.add_argument("dataset", type=Path, help="dataset file (.jsonl, .json or .csv)")
    evaluate.add_argument(
        "--metrics",
        required=True,
        help=f"comma-separated metric names; known: {known}",
    )
    _add_judge_options(evaluate)
    evaluate.add_argument(
        "--concurrency",
        type=_positive_int,
        default=16,
        help="jobs scored at the same time (default: %(default)s)",
    )
    evaluate.add_argument(
        "--timeout", type=_positive_float, default=None, help="seconds before a job is abandoned"
    )
    evaluate.add_argument(
        "--language", default=None, help="language of rows that do not set one, e.g. ja"
    )
    evaluate.add_argument(
        "--out", type=Path, default=None, help="write per-row results to a .jsonl or .csv file"
    )
    evaluate.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    evaluate.set_defaults(handler=_evaluate_command)

    demo = commands.add_parser(
        "demo",
        help="run a small RAG chain over a bundled corpus with online scoring",
        description="Build a RAG chain over documents that ship with the package, score each "
        "retrieval with the callback handler and print the scores. Offline it uses an "
        "extractive answerer and the deterministic metrics; with OPENAI_API_KEY or "
        "OPENAI_BASE_URL it uses the LLM for answers and the LLM-judged metrics too.",
    )
    _add_judge_options(demo)
    demo.add_argument(
        "--offline", action="store_true", help="never call an LLM, even when one is configured"
    )
    demo.set_defaults(handler=_demo_command)
    return parser


def no_key_message(judged: Sequence[str]) -> str:
    """What to do when LLM-judged metrics were asked for but no judge is configured."""
    from langchain_ragmetrics.evaluation import is_judged, metric_classes

    plain = [name for name, cls in metric_classes().items() if not is_judged(cls)]
    return "\n".join(
        [
            f"{', '.join(judged)} need an LLM judge, but OPENAI_API_KEY is not set.",
            "  - set it:   export OPENAI_API_KEY=sk-...",
            "  - or use a local OpenAI-compatible server (no key needed):",
            "      Ollama: --base-url http://localhost:11434/v1 --model llama3.1",
            "      vLLM:   --base-url http://localhost:8000/v1 --model <served model name>",
            "    (or export OPENAI_BASE_URL=... instead of --base-url)",
            f"  - or use metrics that need no judge: {', '.join(plain)}",
        ]
    )


def build_judge(model: str, base_url: str | None, *, max_retries: int = 0) -> BaseChatModel | None:
    """A ChatOpenAI from the options and environment; None when no key or base URL is set.

    A base URL without a key is taken as a local server (Ollama, vLLM) that needs none.
    ``max_retries`` is 0 for judges: retrying is the metrics' job (``RetryPolicy``).
    """
    base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
    api_key = os.environ.get("OPENAI_API_KEY") or ("not-needed" if base_url else None)
    if api_key is None:
        return None
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=model, base_url=base_url, api_key=api_key, temperature=0, max_retries=max_retries
    )


def _split_metrics(text: str) -> list[str]:
    return list(dict.fromkeys(name.strip().lower() for name in text.split(",") if name.strip()))


def _evaluate_command(args: argparse.Namespace) -> int:
    from langchain_ragmetrics._dataset import read_dataset
    from langchain_ragmetrics.evaluation import (
        DatasetError,
        JudgeSetupError,
        MissingFieldError,
        UnknownMetricError,
        evaluate,
        is_judged,
        metric_from_name,
    )
    from langchain_ragmetrics.text import check_language

    out: Path | None = args.out
    if out is not None and out.suffix.lower() not in _OUTPUT_SUFFIXES:
        _error(f"--out must end in {' or '.join(_OUTPUT_SUFFIXES)}, got {str(out)!r}")
        return ExitCode.USAGE
    names = _split_metrics(args.metrics)
    if not names:
        _error("--metrics is empty")
        return ExitCode.USAGE
    try:
        metrics = [metric_from_name(name) for name in names]
    except UnknownMetricError as exc:
        _error(str(exc))
        return ExitCode.UNKNOWN_METRIC
    try:
        language = check_language(args.language, field="--language") if args.language else None
    except ValueError as exc:
        _error(str(exc))
        return ExitCode.USAGE
    try:
        data = read_dataset(args.dataset)
    except FileNotFoundError:
        _error(f"dataset file not found: {args.dataset}")
        return ExitCode.FILE_NOT_FOUND
    except DatasetError as exc:
        _error(str(exc))
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
        _error(str(exc))
        return ExitCode.MISSING_COLUMNS
    except JudgeSetupError:
        _error(no_key_message(judged))
        return ExitCode.NO_API_KEY

    _echo(result.summary())
    if out is not None:
        try:
            written = result.to_csv(out) if out.suffix.lower() == ".csv" else result.to_jsonl(out)
        except OSError as exc:
            _error(f"cannot write {out}: {exc.strerror or exc}")
            return ExitCode.ERROR
        _echo(f"Results written to {written}")
    return ExitCode.INTERRUPTED if result.interrupted else ExitCode.OK


def _demo_command(args: argparse.Namespace) -> int:
    from langchain_ragmetrics.demo._run import run_demo

    return run_demo(model=args.model, base_url=args.base_url, offline=args.offline)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ragmetrics`` console script; returns the exit status.

    Run as the console script (``argv`` None), an interrupted command exits at once: judge
    calls still in flight on worker threads would otherwise hold the interpreter's exit
    until they time out. Called with ``argv`` (tests, other programs) it only returns.
    """
    code = _run(argv)
    if argv is None and code == ExitCode.INTERRUPTED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else ExitCode.USAGE
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:
        _error("interrupted")
        return ExitCode.INTERRUPTED


if __name__ == "__main__":  # pragma: no cover - ``python -m langchain_ragmetrics.cli``
    sys.exit(main())
