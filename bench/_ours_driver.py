"""Run langchain-ragmetrics against the benchmark judge, in its own process.

The twin of ``_ragas_driver.py``: the orchestrating benchmark starts it with the project's
python, hands it the judge server's URL and reads the JSON line it prints last. Running our
side in a child process too keeps the comparison symmetric (the judge server lives in the
orchestrator for both, so neither side shares its interpreter with the server).

Modes:
    economy     the four metrics once over the dataset, each metric with its own client that
                tags its requests (``x-bench-metric`` header) so the server counts per metric;
    throughput  a warm-up on 4 samples, then one timed ``evaluate()`` of N samples x the
                metrics (all four unless ``--metrics``) with ``--workers`` (default "auto",
                evaluate's own default), wall and CPU time; the CPU counts this process and
                every worker process it started and reaped (``getrusage`` of ``RUSAGE_SELF``
                plus ``RUSAGE_CHILDREN``); the orchestrator starts one process per repeat;
                with ``--async``, ``aevaluate()`` on an event loop instead (one process);
    floor       the same calls with the bare openai SDK, no framework: with ``--bodies`` the
                exact request bodies our run sent (messages, tool schema, tool choice), else
                ``--calls`` requests with a 4,500-character prompt; ``--concurrency`` threads
                (the sync client: on this stack it is faster than ``AsyncOpenAI`` on one loop).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _data import DATASET, WARMUP, emit, judge_client, load  # bench/ is the script's own directory

SIDE = "ours"


def _metrics(
    base_url: str,
    side: str = SIDE,
    keys: list[str] | None = None,
    initial_backoff: float | None = None,
) -> list[Any]:
    """The LLM-judged metrics (default all), each with its own client (counted per metric)."""
    from langchain_ragmetrics.evaluation import metric_from_name, metric_names
    from langchain_ragmetrics.metrics import RetryPolicy

    retry = (
        RetryPolicy() if initial_backoff is None else RetryPolicy(initial_backoff=initial_backoff)
    )
    return [
        metric_from_name(name, llm=judge_client(base_url, side, name, max_retries=0), retry=retry)
        for name in metric_names(judged=True)
        if keys is None or name in keys
    ]


def run_evaluate(
    records: list[dict[str, Any]],
    metrics: list[Any],
    concurrency: int,
    workers: int | str = "auto",
    *,
    asynchronous: bool = False,
) -> dict[str, list[float]]:
    """Score records with ``evaluate()`` (``workers`` as given), or ``aevaluate()`` (one
    process, the event loop) when ``asynchronous``; returns the scores per metric."""
    from langchain_ragmetrics.evaluation import aevaluate, evaluate

    if asynchronous:
        run = aevaluate(records, metrics, max_concurrency=concurrency, show_progress=False)
        result = asyncio.run(run)
    else:
        result = evaluate(
            records,
            metrics,
            max_concurrency=concurrency,
            show_progress=False,
            workers=workers,  # type: ignore[arg-type]
        )
    return {m.key: [math.nan if v is None else float(v) for v in result[m.key]] for m in metrics}


def _floor(
    base_url: str, bodies: list[dict[str, Any]], concurrency: int, side: str = "floor"
) -> None:
    """Send ``bodies`` with the bare sync openai SDK on ``concurrency`` threads."""
    from concurrent.futures import ThreadPoolExecutor

    import openai

    client = openai.OpenAI(
        base_url=base_url,
        api_key="test",
        max_retries=0,
        timeout=60,
        default_headers={"x-bench-side": side},
    )
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda body: client.chat.completions.create(**body), bodies))
    client.close()


def floor(
    base_url: str, calls: int, concurrency: int, bodies_file: str | None = None
) -> dict[str, Any]:
    """The harness floor: the wall and CPU time of the same calls with no framework at all."""
    if bodies_file:
        bodies: list[dict[str, Any]] = json.loads(Path(bodies_file).read_text(encoding="utf-8"))
    else:
        content = "Rate this passage. " * 237
        bodies = [
            {"model": "judge-model", "messages": [{"role": "user", "content": content}]}
        ] * calls
    warmup = "floor" + WARMUP  # a side of its own: the judge counts the timed calls apart
    _floor(base_url, bodies[:concurrency], concurrency, warmup)  # imports, connections
    start, cpu = time.perf_counter(), time.process_time()
    _floor(base_url, bodies, concurrency)
    return {
        "calls": len(bodies),
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu,
    }


def _workers(value: str) -> int | str:
    """``--workers``: "auto" or a whole number."""
    return value if value == "auto" else int(value)


def _cpu_s() -> float:
    """CPU seconds of this process and of its reaped children (evaluate()'s workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _children_s() -> float:
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


def _summary(scores: dict[str, list[float]]) -> dict[str, Any]:
    out = {}
    for key, values in scores.items():
        ok = [v for v in values if not math.isnan(v)]
        out[key] = {"mean": sum(ok) / len(ok) if ok else None, "failed": len(values) - len(ok)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="langchain-ragmetrics side of the benchmarks")
    parser.add_argument("mode", choices=["economy", "throughput", "floor"])
    parser.add_argument("--calls", type=int, default=800, help="floor mode: requests to send")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--samples", type=int, default=None)
    parser.add_argument("--dataset", default=str(DATASET), help="dataset JSON file")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--bodies", default=None, help="floor mode: request bodies to replay")
    parser.add_argument(
        "--metrics", default=None, help="throughput mode: comma-separated metric keys"
    )
    parser.add_argument(
        "--workers",
        type=_workers,
        default="auto",
        help='throughput mode: evaluate(workers=...), "auto" or a number',
    )
    parser.add_argument(
        "--async",
        dest="asynchronous",
        action="store_true",
        help="throughput mode: aevaluate() on an event loop instead of evaluate()",
    )
    parser.add_argument(
        "--initial-backoff", type=float, default=None, help="RetryPolicy.initial_backoff"
    )
    args = parser.parse_args(argv)

    if args.mode == "floor":
        emit(floor(args.base_url, args.calls, args.concurrency, args.bodies))
        return 0
    keys = args.metrics.split(",") if args.metrics else None
    records = load(args.dataset, samples=args.samples)
    if args.mode == "economy":
        start = time.perf_counter()
        scores = run_evaluate(records, _metrics(args.base_url), args.concurrency)
        wall = time.perf_counter() - start
        emit({"samples": len(records), "wall_s": wall, "scores": _summary(scores)})
        return 0
    warmup = load(samples=4)  # the shipped samples: the timed run's texts stay unseen
    warm = _metrics(args.base_url, SIDE + WARMUP, keys)
    run_evaluate(warmup, warm, args.concurrency, 1, asynchronous=args.asynchronous)
    metrics = _metrics(args.base_url, keys=keys, initial_backoff=args.initial_backoff)
    from langchain_ragmetrics.evaluation._workers import worker_count

    processes = 1
    if not args.asynchronous:
        processes = worker_count(
            args.workers, jobs=len(records) * len(metrics), max_concurrency=args.concurrency
        )
    start, cpu, own = time.perf_counter(), _cpu_s(), time.process_time()
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    scores = run_evaluate(
        records, metrics, args.concurrency, args.workers, asynchronous=args.asynchronous
    )
    wall, cpu = time.perf_counter() - start, _cpu_s() - cpu
    emit(
        {
            "samples": len(records),
            "workers": args.workers,
            "processes": processes,
            "wall_s": wall,
            "cpu_s": cpu,
            "parent_cpu_s": time.process_time() - own,
            "workers_cpu_s": _children_s() - kids.ru_utime - kids.ru_stime,
            "scores": _summary(scores),
        }
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
