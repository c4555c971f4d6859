"""Deterministic sampling by trace id: the same trace always gets the same decision."""

from __future__ import annotations

import hashlib
from uuid import UUID

__all__ = ["check_rate", "is_sampled", "sample_point"]

_SCALE = float(2**64)


def check_rate(rate: float) -> float:
    """Validate a sample rate (a fraction in [0, 1])."""
    if not 0.0 <= rate <= 1.0:
        msg = f"`sample_rate` must be between 0 and 1, got {rate!r}"
        raise ValueError(msg)
    return float(rate)


def sample_point(trace_id: UUID) -> float:
    """Map a trace id to a stable point in [0, 1).

    A hash of all 16 bytes: run ids are UUIDv7 whose leading bytes are a timestamp, so the
    raw value would not be uniform.
    """
    digest = hashlib.blake2b(trace_id.bytes, digest_size=8).digest()
    return int.from_bytes(digest, "big") / _SCALE


def is_sampled(trace_id: UUID, rate: float) -> bool:
    """Whether a trace is selected at ``rate`` (every handler and process agrees)."""
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    return sample_point(trace_id) < rate
