"""Pure scoring formulas shared by the metrics; no I/O, no models, easy to test by hand."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction

from langchain_ragmetrics._text import normalize_for_match

__all__ = [
    "average_precision",
    "entity_overlap",
    "entity_recall",
    "recall_fraction",
    "relevance_ratio",
]


def recall_fraction(verdicts: Sequence[bool | int]) -> float:
    """Share of reference statements attributed to the contexts; NaN when there are none."""
    if not verdicts:
        return math.nan
    return sum(1 for v in verdicts if v) / len(verdicts)


def average_precision(verdicts: Sequence[bool | int]) -> float:
    """Average precision over ranked usefulness verdicts.

    Sum over k of precision@k x v_k, divided by the number of useful contexts; 0 when none
    is useful. Verdicts [0, 1] give 0.5 and [0, 1, 1] give 7/12.
    """
    hits = 0
    total = Fraction(0)
    for k, verdict in enumerate(verdicts, start=1):
        if verdict:
            hits += 1
            total += Fraction(hits, k)
    # Exact rational arithmetic, rounded once: [0, 1, 1] is exactly 7/12.
    return float(total / hits) if hits else 0.0


def entity_overlap(
    reference_entities: Iterable[str], context_entities: Iterable[str]
) -> tuple[list[str], list[str]]:
    """Split the distinct reference entities into (found in contexts, missing).

    Matching ignores case, punctuation and spacing; entities that normalise to nothing are
    dropped and duplicates (after normalisation) count once.
    """
    seen: dict[str, str] = {}
    for entity in reference_entities:
        key = normalize_for_match(entity)
        if key and key not in seen:
            seen[key] = entity.strip()
    context_keys = {normalize_for_match(e) for e in context_entities}
    found = [name for key, name in seen.items() if key in context_keys]
    missing = [name for key, name in seen.items() if key not in context_keys]
    return found, missing


def entity_recall(reference_entities: Iterable[str], context_entities: Iterable[str]) -> float:
    """|CE ∩ GE| / |GE| with normalised matching; NaN when the reference has no entities."""
    found, missing = entity_overlap(reference_entities, context_entities)
    total = len(found) + len(missing)
    return len(found) / total if total else math.nan


def relevance_ratio(relevant: int, total: int) -> float:
    """min(relevant / total, 1); 0 when there are no sentences or nothing is relevant."""
    if total <= 0 or relevant <= 0:
        return 0.0
    return min(relevant / total, 1.0)
