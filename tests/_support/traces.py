"""Fill the LangSmith stub with real traces: a RAG chain traced by LangChain's own tracer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import langsmith
from langchain_core.tracers import LangChainTracer

from tests._support.langsmith_stub import LangSmithStub
from tests._support.rag import question

__all__ = ["retriever_runs", "trace_questions"]


def trace_questions(
    stub: LangSmithStub,
    chain: Any,
    project: str,
    items: range,
    *,
    trace_ids: Sequence[UUID] | None = None,
    **invoke: Any,
) -> list[dict[str, Any]]:
    """Ask ``chain`` about each item with a tracer to ``project``; returns the retriever runs.

    ``trace_ids`` gives each item's trace (root run) id, in order (default: random ids).
    Waits until the stub holds every trace (root and retriever finished).
    """
    client = langsmith.Client(api_url=stub.url, api_key="test")
    tracer = LangChainTracer(project_name=project, client=client)
    try:
        for k, i in enumerate(items):
            config = {"callbacks": [tracer], **invoke}
            if trace_ids is not None:
                config["run_id"] = trace_ids[k]
            chain.invoke(question(i), config=config)
        tracer.wait_for_futures()
        client.flush()
    finally:
        client.close(timeout=10)
    wanted = {question(i) for i in items}

    def arrived() -> list[dict[str, Any]]:
        runs = [r for r in retriever_runs(stub) if r["inputs"].get("query") in wanted]
        # Ended, with what it ended with: a run's end can reach the stub in more than one
        # request (seen with the v2 backend: end_time before outputs).
        done = [r for r in runs if _ended(r) and stub.run(r["trace_id"])]
        roots = [stub.run(r["trace_id"]) or {} for r in done]
        finished = len(done) == len(wanted) and all(root.get("end_time") for root in roots)
        return runs if finished else []

    return stub.wait_for(arrived, timeout=30)


def _ended(run: dict[str, Any]) -> bool:
    """Whether the stub holds the run's end: its end time, and its outputs or error."""
    return bool(run.get("end_time")) and (run.get("outputs") is not None or bool(run.get("error")))


def retriever_runs(stub: LangSmithStub) -> list[dict[str, Any]]:
    """Every retriever run the stub holds."""
    return [r for r in stub.runs() if r.get("run_type") == "retriever"]
