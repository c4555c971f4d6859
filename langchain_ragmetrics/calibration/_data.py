"""The labelled calibration set shipped with the package, as pydantic models.

``data/calibration_set.jsonl`` is the source of truth: one hand-written, hand-labelled item per
line, edited directly. tests/calibration/test_data.py validates it: pysbd must split every
text into exactly the labelled sentences, our scorers must turn the labelled verdicts into
exactly the labelled scores, and the set must keep its size and balance.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

from langchain_ragmetrics._errors import CalibrationSetError

__all__ = [
    "CalibrationItem",
    "CalibrationSetError",
    "EntityLabel",
    "EntityLabels",
    "ItemLabels",
    "PrecisionLabels",
    "RecallLabels",
    "RelevanceLabels",
    "load_calibration_set",
]

_DATA_FILE = "calibration_set.jsonl"


class _Labels(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RecallLabels(_Labels):
    """ContextRecall labels: the reference's sentences and whether each can be attributed."""

    sentences: list[str]
    """The reference split into sentences (what pysbd yields for the item's language)."""
    attributed: list[bool]
    """Per sentence: can it be attributed to the passages?"""
    score: float
    """The score these verdicts imply."""


class PrecisionLabels(_Labels):
    """ContextPrecision labels: per passage, is it useful for the reference?"""

    useful: list[bool]
    """Per passage, in rank order."""
    score: float
    """The average precision these verdicts imply."""


class RelevanceLabels(_Labels):
    """ContextRelevance labels: which context sentences the question needs."""

    sentences: list[str]
    """All context sentences, passage by passage (as pysbd splits them)."""
    relevant: list[int]
    """Indices (into ``sentences``) of the sentences needed to answer."""
    score: float
    """The score these verdicts imply."""


class EntityLabel(_Labels):
    """One distinct entity as a careful reader lists it."""

    name: str
    """The entity's main name."""
    aliases: list[str] = Field(default_factory=list)
    """Other forms of the same entity."""
    found: bool | None = None
    """Reference entities only: do the passages name it (in any form)?"""

    def forms(self) -> list[str]:
        """The name followed by its aliases."""
        return [self.name, *self.aliases]


class EntityLabels(_Labels):
    """ContextEntityRecall labels: the entities of the reference and of the passages."""

    reference_entities: list[EntityLabel]
    """Distinct entities of the reference, each with its found verdict."""
    context_entities: list[EntityLabel]
    """Distinct entities of the passages."""
    score: float | None
    """|found| / |reference entities|; None when the reference names no entity."""


class ItemLabels(_Labels):
    """A careful human's verdicts for every LLM-judged metric."""

    context_recall: RecallLabels
    """Recall verdicts."""
    context_precision: PrecisionLabels
    """Precision verdicts."""
    context_relevance: RelevanceLabels
    """Relevance verdicts."""
    context_entity_recall: EntityLabels
    """Entity lists and verdicts."""


class CalibrationItem(BaseModel):
    """One hand-written RAG sample with its labels."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    """Stable identifier, e.g. ``en-curie``."""
    language: str
    """Language code of the texts (``en`` or ``ja``)."""
    tags: list[str]
    """The hard cases the item covers (paraphrase, duplicate, unanswerable ...)."""
    question: str
    """The user's question."""
    contexts: list[str]
    """The retrieved passages, in rank order."""
    reference: str
    """The reference answer."""
    labels: ItemLabels
    """The verdicts and the scores they imply."""


@functools.lru_cache(maxsize=1)
def _load() -> tuple[CalibrationItem, ...]:
    path = resources.files("langchain_ragmetrics.calibration").joinpath("data").joinpath(_DATA_FILE)
    items: list[CalibrationItem] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(CalibrationItem.model_validate(json.loads(line)))
        except ValueError as exc:
            msg = f"{_DATA_FILE} line {number}: {exc}"
            raise CalibrationSetError(msg) from exc
    return tuple(items)


def load_calibration_set(*, language: str | None = None) -> list[CalibrationItem]:
    """The shipped labelled items, optionally only those in one language."""
    return [item for item in _load() if language is None or item.language == language]
