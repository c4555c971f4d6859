"""Shared fixtures: loopback judge and LangSmith servers, and a clean environment."""

from __future__ import annotations

import os

import pytest

from tests._support.fixtures import judge_server, langsmith_client, langsmith_stub, make_judge

__all__ = ["judge_server", "langsmith_client", "langsmith_stub", "make_judge"]

_LEAKY_PREFIXES = ("OPENAI_", "LANGSMITH_", "LANGCHAIN_", "RAGMETRICS_")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Drop API keys and tracing switches so a developer's shell cannot leak into tests.

    Each test also gets its own user cache directory, so the CLI's default verdict cache
    never carries answers from one test (or from the developer's runs) into another.
    """
    for name in list(os.environ):
        if name.startswith(_LEAKY_PREFIXES):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("user-cache")))
