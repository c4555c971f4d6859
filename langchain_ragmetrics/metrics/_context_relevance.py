"""ContextRelevance: share of the context sentences needed to answer the question."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from langchain_core.prompts import ChatPromptTemplate
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import override

from langchain_ragmetrics._prompts import context_relevance as prompts
from langchain_ragmetrics._schema import RagSample
from langchain_ragmetrics._text import segment
from langchain_ragmetrics.metrics._base import (
    DEFAULT_MAX_CONTEXT_CHARS,
    DEFAULT_MAX_SAMPLE_CHARS,
    JudgedMetric,
    Plan,
    Verdict,
)
from langchain_ragmetrics.scoring import relevance_ratio

__all__ = [
    "DEFAULT_MAX_CONTEXT_CHARS",
    "DEFAULT_MAX_SAMPLE_CHARS",
    "ContextRelevance",
    "ContextSentence",
    "RelevantSentences",
    "check_sentence_indices",
    "score_context_relevance",
    "split_contexts",
]


class RelevantSentences(BaseModel):
    """The judge's answer: indices of the sentences the question needs."""

    model_config = ConfigDict(extra="ignore")

    relevant_sentence_indices: list[int] = Field(
        description="Indices of the sentences needed to answer; empty when none helps."
    )
    reason: str = Field(default="", description="One sentence on the choice.")


@dataclass(frozen=True)
class ContextSentence:
    """A sentence of a retrieved context, with its global index and its context's index."""

    index: int
    context: int
    text: str


def split_contexts(contexts: Sequence[str], language: str) -> list[ContextSentence]:
    """Segment every context on its own (a sentence never spans two contexts) and number them."""
    out: list[ContextSentence] = []
    for c, text in enumerate(contexts):
        for sentence in segment(text, language):
            out.append(ContextSentence(len(out), c, sentence))
    return out


def check_sentence_indices(answer: RelevantSentences, count: int) -> None:
    """Raise ValueError when the judge picked an index outside 0..count-1."""
    bad = sorted({i for i in answer.relevant_sentence_indices if not 0 <= i < count})
    if bad:
        msg = f"sentence indices out of range 0..{count - 1}: {bad}"
        raise ValueError(msg)


def score_context_relevance(
    sentences: Sequence[ContextSentence], relevant: Sequence[int], reason: str = ""
) -> Verdict:
    """Pure scorer: min(#relevant / #sentences, 1); 0 when nothing is relevant."""
    picked = sorted(set(relevant))
    score = relevance_ratio(len(picked), len(sentences))
    details = {
        "sentence_count": len(sentences),
        "relevant_indices": picked,
        "relevant_sentences": [sentences[i].text for i in picked if 0 <= i < len(sentences)],
    }
    if picked:
        summary = (
            f"{len(picked)} of {len(sentences)} context sentences are needed to answer the "
            f"question, so relevance = {len(picked)}/{len(sentences)} = {score:.2f}."
        )
    else:
        summary = (
            f"None of the {len(sentences)} context sentences is needed to answer the question, "
            "so relevance is 0."
        )
    return Verdict(score, f"{summary} {reason}".strip(), details)


class ContextRelevance(JudgedMetric):
    """Share of the retrieved sentences that the question actually needs (reference-free).

    Contexts are split into sentences with pysbd in the sample's language; the judge picks
    sentence indices, so counts are exact and nothing is copied back.

    Long contexts are capped before segmentation: at most ``max_context_chars`` of each
    context and ``max_sample_chars`` of all of them are segmented and judged (later contexts
    are cut first). The score then covers the kept text, and ``details["truncated"]`` lists
    each context that was cut (``index``, ``chars``, ``kept``). The cap also bounds the CPU
    one sample can take (segmentation is linear in length: about 0.04 to 0.06 s per 100,000
    characters; see docs/performance.md#long-contexts).
    """

    key: ClassVar[str] = "context_relevance"
    requires: ClassVar[tuple[str, ...]] = ("question",)
    output_schema: ClassVar[type[BaseModel]] = RelevantSentences

    @classmethod
    @override
    def default_prompt(cls) -> ChatPromptTemplate:
        return prompts.build()

    @override
    def plan(self, sample: RagSample) -> Plan | Verdict:
        sentences = split_contexts(sample.contexts, self.sample_language(sample))
        if not sentences:
            return score_context_relevance([], [], "No context sentences were retrieved.")
        data = {
            "question": sample.question or "",
            "sentences": [{"index": s.index, "text": s.text} for s in sentences],
        }
        count = len(sentences)
        call = self.ask(sample, data, check=lambda answer: check_sentence_indices(answer, count))
        return Plan([call], sentences)

    @override
    def score(self, plan: Plan, answers: Sequence[Any]) -> Verdict:
        answer: RelevantSentences = answers[0]
        sentences: list[ContextSentence] = plan.state
        return score_context_relevance(sentences, answer.relevant_sentence_indices, answer.reason)
