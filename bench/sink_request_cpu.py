"""CPU the LangSmith feedback sink spends per score, environment read per request or once.

The sink delivers in the app's process (in every isolation mode), so its CPU is the app's.
Its client is a ``langsmith.Client`` over a ``requests.Session``; a session that trusts the
environment scans every environment variable for proxy settings, and looks for
``~/.netrc``, on each request. The client the sink builds now reads those settings once
(``read_environment_once``). This script measures ``time.thread_time()`` of the thread
that calls ``emit`` (the stub answers on its own threads, so its CPU is not counted) for
distinct scores, with the session as it is now and with the per-request reading restored
(``trust_env=True`` and nothing pinned: the session as it was before), alternating round by
round in one process, with the environment as it is and with ``--extra-env`` more variables
(a Kubernetes pod gets several per service in its namespace). It prints requests per score
and errors beside each figure, and the command.

Usage: ``python bench/sink_request_cpu.py [--results 200] [--rounds 5] [--extra-env 100]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

from _common import REPO  # noqa: F401 - puts the repository root on sys.path
from sink_throughput import PROJECT, results

import langchain_ragmetrics  # noqa: F401 - first: the checkout on PYTHONPATH is measured
from tests._support.langsmith_stub import LangSmithStub

SIDES = ("read once (now)", "read per request (before)")


def sink(side: str) -> Any:
    """A sink built as users get it; for the "before" side, its session un-pinned."""
    from langchain_ragmetrics import LangSmithFeedbackSink

    built = LangSmithFeedbackSink(project_name=PROJECT)
    if side == SIDES[1]:
        session = built.client.session
        session.trust_env, session.proxies, session.verify, session.auth = True, {}, True, None
    built.project_id()  # resolved before the clock starts, as after a sink's first result
    return built


def one_round(stub: LangSmithStub, built: Any, count: int) -> dict[str, Any]:
    """``count`` distinct scores emitted one after another; CPU of this thread per score."""
    items = results(count)
    requests_before, errors = len(stub.requests), 0
    started = time.thread_time()
    for item in items:
        try:
            built.emit(item)
        except Exception:  # counted and printed, never hidden
            errors += 1
    cpu = time.thread_time() - started
    return {
        "cpu_ms": cpu / count * 1000,
        "requests": len(stub.requests) - requests_before,
        "errors": errors,
    }


def measure(stub: LangSmithStub, args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """The rounds of both sides, alternating who goes first, with fresh sinks."""
    sinks = {side: sink(side) for side in SIDES}
    for built in sinks.values():
        one_round(stub, built, 10)  # warm-up: imports, connections
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for r in range(args.rounds):
        for side in SIDES if r % 2 == 0 else SIDES[::-1]:
            runs[side].append(one_round(stub, sinks[side], args.results))
    for built in sinks.values():
        built.close(5)
    return runs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=200, help="scores per round and side")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--extra-env", type=int, default=100, help="variables added, 2nd pass")
    args = parser.parse_args(argv)
    command = " ".join(["python", "bench/sink_request_cpu.py", *sys.argv[1:]])
    print(f"command: {command}")
    print(
        f"{args.results} distinct scores per round and side, {args.rounds} rounds, sides "
        "alternating; CPU of the emitting thread (time.thread_time), LangSmith stub in-process "
        "on its own threads"
    )
    print(
        "| environment variables | client session | CPU ms per score (median) | range | "
        "requests per score | errors | scores |"
    )
    print("|---|---|---|---|---|---|---|")
    with LangSmithStub() as stub:
        stub.feedback_needs_run = False
        stub.create_project(PROJECT)
        os.environ["LANGSMITH_ENDPOINT"] = stub.url
        os.environ["LANGSMITH_API_KEY"] = "bench"
        medians: dict[tuple[int, str], float] = {}
        for extra in (0, args.extra_env):
            for i in range(extra):
                os.environ[f"BENCH_SVC_{i}_SERVICE_HOST"] = f"10.0.{i // 250}.{i % 250}"
            runs = measure(stub, args)
            variables = len(os.environ)
            for side in SIDES:
                rows = runs[side]
                cpu = [row["cpu_ms"] for row in rows]
                medians[(variables, side)] = statistics.median(cpu)
                scores = args.results * len(rows)
                print(
                    f"| {variables} | {side} | {medians[(variables, side)]:.2f} | "
                    f"{min(cpu):.2f}-{max(cpu):.2f} | "
                    f"{sum(row['requests'] for row in rows) / scores:.2f} | "
                    f"{sum(row['errors'] for row in rows)} | {scores} |"
                )
        for variables in sorted({v for v, _ in medians}):
            now, before = medians[(variables, SIDES[0])], medians[(variables, SIDES[1])]
            print(
                f"{variables} variables: {before:.2f} -> {now:.2f} ms per score "
                f"({1 - now / before:.0%} less)"
            )


if __name__ == "__main__":
    main()
