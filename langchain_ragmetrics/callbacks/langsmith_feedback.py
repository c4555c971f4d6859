"""A sink that logs each online result as LangSmith feedback, built to ride out outages.

It runs on its own delivery thread (see ``_outbox``), so LangSmith being slow or down never
delays scoring or the other sinks. Every request is bounded by a timeout; transient
failures are retried with backoff; after ``failure_threshold`` failed requests in a row a
circuit breaker pauses sending for ``cooldown`` seconds, during which results are dropped
and counted (``stats.sinks["LangSmithFeedbackSink"].dropped``) instead of piling up.
The delivery rules (ids, 409, 404 for a run not ingested yet, a later score replacing an
earlier error, the breaker) are the monitor's too: see ``langchain_ragmetrics._langsmith_feedback``.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from functools import partial
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from typing_extensions import override

from langchain_ragmetrics._breaker import CircuitBreaker
from langchain_ragmetrics._langsmith_feedback import (
    DEFAULT_FAILURE_THRESHOLD,
    FeedbackClient,
    FeedbackItem,
    read_environment_once,
)
from langchain_ragmetrics._options import number_above_zero, whole_number
from langchain_ragmetrics._retrieval import OnlineResult
from langchain_ragmetrics.callbacks._stats import FailureLog, logger
from langchain_ragmetrics.callbacks.sinks import BaseSink, SinkUnavailableError

if TYPE_CHECKING:
    from langsmith import Client

__all__ = ["LangSmithFeedbackSink"]

_MAX_MISS_WAIT = 30.0
"""The longest a "no such project" answer is taken as still true (it doubles from backoff,
and never outlasts half the waits of one result's retries: the result looks again)."""
_REMEMBERED_ERRORS = 4096
"""Pairs whose error feedback a sink remembers sending (the most recent ones)."""


def _given(value: str | None) -> str | None:
    """A setting as given, stripped; None when absent or blank (as an unset variable)."""
    stripped = (value or "").strip()
    return stripped or None


def _env(name: str) -> str | None:
    """``LANGSMITH_<name>`` or ``LANGCHAIN_<name>`` from the environment, if set."""
    for prefix in ("LANGSMITH_", "LANGCHAIN_"):
        value = _given(os.environ.get(prefix + name))
        if value:
            return value
    return None


class LangSmithFeedbackSink(BaseSink):
    """One LangSmith feedback per metric per scored retrieval, via ``Client.create_feedback``.

    Feedback carries ``key`` = metric name, ``score``, ``comment`` = the reason,
    ``feedback_source_type="model"`` and ``source_info`` with the judge model, the metric
    details, usage and the retrieval. It is attached to the retriever run (``run="retriever"``)
    or to the trace's root run (``run="root"``), with ``trace_id`` and a stable
    ``feedback_id`` (from the retriever run id and the metric key). Failed results are sent
    with ``error=True`` and no score under an id of their own; a later score of the pair
    sent through this sink replaces it; skipped results (nothing to assess) are not sent.
    Feedback on a run LangSmith has not ingested yet (404) is retried with backoff, up to
    ``ingest_retries`` times, without counting against the breaker.

    Without ``client``, the sink builds its own from ``api_key`` and ``api_url``, or the
    environment (``LANGSMITH_API_KEY``, ``LANGSMITH_ENDPOINT``), with a request timeout of
    ``timeout`` seconds, no transport retries and no background batching, so that every send
    has a known outcome; without an API key it disables itself with one warning at
    construction (results are counted as dropped). A client you pass is used as it is: if it
    batches in the background (the default ``langsmith.Client``), feedback with a trace id
    rides its batches, and a result counts as delivered once handed to that client.

    Feedback goes to the project the runs are traced to (``session_id``, which LangSmith
    requires of feedback on a run): ``project_name``, default ``LANGSMITH_PROJECT`` or
    "default", looked up on the sink's threads and kept once found. A project LangSmith does
    not hold yet is waited for like a run not ingested yet (its first traces create it), with
    one warning, and a result whose project never appears fails with an error that names
    it; a "no such project" answer holds for a window that doubles with each miss.

    A score is one round trip to LangSmith. The sink remembers the pairs it sent an error
    for (its last 4,096 errors), and a later score of such a pair also removes that error: a
    second round trip, only then. An error is two (a read, so that it never lands beside a
    score, then the post). Up to ``max_concurrency`` results are sent at once: one at a
    time, a 100 ms round trip would cap the sink at about 10 scores a second. Results of the
    same (run, metric) pair are still sent one after another, in order.

    Args:
        client: A ``langsmith.Client``; default: built from the environment on first use.
        run: Which run the feedback is about: the retriever run or the root run.
        project_name: The project the user's runs are traced to.
        timeout: Seconds allowed per request (connect and read) of the client we build.
        max_retries: Retries of a failed send (with exponential backoff and jitter).
        failure_threshold: Failed requests in a row that open the circuit breaker.
        cooldown: Seconds the breaker stays open before one send is tried again.
        backoff: First retry delay in seconds (doubled each retry, at most 8 s).
        ingest_retries: Retries of feedback on a run LangSmith has not ingested yet (404),
            and, apart, of the lookup of a project it does not hold yet.
        max_concurrency: Results sent at once (each on a thread of the sink's outbox).
        api_url: The LangSmith endpoint of the client the sink builds; default
            ``LANGSMITH_ENDPOINT`` (or LangSmith's own). Not with ``client``. Blank counts
            as not given.
        api_key: The API key of the client the sink builds; default ``LANGSMITH_API_KEY``.
            Not with ``client``. Blank counts as not given.
    """

    def __init__(
        self,
        client: Client | None = None,
        *,
        run: Literal["retriever", "root"] = "retriever",
        project_name: str | None = None,
        timeout: float = 10.0,
        max_retries: int = 2,
        failure_threshold: int = DEFAULT_FAILURE_THRESHOLD,
        cooldown: float = 30.0,
        backoff: float = 0.5,
        ingest_retries: int = 4,
        max_concurrency: int = 16,
        api_url: str | None = None,
        api_key: str | None = None,
    ) -> None:
        self._options: dict[str, Any] = {
            "run": run,
            "project_name": project_name,
            "timeout": timeout,
            "max_retries": max_retries,
            "failure_threshold": failure_threshold,
            "cooldown": cooldown,
            "backoff": backoff,
            "ingest_retries": ingest_retries,
            "max_concurrency": max_concurrency,
        }
        self.max_concurrency = whole_number("max_concurrency", max_concurrency)
        if run not in ("retriever", "root"):
            msg = f"`run` must be 'retriever' or 'root', got {run!r}"
            raise ValueError(msg)
        number_above_zero("timeout", timeout)
        self.run = run
        self.project_name = project_name
        self.timeout = timeout
        self._client = client
        self._owns_client = client is None
        self._closed = False
        self._lock = threading.Lock()
        self.delivery = FeedbackClient(
            lambda: self.client,
            name="LangSmithFeedbackSink",
            max_retries=max_retries,
            ingest_retries=ingest_retries,
            backoff=backoff,
            failure_threshold=failure_threshold,
            cooldown=cooldown,
        )
        self._project_id: UUID | None = None
        self._project_lock = threading.Lock()  # one lookup at a time, the others wait for it
        self._lookups = 0  # project lookups ended (a send that waited on one sees it ended)
        self._lookup_error: Exception | None = None  # how the last one failed
        self._missing_until = 0.0  # until then "no such project" holds without a request
        self._miss_wait = 0.0
        self._failures = FailureLog()
        self._errors_sent: OrderedDict[tuple[int, str], None] = OrderedDict()
        self._errors_lock = threading.Lock()
        self.disabled_reason: str | None = None
        api_url, api_key = _given(api_url), _given(api_key)
        if client is not None and (api_url is not None or api_key is not None):
            msg = (
                "pass `client` or `api_url` / `api_key` (for the client the sink builds), not both"
            )
            raise ValueError(msg)
        # Read now, not through langsmith.utils.get_env_var: that caches per process. A sink
        # rebuilt in the scoring process is given the values its original read.
        self._api_key = api_key or _env("API_KEY")
        self._api_url = api_url or _env("ENDPOINT")
        if client is None and self._api_key is None:
            self.disabled_reason = (
                "no LangSmith API key (pass api_key=..., set LANGSMITH_API_KEY, or pass client=...)"
            )
            logger.warning(
                "LangSmithFeedbackSink disabled: %s; results meant for LangSmith are "
                "dropped and counted in stats.sinks['LangSmithFeedbackSink'].dropped",
                self.disabled_reason,
            )

    @override
    def for_child_process(self) -> Callable[[], BaseSink] | None:
        """The same sink, built in the scoring process, when this one builds its own client.

        Its requests (about a millisecond of CPU each) then leave the application's
        process. A sink given a ``client``, a disabled one (no API key) and a subclass stay
        in the application's process.
        """
        if type(self) is not LangSmithFeedbackSink or not self._owns_client or not self.enabled:
            return None
        options = {
            **self._options,
            "run": self.run,
            "timeout": self.timeout,
            "max_concurrency": self.max_concurrency,
            # The project this process traces to now (langsmith keeps the first it read),
            # not what the child's environment may say when it starts.
            "project_name": self._project_name(),
        }
        return partial(_rebuilt, {**options, "api_url": self._api_url, "api_key": self._api_key})

    @override
    def after_fork(self) -> None:
        """Start afresh with the same options: new locks, breaker and retry state.

        A client the sink built is built anew (the parent's connections are not shared);
        a client it was given is kept.
        """
        given = None if self._owns_client else self._client
        options = {**self._options, "api_url": self._api_url, "api_key": self._api_key}
        LangSmithFeedbackSink.__init__(self, given, **options)

    @property
    def breaker(self) -> CircuitBreaker:
        """The circuit breaker of this sink's feedback client."""
        return self.delivery.requests.breaker

    @property
    def max_retries(self) -> int:
        """Retries of a failed send."""
        return self.delivery.requests.max_retries

    @property
    def backoff(self) -> float:
        """First retry delay in seconds."""
        return self.delivery.requests.backoff

    @property
    def enabled(self) -> bool:
        """False when the sink disabled itself (no API key)."""
        return self.disabled_reason is None

    @property
    def client(self) -> Client:
        """The LangSmith client (built on first use, from ``api_url`` / ``api_key`` or the env).

        The client we build has a request timeout, no transport retries (this sink retries
        with its own backoff and breaker), no background batching, and the environment's
        HTTP settings (proxies, CA bundle) read once when it is built, not on every request.
        """
        with self._lock:
            if self._client is None:
                from langsmith import Client
                from langsmith.schemas import LangSmithInfo
                from urllib3.util.retry import Retry

                millis = max(1, round(self.timeout * 1000))
                self._client = read_environment_once(
                    Client(
                        api_url=self._api_url,
                        api_key=self._api_key,
                        timeout_ms=(millis, millis),
                        retry_config=Retry(total=0, raise_on_status=False),
                        auto_batch_tracing=False,
                        info=LangSmithInfo(),  # no GET /info round trip: nothing needs it
                    )
                )
            return self._client

    def _project_name(self) -> str:
        if self.project_name is not None:
            return self.project_name
        from langsmith.utils import get_tracer_project

        return str(get_tracer_project())

    def project_id(self) -> UUID | None:
        """The id of the project feedback goes to (None while it cannot be found).

        A lookup when none is known (within a "no such project" window, none is made).
        """
        try:
            return self.session_id()
        except Exception:  # no such project yet, or LangSmith did not answer
            return None

    def session_id(self) -> UUID:
        """The project's id, looked up and kept once found.

        One lookup at a time. A lookup LangSmith did not answer is counted once by the
        breaker, inside the lookup, and the sends that waited on it are told the same
        without a request of their own (they retry after their backoff). A "no such
        project" answer is taken as true, without a request, for a window that doubles
        with each miss (from ``backoff``, never more than half the waits of one result's
        retries nor 30 s; none when results are not retried), so a missing project costs
        a lookup per window, not one per result.

        Raises:
            langsmith.utils.LangSmithNotFoundError: No such project (yet): retried as a run
                not ingested yet.
            Exception: The lookup (this send's, or the one it waited on: the same error)
                failed, already told to the breaker.
            SinkUnavailableError: The breaker is open, or the sink is closing.
        """
        if self._project_id is not None:
            return self._project_id
        lookups = self._lookups
        with self._project_lock:
            if self._project_id is not None:
                return self._project_id  # another thread's lookup just found it
            requests = self.delivery.requests
            requests.refuse_if_open()  # opened while this send waited
            if requests.closing.is_set():
                msg = "LangSmithFeedbackSink: closing, project lookup abandoned"
                raise SinkUnavailableError(msg)
            name = self._project_name()
            failed = self._lookup_error
            if self._lookups != lookups and failed is not None:
                raise failed  # as concurrent.futures hands one failure to every waiter
            if time.monotonic() < self._missing_until:
                raise _unresolved(name, "LangSmith has no such project (yet)")
            return self._look_up(name)

    def _miss_cap(self) -> float:
        """Half the waits of one result's retries of a missing project, at most 30 s.

        So a result's retries outlast a window and one of them looks again. The waits are
        the delays before jitter (each at most 8 s); without retries there is no window.
        """
        requests, total = self.delivery.requests, 0.0
        for attempt in range(requests.not_found_retries or 0):
            total += requests.delay(attempt)
            if total >= 2 * _MAX_MISS_WAIT:
                break
        return min(_MAX_MISS_WAIT, total / 2)

    def _look_up(self, name: str) -> UUID:
        """One lookup of project ``name`` (under the project lock), told to the breaker."""
        from langsmith.utils import LangSmithNotFoundError

        self._lookup_error = None
        try:
            project_id = self.delivery.resolve_project(name)
        except LangSmithNotFoundError as exc:
            self._miss_wait = min(self._miss_cap(), max(self.backoff, 2 * self._miss_wait))
            self._missing_until = time.monotonic() + self._miss_wait
            self._failures.report(
                "project",
                f"LangSmithFeedbackSink: LangSmith has no project {name!r} (yet); feedback "
                "waits for it (the app's first traces create it). If the runs are traced to "
                "another project, set LangSmithFeedbackSink(project_name=...) or "
                "LANGSMITH_PROJECT to it",
            )
            raise _unresolved(name, "LangSmith has no such project (yet)") from exc
        except Exception as exc:
            self._lookup_error = exc
            raise
        finally:
            self._lookups += 1
        self._miss_wait = 0.0
        self._project_id = project_id
        return project_id

    def feedback_item(self, item: OnlineResult) -> FeedbackItem | None:
        """The feedback for a result (None for skipped results)."""
        return FeedbackItem.of(
            item.result,
            run_id=item.run_id if self.run == "retriever" else item.root_run_id,
            key_run_id=item.run_id,
            trace_id=item.trace_id,
            retriever=item.retriever,
        )

    def feedback_kwargs(self, item: OnlineResult) -> dict[str, Any] | None:
        """The ``create_feedback`` arguments for a result (None for skipped results)."""
        feedback = self.feedback_item(item)
        return None if feedback is None else feedback.kwargs()

    @override
    def emit(self, item: OnlineResult) -> None:
        if self.disabled_reason is not None:
            raise SinkUnavailableError(self.disabled_reason)
        if self._closed:  # used again after a close (a new handler): retries work again
            with self._lock:
                self._closed = False
                self.delivery.requests.closing.clear()
        feedback = self.feedback_item(item)
        if feedback is None:
            return
        self.delivery.requests.refuse_if_open()
        erred = self._error_sent(feedback)
        # Known: the id itself (no call through the retry rules, which would count an
        # answer nobody gave); else the lookup, tried first under those rules.
        session = self._project_id or self.session_id
        self.delivery.send(feedback, session_id=session, clear_stale_error=erred)
        if erred and not feedback.failed:  # the error it sent is gone: nothing to remember
            with self._errors_lock:
                self._errors_sent.pop((feedback.key_run_id.int, feedback.metric), None)

    def _error_sent(self, feedback: FeedbackItem) -> bool:
        """Whether this sink sent an error for the pair (an error is noted before it goes).

        Only then can a score leave a stale error behind, so only then does it cost the
        request that removes it. An error is noted before it is sent: a send that failed
        may still have landed.
        """
        pair = (feedback.key_run_id.int, feedback.metric)
        with self._errors_lock:
            if not feedback.failed:
                return pair in self._errors_sent
            self._errors_sent[pair] = None
            self._errors_sent.move_to_end(pair)
            if len(self._errors_sent) > _REMEMBERED_ERRORS:
                self._errors_sent.popitem(last=False)
            return True

    @override
    def order_key(self, item: OnlineResult) -> Hashable:
        """The (run, metric) pair: its error and its score must not pass each other."""
        return (item.run_id, item.result.metric)

    @override
    def flush(self, timeout: float | None = None) -> None:
        if self._client is not None and not self._owns_client:
            self._client.flush(timeout=timeout)

    @override
    def close(self, timeout: float | None = None) -> None:
        self._closed = True
        self.delivery.requests.closing.set()
        self.flush(timeout)
        with self._lock:
            client = self._client if self._owns_client else None
            if client is not None:
                self._client = None  # a later use builds a new one
        if client is not None:
            client.close(timeout=timeout)


def _rebuilt(options: dict[str, Any]) -> LangSmithFeedbackSink:
    """A sink with ``options``, the original's credentials among them (in the scoring process)."""
    return LangSmithFeedbackSink(**options)


def _unresolved(name: str, why: str) -> Exception:
    """The error of a project not known yet: retried as "not there yet", not an outage."""
    from langsmith.utils import LangSmithNotFoundError

    return LangSmithNotFoundError(
        f"project {name!r} not found: {why}. Feedback goes to the project the runs are "
        "traced to; set LangSmithFeedbackSink(project_name=...) or LANGSMITH_PROJECT to it"
    )
