"""A progress bar for evaluations: jobs done, failures, and the running mean of each metric."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from langchain_ragmetrics._schema import MetricResult

__all__ = ["Progress", "is_interactive"]


def is_interactive(stream: Any) -> bool:
    """True when ``stream`` is a terminal or a Jupyter output stream (where bars render)."""
    if type(stream).__module__.startswith("ipykernel"):
        return True
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (ValueError, OSError):  # a closed or detached stream
        return False


class _Mean:
    """Running mean of the finite scores of one metric."""

    __slots__ = ("count", "total")

    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0

    def add(self, score: float | None) -> None:
        if score is not None and not math.isnan(score):
            self.total += score
            self.count += 1

    def render(self) -> str:
        return f"{self.total / self.count:.3f}" if self.count else "n/a"


class Progress:
    """tqdm bar over (sample x metric) jobs showing the running mean of each metric.

    Disabled bars cost nothing and never import tqdm. By default the bar is shown only when
    ``file`` (stderr) is a terminal or a notebook, so logs and pipes stay clean.
    """

    def __init__(
        self,
        total: int,
        metrics: Sequence[str],
        *,
        enabled: bool = True,
        file: TextIO | None = None,
        force: bool = False,
        desc: str = "Evaluating",
    ) -> None:
        """Create the bar.

        Args:
            total: Number of jobs.
            metrics: Metric names, in display order.
            enabled: False turns the bar off.
            file: Where to draw; defaults to ``sys.stderr``.
            force: Draw even when ``file`` is not interactive (tests, forced logs).
            desc: Label in front of the bar.
        """
        stream = file if file is not None else sys.stderr
        self.enabled = enabled and (force or is_interactive(stream))
        self._means = {name: _Mean() for name in metrics}
        self._failed = 0
        self._bar: Any = None
        if self.enabled:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total, desc=desc, unit="job", file=stream, dynamic_ncols=True, leave=True
            )

    def postfix(self) -> str:
        """The running means (and failures) as shown after the bar."""
        parts = [f"{name}={mean.render()}" for name, mean in self._means.items()]
        if self._failed:
            parts.append(f"failed={self._failed}")
        return " ".join(parts)

    def update(self, metric: str, result: MetricResult) -> None:
        """Count one finished job and refresh the running mean of its metric."""
        mean = self._means.setdefault(metric, _Mean())
        mean.add(result.score)
        self._failed += int(result.failed)
        if self._bar is not None:
            self._bar.set_postfix_str(self.postfix(), refresh=False)
            self._bar.update(1)

    def close(self) -> None:
        """Finish the bar (idempotent)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
