"""``docs/batch.md`` runs itself against the loopback Batch API, as a user would paste it.

Each ```python block runs in a fresh interpreter and each ```bash command in a shell, in a
directory holding a copy of ``cookbook/``, with ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` at a
``BatchServer`` whose deterministic judge answers direct requests and batch lines alike.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._support.batch_server import BatchServer
from tests._support.lexical_judge import lexical_judge
from tests.test_readme import Block, clean_env, parse_blocks, shell_commands

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "batch.md"
BLOCKS = parse_blocks(PAGE.read_text(encoding="utf-8"))
TIMEOUT_S = 240


@pytest.fixture
def server() -> Iterator[BatchServer]:
    with BatchServer(lexical_judge()) as running:
        running.instant = True  # a batch ends on its first status read: no waiting
        yield running


def workdir(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "cookbook", tmp_path / "cookbook")
    return tmp_path


def run(argv: list[str], *, cwd: Path, server: BatchServer, what: str) -> str:
    env = clean_env(
        OPENAI_BASE_URL=server.base_url,
        OPENAI_API_KEY="test",
        XDG_CACHE_HOME=str(cwd / "user-cache"),
    )
    proc = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert proc.returncode == 0, (
        f"{what} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def where(block: Block) -> str:
    return f"docs/batch.md line {block.line}"


def test_the_page_has_runnable_blocks_only() -> None:
    assert {b.language for b in BLOCKS} == {"python", "bash"}
    assert all(b.skip is None for b in BLOCKS)


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language == "python"], ids=where)
def test_python_block_runs_through_the_batch_api(
    block: Block, server: BatchServer, tmp_path: Path
) -> None:
    cwd = workdir(tmp_path)
    script = cwd / "block.py"
    script.write_text(block.code, encoding="utf-8")
    out = run([sys.executable, str(script)], cwd=cwd, server=server, what=where(block))
    assert "context_recall" in out
    assert (server.uploads, server.created) == (1, 1)  # one model at one endpoint: one batch
    assert server.line_requests
    # metrics built from names each get their own default judge, each checked once
    assert {r.schema_name for r in server.requests} == {"PreflightAnswer"}
    assert not server.script_errors


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language == "bash"], ids=where)
def test_bash_block_runs_through_the_batch_api(
    block: Block, server: BatchServer, tmp_path: Path
) -> None:
    cwd = workdir(tmp_path)
    for command in shell_commands(block.code):
        run(["bash", "-c", command], cwd=cwd, server=server, what=f"{where(block)}: {command}")
    assert server.uploads >= 1
    assert [r.schema_name for r in server.requests] == ["PreflightAnswer"]
    assert not server.script_errors
