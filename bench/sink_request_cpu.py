"""CPU the LangSmith feedback sink spends per score, now and as it was before two cuts.

The sink's CPU is the app's (it delivers in the app's process). Two changes cut it, and this
script measures each, with ``time.thread_time()`` of the thread that calls ``emit`` (the
stub answers on its own threads, so its CPU is not counted), for distinct scores:

* a score no longer sends a ``DELETE`` of a stale error feedback unless the sink sent an
  error for its pair (one request per score instead of two);
* the client's ``requests.Session`` reads the environment's HTTP settings once
  (``read_environment_once``) instead of scanning every environment variable for proxy
  settings, and looking for ``~/.netrc``, on each request.

Sides, alternating round by round in one process (the first side rotates): the sink as it
is now; the same with a ``DELETE`` after every score (the sink before the first cut); and
with the per-request reading restored too (before both). With the environment as it is and
with ``--extra-env`` more variables (a Kubernetes pod gets several per service in its
namespace). It prints requests per score and errors beside each figure, and the command.

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

SIDES = (
    "now: environment read once, DELETE only after an error of the pair",
    "DELETE after every score (before the first cut)",
    "DELETE after every score, environment read per request (before both)",
)


def sink(side: str) -> Any:
    """A sink built as users get it; for the "before" sides, the cuts undone."""
    from langchain_ragmetrics import LangSmithFeedbackSink

    built = LangSmithFeedbackSink(project_name=PROJECT)
    if side != SIDES[0]:  # as if it had sent an error for every pair
        built._error_sent = lambda _feedback: True  # type: ignore[method-assign]
    if side == SIDES[2]:
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
    """The rounds of every side, rotating who goes first, with fresh sinks."""
    sinks = {side: sink(side) for side in SIDES}
    for built in sinks.values():
        one_round(stub, built, 10)  # warm-up: imports, connections
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for r in range(args.rounds):
        for side in SIDES[r % len(SIDES) :] + SIDES[: r % len(SIDES)]:
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
        "rotating; CPU of the emitting thread (time.thread_time), LangSmith stub in-process "
        "on its own threads"
    )
    print(
        "| environment variables | sink | CPU ms per score (median) | range | "
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
            now, deleting, both = (medians[(variables, side)] for side in SIDES)
            print(
                f"{variables} variables: no DELETE after a score {deleting:.2f} -> {now:.2f} ms "
                f"per score ({1 - now / deleting:.0%} less); both cuts {both:.2f} -> {now:.2f} "
                f"({1 - now / both:.0%} less)"
            )


if __name__ == "__main__":
    main()
