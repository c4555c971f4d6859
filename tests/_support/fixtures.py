"""Pytest fixtures wiring the loopback OpenAI and LangSmith servers into tests.

Import them from ``tests/conftest.py`` (``from tests._support.fixtures import *``)
or, in a single module, import the fixture names explicitly.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import langsmith
import pytest
from langchain_openai import ChatOpenAI

from tests._support.langsmith_stub import LangSmithStub
from tests._support.openai_server import JudgeServer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["judge_factory", "judge_server", "langsmith_client", "langsmith_stub", "make_judge"]

_CLIENT_CLOSE_TIMEOUT = 5.0


@pytest.fixture
def judge_server() -> Iterator[JudgeServer]:
    """A started ``JudgeServer`` with no script yet; stopped after the test."""
    with JudgeServer() as server:
        yield server


@pytest.fixture
def make_judge(judge_server: JudgeServer) -> Callable[..., ChatOpenAI]:
    """Factory for ``ChatOpenAI`` clients pointed at ``judge_server``.

    Defaults: model ``judge-model``, api key ``test``, no retries, 10 s timeout;
    any keyword overrides them.
    """
    return judge_factory(judge_server)


def judge_factory(server: JudgeServer) -> Callable[..., ChatOpenAI]:
    """What :func:`make_judge` returns, for fixtures of a wider scope than a test."""

    def factory(**overrides: Any) -> ChatOpenAI:
        options: dict[str, Any] = {
            "model": "judge-model",
            "base_url": server.base_url,
            "api_key": "test",
            "max_retries": 0,
            "timeout": 10,
            **overrides,
        }
        return ChatOpenAI(**options)

    return factory


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """An event that holds a judge answer, a sink or a user's function; set at the end."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def langsmith_stub() -> Iterator[LangSmithStub]:
    """A started ``LangSmithStub``; stopped after the test."""
    with LangSmithStub() as stub:
        yield stub


@pytest.fixture
def langsmith_env(langsmith_stub: LangSmithStub, monkeypatch: pytest.MonkeyPatch) -> LangSmithStub:
    """``langsmith_stub``, with ``LANGSMITH_ENDPOINT`` / ``LANGSMITH_API_KEY`` pointing at it
    (what a sink that builds its own client reads)."""
    monkeypatch.setenv("LANGSMITH_ENDPOINT", langsmith_stub.url)
    monkeypatch.setenv("LANGSMITH_API_KEY", "test")
    return langsmith_stub


@pytest.fixture
def langsmith_client(langsmith_stub: LangSmithStub) -> Iterator[langsmith.Client]:
    """A real ``langsmith.Client`` talking to ``langsmith_stub``; flushed and closed after."""
    client = langsmith.Client(api_url=langsmith_stub.url, api_key="test")
    try:
        yield client
    finally:
        client.close(timeout=_CLIENT_CLOSE_TIMEOUT)
