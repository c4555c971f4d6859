"""GuardedDelivery's rule for requests that must not be stored twice (``landed``)."""

from __future__ import annotations

from typing import Any

import pytest

from langchain_ragmetrics.integrations._delivery import GuardedDelivery


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


def _delivery(**options: Any) -> GuardedDelivery:
    settings: dict[str, Any] = {
        "label": "test",
        "request_timeout": 5.0,
        "max_retries": 3,
        "backoff": 0.0,
        "not_found_wait": 0.0,
        "failure_threshold": 10,
        "cooldown": 30.0,
    }
    settings.update(options)
    return GuardedDelivery(**settings)


def _send(delivery: GuardedDelivery, server: _Server) -> str:
    return delivery.send(
        server.send,
        not_found=lambda exc: False,
        permanent=lambda exc: isinstance(exc, ValueError),
        landed=server.landed,
    )


def test_a_stored_try_whose_reply_was_lost_is_found_not_sent_again() -> None:
    server = _Server(["stored-lost", "ok"])
    delivery = _delivery()
    assert _send(delivery, server) == "item-1"
    assert (server.sends, server.looks, len(server.stored)) == (1, 1, 1)
    assert not delivery.breaker.is_open
    delivery.close()


def test_a_try_that_was_not_stored_is_sent_again_after_looking() -> None:
    server = _Server(["refused", "ok"])
    delivery = _delivery()
    assert _send(delivery, server) == "item-2"
    assert (server.sends, server.looks) == (2, 1)
    delivery.close()


def test_no_resend_until_a_look_succeeds_and_failed_looks_use_the_retries() -> None:
    server = _Server(["stored-lost", "ok"])
    server.look_errors = 2
    delivery = _delivery(max_retries=3)
    assert _send(delivery, server) == "item-1"
    assert (server.sends, server.looks, len(server.stored)) == (1, 3, 1)
    delivery.close()
    server = _Server(["stored-lost", "ok"])
    server.look_errors = 5
    delivery = _delivery(max_retries=2)
    with pytest.raises(ConnectionResetError, match="look failed"):
        _send(delivery, server)
    assert (server.sends, len(server.stored)) == (1, 1)  # never sent twice
    delivery.close()


def test_a_permanent_error_is_not_looked_for() -> None:
    server = _Server(["400"])
    delivery = _delivery()
    with pytest.raises(ValueError, match="bad request"):
        _send(delivery, server)
    assert (server.sends, server.looks) == (1, 0)
    delivery.close()
