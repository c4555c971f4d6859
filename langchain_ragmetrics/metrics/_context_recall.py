"""ContextRecall: how much of the reference answer the retrieved contexts support."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from langchain_core.prompts import ChatPromptTemplate
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import override

from langchain_ragmetrics._prompts import context_recall as prompts
from langchain_ragmetrics._schema import RagSample
from langchain_ragmetrics._text import segment
from langchain_ragmetrics.metrics._base import JudgedMetric, Plan, Verdict
from langchain_ragmetrics.metrics._indices import check_index_cover
from langchain_ragmetrics.scoring import recall_fraction

__all__ = [
    "ContextRecall",
    "DecomposedStatement",
    "DecomposedStatements",
    "RecallStatements",
    "StatementVerdict",
    "check_sentence_verdicts",
    "score_context_recall",
    "score_decomposed_recall",
]


class StatementVerdict(BaseModel):
    """The judge's verdict on one numbered sentence of the reference."""

    model_config = ConfigDict(extra="ignore")

    index: int = Field(description="Index of the reference sentence this verdict is about.")
    """Index of the reference sentence (as numbered in the request)."""
    reason: str = Field(description="One short sentence: where the passages say it, or why not.")
    """Why the sentence can or cannot be attributed."""
    attributed: bool = Field(
        description="True when the sentence can be attributed to the passages."
    )
    """Whether the passages back the sentence."""


class RecallStatements(BaseModel):
    """The judge's answer: one verdict per reference sentence, keyed by index.

    The statements are the reference's sentences as pysbd split them (the seed's unit), so
    the judge never decides how many there are.
    """

    model_config = ConfigDict(extra="ignore")

    statements: list[StatementVerdict] = Field(
        description="Exactly one verdict for each reference sentence index."
    )
    """The verdicts, in any order."""


class DecomposedStatement(BaseModel):
    """One statement the judge wrote from the reference (``unit="statement"`` mode)."""

    model_config = ConfigDict(extra="ignore")

    statement: str = Field(description="A standalone factual statement from the reference.")
    """The statement, with pronouns resolved."""
    reason: str = Field(description="Why the statement is or is not supported.")
    """Why it can or cannot be attributed."""
    attributed: bool = Field(description="True when the passages support the statement.")
    """Whether the passages back the statement."""


class DecomposedStatements(BaseModel):
    """The judge's answer in statement mode: its own split of the reference, each judged."""

    model_config = ConfigDict(extra="ignore")

    statements: list[DecomposedStatement] = Field(
        description="Every statement of the reference with its verdict."
    )
    """The statements and their verdicts."""


def check_sentence_verdicts(answer: RecallStatements, count: int) -> None:
    """Raise ValueError unless there is exactly one verdict per sentence index 0..count-1."""
    check_index_cover((s.index for s in answer.statements), count, items="reference sentences")


def score_context_recall(sentences: Sequence[str], answer: RecallStatements) -> Verdict:
    """Pure scorer: attributed sentences / reference sentences; NaN when there are none.

    ``answer`` must hold one verdict per index of ``sentences`` (see
    :func:`check_sentence_verdicts`); the denominator is ``len(sentences)``.
    """
    by_index = {s.index: s for s in answer.statements}
    flags = [by_index[i].attributed for i in range(len(sentences))]
    details: dict[str, Any] = {
        "unit": "sentence",
        "statements": [
            {
                "index": i,
                "statement": text,
                "attributed": by_index[i].attributed,
                "reason": by_index[i].reason,
            }
            for i, text in enumerate(sentences)
        ],
    }
    if not flags:
        return Verdict(recall_fraction(flags), "The reference has no sentences.", details)
    reason = f"{sum(flags)} of {len(flags)} reference sentences can be attributed to the contexts."
    return Verdict(recall_fraction(flags), reason, details)


def score_decomposed_recall(answer: DecomposedStatements) -> Verdict:
    """Pure scorer of statement mode: attributed statements / statements the judge wrote."""
    flags = [s.attributed for s in answer.statements]
    details = {"unit": "statement", "statements": [s.model_dump() for s in answer.statements]}
    if not flags:
        return Verdict(recall_fraction(flags), "The judge found no statements.", details)
    reason = (
        f"{sum(flags)} of {len(flags)} reference statements (as split by the judge) can be "
        "attributed to the contexts."
    )
    return Verdict(recall_fraction(flags), reason, details)


class ContextRecall(JudgedMetric):
    """Share of the reference's sentences that can be attributed to the retrieved contexts.

    The reference is split into sentences with pysbd in the sample's language before the
    call; the judge returns one verdict per sentence index, so the denominator does not
    depend on the judge. ``unit="statement"`` lets the judge rewrite the reference as
    atomic statements instead (finer, but the count then varies between judges and runs).
    """

    key: ClassVar[str] = "context_recall"
    requires: ClassVar[tuple[str, ...]] = ("reference",)
    output_schema: ClassVar[type[BaseModel]] = RecallStatements
    statement_output_schema: ClassVar[type[BaseModel]] = DecomposedStatements

    unit: Literal["sentence", "statement"] = "sentence"
    """What is attributed: the reference's pysbd sentences (default, as in the seed) or
    statements the judge writes (opt-in; the denominator then depends on the judge)."""
    statement_prompt: ChatPromptTemplate = Field(default_factory=prompts.build_statements)
    """The prompt used when ``unit="statement"`` (variables ``payload``, ``language``)."""

    @classmethod
    @override
    def default_prompt(cls) -> ChatPromptTemplate:
        return prompts.build()

    @override
    def plan(self, sample: RagSample) -> Plan | Verdict:
        reference = (sample.reference or "").strip()
        if not reference:
            return Verdict(float("nan"), "The reference is empty: there is nothing to recall.")
        sentences = segment(reference, self.sample_language(sample))
        if not sample.contexts:
            details = {
                "unit": self.unit,
                "statements": [
                    {"index": i, "statement": s, "attributed": False, "reason": "no contexts"}
                    for i, s in enumerate(sentences)
                ],
            }
            reason = "No contexts were retrieved, so no reference sentence can be attributed."
            return Verdict(0.0, reason, details)
        data: dict[str, Any] = {"question": sample.question or "", "passages": sample.contexts}
        if self.unit == "statement":
            data["reference"] = reference
            call = self.ask(
                sample, data, prompt=self.statement_prompt, schema=self.statement_output_schema
            )
            return Plan([call])
        data["reference_sentences"] = [{"index": i, "text": s} for i, s in enumerate(sentences)]
        count = len(sentences)
        call = self.ask(sample, data, check=lambda answer: check_sentence_verdicts(answer, count))
        return Plan([call], sentences)

    @override
    def score(self, plan: Plan, answers: Sequence[Any]) -> Verdict:
        if self.unit == "statement":
            return score_decomposed_recall(answers[0])
        return score_context_recall(plan.state, answers[0])
