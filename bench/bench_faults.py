"""Benchmark 6 - retries under faults: evaluate() with 30 % judge faults vs none.

``evaluate()`` of 300 distinct samples x 2 metrics (ContextRecall, ContextPrecision),
concurrency 16, the default ``RetryPolicy``, against the loopback judge answering after 100 ms.
In the faulty runs each request independently fails with probability 0.3 (seeded), after the
same 100 ms as an answer (a fault costs the judge's time, as a slow 500 does):

* ``mixed`` (issue 18's mix): a third HTTP 500, a third HTTP 429 with ``Retry-After: 1``, a
  third malformed answers (tool-call arguments that are not JSON, retried at once by
  ``parse_retries``);
* ``transient``: half HTTP 500, half HTTP 429 with ``Retry-After: 1`` (every fault waits out a
  backoff: the harder case).

The configurations alternate in one session, each run a fresh process
(``_ours_driver.py throughput``), so the ratios compare like with like on a noisy machine.
From the judge's request log, each run also gives its timeline: when the last job not started
yet sent its first request, how long the *tail* after it lasted (only retries left) and how
many of the 16 slots were busy in it on average.

What it shows: a job sleeping out a backoff gives its slot back, so the other jobs keep the
judge busy; what faults still cost is the client CPU of the extra requests (until the last new
job starts the run is CPU-bound) plus the tail of the last jobs' retry chains (two 429s in a
row are 2 s of ``Retry-After`` no client may shorten).
Target (issue 18): with faults <= 1.5x the fault-free wall time.

Usage: ``python bench/bench_faults.py [--tiny] [--repeats N] [--out DIR]`` (``--no-ragas`` is
accepted and changes nothing: there is no RAGAS side).
"""

from __future__ import annotations

import math
import random
import sys
import threading
from typing import Any

from _common import base_parser, median, publish, ratio, table
from _judge import BenchJudge
from bench_throughput import CONCURRENCY, distinct_dataset, throughput_run

from tests._support.openai_server import (
    JudgeRequest,
    JudgeServer,
    reply_error,
    reply_garbage,
)

SAMPLES = 300
METRICS = "context_recall,context_precision"
LATENCY = 0.100
FAULT_RATE = 0.30
REPEATS = 3
TARGET = 1.5
RETRY_AFTER = {"Retry-After": "1"}
SCENARIOS: tuple[tuple[str, float, tuple[str, ...]], ...] = (
    ("none", 0.0, ()),
    ("mixed", FAULT_RATE, ("500", "429", "malformed")),
    ("transient", FAULT_RATE, ("500", "429")),
)
LABELS = {
    "none": "none",
    "mixed": "30 %: 500 / 429 (Retry-After: 1) / malformed",
    "transient": "30 %: 500 / 429 (Retry-After: 1)",
}


class FaultyJudge:
    """The benchmark judge, failing each request with probability ``rate`` (seeded).

    A fault is one of ``kinds`` with equal odds: ``500``, ``429`` (with ``hint`` as headers)
    or ``malformed`` (a 200 whose tool-call arguments are not JSON). Every answer, fault or
    not, comes after the server's latency.
    """

    def __init__(self, judge: BenchJudge, *, seed: int = 7) -> None:
        self.judge = judge
        self.rate = 0.0
        self.kinds: tuple[str, ...] = ("500", "429")
        self.hint: dict[str, str] = dict(RETRY_AFTER)
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.faults = 0
        self.log: list[tuple[JudgeRequest, str]] = []
        """The timed side's requests and what each got (``ok`` or the fault's kind)."""

    def reset(self) -> None:
        """Forget the count and the log (before each run)."""
        with self._lock:
            self.faults = 0
            self.log = []

    def __call__(self, req: JudgeRequest) -> Any:
        timed = req.headers.get("x-bench-side") == "ours"
        with self._lock:
            roll = self._random.random()
            kind = "ok"
            if roll < self.rate:
                kind = self.kinds[min(int(roll / self.rate * len(self.kinds)), len(self.kinds) - 1)]
            self.faults += kind != "ok" and timed
            if timed:
                self.log.append((req, kind))
        if kind == "500":
            return reply_error(500, "injected server error")
        if kind == "429":
            return reply_error(429, "injected rate limit", headers=self.hint)
        if kind == "malformed":
            return reply_garbage()
        return self.judge(req)


def timeline(log: list[tuple[JudgeRequest, str]], latency: float) -> dict[str, Any]:
    """Where the time of one run went, from the judge's request log.

    A job is one (metric, prompt) pair: its first request is its start, later ones its
    retries. The *tail* runs from the last job's first request to the last answer: no job is
    left to start then, and the slots only serve the retries still to come; ``tail_busy_slots``
    is the mean number of requests in flight in it (each holds a slot for ``latency``).
    """
    if not log:
        return {}
    t0 = min(req.received_at for req, _ in log)
    attempts: dict[tuple[str | None, str], list[float]] = {}
    for req, _ in sorted(log, key=lambda entry: entry[0].received_at):
        key = (req.headers.get("x-bench-metric"), req.text)
        attempts.setdefault(key, []).append(req.received_at - t0)
    sent = sorted(t for times in attempts.values() for t in times)
    last_start = max(times[0] for times in attempts.values())
    end = sent[-1] + latency
    tail = end - last_start
    busy = sum(min(t + latency, end) - max(t, last_start) for t in sent if t + latency > last_start)
    return {
        "jobs": len(attempts),
        "last_start_s": last_start,
        "end_s": end,
        "tail_s": tail,
        "tail_requests": sum(1 for t in sent if t > last_start),
        "tail_busy_slots": busy / tail if tail > 0 else math.nan,
        "jobs_by_requests": {
            str(n): sum(1 for times in attempts.values() if len(times) == n)
            for n in sorted({len(times) for times in attempts.values()})
        },
    }


def measure(*, samples: int, latency: float, repeats: int, out: Any) -> dict[str, Any]:
    """Alternate fault-free and faulty runs (fresh processes) and summarise."""
    dataset = distinct_dataset(out, samples)
    faulty = FaultyJudge(BenchJudge())
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in SCENARIOS}
    with JudgeServer(faulty, latency=latency) as server:
        for _ in range(repeats):
            for name, rate, kinds in SCENARIOS:
                faulty.rate, faulty.kinds = rate, kinds or faulty.kinds
                faulty.reset()
                server.reset()
                report = throughput_run(
                    sys.executable,
                    "_ours_driver.py",
                    server.base_url,
                    dataset,
                    "--metrics",
                    METRICS,
                )
                report["requests"] = len(faulty.log)
                report["faults"] = faulty.faults
                report["failed_jobs"] = sum(s["failed"] for s in report["scores"].values())
                report["timeline"] = timeline(faulty.log, latency)
                runs[name].append(report)
    jobs = samples * len(METRICS.split(","))
    summary = {}
    for name, reports in runs.items():
        walls = [r["wall_s"] for r in reports]
        lines = [r["timeline"] for r in reports]
        summary[name] = {
            "walls_s": walls,
            "median_wall_s": median(walls),
            "cpu_s": median([r["cpu_s"] for r in reports]),
            "requests": median([r["requests"] for r in reports]),
            "faults": median([r["faults"] for r in reports]),
            "failed_jobs": max(r["failed_jobs"] for r in reports),
            "ideal_s": jobs * latency / CONCURRENCY,
            "last_start_s": median([t["last_start_s"] for t in lines]),
            "tail_s": median([t["tail_s"] for t in lines]),
            "tail_busy_slots": median([t["tail_busy_slots"] for t in lines]),
            "timelines": lines,
        }
    base = summary["none"]["median_wall_s"]
    for entry in summary.values():
        entry["slowdown"] = ratio(entry["median_wall_s"], base)
    return {
        "samples": samples,
        "jobs": jobs,
        "concurrency": CONCURRENCY,
        "latency_s": latency,
        "fault_rate": FAULT_RATE,
        "runs": summary,
    }


def render(result: dict[str, Any]) -> str:
    """Markdown table and the verdict on the target."""
    rows = [
        [
            LABELS[name],
            s["requests"],
            s["faults"],
            s["failed_jobs"],
            s["median_wall_s"],
            f"{min(s['walls_s']):.2f}-{max(s['walls_s']):.2f}",
            s["cpu_s"],
            s["last_start_s"],
            s["tail_s"],
            s["tail_busy_slots"],
            f"{s['slowdown']:.2f}x",
        ]
        for name, s in result["runs"].items()
    ]
    headers = [
        "judge faults",
        "HTTP requests",
        "faults injected",
        "jobs failed",
        "wall s (median)",
        "range",
        "CPU s",
        "last new job at s",
        "tail s",
        f"slots busy in tail (of {result['concurrency']})",
        "vs no faults",
    ]
    verdict = " ".join(
        f"{name}: {s['slowdown']:.2f}x (target <= {TARGET:g}x: "
        f"{'met' if s['slowdown'] <= TARGET else 'MISSED'})."
        for name, s in result["runs"].items()
        if name != "none"
    )
    head = (
        f"{result['samples']} samples x 2 metrics ({result['jobs']} jobs), concurrency "
        f"{result['concurrency']}, judge latency {result['latency_s'] * 1000:.0f} ms (faults "
        f"too), default RetryPolicy, {len(result['runs']['none']['walls_s'])} runs per "
        "configuration, alternating. Timeline columns are medians over runs, from the judge's "
        "request log; the tail runs from the last new job's first request to the last answer."
    )
    return "\n\n".join([head, table(headers, rows), verdict])


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    samples, latency = (12, 0.01) if args.tiny else (SAMPLES, LATENCY)
    repeats = args.repeats or (1 if args.tiny else REPEATS)
    result = measure(samples=samples, latency=latency, repeats=repeats, out=args.out)
    publish(args.out, "faults", "Retries under faults", render(result), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
