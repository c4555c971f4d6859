"""How many results a second the LangSmith feedback sink delivers, one at a time or several.

Each score the sink delivers is one round trip to LangSmith, the feedback ``POST`` (a
second one, the ``DELETE`` of a stale error, only follows a score whose pair this sink sent
an error for: none here). Sent one at a time, a round trip of ``latency`` caps the sink at
``1 / latency`` scores a second, whatever the machine: 10 a second at 100 ms. This
script measures the sink's outbox (the thread that hands results to ``emit``, the same one
the callback handler uses) delivering distinct scores to the loopback LangSmith stub, which
answers each request after ``--latency`` seconds, with ``max_concurrency`` 1 and the
default, in alternating rounds in one process, and prints delivered, errors and dropped per
run beside the rate, and the command.

Usage: ``python bench/sink_throughput.py [--latency 0.05] [--results 200] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from _common import REPO  # noqa: F401 - puts the repository root on sys.path

import langchain_ragmetrics  # noqa: F401 - first: the checkout on PYTHONPATH is measured
from tests._support.langsmith_stub import LangSmithStub

PROJECT = "bench"


def results(count: int) -> list[Any]:
    """``count`` scores of distinct retriever runs."""
    from langchain_ragmetrics import MetricResult, OnlineResult, RagSample

    now = datetime.now(timezone.utc)
    out = []
    for i in range(count):
        run = uuid.uuid4()
        out.append(
            OnlineResult(
                trace_id=run,
                root_run_id=run,
                run_id=run,
                query=f"question {i}",
                sample=RagSample(question=f"question {i}", contexts=[f"context {i}"]),
                result=MetricResult(metric="context_relevance", score=(i % 10) / 10),
                timestamp=now,
            )
        )
    return out


def one_run(stub: LangSmithStub, concurrency: int, count: int) -> dict[str, Any]:
    """Deliver ``count`` scores through a fresh sink and outbox; the figures of the run."""
    from langchain_ragmetrics import LangSmithFeedbackSink
    from langchain_ragmetrics.callbacks._outbox import SinkOutbox
    from langchain_ragmetrics.callbacks._stats import FailureLog

    sink = LangSmithFeedbackSink(project_name=PROJECT, max_concurrency=concurrency)
    sink.project_id()  # resolved before the clock starts, as after a sink's first result
    box = SinkOutbox(
        sink,
        key="LangSmithFeedbackSink",
        max_size=count,
        thread_name="bench",
        failures=FailureLog(),
    )
    items = results(count)
    requests_before = len(stub.requests)
    started = time.perf_counter()
    box.put(items)
    box.request(lambda: None).result(600)
    seconds = time.perf_counter() - started
    stats = box.stats()
    box.stop()
    sink.close(5)
    return {
        "seconds": seconds,
        "delivered": stats.delivered,
        "errors": stats.errors,
        "dropped": stats.dropped,
        "requests": len(stub.requests) - requests_before,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.05, help="stub answer delay, s")
    parser.add_argument("--results", type=int, default=200, help="scores per run")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from langchain_ragmetrics import LangSmithFeedbackSink

    default = inspect.signature(LangSmithFeedbackSink).parameters["max_concurrency"].default
    configs = [1, default]
    runs: dict[int, list[dict[str, Any]]] = {c: [] for c in configs}
    with LangSmithStub() as stub:
        stub.feedback_needs_run = False
        stub.create_project(PROJECT)
        os.environ["LANGSMITH_ENDPOINT"] = stub.url
        os.environ["LANGSMITH_API_KEY"] = "bench"
        one_run(stub, default, 10)  # warm-up: imports, connections
        stub.latency = args.latency
        for r in range(args.rounds):
            order = configs if r % 2 == 0 else configs[::-1]  # alternate who goes first
            for concurrency in order:
                runs[concurrency].append(one_run(stub, concurrency, args.results))
    command = " ".join(["python", "bench/sink_throughput.py", *sys.argv[1:]])
    print(f"command: {command}")
    print(
        f"{args.results} distinct scores per run, LangSmith stub answering after "
        f"{args.latency * 1000:.0f} ms, {args.rounds} rounds, configs alternating"
    )
    columns = ["max_concurrency", "scores/s (median)", "range", "requests per score"]
    columns += ["delivered", "errors", "dropped"]
    print("| " + " | ".join(columns) + " |")
    print("|---|---|---|---|---|---|---|")
    rates: dict[int, float] = {}
    for concurrency in configs:
        rows = runs[concurrency]
        per_second = [row["delivered"] / row["seconds"] for row in rows]
        rates[concurrency] = statistics.median(per_second)
        total = sum(row["delivered"] for row in rows)
        requests = sum(row["requests"] for row in rows)
        print(
            f"| {concurrency} | {rates[concurrency]:.1f} | {min(per_second):.1f}-"
            f"{max(per_second):.1f} | {requests / max(1, total):.2f} | "
            f"{total} of {args.results * len(rows)} | {sum(row['errors'] for row in rows)} | "
            f"{sum(row['dropped'] for row in rows)} |"
        )
    ones = runs[1]  # one at a time: each score is its round trips, back to back
    per_score = sum(row["requests"] for row in ones) / max(1, sum(r["delivered"] for r in ones))
    ceiling = 1 / (per_score * args.latency) if args.latency > 0 else float("inf")
    print(
        f"one at a time the ceiling is 1 / ({per_score:.2f} requests x "
        f"{args.latency * 1000:.0f} ms) = {ceiling:.1f} scores/s; max_concurrency={default}: "
        f"{rates[default]:.1f} scores/s ({rates[default] / rates[1]:.2f}x one at a time)"
    )


if __name__ == "__main__":
    main()
