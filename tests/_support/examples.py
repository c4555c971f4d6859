"""Run a cookbook script or a docs page's Python block as a user would, against loopback servers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests._support.lexical_judge import lexical_judge
from tests._support.openai_server import JudgeServer

__all__ = ["REPO", "python_blocks", "run_example"]

REPO = Path(__file__).resolve().parents[2]
_TIMEOUT_S = 300
_LEAKY = ("OPENAI_", "LANGSMITH_", "LANGCHAIN_", "RAGMETRICS_", "OTEL_", "MLFLOW_", "PHOENIX_")
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(page: Path) -> list[str]:
    """The ```python blocks of a Markdown page, in order."""
    return _BLOCK.findall(page.read_text(encoding="utf-8"))


def run_example(
    *,
    cwd: Path,
    script: Path | None = None,
    code: str | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (or ``code``) in a fresh interpreter against a loopback lexical judge."""
    with JudgeServer(lexical_judge()) as judge:
        return _run(judge, cwd, script, code, env)


def _run(
    judge: JudgeServer,
    cwd: Path,
    script: Path | None,
    code: str | None,
    env: Mapping[str, str] | None,
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(_LEAKY)}
    clean.update(
        OPENAI_API_KEY="test",
        OPENAI_BASE_URL=judge.base_url,
        PYTHONUNBUFFERED="1",
        PYTHONPATH=str(REPO),
        **(env or {}),
    )
    args = (
        [sys.executable, str(script)] if script is not None else [sys.executable, "-c", code or ""]
    )
    return subprocess.run(
        args, cwd=cwd, env=clean, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
    )
