"""Benchmark 5 - CPU per sample of the deterministic parts, over the shipped dataset.

What is timed (``time.process_time``, all 50 samples per pass, median of ``--repeats`` passes,
reported per sample):

* segmentation: ``langchain_ragmetrics._text.segment`` of the five contexts (pysbd, as
  ContextRelevance does it), for new texts (the package's per-text memo is emptied before each
  pass, which also rebuilds the two pysbd segmenters) and for texts seen before (memo hits);
* judge input: each judged metric's ``plan()`` (payload JSON; ContextRelevance segments here);
* scoring: each judged metric's pure scorer on a parsed judge answer (the answers come from the
  benchmark judge's rules, so their size is realistic), plus the scorer module's formulas;
* the non-LLM metrics end to end through ``invoke`` (Runnable overhead included) and their pure
  part alone: NonLLMContextRecall / NonLLMContextPrecision (rapidfuzz Levenshtein matrix) and
  IDBasedContextRecall / IDBasedContextPrecision.

Side by side (second table): sentence segmentation of every context, per language, through
pysbd's own processor (the path before issue 18) and through ours (``FastProcessor``: pysbd's
steps with compiled regexes and exact guards), both through the same windows and span lookup,
no memo, the two sides alternating within each pass; the sentences are checked equal first.

Usage: ``python bench/bench_cpu.py [--tiny] [--repeats N] [--out DIR]``
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from _common import base_parser, median, publish, table
from _data import load
from _judge import OURS

REPEATS = 7


def _timed(fn: Callable[[], object], repeats: int, per: int) -> dict[str, Any]:
    fn()  # warm caches (segmenters, imports)
    passes = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        passes.append(time.process_time() - start)
    return {"passes_s": passes, "us_per_sample": median(passes) / per * 1e6}


def build_cases(records: list[dict[str, Any]]) -> dict[str, tuple[Callable[[], object], int]]:
    """The timed callables, each with the number of samples one call covers."""
    from langchain_ragmetrics import (
        ContextRelevance,
        IDBasedContextPrecision,
        IDBasedContextRecall,
        NonLLMContextPrecision,
        NonLLMContextRecall,
    )
    from langchain_ragmetrics._schema import coerce_sample
    from langchain_ragmetrics._text import clear_segmenter_cache, segment
    from langchain_ragmetrics.evaluation import metric_from_name, metric_names
    from langchain_ragmetrics.metrics._id_based import id_precision, id_recall

    def cold(fn: Callable[[], object]) -> Callable[[], object]:
        """``fn`` with the segmentation memo emptied first (every text is new again)."""

        def run() -> object:
            clear_segmenter_cache()
            return fn()

        return run

    samples = [coerce_sample(r) for r in records]
    n = len(samples)

    def segment_all() -> object:
        return [segment(c, s.language or "en") for s in samples for c in s.contexts]

    cases: dict[str, tuple[Callable[[], object], int]] = {
        "segmentation (5 contexts), new texts": (cold(segment_all), n),
    }
    for lang in ("en", "ja"):
        subset = [s for s in samples if s.language == lang]
        if subset:
            cases[f"segmentation, new texts, {lang} samples only"] = (
                cold(
                    lambda sub=subset, code=lang: [
                        segment(c, code) for s in sub for c in s.contexts
                    ]
                ),
                len(subset),
            )
    cases["segmentation (5 contexts), texts seen before (memoised)"] = (segment_all, n)
    # A judge is never called here: plan() and score() are pure.
    judged = [metric_from_name(name) for name in metric_names(judged=True)]
    for metric in judged:
        plans = [metric.plan(s) for s in samples]
        answers = []
        for plan in plans:
            call = plan.calls[0]
            data = json.loads(call.variables["payload"])
            answers.append([call.schema.model_validate(OURS[call.schema.__name__](data))])
        plan_all = lambda m=metric: [m.plan(s) for s in samples]  # noqa: E731
        if isinstance(metric, ContextRelevance):
            cases[f"{metric.key}: judge input (plan), new texts"] = (cold(plan_all), n)
            cases[f"{metric.key}: judge input (plan), texts seen before"] = (plan_all, n)
        else:
            cases[f"{metric.key}: judge input (plan)"] = (plan_all, n)
        cases[f"{metric.key}: scorer"] = (
            lambda m=metric, p=plans, a=answers: [m.score(x, y) for x, y in zip(p, a, strict=True)],
            n,
        )
    for metric in (NonLLMContextRecall(), NonLLMContextPrecision()):
        cases[f"{metric.key}: invoke"] = (lambda m=metric: [m.invoke(s) for s in samples], n)
        cases[f"{metric.key}: similarity + score"] = (
            lambda m=metric: [m._evaluate(s, {}) for s in samples],
            n,
        )
    for metric, fn in (
        (IDBasedContextRecall(), id_recall),
        (IDBasedContextPrecision(), id_precision),
    ):
        cases[f"{metric.key}: invoke"] = (lambda m=metric: [m.invoke(s) for s in samples], n)
        cases[f"{metric.key}: score"] = (
            lambda f=fn: [f(s.context_ids or [], s.reference_context_ids or []) for s in samples],
            n,
        )
    return cases


def side_by_side(records: list[dict[str, Any]], repeats: int) -> dict[str, dict[str, Any]]:
    """CPU per context, pysbd's processor vs ours, interleaved, per language (no memo)."""
    from langchain_ragmetrics._schema import coerce_sample
    from langchain_ragmetrics._text import _make_segmenter, segment_in_windows

    samples = [coerce_sample(r) for r in records]
    results: dict[str, dict[str, Any]] = {}
    for lang in ("en", "ja"):
        texts = [c for s in samples if (s.language or "en") == lang for c in s.contexts]
        if not texts:
            continue
        sides = {"pysbd": _make_segmenter(lang, fast=False), "ours": _make_segmenter(lang)}

        def run(segmenter: Any, texts: list[str] = texts) -> list[list[str]]:
            return [
                [p.strip() for p in segment_in_windows(segmenter, t) if p and p.strip()]
                for t in texts
            ]

        if run(sides["pysbd"]) != run(sides["ours"]):  # also the warm-up
            raise AssertionError(f"{lang}: the two sides' sentences differ")
        passes: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(repeats):
            for side, segmenter in sides.items():
                start = time.process_time()
                run(segmenter)
                passes[side].append(time.process_time() - start)
        us = {side: median(p) / len(texts) * 1e6 for side, p in passes.items()}
        results[lang] = {
            "texts": len(texts),
            "chars_per_text": sum(map(len, texts)) / len(texts),
            "passes_s": passes,
            "us_per_text": us,
            "speedup": us["pysbd"] / us["ours"],
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.tiny else REPEATS)
    records = load(samples=4 if args.tiny else None)
    results = {
        name: _timed(fn, repeats, count) for name, (fn, count) in build_cases(records).items()
    }
    rows = [[name, r["us_per_sample"]] for name, r in results.items()]
    paired = side_by_side(records, repeats)
    pair_rows = [
        [lang, r["texts"], r["us_per_text"]["pysbd"], r["us_per_text"]["ours"], r["speedup"]]
        for lang, r in paired.items()
    ]
    text = (
        f"{len(records)} samples (5 contexts of ~600 characters each; 35 English, 15 Japanese), "
        f"median of {repeats} passes, CPU time (`time.process_time`).\n\n"
        + table(["part", "CPU us / sample"], rows)
        + "\n\nSentence segmentation of each context (new texts, no memo), pysbd's processor "
        "vs ours, alternating within each pass; same sentences:\n\n"
        + table(
            ["language", "contexts", "pysbd CPU us / context", "ours CPU us / context", "x less"],
            pair_rows,
        )
    )
    publish(
        args.out,
        "cpu",
        "CPU per sample (deterministic parts)",
        text,
        {"samples": len(records), "cases": results, "segmentation_side_by_side": paired},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
