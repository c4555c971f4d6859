"""A monitor worker that kills itself (SIGKILL) at one step of sending feedback: crash tests.

Run as ``python -m tests._support.monitor_worker STEP N CHECKPOINT PROJECT`` with
``OPENAI_BASE_URL``, ``LANGSMITH_ENDPOINT`` and ``LANGSMITH_API_KEY`` set: it scores
``context_relevance`` one run at a time and dies the ``N``-th time it reaches ``STEP``
(``before_intent``, ``after_intent``, ``after_post`` or ``before_settle``), leaving the
checkpoint and LangSmith exactly as a worker killed at that point would.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from langchain_openai import ChatOpenAI
from typing_extensions import override

from langchain_ragmetrics.evaluation import metric_from_name
from langchain_ragmetrics.integrations.monitor import LangSmithMonitor

__all__ = ["KilledAtStep", "main"]


class KilledAtStep(LangSmithMonitor):
    """A monitor that SIGKILLs its own process the ``at``-th time it reaches ``step``."""

    def __init__(self, project_name: str, *, step: str, at: int, **options: Any) -> None:
        super().__init__(project_name, **options)
        self.kill_step = step
        self.kill_at = at
        self.reached = 0

    @override
    def _step(self, step: str, run_id: str, metric: str) -> None:
        if step == self.kill_step:
            self.reached += 1
            if self.reached == self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    """Run the worker; returns only if it never reached the step ``N`` times."""
    step, at, checkpoint, project = argv
    judge = ChatOpenAI(model="judge-model", api_key="test", max_retries=0)  # type: ignore[arg-type]
    worker = KilledAtStep(
        project,
        step=step,
        at=int(at),
        metrics=[metric_from_name("context_relevance", llm=judge)],
        checkpoint=checkpoint,
        max_concurrency=1,
        request_timeout=5.0,
    )
    print(worker.run().render())
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
