"""Run langchain-ragmetrics against the benchmark judge, in its own process.

The twin of ``_ragas_driver.py``: the orchestrating benchmark starts it with the project's
python, hands it the judge server's URL and reads the JSON line it prints last. Running our
side in a child process too keeps the comparison symmetric (the judge server lives in the
orchestrator for both, so neither side shares its interpreter with the server).

Modes:
    economy     the four metrics once over the dataset, each metric with its own client that
                tags its requests (``x-bench-metric`` header) so the server counts per metric;
    throughput  a warm-up on 4 samples, then one timed ``evaluate()`` of N samples x 4 metrics
                (wall and CPU time); the orchestrator starts one process per repeat;
    floor       the same number of bare openai-SDK calls, no framework: what the judge server
                and the machine allow at best.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _data import DATASET, WARMUP, emit, judge_client, load  # bench/ is the script's own directory

SIDE = "ours"


def _metrics(base_url: str, side: str = SIDE) -> list[Any]:
    """The four LLM-judged metrics, each with its own client so the judge can count per metric."""
    from langchain_ragmetrics.evaluation import metric_from_name, metric_names

    return [
        metric_from_name(name, llm=judge_client(base_url, side, name))
        for name in metric_names(judged=True)
    ]


def run_evaluate(
    records: list[dict[str, Any]], metrics: list[Any], concurrency: int
) -> dict[str, list[float]]:
    """Score records with ``evaluate()``; returns the scores per metric key.

    Falls back to driving ``ScoringEngine`` directly while ``evaluate()`` is not available
    (the harness was written before it landed); the fallback is what ``evaluate()`` does
    minus dataset checks and the result object.
    """
    try:
        from langchain_ragmetrics.evaluation import evaluate
    except ImportError:
        evaluate = None
    if evaluate is not None:
        result = evaluate(records, metrics, max_concurrency=concurrency, show_progress=False)
        return {
            m.key: [math.nan if v is None else float(v) for v in result[m.key]] for m in metrics
        }

    from langchain_ragmetrics._engine import Job, ScoringEngine
    from langchain_ragmetrics.schema import coerce_sample

    samples = [coerce_sample(r) for r in records]
    jobs = [Job(s, m) for s in samples for m in metrics]
    results = asyncio.run(ScoringEngine(max_concurrency=concurrency).arun(jobs))
    out: dict[str, list[float]] = {m.key: [] for m in metrics}
    for job, res in zip(jobs, results, strict=True):
        out[job.metric.key].append(math.nan if res.score is None else float(res.score))
    return out


async def _floor(base_url: str, calls: int, concurrency: int) -> None:
    """``calls`` bare openai-SDK requests (4,500-character prompt), ``concurrency`` at a time."""
    import openai

    client = openai.AsyncOpenAI(
        base_url=base_url, api_key="test", default_headers={"x-bench-side": "floor"}
    )
    gate = asyncio.Semaphore(concurrency)
    content = "Rate this passage. " * 237

    async def one() -> None:
        async with gate:
            await client.chat.completions.create(
                model="judge-model", messages=[{"role": "user", "content": content}]
            )

    await asyncio.gather(*(one() for _ in range(calls)))
    await client.close()


def floor(base_url: str, calls: int, concurrency: int) -> dict[str, Any]:
    """The harness floor: the wall time of the same number of calls with no framework at all."""
    asyncio.run(_floor(base_url, concurrency, concurrency))  # warm-up: imports, connections
    start, cpu = time.perf_counter(), time.process_time()
    asyncio.run(_floor(base_url, calls, concurrency))
    return {
        "calls": calls,
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu,
    }


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
    args = parser.parse_args(argv)

    if args.mode == "floor":
        emit(floor(args.base_url, args.calls, args.concurrency))
        return 0
    records = load(args.dataset, samples=args.samples)
    if args.mode == "economy":
        start = time.perf_counter()
        scores = run_evaluate(records, _metrics(args.base_url), args.concurrency)
        wall = time.perf_counter() - start
        emit({"samples": len(records), "wall_s": wall, "scores": _summary(scores)})
        return 0
    warmup = load(samples=4)  # the shipped samples: the timed run's texts stay unseen
    run_evaluate(warmup, _metrics(args.base_url, SIDE + WARMUP), args.concurrency)
    metrics = _metrics(args.base_url)
    start, cpu = time.perf_counter(), time.process_time()
    scores = run_evaluate(records, metrics, args.concurrency)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    emit({"samples": len(records), "wall_s": wall, "cpu_s": cpu, "scores": _summary(scores)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
