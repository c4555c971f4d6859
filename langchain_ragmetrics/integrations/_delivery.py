"""Bounded, retried requests to an observability server, behind a circuit breaker.

Shared by the MLflow and Phoenix sinks. Their SDKs retry and wait on their own (MLflow's
HTTP client retries a refused connection for minutes by default), and those settings belong
to the application, so each request runs on a helper thread and the sink waits for it at
most ``request_timeout``: a server that never answers costs one bounded wait, then the
breaker. A server that answers "not found" is up (the trace is not stored yet: traces are
exported in the background), so that answer is retried with backoff for up to
``not_found_wait`` seconds without feeding the breaker.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future
from typing import Any, TypeVar

from langchain_ragmetrics._breaker import CircuitBreaker
from langchain_ragmetrics._errors import SinkUnavailableError
from langchain_ragmetrics._threads import DaemonThreadPool
from langchain_ragmetrics.callbacks._stats import logger

__all__ = ["GuardedDelivery"]

T = TypeVar("T")
_MAX_BACKOFF_SECONDS = 8.0


class _NoAnswerError(TimeoutError):
    """The server did not answer within the sink's request timeout."""


def _jitter(delay: float) -> float:
    return delay * (0.5 + random.random() / 2)  # noqa: S311 - not for security


class GuardedDelivery:
    """Runs one request at a time for a sink: bounded, retried, behind a circuit breaker.

    Args:
        label: The sink's name, for logs and thread names.
        request_timeout: Seconds the sink waits for one request.
        max_retries: Retries of a request that failed (server down, 5xx, timeout).
        backoff: First retry delay in seconds (doubled each retry, at most 8 s).
        not_found_wait: Seconds a "not found" answer is retried for (the trace is exported
            in the background and may not be stored yet).
        failure_threshold: Failed requests in a row that open the breaker.
        cooldown: Seconds the breaker stays open before one request is tried again.
    """

    def __init__(
        self,
        *,
        label: str,
        request_timeout: float,
        max_retries: int,
        backoff: float,
        not_found_wait: float,
        failure_threshold: int,
        cooldown: float,
    ) -> None:
        for name, value in (
            ("request_timeout", request_timeout),
            ("max_retries", max_retries),
            ("backoff", backoff),
            ("not_found_wait", not_found_wait),
        ):
            if value < 0 or (name == "request_timeout" and value == 0):
                msg = f"`{name}` must be {'positive' if name == 'request_timeout' else '>= 0'}"
                msg += f", got {value!r}"
                raise ValueError(msg)
        self.label = label
        self.request_timeout = request_timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.not_found_wait = not_found_wait
        self.breaker = CircuitBreaker(threshold=failure_threshold, cooldown=cooldown)
        self._pool = DaemonThreadPool(name=f"ragmetrics-{label}-request")
        self._inflight: Future[Any] | None = None
        self._closing = threading.Event()

    def send(
        self,
        call: Callable[[], T],
        *,
        not_found: Callable[[Exception], bool],
        permanent: Callable[[Exception], bool],
        landed: Callable[[], T | None] | None = None,
    ) -> T:
        """``call()``'s result; raises its last error, or SinkUnavailableError when open.

        Args:
            call: The request (run on the helper thread).
            not_found: Whether an error means "not stored yet" (retried, server is up).
            permanent: Whether an error cannot be fixed by retrying (bad request, auth).
            landed: For a request that must not be stored twice: after a try that may have
                reached the server (no answer, 5xx, a lost reply), this looks for what it
                stored and returns it, or None; only then is the request sent again. It runs
                under the same bounds and retries as the request.
        """
        self._refuse_if_open()
        attempt = 0
        waited_for = 0
        deadline: float | None = None
        uncertain = False  # a try may have been stored: look before sending again
        while True:
            try:
                if uncertain and landed is not None:
                    found = self._bounded(landed)
                    if found is not None:
                        self._answered()
                        return found
                    uncertain = False
                value = self._bounded(call)
            except Exception as exc:
                if not_found(exc):
                    self._answered()
                    now = time.monotonic()
                    deadline = deadline if deadline is not None else now + self.not_found_wait
                    delay = min(_MAX_BACKOFF_SECONDS, self.backoff * 2**waited_for)
                    waited_for += 1
                    if now >= deadline or self._closing.wait(min(delay, deadline - now)):
                        raise
                    continue
                if permanent(exc):
                    self._answered()
                    raise
                uncertain = True
                if self._failed() or attempt >= self.max_retries:
                    raise
                delay = min(_MAX_BACKOFF_SECONDS, self.backoff * 2**attempt)
                attempt += 1
                if self._closing.wait(_jitter(delay)):
                    raise
                self._refuse_if_open()
                continue
            self._answered()
            return value

    def close(self) -> None:
        """Stop waiting and retrying; a request still running is left to its SDK's timeout."""
        self._closing.set()
        self._pool.stop(0, cancel_pending=True)

    def _refuse_if_open(self) -> None:
        if self.breaker.is_open:
            msg = f"{self.label}: circuit open, next try in {self.breaker.retry_in:.0f} s"
            raise SinkUnavailableError(msg)

    def _bounded(self, call: Callable[[], T]) -> T:
        """Run ``call`` on the helper thread and wait at most ``request_timeout``."""
        if self._closing.is_set():
            msg = f"{self.label} is closed"
            raise SinkUnavailableError(msg)
        if self._inflight is not None and not self._inflight.done():
            msg = f"{self.label}: an earlier request has not returned yet"
            raise _NoAnswerError(msg)
        self._pool.start()
        future: Future[T] = self._pool.submit(call)
        self._inflight = future
        try:
            return future.result(self.request_timeout)
        except futures.TimeoutError:
            msg = f"{self.label}: no answer within {self.request_timeout} s"
            raise _NoAnswerError(msg) from None

    def _answered(self) -> None:
        if self.breaker.success():
            logger.warning("%s: the server answers again; sending resumed", self.label)

    def _failed(self) -> bool:
        """Count a failed request; True (and one warning) when it opened the breaker."""
        opened = self.breaker.failure()
        if opened:
            logger.warning(
                "%s: %d failed requests in a row; pausing %.0f s, results are dropped and "
                "counted meanwhile",
                self.label,
                self.breaker.threshold,
                self.breaker.cooldown,
            )
        return opened
