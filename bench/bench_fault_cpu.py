"""Client CPU of a failed judge request (500, 429, malformed) against a successful one.

Each round scores N distinct samples x the metrics with a ``ScoringEngine`` (16 at a time, no
handler: the path ``evaluate()`` takes) once per side: ``ok`` (every request answered) and one
side per fault kind, where the judge fails the *first* request of every distinct prompt with
that fault and answers the retry. So a faulty side sends exactly one extra request per judge
call, and its CPU minus the ``ok`` side's, over the faults injected, is what one failed
request costs the client: sending it, the error path, the retry bookkeeping and the second
attempt's set-up (the backoff sleep itself costs no CPU: the retry policy's waits are zeroed,
``initial_backoff=0`` and ``Retry-After: 0``). The sides alternate round by round in one
process, timed with ``time.process_time``; the judge runs in a child process, so its CPU is
not counted. Reported: CPU ms per request on the ``ok`` side, and per failed request of each
kind (the median of the rounds' differences).

Usage: ``python bench/bench_fault_cpu.py [--metrics a,b] [--samples N] [--rounds R] [--tiny]``
(default: context_recall and context_precision, as ``bench_faults.py``; 60 samples, 5 rounds).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _fault_judge import start as start_fault_judge  # bench/ is the script's own directory
from make_dataset import build

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's package, for the imports in main()

CONCURRENCY = 16
KINDS = ("500", "429", "malformed")


def client(url: str, kind: str, metric: str) -> Any:
    """A judge client whose requests ask the server for fault ``kind`` (``ok``: none)."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model="judge-model",
        base_url=url,
        api_key="test",
        temperature=0,
        timeout=60,
        max_retries=0,
        default_headers={"x-bench-fault": kind, "x-bench-metric": metric},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metrics", default="context_recall,context_precision")
    parser.add_argument("--samples", type=int, default=60, help="samples per side and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--tiny", action="store_true", help="8 samples, 2 rounds")
    args = parser.parse_args(argv)
    if args.tiny:
        args.samples, args.rounds = 8, 2

    from langchain_ragmetrics._engine import Job, ScoringEngine
    from langchain_ragmetrics._schema import coerce_sample
    from langchain_ragmetrics.evaluation import metric_from_name
    from langchain_ragmetrics.metrics import RetryPolicy

    server, url = start_fault_judge(latency=args.latency)
    try:
        keys = args.metrics.split(",")
        retry = RetryPolicy(initial_backoff=0.0)
        sides = ("ok", *KINDS)
        metrics = {
            kind: [metric_from_name(k, llm=client(url, kind, k), retry=retry) for k in keys]
            for kind in sides
        }
        per_round = args.samples * len(sides)
        records = build(per_round * (args.rounds + 1))
        samples = [coerce_sample(r) for r in records]

        def run(kind: str, batch: list[Any]) -> tuple[float, int]:
            jobs = [Job(s, m) for s in batch for m in metrics[kind]]
            engine = ScoringEngine(max_concurrency=CONCURRENCY)
            start = time.process_time()
            results = engine.run(jobs)
            cpu = time.process_time() - start
            failed = sum(1 for r in results if r is None or r.failed)
            if failed:
                msg = f"{kind}: {failed} jobs failed (every fault should be retried once)"
                raise RuntimeError(msg)
            return cpu, engine.stats.usage.judge_calls

        for i, kind in enumerate(sides):  # warm-up: imports, connections, first-use set-up
            run(kind, samples[i * 2 : i * 2 + 2])
        rows: list[dict[str, float]] = []
        for r in range(args.rounds):
            base = per_round * (r + 1)
            row: dict[str, float] = {}
            for i, kind in enumerate(sides[r % len(sides) :] + sides[: r % len(sides)]):
                batch = samples[base + i * args.samples : base + (i + 1) * args.samples]
                row[kind + "_cpu"], row[kind + "_requests"] = run(kind, batch)
            ok_ms = row["ok_cpu"] / row["ok_requests"] * 1000
            row["ok_ms"] = ok_ms
            line = [f"round {r}: ok {ok_ms:.2f} ms/request"]
            for kind in KINDS:
                extra = row[kind + "_requests"] - row["ok_requests"]
                row[kind + "_ms"] = (row[kind + "_cpu"] - row["ok_cpu"]) / extra * 1000
                line.append(f"{kind} {row[kind + '_ms']:+.2f} ms/failed request ({extra:.0f})")
            rows.append(row)
            print(", ".join(line), flush=True)
        med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
        print(
            f"metrics {','.join(keys)}, {args.samples} samples/side/round, median of "
            f"{args.rounds} rounds: success {med['ok_ms']:.2f} ms CPU/request; failed request: "
            + ", ".join(f"{kind} {med[kind + '_ms']:.2f} ms" for kind in KINDS)
            + f"\ncommand: python bench/bench_fault_cpu.py {' '.join(argv or sys.argv[1:])}"
        )
    finally:
        server.kill()
        server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
