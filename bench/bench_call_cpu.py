"""Client CPU per judge call, ours against the bare openai SDK, side by side in one process.

Each round scores N distinct samples with a ``ScoringEngine`` (16 at a time, no handler: the
path ``evaluate()`` takes) and then replays the very request payloads of those calls with the
bare sync openai SDK on 16 threads (the floor; the payloads are built untimed, after our
run, so our run meets every text for the first time); both sides are timed with
``time.process_time`` in the same process, round after round, so a change in the machine's
load hits both alike. The judge (the benchmark judge, 100 ms latency) runs in a child process,
so its CPU is not counted. Reported: CPU ms per call of each side and their ratio, per round
and the median (issue 18's target: ours <= 1.5x the SDK's).

Usage: ``python bench/bench_call_cpu.py [--metrics a,b] [--samples N] [--rounds R] [--tiny]``
(default: all four judged metrics, 100 samples, 5 rounds).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _data import judge_client  # bench/ is the script's own directory
from make_dataset import build

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's package, for the imports in main()

CONCURRENCY = 16
SERVER = """
import sys, time
sys.path[:0] = [{bench!r}, {root!r}]
from _judge import BenchJudge
from tests._support.openai_server import JudgeServer
with JudgeServer(BenchJudge(), latency={latency}) as server:
    print(server.base_url, flush=True)
    sys.stdin.read()
"""


def payloads(metrics: list[Any], samples: list[Any]) -> list[dict[str, Any]]:
    """The request payloads our judge calls for ``samples`` send (the model's own builder)."""
    out = []
    for sample in samples:
        for metric in metrics:
            plan = metric.plan(metric.prepared(sample)[0])
            for call in getattr(plan, "calls", []):
                runner = metric.runner(call)
                messages = runner.prompt.format_messages(**call.variables)
                out.append(runner.llm._get_request_payload(messages, **runner.model.kwargs))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metrics", default=None, help="comma-separated keys (default: all four)")
    parser.add_argument("--samples", type=int, default=100, help="samples per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--tiny", action="store_true", help="10 samples, 2 rounds, 10 ms judge")
    args = parser.parse_args(argv)
    if args.tiny:
        args.samples, args.rounds, args.latency = 10, 2, 0.01

    import openai

    from langchain_ragmetrics._engine import Job, ScoringEngine
    from langchain_ragmetrics._schema import coerce_sample
    from langchain_ragmetrics.evaluation import metric_from_name, metric_names

    code = SERVER.format(bench=str(HERE), root=str(HERE.parent), latency=args.latency)
    server = subprocess.Popen(  # our own interpreter and script
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        keys = args.metrics.split(",") if args.metrics else metric_names(judged=True)
        metrics = [
            metric_from_name(k, llm=judge_client(url, "ours", k, max_retries=0)) for k in keys
        ]
        client = openai.OpenAI(base_url=url, api_key="test", max_retries=0, timeout=60)

        def floor(bodies: list[dict[str, Any]]) -> None:
            with ThreadPoolExecutor(CONCURRENCY) as pool:
                list(pool.map(lambda b: client.chat.completions.create(**b), bodies))

        def ours(samples: list[Any]) -> None:
            jobs = [Job(s, m) for s in samples for m in metrics]
            ScoringEngine(max_concurrency=CONCURRENCY).run(jobs)

        records = build(args.samples * (args.rounds + 1) + 8)
        samples = [coerce_sample(r) for r in records]
        ours(samples[:8])  # warm-up: imports, connections, first-use set-up
        floor(payloads(metrics, samples[:8]))
        rows = []
        for r in range(args.rounds):
            batch = samples[8 + r * args.samples : 8 + (r + 1) * args.samples]
            start = time.process_time()
            ours(batch)
            ours_cpu = time.process_time() - start
            # Built after our run: its texts were new to our run (segmentation memoises texts).
            bodies = payloads(metrics, batch)
            ours_ms = ours_cpu / len(bodies) * 1000
            start = time.process_time()
            floor(bodies)
            floor_ms = (time.process_time() - start) / len(bodies) * 1000
            rows.append((len(bodies), ours_ms, floor_ms, ours_ms / floor_ms))
            print(
                f"round {r}: {len(bodies)} calls  ours {ours_ms:.2f} ms/call  "
                f"SDK {floor_ms:.2f} ms/call  ratio {ours_ms / floor_ms:.2f}",
                flush=True,
            )
        med = [statistics.median(col) for col in list(zip(*rows, strict=True))[1:]]
        print(
            f"metrics {','.join(keys)}: median ours {med[0]:.2f} ms/call, SDK {med[1]:.2f} "
            f"ms/call, ratio {med[2]:.2f} (target <= 1.5: {'met' if med[2] <= 1.5 else 'MISSED'})"
        )
    finally:
        server.kill()
        server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
