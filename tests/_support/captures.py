"""A retrieval of a live trace as the handler records it, built without running a chain."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import uuid4

from langchain_ragmetrics._retrieval import Capture

__all__ = ["make_capture"]


def make_capture(query: str, documents: Sequence[Any], **fields: Any) -> Capture:
    """A root trace's only retrieval of ``documents`` for ``query``, with fresh run ids.

    The root input is ``{"question": query}`` and there is no root output, unless ``fields``
    say otherwise; any other field of :class:`Capture` may be given too.
    """
    values: dict[str, Any] = {
        "root_run_id": uuid4(),
        "trace_id": None,
        "run_id": uuid4(),
        "parent_run_id": None,
        "retriever": "docs",
        "query": query,
        "documents": documents,
        "tags": (),
        "metadata": {},
        "root_metadata": {},
        "root_inputs": {"question": query},
        "root_outputs": None,
    }
    values.update(fields)
    return Capture(**values)
