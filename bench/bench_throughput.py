"""Benchmark 2 - offline throughput: evaluate() of 200 samples x 4 metrics, 16 at a time.

The judge answers every request after a fixed latency (100 ms). It is ``FastJudge``
(``bench/_fast_judge.py``): ``BenchJudge``'s answers from an asyncio server in a process of its
own, memoised by request body, so that the judge's own CPU (on the same two cores) stays a
fraction of the clients'. Ours and RAGAS first run once untimed with the same data (the fill
round: it puts every answer in the memo; ours workers=1 and the floor send the very bodies
ours sends, so ours' fill covers them), so every timed request is a memo hit; the table
reports the judge's misses in the timed runs (0 expected, else said) and its CPU per request.

Four sides, each run in its own fresh process against the same judge:

* ours: ``evaluate(..., max_concurrency=16)`` with its default ``workers="auto"`` (on 800
  jobs at concurrency 16 on 2 cores: the caller plus one worker process). Its CPU counts every
  process of ours: ``getrusage(RUSAGE_SELF)`` + ``getrusage(RUSAGE_CHILDREN)`` of the driver
  around the timed call (the workers are reaped before ``evaluate()`` returns), worker start-up
  included. Its wall time gives the ">= 90 % of ideal" and the speed-up figures.
* ours, workers=1: the same call in one process; its CPU per judge call is the one compared
  with the floor's and with RAGAS's (both single-process).
* RAGAS 0.4.3's ``evaluate(..., run_config=RunConfig(max_workers=16))`` (its CPU:
  ``time.process_time()``, one process).
* the floor: the exact request bodies of our run of the same round (messages, tool schema,
  tool choice) replayed with the bare openai SDK on 16 threads and no framework: the same
  calls, the best the judge and the machine allow (``time.process_time()``).

The 200 samples are distinct ones made by ``make_dataset.build(200)`` (same templates as the
shipped 50), so no text repeats and no cache of ours (sentence segmentation per text) sees a
text twice within a run. Every run warms up on 4 samples of the shipped dataset (imports,
first-use setup; one process) and then times one call; judge calls are counted per side from
the judge's tally of the ``x-bench-side`` header. The ideal bound of a side is its judge calls
x latency / concurrency: the wall time of a run that keeps all 16 slots busy with judge calls
and spends nothing else; efficiency = ideal / wall.

Targets (issue 18): ours (default) >= 90 % of ideal and >= 3x faster than RAGAS; client CPU
per judge call of ours, workers=1 <= 1.5x the floor's and below RAGAS's. The sides alternate
run by run (ours, ours workers=1, RAGAS, floor, ours, ...) in one session, and the ratios are
taken per round, side by side.

Usage: ``python bench/bench_throughput.py [--tiny] [--no-ragas] [--repeats N] [--out DIR]``
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
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
from _fast_judge import FastJudge
from make_dataset import build

SAMPLES = 200
CONCURRENCY = 16
LATENCY = 0.100
REPEATS = 3
EFFICIENCY_TARGET = 0.90
SPEEDUP_TARGET = 3.0
CPU_TARGET = 1.5
OURS, OURS_W1, RAGAS, FLOOR = "ours", "ours_w1", "ragas", "floor"
HEADER_SIDE = {OURS: "ours", OURS_W1: "ours", RAGAS: "ragas", FLOOR: "floor"}
"""The ``x-bench-side`` header each side's timed requests carry (the drivers set it)."""


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


def floor_run(base_url: str, bodies: Path) -> dict[str, Any]:
    """The bare SDK replaying ``bodies`` in a fresh process (a warm-up on 16 of them first)."""
    args = ["--base-url", base_url, "--bodies", str(bodies), "--concurrency", str(CONCURRENCY)]
    return run_driver(sys.executable, "_ours_driver.py", "floor", *args)


def measure(
    *, samples: int, latency: float, repeats: int, ragas: bool, out: Path
) -> dict[str, Any]:
    """A fill round, then rounds of one run per side, each a fresh process; summarise.

    The sides alternate run by run in one session (round 1: ours, ours workers=1, RAGAS,
    floor; round 2: ...), so a change in the machine's load hits every side alike; per-round
    ratios are reported beside the medians. Before each run the judge's tally is reset; after
    it, the tally gives the side's judge calls (and memo misses) and the judge's CPU counter
    gives its CPU per request (the run's warm-up requests included, all memo hits too).
    """
    dataset = distinct_dataset(out, samples)
    bodies = out / f"bodies-{samples}.json"
    python = sys.executable
    runs: dict[str, Callable[[str], dict[str, Any]]] = {
        OURS: lambda url: throughput_run(python, "_ours_driver.py", url, dataset),
        OURS_W1: lambda url: throughput_run(
            python, "_ours_driver.py", url, dataset, "--workers", "1"
        ),
    }
    if ragas:
        ragas_python = str(ensure_ragas_venv())
        runs[RAGAS] = lambda url: throughput_run(ragas_python, "_ragas_driver.py", url, dataset)
    runs[FLOOR] = lambda url: floor_run(url, bodies)
    reports: dict[str, list[dict[str, Any]]] = {side: [] for side in runs}
    judged: dict[str, list[dict[str, Any]]] = {side: [] for side in runs}

    with FastJudge(latency=latency) as judge:

        def one(side: str) -> tuple[dict[str, Any], dict[str, Any]]:
            judge.reset()
            before = judge.stats()
            report = runs[side](judge.base_url)
            after = judge.stats()
            if side == OURS:  # what the floor replays, in this same round
                sent = judge.bodies(HEADER_SIDE[OURS])
                bodies.write_text(json.dumps(sent), encoding="utf-8")
            timed = after["tally"].get(HEADER_SIDE[side], {})
            requests = after["requests"] - before["requests"]
            cpu = after["cpu_s"] - before["cpu_s"]
            judge_run = {
                "calls": sum(t["calls"] for t in timed.values()),
                "calls_by_metric": {m: t["calls"] for m, t in timed.items()},
                "timed_misses": sum(t["misses"] for t in timed.values()),
                "timed_misses_by_metric": {m: t["misses"] for m, t in timed.items() if t["misses"]},
                "requests": requests,  # warm-up included
                "misses": after["misses"] - before["misses"],
                "cpu_ms_per_request": cpu / requests * 1000 if requests else None,
                "peak_in_flight": after.get("peak_in_flight", {}).get(HEADER_SIDE[side], 0),
            }
            return report, judge_run

        # The fill round, untimed: it puts every answer in the memo. Ours workers=1 and the
        # floor send the very bodies ours sends (the misses column checks it).
        for side in runs:
            if side in (OURS, RAGAS):
                one(side)
        for _ in range(repeats):
            for side in runs:
                report, judge_run = one(side)
                reports[side].append(report)
                judged[side].append(judge_run)

    sides: dict[str, Any] = {}
    for side, side_reports in reports.items():
        per_run_calls = [j["calls"] for j in judged[side]]
        calls = median(per_run_calls)
        walls = [r["wall_s"] for r in side_reports]
        cpus = [r["cpu_s"] for r in side_reports]
        ideal = calls * latency / CONCURRENCY
        judge_cpu = [
            j["cpu_ms_per_request"] for j in judged[side] if j["cpu_ms_per_request"] is not None
        ]
        sides[side] = {
            "walls_s": walls,
            "median_wall_s": median(walls),
            "cpu_s": cpus,
            "cpu_ms_per_call_runs": [
                c / n * 1000 for c, n in zip(cpus, per_run_calls, strict=True)
            ],
            "cpu_ms_per_call": median(cpus) / calls * 1000 if calls else None,
            "calls_per_run": calls,
            "calls_per_run_runs": per_run_calls,
            "ideal_s": ideal,
            "efficiency": ratio(ideal, median(walls)),
            "judge_timed_misses": sum(j["timed_misses"] for j in judged[side]),
            "judge_timed_misses_runs": [j["timed_misses_by_metric"] for j in judged[side]],
            "judge_misses": sum(j["misses"] for j in judged[side]),
            "judge_cpu_ms_per_request": median(judge_cpu) if judge_cpu else None,
            "peak_in_flight": max(j["peak_in_flight"] for j in judged[side]),
        }
        if side != FLOOR:
            by_metric: dict[str, list[int]] = {}
            for j in judged[side]:
                for metric, n in j["calls_by_metric"].items():
                    by_metric.setdefault(metric, []).append(n)
            sides[side]["calls_by_metric"] = {m: median(c) for m, c in by_metric.items()}
            sides[side]["scores"] = side_reports[-1]["scores"]
        if side in (OURS, OURS_W1):
            sides[side]["processes"] = side_reports[-1]["processes"]
            sides[side]["workers_cpu_s"] = [r.get("workers_cpu_s") for r in side_reports]
    ours, single, floor = sides[OURS], sides[OURS_W1], sides[FLOOR]
    paired: dict[str, Any] = {
        "cpu_per_call_vs_floor": [
            ratio(o, f)
            for o, f in zip(
                single["cpu_ms_per_call_runs"], floor["cpu_ms_per_call_runs"], strict=True
            )
        ]
    }
    if RAGAS in sides:
        paired["speedup_vs_ragas"] = [
            ratio(r, o) for r, o in zip(sides[RAGAS]["walls_s"], ours["walls_s"], strict=True)
        ]
        paired["cpu_per_call_vs_ragas"] = [
            ratio(o, r)
            for o, r in zip(
                single["cpu_ms_per_call_runs"], sides[RAGAS]["cpu_ms_per_call_runs"], strict=True
            )
        ]
    return {
        "samples": samples,
        "concurrency": CONCURRENCY,
        "latency_s": latency,
        "rounds": repeats,
        "judge": "FastJudge",
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
        OURS: "langchain-ragmetrics (default: workers auto, {processes} processes)",
        OURS_W1: "langchain-ragmetrics, workers=1 (one process)",
        RAGAS: "RAGAS 0.4.3",
        FLOOR: "floor: bare openai SDK, same calls",
    }
    rows = [
        [
            names[side].format(processes=s.get("processes", "?")),
            s["calls_per_run"],
            s["median_wall_s"],
            f"{min(s['walls_s']):.2f}-{max(s['walls_s']):.2f}",
            s["ideal_s"],
            f"{s['efficiency']:.0%}",
            median(s["cpu_s"]),
            s["cpu_ms_per_call"],
            s["judge_cpu_ms_per_request"],
            s["judge_timed_misses"],
            s.get("peak_in_flight", "n/a"),
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
        "judge CPU ms / request",
        "judge memo misses",
        "judge requests at once (peak)",
    ]
    rounds = result["rounds"]
    parts = [
        f"{result['samples']} distinct samples x 4 metrics, concurrency {result['concurrency']}, "
        f"judge latency {result['latency_s'] * 1000:.0f} ms (FastJudge: a memoising asyncio "
        "judge in its own process; an untimed fill round first - ours and RAGAS; ours workers=1 "
        "and the floor send the same bodies as ours - so every timed request is a memo hit). "
        f"{rounds} round{'s' if rounds != 1 else ''}; in each round every side runs once, in turn "
        "(ours, ours workers=1, RAGAS, floor), each in a fresh process; medians over rounds. "
        "Client CPU of the default side: getrusage(RUSAGE_SELF) + getrusage(RUSAGE_CHILDREN) "
        "around the timed evaluate() (the caller and its worker processes, reaped before it "
        "returns; worker start-up included); of the others: the one process's CPU time. "
        "Judge calls per side are counted by the judge (x-bench-side header); judge memo "
        "misses are those of the timed runs, summed over the rounds. Requests at once: the "
        "most a side had waiting for the judge's answer at one time, over its timed runs "
        "(counted by the judge), so a side that sends more than the concurrency asked for "
        "shows it.",
        table(headers, rows),
    ]
    misses = {side: s["judge_timed_misses"] for side, s in sides.items()}
    ours, single = sides[OURS], sides[OURS_W1]
    paired = result["paired"]
    verdicts = [
        f"Efficiency target >= {EFFICIENCY_TARGET:.0%} of ideal (default side): "
        f"{ours['efficiency']:.0%} ({_verdict(ours['efficiency'] >= EFFICIENCY_TARGET)})."
    ]
    if paired.get("cpu_per_call_vs_floor"):
        cpu = median(paired["cpu_per_call_vs_floor"])
        verdicts.append(
            f"Client CPU per call <= {CPU_TARGET}x the bare SDK's (workers=1 side; per-round "
            f"ratios {_listed(paired['cpu_per_call_vs_floor'])}): {cpu:.2f}x "
            f"({_verdict(cpu <= CPU_TARGET)})."
        )
    if paired.get("speedup_vs_ragas"):
        cpu_vs_ragas = median(paired["cpu_per_call_vs_ragas"])
        verdicts.append(
            f"Client CPU per call below RAGAS's per request (workers=1 side; per-round ratios "
            f"{_listed(paired['cpu_per_call_vs_ragas'])}): {cpu_vs_ragas:.2f}x "
            f"({single['cpu_ms_per_call']:.2f} vs {sides[RAGAS]['cpu_ms_per_call']:.2f} ms; "
            f"{_verdict(cpu_vs_ragas < 1)})."
        )
        speedup = median(paired["speedup_vs_ragas"])
        verdicts.append(
            f"Speed-up target >= {SPEEDUP_TARGET:.0f}x RAGAS (default side; per-round ratios "
            f"{_listed(paired['speedup_vs_ragas'])}): {speedup:.2f}x "
            f"({_verdict(speedup >= SPEEDUP_TARGET)})."
        )
    else:
        verdicts.append("RAGAS was not run (--no-ragas): no speed-up or CPU-vs-RAGAS figure.")
    above = {
        side: s["peak_in_flight"]
        for side, s in sides.items()
        if s.get("peak_in_flight", 0) > result["concurrency"]
    }
    if above:
        verdicts.append(
            f"Sides that sent more than {result['concurrency']} requests at once: "
            + ", ".join(f"{side} {n}" for side, n in above.items())
            + " (their efficiency is measured against an ideal they did not keep to)."
        )
    elif all("peak_in_flight" in s for s in sides.values()):
        verdicts.append(
            f"Every side kept to {result['concurrency']} judge requests at once (peaks: "
            + ", ".join(f"{side} {s['peak_in_flight']}" for side, s in sides.items())
            + ")."
        )
    if any(misses.values()):
        missed = ", ".join(f"{side} {n}" for side, n in misses.items() if n)
        verdicts.append(
            f"The judge missed its memo in the timed runs ({missed}): those answers were "
            "worked out on the judge's side while the client was timed."
        )
    else:
        verdicts.append("Every timed judge request was a memo hit (0 misses).")
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
