"""Smoke test of ``bench/bench_online_auto.py``: every config runs and scores every retrieval."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.test_bench_smoke import run_bench

pytestmark = pytest.mark.slow


def test_online_auto_measures_every_config(tmp_path: Path) -> None:
    result = run_bench("bench_online_auto.py", tmp_path, timeout=300)
    runs = result["runs"]
    assert set(runs) == {"production", "production-thread", "default"}
    assert [r["mode"] for r in runs["production"]] == [1.0]  # the live judge went to a child
    assert [r["mode"] for r in runs["production-thread"]] == [0.0]
    for config, found in runs.items():
        assert [(r["scored"], r["dropped"]) for r in found] == [(5, 0)], config
