"""The ceiling of ``evaluate(workers=2)``: two processes that share nothing, each scoring half.

``bench_workers.py`` compares ``workers=2`` (the caller and a worker, coordinated: jobs fed
over a pipe, results sent back, slots lent) with ``workers=1``. This script measures what two
processes give with no coordination at all: each runs ``evaluate(workers=1)`` (or
``aevaluate`` with ``--async``) on its own half of the rows with half the slots, both
released at the same instant; the run ends when the slower one ends. Against one process
with all the slots and all the rows, that speed-up is what the coordination could reach.
Same judge and data shape as ``bench_workers.py``'s scale check (memoising judge in its own
process, filled by an untimed run; distinct generated samples; 50 ms). Every process warms
up on rows of its own, untimed, then says "ready" and waits for "go" on its stdin; the clock
starts when every process is ready and told to go (a handshake, no fixed wait).

Usage: ``python bench/independent_halves.py [--samples 300] [--rounds 2] [--async]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(BENCH), str(REPO)]

CONCURRENCY = 64
DRIVER = r"""
import asyncio, json, sys, time
sys.path[:0] = [{bench!r}, {repo!r}]
import bench_workers as bw
from langchain_ragmetrics import aevaluate, evaluate
base, dataset, mode, part, parts, slots = sys.argv[1:7]
data = json.loads(open(dataset, encoding="utf-8").read())
rows = data["rows"][int(part)::int(parts)]
evaluate(data["warm"], bw._metrics(base), workers=1, show_progress=False)
metrics = bw._metrics(base)
print("ready", flush=True)
sys.stdin.readline()  # "go"
cpu, start = time.process_time(), time.perf_counter()
if mode == "async":
    result = asyncio.run(aevaluate(rows, metrics, max_concurrency=int(slots), show_progress=False))
else:
    result = evaluate(rows, metrics, max_concurrency=int(slots), workers=1, show_progress=False)
wall = time.perf_counter() - start
failed = sum(s.failed for s in result.aggregates.values())
print(json.dumps({{"end": time.time(), "wall": wall, "cpu": time.process_time() - cpu,
                  "failed": failed}}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--async", dest="mode", action="store_const", const="async")
    args = parser.parse_args()
    mode = args.mode or "thread"
    from _fast_judge import FastJudge
    from make_dataset import build

    print(f"command: python bench/independent_halves.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"load average before {os.getloadavg()[0]:.1f}")
    rows = build(args.samples + 4, seed=21)
    with tempfile.TemporaryDirectory() as tmp, FastJudge(latency=0.05) as judge:
        dataset = Path(tmp) / "rows.json"
        dataset.write_text(json.dumps({"rows": rows[: args.samples], "warm": rows[args.samples :]}))
        driver = Path(tmp) / "driver.py"
        driver.write_text(DRIVER.format(bench=str(BENCH), repo=str(REPO)))

        def run(parts: int) -> tuple[float, list[float]]:
            slots = CONCURRENCY // parts
            base = [sys.executable, str(driver), judge.base_url, str(dataset), mode]
            commands = [[*base, str(p), str(parts), str(slots)] for p in range(parts)]
            procs = [
                subprocess.Popen(c, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for c in commands
            ]
            for proc in procs:  # every process imported and warmed up
                ready = proc.stdout.readline() if proc.stdout is not None else ""
                if ready.strip() != "ready":
                    for other in procs:
                        other.kill()
                    msg = f"a process did not get ready (exit {proc.wait()}): {ready!r}"
                    raise RuntimeError(msg)
            go = time.time()
            for proc in procs:
                proc.stdin.write("go\n")  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
            outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
            if any(o["failed"] for o in outs):
                msg = f"jobs failed: {[o['failed'] for o in outs]}"
                raise RuntimeError(msg)
            return max(o["end"] for o in outs) - go, [o["cpu"] / o["wall"] for o in outs]

        run(1)  # untimed: fills the judge's memo
        walls: dict[int, list[float]] = {1: [], 2: []}
        print("| round | processes | wall s | each process busy |")
        print("|---|---|---|---|")
        for r in range(args.rounds):
            for parts in (1, 2) if r % 2 == 0 else (2, 1):
                wall, busy = run(parts)
                walls[parts].append(wall)
                shares = ", ".join(f"{b:.2f}" for b in busy)
                print(f"| {r + 1} | {parts} | {wall:.2f} | {shares} |", flush=True)
    one, two = statistics.median(walls[1]), statistics.median(walls[2])
    ratios = ", ".join(f"{a / b:.2f}" for a, b in zip(walls[1], walls[2], strict=True))
    print(
        f"{mode}: 1 process {one:.2f} s, 2 independent halves {two:.2f} s: "
        f"{one / two:.2f}x (rounds {ratios}); {args.samples} samples x 4 metrics, "
        f"{CONCURRENCY} slots in total, 50 ms judge"
    )
    print(f"load average after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
