"""Benchmark 2 - offline throughput: evaluate() of 200 samples x 4 metrics, 16 at a time.

The judge answers every request after a fixed latency (100 ms). Each side runs in its own
process against the same judge: our ``evaluate(..., max_concurrency=16)`` and RAGAS 0.4.3's
``evaluate(..., run_config=RunConfig(max_workers=16))``. The 200 samples are distinct ones made
by ``make_dataset.build(200)`` (same templates as the shipped 50), so no text repeats and no
cache (ours memoises sentence segmentation per text) sees a text twice. Every run is a fresh
process that warms up on 4 samples of the shipped dataset (imports, first-use setup) and then
times one ``evaluate()`` call; we report the median over ``--repeats`` runs.

The ideal bound of a side is its judge calls x latency / concurrency: the wall time of a run
that keeps all 16 slots busy with judge calls and spends nothing else. Efficiency = ideal / wall.
A third row, the floor, replays the exact request bodies of our last run (messages, tool
schema, tool choice) with the bare openai SDK on 16 threads and no framework: the same calls,
the best the loopback judge and the machine allow (it is below 100 % on a small machine).
Targets (issue 5): ours >= 90 % of ideal; ours >= 3x faster than RAGAS.

Usage: ``python bench/bench_throughput.py [--tiny] [--no-ragas] [--repeats N] [--out DIR]``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from _common import (
    base_parser,
    ensure_ragas_venv,
    median,
    publish,
    ratio,
    run_driver,
    table,
)
from _judge import BenchJudge
from make_dataset import build

from tests._support.openai_server import JudgeServer

SAMPLES = 200
CONCURRENCY = 16
LATENCY = 0.100
REPEATS = 3
EFFICIENCY_TARGET = 0.90
SPEEDUP_TARGET = 3.0


def distinct_dataset(out: Path, samples: int) -> Path:
    """Write ``samples`` distinct generated samples (no sample repeats, so no cache hits)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"dataset-{samples}.json"
    path.write_text(json.dumps(build(samples), ensure_ascii=False), encoding="utf-8")
    return path


def throughput_run(
    python: str, script: str, base_url: str, dataset: Path, *extra: str
) -> dict[str, Any]:
    """One timed ``evaluate()`` in a fresh driver process (warm-up included, not timed)."""
    args = ["--base-url", base_url, "--dataset", str(dataset), "--concurrency", str(CONCURRENCY)]
    return run_driver(python, script, "throughput", *args, *extra)


def measure(
    *, samples: int, latency: float, repeats: int, ragas: bool, out: Path
) -> dict[str, Any]:
    """Run each side's driver ``repeats`` times (fresh processes) and summarise."""
    dataset = distinct_dataset(out, samples)
    judge = BenchJudge()
    sides: dict[str, Any] = {}
    runs = [("ours", sys.executable, "_ours_driver.py")]
    if ragas:
        runs.append(("ragas", str(ensure_ragas_venv()), "_ragas_driver.py"))
    with JudgeServer(judge, latency=latency) as server:
        for side, python, script in runs:
            reports, calls_by_metric = [], {}
            for _ in range(repeats):
                judge.reset()
                server.reset()
                bodies = out / f"bodies-{samples}.json"
                reports.append(throughput_run(python, script, server.base_url, dataset))
                for metric, t in judge.tally().get(side, {}).items():
                    calls_by_metric.setdefault(metric, []).append(t["calls"])
                if side == "ours":  # what the floor replays
                    sent = [
                        r.body for r in server.requests if r.headers.get("x-bench-side") == side
                    ]
                    bodies.write_text(json.dumps(sent), encoding="utf-8")
            calls = median([sum(c) for c in zip(*calls_by_metric.values(), strict=True)])
            walls = [r["wall_s"] for r in reports]
            cpus = [r["cpu_s"] for r in reports]
            ideal = calls * latency / CONCURRENCY
            sides[side] = {
                "walls_s": walls,
                "median_wall_s": median(walls),
                "cpu_s": cpus,
                "cpu_ms_per_call": median(cpus) / calls * 1000 if calls else None,
                "calls_per_run": calls,
                "calls_by_metric": {m: median(c) for m, c in calls_by_metric.items()},
                "ideal_s": ideal,
                "efficiency": ratio(ideal, median(walls)),
                "scores": reports[-1]["scores"],
            }
        floors = [
            run_driver(
                sys.executable,
                "_ours_driver.py",
                "floor",
                "--base-url",
                server.base_url,
                "--bodies",
                str(out / f"bodies-{samples}.json"),
                "--concurrency",
                str(CONCURRENCY),
            )
            for _ in range(repeats)
        ]
    walls = [f["wall_s"] for f in floors]
    calls = floors[0]["calls"]
    sides["floor"] = {
        "walls_s": walls,
        "median_wall_s": median(walls),
        "cpu_s": [f["cpu_s"] for f in floors],
        "cpu_ms_per_call": median([f["cpu_s"] for f in floors]) / calls * 1000,
        "calls_per_run": calls,
        "ideal_s": calls * latency / CONCURRENCY,
        "efficiency": ratio(calls * latency / CONCURRENCY, median(walls)),
    }
    return {"samples": samples, "concurrency": CONCURRENCY, "latency_s": latency, "sides": sides}


def render(result: dict[str, Any]) -> str:
    """Markdown table and the verdict on the targets."""
    sides = result["sides"]
    names = {
        "ours": "langchain-ragmetrics",
        "ragas": "RAGAS 0.4.3",
        "floor": "floor: bare openai SDK, same calls",
    }
    rows = [
        [
            names[side],
            s["calls_per_run"],
            s["median_wall_s"],
            f"{min(s['walls_s']):.2f}-{max(s['walls_s']):.2f}",
            s["ideal_s"],
            f"{s['efficiency']:.0%}",
            median(s["cpu_s"]),
            s["cpu_ms_per_call"],
        ]
        for side, s in sides.items()
    ]
    headers = [
        "side",
        "judge calls",
        "wall s (median)",
        "range",
        "ideal s",
        "efficiency",
        "client CPU s",
        "client CPU ms / call",
    ]
    parts = [
        f"{result['samples']} samples x 4 metrics, concurrency {result['concurrency']}, "
        f"judge latency {result['latency_s'] * 1000:.0f} ms, {len(sides['ours']['walls_s'])} runs "
        "per side.",
        table(headers, rows),
    ]
    ours = sides["ours"]
    verdict = (
        f"Efficiency target >= {EFFICIENCY_TARGET:.0%}: {ours['efficiency']:.0%} "
        f"({'met' if ours['efficiency'] >= EFFICIENCY_TARGET else 'MISSED'})."
    )
    if "ragas" in sides:
        speedup = ratio(sides["ragas"]["median_wall_s"], ours["median_wall_s"])
        verdict += (
            f" Speed-up target >= {SPEEDUP_TARGET:.0f}x: {speedup:.2f}x "
            f"({'met' if speedup >= SPEEDUP_TARGET else 'MISSED'})."
        )
    parts.append(verdict)
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    samples, latency = (12, 0.01) if args.tiny else (SAMPLES, LATENCY)
    repeats = args.repeats or (1 if args.tiny else REPEATS)
    result = measure(
        samples=samples, latency=latency, repeats=repeats, ragas=not args.no_ragas, out=args.out
    )
    text = render(result)
    publish(args.out, "throughput", "Offline throughput", text, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
