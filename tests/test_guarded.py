"""GuardedRequests: the one retry, bound and breaker loop of every observability sink."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from langchain_ragmetrics._errors import SinkUnavailableError
from langchain_ragmetrics._guarded import (
    MAX_BACKOFF_SECONDS,
    Failure,
    GuardedRequests,
    classify_status,
    http_status,
)

WAIT_S = 10.0
"""Generous bound for 'did not hang'."""


class _Server:
    """A store behind a scripted link: each try's outcome, and whether it was stored."""

    def __init__(self, outcomes: list[str]) -> None:
        self.outcomes = outcomes  # per send: "ok", "stored-lost", "refused", "400"
        self.stored: list[str] = []
        self.sends = 0
        self.looks = 0
        self.look_errors = 0

    def send(self) -> str:
        outcome = self.outcomes[self.sends]
        self.sends += 1
        if outcome in ("ok", "stored-lost"):
            self.stored.append(f"item-{self.sends}")
        if outcome == "stored-lost":
            raise ConnectionResetError("reply lost")
        if outcome == "refused":
            raise ConnectionRefusedError("refused")
        if outcome == "400":
            raise ValueError("bad request")
        return self.stored[-1]

    def landed(self) -> str | None:
        self.looks += 1
        if self.look_errors:
            self.look_errors -= 1
            raise ConnectionResetError("look failed")
        return self.stored[-1] if self.stored else None


class _NotFoundError(Exception):
    pass


class _AuthError(Exception):
    pass


def _classify(exc: Exception) -> Failure:
    if isinstance(exc, _NotFoundError):
        return "not_found"
    if isinstance(exc, ValueError):
        return "rejected"
    if isinstance(exc, _AuthError):
        return "refused"
    return "failed"


def _guard(**options: Any) -> GuardedRequests:
    settings: dict[str, Any] = {
        "label": "TestSink",
        "request_timeout": 5.0,
        "max_retries": 3,
        "backoff": 0.0,
        "failure_threshold": 10,
        "cooldown": 30.0,
    }
    settings.update(options)
    return GuardedRequests(**settings)


def _send(guard: GuardedRequests, server: _Server) -> str:
    return guard.call(server.send, classify=_classify, landed=server.landed)


def _failing(*errors: Exception, then: str = "ok") -> tuple[Callable[[], str], list[int]]:
    """A request that raises ``errors`` in turn, then returns ``then``; and its try count."""
    tries: list[int] = []

    def request() -> str:
        tries.append(len(tries))
        if len(tries) <= len(errors):
            raise errors[len(tries) - 1]
        return then

    return request, tries


# ------------------------------------------------------------------ stored twice


def test_a_stored_try_whose_reply_was_lost_is_found_not_sent_again() -> None:
    server = _Server(["stored-lost", "ok"])
    guard = _guard()
    assert _send(guard, server) == "item-1"
    assert (server.sends, server.looks, len(server.stored)) == (1, 1, 1)
    assert not guard.breaker.is_open
    guard.close()


def test_a_try_without_answer_is_waited_for_not_looked_for_nor_sent_again() -> None:
    """A try that timed out may still be storing: a look then could miss it and the resend
    store a second copy. Its late answer is taken instead (the server is released when the
    first timeout is seen)."""
    release = threading.Event()
    sends: list[int] = []
    looks: list[int] = []

    def send() -> str:
        sends.append(1)
        release.wait(WAIT_S)
        return "stored-late"

    def classify(exc: Exception) -> Failure:
        release.set()  # the first try timed out: now let it finish
        return _classify(exc)

    guard = _guard(request_timeout=0.2, max_retries=3)
    try:
        value = guard.call(send, classify=classify, landed=lambda: looks.append(1))
    finally:
        release.set()
        guard.close()
    assert value == "stored-late"
    assert (len(sends), len(looks)) == (1, 0)


def test_a_try_that_never_answers_is_never_sent_twice() -> None:
    release = threading.Event()
    sends: list[int] = []

    def send() -> str:
        sends.append(1)
        release.wait(WAIT_S)
        return "late"

    guard = _guard(request_timeout=0.1, max_retries=2)
    try:
        with pytest.raises(TimeoutError, match="no answer within"):
            guard.call(send, classify=_classify, landed=lambda: None)
        assert len(sends) == 1
    finally:
        release.set()
        guard.close()


def test_a_try_that_was_not_stored_is_sent_again_after_looking() -> None:
    server = _Server(["refused", "ok"])
    guard = _guard()
    assert _send(guard, server) == "item-2"
    assert (server.sends, server.looks) == (2, 1)
    guard.close()


def test_no_resend_until_a_look_succeeds_and_failed_looks_use_the_retries() -> None:
    server = _Server(["stored-lost", "ok"])
    server.look_errors = 2
    guard = _guard(max_retries=3)
    assert _send(guard, server) == "item-1"
    assert (server.sends, server.looks, len(server.stored)) == (1, 3, 1)
    guard.close()
    server = _Server(["stored-lost", "ok"])
    server.look_errors = 5
    guard = _guard(max_retries=2)
    with pytest.raises(ConnectionResetError, match="look failed"):
        _send(guard, server)
    assert (server.sends, len(server.stored)) == (1, 1)  # never sent twice
    guard.close()


def test_a_rejected_request_is_not_looked_for() -> None:
    server = _Server(["400"])
    guard = _guard()
    with pytest.raises(ValueError, match="bad request"):
        _send(guard, server)
    assert (server.sends, server.looks) == (1, 0)
    guard.close()


def test_a_429_is_sent_again_without_looking_unless_an_earlier_try_may_be_stored() -> None:
    """A 429 is a request the server declined: before, every retry after one looked first
    (a GET per retry to MLflow, and one more request toward the rate limit)."""
    looks: list[int] = []
    request, tries = _failing(_HttpError(429), _HttpError(429))
    guard = _guard(max_retries=3)
    assert guard.call(request, classify=_classify, landed=lambda: looks.append(1)) == "ok"
    assert (len(tries), len(looks)) == (3, 0)
    # a 5xx first may have been stored: the tries after it look, 429 or not
    request, tries = _failing(_HttpError(503), _HttpError(429))
    assert guard.call(request, classify=_classify, landed=lambda: looks.append(1)) == "ok"
    assert (len(tries), len(looks)) == (3, 2)
    guard.close()


# ------------------------------------------------------------------ each kind of failure


def test_failed_requests_are_retried_then_the_last_error_is_raised() -> None:
    guard = _guard(max_retries=2, request_timeout=None)
    request, tries = _failing(*(ConnectionRefusedError(f"refused {i}") for i in range(5)))
    with pytest.raises(ConnectionRefusedError, match="refused 2"):
        guard.call(request, classify=_classify)
    assert len(tries) == 3  # one try and two retries
    request, tries = _failing(TimeoutError("slow"), then="stored")
    assert guard.call(request, classify=_classify) == "stored"
    assert len(tries) == 2


def test_failures_in_a_row_open_the_breaker_with_one_warning_and_an_answer_closes_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    guard = _guard(max_retries=0, failure_threshold=3, cooldown=30.0, request_timeout=None)
    guard.breaker._clock = lambda: now[0]  # the cool-down passes when the test says so
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        for _ in range(3):
            request, _ = _failing(ConnectionRefusedError("down"))
            with pytest.raises(ConnectionRefusedError):
                guard.call(request, classify=_classify)
        request, tries = _failing()
        with pytest.raises(SinkUnavailableError, match="TestSink: circuit open, next try in 30 s"):
            guard.call(request, classify=_classify)
        assert tries == []  # refused without a request
        now[0] = 31.0  # half-open: one request goes through, and its answer closes it
        assert guard.call(request, classify=_classify) == "ok"
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "TestSink: 3 failed requests in a row; pausing 30 s",
        "TestSink: the server answers again; sending resumed",
    ]
    assert not guard.breaker.is_open


def test_a_failure_that_opens_the_breaker_is_not_retried() -> None:
    guard = _guard(max_retries=5, failure_threshold=2, request_timeout=None)
    request, tries = _failing(*(ConnectionRefusedError("down") for _ in range(6)))
    with pytest.raises(ConnectionRefusedError):
        guard.call(request, classify=_classify)
    assert len(tries) == 2
    assert guard.breaker.is_open


def test_a_refused_request_fails_at_once_and_counts_against_the_breaker() -> None:
    guard = _guard(max_retries=5, failure_threshold=2, request_timeout=None)
    for expected_open in (False, True):
        request, tries = _failing(_AuthError("401 bad key"))
        with pytest.raises(_AuthError, match="401"):
            guard.call(request, classify=_classify)
        assert len(tries) == 1  # retrying cannot help
        assert guard.breaker.is_open is expected_open  # a wrong key pauses sending


def test_a_rejected_request_fails_at_once_and_the_server_counts_as_up() -> None:
    guard = _guard(max_retries=5, failure_threshold=1, request_timeout=None)
    for _ in range(3):
        request, tries = _failing(ValueError("400 bad parameter"))
        with pytest.raises(ValueError, match="400"):
            guard.call(request, classify=_classify)
        assert len(tries) == 1
    assert not guard.breaker.is_open


@pytest.mark.parametrize("cooldown", [30.0, 0.0])
def test_a_request_that_tells_the_breaker_and_opens_it_is_not_tried_again(cooldown: float) -> None:
    """A shared lookup counts its own failures: the call counts none of them again, and
    stops at once when the lookup's count opened the breaker (as a request that opens it),
    also when a cool-down of 0 means the breaker never stays open."""
    guard = _guard(max_retries=5, failure_threshold=2, request_timeout=None, cooldown=cooldown)

    tries: list[int] = []

    def lookup() -> str:
        tries.append(len(tries))
        guard.failed()  # the lookup tells the breaker itself
        msg = "down"
        raise ConnectionRefusedError(msg)

    with pytest.raises(ConnectionRefusedError):
        guard.call(lookup, classify=_classify, tells_breaker=True)
    assert len(tries) == 2  # the second failure opened it: no third try, no wait
    assert guard.breaker.tripped
    assert guard.breaker.is_open is (cooldown > 0)
    guard.breaker.success()
    request, tries = _failing(_AuthError("401 bad key"))  # refused: at once, whatever it says
    with pytest.raises(_AuthError):
        guard.call(request, classify=_classify, tells_breaker=True)
    assert len(tries) == 1
    assert not guard.breaker.tripped  # the call itself counted nothing


@pytest.mark.parametrize(
    ("errors", "raised"),
    [
        ((), None),  # success
        ((_NotFoundError("404"),), _NotFoundError),  # not found, out of tries
        ((ValueError("400"),), ValueError),  # rejected
        ((ConnectionRefusedError("down"),) * 3, ConnectionRefusedError),  # failed, retried
    ],
)
def test_a_request_that_tells_the_breaker_itself_is_retried_but_never_counted(
    errors: tuple[Exception, ...], raised: type[Exception] | None
) -> None:
    guard = _guard(max_retries=2, not_found_retries=0, failure_threshold=2, request_timeout=None)
    guard.failed()  # one failure in a row, from elsewhere
    request, tries = _failing(*errors)
    if raised is None:
        assert guard.call(request, classify=_classify, tells_breaker=True) == "ok"
    else:
        with pytest.raises(raised):
            guard.call(request, classify=_classify, tells_breaker=True)
    assert len(tries) == (3 if raised is ConnectionRefusedError else 1)
    assert not guard.breaker.is_open  # nothing counted...
    guard.failed()  # ...and nothing reset: the second failure in a row opens it
    assert guard.breaker.is_open


def test_not_found_is_retried_up_to_its_count_and_keeps_the_breaker_closed() -> None:
    guard = _guard(not_found_retries=3, failure_threshold=1, request_timeout=None)
    request, tries = _failing(*(_NotFoundError("404") for _ in range(9)))
    with pytest.raises(_NotFoundError):
        guard.call(request, classify=_classify)
    assert len(tries) == 4  # one try and three retries
    assert not guard.breaker.is_open
    request, tries = _failing(_NotFoundError("404"), _NotFoundError("404"), then="ingested")
    assert guard.call(request, classify=_classify) == "ingested"


def test_not_found_is_retried_for_at_most_its_wait() -> None:
    guard = _guard(not_found_wait=0.0, request_timeout=None)
    request, tries = _failing(*(_NotFoundError("404") for _ in range(9)))
    with pytest.raises(_NotFoundError):
        guard.call(request, classify=_classify)
    assert len(tries) == 1  # no time left to wait: raised at once


def test_not_found_retries_do_not_use_up_the_failure_retries() -> None:
    guard = _guard(max_retries=1, not_found_retries=2, request_timeout=None)
    errors = (_NotFoundError("404"), ConnectionResetError("reset"), _NotFoundError("404"))
    request, tries = _failing(*errors, then="stored")
    assert guard.call(request, classify=_classify) == "stored"
    assert len(tries) == 4


# ------------------------------------------------------------------ bounds and closing


def test_close_cuts_a_backoff_wait_short() -> None:
    guard = _guard(backoff=8.0, max_retries=3, request_timeout=None)
    failed_once = threading.Event()

    def request() -> str:
        failed_once.set()
        raise ConnectionRefusedError("down")

    outcome: list[BaseException] = []

    def call() -> None:
        try:
            guard.call(request, classify=_classify)
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    assert failed_once.wait(WAIT_S)  # the first try failed: the caller now backs off
    guard.close()
    caller.join(WAIT_S)
    assert not caller.is_alive()
    (error,) = outcome
    assert isinstance(error, SinkUnavailableError)
    assert "TestSink: closing, retry abandoned (ConnectionRefusedError: down)" in str(error)
    assert isinstance(error.__cause__, ConnectionRefusedError)


def test_a_request_that_never_answers_costs_one_bounded_wait_then_no_pile_up() -> None:
    guard = _guard(request_timeout=0.2, max_retries=0)
    release, entered = threading.Event(), threading.Event()
    started: list[int] = []

    def held() -> str:
        started.append(1)
        entered.set()
        release.wait(WAIT_S)  # accepted, never answered (until the test ends)
        return "late"

    try:
        with pytest.raises(TimeoutError, match=r"TestSink: no answer within 0\.2 s"):
            guard.call(held, classify=_classify)
        assert entered.wait(WAIT_S)  # (the helper thread may start it late on a busy machine)
        # The held request still occupies the helper thread: no second one is started.
        with pytest.raises(TimeoutError, match=r"1 earlier request\(s\) have not returned yet"):
            guard.call(held, classify=_classify)
        assert started == [1]
    finally:
        release.set()
        guard.close()


def test_a_request_that_times_out_itself_is_a_failed_try_not_one_without_answer() -> None:
    """A request whose own client gives up raises TimeoutError, which is
    ``concurrent.futures.TimeoutError`` since Python 3.11: it was taken for the helper's
    wait running out, and each retry waited again on the finished try instead of sending."""
    request, tries = _failing(TimeoutError("client timeout"), TimeoutError("client timeout"))
    guard = _guard(request_timeout=WAIT_S, max_retries=2)
    try:
        assert guard.call(request, classify=_classify, landed=lambda: None) == "ok"
    finally:
        guard.close()
    assert len(tries) == 3  # each retry sent again (after looking), none waited on a try


def test_a_retry_waits_at_least_what_the_server_asked_for() -> None:
    request, tries = _failing(ConnectionResetError("429"), ConnectionResetError("429"))
    guard = _guard(request_timeout=None, max_retries=2, backoff=0.0)
    asked = {"429": 0.3}
    started = time.monotonic()
    value = guard.call(request, classify=_classify, retry_after=lambda exc: asked.get(str(exc)))
    assert value == "ok"
    assert len(tries) == 3
    assert time.monotonic() - started >= 0.6  # two waits of the 0.3 s asked (backoff 0)


def test_a_retry_after_is_cut_to_the_longest_backoff() -> None:
    guard = _guard(request_timeout=None, max_retries=1, backoff=0.0)
    request, _ = _failing(ConnectionResetError("429"))
    waits: list[float] = []
    guard._pause = lambda seconds, cause: waits.append(seconds)  # type: ignore[method-assign]
    assert guard.call(request, classify=_classify, retry_after=lambda exc: 3600.0) == "ok"
    assert waits == [MAX_BACKOFF_SECONDS]


def test_close_waits_for_a_request_still_running_within_its_bound() -> None:
    guard = _guard(request_timeout=0.1, max_retries=0)
    release = threading.Event()

    def held() -> str:
        release.wait(WAIT_S)
        return "late"

    with pytest.raises(TimeoutError):
        guard.call(held, classify=_classify)
    assert guard.close(wait=0.1) is False  # still held: close gave up waiting after 0.1 s
    release.set()
    guard2 = _guard(request_timeout=0.1, max_retries=0)
    done = threading.Event()

    def quick() -> str:
        done.wait(0.3)
        return "late"

    with pytest.raises(TimeoutError):
        guard2.call(quick, classify=_classify)
    assert guard2.close(wait=WAIT_S) is True  # it ended by itself, and close saw it end


def test_bounded_requests_run_side_by_side_up_to_the_concurrency_then_refuse() -> None:
    guard = _guard(request_timeout=WAIT_S, max_retries=0, concurrency=2)
    release = threading.Event()
    both = threading.Barrier(2, timeout=WAIT_S)  # each request waits for the other's start
    both_in = threading.Event()
    results: list[str] = []

    def held() -> str:
        if both.wait() == 0:  # one of the two, once both are in
            both_in.set()
        release.wait(WAIT_S)
        return "answered"

    callers = [
        threading.Thread(target=lambda: results.append(guard.call(held, classify=_classify)))
        for _ in range(2)
    ]
    try:
        for caller in callers:
            caller.start()
        assert both_in.wait(WAIT_S)  # two requests at once on the helper threads
        with pytest.raises(TimeoutError, match=r"2 earlier request\(s\) have not returned yet"):
            guard.call(held, classify=_classify)  # a third: no helper thread is free
    finally:
        release.set()
        for caller in callers:
            caller.join(WAIT_S)
        guard.close()
    assert results == ["answered", "answered"]


def test_inline_requests_run_concurrently_from_several_threads() -> None:
    guard = _guard(request_timeout=None)
    both = threading.Barrier(2, timeout=WAIT_S)  # each request waits for the other's start

    def request() -> str:
        both.wait()
        return "ok"

    results: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(guard.call(request, classify=_classify)))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert results == ["ok", "ok"]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("max_retries", -1, "`max_retries` must be a whole number of at least 0, got -1"),
        ("max_retries", 1.5, "`max_retries` must be a whole number of at least 0, got 1.5"),
        ("max_retries", "x", "`max_retries` must be a whole number of at least 0, got 'x'"),
        ("backoff", -0.5, "`backoff` must be a number of at least 0, got -0.5"),
        ("backoff", math.nan, "`backoff` must be a number of at least 0, got nan"),
        ("backoff", "x", "`backoff` must be a number of at least 0, got 'x'"),
        ("not_found_retries", -2, "`not_found_retries` must be a whole number of at least 0"),
        ("not_found_wait", -1.0, "`not_found_wait` must be a number of at least 0, got -1.0"),
        ("request_timeout", 0, "`request_timeout` must be a number above 0, got 0"),
        ("request_timeout", "x", "`request_timeout` must be a number above 0, got 'x'"),
        ("concurrency", 0, "`concurrency` must be a whole number of at least 1, got 0"),
        ("failure_threshold", 0, "`failure_threshold` must be a whole number of at least 1, got 0"),
    ],
)
def test_bad_options_name_the_option(option: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        _guard(**{option: value})


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (404, "not_found"),
        (401, "refused"),
        (403, "refused"),
        (405, "refused"),  # the route: every request meets it
        (410, "refused"),
        (415, "refused"),
        (400, "rejected"),
        (422, "rejected"),
        (408, "failed"),
        (409, "failed"),
        (425, "failed"),
        (429, "failed"),
        (500, "failed"),
        (503, "failed"),
        (None, "failed"),  # no answer at all
    ],
)
def test_http_statuses_are_sorted_once_for_every_sink(status: int | None, kind: str) -> None:
    assert classify_status(status) == kind


class _Response:
    def __init__(self, status_code: int) -> None:
        self.status_code = status_code


class _HttpError(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.response = _Response(status_code)


def _wrapped(status: int, *, chained: bool) -> RuntimeError:
    """An SDK's own error raised while handling the HTTP library's (as LangSmith's SDK does)."""
    try:
        try:
            raise _HttpError(status)
        except _HttpError as http_error:
            if chained:
                raise RuntimeError("Failed to POST /feedback") from http_error
            raise RuntimeError("Failed to POST /feedback")  # noqa: B904 - the SDK's way
    except RuntimeError as exc:
        return exc


def test_the_status_is_found_behind_an_sdk_wrapper() -> None:
    assert http_status(_HttpError(422)) == 422
    assert http_status(_wrapped(403, chained=False)) == 403  # implicit context
    assert http_status(_wrapped(400, chained=True)) == 400  # explicit cause
    assert http_status(ConnectionRefusedError("refused")) is None


FORK_SCRIPT = """
import os
from langchain_ragmetrics._guarded import GuardedRequests

guard = GuardedRequests(
    label="T", max_retries=0, backoff=0.0, failure_threshold=5, cooldown=30.0,
    request_timeout=2.0, concurrency=2,
)
assert guard.call(lambda: "parent", classify=lambda exc: "failed") == "parent"
guard.breaker.failure()  # a count of the parent's
pid = os.fork()
if pid == 0:
    guard.after_fork()
    try:
        answer = guard.call(lambda: "child", classify=lambda exc: "failed")
    except Exception as exc:
        answer = type(exc).__name__
    print("child", answer, guard.concurrency, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("parent", guard.call(lambda: "again", classify=lambda exc: "failed"), flush=True)
"""


def test_after_a_fork_requests_run_on_helper_threads_of_the_childs_own() -> None:
    """The parent's helper threads do not exist in a forked child: before ``after_fork``
    a request handed to them never ran, and every call waited out its timeout."""
    from tests._support.processes import script_output

    assert script_output(FORK_SCRIPT) == ["child child 2", "parent again"]
