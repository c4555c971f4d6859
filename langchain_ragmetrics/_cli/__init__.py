"""The ``ragmetrics`` command: one sub-command per module (``_evaluate``, ``_demo`` ...).

Every failure the user can fix has its own exit code and a message that says how to fix it
(see :class:`ExitCode`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from langchain_ragmetrics._cli._common import ExitCode, build_judge, error, no_key_message

__all__ = ["ExitCode", "build_judge", "build_parser", "main", "no_key_message"]

# Sub-command modules, in the order ``--help`` lists them; each has ``register(commands)``.
_COMMANDS: tuple[str, ...] = ("evaluate", "compare", "report", "demo", "monitor", "check-judge")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``ragmetrics``."""
    from langchain_ragmetrics._version import __version__

    parser = argparse.ArgumentParser(
        prog="ragmetrics",
        description="Retrieval-quality metrics for RAG: evaluate a dataset, compare and report "
        "saved runs, monitor a LangSmith project, check a judge, or run the demo.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="{" + ",".join(_COMMANDS) + "}")
    commands.required = True
    for name in _COMMANDS:
        module = importlib.import_module(f"langchain_ragmetrics._cli._{name.replace('-', '_')}")
        module.register(commands)
    return parser


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
        error("interrupted")
        return ExitCode.INTERRUPTED


if __name__ == "__main__":  # pragma: no cover - ``python -m langchain_ragmetrics._cli``
    sys.exit(main())
