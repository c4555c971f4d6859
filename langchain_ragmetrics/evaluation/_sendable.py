"""Results a worker process can always send: details it cannot pickle become plain data.

A metric of the user's may put anything in :attr:`MetricResult.details` (a dict view, a
generator, a lock). In this process that is harmless; a worker must pickle the result to send
it to the parent, and one result that cannot be pickled used to end the whole run with
``TypeError`` and lose every result scored. Here such a result keeps its score and reason and
travels with a plain-data copy of its details instead; every other result goes unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from multiprocessing.reduction import ForkingPickler
from typing import Any

from langchain_ragmetrics._schema import MetricResult

__all__ = ["pickled_results", "plain_data"]

_PLAIN_SCALARS = frozenset({str, int, float, bool, type(None)})
"""Exact types only: a subclass (an enum, a str with state) may not pickle where it goes."""

Delivery = tuple[int, int, MetricResult]
"""One finished job as a worker sends it: (row, metric column, result)."""


def plain_data(value: Any) -> Any:
    """A plain JSON-like copy of ``value``: anything else in it becomes its ``repr()``.

    Plain data is a dict with str keys, a list or tuple, a str, int, float, bool or None,
    nested in any way; a value that is not (a set, a dict view, a dict with other keys, an
    object), and a container met again inside itself, is replaced by its ``repr()``.
    """
    return _plain(value, frozenset())


def _plain(value: Any, outer: frozenset[int]) -> Any:
    kind = type(value)
    if kind in _PLAIN_SCALARS:
        return value
    if id(value) in outer:  # a container inside itself
        return _repr(value)
    inner = outer | {id(value)}
    if kind is dict and all(type(key) is str for key in value):
        return {key: _plain(item, inner) for key, item in value.items()}
    if kind is list:
        return [_plain(item, inner) for item in value]
    if kind is tuple:
        return tuple(_plain(item, inner) for item in value)
    return _repr(value)


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:  # a repr() of the user's that raises
        return f"<{type(value).__qualname__} object>"


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
    """``result`` with plain details (see :func:`plain_data`); its score and reason stay.

    Top-level keys become text (``details`` is keyed by text). Should the copy still not
    pickle (a field of a subclass of the user's, say), the result is sent as a failure that
    says why, rather than lose the batch it came in.
    """
    try:
        details = {str(key): plain_data(item) for key, item in result.details.items()}
        converted = result.model_copy(update={"details": details})
        ForkingPickler.dumps(converted)
    except Exception as exc:
        error = f"ResultNotSendableError: a worker process cannot send this result ({exc!r})"
        return MetricResult(metric=str(result.metric), score=math.nan, error=error)
    return converted
