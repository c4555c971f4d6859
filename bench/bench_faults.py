"""Benchmark 6 - retries under faults: evaluate() with 30 % judge faults vs none.

``evaluate()`` of 300 distinct samples x 2 metrics (ContextRecall, ContextPrecision),
concurrency 16, the default ``RetryPolicy``, against the loopback judge answering after 100 ms.
In the faulty runs each request independently fails with probability 0.3 (seeded), as one of:

* ``mixed`` (issue 18's mix): a third HTTP 500, a third HTTP 429 with ``Retry-After: 1``, a
  third malformed answers (tool-call arguments that are not JSON, retried at once by
  ``parse_retries``);
* ``transient``: half HTTP 500, half HTTP 429 with ``Retry-After: 1`` (every fault waits out a
  backoff: the harder case).

Two fault models, each run with both mixes:

* *faults take the latency* (``slow``): every fault comes after the judge's full latency, as
  a slow 500 does (the hard case: a failed request holds its slot as long as an answer);
* *429/500 at once, malformed after the latency* (``fast``): 429s and 500s are answered
  without latency, as rate-limiting gateways and overloaded front ends do (the model never
  ran); a malformed answer still comes after the latency (the model did the work).

The configurations alternate in one session, each run a fresh process
(``_ours_driver.py throughput``), so the ratios compare like with like on a noisy machine; in
each round every configuration's fault draws start from the same seed (since 2026-11-28;
before, the draws ran on from run to run, so each run met other faults).
From the judge's request log, each run also gives its timeline: when the last job not started
yet sent its first request, how long the *tail* after it lasted (only retries left) and how
many of the 16 slots were busy in it on average.

What it shows: a job sleeping out a backoff gives its slot back, so the other jobs keep the
judge busy; what faults still cost is the client CPU of the extra requests (until the last new
job starts the run is CPU-bound) plus the tail of the last jobs' retry chains (two 429s in a
row are 2 s of ``Retry-After`` no client may shorten).
Target (issue 18): with faults <= 1.5x the fault-free wall time.

Usage: ``python bench/bench_faults.py [--tiny] [--repeats N] [--model slow|fast|both]
[--samples N] [--metrics all|NAME,...] [--before DIR] [--out DIR]``; ``--before DIR`` runs
every configuration with another checkout's driver too (``git worktree add DIR <commit>``),
the two taking turns run by run, each compared with its own fault-free runs;
``--samples 200 --metrics all`` runs issue 18's own check (200 samples x the four LLM-judged
metrics, 1,000 judge calls without faults) and writes ``faults_check.json`` beside the
published ``faults.json``.
``--no-ragas`` is accepted and changes nothing: there is no RAGAS side.
"""

from __future__ import annotations

import dataclasses
import math
import random
import sys
import threading
from pathlib import Path
from typing import Any

from _common import REPO, base_parser, median, publish, ratio, table
from _judge import BenchJudge
from bench_throughput import CONCURRENCY, distinct_dataset, throughput_run

from tests._support.openai_server import (
    JudgeRequest,
    JudgeServer,
    Reply,
    reply_delay,
    reply_error,
    reply_garbage,
)

SAMPLES = 300
METRICS = "context_recall,context_precision"
LATENCY = 0.100
FAULT_RATE = 0.30
SEED = 7
"""The fault draws of round ``r`` start from ``SEED + r``, in every configuration."""
REPEATS = 3
TARGET = 1.5
RETRY_AFTER = {"Retry-After": "1"}
MIXES: dict[str, tuple[str, ...]] = {
    "mixed": ("500", "429", "malformed"),
    "transient": ("500", "429"),
}
MODELS = {
    "slow": "faults take the latency",
    "fast": "429/500 at once, malformed after the latency",
}
MIX_LABELS = {
    "mixed": "30 %: 500 / 429 (Retry-After: 1) / malformed",
    "transient": "30 %: 500 / 429 (Retry-After: 1)",
}


def scenarios(models: tuple[str, ...]) -> list[tuple[str, float, tuple[str, ...], bool]]:
    """``(name, rate, kinds, errors wait the latency)``: none, then each mix per model."""
    out: list[tuple[str, float, tuple[str, ...], bool]] = [("none", 0.0, (), True)]
    for model in models:
        for mix, kinds in MIXES.items():
            name = mix if model == "slow" else f"{mix}-fast"
            out.append((name, FAULT_RATE, kinds, model == "slow"))
    return out


def label(name: str) -> str:
    """The table's row label of a scenario."""
    if name == "none":
        return "none"
    mix, _, fast = name.partition("-")
    return f"{MIX_LABELS[mix]}; {MODELS['fast' if fast else 'slow']}"


class FaultyJudge:
    """The benchmark judge, failing each request with probability ``rate`` (seeded).

    A fault is one of ``kinds`` with equal odds: ``500``, ``429`` (with ``hint`` as headers)
    or ``malformed`` (a 200 whose tool-call arguments are not JSON). Answers and malformed
    answers come after ``latency``; 429s and 500s too when ``slow_errors``, else at once. (The
    server itself runs without latency: the judge puts the wait on each reply.)
    """

    def __init__(self, judge: BenchJudge, *, latency: float, seed: int = SEED) -> None:
        self.judge = judge
        self.latency = latency
        self.rate = 0.0
        self.kinds: tuple[str, ...] = ("500", "429")
        self.slow_errors = True
        self.hint: dict[str, str] = dict(RETRY_AFTER)
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.faults = 0
        self.log: list[tuple[JudgeRequest, str, float]] = []
        """The timed side's requests, what each got (``ok`` or the fault's kind) and after how
        many seconds."""

    def reset(self, seed: int | None = None) -> None:
        """Forget the count and the log (before each run); with ``seed``, restart the draws.

        Every configuration of a round starts from the same seed, so the sides compared in
        a round meet the same sequence of faults (which request draws which still depends
        on the order requests arrive in).
        """
        with self._lock:
            self.faults = 0
            self.log = []
            if seed is not None:
                self._random = random.Random(seed)

    def __call__(self, req: JudgeRequest) -> Reply:
        timed = req.headers.get("x-bench-side") == "ours"
        with self._lock:
            roll = self._random.random()
            kind = "ok"
            if roll < self.rate:
                kind = self.kinds[min(int(roll / self.rate * len(self.kinds)), len(self.kinds) - 1)]
            wait = self.latency if self.slow_errors or kind in ("ok", "malformed") else 0.0
            self.faults += kind != "ok" and timed
            if timed:
                self.log.append((req, kind, wait))
        if kind == "500":
            return dataclasses.replace(reply_error(500, "injected server error"), delay=wait)
        if kind == "429":
            reply = reply_error(429, "injected rate limit", headers=self.hint)
            return dataclasses.replace(reply, delay=wait)
        if kind == "malformed":
            return dataclasses.replace(reply_garbage(), delay=self.latency)
        answer = self.judge(req)
        if isinstance(answer, str):
            return reply_delay(self.latency, text=answer)
        return reply_delay(self.latency, answer)


def run_key(name: str, side: str) -> str:
    """A configuration's key in the results: its scenario, and ``|side`` with ``--before``."""
    return f"{name}|{side}" if side else name


def timeline(log: list[tuple[JudgeRequest, str, float]]) -> dict[str, Any]:
    """Where the time of one run went, from the judge's request log.

    A job is one (metric, prompt) pair: its first request is its start, later ones its
    retries. The *tail* runs from the last job's first request to the last answer: no job is
    left to start then, and the slots only serve the retries still to come; ``tail_busy_slots``
    is the mean number of requests in flight in it (each holds a slot until its answer).
    """
    if not log:
        return {}
    t0 = min(req.received_at for req, *_ in log)
    attempts: dict[tuple[str | None, str], list[tuple[float, float]]] = {}
    for req, _, wait in sorted(log, key=lambda entry: entry[0].received_at):
        key = (req.headers.get("x-bench-metric"), req.text)
        attempts.setdefault(key, []).append((req.received_at - t0, wait))
    sent = [attempt for chain in attempts.values() for attempt in chain]
    last_start = max(chain[0][0] for chain in attempts.values())
    end = max(t + wait for t, wait in sent)
    tail = end - last_start
    busy = sum(min(t + w, end) - max(t, last_start) for t, w in sent if t + w > last_start)
    return {
        "jobs": len(attempts),
        "last_start_s": last_start,
        "end_s": end,
        "tail_s": tail,
        "tail_requests": sum(1 for t, _ in sent if t > last_start),
        "tail_busy_slots": busy / tail if tail > 0 else math.nan,
        "jobs_by_requests": {
            str(n): sum(1 for chain in attempts.values() if len(chain) == n)
            for n in sorted({len(chain) for chain in attempts.values()})
        },
    }


def measure(
    *,
    samples: int,
    latency: float,
    repeats: int,
    out: Any,
    models: tuple[str, ...] = ("slow", "fast"),
    asynchronous: bool = False,
    metrics: str = METRICS,
    before: Path | None = None,
) -> dict[str, Any]:
    """Alternate fault-free and faulty runs (fresh processes) and summarise.

    ``metrics`` is a comma-separated list of metric names, or ``"all"`` for the four
    LLM-judged ones (issue 18's own check: 200 samples x 4 metrics, 1,000 judge calls).
    ``before``: another checkout's root; every configuration then also runs with that
    checkout's driver (which imports its package), the two sides taking turns run by run,
    and each side's faulty runs are compared with its own fault-free runs.
    """
    dataset = distinct_dataset(out, samples)
    faulty = FaultyJudge(BenchJudge(), latency=latency)
    plan = scenarios(models)
    drivers = {"": "_ours_driver.py"}
    if before is not None:
        drivers = {"before": str(before / "bench" / "_ours_driver.py"), "after": "_ours_driver.py"}
    runs: dict[str, list[dict[str, Any]]] = {
        run_key(name, side): [] for name, *_ in plan for side in drivers
    }
    chosen = [] if metrics == "all" else ["--metrics", metrics]
    extra = [*chosen, *(["--async"] if asynchronous else [])]
    with JudgeServer(faulty) as server:  # no latency of its own: the judge sets each wait
        for repeat in range(repeats):
            for name, rate, kinds, slow_errors in plan:
                sides = list(drivers) if repeat % 2 == 0 else list(drivers)[::-1]
                for side in sides:
                    faulty.rate, faulty.kinds = rate, kinds or faulty.kinds
                    faulty.slow_errors = slow_errors
                    faulty.reset(seed=SEED + repeat)
                    server.reset()
                    report = throughput_run(
                        sys.executable, drivers[side], server.base_url, dataset, *extra
                    )
                    report["requests"] = len(faulty.log)
                    report["faults"] = faulty.faults
                    report["failed_jobs"] = sum(s["failed"] for s in report["scores"].values())
                    report["timeline"] = timeline(faulty.log)
                    runs[run_key(name, side)].append(report)
    # A job is one judge call of a fault-free run (entity recall makes two per sample).
    jobs = round(median([r["requests"] for r in runs[run_key("none", list(drivers)[-1])]]))
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
    for key, entry in summary.items():
        base = summary[run_key("none", key.partition("|")[2])]
        entry["slowdown"] = ratio(entry["median_wall_s"], base["median_wall_s"])
    return {
        "sides": {} if before is None else {"before": str(before), "after": str(REPO)},
        "samples": samples,
        "metrics": metrics,
        "jobs": jobs,
        "concurrency": CONCURRENCY,
        "latency_s": latency,
        "fault_rate": FAULT_RATE,
        "models": list(models),
        "entry_point": "aevaluate" if asynchronous else "evaluate",
        "runs": summary,
    }


def render(result: dict[str, Any]) -> str:
    """Markdown table and the verdict on the target, per fault model."""
    rows = [
        [
            label(name.partition("|")[0]) + (f" ({name.partition('|')[2]})" if "|" in name else ""),
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
        "judge faults; fault model",
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
    verdicts = []
    for model in result["models"]:
        names = [
            n
            for n in result["runs"]
            if not n.startswith("none")
            and n.partition("|")[0].endswith("-fast") == (model == "fast")
        ]
        verdicts.append(
            f"Fault model *{MODELS[model]}*: "
            + ", ".join(
                f"{n.replace('-fast', '').replace('|', ' ')} "
                f"{result['runs'][n]['slowdown']:.2f}x (target <= "
                f"{TARGET:g}x: {'met' if result['runs'][n]['slowdown'] <= TARGET else 'MISSED'})"
                for n in names
            )
            + "."
        )
    head = (
        f"`{result['entry_point']}()` of {result['samples']} samples x "
        f"{metrics_label(result.get('metrics', METRICS))} ({result['jobs']} judge calls "
        f"without faults), concurrency {result['concurrency']}, judge latency "
        f"{result['latency_s'] * 1000:.0f} ms, default RetryPolicy, "
        f"{len(next(iter(result['runs'].values()))['walls_s'])} runs per configuration, "
        "alternating"
        + (
            " (each with the checkout before, `"
            + result["sides"]["before"]
            + "`, and this one, taking turns run by run)"
            if result.get("sides")
            else ""
        )
        + ". Fault "
        "models: *faults take the latency* (every fault after the judge's latency, as a slow "
        "500: the hard case) and *429/500 at once, malformed after the latency* (errors "
        "answered without latency, as rate-limiting gateways do; a malformed answer still "
        "after it: the model did the work). Timeline columns are "
        "medians over runs, from the judge's request log; the tail runs from the last new "
        "job's first request to the last answer."
    )
    return "\n\n".join([head, table(headers, rows), "\n".join(verdicts)])


def metrics_label(metrics: str) -> str:
    """How the table's head names the metrics of a run."""
    if metrics == "all":
        return "4 metrics (the four LLM-judged ones)"
    names = metrics.split(",")
    return f"{len(names)} metrics ({', '.join(names)})"


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        choices=["slow", "fast", "both"],
        default="both",
        help="fault model: faults take the latency (slow), 429/500 at once (fast), or both",
    )
    parser.add_argument(
        "--async",
        dest="asynchronous",
        action="store_true",
        help="score with aevaluate() on an event loop instead of evaluate()",
    )
    parser.add_argument(
        "--samples", type=int, default=None, help=f"samples per run (default {SAMPLES})"
    )
    parser.add_argument(
        "--metrics",
        default=METRICS,
        help=f'comma-separated metric names, or "all" (issue 18\'s check); default {METRICS}',
    )
    parser.add_argument(
        "--before",
        type=Path,
        default=None,
        help="another checkout's root: run every configuration with its driver too, in turns",
    )
    args = parser.parse_args(argv)
    samples, latency = (12, 0.01) if args.tiny else (SAMPLES, LATENCY)
    samples = args.samples or samples
    repeats = args.repeats or (1 if args.tiny else REPEATS)
    models = ("slow", "fast") if args.model == "both" else (args.model,)
    result = measure(
        samples=samples,
        latency=latency,
        repeats=repeats,
        out=args.out,
        models=models,
        asynchronous=args.asynchronous,
        metrics=args.metrics,
        before=args.before,
    )
    name = "faults" if not args.asynchronous else "faults_async"
    if args.metrics != METRICS or args.samples:
        name += "_check"  # not the published configuration: kept apart from its figures
    if args.before is not None:
        name += "_checkouts"
    title = "Retries under faults" + (" (aevaluate)" if args.asynchronous else "")
    publish(args.out, name, title, render(result), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
