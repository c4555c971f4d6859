"""The paid ``live`` test runs only when asked for, never because a key happens to be set."""

from pathlib import Path

import pytest

import langchain_ragmetrics.calibration  # noqa: F401  # loaded once here: numpy cannot reload

REPO = Path(__file__).resolve().parents[2]
LIVE_TEST = REPO / "tests" / "calibration" / "test_live.py"


def _collect(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *options: str) -> str:
    """``pytest --collect-only`` of the live test, with a provider key set.

    Only collection runs: even when the test is selected, nothing calls the judge. It runs in
    this process (``pytester``), with the repository's configuration and ``tests/conftest.py``.
    """
    monkeypatch.setenv("OPENAI_API_KEY", "sk-this-key-must-never-be-used")
    result = pytester.runpytest_inprocess(
        *("-p", "no:cacheprovider", "--collect-only", "-q"),
        *(f"--rootdir={REPO}", "-c", str(REPO / "pyproject.toml")),
        *options,
        str(LIVE_TEST),
    )
    return "\n".join(result.outlines + result.errlines)


def test_default_collection_deselects_it_even_with_a_key(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _collect(pytester, monkeypatch)
    assert "test_real_judge_agrees_with_the_labels" not in out
    assert "1 deselected" in out


@pytest.mark.parametrize("options", [("--run-live",), ("-m", "live or slow")], ids=str)
def test_asking_for_it_selects_it(
    options: tuple[str, ...], pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _collect(pytester, monkeypatch, *options)
    assert "test_live.py::test_real_judge_agrees_with_the_labels" in out
    assert "deselected" not in out
