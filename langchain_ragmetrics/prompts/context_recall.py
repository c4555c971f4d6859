"""Prompt of ContextRecall: split the reference into statements and attribute each."""

from __future__ import annotations

from langchain_core.prompts import ChatPromptTemplate

from langchain_ragmetrics.prompts._common import build_prompt

__all__ = ["TASK", "build"]

TASK = """You measure how much of a reference answer is backed by retrieved passages.
1. Rewrite the reference as a list of short factual statements that each stand alone
   (replace pronouns with the names they stand for; one fact per statement).
2. For every statement decide whether the passages state it or plainly imply it
   (attributed: true) or not (attributed: false). Use only the passages, not your own knowledge.
3. Give a one-sentence reason per statement."""

EXAMPLES = [
    (
        {
            "question": "Where is the Eiffel Tower and when was it finished?",
            "passages": ["The Eiffel Tower stands on the Champ de Mars in Paris, France."],
            "reference": "The Eiffel Tower is in Paris. Its construction ended in 1889.",
        },
        {
            "statements": [
                {
                    "statement": "The Eiffel Tower is in Paris.",
                    "reason": "The passage places the tower on the Champ de Mars in Paris.",
                    "attributed": True,
                },
                {
                    "statement": "The construction of the Eiffel Tower ended in 1889.",
                    "reason": "No passage gives a completion date.",
                    "attributed": False,
                },
            ]
        },
    )
]


def build() -> ChatPromptTemplate:
    """The default ContextRecall prompt."""
    return build_prompt(TASK, EXAMPLES)
