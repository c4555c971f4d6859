"""The paid ``live`` test runs only when asked for, never because a key happens to be set."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LIVE_TEST = "tests/calibration/test_live.py"

pytestmark = pytest.mark.slow  # each case starts pytest in a child process


def _collect(*options: str) -> str:
    """``pytest --collect-only`` of the live test in a child with a provider key set.

    Only collection runs: even when the test is selected, nothing calls the judge.
    """
    env = {
        **os.environ,
        "OPENAI_API_KEY": "sk-this-key-must-never-be-used",
        "PYTHONPATH": str(REPO),
    }
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q"),
            *options,
            LIVE_TEST,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return proc.stdout + proc.stderr


def test_default_collection_deselects_it_even_with_a_key() -> None:
    out = _collect()
    assert "test_real_judge_agrees_with_the_labels" not in out
    assert "1 deselected" in out


@pytest.mark.parametrize("options", [("--run-live",), ("-m", "live or slow")], ids=str)
def test_asking_for_it_selects_it(options: tuple[str, ...]) -> None:
    out = _collect(*options)
    assert "test_live.py::test_real_judge_agrees_with_the_labels" in out
    assert "deselected" not in out
