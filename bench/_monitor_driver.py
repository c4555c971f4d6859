"""One monitor-worker measurement in a fresh process (started by ``bench_monitor.py``).

The LangSmith stub (holding the project's traces) and the 100 ms judge live in the
orchestrating process, so this process's CPU time is the worker's alone: listing and joining
runs, building samples, the metrics around each judge call, posting feedback, the checkpoint.
Prints one JSON line: wall time, CPU time, judge calls, runs scored, feedback sent.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _data import emit  # bench/ is the script's own directory


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--judge", required=True, help="judge base URL (.../v1)")
    parser.add_argument("--langsmith", required=True, help="LangSmith stub URL")
    parser.add_argument("--project", required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    args = parser.parse_args()

    import langsmith
    from langchain_openai import ChatOpenAI

    from langchain_ragmetrics import ContextPrecision, ContextRelevance
    from langchain_ragmetrics.integrations.monitor import LangSmithMonitor

    judge = ChatOpenAI(
        model="judge-model",
        base_url=args.judge,
        api_key="bench",
        temperature=0,
        timeout=60,
        max_retries=0,
        default_headers={"x-bench-side": "ours", "x-bench-metric": "monitor"},
    )
    client = langsmith.Client(api_url=args.langsmith, api_key="bench")
    metrics = [ContextRelevance(llm=judge), ContextPrecision(llm=judge)]
    with tempfile.TemporaryDirectory() as tmp:
        for project in (f"{args.project}-warmup", args.project):
            worker = LangSmithMonitor(
                project,
                client=client,
                metrics=metrics,
                checkpoint=Path(tmp) / f"{project}.sqlite",
                max_concurrency=args.concurrency,
                since="1h",
            )
            if project != args.project:
                worker.run()  # warm-up: imports, HTTP clients, caches
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        wall0 = time.perf_counter()
        summary = worker.run()
        wall = time.perf_counter() - wall0
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    emit(
        {
            "concurrency": args.concurrency,
            "wall_s": wall,
            "cpu_s": cpu,
            "judge_calls": summary.usage.judge_calls,
            "runs_scored": summary.runs_scored,
            "results_failed": summary.results_failed,
            "feedback_sent": summary.feedback_sent,
            "errors": summary.errors,
        }
    )


if __name__ == "__main__":
    main()
