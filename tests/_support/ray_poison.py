"""A metric that ends its process on one row: a stand-in for a segfault or an OOM kill.

Importable by Ray actors (a class defined in a test module would not be). Each crash appends
a line to the file named by ``$RAGMETRICS_TEST_CRASH_LOG``, so a test counts them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from langchain_ragmetrics._schema import MetricResult, RagSample
from langchain_ragmetrics.metrics import NonLLMContextRecall

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

POISON = "CRASH"
"""The question of the row that kills its process."""


class CrashOnRow(NonLLMContextRecall):
    """``non_llm_context_recall``, except that the row asking :data:`POISON` exits the process."""

    def _evaluate(self, sample: RagSample, config: RunnableConfig) -> MetricResult:
        if sample.question == POISON:
            log = os.environ.get("RAGMETRICS_TEST_CRASH_LOG")
            if log:
                with open(log, "a", encoding="utf-8") as f:
                    f.write("crash\n")
            os._exit(1)
        return super()._evaluate(sample, config)


class ClosedProxy:
    """A cell value whose attributes raise once its source is gone (a lazy proxy, a handle).

    Ray carries it as a pickled object; the package's reading code then meets a RuntimeError,
    not the ValueError of an invalid field. Dunder lookups (pickling) answer as usual.
    """

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        msg = f"the proxy's source is closed (attribute {name!r})"
        raise RuntimeError(msg)
