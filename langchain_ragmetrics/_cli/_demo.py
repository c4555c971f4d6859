"""``ragmetrics demo``: a small RAG chain over a bundled corpus, scored online."""

from __future__ import annotations

import argparse
from typing import Any

from langchain_ragmetrics._cli._common import ExitCode, add_judge_options, exit_codes_help

__all__ = ["EXIT_CODES", "register"]

EXIT_CODES: tuple[ExitCode, ...] = (ExitCode.ERROR,)
"""What this sub-command can return besides 0, 2 and 130 (its ``--help`` lists them)."""


def register(commands: Any) -> None:
    """Add the ``demo`` sub-command to ``commands`` (an argparse sub-parsers action)."""
    demo = commands.add_parser(
        "demo",
        help="run a small RAG chain over a bundled corpus with online scoring",
        description="Build a RAG chain over documents that ship with the package, score each "
        "retrieval with the callback handler and print the scores. Offline it uses an "
        "extractive answerer and the deterministic metrics; with OPENAI_API_KEY or "
        "OPENAI_BASE_URL it uses the LLM for answers and the LLM-judged metrics too.",
        epilog=exit_codes_help(EXIT_CODES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_judge_options(demo)
    demo.add_argument(
        "--offline", action="store_true", help="never call an LLM, even when one is configured"
    )
    demo.set_defaults(handler=_demo_command)


def _demo_command(args: argparse.Namespace) -> int:
    from langchain_ragmetrics.demo._run import run_demo

    return run_demo(model=args.model, base_url=args.base_url, offline=args.offline)
