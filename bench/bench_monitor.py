"""Benchmark 6 - sizing a monitor worker: judge calls per second against a 100 ms judge.

The LangSmith stub holds ``--runs`` traces built from the shipped dataset (a root run with the
question and answer, a retriever child run with the sample's five contexts), and the judge
answers every call after 100 ms. A ``LangSmithMonitor`` worker with ContextRelevance and
ContextPrecision (two judge calls per run) scores the whole project in a fresh process, at
several concurrency settings. Reported: judge calls per second the worker sustains, its CPU
time per judge call (the whole worker: listing, joining, samples, metrics, feedback posts,
checkpoint), and the share of one core it uses. The ideal rate is concurrency / 100 ms; the
gap is the worker's own overhead. Each process first scores a small warm-up project, so
start-up (imports, client set-up) is not in the figures: a worker runs for hours. The
machine is shared and noisy: compare ratios within a run.

Usage: ``python bench/bench_monitor.py [--tiny] [--repeats N] [--out DIR]``
"""

from __future__ import annotations

import datetime as dt
import sys
import uuid
from typing import Any

from _common import base_parser, median, publish, run_driver, table
from _data import load
from _judge import BenchJudge

from tests._support.langsmith_stub import LangSmithStub
from tests._support.openai_server import JudgeServer

JUDGE_LATENCY = 0.100
RUNS = 400
CONCURRENCY = (4, 16, 32)
REPEATS = 3
PROJECT = "bench-monitor"
WARMUP = 8
"""Traces of a warm-up project the worker scores first (imports, clients, caches)."""


def fill(stub: LangSmithStub, records: list[dict[str, Any]], project: str = PROJECT) -> None:
    """One trace per record: root run (question -> answer) and its retriever run."""
    now = dt.datetime.now(dt.timezone.utc)
    with stub._lock:
        for i, record in enumerate(records):
            start = (now - dt.timedelta(minutes=30) + dt.timedelta(milliseconds=i)).isoformat()
            end = (now - dt.timedelta(minutes=29)).isoformat()
            root, child = str(uuid.uuid4()), str(uuid.uuid4())
            common = {"session_name": project, "trace_id": root, "start_time": start}
            stub._store_run(
                "post",
                {
                    **common,
                    "id": root,
                    "name": "rag",
                    "run_type": "chain",
                    "inputs": {"question": record["user_input"]},
                    "outputs": {"output": record["response"]},
                    "end_time": end,
                },
            )
            docs = [{"page_content": c, "metadata": {}} for c in record["retrieved_contexts"]]
            stub._store_run(
                "post",
                {
                    **common,
                    "id": child,
                    "parent_run_id": root,
                    "name": "VectorStoreRetriever",
                    "run_type": "retriever",
                    "inputs": {"query": record["user_input"]},
                    "outputs": {"documents": docs},
                    "end_time": end,
                },
            )


def main() -> None:
    parser = base_parser(__doc__ or "")
    parser.add_argument("--concurrency", type=int, nargs="*", default=None)
    args = parser.parse_args()
    runs = 20 if args.tiny else RUNS
    repeats = args.repeats or (1 if args.tiny else REPEATS)
    levels = args.concurrency or ((4,) if args.tiny else CONCURRENCY)
    measured: dict[int, list[dict[str, Any]]] = {c: [] for c in levels}
    judge_script = BenchJudge()
    with JudgeServer(judge_script, latency=JUDGE_LATENCY) as judge, LangSmithStub() as stub:
        for _ in range(repeats):
            for concurrency in levels:
                stub.reset()
                fill(stub, load(samples=runs))
                fill(stub, load(samples=WARMUP), project=f"{PROJECT}-warmup")
                result = run_driver(
                    sys.executable,
                    "_monitor_driver.py",
                    "--judge",
                    judge.base_url,
                    "--langsmith",
                    stub.url,
                    "--project",
                    PROJECT,
                    "--concurrency",
                    str(concurrency),
                )
                if result["errors"] or result["runs_scored"] != runs:
                    msg = f"monitor run incomplete: {result}"
                    raise RuntimeError(msg)
                measured[concurrency].append(result)
    rows = []
    summary: dict[str, Any] = {}
    for concurrency, results in measured.items():
        rate = median([r["judge_calls"] / r["wall_s"] for r in results])
        cpu_ms = median([r["cpu_s"] / r["judge_calls"] * 1000 for r in results])
        core = median([r["cpu_s"] / r["wall_s"] for r in results])
        ideal = concurrency / JUDGE_LATENCY
        rows.append([concurrency, rate, ideal, rate / ideal, cpu_ms, core])
        summary[str(concurrency)] = {
            "judge_calls_per_s": rate,
            "ideal_per_s": ideal,
            "cpu_ms_per_judge_call": cpu_ms,
            "cores_used": core,
            "runs": results,
        }
    text = table(
        [
            "concurrency",
            "judge calls/s",
            "ideal (c / 100 ms)",
            "share of ideal",
            "worker CPU ms / judge call",
            "cores used",
        ],
        rows,
    )
    text += (
        f"\n\n{runs} runs x 2 metrics (ContextRelevance, ContextPrecision) = {2 * runs} judge "
        f"calls per measurement, judge latency {JUDGE_LATENCY * 1000:.0f} ms, median of "
        f"{repeats} fresh-process runs per row."
    )
    publish(
        args.out,
        "monitor",
        "Monitor worker sizing (100 ms judge)",
        text,
        {"runs": runs, "judge_latency_s": JUDGE_LATENCY, "levels": summary},
    )


if __name__ == "__main__":
    main()
