"""Run RAGAS 0.4.3 against the benchmark judge; executed with the RAGAS venv's python.

Not imported by anything: the orchestrating benchmark starts it as a subprocess, hands it the
judge server's URL, and reads the JSON line it prints last. It only needs the standard library
plus what ``pip install ragas==0.4.3 langchain-openai`` brings (and ``bench/_data.py``).

Modes:
    economy     the four metrics once over the dataset, each metric with its own client that
                tags its requests (``x-bench-metric`` header) so the server counts per metric;
    throughput  a warm-up on 4 samples, then one timed ``ragas.evaluate()`` of N samples x 4
                metrics (wall and CPU time); the orchestrator starts one process per repeat.

RAGAS is driven the way its docs show for LangChain models: ``LangchainLLMWrapper`` around
``langchain_openai.ChatOpenAI`` (pointed at the loopback judge), the legacy metric classes from
``ragas.metrics`` (``ragas.evaluate()`` accepts only those; the newer
``ragas.metrics.collections`` classes require an Instructor client and reject LangChain models),
and ``RunConfig(max_workers=...)`` for the concurrency.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import types
import warnings
from typing import Any

os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")  # no telemetry from the benchmark

from _data import DATASET, WARMUP, emit, judge_client, load  # bench/ is the script's own directory

SIDE = "ragas"
METRIC_NAMES = ("context_recall", "context_precision", "context_entity_recall", "context_relevance")


def _patch_langchain_community() -> None:
    """Let ``import ragas`` work with current langchain-community.

    ragas 0.4.3's ``ragas/llms/base.py`` does ``from langchain_community.chat_models.vertexai
    import ChatVertexAI`` only to list Vertex AI among the models that accept ``n``;
    langchain-community 0.4 removed that module (Vertex AI lives in langchain-google-vertexai).
    A stand-in module with a placeholder class keeps the import working; no code path used
    here touches Vertex AI. Nothing is done when the real module exists.
    """
    name = "langchain_community.chat_models.vertexai"
    try:
        __import__(name)
    except ImportError:
        module = types.ModuleType(name)

        class ChatVertexAI:  # placeholder: nothing is ever an instance of it
            """Stand-in for the removed langchain-community Vertex AI chat model."""

        module.ChatVertexAI = ChatVertexAI  # type: ignore[attr-defined]
        sys.modules[name] = module


def _metrics(base_url: str, run_config: Any, side: str = SIDE) -> list[Any]:
    """The four metrics, each with its own client so the judge can count per metric."""
    from ragas.llms import LangchainLLMWrapper
    from ragas.metrics import (
        ContextEntityRecall,
        ContextRelevance,
        LLMContextPrecisionWithReference,
        LLMContextRecall,
    )

    classes = (
        LLMContextRecall,
        LLMContextPrecisionWithReference,
        ContextEntityRecall,
        ContextRelevance,
    )
    return [
        cls(llm=LangchainLLMWrapper(judge_client(base_url, side, name), run_config=run_config))
        for name, cls in zip(METRIC_NAMES, classes, strict=True)
    ]


def _dataset(records: list[dict[str, Any]]) -> Any:
    from ragas import EvaluationDataset

    keep = ("user_input", "retrieved_contexts", "response", "reference", "reference_contexts")
    return EvaluationDataset.from_list([{k: r[k] for k in keep} for r in records])


def _evaluate(dataset: Any, metrics: list[Any], concurrency: int) -> tuple[float, dict[str, Any]]:
    from ragas import RunConfig, evaluate

    start = time.perf_counter()
    result = evaluate(
        dataset,
        metrics=metrics,
        run_config=RunConfig(max_workers=concurrency),
        show_progress=False,
        raise_exceptions=False,
    )
    wall = time.perf_counter() - start
    frame = result.to_pandas()
    summary: dict[str, Any] = {}
    for metric in metrics:
        values = [float(v) for v in frame[metric.name].tolist()]
        ok = [v for v in values if not math.isnan(v)]
        summary[metric.name] = {
            "mean": sum(ok) / len(ok) if ok else None,
            "failed": len(values) - len(ok),
        }
    return wall, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="RAGAS side of the benchmarks")
    parser.add_argument("mode", choices=["economy", "throughput"])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--samples", type=int, default=None)
    parser.add_argument("--dataset", default=str(DATASET), help="dataset JSON file")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args(argv)

    warnings.filterwarnings("ignore", category=DeprecationWarning)
    _patch_langchain_community()
    import ragas
    from ragas import RunConfig

    records = load(args.dataset, samples=args.samples)
    dataset = _dataset(records)
    run_config = RunConfig(max_workers=args.concurrency)
    if args.mode == "economy":
        metrics = _metrics(args.base_url, run_config)
        wall, summary = _evaluate(dataset, metrics, args.concurrency)
        emit(
            {"ragas": ragas.__version__, "samples": len(records), "wall_s": wall, "scores": summary}
        )
        return 0
    warmup = _metrics(args.base_url, run_config, SIDE + WARMUP)
    _evaluate(_dataset(load(samples=4)), warmup, args.concurrency)  # imports, first use
    metrics = _metrics(args.base_url, run_config)
    cpu = time.process_time()
    wall, summary = _evaluate(dataset, metrics, args.concurrency)
    cpu = time.process_time() - cpu
    emit(
        {
            "ragas": ragas.__version__,
            "samples": len(records),
            "wall_s": wall,
            "cpu_s": cpu,
            "scores": summary,
        }
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
