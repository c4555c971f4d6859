"""A sink that logs each online result as LangSmith feedback on the scored run."""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from typing_extensions import override

from langchain_ragmetrics.callbacks._records import OnlineResult
from langchain_ragmetrics.callbacks._stats import FailureLog
from langchain_ragmetrics.callbacks.sinks import BaseSink

if TYPE_CHECKING:
    from langsmith import Client

__all__ = ["LangSmithFeedbackSink"]

_PROJECT_RETRY_SECONDS = 30.0


class LangSmithFeedbackSink(BaseSink):
    """One LangSmith feedback per metric per scored retrieval, via ``Client.create_feedback``.

    Feedback carries ``key`` = metric name, ``score``, ``comment`` = the reason,
    ``feedback_source_type="model"`` and ``source_info`` with the judge model, the metric
    details, usage and the retrieval. It is attached to the retriever run (``run="retriever"``)
    or to the trace's root run (``run="root"``) and sent with ``trace_id``, so the SDK
    batches it in the background alongside LangChain's own tracer. Failed results are sent
    with ``error=True`` and no score; skipped results (no reference ...) are not sent.

    The project id (``session_id``) is resolved once, on the sink thread, from
    ``project_name`` (default: ``LANGSMITH_PROJECT`` or "default"); if the project does
    not exist yet it is retried every 30 s and feedback goes without it meanwhile.

    Args:
        client: A ``langsmith.Client``; default ``Client()`` from the environment, built on
            first use.
        run: Which run the feedback is about: the retriever run or the root run.
        project_name: The project the user's runs are traced to.
    """

    def __init__(
        self,
        client: Client | None = None,
        *,
        run: Literal["retriever", "root"] = "retriever",
        project_name: str | None = None,
    ) -> None:
        if run not in ("retriever", "root"):
            msg = f"`run` must be 'retriever' or 'root', got {run!r}"
            raise ValueError(msg)
        self.run = run
        self.project_name = project_name
        self._client = client
        self._owns_client = client is None
        self._lock = threading.Lock()
        self._project_id: UUID | None = None
        self._next_project_attempt = 0.0
        self._failures = FailureLog()

    @property
    def client(self) -> Client:
        """The LangSmith client (built from the environment on first use)."""
        with self._lock:
            if self._client is None:
                from langsmith import Client

                self._client = Client()
            return self._client

    def _project_name(self) -> str:
        if self.project_name is not None:
            return self.project_name
        from langsmith.utils import get_tracer_project

        return str(get_tracer_project())

    def project_id(self) -> UUID | None:
        """The project id, resolved once (retried every 30 s while it cannot be found)."""
        if self._project_id is not None or time.monotonic() < self._next_project_attempt:
            return self._project_id
        name = self._project_name()
        try:
            self._project_id = UUID(str(self.client.read_project(project_name=name).id))
        except Exception as exc:
            self._next_project_attempt = time.monotonic() + _PROJECT_RETRY_SECONDS
            self._failures.report(
                "project",
                f"LangSmithFeedbackSink: cannot resolve project {name!r} "
                f"({type(exc).__name__}: {exc}); sending feedback without session_id",
            )
        return self._project_id

    def feedback_kwargs(self, item: OnlineResult) -> dict[str, Any] | None:
        """The ``create_feedback`` arguments for a result (None for skipped results)."""
        result = item.result
        if result.skipped:
            return None
        failed = result.failed or (result.score is not None and math.isnan(result.score))
        run_id = item.run_id if self.run == "retriever" else item.root_run_id
        source_info: dict[str, Any] = {
            "judge": result.judge,
            "metric": result.metric,
            "details": result.details,
            "usage": result.usage.model_dump(),
            "latency_s": result.latency_s,
            "retriever": item.retriever,
            "retriever_run_id": str(item.run_id),
            "library": "langchain-ragmetrics",
        }
        if failed:
            source_info["error"] = result.error
        return {
            "run_id": run_id,
            "key": result.metric,
            "score": None if failed else result.score,
            "comment": f"error: {result.error}" if failed else result.reason,
            "trace_id": item.trace_id,
            "feedback_source_type": "model",
            "source_info": source_info,
            "error": True if failed else None,
        }

    @override
    def emit(self, item: OnlineResult) -> None:
        kwargs = self.feedback_kwargs(item)
        if kwargs is None:
            return
        self.client.create_feedback(**kwargs, session_id=self.project_id())

    @override
    def flush(self, timeout: float | None = None) -> None:
        if self._client is not None:
            self._client.flush(timeout=timeout)

    @override
    def close(self, timeout: float | None = None) -> None:
        self.flush(timeout)
        if self._owns_client and self._client is not None:
            self._client.close(timeout=timeout)
