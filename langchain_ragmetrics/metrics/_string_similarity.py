"""NonLLMContextRecall / NonLLMContextPrecision: string similarity to reference contexts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

import numpy as np
from langchain_core.runnables import RunnableConfig
from pydantic import Field
from typing_extensions import override

from langchain_ragmetrics._schema import MetricResult, RagSample
from langchain_ragmetrics.metrics._base import BaseRagMetric, Verdict
from langchain_ragmetrics.scoring import average_precision, explain_average_precision

__all__ = ["NonLLMContextPrecision", "NonLLMContextRecall", "Similarity", "similarity_matrix"]

Similarity = Literal["levenshtein", "indel", "jaro_winkler", "token_set"]


def _scorer(kind: Similarity) -> Callable[..., float]:
    from rapidfuzz import distance, fuzz

    scorers: dict[str, Callable[..., float]] = {
        "levenshtein": distance.Levenshtein.normalized_similarity,
        "indel": distance.Indel.normalized_similarity,
        "jaro_winkler": distance.JaroWinkler.normalized_similarity,
        "token_set": lambda a, b, **kw: fuzz.token_set_ratio(a, b, **kw) / 100.0,
    }
    return scorers[kind]


def similarity_matrix(
    retrieved: list[str], reference: list[str], kind: Similarity = "levenshtein"
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Similarities in [0, 1], shape (len(retrieved), len(reference)), computed by rapidfuzz."""
    from rapidfuzz.process import cdist

    if not retrieved or not reference:
        return np.zeros((len(retrieved), len(reference)), dtype=np.float64)
    matrix = cdist(retrieved, reference, scorer=_scorer(kind), dtype=np.float64, workers=1)
    return np.asarray(matrix, dtype=np.float64)


class _SimilarityMetric(BaseRagMetric):
    """Shared options of the string-similarity metrics."""

    requires: ClassVar[tuple[str, ...]] = ("reference_contexts",)

    threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    """Two contexts match when their similarity is at least this."""
    similarity: Similarity = "levenshtein"
    """rapidfuzz measure: normalised Levenshtein, Indel, Jaro-Winkler or token-set ratio."""

    @override
    def _evaluate(self, sample: RagSample, config: RunnableConfig) -> MetricResult:
        matrix = similarity_matrix(
            sample.contexts, sample.reference_contexts or [], self.similarity
        )
        return self._result(self.score_matrix(matrix))

    def score_matrix(self, matrix: np.ndarray[Any, np.dtype[np.float64]]) -> Verdict:
        """Pure scorer over the (retrieved x reference) similarity matrix."""
        raise NotImplementedError


class NonLLMContextRecall(_SimilarityMetric):
    """Share of the reference contexts matched by some retrieved context (no LLM)."""

    key: ClassVar[str] = "non_llm_context_recall"

    @override
    def score_matrix(self, matrix: np.ndarray[Any, np.dtype[np.float64]]) -> Verdict:
        n_retrieved, n_reference = matrix.shape
        if n_reference == 0:
            return Verdict(None, "skipped: there are no reference contexts to recall.")
        best = matrix.max(axis=0) if n_retrieved else np.zeros(n_reference)
        hits = best >= self.threshold
        details = {"best_similarity": [round(float(b), 4) for b in best], "recalled": hits.tolist()}
        reason = f"{int(hits.sum())} of {n_reference} reference contexts were retrieved."
        return Verdict(float(hits.mean()), reason, details)


class NonLLMContextPrecision(_SimilarityMetric):
    """Average precision of retrieved contexts that match a reference context (no LLM)."""

    key: ClassVar[str] = "non_llm_context_precision"

    @override
    def score_matrix(self, matrix: np.ndarray[Any, np.dtype[np.float64]]) -> Verdict:
        n_retrieved, n_reference = matrix.shape
        best = matrix.max(axis=1) if n_reference else np.zeros(n_retrieved)
        useful = (best >= self.threshold).tolist()
        details = {"best_similarity": [round(float(b), 4) for b in best], "useful": useful}
        return Verdict(average_precision(useful), self._precision_reason(useful), details)

    def _precision_reason(self, useful: list[bool]) -> str:
        """Why the score is what it is: which ranks match, and the precision at each."""
        if not useful:
            return "No context was retrieved, so average precision is 0."
        matched = sum(useful)
        if not matched:
            return (
                f"None of the {len(useful)} retrieved contexts matches a reference context "
                f"(similarity >= {self.threshold:g}), so average precision is 0."
            )
        counted = (
            f"{matched} of {len(useful)} retrieved contexts match a reference context "
            "(counted as useful)."
        )
        return f"{counted} {explain_average_precision(useful, unit='context')}"
