"""Benchmark - online scoring on a saturated machine: does the isolated mode keep scoring?

The isolated mode's scoring threads run under ``SCHED_IDLE`` (they give way to any other
thread at once, for the caller's p99), and a guard lifts that while the CPUs stay saturated
(an idle-policy thread gets next to nothing of a busy CPU). This measures it: with one
CPU-bound process of normal priority per CPU ("hogs") running from the moment the handler's
child is ready to the end of the run, the handler (``ProcessIsolation`` with the online
benchmark's two metrics) gets ``--retrievals`` chain calls paced at 10 a second, each with
its own texts, then ``flush(--deadline)``. Per run: retrievals scored of those sampled, the
seconds from the first call until all were scored (or "not in N s"), the chain calls' median
and p99 latency during the run (what a request pays while scoring takes its share), and the
guard's warnings. With 40 calls a run, the p99 (nearest rank) is the slowest call.

Configs: ``idle_priority=True`` (the default) and ``False`` (``niceness=10`` only). Sides:
this checkout, and with ``--before DIR`` another one (``git worktree add /tmp/base <commit>``),
the package imported from ``DIR`` by this script's driver; sides and configs take turns run
by run, each run a fresh process. The judge (50 ms, loopback) runs in this process.

Usage: ``python bench/saturated_scoring.py [--before DIR] [--runs N] [--retrievals N]
[--deadline S] [--hogs N]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RATE = 10.0
"""Chain calls a second during a run."""
JUDGE_LATENCY = 0.050


def driver(args: argparse.Namespace) -> None:
    """One run, in a fresh process: warm up, say READY, wait for GO, then measure."""
    checkout = Path(args.checkout).resolve()
    sys.path.insert(0, str(checkout))
    import langchain_ragmetrics  # first: the checkout's package, not this one's

    assert Path(langchain_ragmetrics.__file__).resolve().is_relative_to(checkout)
    import logging
    from functools import partial

    from _common import median, percentile
    from _online_driver import WarningLog, bench_setup, build_chain

    sys.path.insert(0, str(checkout))  # _online_driver put this repository first: the child
    from langchain_ragmetrics import RagMetricsCallbackHandler  # gets sys.path as it is now
    from langchain_ragmetrics.callbacks import ProcessIsolation

    warnings = WarningLog()
    logging.getLogger("langchain_ragmetrics").addHandler(warnings)
    chain, questions = build_chain(args.retrievals + 1, seed=args.seed)
    handler = RagMetricsCallbackHandler(
        isolation=ProcessIsolation(
            setup=partial(bench_setup, args.judge_url), idle_priority=args.idle == "on"
        ),
        max_queue_size=10_000,
    )
    chain.invoke(questions[0], config={"callbacks": [handler]})  # starts the child
    if not handler.flush(120):
        raise SystemExit("the warm-up retrieval was not scored in 120 s")
    print("READY", flush=True)
    sys.stdin.readline()  # GO: the hogs run
    latencies: list[float] = []
    start = time.monotonic()
    for i, question in enumerate(questions[1:]):
        began = time.perf_counter()
        chain.invoke(question, config={"callbacks": [handler]})
        latencies.append(time.perf_counter() - began)
        time.sleep(max(0.0, start + (i + 1) / RATE - time.monotonic()))
    flushed = handler.flush(args.deadline)
    elapsed = time.monotonic() - start
    stats = handler.stats
    handler.close(5)
    print(
        json.dumps(
            {
                "flushed": flushed,
                "seconds": elapsed,
                "sampled": stats.sampled - 1,
                "processed": stats.processed - 1,
                "dropped": stats.dropped,
                "scored": stats.scored - 2,
                "failed": stats.failed,
                "median_ms": median(latencies) * 1e3,
                "p99_ms": percentile(latencies, 99) * 1e3,
                "saturated_warnings": sum("CPUs are saturated" in m for m in warnings.messages),
            }
        ),
        flush=True,
    )


def one_run(
    python: str, checkout: Path, idle: str, judge_url: str, args: argparse.Namespace, seed: int
) -> dict[str, Any]:
    """A driver process for one side and config, with the hogs around its measured part."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    command = [
        python,
        str(Path(__file__).resolve()),
        "--driver",
        "--checkout",
        str(checkout),
        "--idle",
        idle,
        "--judge-url",
        judge_url,
        "--retrievals",
        str(args.retrievals),
        "--deadline",
        str(args.deadline),
        "--seed",
        str(seed),
    ]
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    hogs: list[subprocess.Popen[bytes]] = []
    try:
        line = proc.stdout.readline()
        if line.strip() != "READY":
            raise RuntimeError(f"driver did not get ready: {line!r}")
        hogs = [subprocess.Popen([python, "-c", "while True: pass"]) for _ in range(args.hogs)]
        proc.stdin.write("GO\n")
        proc.stdin.flush()
        out = proc.stdout.read()
        proc.wait(timeout=args.deadline + 120)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        if proc.poll() is None:
            proc.kill()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"driver failed (exit {proc.returncode})")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--checkout", default=str(ROOT), help=argparse.SUPPRESS)
    parser.add_argument("--idle", choices=["on", "off"], default="on", help=argparse.SUPPRESS)
    parser.add_argument("--judge-url", default="", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--before", type=Path, help="another checkout's root, run in turn")
    parser.add_argument("--runs", type=int, default=2, help="runs per side and config")
    parser.add_argument("--retrievals", type=int, default=40, help="chain calls per run")
    parser.add_argument("--deadline", type=float, default=60.0, help="flush timeout (s)")
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 2, help="busy processes")
    args = parser.parse_args(argv)
    if args.driver:
        driver(args)
        return 0

    sys.path.insert(0, str(BENCH))
    sys.path.insert(0, str(ROOT))
    from _common import command_line, load_average, table
    from _judge import BenchJudge

    from tests._support.openai_server import JudgeServer

    sides = {"after": ROOT, **({"before": args.before.resolve()} if args.before else {})}
    load = load_average()
    rows: list[list[Any]] = []
    records: list[dict[str, Any]] = []
    with JudgeServer(BenchJudge(), latency=JUDGE_LATENCY) as judge:
        for run in range(args.runs):
            order = [(s, i) for s in sides for i in ("on", "off")]
            if run % 2:
                order.reverse()
            for side, idle in order:
                seed = 1_000 * (run + 1) + len(records)  # distinct texts in every run
                result = one_run(sys.executable, sides[side], idle, judge.base_url, args, seed)
                records.append({"side": side, "idle_priority": idle, "run": run + 1, **result})
                done = (
                    f"{result['seconds']:.1f}"
                    if result["flushed"]
                    else f"not in {args.deadline:g} s"
                )
                rows.append(
                    [
                        side,
                        idle,
                        run + 1,
                        f"{result['processed']} of {result['sampled']}",
                        result["dropped"],
                        done,
                        round(result["median_ms"], 2),
                        round(result["p99_ms"], 2),
                        result["saturated_warnings"],
                    ]
                )
                print(json.dumps(records[-1]), flush=True)
    print(
        f"\n{args.hogs} hogs (CPU-bound, normal priority) from the child's ready to the end; "
        f"{args.retrievals} retrievals at {RATE:g}/s, 2 metrics, judge {JUDGE_LATENCY * 1e3:g} "
        f"ms; load average at the start {load[0]:.1f}. Sides: "
        + ", ".join(f"{s} = {p}" for s, p in sides.items())
        + "\n"
    )
    print(
        table(
            [
                "side",
                "idle_priority",
                "run",
                "scored in time",
                "dropped",
                "seconds to score all",
                "call median ms",
                "call p99 ms",
                "guard warnings",
            ],
            rows,
        )
    )
    print(f"\ncommand: {command_line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
