"""Benchmark - more processes: ``evaluate(workers=1)`` vs ``workers=2``, and Ray vs ``evaluate()``.

The loopback judge (lexical verdicts, fixed latency) runs in this process; every measured run
is a fresh child process (``--driver``) that scores the same distinct samples with
ContextRecall and ContextPrecision at 64 concurrent jobs in total, and prints its wall time,
the CPU time of itself and its children, and what failed. Configurations alternate within
each repeat so a busy machine slows them alike; the load average is printed with the figures.

* ``evaluate`` with ``workers=1`` (one interpreter) and ``workers=2`` (two spawned processes,
  32 jobs each; their start-up is inside the timed call, as a user pays it);
* ``ray``: ``evaluate_ray`` on a local Ray (``num_cpus=2``, no dashboard) with 2 actors of 32
  jobs; ``ray.init`` is not timed, the actors' start-up is. Needs ``--ray-python`` (an
  interpreter with the ``[ray]`` extra).

Target (issue 18): 2 processes score >= 1.8x what one does at 64 concurrent jobs on 2 cores.

Usage: ``python bench/bench_workers.py [--samples N] [--latency S] [--repeats N]
[--ray-python /work/venv-ray/bin/python]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

METRICS = ["context_recall", "context_precision"]
CONCURRENCY = 64
TARGET = 1.8


def build_rows(samples: int) -> list[dict[str, Any]]:
    """Distinct samples (no two share a text, so no cache or memo can hit)."""
    return [
        {
            "row": i + 1,
            "question": f"Which lab built prototype {i} of the device?",
            "contexts": [
                f"Prototype {i} of the device was built in lab {i % 7} during week {i}.",
                f"The cafeteria of building {i % 5} serves soup number {i}.",
                f"Lab {i % 7} also tested variant {i}-b in week {i + 1}.",
            ],
            "reference": f"Prototype {i} was built in lab {i % 7}. It was tested in week {i}.",
        }
        for i in range(samples)
    ]


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def drive_evaluate(base_url: str, rows: list[dict[str, Any]], workers: int) -> dict[str, Any]:
    """One timed ``evaluate()`` (a 4-row warm-up first, untimed)."""
    from langchain_openai import ChatOpenAI

    from langchain_ragmetrics import evaluate

    llm = ChatOpenAI(model="bench", base_url=base_url, api_key="bench", max_retries=0)
    warm = [{**r, "question": "warm-up " + r["question"]} for r in rows[:4]]
    evaluate(warm, METRICS, llm=llm, show_progress=False)
    stamps: list[float] = []
    cpu, start = _cpu_s(), time.perf_counter()
    result = evaluate(
        rows,
        METRICS,
        llm=llm,
        max_concurrency=CONCURRENCY,
        workers=workers,
        show_progress=False,
        on_result=lambda *_: stamps.append(time.perf_counter()),
    )
    wall = time.perf_counter() - start
    failed = sum(s.failed for s in result.aggregates.values())
    # Steady rate: jobs finished between the first and the last result (start-up excluded).
    rate = (len(stamps) - 1) / (stamps[-1] - stamps[0])
    return {
        "wall_s": wall,
        "cpu_s": _cpu_s() - cpu,
        "failed": failed,
        "jobs": len(stamps),
        "steady_jobs_per_s": rate,
        "first_result_s": stamps[0] - start,
    }


def drive_ray(base_url: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One timed ``evaluate_ray`` on a local Ray (``ray.init`` untimed)."""
    import ray

    from langchain_ragmetrics.integrations.ray import evaluate_ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        start = time.perf_counter()
        out = evaluate_ray(
            ray.data.from_items(rows),
            METRICS,
            model="bench",
            base_url=base_url,
            api_key="bench",
            num_actors=2,
            max_concurrency=CONCURRENCY // 2,
        ).take_all()
        wall = time.perf_counter() - start
    finally:
        ray.shutdown()
    failed = sum(r[f"{m}_status"] == "failed" for r in out for m in METRICS)
    return {
        "wall_s": wall,
        "cpu_s": None,
        "failed": failed,
        "jobs": len(out) * 2,
        "steady_jobs_per_s": None,
        "first_result_s": None,
    }


def run_child(python: str, mode: str, base_url: str, dataset: Path) -> dict[str, Any]:
    cmd = [python, __file__, "--driver", mode, "--base-url", base_url, "--dataset", str(dataset)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        msg = f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}"
        raise RuntimeError(msg)
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ray-python", default=None)
    parser.add_argument("--driver", choices=["workers1", "workers2", "ray"], default=None)
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--dataset", type=Path, default=None)
    args = parser.parse_args()
    if args.driver is not None:
        rows = json.loads(args.dataset.read_text(encoding="utf-8"))
        if args.driver == "ray":
            report = drive_ray(args.base_url, rows)
        else:
            report = drive_evaluate(args.base_url, rows, workers=int(args.driver[-1]))
        print(json.dumps(report))
        return

    from tests._support.lexical_judge import lexical_judge
    from tests._support.openai_server import JudgeServer

    configs = [("workers1", sys.executable), ("workers2", sys.executable)]
    if args.ray_python:
        configs.append(("ray", args.ray_python))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in configs}
    load_before = os.getloadavg()
    with (
        tempfile.TemporaryDirectory() as tmp,
        JudgeServer(lexical_judge(), latency=args.latency) as server,
    ):
        dataset = Path(tmp) / "rows.json"
        dataset.write_text(json.dumps(build_rows(args.samples)), encoding="utf-8")
        for _ in range(args.repeats):
            for name, python in configs:
                runs[name].append(run_child(python, name, server.base_url, dataset))
    load_after = os.getloadavg()
    jobs = args.samples * len(METRICS)
    ideal = jobs * args.latency / CONCURRENCY
    print(f"command: python bench/bench_workers.py {' '.join(sys.argv[1:])}")
    print(
        f"{args.samples} distinct samples x {len(METRICS)} metrics = {jobs} jobs, judge latency "
        f"{args.latency * 1000:.0f} ms, {CONCURRENCY} concurrent jobs in total, ideal "
        f"{ideal:.2f} s; {os.cpu_count()} cores; load average before {load_before[0]:.1f}, "
        f"after {load_after[0]:.1f}"
    )
    print(f"{'configuration':<28} {'wall s (median)':>16} {'range':>13} {'jobs/s':>8} "
          f"{'steady jobs/s':>13} {'1st result s':>12} {'CPU s':>7} {'failed':>6}")  # fmt: skip
    medians, steady = {}, {}
    for name, reports in runs.items():
        walls = [r["wall_s"] for r in reports]
        wall = medians[name] = statistics.median(walls)
        cpu = _median_of(reports, "cpu_s")
        rate = _median_of(reports, "steady_jobs_per_s")
        first = _median_of(reports, "first_result_s")
        steady[name] = rate
        label = {"workers1": "evaluate(workers=1)", "workers2": "evaluate(workers=2)"}.get(
            name, "evaluate_ray (2 actors x 32)"
        )
        print(
            f"{label:<28} {wall:>16.2f} {min(walls):>6.2f}-{max(walls):<6.2f} "
            f"{jobs / wall:>8.1f} {_fmt(rate, 1):>13} {_fmt(first, 2):>12} {_fmt(cpu, 2):>7} "
            f"{max(r['failed'] for r in reports):>6}"
        )
    speedup = medians["workers1"] / medians["workers2"]
    verdict = "met" if speedup >= TARGET else "MISSED"
    print(f"workers=2 vs workers=1, end to end: {speedup:.2f}x (target >= {TARGET}x: {verdict})")
    if steady["workers1"] and steady["workers2"]:
        ratio = steady["workers2"] / steady["workers1"]
        verdict = "met" if ratio >= TARGET else "MISSED"
        print(f"workers=2 vs workers=1, steady rate: {ratio:.2f}x (target >= {TARGET}x: {verdict})")
    if "ray" in medians:
        ray_ratio = medians["workers1"] / medians["ray"]
        print(f"ray vs evaluate(workers=1), end to end: {ray_ratio:.2f}x")


def _median_of(reports: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in reports if r.get(key) is not None]
    return statistics.median(values) if values else None


def _fmt(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


if __name__ == "__main__":
    main()
