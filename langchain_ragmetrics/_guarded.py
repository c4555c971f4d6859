"""One retry loop for every observability server we write to: retried, bounded, breaker-guarded.

LangSmith (the feedback sink and the monitor), MLflow and Phoenix all get the same rules, so
they live here once. Each failed request is sorted by the caller's ``classify`` into:

* ``"not_found"``: the server answered that the run, trace or span is not stored yet (they
  are exported in the background). Retried with backoff up to ``not_found_retries`` times
  and for at most ``not_found_wait`` seconds; the server is up, so the breaker hears a
  success.
* ``"rejected"``: the server answered that this request is wrong (a bad parameter). Raised
  at once; the server is up.
* ``"refused"``: retrying cannot help, and every other request will meet it too (no or a
  wrong API key, no permission, a route that does not take the request: 405, 410, 415).
  Raised at once and counted as a failure, so a wrong key opens the breaker instead of
  costing a request per result.
* ``"failed"``: no answer, refused connection, 5xx, 429. Retried ``max_retries`` times with
  jittered exponential backoff, each counted as a failure.

A request may tell the breaker about the server's answers itself (``tells_breaker``: a
lookup shared by several sends, counted once by the lookup, which may answer from memory or
hand its failure to the sends that waited on it). Its errors are then sorted and retried by
the same rules, but never counted again; a failure after which the breaker has tripped is
raised at once, as for a request whose own failure opened it (also with ``cooldown=0``, when
the breaker never stays open).

After ``failure_threshold`` failures in a row the breaker opens and every call is refused
with :class:`~langchain_ragmetrics._errors.SinkUnavailableError` for ``cooldown`` seconds,
with one warning when it opens and one when the server answers again. ``close()`` cuts every
wait short.

With ``request_timeout`` set, each request runs on a helper thread and is waited for at most
that long, at most ``concurrency`` at a time: for SDKs whose own retries and timeouts belong
to the application (MLflow's HTTP client retries a refused connection for minutes by
default). A request that never answers keeps its helper thread, so once ``concurrency`` of
them are held no new one starts (an immediate timeout) until one returns: threads never pile
up. A client whose own timeout bounds each request (the LangSmith client we build) runs
requests inline, from as many threads as call at once.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future
from typing import Any, Literal, TypeVar

from langchain_ragmetrics._breaker import CircuitBreaker
from langchain_ragmetrics._errors import SinkUnavailableError
from langchain_ragmetrics._options import number_above_zero, number_at_least_zero, whole_number
from langchain_ragmetrics._threads import DaemonThreadPool

__all__ = [
    "LOCAL_ERRORS",
    "MAX_BACKOFF_SECONDS",
    "Failure",
    "GuardedRequests",
    "classify_status",
    "http_status",
]

T = TypeVar("T")
Failure = Literal["not_found", "rejected", "refused", "failed"]
"""How a failed request is handled (see the module docstring)."""

MAX_BACKOFF_SECONDS = 8.0
"""The longest wait between two tries of a request."""

logger = logging.getLogger("langchain_ragmetrics")


class _NoAnswerError(TimeoutError):
    """The server did not answer within the request timeout."""

    running: Future[Any] | None = None
    """The try still running on its helper thread (None: not known, or none)."""


LOCAL_ERRORS = (UnicodeError, TypeError)
"""Errors raised while a client builds a request (text it cannot encode, a value it cannot
serialise): the server never saw it and a retry fails the same way, so they are "rejected",
never retried nor counted against the breaker."""

_TOO_MANY_REQUESTS = 429
_RETRIED_STATUSES = frozenset({404, 408, 409, 425, _TOO_MANY_REQUESTS})
_REFUSED_STATUSES = frozenset({401, 403, 405, 410, 415})
"""A key or permission no retry can fix (401, 403), or a route that does not take what we send
(405 method, 410 gone, 415 media type: a wrong base path or server version): every request
meets them, so they count toward the breaker."""


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of the response behind ``exc`` or an error it came from, if any.

    SDKs wrap the HTTP library's error (LangSmith raises its own from ``requests``' one), so
    the chain of causes is followed a few steps.
    """
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            break
        status = getattr(getattr(seen, "response", None), "status_code", None)
        if isinstance(status, int):
            return status
        seen = seen.__cause__ or seen.__context__
    return None


def classify_status(status: int | None) -> Failure:
    """How a request that failed with HTTP ``status`` (None: no answer) is handled.

    404 is "not stored yet"; 401, 403, 405, 410 and 415 are refused (the key, or the route:
    every request meets them); any other 4xx but 408, 409, 425 and 429 (which a later try
    may pass) is rejected; the rest (5xx, no answer) failed.
    """
    if status == 404:
        return "not_found"
    if status in _REFUSED_STATUSES:
        return "refused"
    if status is not None and 400 <= status < 500 and status not in _RETRIED_STATUSES:
        return "rejected"
    return "failed"


def _jitter(delay: float) -> float:
    return delay * (0.5 + random.random() / 2)  # noqa: S311 - not for security


class GuardedRequests:
    """Requests to one server under one retry policy and one circuit breaker.

    Args:
        label: Who sends (in errors, log messages and thread names), e.g. ``"MlflowSink"``.
        max_retries: Retries of a request that failed (no answer, refused, 5xx, 429).
        backoff: First retry delay in seconds (doubled each retry, at most 8 s, jittered).
        failure_threshold: Failed requests in a row that open the breaker.
        cooldown: Seconds the breaker stays open before one request is tried again.
        not_found_retries: Retries of a "not stored yet" answer (None: no count limit).
        not_found_wait: Seconds a "not stored yet" answer is retried for (None: no limit).
        request_timeout: Seconds to wait for one request run on a helper thread (None: run
            requests inline and leave their bound to the client's own timeout).
        concurrency: Helper threads, hence requests at once, when ``request_timeout`` is set.
    """

    def __init__(
        self,
        *,
        label: str,
        max_retries: int,
        backoff: float,
        failure_threshold: int,
        cooldown: float,
        not_found_retries: int | None = None,
        not_found_wait: float | None = None,
        request_timeout: float | None = None,
        concurrency: int = 1,
    ) -> None:
        for name, value in (("max_retries", max_retries), ("not_found_retries", not_found_retries)):
            if value is not None:
                whole_number(name, value, minimum=0)
        for name, number in (("backoff", backoff), ("not_found_wait", not_found_wait)):
            if number is not None:
                number_at_least_zero(name, number)
        whole_number("concurrency", concurrency)
        if request_timeout is not None:
            number_above_zero("request_timeout", request_timeout)
        self.label = label
        self.max_retries = max_retries
        self.backoff = backoff
        self.not_found_retries = not_found_retries
        self.not_found_wait = not_found_wait
        self.request_timeout = request_timeout
        self.breaker = CircuitBreaker(threshold=failure_threshold, cooldown=cooldown)
        self.closing = threading.Event()
        """Set (by :meth:`close`) to cut every backoff wait short."""
        self.concurrency = concurrency
        self._pool = (  # none for inline requests
            None
            if request_timeout is None
            else DaemonThreadPool(name=f"ragmetrics-{label}-request", size=concurrency)
        )
        self._inflight: set[Future[Any]] = set()
        self._inflight_lock = threading.Lock()

    def after_fork(self) -> None:
        """In a forked process: threads, locks and breaker of its own, the same options.

        The parent's helper threads do not exist here (a request handed to them would
        never run) and its locks may have been held at the fork.
        """
        breaker = self.breaker
        self.breaker = CircuitBreaker(threshold=breaker.threshold, cooldown=breaker.cooldown)
        self.closing = threading.Event()
        pool = self._pool
        self._pool = None if pool is None else DaemonThreadPool(name=pool.name, size=pool.size)
        self._inflight = set()
        self._inflight_lock = threading.Lock()

    def call(
        self,
        request: Callable[[], T],
        *,
        classify: Callable[[Exception], Failure],
        landed: Callable[[], T | None] | None = None,
        tells_breaker: bool = False,
        retry_after: Callable[[Exception], float | None] | None = None,
    ) -> T:
        """``request()``'s result, tried under this object's rules.

        Args:
            request: The request.
            classify: Sorts a request's error (see the module docstring).
            tells_breaker: ``request`` tells the breaker about the server's answers itself
                (a lookup shared by several callers, which may answer from memory or raise
                the failure of a lookup another caller ran): this call then retries and
                waits as usual but counts nothing, and raises a failure at once when the
                breaker tripped on it (whatever the cool-down, as a request that opens it).
            landed: For a request that must not be stored twice: after a try that may have
                been stored (no answer, 5xx, a lost reply; not a 429), this looks for what it
                stored and returns it, or None; only then is the request sent again. It runs
                under the same bounds and retries as the request. A try that got no answer
                and still runs is waited for first (each wait a try of its own): a look
                while it runs could miss what it is about to store.
            retry_after: The wait the server asked for with a failed try's error
                (``Retry-After``), or None: the retry after it waits at least that long, at
                most ``MAX_BACKOFF_SECONDS`` (the breaker and ``max_retries`` bound the rest).

        Raises:
            SinkUnavailableError: The breaker is open, or :meth:`close` cut a wait short.
            _NoAnswerError: The last try got no answer within ``request_timeout``.
            Exception: The error of the last try.
        """
        failures = misses = 0
        deadline: float | None = None
        uncertain = False  # a try may have been stored: look before sending again
        running: Future[T] | None = None  # a try without answer that still runs
        self.admit()  # a new request: the one trial of a half-open circuit, or refused
        retry = False
        while True:
            if retry:
                self.refuse_if_open()
            retry = True
            try:
                value = self._try(request, landed if uncertain else None, running)
            except SinkUnavailableError:
                raise  # closed while it ran: nothing to retry
            except Exception as exc:
                running = exc.running if isinstance(exc, _NoAnswerError) else None
                running = running if landed is not None else None
                kind = classify(exc)
                if kind == "not_found":
                    if not tells_breaker:
                        self.answered()
                    now = time.monotonic()
                    if deadline is None and self.not_found_wait is not None:
                        deadline = now + self.not_found_wait
                    left = math.inf if deadline is None else deadline - now
                    out_of_tries = self.not_found_retries is not None and (
                        misses >= self.not_found_retries
                    )
                    if left <= 0 or out_of_tries:
                        raise
                    self._pause(min(_jitter(self.delay(misses)), left), exc)
                    misses += 1
                    continue
                if kind == "rejected":
                    if not tells_breaker:
                        self.answered()
                    raise
                opened = self.breaker.tripped if tells_breaker else self.failed()
                if kind == "refused" or opened or failures >= self.max_retries:
                    raise
                # A 429 is the server declining the request: no later try needs to look for it.
                uncertain = uncertain or http_status(exc) != _TOO_MANY_REQUESTS
                wait = _jitter(self.delay(failures))
                asked = None if retry_after is None else retry_after(exc)
                if asked is not None:
                    wait = max(wait, min(asked, MAX_BACKOFF_SECONDS))
                self._pause(wait, exc)
                failures += 1
                continue
            if not tells_breaker:
                self.answered()
            return value

    def _try(
        self,
        request: Callable[[], T],
        landed: Callable[[], T | None] | None,
        running: Future[T] | None,
    ) -> T:
        """One try: a late answer, else what an earlier try stored, else the request.

        The late answer is that of a try still ``running``; ``landed`` looks for what an
        earlier try stored (a look that answers counts as the server answering).
        """
        if running is not None:
            return self._outcome(running)
        if landed is not None:
            found = self._run(landed)
            if found is not None:
                self.answered()
                return found
        return self._run(request)

    def delay(self, attempt: int) -> float:
        """The wait before retry ``attempt`` (0-based), before jitter."""
        return float(min(MAX_BACKOFF_SECONDS, self.backoff * 2**attempt))

    def close(self, wait: float = 0.0) -> bool:
        """Stop waiting and retrying; no request starts from now on.

        A request still running on a helper thread is left to its own timeout; this waits
        for such requests up to ``wait`` seconds. Returns whether none still runs (always
        True for inline requests: they run on the callers' threads).
        """
        self.closing.set()
        if self._pool is None:
            return True
        return self._pool.stop(wait, cancel_pending=True)

    def answered(self) -> None:
        """Record that the server answered (closes the breaker, with one warning if open)."""
        if self.breaker.success():
            logger.warning("%s: the server answers again; sending resumed", self.label)

    def failed(self) -> bool:
        """Count a failed request; True (and one warning) when it opened the breaker."""
        opened = self.breaker.failure()
        if opened:
            logger.warning(
                "%s: %d failed requests in a row; pausing %.0f s",
                self.label,
                self.breaker.threshold,
                self.breaker.cooldown,
            )
        return opened

    def admit(self) -> None:
        """Raise SinkUnavailableError unless a new request may go (see ``CircuitBreaker.allow``)."""
        if not self.breaker.allow():
            msg = f"{self.label}: circuit open, next try in {self.breaker.retry_in:.0f} s"
            raise SinkUnavailableError(msg)

    def refuse_if_open(self) -> None:
        """Raise SinkUnavailableError while the breaker is open."""
        if self.breaker.is_open:
            msg = f"{self.label}: circuit open, next try in {self.breaker.retry_in:.0f} s"
            raise SinkUnavailableError(msg)

    # ------------------------------------------------------------------ internals

    def _pause(self, seconds: float, cause: Exception) -> None:
        if self.closing.wait(seconds):
            msg = f"{self.label}: closing, retry abandoned ({type(cause).__name__}: {cause})"
            raise SinkUnavailableError(msg) from cause

    def _run(self, request: Callable[[], T]) -> T:
        """Run ``request`` inline, or on the helper thread for at most ``request_timeout``."""
        if self._pool is None:  # no request_timeout: the client's own timeout bounds it
            return request()
        if self.closing.is_set():
            msg = f"{self.label} is closed"
            raise SinkUnavailableError(msg)
        with self._inflight_lock:
            self._inflight = {f for f in self._inflight if not f.done()}
            if len(self._inflight) >= self.concurrency:
                held = len(self._inflight)
                msg = f"{self.label}: {held} earlier request(s) have not returned yet"
                raise _NoAnswerError(msg)
            self._pool.start()
            future: Future[T] = self._pool.submit(request)
            self._inflight.add(future)
        return self._outcome(future)

    def _outcome(self, future: Future[T]) -> T:
        """A helper-thread try's result within ``request_timeout`` (its error, raised)."""
        try:
            return future.result(self.request_timeout)
        except futures.TimeoutError:
            if future.done():  # it ended meanwhile, or raised a TimeoutError of its own
                return future.result()  # (futures.TimeoutError is TimeoutError since 3.11)
            msg = f"{self.label}: no answer within {self.request_timeout} s"
            error = _NoAnswerError(msg)
            error.running = future
            raise error from None
