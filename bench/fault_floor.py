"""The faults target's floor: how long an ideal client takes on issue 18's faults check.

``bench_faults.py`` measures ``evaluate()``; this script asks what *any* client would take
under the same rules, so a missed target can be told apart from a reachable one. It
simulates (discrete events, no HTTP, no CPU) a client whose slots never idle while a call
is ready, on the check's workload and judge:

* ``--samples`` (200) x ``--metrics`` (the four LLM-judged ones: 1,000 judge calls) in
  ``evaluate()``'s order: entity recall's two calls of a sample queue one after the other,
  every other metric sends one (``--samples 300 --metrics context_recall,context_precision``
  is ``bench_faults.py``'s published run, 600 calls);
* ``--concurrency`` slots (16), a judge answering after ``--latency`` (100 ms);
* every request fails with probability 0.3, as one of the mix's kinds with equal odds (the
  mixes and fault models of ``bench_faults.py``: ``slow``, every fault after the latency;
  ``fast``, 429s and 500s at once, a malformed answer after the latency);
* the package's default ``RetryPolicy``, read from the package: a 429 waits its
  ``Retry-After`` (1 s) whole, a 500 a full-jitter backoff (uniform up to
  ``initial_backoff * 2**k``), ``max_retries`` transient retries; a malformed answer is
  retried at once, ``parse_retries`` times; a call out of retries fails (and ends);
* a call sleeping out a backoff holds no slot; a call back from its backoff takes the next
  free slot ahead of calls not started yet, as ours does (``--order new-first`` shows the
  other rule).

It prints, per scenario, the ideal fault-free time, the median and 5th-95th percentiles of
the faulty time over ``--seeds`` fault draws, the ratio of the median to the fault-free
time, and the share of draws that end within 1.5x of it. A measured run that takes longer
than this floor lost the difference to its own CPU and scheduling; a target below the
floor's median is out of reach for every client that keeps these retry rules.

Usage: ``python bench/fault_floor.py [--seeds 1000] [--samples 200] [--metrics all|NAME,...]
[--concurrency 16] [--latency 0.1] [--order resumed-first|new-first] [--initial-backoff S]``
"""

from __future__ import annotations

import heapq
import random
import statistics
from collections import deque
from dataclasses import dataclass, field

from _common import base_parser, publish, table

from langchain_ragmetrics.metrics import RetryPolicy

FAULT_RATE = 0.30
RETRY_AFTER_S = 1.0
TARGET = 1.5
CALLS_PER_METRIC = {
    "context_recall": 1,
    "context_precision": 1,
    "context_entity_recall": 2,
    "context_relevance": 1,
}
"""Judge calls per sample of each LLM-judged metric (entity recall reads two lists)."""
MIXES = {"mixed": ("500", "429", "malformed"), "transient": ("500", "429")}
MODELS = {"slow": "faults take the latency", "fast": "429/500 at once, malformed after it"}


@dataclass
class _Call:
    transient: int = 0
    malformed: int = 0


@dataclass
class _Run:
    """One simulated run: the queues, the slots and the clock."""

    seed: int
    rate: float
    kinds: tuple[str, ...]
    slow_errors: bool
    slots: int
    latency: float
    policy: RetryPolicy
    resumed_first: bool
    events: list[tuple[float, int, str, _Call]] = field(default_factory=list)
    fresh: deque[_Call] = field(default_factory=deque)
    resumed: deque[_Call] = field(default_factory=deque)
    order: int = 0
    end: float = 0.0
    failed: int = 0
    requests: int = 0

    def __post_init__(self) -> None:
        self.faults = random.Random(self.seed)
        self.jitter = random.Random(self.seed + 1_000_003)

    def schedule(self, at: float, what: str, call: _Call) -> None:
        self.order += 1
        heapq.heappush(self.events, (at, self.order, what, call))

    def send(self, call: _Call, now: float) -> None:
        self.slots -= 1
        self.requests += 1
        kind = "ok"
        if self.faults.random() < self.rate:
            kind = self.kinds[self.faults.randrange(len(self.kinds))]
        waits = kind in ("ok", "malformed") or self.slow_errors
        self.schedule(now + (self.latency if waits else 0.0), kind, call)

    def fill(self, now: float) -> None:
        while self.slots > 0 and (self.fresh or self.resumed):
            first, second = (
                (self.resumed, self.fresh) if self.resumed_first else (self.fresh, self.resumed)
            )
            self.send((first or second).popleft(), now)

    def answer(self, kind: str, call: _Call, now: float) -> None:
        """A request's answer came: done, retried at once, or asleep for a backoff."""
        self.slots += 1
        if kind == "ok":
            self.end = max(self.end, now)
        elif kind == "malformed":
            if call.malformed >= self.policy.parse_retries:
                self.failed += 1
                self.end = max(self.end, now)
            else:
                call.malformed += 1
                self.send(call, now)  # retried at once, on the slot it had
        elif call.transient >= self.policy.max_retries:
            self.failed += 1
            self.end = max(self.end, now)
        else:
            if kind == "429":
                wait = min(self.policy.max_backoff, RETRY_AFTER_S)
            else:
                ceiling = min(
                    self.policy.max_backoff, self.policy.initial_backoff * 2**call.transient
                )
                wait = ceiling * self.jitter.random()
            call.transient += 1
            self.schedule(now + wait, "wake", call)

    def run(self, calls: int) -> tuple[float, int, int]:
        self.fresh.extend(_Call() for _ in range(calls))
        self.fill(0.0)
        while self.events:
            now, _, what, call = heapq.heappop(self.events)
            if what == "wake":
                self.resumed.append(call)
            else:
                self.answer(what, call, now)
            self.fill(now)
        return self.end, self.failed, self.requests


def simulate(
    *,
    seed: int,
    samples: int,
    metrics: tuple[str, ...],
    concurrency: int,
    latency: float,
    rate: float,
    kinds: tuple[str, ...],
    slow_errors: bool,
    resumed_first: bool,
    policy: RetryPolicy,
) -> tuple[float, int, int]:
    """One run of the ideal client: (seconds to the last answer, calls failed, requests)."""
    calls = samples * sum(CALLS_PER_METRIC[name] for name in metrics)
    run = _Run(
        seed=seed,
        rate=rate,
        kinds=kinds,
        slow_errors=slow_errors,
        slots=concurrency,
        latency=latency,
        policy=policy,
        resumed_first=resumed_first,
    )
    return run.run(calls)


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1000, help="fault draws per scenario")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument(
        "--metrics",
        default="all",
        help='"all" (the four LLM-judged metrics, issue 18\'s check) or names, comma-separated '
        "(bench_faults.py's default: context_recall,context_precision)",
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--order", choices=("resumed-first", "new-first"), default="resumed-first")
    parser.add_argument(
        "--initial-backoff",
        type=float,
        default=None,
        help="ceiling of a 500's first backoff in seconds (default: the package's "
        "RetryPolicy); 0 retries every 500 at once, the most a client may do",
    )
    args = parser.parse_args()
    policy = (
        RetryPolicy()
        if args.initial_backoff is None
        else RetryPolicy(initial_backoff=args.initial_backoff)
    )
    seeds = 20 if args.tiny else args.seeds
    metrics = tuple(CALLS_PER_METRIC) if args.metrics == "all" else tuple(args.metrics.split(","))
    unknown = sorted(set(metrics) - set(CALLS_PER_METRIC))
    if unknown:
        parser.error(
            f"--metrics: unknown {', '.join(unknown)} (known: {', '.join(CALLS_PER_METRIC)})"
        )

    def one(seed: int, rate: float, kinds: tuple[str, ...], slow: bool) -> tuple[float, int, int]:
        return simulate(
            seed=seed,
            samples=args.samples,
            metrics=metrics,
            concurrency=args.concurrency,
            latency=args.latency,
            rate=rate,
            kinds=kinds,
            slow_errors=slow,
            resumed_first=args.order == "resumed-first",
            policy=policy,
        )

    base, _, _ = one(0, 0.0, ("500",), True)
    rows, scenarios = [], {}
    for model, model_label in MODELS.items():
        for mix, kinds in MIXES.items():
            ends, failed, requests = [], [], []
            for seed in range(seeds):
                end, fails, sent = one(seed, FAULT_RATE, kinds, model == "slow")
                ends.append(end)
                failed.append(fails)
                requests.append(sent)
            cuts = statistics.quantiles(ends, n=20)
            median = statistics.median(ends)
            within = sum(end <= TARGET * base for end in ends) / len(ends)
            scenarios[f"{mix}-{model}"] = {
                "median_s": median,
                "p5_s": cuts[0],
                "p95_s": cuts[-1],
                "ratio": median / base,
                "share_within_target": within,
                "median_requests": statistics.median(requests),
                "median_failed_calls": statistics.median(failed),
            }
            rows.append(
                [
                    f"30 %: {'/'.join(kinds)}; {model_label}",
                    statistics.median(requests),
                    statistics.median(failed),
                    median,
                    f"{cuts[0]:.2f}-{cuts[-1]:.2f}",
                    f"{median / base:.2f}x",
                    f"{within:.0%}",
                ]
            )
    calls = args.samples * sum(CALLS_PER_METRIC[name] for name in metrics)
    rules = (
        "default RetryPolicy"
        if args.initial_backoff is None
        else f"RetryPolicy(initial_backoff={args.initial_backoff:g})"
    )
    text = (
        f"An ideal client (no CPU; slots never idle while a call is ready; {args.order}) on "
        f"{args.samples} samples x {len(metrics)} metrics ({', '.join(metrics)}; {calls:,} "
        f"judge calls), {args.concurrency} "
        f"slots, judge latency {args.latency * 1000:.0f} ms, {rules}; "
        f"{seeds:,} fault draws per row. Without faults it takes {base:.2f} s.\n\n"
        + table(
            [
                "judge faults; fault model",
                "requests (median)",
                "calls failed (median)",
                "faulty s (median)",
                "5th-95th percentile s",
                "vs no faults",
                f"draws within {TARGET}x",
            ],
            rows,
        )
    )
    publish(
        args.out,
        "fault_floor",
        "Faults: what an ideal client takes",
        text,
        {
            "fault_free_s": base,
            "seeds": seeds,
            "order": args.order,
            "retry_policy": policy.model_dump(),
            "metrics": list(metrics),
            "calls": calls,
            "scenarios": scenarios,
        },
    )


if __name__ == "__main__":
    main()
