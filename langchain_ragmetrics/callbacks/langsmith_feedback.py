"""A sink that logs each online result as LangSmith feedback, built to ride out outages.

It runs on its own delivery thread (see ``_outbox``), so LangSmith being slow or down never
delays scoring or the other sinks. Every request is bounded by a timeout; transient
failures are retried with backoff; after ``failure_threshold`` failed requests in a row a
circuit breaker pauses sending for ``cooldown`` seconds, during which results are dropped
and counted (``stats.sinks["LangSmithFeedbackSink"].dropped``) instead of piling up.
Feedback ids are derived from (retriever run id, metric key), so a retried send can never
create a duplicate: LangSmith answers 409 for an id it has, which counts as delivered.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from typing_extensions import override

from langchain_ragmetrics._ids import feedback_id
from langchain_ragmetrics.callbacks._breaker import CircuitBreaker
from langchain_ragmetrics.callbacks._records import OnlineResult
from langchain_ragmetrics.callbacks._stats import FailureLog, logger
from langchain_ragmetrics.callbacks.sinks import BaseSink, SinkUnavailableError

if TYPE_CHECKING:
    from langsmith import Client

__all__ = ["LangSmithFeedbackSink"]

_PROJECT_RETRY_SECONDS = 30.0
_MAX_BACKOFF_SECONDS = 8.0


def _env(name: str) -> str | None:
    """``LANGSMITH_<name>`` or ``LANGCHAIN_<name>`` from the environment, if set."""
    for prefix in ("LANGSMITH_", "LANGCHAIN_"):
        value = os.environ.get(prefix + name, "").strip()
        if value:
            return value
    return None


class _ThreadFilter(logging.Filter):
    """Drops the SDK's per-failure ERROR log for calls made by one thread (we count them)."""

    def __init__(self, thread_id: int) -> None:
        super().__init__()
        self.thread_id = thread_id

    @override
    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.thread_id


class LangSmithFeedbackSink(BaseSink):
    """One LangSmith feedback per metric per scored retrieval, via ``Client.create_feedback``.

    Feedback carries ``key`` = metric name, ``score``, ``comment`` = the reason,
    ``feedback_source_type="model"`` and ``source_info`` with the judge model, the metric
    details, usage and the retrieval. It is attached to the retriever run (``run="retriever"``)
    or to the trace's root run (``run="root"``), with ``trace_id`` and a stable
    ``feedback_id`` (from the retriever run id and the metric key). Failed results are sent
    with ``error=True`` and no score; skipped results (nothing to assess) are not sent.

    Without ``client``, the sink builds its own from the environment (``LANGSMITH_API_KEY``,
    ``LANGSMITH_ENDPOINT``) with a request timeout of ``timeout`` seconds, no transport
    retries and no background batching, so that every send has a known outcome; without an
    API key it disables itself with one warning at construction (results are counted as
    dropped). A client you pass is used as it is: if it batches in the background (the
    default ``langsmith.Client``), feedback with a trace id rides its batches, and a
    result counts as delivered once handed to that client.

    The project id (``session_id``) is resolved once, on the sink's thread, from
    ``project_name`` (default: ``LANGSMITH_PROJECT`` or "default"); while it cannot be
    found it is retried every 30 s and feedback goes without it meanwhile.

    Args:
        client: A ``langsmith.Client``; default: built from the environment on first use.
        run: Which run the feedback is about: the retriever run or the root run.
        project_name: The project the user's runs are traced to.
        timeout: Seconds allowed per request (connect and read) of the client we build.
        max_retries: Retries of a failed send (with exponential backoff and jitter).
        failure_threshold: Failed requests in a row that open the circuit breaker.
        cooldown: Seconds the breaker stays open before one send is tried again.
        backoff: First retry delay in seconds (doubled each retry, at most 8 s).
    """

    def __init__(
        self,
        client: Client | None = None,
        *,
        run: Literal["retriever", "root"] = "retriever",
        project_name: str | None = None,
        timeout: float = 10.0,
        max_retries: int = 2,
        failure_threshold: int = 5,
        cooldown: float = 30.0,
        backoff: float = 0.5,
    ) -> None:
        if run not in ("retriever", "root"):
            msg = f"`run` must be 'retriever' or 'root', got {run!r}"
            raise ValueError(msg)
        if not timeout > 0:
            msg = f"`timeout` must be positive, got {timeout!r}"
            raise ValueError(msg)
        if max_retries < 0:
            msg = f"`max_retries` must be >= 0, got {max_retries!r}"
            raise ValueError(msg)
        if backoff < 0:
            msg = f"`backoff` must be >= 0, got {backoff!r}"
            raise ValueError(msg)
        self.run = run
        self.project_name = project_name
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.breaker = CircuitBreaker(threshold=failure_threshold, cooldown=cooldown)
        self._client = client
        self._owns_client = client is None
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._project_id: UUID | None = None
        self._next_project_attempt = 0.0
        self._failures = FailureLog()
        self.disabled_reason: str | None = None
        # Read now, not through langsmith.utils.get_env_var: that caches per process.
        self._api_key = _env("API_KEY")
        self._api_url = _env("ENDPOINT")
        if client is None and self._api_key is None:
            self.disabled_reason = "no LangSmith API key (set LANGSMITH_API_KEY or pass client=...)"
            logger.warning(
                "LangSmithFeedbackSink disabled: %s; results meant for LangSmith are "
                "dropped and counted in stats.sinks['LangSmithFeedbackSink'].dropped",
                self.disabled_reason,
            )

    @property
    def enabled(self) -> bool:
        """False when the sink disabled itself (no API key)."""
        return self.disabled_reason is None

    @property
    def client(self) -> Client:
        """The LangSmith client (built from the environment on first use).

        The client we build has a request timeout, no transport retries (this sink retries
        with its own backoff and breaker) and no background batching.
        """
        with self._lock:
            if self._client is None:
                from langsmith import Client
                from langsmith.schemas import LangSmithInfo
                from urllib3.util.retry import Retry

                millis = max(1, round(self.timeout * 1000))
                self._client = Client(
                    api_url=self._api_url,
                    api_key=self._api_key,
                    timeout_ms=(millis, millis),
                    retry_config=Retry(total=0, raise_on_status=False),
                    auto_batch_tracing=False,
                    info=LangSmithInfo(),  # no GET /info round trip: nothing here needs it
                )
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
        from langsmith.utils import LangSmithNotFoundError

        name = self._project_name()
        try:
            self._project_id = UUID(str(self.client.read_project(project_name=name).id))
        except Exception as exc:
            if not isinstance(exc, LangSmithNotFoundError):
                self._failed_request()  # LangSmith down, not just a project not made yet
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
        failed = result.failed
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
            "feedback_id": feedback_id(item.run_id, result.metric),
            "feedback_source_type": "model",
            "source_info": source_info,
            "error": True if failed else None,
        }

    @override
    def emit(self, item: OnlineResult) -> None:
        if self.disabled_reason is not None:
            raise SinkUnavailableError(self.disabled_reason)
        kwargs = self.feedback_kwargs(item)
        if kwargs is None:
            return
        if self.breaker.is_open:
            msg = f"LangSmith circuit open, next try in {self.breaker.retry_in:.0f} s"
            raise SinkUnavailableError(msg)
        self._send(kwargs)

    def _send(self, kwargs: dict[str, Any]) -> None:
        """Send one feedback: retried with backoff, counted by the breaker."""
        from langsmith.utils import (
            LangSmithAuthError,
            LangSmithConflictError,
            LangSmithUserError,
        )

        attempt = 0
        while True:
            try:
                self._create(kwargs)
            except LangSmithConflictError:
                pass  # LangSmith has this feedback id already: an earlier try got through
            except (LangSmithAuthError, LangSmithUserError):
                self._failed_request()
                raise  # retrying cannot help
            except Exception:
                if self._failed_request() or attempt >= self.max_retries:
                    raise
                delay = min(_MAX_BACKOFF_SECONDS, self.backoff * 2**attempt)
                attempt += 1
                if self._closing.wait(delay * (0.5 + random.random() / 2)):  # noqa: S311
                    raise
                continue
            if self.breaker.success():
                logger.warning("LangSmithFeedbackSink: LangSmith answers again; sending resumed")
            return

    def _create(self, kwargs: dict[str, Any]) -> None:
        import langsmith.client

        session_id = self.project_id()
        if self.breaker.is_open:  # the project lookup just found LangSmith down
            msg = f"LangSmith circuit open, next try in {self.breaker.retry_in:.0f} s"
            raise SinkUnavailableError(msg)
        quiet = _ThreadFilter(threading.get_ident())
        sdk_logger = langsmith.client.logger
        sdk_logger.addFilter(quiet)
        try:
            self.client.create_feedback(**kwargs, session_id=session_id, stop_after_attempt=1)
        finally:
            sdk_logger.removeFilter(quiet)

    def _failed_request(self) -> bool:
        """Count a failed request; True (and one warning) when it opened the breaker."""
        opened = self.breaker.failure()
        if opened:
            logger.warning(
                "LangSmithFeedbackSink: %d failed requests in a row; pausing %.0f s, "
                "results are dropped and counted meanwhile",
                self.breaker.threshold,
                self.breaker.cooldown,
            )
        return opened

    @override
    def flush(self, timeout: float | None = None) -> None:
        if self._client is not None and not self._owns_client:
            self._client.flush(timeout=timeout)

    @override
    def close(self, timeout: float | None = None) -> None:
        self._closing.set()
        self.flush(timeout)
        if self._owns_client and self._client is not None:
            self._client.close(timeout=timeout)
