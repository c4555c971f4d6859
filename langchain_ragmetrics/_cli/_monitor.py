"""``ragmetrics monitor``: score the retriever runs of a LangSmith project, post feedback."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from typing import Any

from langchain_ragmetrics._cli._common import (
    ExitCode,
    add_judge_options,
    build_judge,
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
    ExitCode.UNSENT,
    ExitCode.UNKNOWN_PROJECT,
)
"""What this sub-command can return besides 0, 2 and 130 (its ``--help`` lists them)."""

_DEFAULT_METRICS = "context_relevance,context_precision"


def _shard(text: str) -> tuple[int, int]:
    from langchain_ragmetrics.integrations.monitor import parse_shard

    try:
        return parse_shard(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _retention(text: str) -> str | None:
    """``--retention``: a duration (checked by the monitor, as ``--since``), or ``none``."""
    return None if text.strip().lower() == "none" else text


def register(commands: Any) -> None:
    """Add the ``monitor`` sub-command to ``commands`` (an argparse sub-parsers action)."""
    from langchain_ragmetrics.evaluation import metric_classes

    monitor = commands.add_parser(
        "monitor",
        help="score the retriever runs a LangSmith project holds and post feedback",
        description="List the retriever runs of a LangSmith project, join each with its "
        "trace's root run (question, answer), score them and post one feedback per metric "
        "on each run. Restartable (a checkpoint file) and shardable: run N workers with "
        "--shard 0/N ... N-1/N and every run is scored exactly once.",
        epilog=exit_codes_help(EXIT_CODES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    monitor.add_argument("--project", required=True, help="LangSmith project name")
    monitor.add_argument(
        "--since", default="24h", help="how far back to look, e.g. 30m, 24h, 7d (default: 24h)"
    )
    monitor.add_argument("--follow", action="store_true", help="keep polling for new runs")
    monitor.add_argument(
        "--shard", type=_shard, default=(0, 1), help="I/N: this worker's share (default: 0/1)"
    )
    monitor.add_argument(
        "--metrics",
        default=_DEFAULT_METRICS,
        help=f"comma-separated metric names (default: {_DEFAULT_METRICS}); "
        f"known: {', '.join(metric_classes())}",
    )
    monitor.add_argument(
        "--sample-rate", type=fraction, default=1.0, help="fraction of traces scored (default: 1)"
    )
    monitor.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="SQLite checkpoint file (default: .ragmetrics-monitor-<project>-<I>of<N>.sqlite)",
    )
    add_judge_options(monitor)
    monitor.add_argument(
        "--concurrency", type=positive_int, default=8, help="runs scored at once (default: 8)"
    )
    monitor.add_argument(
        "--rate-limit", type=positive_float, default=None, help="judge calls per minute at most"
    )
    monitor.add_argument(
        "--timeout", type=positive_float, default=120.0, help="seconds per metric job"
    )
    monitor.add_argument(
        "--request-timeout",
        type=positive_float,
        default=30.0,
        help="seconds per LangSmith request (default: 30)",
    )
    monitor.add_argument(
        "--poll-interval",
        type=positive_float,
        default=30.0,
        help="seconds between polls with --follow (default: 30)",
    )
    monitor.add_argument(
        "--lookback",
        default="10m",
        help="with --follow, each poll lists again this far before the previous one, for "
        "runs LangSmith ingests late, e.g. 30s, 10m, 1h (default: 10m)",
    )
    monitor.add_argument(
        "--retention",
        type=_retention,
        default="30d",
        help="how long settled (run, metric) pairs stay in the checkpoint, e.g. 7d, 30d, or "
        "none to keep them for ever; older ones are pruned. --since may not reach back "
        "further (default: 30d)",
    )
    monitor.add_argument(
        "--max-wait",
        default="24h",
        help="how long a run whose trace is not complete in LangSmith is waited for before "
        "its pairs are dropped (counted), e.g. 1h, 24h (default: 24h)",
    )
    monitor.add_argument(
        "--max-polls", type=positive_int, default=None, help="stop after this many polls"
    )
    monitor.set_defaults(handler=_monitor_command)


def _monitor_command(args: argparse.Namespace) -> int:
    from langchain_ragmetrics._errors import CheckpointError, MonitorError
    from langchain_ragmetrics.evaluation import UnknownMetricError, is_judged, metric_from_name
    from langchain_ragmetrics.integrations.monitor import LangSmithMonitor

    names = split_names(args.metrics)
    if not names:
        error("--metrics is empty")
        return ExitCode.USAGE
    try:
        classes = [metric_from_name(name) for name in names]
    except UnknownMetricError as exc:
        error(str(exc))
        return ExitCode.UNKNOWN_METRIC
    judged = [m.metric_name for m in classes if is_judged(m)]
    llm = build_judge(args.model, args.base_url) if judged else None
    if judged and llm is None:
        error(no_key_message(judged))
        return ExitCode.NO_API_KEY
    metrics = [metric_from_name(name, llm=llm) for name in names]
    try:
        worker = LangSmithMonitor(
            args.project,
            metrics=metrics,
            since=args.since,
            shard=args.shard,
            sample_rate=args.sample_rate,
            checkpoint=args.checkpoint,
            max_concurrency=args.concurrency,
            rate_limit_per_minute=args.rate_limit,
            timeout=args.timeout,
            request_timeout=args.request_timeout,
            follow=args.follow,
            poll_interval=args.poll_interval,
            max_polls=args.max_polls,
            lookback=args.lookback,
            retention=args.retention,
            max_wait=args.max_wait,
        )
    except ValueError as exc:
        error(str(exc))
        return ExitCode.USAGE
    on_main = threading.current_thread() is threading.main_thread()
    # Kubernetes stops a pod with SIGTERM: finish the poll and print the summary.
    previous = signal.signal(signal.SIGTERM, lambda *_: worker.stop()) if on_main else None
    try:
        summary = worker.run()
    except CheckpointError as exc:
        if not worker.summary.polls:  # refused when opened: fix the option
            error(str(exc))
            return ExitCode.USAGE
        echo(worker.summary.render())  # it stopped mid-run: what it did until then
        error(str(exc))
        return ExitCode.ERROR
    except MonitorError as exc:  # no such project
        error(str(exc))
        return ExitCode.UNKNOWN_PROJECT
    except KeyboardInterrupt:
        echo(worker.summary.render())
        raise
    finally:
        if on_main:
            signal.signal(signal.SIGTERM, previous)
    echo(summary.render())
    if summary.errors and summary.runs_listed == 0:
        error(f"cannot read project {args.project!r} from LangSmith: {summary.errors[-1]}")
        return ExitCode.ERROR
    if summary.listing_failed:
        error(
            f"listing the project's runs failed partway ({summary.errors[-1]}); "
            "run the monitor again (nothing is sent twice)"
        )
        return ExitCode.UNSENT
    if summary.listing_stopped:
        error(
            "stopped before the listing of runs ended; run the monitor again for the rest "
            "(nothing is sent twice)"
        )
        return ExitCode.UNSENT
    if not summary.complete:
        error(
            f"{summary.runs_unsent} run(s) still have unsent feedback; "
            "run the monitor again (nothing is sent twice)"
        )
        return ExitCode.UNSENT
    return ExitCode.OK
