"""Benchmark 6 - long contexts: sentence segmentation and ContextRelevance's judge input.

What is timed (CPU time, ``time.process_time``; the segmentation memo is emptied before each
pass, so every text is new):

* one whole-text pysbd pass, as ``segment`` worked before (quadratic in the length);
* ``langchain_ragmetrics._text.segment``: pysbd over bounded windows (linear);
* ``ContextRelevance`` preparing its judge input for a sample with one such context, as a
  judged job does (``capped``, then ``plan``): the default caps (20,000 characters per
  context, 60,000 per sample) bound what is segmented and sent.

The text is the shipped dataset's English contexts, repeated to the length. The whole-text
pass is timed once per size (it takes seconds); the others take the median of ``--repeats``.

Usage: ``python bench/bench_long_context.py [--tiny] [--repeats N] [--out DIR]``
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from _common import base_parser, median, publish, ratio, table
from _data import load

SIZES = (25_000, 50_000, 100_000)
WINDOWED_ONLY = (1_000_000,)
TINY_SIZES = (5_000, 10_000)
REPEATS = 3


def _cpu(fn: Callable[[], object], repeats: int) -> float:
    passes = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        passes.append(time.process_time() - start)
    return median(passes)


def main(argv: list[str] | None = None) -> int:
    from langchain_ragmetrics import ContextRelevance, RagSample
    from langchain_ragmetrics._text import _segmenter, clear_segmenter_cache, segment

    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.tiny else REPEATS)
    sizes, huge = (TINY_SIZES, ()) if args.tiny else (SIZES, WINDOWED_ONLY)
    english = " ".join(c for r in load() if r["language"] == "en" for c in r["retrieved_contexts"])
    metric = ContextRelevance()

    def text_of(size: int) -> str:
        return (english * (size // len(english) + 1))[:size]

    def whole_pass(text: str) -> None:
        _segmenter("en").segment(text)

    def windowed(text: str) -> None:
        clear_segmenter_cache()
        segment(text, "en")

    def plan(text: str) -> None:
        clear_segmenter_cache()
        capped, _ = metric.capped(RagSample(question="q", contexts=[text]))
        metric.plan(capped)  # what a judged job does before its call: caps, then the plan

    windowed(english[:2000])  # build the segmenter outside the timings
    rows: list[list[Any]] = []
    cases: dict[str, dict[str, float]] = {}
    for size in (*sizes, *huge):
        text = text_of(size)
        old = _cpu(lambda t=text: whole_pass(t), 1) if size in sizes else float("nan")
        new = _cpu(lambda t=text: windowed(t), repeats)
        capped = _cpu(lambda t=text: plan(t), repeats)
        cases[str(size)] = {"whole_pass_s": old, "windowed_s": new, "plan_capped_s": capped}
        rows.append([f"{size:,}", old, new, ratio(old, new), capped])
    text = (
        "CPU seconds for one English context of the given size (`time.process_time`; "
        f"whole-text pass once, the others median of {repeats}). Ratios are within one run.\n\n"
        + table(
            [
                "characters",
                "whole-text pysbd pass (before)",
                "windowed `segment` (now)",
                "speed-up",
                "ContextRelevance capped + plan (default caps)",
            ],
            rows,
        )
    )
    publish(args.out, "long_context", "Long contexts", text, {"cases": cases})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
