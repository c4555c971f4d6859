"""What both drivers share: the dataset, the judge client, the result line.

Importable from either venv (ours and RAGAS's): the standard library at import time, and only
packages both venvs have (langchain-openai, httpx) inside functions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["DATASET", "WARMUP", "emit", "judge_client", "load"]

DATASET = Path(__file__).resolve().parent / "data" / "dataset.json"
WARMUP = "-warmup"
"""Suffix of the ``x-bench-side`` header of warm-up clients."""


def judge_client(base_url: str, side: str, metric: str, *, max_retries: int = 2) -> Any:
    """A ChatOpenAI client for the judge, tagging its requests with side and metric headers.

    ``max_retries`` is the openai SDK's own retry count: our side sets 0, as every judge the
    package builds does (``RetryPolicy`` is the one retry layer); RAGAS keeps the SDK default.

    Warm-up clients get their own HTTP connection pool: langchain-openai shares one cached
    httpx pool between clients with equal settings, and a pool used on the warm-up's (closed)
    event loop would hand the timed run dead connections.
    """
    import httpx
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model="judge-model",
        base_url=base_url,
        api_key="test",
        temperature=0,
        timeout=60,
        max_retries=max_retries,
        default_headers={"x-bench-side": side, "x-bench-metric": metric},
        http_async_client=httpx.AsyncClient() if side.endswith(WARMUP) else None,
    )


def load(path: str | Path = DATASET, samples: int | None = None) -> list[dict[str, Any]]:
    """Read the records; with ``samples`` cut or repeat them (in order) to that many."""
    records: list[dict[str, Any]] = json.loads(Path(path).read_text(encoding="utf-8"))
    if not records:
        msg = f"{path}: the dataset is empty"
        raise ValueError(msg)
    if samples is None:
        return records
    return [records[i % len(records)] for i in range(samples)]


def emit(payload: dict[str, Any]) -> None:
    """Print the driver's result as one JSON line on stdout (the orchestrator reads the last)."""
    sys.stdout.write("\n" + json.dumps(payload) + "\n")
    sys.stdout.flush()
