"""Secrets never reach a log record of the package: URL credentials, keys in queries."""

from __future__ import annotations

import logging
import uuid

import pytest

from langchain_ragmetrics import CallableSink, OnlineResult
from langchain_ragmetrics._redact import redact
from tests._support.sink_checks import deliver, run_item


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://admin:s3cret@127.0.0.1:8/v1", "http://***@127.0.0.1:8/v1"),
        (
            "for url 'https://u:p@h.example/x?sync=true'",
            "for url 'https://***@h.example/x?sync=true'",
        ),
        ("https://h/v1?api_key=abc&x=1", "https://h/v1?api_key=***&x=1"),
        ("https://h/v1?x=1&token=t0k#f", "https://h/v1?x=1&token=***#f"),
        ("https://user@h/v1 (no password)", "https://user@h/v1 (no password)"),
        ("score=0.5, nothing secret", "score=0.5, nothing secret"),
    ],
)
def test_redact_masks_credentials_and_secret_query_values(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_a_sink_error_naming_a_url_with_credentials_is_logged_without_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """HTTP clients name the URL they failed on; before, a sink's endpoint configured as
    ``http://user:password@host`` was logged with its password, traceback included."""

    def fail(_item: OnlineResult) -> None:
        msg = "Server error '500' for url 'http://admin:s3cret@127.0.0.1:9/v1?api_key=k3y'"
        raise RuntimeError(msg)

    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        stats = deliver(CallableSink(fail), [run_item(uuid.uuid4())])
    assert stats.errors == 1
    (record,) = [r for r in caplog.records if r.name == "langchain_ragmetrics"]
    assert record.exc_info is not None  # the traceback is still logged
    assert "s3cret" not in caplog.text
    assert "k3y" not in caplog.text
    assert "http://***@127.0.0.1:9/v1?api_key=***" in caplog.text
