"""Prompt of ContextRelevance: pick the numbered context sentences the question needs."""

from __future__ import annotations

from langchain_core.prompts import ChatPromptTemplate

from langchain_ragmetrics._prompts._common import build_prompt

__all__ = ["TASK", "build"]

TASK = """You are given a question and the sentences of the retrieved passages, each with an
"index". Return the indices of the sentences that are needed to answer the question: the ones
that state part of the answer, or that the answer cannot be understood without. Leave out
sentences that are only on the same topic or give background. Judge every sentence on its own:
a sentence that repeats or restates a needed sentence is needed too. When no sentence helps,
or the question cannot be answered from them, return an empty list. Add a one-sentence
reason."""

EXAMPLES = [
    (
        {
            "question": "What is the boiling point of water at sea level?",
            "sentences": [
                {"index": 0, "text": "Water covers about 71% of the Earth's surface."},
                {"index": 1, "text": "At sea level, water boils at 100 degrees Celsius."},
                {"index": 2, "text": "Ice is less dense than liquid water."},
            ],
        },
        {
            "relevant_sentence_indices": [1],
            "reason": "Only sentence 1 gives the boiling point at sea level.",
        },
    )
]


def build() -> ChatPromptTemplate:
    """The default ContextRelevance prompt."""
    return build_prompt(TASK, EXAMPLES)
