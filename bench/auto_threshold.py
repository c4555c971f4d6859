"""From how many jobs a second process pays off: ``workers=1`` against ``workers=2``, by size.

``workers="auto"`` adds a process per ``AUTO_MIN_JOBS`` jobs. This measures where the
second process starts to pay, on the issue-18 check's shape (the 4 LLM-judged metrics, 16 at
a time, 100 ms judge: ``bench_workers.py``'s driver, memoising judge in its own process,
distinct generated samples per size), for each start method asked for (``fork``, which
Linux gets when the caller runs one thread, and ``spawn``, what any other caller gets).
Every run is a fresh process with an untimed warm-up; for each size and method the two
sides alternate over ``--repeats`` rounds. Printed: median wall time per side, the ratio
(workers=1 over workers=2: above 1 means the second process paid off) and its rounds.

Usage: ``python bench/auto_threshold.py [--samples 13,25,50,100] [--repeats 3]
[--methods fork,spawn]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]

METRICS = 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", default="13,25,50,100")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--methods", default="fork,spawn")
    args = parser.parse_args()
    import bench_workers as bw
    from _fast_judge import FastJudge
    from make_dataset import build

    print(f"command: python bench/auto_threshold.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"load average before {os.getloadavg()[0]:.1f}")
    print(
        "| start method | samples | jobs | workers=1 wall s | workers=2 wall s | ratio | rounds |"
    )
    print("|---|---|---|---|---|---|---|")
    sizes = [int(s) for s in args.samples.split(",")]
    with tempfile.TemporaryDirectory() as tmp, FastJudge(latency=bw.CHECK_LATENCY) as judge:
        for seed, samples in enumerate(sizes, start=100):
            rows = build(samples + 4, seed=seed)
            dataset = Path(tmp) / f"rows-{samples}.json"
            dataset.write_text(json.dumps({"rows": rows[:samples], "warm": rows[samples:]}))
            base = ["--kind", "check", "--base-url", judge.base_url, "--dataset", str(dataset)]
            bw.run_child(sys.executable, [*base, "--workers", "1"])  # untimed: fills the memo
            for method in args.methods.split(","):
                os.environ["RAGMETRICS_START_METHOD"] = method
                walls: dict[str, list[float]] = {"1": [], "2": []}
                for r in range(args.repeats):
                    for workers in ("1", "2") if r % 2 == 0 else ("2", "1"):
                        report = bw.run_child(sys.executable, [*base, "--workers", workers])
                        if report["failed"]:
                            msg = f"{report['failed']} jobs failed ({method}, {samples} samples)"
                            raise RuntimeError(msg)
                        walls[workers].append(report["wall_s"])
                one, two = statistics.median(walls["1"]), statistics.median(walls["2"])
                rounds = ", ".join(
                    f"{a / b:.2f}" for a, b in zip(walls["1"], walls["2"], strict=True)
                )
                print(
                    f"| {method} | {samples} | {samples * METRICS} | {one:.3f} | {two:.3f} "
                    f"| {one / two:.2f} | {rounds} |",
                    flush=True,
                )
    print(f"load average after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
