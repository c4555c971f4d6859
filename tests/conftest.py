"""Shared fixtures: loopback judge and LangSmith servers, and a clean environment."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator

import pytest

from tests._support.fixtures import (
    judge_server,
    langsmith_client,
    langsmith_env,
    langsmith_stub,
    make_judge,
    release,
)

__all__ = [
    "judge_server",
    "langsmith_client",
    "langsmith_env",
    "langsmith_stub",
    "make_judge",
    "release",
]

pytest_plugins = ["pytester"]  # runs pytest in-process where a test checks our own hooks

_LEAKY_PREFIXES = ("OPENAI_", "LANGSMITH_", "LANGCHAIN_", "RAGMETRICS_")
_ASKS_FOR_LIVE = re.compile(r"(?<!not )\blive\b")


def pytest_configure(config: pytest.Config) -> None:
    """Deliver Ctrl-C to the tests even when the runner was started with SIGINT ignored.

    A shell without job control starts a background command (``pytest ... &``) with SIGINT
    ignored, Python then installs no KeyboardInterrupt handler, and every process a test
    starts inherits the ignore: the Ctrl-C tests would fail for the runner's sake, not ours.
    A handler (unlike an ignore) is reset to the default in the processes we start.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--run-live``: also run the ``live`` tests (a real, paid judge)."""
    parser.addoption(
        "--run-live",
        action="store_true",
        default=False,
        help="run the `live` tests against a real judge (paid; needs OPENAI_API_KEY)",
    )


def _live_requested(config: pytest.Config) -> bool:
    """Whether the command line asks for the ``live`` tests: ``--run-live`` or ``-m live``."""
    if config.getoption("--run-live"):
        return True
    return bool(_ASKS_FOR_LIVE.search(config.getoption("markexpr", "") or ""))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect ``live`` tests unless asked for: a key in the environment is not a request.

    A developer (or a CI machine) may have OPENAI_API_KEY set for other reasons; the live
    calibration run would then spend money for up to 30 minutes without anyone asking.
    """
    if _live_requested(config):
        return
    live = [item for item in items if item.get_closest_marker("live") is not None]
    if live:
        config.hook.pytest_deselected(items=live)
        items[:] = [item for item in items if item.get_closest_marker("live") is None]


@pytest.fixture(autouse=True)
def _fresh_model_clients() -> Iterator[None]:
    """Each test starts without the HTTP clients langchain-openai cached in earlier ones.

    It keeps one async client per process and base URL; a later test whose loopback judge
    got a port an earlier one used would meet that client's connections of an event loop
    long closed (one extra retry: exact request counts would depend on test order).
    """
    from langchain_ragmetrics.evaluation._workers import _forget_parent_clients

    yield
    _forget_parent_clients()


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
