"""ContextEntityRecall: share of the reference's named entities found in the contexts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from langchain_core.prompts import ChatPromptTemplate
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import override

from langchain_ragmetrics._prompts import context_entity_recall as prompts
from langchain_ragmetrics._schema import RagSample
from langchain_ragmetrics.metrics._base import JudgedMetric, Plan, Verdict
from langchain_ragmetrics.scoring import EntityForms, entity_overlap

__all__ = [
    "ContextEntityRecall",
    "Entity",
    "EntityList",
    "EntityLists",
    "score_entity_recall",
]


class Entity(BaseModel):
    """One distinct entity, with the other forms of its name merged into it."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(description="The fullest form of the entity's name in the text.")
    """The entity's main name."""
    aliases: list[str] = Field(
        default_factory=list,
        description="Other forms of the same entity (in the text, or well-known variants).",
    )
    """Other names, spellings or formats of the same entity."""

    def forms(self) -> list[str]:
        """The name followed by its aliases (what matching compares)."""
        return [self.name, *self.aliases]


class EntityList(BaseModel):
    """The judge's answer for one text (the default: reference and passages separately)."""

    model_config = ConfigDict(extra="ignore")

    entities: list[Entity] = Field(description="One entry per distinct entity of the text.")
    """The text's entities."""


class EntityLists(BaseModel):
    """The judge's answer in one-call mode: entities of the reference and of the passages."""

    model_config = ConfigDict(extra="ignore")

    reference_entities: list[Entity] = Field(description="Distinct entities of the reference.")
    """The reference's entities."""
    passage_entities: list[Entity] = Field(description="Distinct entities of all passages.")
    """The passages' entities."""


def _forms(entity: Entity | EntityForms) -> EntityForms:
    return entity.forms() if isinstance(entity, Entity) else entity


def score_entity_recall(
    reference_entities: Sequence[Entity | EntityForms],
    context_entities: Sequence[Entity | EntityForms],
) -> Verdict:
    """Pure scorer: |CE ∩ GE| / |GE|.

    A reference entity counts as found when any of its forms matches any form of a context
    entity, ignoring case, punctuation and spacing.
    """
    ref_forms = [_forms(e) for e in reference_entities]
    ctx_forms = [_forms(e) for e in context_entities]
    found, missing = entity_overlap(ref_forms, ctx_forms)
    total = len(found) + len(missing)
    details = {
        "reference_entities": [_name(e) for e in ref_forms],
        "context_entities": [_name(e) for e in ctx_forms],
        "found": found,
        "missing": missing,
    }
    if not total:
        return Verdict(float("nan"), "The reference names no entities.", details)
    reason = f"{len(found)} of {total} reference entities appear in the contexts"
    reason += f" (missing: {', '.join(missing)})." if missing else "."
    return Verdict(len(found) / total, reason, details)


def _name(entity: EntityForms) -> str:
    return entity if isinstance(entity, str) else (list(entity) or [""])[0]


class ContextEntityRecall(JudgedMetric):
    """Recall of the reference's named entities (people, places, dates ...) in the contexts.

    By default the reference and the passages are read in two independent calls, so the
    reference's wording cannot steer what is extracted from the passages; each entity comes
    with its other forms (aliases) so that "Bombay" in a passage still matches "Mumbai" in the
    reference. ``single_call=True`` extracts both lists in one call (half the calls).
    """

    key: ClassVar[str] = "context_entity_recall"
    requires: ClassVar[tuple[str, ...]] = ("reference",)
    output_schema: ClassVar[type[BaseModel]] = EntityList
    pair_output_schema: ClassVar[type[BaseModel]] = EntityLists

    single_call: bool = False
    """Extract both entity lists in one judge call (the reference is then visible while the
    passages are read)."""
    pair_prompt: ChatPromptTemplate = Field(default_factory=prompts.build)
    """The prompt used when ``single_call=True`` (variables ``payload``, ``language``)."""

    @classmethod
    @override
    def default_prompt(cls) -> ChatPromptTemplate:
        return prompts.build_single()

    @override
    def plan(self, sample: RagSample) -> Plan | Verdict:
        reference = (sample.reference or "").strip()
        if not reference:
            return score_entity_recall([], [])
        if self.single_call:
            data = {"reference": reference, "passages": sample.contexts}
            call = self.ask(sample, data, prompt=self.pair_prompt, schema=self.pair_output_schema)
            return Plan([call])
        texts = [reference, "\n\n".join(sample.contexts)]
        return Plan([self.ask(sample, {"text": t}) for t in texts if t])

    @override
    def score(self, plan: Plan, answers: Sequence[Any]) -> Verdict:
        if self.single_call:
            return score_entity_recall(answers[0].reference_entities, answers[0].passage_entities)
        context_entities = answers[1].entities if len(answers) > 1 else []
        return score_entity_recall(answers[0].entities, context_entities)
