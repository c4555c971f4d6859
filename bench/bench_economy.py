"""Benchmark 1 - judge economy: judge calls and input characters per sample and metric.

Both libraries score the same dataset against the same loopback judge; the judge counts every
request per (side, metric). Our ContextRecall, ContextPrecision (with reference),
ContextEntityRecall and ContextRelevance face RAGAS 0.4.3's LLMContextRecall,
LLMContextPrecisionWithReference, ContextEntityRecall and ContextRelevance.

"Input characters" are everything the judge receives and a provider bills as input: the text of
every message plus the tool / response-format definitions and tool choice sent beside them.
Ours sends its output schema as a tool definition; RAGAS puts its JSON Schema in the prompt
text; both are counted, the same way.

Counts are exact (they do not depend on timing), so one pass per side is enough.
Targets (issue 5): ours <= 0.4x the calls and <= 0.5x the input characters over the four metrics.

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
            for key in ("calls", "message_chars", "schema_chars", "input_chars", "completion_chars")
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
    nan = float("nan")
    rows = []
    for metric in (*METRICS, "total"):
        o = ours[metric]
        t = theirs[metric] if theirs else {}
        rows.append(
            [
                f"**{metric}**" if metric == "total" else metric,
                o["calls"],
                t.get("calls", nan),
                ratio(o["calls"], t.get("calls", 0)),
                o["message_chars"],
                o["schema_chars"],
                o["input_chars"],
                t.get("message_chars", nan),
                t.get("schema_chars", nan),
                t.get("input_chars", nan),
                ratio(o["input_chars"], t.get("input_chars", 0)),
            ]
        )
    headers = [
        "metric (per sample)",
        "calls ours",
        "calls RAGAS",
        "ratio",
        "message chars ours",
        "tool schema chars ours",
        "input chars ours",
        "message chars RAGAS",
        "tool schema chars RAGAS",
        "input chars RAGAS",
        "input chars ratio",
    ]
    n = sides["ours"]["samples"]
    parts = [
        f"Per sample, over {n} samples; exact counts (one pass per side). Input chars = the text "
        "of every message + the tool / response-format definitions and tool choice beside them "
        "(RAGAS puts its JSON Schema in the message text, ours sends it as a tool).",
        table(headers, rows),
    ]
    if theirs:
        total_o, total_t = ours["total"], theirs["total"]
        calls = ratio(total_o["calls"], total_t["calls"])
        chars = ratio(total_o["input_chars"], total_t["input_chars"])
        parts.append(
            f"Targets: calls <= {CALLS_TARGET}x RAGAS -> {calls:.2f}x "
            f"({'met' if calls <= CALLS_TARGET else 'MISSED'}); input characters <= "
            f"{CHARS_TARGET}x RAGAS -> {chars:.2f}x "
            f"({'met' if chars <= CHARS_TARGET else 'MISSED'})."
        )
    else:
        parts.append("RAGAS was not run (--no-ragas): no ratio, no verdict on the targets.")
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
