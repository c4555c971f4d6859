"""Agreement statistics between a judge's verdicts and the labels (pure functions)."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["accuracy", "cohen_kappa", "percentile"]


def accuracy(labels: Sequence[bool], judged: Sequence[bool]) -> float | None:
    """Share of verdicts that agree with the labels; None when there are none."""
    if not labels:
        return None
    return sum(a == b for a, b in zip(labels, judged, strict=True)) / len(labels)


def cohen_kappa(labels: Sequence[bool], judged: Sequence[bool]) -> float | None:
    """Cohen's kappa of two binary raters: agreement beyond what chance would give.

    None when it is undefined: no verdicts, or both raters always give the same single
    answer (chance agreement is then 1).
    """
    n = len(labels)
    if not n:
        return None
    observed = sum(a == b for a, b in zip(labels, judged, strict=True)) / n
    yes_label = sum(labels) / n
    yes_judged = sum(judged) / n
    chance = yes_label * yes_judged + (1 - yes_label) * (1 - yes_judged)
    if math.isclose(chance, 1.0):
        return None
    return (observed - chance) / (1 - chance)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
