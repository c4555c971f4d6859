"""Shared pieces of the ``ragmetrics`` commands: exit codes, output, option types, the judge."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

__all__ = [
    "ALWAYS",
    "ExitCode",
    "add_judge_options",
    "build_judge",
    "echo",
    "error",
    "exit_codes_help",
    "fraction",
    "no_key_message",
    "positive_float",
    "positive_int",
    "split_names",
]


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
    PREFLIGHT_FAILED = 8
    QUALITY_GATE = 9
    REGRESSION = 10
    JUDGE_DISAGREES = 11
    UNSENT = 12
    UNKNOWN_PROJECT = 13
    INTERRUPTED = 130


_MEANING: dict[ExitCode, str] = {
    ExitCode.OK: "done (evaluate: single jobs may still have failed, see the table)",
    ExitCode.ERROR: "unexpected error, or the results could not be written",
    ExitCode.USAGE: "bad command line (unknown option, bad value, e.g. an unsupported --out type)",
    ExitCode.FILE_NOT_FOUND: "an input file does not exist",
    ExitCode.UNKNOWN_METRIC: "a name in --metrics is not a known metric",
    ExitCode.INVALID_DATASET: "an input file cannot be read or has malformed rows (all listed)",
    ExitCode.MISSING_COLUMNS: "a metric needs a column that no row has",
    ExitCode.NO_API_KEY: "an LLM-judged metric was asked for but no judge is configured",
    ExitCode.PREFLIGHT_FAILED: "checked before any paid call: --out / --json not writable, cache "
    "unusable, "
    "the judge unreachable / failing / without structured output, or (--ray) Ray unreachable",
    ExitCode.QUALITY_GATE: "a --fail-under threshold or --max-failed-rate was missed, or every "
    "job failed",
    ExitCode.REGRESSION: "compare: a metric dropped by more than --max-drop",
    ExitCode.JUDGE_DISAGREES: "check-judge: a metric misses the gate (--min-kappa, "
    "--min-answered, --min-agreement)",
    ExitCode.UNSENT: "monitor: some (run, metric) pairs are still unsent (LangSmith failed, a "
    "trace was not complete, a judge failure waits for its next attempt, or SIGTERM came while "
    "runs were listed): run it again",
    ExitCode.UNKNOWN_PROJECT: "monitor: LangSmith has no project named by --project",
    ExitCode.INTERRUPTED: "Ctrl-C (evaluate prints the partial results, and writes them "
    "with --out)",
}


ALWAYS: tuple[ExitCode, ...] = (ExitCode.OK, ExitCode.USAGE, ExitCode.INTERRUPTED)
"""Codes every sub-command can return: success, argparse's usage error, Ctrl-C."""


def exit_codes_help(codes: Sequence[ExitCode]) -> str:
    """The ``exit codes:`` epilog of one sub-command: the codes it can return, in order.

    One table of meanings (``_MEANING``) for the whole command; each sub-command declares the
    subset it can return (``EXIT_CODES`` in its module), so its ``--help`` lists no code it
    never returns. The codes of :data:`ALWAYS` are added.
    """
    wanted = set(codes) | set(ALWAYS)
    lines = ["exit codes:"]
    lines += [f"  {code.value:>3}  {text}" for code, text in _MEANING.items() if code in wanted]
    return "\n".join(lines)


def echo(text: str, stream: TextIO | None = None) -> None:
    """Write a line to stdout (or ``stream``)."""
    out = stream or sys.stdout
    out.write(text + "\n")
    out.flush()


def error(message: str) -> None:
    echo(f"ragmetrics: error: {message}", sys.stderr)


def split_names(text: str) -> list[str]:
    """Comma-separated names, stripped, lower-cased, without blanks or repeats (order kept)."""
    return list(dict.fromkeys(name.strip().lower() for name in text.split(",") if name.strip()))


def check_writable(path: Path, *, option: str) -> str | None:
    """Create ``path``'s parents and prove the file can be written; why not, if it cannot.

    Run before any paid call, so a run never ends with results it cannot save.
    """
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        return f"cannot write {option} {path}: {exc.strerror or exc}"
    if not existed:
        path.unlink(missing_ok=True)
    return None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {value:g}")
    return value


def fraction(text: str) -> float:
    """An argparse type: a number between 0 and 1 (a rate, a drop in score)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number such as 0.05, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value:g}")
    return value


def add_judge_options(parser: argparse.ArgumentParser) -> None:
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


def no_key_message(judged: Sequence[str]) -> str:
    """What to do when LLM-judged metrics were asked for but no judge is configured."""
    from langchain_ragmetrics.evaluation import metric_names

    plain = metric_names(judged=False)
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
    """``make_judge`` for the CLI: None when no judge is configured (no key, no base URL)."""
    from langchain_ragmetrics.metrics._judge import JudgeConfigError, make_judge

    try:
        return make_judge(model, base_url=base_url, max_retries=max_retries)
    except JudgeConfigError:
        return None
