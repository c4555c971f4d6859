"""One online-overhead measurement in a fresh process (started by ``bench_online.py``).

The user's app is an LCEL RAG chain: a retriever that returns a dataset sample's five
contexts, a prompt, an instant fake chat model and a string parser. The loopback judge and
LangSmith stub live in the orchestrating process, so this process holds only what a user's
process would.

Modes:
    latency   ``--invocations`` timed ``chain.invoke`` calls (after a warm-up) with one of the
              configs ``none`` / ``noop`` (a do-nothing handler: LangChain's own cost of any
              callback) / ``handler`` / ``capture`` (our handler with sample_rate 0: the
              callback path alone, no background scoring) / ``isolated`` (our handler in
              its isolated mode: scoring in a child process) / ``tracer``, each call paired
              with one without callbacks in the same process; prints every latency. Our
              handler configs flush once after the warm-up (so every timed loop starts
              with an empty queue and, isolated, a started child).
    memory    our handler scoring ``--traces`` traces in batches (flushed after each batch);
              prints the RSS after a warm-up and after the last batch once the queue drained.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import resource
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _data import emit, load  # bench/ is the script's own directory

WARMUP = 100
MEMORY_WARMUP = 1_000
BATCH = 500


def build_chain(records: list[dict[str, Any]]) -> tuple[Any, list[str]]:
    """The user's RAG chain and the questions to ask it.

    The retriever is a real ``BaseRetriever`` (it emits the retriever callbacks the handler
    listens to) that looks the question up in the dataset and returns that sample's five
    contexts as ``Document``s with ids: a few microseconds, so the chain itself stays fast and
    the callbacks' cost is what the measurement sees.
    """
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.language_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnablePassthrough

    class LookupRetriever(BaseRetriever):
        """Returns the dataset's retrieved contexts for a known question."""

        table: dict[str, list[Document]]

        def _get_relevant_documents(
            self,
            query: str,
            *,
            run_manager: CallbackManagerForRetrieverRun,  # noqa: ARG002 - the base's signature
        ) -> list[Document]:
            return self.table.get(query, [])

    table = {
        r["user_input"]: [
            Document(page_content=text, id=doc_id)
            for doc_id, text in zip(
                r["retrieved_context_ids"], r["retrieved_contexts"], strict=True
            )
        ]
        for r in records
    }
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Answer from these passages:\n{context}"), ("human", "{question}")]
    )
    model = FakeListChatModel(responses=[r["response"] for r in records])

    def join(documents: list[Document]) -> str:
        return "\n\n".join(d.page_content for d in documents)

    chain = (
        {"context": LookupRetriever(table=table) | join, "question": RunnablePassthrough()}
        | prompt
        | model
        | StrOutputParser()
    )
    return chain, list(table)


def _judge(base_url: str) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model="judge-model", base_url=base_url, api_key="test", temperature=0, timeout=60
    )


def bench_setup(judge_url: str) -> Any:
    """What the isolated handler's child scores with: the ``handler`` config's metrics and sink.

    Module-level so the child (started with ``spawn``) can import it by name.
    """
    from langchain_ragmetrics import ContextPrecision, ContextRelevance, InMemorySink
    from langchain_ragmetrics.callbacks import ScoringSetup

    judge = _judge(judge_url)
    return ScoringSetup(
        metrics=[ContextRelevance(llm=judge), ContextPrecision(llm=judge)], sinks=[InMemorySink()]
    )


def child_rss_mib(handler: Any) -> float | None:
    """RSS of the isolated handler's child process (None when there is none)."""
    pid = getattr(handler._background, "child_pid", None)
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def make_callbacks(config: str, args: argparse.Namespace) -> tuple[list[Any], Any]:
    """The callbacks of a config, and a closer to call after the timed loop."""
    if config == "none":
        return [], dict
    if config == "noop":
        from langchain_core.callbacks import BaseCallbackHandler

        class Noop(BaseCallbackHandler):
            """Does nothing: what LangChain itself spends on any attached handler."""

            run_inline = True

        return [Noop()], dict
    if config == "isolated":
        from langchain_ragmetrics import RagMetricsCallbackHandler
        from langchain_ragmetrics.callbacks import ProcessIsolation

        isolated = RagMetricsCallbackHandler(
            isolation=ProcessIsolation(setup=partial(bench_setup, args.judge_url)),
            sample_rate=1.0,
        )

        def close_isolated() -> dict[str, Any]:
            stats = isolated.stats
            child_rss = child_rss_mib(isolated)
            isolated.close(timeout=args.close_timeout)
            return {
                "handler_stats_at_loop_end": stats.model_dump(mode="json"),
                "child_rss_mib": child_rss,
            }

        return [isolated], close_isolated
    if config in ("handler", "capture"):
        from langchain_ragmetrics import (
            ContextPrecision,
            ContextRelevance,
            InMemorySink,
            RagMetricsCallbackHandler,
        )

        judge = _judge(args.judge_url)
        handler = RagMetricsCallbackHandler(
            metrics=[ContextRelevance(llm=judge), ContextPrecision(llm=judge)],
            sinks=[InMemorySink()],
            # "capture": the callbacks record and correlate every run, nothing is scored.
            sample_rate=1.0 if config == "handler" else 0.0,
        )

        def close_handler() -> dict[str, Any]:
            stats = handler.stats
            handler.close(timeout=args.close_timeout)
            return {"handler_stats_at_loop_end": stats.model_dump(mode="json")}

        return [handler], close_handler
    from langchain_core.tracers import LangChainTracer
    from langsmith import Client

    client = Client(api_url=args.langsmith_url, api_key="test")
    tracer = LangChainTracer(client=client, project_name="bench-online")

    def close_tracer() -> dict[str, Any]:
        client.flush()
        client.close()
        return {}

    return [tracer], close_tracer


def latency(args: argparse.Namespace) -> dict[str, Any]:
    """Time ``--invocations`` calls of the chain under one config.

    Each timed call with the config's callbacks is paired with one call without callbacks,
    alternately, in the same process: the paired difference cancels the machine's drift and
    any background load of the process, leaving what the callbacks cost on the caller's thread.
    """
    chain, questions = build_chain(load())
    callbacks, close = make_callbacks(args.config, args)
    asks = itertools.cycle(questions)
    for _ in range(args.warmup):
        chain.invoke(next(asks), {"callbacks": callbacks})
        chain.invoke(next(asks), {"callbacks": []})
    settled = None
    for callback in callbacks:
        if hasattr(callback, "flush") and hasattr(callback, "stats"):  # our handler
            settled = callback.flush(timeout=args.settle_timeout)
    times: dict[str, list[float]] = {"with": [], "without": []}
    for i in range(2 * args.invocations):
        key, config = ("with", callbacks) if i % 2 == 0 else ("without", [])
        question = next(asks)
        start = time.perf_counter()
        chain.invoke(question, {"callbacks": config})
        times[key].append(time.perf_counter() - start)
    return {
        "config": args.config,
        "latencies_s": times["with"],
        "paired_baseline_s": times["without"],
        "settled_after_warmup": settled,
        "rss_mib": rss_mib(),
        **close(),
    }


def rss_mib() -> float:
    """Current resident set size (Linux ``/proc``; elsewhere the peak from getrusage)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory(args: argparse.Namespace) -> dict[str, Any]:
    """RSS growth of a process whose handler scores ``--traces`` traces."""
    from langchain_ragmetrics import CallableSink, ContextPrecision, RagMetricsCallbackHandler

    chain, questions = build_chain(load())
    delivered = 0

    def count(_result: Any) -> None:
        nonlocal delivered
        delivered += 1

    handler = RagMetricsCallbackHandler(
        metrics=[ContextPrecision(llm=_judge(args.judge_url))],
        sinks=[CallableSink(count)],
        sample_rate=1.0,
        max_queue_size=BATCH,
    )
    config = {"callbacks": [handler]}
    asks = itertools.cycle(questions)

    def run(traces: int) -> None:
        for start in range(0, traces, BATCH):
            for _ in range(min(BATCH, traces - start)):
                chain.invoke(next(asks), config)
            handler.flush()

    run(min(MEMORY_WARMUP, args.traces))
    gc.collect()
    before = rss_mib()
    samples = [(0, before)]
    done = 0
    started = time.perf_counter()
    while done < args.traces:
        step = min(2_000, args.traces - done)
        run(step)
        done += step
        gc.collect()
        samples.append((done, rss_mib()))
    elapsed = time.perf_counter() - started
    stats = handler.stats
    handler.close(timeout=args.close_timeout)
    return {
        "traces": args.traces,
        "rss_before_mib": before,
        "rss_after_mib": samples[-1][1],
        "growth_mib": samples[-1][1] - before,
        "rss_curve": samples,
        "elapsed_s": elapsed,
        "delivered": delivered,
        "handler_stats": stats.model_dump(mode="json"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one online-overhead measurement")
    parser.add_argument("mode", choices=["latency", "memory"])
    parser.add_argument(
        "--config",
        choices=["none", "noop", "handler", "capture", "isolated", "tracer"],
        default="none",
    )
    parser.add_argument("--judge-url", default="")
    parser.add_argument("--langsmith-url", default="")
    parser.add_argument("--invocations", type=int, default=2_000)
    parser.add_argument("--traces", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=WARMUP, help="untimed invocations first")
    parser.add_argument("--close-timeout", type=float, default=1.0)
    parser.add_argument(
        "--settle-timeout",
        type=float,
        default=180.0,
        help="our handler: flush after the warm-up for at most this long",
    )
    args = parser.parse_args(argv)
    emit(latency(args) if args.mode == "latency" else memory(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
