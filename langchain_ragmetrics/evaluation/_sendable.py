"""Results a worker process can always send: details it cannot pickle become plain data.

A metric of the user's may put anything in :attr:`MetricResult.details` (a dict view, a
generator, a lock). In this process that is harmless; a worker must pickle the result to send
it to the parent, and one result that cannot be pickled used to end the whole run with
``TypeError`` and lose every result scored. Here such a result keeps its score and reason and
travels with a plain-data copy of its details instead (dict keys as text, tuples and
sets as lists, anything else as its text); every other result goes unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from multiprocessing.reduction import ForkingPickler

from langchain_ragmetrics._plain import plain_json
from langchain_ragmetrics._schema import MetricResult

__all__ = ["pickled_results"]

Delivery = tuple[int, int, MetricResult]
"""One finished job as a worker sends it: (row, metric column, result)."""


def pickled_results(batch: Sequence[Delivery]) -> tuple[memoryview, list[str]]:
    """The message ``("results", batch)`` pickled, and the metrics whose results were converted.

    The batch is pickled as it is; only when that fails is each result tried alone, and
    those that fail get plain details (:func:`_sendable`). So this never raises, and a
    result that pickles is sent exactly as it was made.
    """
    try:
        return ForkingPickler.dumps(("results", list(batch))), []
    except Exception:  # noqa: S110 (one of them cannot be pickled: found below)
        pass
    sendable: list[Delivery] = []
    converted: list[str] = []
    for row, col, result in batch:
        try:
            ForkingPickler.dumps(result)
        except Exception:
            result = _sendable(result)  # noqa: PLW2901 (the result as it will be sent)
            converted.append(result.metric)
        sendable.append((row, col, result))
    return ForkingPickler.dumps(("results", sendable)), converted


def _sendable(result: MetricResult) -> MetricResult:
    """``result`` with plain details (:func:`~langchain_ragmetrics._plain.plain_json`).

    Its score and reason stay; anything in its details that is not plain data becomes its
    text, as in a Ray result row or a ledger key (one converter). Should the copy still not
    pickle (a field of a subclass of the user's, say), the result is sent as a failure that
    says why, rather than lose the batch it came in.
    """
    try:
        details = plain_json(result.details)
        converted = result.model_copy(update={"details": details})
        ForkingPickler.dumps(converted)
    except Exception as exc:
        error = f"ResultNotSendableError: a worker process cannot send this result ({exc!r})"
        return MetricResult(metric=str(result.metric), score=math.nan, error=error)
    return converted
