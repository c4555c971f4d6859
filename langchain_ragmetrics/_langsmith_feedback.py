"""One LangSmith feedback client for the online sink and the monitor: one set of delivery rules.

Both post one feedback per (run, metric) and must agree on what LangSmith ends up holding,
so the rules live here once:

* **Ids.** A score goes under ``feedback_id(run, metric)``, an error under
  ``error_feedback_id(run, metric)``. A retried send meets 409 (LangSmith keeps the first
  feedback of an id) and counts as delivered; because errors never use the score's id, a
  409 on a score always means that score is there.
* **Convergence.** After a score is accepted, the error feedback of the same pair is
  deleted, so a later success replaces an earlier error; a sender that knows no error of
  the pair was posted (the online sink, which remembers the errors it sent) skips that
  request. An error is not posted when a score for the pair is already there.
* **Not ingested yet.** LangSmith answers 404 to feedback on a run it has not ingested yet
  (ingestion is asynchronous; the SDK retries exactly that error). It is retried with
  backoff and is not a breaker failure: LangSmith answered.
* **Retries and breaker.** Every request goes through one
  :class:`~langchain_ragmetrics._guarded.GuardedRequests` (the rules MLflow and Phoenix
  follow too): no answer or a 5xx/429 is retried with backoff and counts as a failure;
  after ``failure_threshold`` failures in a row the breaker opens and sends are refused
  (:class:`~langchain_ragmetrics._errors.SinkUnavailableError`) for ``cooldown`` seconds.
  An auth error or a misuse of the SDK fails at once (retrying cannot help) and counts as
  a failure too, so a wrong key pauses sending instead of costing a request per result.

It lives at package level, below ``callbacks`` (the sink) and ``integrations`` (the
monitor), so both import it without an upward import.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from typing_extensions import override

from langchain_ragmetrics._guarded import Failure, GuardedRequests, classify_status, http_status
from langchain_ragmetrics._ids import FEEDBACK_NAMESPACE, feedback_id
from langchain_ragmetrics._options import whole_number

if TYPE_CHECKING:
    from langsmith import Client

    from langchain_ragmetrics._schema import MetricResult

__all__ = [
    "DEFAULT_FAILURE_THRESHOLD",
    "FeedbackClient",
    "FeedbackItem",
    "classify_langsmith_error",
    "error_feedback_id",
    "read_environment_once",
    "source_info",
]

T = TypeVar("T")

DEFAULT_FAILURE_THRESHOLD = 5
"""Failed requests in a row that open the breaker, for the sink and the monitor alike."""


def error_feedback_id(run_id: uuid.UUID | str, metric: str) -> uuid.UUID:
    """The id of the *error* feedback of one metric on one run (never a score's id)."""
    return uuid.uuid5(FEEDBACK_NAMESPACE, f"{uuid.UUID(str(run_id))}:{metric}:error")


def source_info(
    result: MetricResult, *, retriever: str | None, retriever_run_id: uuid.UUID
) -> dict[str, Any]:
    """What the feedback's ``source_info`` says about a result: judge, details, usage ..."""
    return {
        "judge": result.judge,
        "metric": result.metric,
        "details": result.details,
        "usage": result.usage.model_dump(),
        "latency_s": result.latency_s,
        "retriever": retriever,
        "retriever_run_id": str(retriever_run_id),
        "library": "langchain-ragmetrics",
    }


def read_environment_once(client: Client) -> Client:
    """Pin the environment's HTTP settings on a client we built, read once for its endpoint.

    A ``requests.Session`` that trusts the environment scans every environment variable for
    proxy settings, and looks for ``~/.netrc``, on each request: in a container with a
    hundred variables that is about half the CPU of a feedback request, spent in the app's
    process. The same settings (proxies and ``NO_PROXY``, ``REQUESTS_CA_BUNDLE`` /
    ``CURL_CA_BUNDLE``, netrc credentials) are read here, by requests' own functions, and
    kept on the session; a change to them afterwards is not seen, as with httpx.
    """
    from requests.utils import get_netrc_auth

    session = client.session
    if session.trust_env:
        url = client.api_url
        settings = session.merge_environment_settings(url, {}, None, None, None)
        session.proxies, session.verify = settings["proxies"], settings["verify"]
        if session.auth is None:
            session.auth = get_netrc_auth(url)
        session.trust_env = False
    return client


@dataclass(frozen=True)
class FeedbackItem:
    """One result to post: on ``run_id``, with ids derived from ``key_run_id`` and the metric.

    ``key_run_id`` is the retriever run, also when the feedback is about the root run, so
    the online sink and the monitor derive the same ids for the same retrieval.
    """

    run_id: uuid.UUID
    key_run_id: uuid.UUID
    metric: str
    failed: bool
    score: float | None = None
    comment: str | None = None
    trace_id: uuid.UUID | None = None
    source_info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def feedback_id(self) -> uuid.UUID:
        """The id this item is posted under (the error id for a failed result)."""
        if self.failed:
            return error_feedback_id(self.key_run_id, self.metric)
        return feedback_id(self.key_run_id, self.metric)

    @classmethod
    def of(
        cls,
        result: MetricResult,
        *,
        run_id: uuid.UUID,
        key_run_id: uuid.UUID,
        trace_id: uuid.UUID | None,
        retriever: str | None,
    ) -> FeedbackItem | None:
        """The item for a result (None for a skipped result: nothing to say)."""
        if result.skipped:
            return None
        failed = result.failed
        info = source_info(result, retriever=retriever, retriever_run_id=key_run_id)
        if failed:
            info["error"] = result.error
        return cls(
            run_id=run_id,
            key_run_id=key_run_id,
            metric=result.metric,
            failed=failed,
            score=None if failed else result.score,
            comment=f"error: {result.error}" if failed else result.reason,
            trace_id=trace_id,
            source_info=info,
        )

    def kwargs(self) -> dict[str, Any]:
        """The ``Client.create_feedback`` arguments (without the session)."""
        return {
            "run_id": self.run_id,
            "key": self.metric,
            "score": self.score,
            "comment": self.comment,
            "trace_id": self.trace_id,
            "feedback_id": self.feedback_id,
            "feedback_source_type": "model",
            "source_info": dict(self.source_info),
            "error": True if self.failed else None,
        }


class _ThreadFilter(logging.Filter):
    """Drops the SDK's per-failure ERROR log for calls made by one thread (we count them)."""

    def __init__(self, thread_id: int) -> None:
        super().__init__()
        self.thread_id = thread_id

    @override
    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.thread_id


@contextlib.contextmanager
def _quiet_sdk() -> Iterator[None]:
    import langsmith.client

    quiet = _ThreadFilter(threading.get_ident())
    langsmith.client.logger.addFilter(quiet)
    try:
        yield
    finally:
        langsmith.client.logger.removeFilter(quiet)


class FeedbackClient:
    """Posts feedback to LangSmith under the rules in this module's docstring.

    Args:
        client: A ``langsmith.Client``, or a function that returns one (built on first use).
        name: Who sends (in log messages), e.g. ``"LangSmithFeedbackSink"``.
        max_retries: Retries of a request that got no answer or a 5xx/429.
        ingest_retries: Retries of a 404 (run not ingested yet), with the same backoff.
        backoff: First retry delay in seconds (doubled each retry, at most 8 s, jittered).
        failure_threshold: Failed requests in a row that open the breaker.
        cooldown: Seconds the breaker stays open.
    """

    def __init__(
        self,
        client: Client | Callable[[], Client],
        *,
        name: str,
        max_retries: int = 2,
        ingest_retries: int = 4,
        backoff: float = 0.5,
        failure_threshold: int = DEFAULT_FAILURE_THRESHOLD,
        cooldown: float = 30.0,
    ) -> None:
        whole_number("ingest_retries", ingest_retries, minimum=0)
        self._client = client
        self.name = name
        self.requests = GuardedRequests(
            label=name,
            max_retries=max_retries,
            backoff=backoff,
            failure_threshold=failure_threshold,
            cooldown=cooldown,
            not_found_retries=ingest_retries,
        )
        """The retry, backoff and breaker rules every request goes through."""

    @property
    def client(self) -> Client:
        """The ``langsmith.Client``."""
        return self._client() if callable(self._client) else self._client

    def resolve_project(self, name: str) -> uuid.UUID:
        """The id of project ``name``: one try, told to the breaker (the caller retries).

        Raises:
            langsmith.utils.LangSmithNotFoundError: No such project (LangSmith answered).
            Exception: The request was rejected (LangSmith answered), or LangSmith could not
                answer or refused the key (counted by the breaker), as
                :func:`classify_langsmith_error` sorts it.
        """
        try:
            with _quiet_sdk():
                project = self.client.read_project(project_name=name)
        except Exception as exc:
            if classify_langsmith_error(exc) in ("not_found", "rejected"):
                self.requests.answered()
            else:
                self.requests.failed()
            raise
        self.requests.answered()
        return uuid.UUID(str(project.id))

    def send(
        self,
        item: FeedbackItem,
        *,
        session_id: uuid.UUID | Callable[[], uuid.UUID] | None,
        after_post: Callable[[], None] | None = None,
        clear_stale_error: bool = True,
    ) -> Literal["sent", "superseded"]:
        """Deliver ``item`` (a retried or repeated send never duplicates).

        Returns ``"superseded"`` when ``item`` is an error and the pair already has a
        score (nothing was posted), else ``"sent"``. ``session_id`` may be a function that
        looks the project up: it is called first, retried with a budget of its own
        (``LangSmithNotFoundError`` while the project is not there yet, as a run not
        ingested yet), and it must tell the breaker about its requests itself (it may
        answer from memory, so this call counts nothing). ``after_post`` runs between the POST
        and the clean-up of a stale error (a test hook for a worker killed there).
        ``clear_stale_error=False`` skips that clean-up, a request per score, for a sender
        that knows no error feedback of the pair was posted.

        Raises:
            SinkUnavailableError: The breaker is open.
            Exception: The failure that ended the last try.
        """
        # A lookup tells the breaker itself (it may answer from memory): counted there only.
        session = self._call(session_id, tells_breaker=True) if callable(session_id) else session_id
        if item.failed and self.holds_score(item.key_run_id, item.metric):
            return "superseded"
        kwargs = item.kwargs()
        self._call(lambda: self._post(kwargs, session))
        if after_post is not None:
            after_post()
        if clear_stale_error and not item.failed:
            stale = error_feedback_id(item.key_run_id, item.metric)
            self._call(lambda: self._delete(stale))
        return "sent"

    def send_budget(self, request_timeout: float) -> float:
        """The longest :meth:`send` can take when each request takes ``request_timeout``."""
        retries, ingest_retries = self.requests.max_retries, self.requests.not_found_retries or 0
        requests = 3 + retries + ingest_retries  # read, posts, delete
        waits = sum(self.requests.delay(i) for i in range(max(retries, ingest_retries)))
        return float(request_timeout * requests + 2 * waits)

    def confirm_score(self, key_run_id: uuid.UUID | str, metric: str) -> bool:
        """Whether LangSmith holds the score of a pair; if so, its stale error is removed.

        For a sender that stopped between posting a score and cleaning up after it.
        """
        if not self.holds_score(key_run_id, metric):
            return False
        stale = error_feedback_id(key_run_id, metric)
        self._call(lambda: self._delete(stale))
        return True

    def holds_score(self, key_run_id: uuid.UUID | str, metric: str) -> bool:
        """Whether LangSmith holds the *score* of a pair (an error feedback does not count)."""
        score_id = feedback_id(key_run_id, metric)
        return self._call(lambda: self._read(score_id))

    # ------------------------------------------------------------------ requests

    def _post(self, kwargs: dict[str, Any], session_id: uuid.UUID | None) -> bool:
        from langsmith.utils import LangSmithConflictError

        # A 409 means LangSmith has this id already: an earlier try got through.
        with contextlib.suppress(LangSmithConflictError):
            self.client.create_feedback(**kwargs, session_id=session_id, stop_after_attempt=1)
        return True

    def _delete(self, id_: uuid.UUID) -> bool:
        from langsmith.utils import LangSmithNotFoundError

        with contextlib.suppress(LangSmithNotFoundError):  # no stale error: nothing to do
            self.client.delete_feedback(id_)
        return True

    def _read(self, id_: uuid.UUID) -> bool:
        from langsmith.utils import LangSmithNotFoundError

        try:
            self.client.read_feedback(id_)
        except LangSmithNotFoundError:
            return False
        return True

    def _call(self, request: Callable[[], T], *, tells_breaker: bool = False) -> T:
        """One request under the shared retry, 404 and breaker rules, the SDK's logs quiet."""

        def quietly() -> T:
            with _quiet_sdk():
                return request()

        return self.requests.call(
            quietly, classify=classify_langsmith_error, tells_breaker=tells_breaker
        )


def classify_langsmith_error(exc: Exception) -> Failure:
    """How a LangSmith request's error is handled (see :mod:`langchain_ragmetrics._guarded`).

    The SDK names some statuses (401, 404) and raises its generic error for others (403,
    400, 422), so those are read from the ``requests`` error it was raised from.
    """
    from langsmith.utils import LangSmithAuthError, LangSmithNotFoundError, LangSmithUserError

    if isinstance(exc, LangSmithNotFoundError):
        return "not_found"  # LangSmith answered: the run is not ingested yet
    if isinstance(exc, (LangSmithAuthError, LangSmithUserError)):
        return "refused"  # a key or a setup no retry can fix
    return classify_status(http_status(exc))
