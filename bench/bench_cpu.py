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


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.tiny else REPEATS)
    records = load(samples=4 if args.tiny else None)
    results = {
        name: _timed(fn, repeats, count) for name, (fn, count) in build_cases(records).items()
    }
    rows = [[name, r["us_per_sample"]] for name, r in results.items()]
    text = (
        f"{len(records)} samples (5 contexts of ~600 characters each; 35 English, 15 Japanese), "
        f"median of {repeats} passes, CPU time (`time.process_time`).\n\n"
        + table(["part", "CPU us / sample"], rows)
    )
    publish(
        args.out,
        "cpu",
        "CPU per sample (deterministic parts)",
        text,
        {"samples": len(records), "cases": results},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
