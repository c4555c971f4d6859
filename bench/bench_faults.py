"""Benchmark 6 - retries under faults: evaluate() with 30 % transient judge faults vs none.

``evaluate()`` of 300 distinct samples x 2 metrics (ContextRecall, ContextPrecision),
concurrency 16, against the loopback judge answering after 100 ms. In the faulty runs each
request independently fails with probability 0.3 (seeded), half of them HTTP 500 and half HTTP
429 with a retry hint; our ``RetryPolicy`` retries them (3 retries, backoff doubling with
jitter). Two fault scenarios:

* ``default``: the default ``RetryPolicy`` (0.5 s initial backoff) and ``Retry-After: 1``, the
  waits of a production API;
* ``scaled``: waits scaled to this 100 ms judge (``initial_backoff=0.1``, ``retry-after-ms:
  100``): the sleeps themselves stop dominating, what remains is the engine's cost of faults.

The configurations alternate in one session, each run a fresh process
(``_ours_driver.py throughput``), so the ratios compare like with like on a noisy machine.

What it shows: a job sleeping out a backoff gives its concurrency slot back, so the other jobs
keep the judge busy and faults cost little more than the extra requests they cause plus the
last retries' own waits. Target (issue 8): with faults <= 1.5x the fault-free wall time.

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

from tests._support.openai_server import JudgeRequest, JudgeServer, reply_error

SAMPLES = 300
METRICS = "context_recall,context_precision"
LATENCY = 0.100
FAULT_RATE = 0.30
REPEATS = 3
TARGET = 1.5
SCENARIOS: tuple[tuple[str, float, dict[str, str], tuple[str, ...]], ...] = (
    ("none", 0.0, {}, ()),
    ("default", FAULT_RATE, {"Retry-After": "1"}, ()),
    ("scaled", FAULT_RATE, {"retry-after-ms": "100"}, ("--initial-backoff", "0.1")),
)
LABELS = {
    "none": "none",
    "default": "30 %, default RetryPolicy, Retry-After: 1",
    "scaled": "30 %, waits scaled to the judge (0.1 s backoff, retry-after-ms: 100)",
}


class FaultyJudge:
    """The benchmark judge, failing each request with probability ``rate`` (seeded)."""

    def __init__(self, judge: BenchJudge, *, seed: int = 7) -> None:
        self.judge = judge
        self.rate = 0.0
        self.hint: dict[str, str] = {"Retry-After": "1"}
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.faults = 0
        self.log: list[tuple[JudgeRequest, str]] = []
        """The timed side's requests and what each got (``ok``, ``500``, ``429``)."""

    def reset(self) -> None:
        """Forget the count and the log (before each run)."""
        with self._lock:
            self.faults = 0
            self.log = []

    def __call__(self, req: JudgeRequest) -> Any:
        timed = req.headers.get("x-bench-side") == "ours"
        with self._lock:
            roll = self._random.random()
            fault = roll < self.rate
            kind = "ok" if not fault else "500" if roll < self.rate / 2 else "429"
            self.faults += fault and timed
            if timed:
                self.log.append((req, kind))
        if kind == "500":
            return reply_error(500, "injected server error")
        if kind == "429":
            return reply_error(429, "injected rate limit", headers=self.hint)
        return self.judge(req)


def timeline(log: list[tuple[JudgeRequest, str]], latency: float) -> dict[str, Any]:
    """Where the time of one run went, from the judge's request log.

    A job is one (metric, prompt) pair: its first request is its start, later ones its
    retries. The *tail* runs from the last job's first request to the last answer: then no
    job is left to start, and the slots only serve the retries still to come.
    """
    if not log:
        return {}
    t0 = min(r.received_at for r, _ in log)
    attempts: dict[tuple[str | None, str], list[tuple[float, str]]] = {}
    for req, kind in sorted(log, key=lambda e: e[0].received_at):
        key = (req.headers.get("x-bench-metric"), req.text)
        attempts.setdefault(key, []).append((req.received_at - t0, kind))
    starts = sorted(a[0][0] for a in attempts.values())
    last_start = starts[-1]
    end = max(t for a in attempts.values() for t, _ in a) + latency
    sent = sorted(t for a in attempts.values() for t, _ in a)
    in_tail = [t for t in sent if t > last_start]
    tail = end - last_start
    # mean requests in flight over the tail (each holds a slot for ``latency``)
    busy = sum(min(t + latency, end) - max(t, last_start) for t in sent if t + latency > last_start)
    ends = sorted((a[-1][0] + latency, len(a), "".join(k[0] for _, k in a[:-1])) for a in attempts.values())
    return {
        "jobs": len(attempts),
        "last_start_s": last_start,
        "end_s": end,
        "tail_s": tail,
        "tail_requests": len(in_tail),
        "tail_busy_slots": busy / tail if tail > 0 else math.nan,
        "last_jobs": [(round(t, 2), n, kinds) for t, n, kinds in ends[-5:]],
        "by_attempts": {
            n: sum(1 for a in attempts.values() if len(a) == n)
            for n in sorted({len(a) for a in attempts.values()})
        },
    }


def measure(*, samples: int, latency: float, repeats: int, out: Any) -> dict[str, Any]:
    """Alternate fault-free and faulty runs (fresh processes) and summarise."""
    dataset = distinct_dataset(out, samples)
    judge = BenchJudge()
    faulty = FaultyJudge(judge)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in SCENARIOS}
    with JudgeServer(faulty, latency=latency) as server:
        for _ in range(repeats):
            for name, rate, hint, policy in SCENARIOS:
                faulty.rate, faulty.hint = rate, hint
                faulty.reset()
                server.reset()
                report = throughput_run(
                    sys.executable,
                    "_ours_driver.py",
                    server.base_url,
                    dataset,
                    "--metrics",
                    METRICS,
                    *policy,
                )
                timed = [r for r in server.requests if r.headers.get("x-bench-side") == "ours"]
                report["requests"] = len(timed)
                report["faults"] = faulty.faults
                report["failed_jobs"] = sum(s["failed"] for s in report["scores"].values())
                report["timeline"] = timeline(faulty.log, latency)

                runs[name].append(report)
    jobs = samples * len(METRICS.split(","))
    summary = {}
    for name, reports in runs.items():
        walls = [r["wall_s"] for r in reports]
        summary[name] = {
            "walls_s": walls,
            "median_wall_s": median(walls),
            "requests": median([r["requests"] for r in reports]),
            "faults": median([r["faults"] for r in reports]),
            "failed_jobs": max(r["failed_jobs"] for r in reports),
            "ideal_s": jobs * latency / CONCURRENCY,
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
            s["ideal_s"],
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
        "fault-free ideal s",
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
        f"{result['concurrency']}, judge latency {result['latency_s'] * 1000:.0f} ms, "
        f"{len(result['runs']['none']['walls_s'])} runs per configuration, alternating."
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
