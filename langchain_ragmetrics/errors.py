"""The package's exceptions: every error we raise on purpose derives from RagMetricsError."""

from __future__ import annotations

__all__ = ["RagMetricsError"]


class RagMetricsError(Exception):
    """Base of every exception langchain-ragmetrics raises on purpose (catch this one)."""
