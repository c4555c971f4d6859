"""The ``live`` judge: a real OpenAI-compatible model, only when the developer provides a key.

The autouse fixture in tests/conftest.py clears ``OPENAI_*`` before every test, so the key is
read here, when pytest imports this file (before any test runs).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

_LIVE = {
    name: os.environ[name]
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAGMETRICS_LIVE_MODEL")
    if os.environ.get(name)
}


@pytest.fixture
def live_judge() -> Any:
    """A ChatOpenAI for the live calibration run; skips the test without OPENAI_API_KEY."""
    if "OPENAI_API_KEY" not in _LIVE:
        pytest.skip(
            "live judge: set OPENAI_API_KEY (and optionally OPENAI_BASE_URL, "
            "RAGMETRICS_LIVE_MODEL) to run the calibration set against a real model"
        )
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=_LIVE.get("RAGMETRICS_LIVE_MODEL", "gpt-4o-mini"),
        api_key=_LIVE["OPENAI_API_KEY"],
        base_url=_LIVE.get("OPENAI_BASE_URL"),
        temperature=0,
        timeout=60,
    )
