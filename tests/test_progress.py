import io
import sys

from langchain_ragmetrics import MetricResult
from langchain_ragmetrics._progress import Progress, is_interactive


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_shows_running_means_and_failures() -> None:
    out = io.StringIO()
    progress = Progress(3, ["context_recall", "context_precision"], file=out, force=True)
    progress.update("context_recall", MetricResult(metric="context_recall", score=0.5))
    progress.update("context_recall", MetricResult(metric="context_recall", score=1.0))
    progress.update(
        "context_precision", MetricResult(metric="context_precision", score=float("nan"), error="x")
    )
    assert progress.postfix() == "context_recall=0.750 context_precision=n/a failed=1"
    progress.close()
    progress.close()
    text = out.getvalue()
    assert "Evaluating" in text
    assert "3/3" in text
    assert "context_recall=0.750" in text


def test_bar_is_off_when_not_a_terminal_or_when_asked() -> None:
    assert not Progress(1, ["m"], file=io.StringIO()).enabled
    assert not Progress(1, ["m"], file=FakeTerminal(), enabled=False).enabled
    terminal = FakeTerminal()
    progress = Progress(1, ["m"], file=terminal)
    assert progress.enabled
    progress.update("m", MetricResult(metric="m", score=None))
    progress.close()
    assert "m=n/a" in terminal.getvalue()


def test_is_interactive() -> None:
    assert is_interactive(FakeTerminal())
    assert not is_interactive(io.StringIO())
    assert not is_interactive(object())
    closed = io.StringIO()
    closed.close()
    assert not is_interactive(closed)
    assert isinstance(is_interactive(sys.stderr), bool)
