"""Benchmark 1 - judge economy: judge calls and prompt characters per sample and metric.

Both libraries score the same dataset against the same loopback judge; the judge counts every
request per (side, metric). Our ContextRecall, ContextPrecision (with reference),
ContextEntityRecall and ContextRelevance face RAGAS 0.4.3's LLMContextRecall,
LLMContextPrecisionWithReference, ContextEntityRecall and ContextRelevance.

Counts are exact (they do not depend on timing), so one pass per side is enough.
Targets (issue 5): ours <= 0.4x the calls and <= 0.5x the prompt characters over the four metrics.

Usage: ``python bench/bench_economy.py [--tiny] [--no-ragas] [--out DIR]``
"""

from __future__ import annotations

import sys
from typing import Any

from _common import base_parser, ensure_ragas_venv, publish, ratio, run_driver, table
from _judge import BenchJudge

from langchain_ragmetrics.evaluation import metric_names
from tests._support.openai_server import JudgeServer

METRICS = tuple(metric_names(judged=True))
CALLS_TARGET = 0.4
CHARS_TARGET = 0.5


def _per_sample(tally: dict[str, dict[str, int]], samples: int) -> dict[str, dict[str, float]]:
    out = {}
    for metric in (*METRICS, "total"):
        rows = [tally.get(m, {}) for m in METRICS] if metric == "total" else [tally.get(metric, {})]
        out[metric] = {
            key: sum(r.get(key, 0) for r in rows) / samples
            for key in ("calls", "prompt_chars", "schema_chars", "completion_chars")
        }
    return out


def measure(*, samples: int | None, ragas: bool) -> dict[str, Any]:
    """Run both sides once and return per-sample figures."""
    judge = BenchJudge()
    sides: dict[str, Any] = {}
    with JudgeServer(judge) as server:
        runs = [("ours", sys.executable, "_ours_driver.py")]
        if ragas:
            runs.append(("ragas", str(ensure_ragas_venv()), "_ragas_driver.py"))
        for side, python, script in runs:
            judge.reset()
            server.reset()
            args = ["economy", "--base-url", server.base_url]
            if samples is not None:
                args += ["--samples", str(samples)]
            report = run_driver(python, script, *args)
            stats = server.stats
            n = report["samples"]
            sides[side] = {
                "samples": n,
                "per_sample": _per_sample(judge.tally().get(side, {}), n),
                "scores": report["scores"],
                "tokens_per_sample": {
                    "prompt": stats.prompt_tokens / n,
                    "completion": stats.completion_tokens / n,
                },
                "errors": stats.errors,
                "unknown_prompts": dict(judge.unknown),
            }
    return sides


def render(sides: dict[str, Any]) -> str:
    """Markdown tables of the figures (ours alone when RAGAS was skipped)."""
    ours = sides["ours"]["per_sample"]
    theirs = sides.get("ragas", {}).get("per_sample")
    rows = []
    for metric in (*METRICS, "total"):
        o = ours[metric]
        t = theirs[metric] if theirs else {}
        rows.append(
            [
                f"**{metric}**" if metric == "total" else metric,
                o["calls"],
                t.get("calls", float("nan")),
                ratio(o["calls"], t.get("calls", 0)),
                o["prompt_chars"],
                t.get("prompt_chars", float("nan")),
                ratio(o["prompt_chars"], t.get("prompt_chars", 0)),
                ratio(
                    o["prompt_chars"] + o["schema_chars"],
                    t.get("prompt_chars", 0) + t.get("schema_chars", 0),
                ),
            ]
        )
    headers = [
        "metric (per sample)",
        "calls ours",
        "calls RAGAS",
        "ratio",
        "prompt chars ours",
        "prompt chars RAGAS",
        "ratio",
        "ratio incl. tool schema",
    ]
    parts = [table(headers, rows)]
    if theirs:
        total_o, total_t = ours["total"], theirs["total"]
        calls = ratio(total_o["calls"], total_t["calls"])
        chars = ratio(total_o["prompt_chars"], total_t["prompt_chars"])
        parts.append(
            f"Targets: calls <= {CALLS_TARGET}x -> {calls:.2f}x "
            f"({'met' if calls <= CALLS_TARGET else 'MISSED'}); prompt characters <= "
            f"{CHARS_TARGET}x -> {chars:.2f}x ({'met' if chars <= CHARS_TARGET else 'MISSED'})."
        )
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    samples = 3 if args.tiny else None
    sides = measure(samples=samples, ragas=not args.no_ragas)
    text = render(sides)
    publish(args.out, "economy", "Judge economy", text, {"sides": sides})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
