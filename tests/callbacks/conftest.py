"""Fixtures of the online handler's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from langchain_ragmetrics.callbacks import _auto


@pytest.fixture(autouse=True)
def _fallback_warning_given() -> Iterator[None]:
    """Count the default's once-per-process fallback warning as given already.

    Many tests build handlers with live judges and sinks, which score on threads; the first
    of them in a worker would otherwise log that warning, and a test counting warnings would
    pass or fail by test order. ``test_isolation_default.py`` resets it to test it.
    """
    _auto.mark_warned()
    yield
    _auto.reset_warning()


@pytest.fixture
def fresh_warning() -> Iterator[None]:
    """Every test sees the once-per-process fallback warning afresh (the default's tests)."""
    _auto.reset_warning()
    yield
    _auto.reset_warning()
