"""Benchmark 2 - offline throughput: evaluate() of 200 samples x 4 metrics, 16 at a time.

The judge answers every request after a fixed latency (100 ms). Each side runs in its own
process against the same judge: our ``evaluate(..., max_concurrency=16)`` and RAGAS 0.4.3's
``evaluate(..., run_config=RunConfig(max_workers=16))``. The 200 samples are distinct ones made
by ``make_dataset.build(200)`` (same templates as the shipped 50), so no text repeats and no
cache (ours memoises sentence segmentation per text) sees a text twice. Every run is a fresh
process that warms up on 4 samples of the shipped dataset (imports, first-use setup) and then
times one ``evaluate()`` call; we report the median over ``--repeats`` rounds.

The ideal bound of a side is its judge calls x latency / concurrency: the wall time of a run
that keeps all 16 slots busy with judge calls and spends nothing else. Efficiency = ideal / wall.
A third row, the floor, replays the exact request bodies of our last run (messages, tool
schema, tool choice) with the bare openai SDK on 16 threads and no framework: the same calls,
the best the loopback judge and the machine allow (it is below 100 % on a small machine).
Targets (issue 5): ours >= 90 % of ideal; ours >= 3x faster than RAGAS; our client CPU per judge
call <= 1.5x the floor's. The sides alternate run by run (ours, RAGAS, floor, ours, ...) in one
session, and the ratios are taken per round, side by side.

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
CPU_TARGET = 1.5


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
    """Rounds of one run per side (ours, RAGAS, floor), each a fresh process, and summarise.

    The sides alternate run by run in one session (round 1: ours, RAGAS, floor; round 2: ...),
    so a change in the machine's load hits every side alike; per-round ratios (RAGAS wall / our
    wall, our CPU per call / the floor's) are reported beside the medians.
    """
    dataset = distinct_dataset(out, samples)
    bodies = out / f"bodies-{samples}.json"
    judge = BenchJudge()
    runs = [("ours", sys.executable, "_ours_driver.py")]
    if ragas:
        runs.append(("ragas", str(ensure_ragas_venv()), "_ragas_driver.py"))
    reports: dict[str, list[dict[str, Any]]] = {side: [] for side, _, _ in runs}
    reports["floor"] = []
    calls_by_metric: dict[str, dict[str, list[int]]] = {side: {} for side, _, _ in runs}
    with JudgeServer(judge, latency=latency) as server:
        for _ in range(repeats):
            for side, python, script in runs:
                judge.reset()
                server.reset()
                reports[side].append(throughput_run(python, script, server.base_url, dataset))
                for metric, t in judge.tally().get(side, {}).items():
                    calls_by_metric[side].setdefault(metric, []).append(t["calls"])
                if side == "ours":  # what the floor replays, in this same round
                    sent = [
                        r.body for r in server.requests if r.headers.get("x-bench-side") == side
                    ]
                    bodies.write_text(json.dumps(sent), encoding="utf-8")
            reports["floor"].append(
                run_driver(
                    sys.executable,
                    "_ours_driver.py",
                    "floor",
                    "--base-url",
                    server.base_url,
                    "--bodies",
                    str(bodies),
                    "--concurrency",
                    str(CONCURRENCY),
                )
            )
    sides: dict[str, Any] = {}
    for side, side_reports in reports.items():
        if side == "floor":
            per_run_calls = [f["calls"] for f in side_reports]
        else:
            per_run_calls = [sum(c) for c in zip(*calls_by_metric[side].values(), strict=True)]
        calls = median(per_run_calls)
        walls = [r["wall_s"] for r in side_reports]
        cpus = [r["cpu_s"] for r in side_reports]
        ideal = calls * latency / CONCURRENCY
        sides[side] = {
            "walls_s": walls,
            "median_wall_s": median(walls),
            "cpu_s": cpus,
            "cpu_ms_per_call_runs": [
                c / n * 1000 for c, n in zip(cpus, per_run_calls, strict=True)
            ],
            "cpu_ms_per_call": median(cpus) / calls * 1000 if calls else None,
            "calls_per_run": calls,
            "ideal_s": ideal,
            "efficiency": ratio(ideal, median(walls)),
        }
        if side != "floor":
            sides[side]["calls_by_metric"] = {
                m: median(c) for m, c in calls_by_metric[side].items()
            }
            sides[side]["scores"] = side_reports[-1]["scores"]
    ours, floor = sides["ours"], sides["floor"]
    paired: dict[str, Any] = {
        "cpu_per_call_vs_floor": [
            ratio(o, f)
            for o, f in zip(
                ours["cpu_ms_per_call_runs"], floor["cpu_ms_per_call_runs"], strict=True
            )
        ]
    }
    if "ragas" in sides:
        paired["speedup_vs_ragas"] = [
            ratio(r, o) for r, o in zip(sides["ragas"]["walls_s"], ours["walls_s"], strict=True)
        ]
        paired["cpu_per_call_vs_ragas"] = [
            ratio(o, r)
            for o, r in zip(
                ours["cpu_ms_per_call_runs"], sides["ragas"]["cpu_ms_per_call_runs"], strict=True
            )
        ]
    return {
        "samples": samples,
        "concurrency": CONCURRENCY,
        "latency_s": latency,
        "rounds": repeats,
        "sides": sides,
        "paired": paired,
    }


def _listed(values: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in values)


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


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
    rounds = result.get("rounds", len(sides["ours"]["walls_s"]))
    parts = [
        f"{result['samples']} distinct samples x 4 metrics, concurrency {result['concurrency']}, "
        f"judge latency {result['latency_s'] * 1000:.0f} ms. {rounds} rounds; in each round "
        "every side runs once, in turn, each in a fresh process (the sides alternate run by run "
        "in one session); medians over rounds.",
        table(headers, rows),
    ]
    ours = sides["ours"]
    paired = result.get("paired", {})
    verdicts = [
        f"Efficiency target >= {EFFICIENCY_TARGET:.0%} of ideal: {ours['efficiency']:.0%} "
        f"({'met' if ours['efficiency'] >= EFFICIENCY_TARGET else 'MISSED'})."
    ]
    if paired.get("speedup_vs_ragas"):
        speedup = median(paired["speedup_vs_ragas"])
        verdicts.append(
            f"Speed-up target >= {SPEEDUP_TARGET:.0f}x RAGAS (median of the per-round ratios "
            f"{_listed(paired['speedup_vs_ragas'])}): {speedup:.2f}x "
            f"({_verdict(speedup >= SPEEDUP_TARGET)}); our CPU per judge call is "
            f"{median(paired['cpu_per_call_vs_ragas']):.2f}x RAGAS's."
        )
    elif "ragas" not in sides:
        verdicts.append("RAGAS was not run (--no-ragas): no speed-up figure.")
    if paired.get("cpu_per_call_vs_floor"):
        cpu = median(paired["cpu_per_call_vs_floor"])
        verdicts.append(
            f"Client CPU per call <= {CPU_TARGET}x the bare SDK's (per-round ratios "
            f"{_listed(paired['cpu_per_call_vs_floor'])}): {cpu:.2f}x "
            f"({_verdict(cpu <= CPU_TARGET)})."
        )
    parts.append(" ".join(verdicts))
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
