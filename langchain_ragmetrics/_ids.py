"""Stable identifiers shared by the online handler, the LangSmith monitor and saved runs."""

from __future__ import annotations

import uuid

__all__ = ["FEEDBACK_NAMESPACE", "feedback_id"]

FEEDBACK_NAMESPACE = uuid.UUID("5f0c7d1e-2b7a-4c51-9a4e-7d0f3c6b8e21")
"""Namespace of the UUID5 feedback ids (fixed forever: changing it would duplicate feedback)."""


def feedback_id(run_id: uuid.UUID | str, metric: str) -> uuid.UUID:
    """The feedback id of one metric on one run: the same inputs always give the same id.

    LangSmith refuses a second feedback with an id it already has, so a retried send, a
    restarted monitor or the handler and the monitor scoring the same run never duplicate.
    """
    return uuid.uuid5(FEEDBACK_NAMESPACE, f"{uuid.UUID(str(run_id))}:{metric}")
