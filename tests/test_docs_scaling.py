"""docs/offline/scaling.md runs itself: each ```python block as a script, each ```bash
command in a shell.

Both against the loopback judge (``OPENAI_BASE_URL``), as in ``tests/test_readme.py``. Blocks
that use Ray run where the ``[ray]`` extra is installed (its own virtualenv in ``.ci/run``,
where ``RAGMETRICS_REQUIRE_EXTRAS=1`` makes a missing Ray a failure) and skip elsewhere; their
local Ray binds to 127.0.0.1.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest

from tests.test_readme import (
    REPO,
    Block,
    JudgeServer,
    LangSmithDatasetStub,
    checkout_dir,
    loopback_env,
    parse_blocks,
    run,
    servers,
    shell_commands,
)

__all__ = ["servers"]  # the loopback judge and LangSmith fixture, shared with the README test

PAGE = REPO / "docs" / "offline" / "scaling.md"
BLOCKS = parse_blocks(PAGE.read_text(encoding="utf-8"))
PYTHON = [b for b in BLOCKS if b.language == "python"]
BASH = [b for b in BLOCKS if b.language == "bash"]
REQUIRE_EXTRAS = os.environ.get("RAGMETRICS_REQUIRE_EXTRAS") == "1"


def _needs_ray(block: Block) -> bool:
    return re.search(r"\bray\b", block.code) is not None


def _check_ray(block: Block) -> None:
    if _needs_ray(block) and importlib.util.find_spec("ray") is None:
        if REQUIRE_EXTRAS:
            pytest.fail(
                f"docs/offline/scaling.md line {block.line}: the [ray] extra is not installed"
            )
        pytest.skip("the [ray] extra is not installed")


def _env(servers: tuple[JudgeServer, LangSmithDatasetStub]) -> dict[str, str]:
    # Linux Ray picks the machine's address unless told this is not a cluster: stay on loopback.
    return {**loopback_env(servers), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def test_the_page_has_both_paths() -> None:
    languages = [b.language for b in BLOCKS]
    assert languages.count("python") == 2
    assert languages.count("bash") == 3  # evaluate, Ray, the start method
    assert all(b.skip is None for b in BLOCKS)


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if b.language == "python"], ids=lambda b: f"line{b.line}"
)
def test_python_block_runs(
    block: Block, servers: tuple[JudgeServer, LangSmithDatasetStub], tmp_path: Path
) -> None:
    _check_ray(block)
    script = tmp_path / f"scaling_line_{block.line}.py"
    script.write_text(block.code, encoding="utf-8")
    where = f"docs/offline/scaling.md line {block.line}"
    run([sys.executable, str(script)], cwd=tmp_path, env=_env(servers), what=where)
    judge, _ = servers
    assert not judge.script_errors, f"{where}: the judge could not answer"


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if b.language == "bash"], ids=lambda b: f"line{b.line}"
)
def test_bash_block_runs(
    block: Block, servers: tuple[JudgeServer, LangSmithDatasetStub], tmp_path: Path
) -> None:
    _check_ray(block)
    cwd = checkout_dir(tmp_path)
    for command in shell_commands(block.code):
        where = f"docs/offline/scaling.md line {block.line}: `{command}`"
        run(["bash", "-c", command], cwd=cwd, env=_env(servers), what=where)
        judge, _ = servers
        assert not judge.script_errors, f"{where}: the judge could not answer"
