"""Pure scoring formulas shared by the metrics; no I/O, no models, easy to test by hand."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import TypeAlias

from langchain_ragmetrics._text import normalize_for_match

__all__ = [
    "EntityForms",
    "average_precision",
    "entity_overlap",
    "entity_recall",
    "explain_average_precision",
    "recall_fraction",
    "relevance_ratio",
]

EntityForms: TypeAlias = "str | Sequence[str]"
"""An entity as one name, or as its name followed by other forms of it (aliases)."""


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


def explain_average_precision(verdicts: Sequence[bool | int], *, unit: str = "passage") -> str:
    """Say in words how :func:`average_precision` reached its value for these verdicts.

    [0, 1, 1] gives "Useful passages at ranks 2 and 3, so precision@2 = 1/2 and
    precision@3 = 2/3, averaged over 2 useful passages: 0.58."
    """
    ranks = [k for k, verdict in enumerate(verdicts, start=1) if verdict]
    if not ranks:
        return f"None of the {len(verdicts)} {unit}s is useful, so average precision is 0."
    terms = [f"precision@{k} = {hits}/{k}" for hits, k in enumerate(ranks, start=1)]
    score = f"{average_precision(verdicts):.2f}"
    if len(ranks) == 1:
        return f"The only useful {unit} is at rank {ranks[0]}, so {terms[0]}: {score}."
    shown = _and_list([str(k) for k in ranks])
    listed = _and_list(terms) if len(terms) <= 6 else f"{', '.join(terms[:5])}, ..."
    return (
        f"Useful {unit}s at ranks {shown}, so {listed}, "
        f"averaged over {len(ranks)} useful {unit}s: {score}."
    )


def _and_list(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    if len(items) > 12:
        return f"{', '.join(items[:10])}, ... and {items[-1]}"
    return f"{', '.join(items[:-1])} and {items[-1]}"


def _forms(entity: EntityForms) -> list[str]:
    return [entity] if isinstance(entity, str) else list(entity)


def entity_overlap(
    reference_entities: Iterable[EntityForms], context_entities: Iterable[EntityForms]
) -> tuple[list[str], list[str]]:
    """Split the distinct reference entities into (found in contexts, missing).

    An entity is a name or a sequence (name, alias, ...); a reference entity is found when
    any of its forms matches any form of a context entity. Matching ignores case,
    punctuation and spacing; names that normalise to nothing are dropped and duplicates
    (after normalisation) count once.
    """
    seen: dict[str, tuple[str, set[str]]] = {}
    taken: set[str] = set()
    for entity in reference_entities:
        forms = _forms(entity)
        keys = {k for k in (normalize_for_match(f) for f in forms) if k}
        if not forms or not keys or keys & taken:
            continue
        taken |= keys
        seen[normalize_for_match(forms[0]) or min(keys)] = (forms[0].strip(), keys)
    context_keys = {normalize_for_match(f) for e in context_entities for f in _forms(e)}
    found = [name for name, keys in seen.values() if keys & context_keys]
    missing = [name for name, keys in seen.values() if not keys & context_keys]
    return found, missing


def entity_recall(
    reference_entities: Iterable[EntityForms], context_entities: Iterable[EntityForms]
) -> float:
    """|CE ∩ GE| / |GE| with normalised matching; NaN when the reference has no entities."""
    found, missing = entity_overlap(reference_entities, context_entities)
    total = len(found) + len(missing)
    return len(found) / total if total else math.nan


def relevance_ratio(relevant: int, total: int) -> float:
    """min(relevant / total, 1); 0 when there are no sentences or nothing is relevant."""
    if total <= 0 or relevant <= 0:
        return 0.0
    return min(relevant / total, 1.0)
