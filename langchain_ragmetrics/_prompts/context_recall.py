"""Prompts of ContextRecall: attribute each numbered reference sentence to the passages."""

from __future__ import annotations

from langchain_core.prompts import ChatPromptTemplate

from langchain_ragmetrics._prompts._common import build_prompt

__all__ = ["STATEMENT_TASK", "TASK", "build", "build_statements"]

TASK = """You check which sentences of a reference answer are backed by retrieved passages.
The reference has already been split into sentences, each with an "index"
("reference_sentences"). Do not split, merge or rewrite them.
For every sentence decide whether it can be attributed to the passages: true when the
passages contain the information the sentence states (in any wording: paraphrase, another
language, a different but equivalent number or date format), false when any part of what the
sentence claims is missing from the passages or contradicted by them.
Judge only from the passages, never from your own knowledge. Earlier sentences may be used
to understand pronouns in later ones.
Return exactly one verdict for each index, no more and no fewer, each with a short reason."""

EXAMPLES = [
    (
        {
            "question": "Where is the Eiffel Tower and when was it finished?",
            "passages": [
                "The Eiffel Tower stands on the Champ de Mars in Paris, France.",
                "Gustave Eiffel's company designed and built the tower.",
            ],
            "reference_sentences": [
                {"index": 0, "text": "The Eiffel Tower is in Paris."},
                {"index": 1, "text": "It was built by Gustave Eiffel's company."},
                {"index": 2, "text": "Its construction ended in 1889."},
            ],
        },
        {
            "statements": [
                {
                    "index": 0,
                    "reason": "The first passage places the tower in Paris.",
                    "attributed": True,
                },
                {
                    "index": 1,
                    "reason": "The second passage says his company built it.",
                    "attributed": True,
                },
                {
                    "index": 2,
                    "reason": "No passage gives a completion date.",
                    "attributed": False,
                },
            ]
        },
    )
]

STATEMENT_TASK = """You check how much of a reference answer is backed by retrieved passages.
1. Rewrite the reference as a list of short factual statements that each stand alone
   (replace pronouns with the names they stand for; one fact per statement).
2. For every statement decide whether it can be attributed to the passages (attributed:
   true) or not (attributed: false). Judge only from the passages, not your own knowledge.
3. Give a one-sentence reason per statement."""

STATEMENT_EXAMPLES = [
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
    """The default ContextRecall prompt (one verdict per reference sentence)."""
    return build_prompt(TASK, EXAMPLES)


def build_statements() -> ChatPromptTemplate:
    """The opt-in prompt where the judge splits the reference into statements itself."""
    return build_prompt(STATEMENT_TASK, STATEMENT_EXAMPLES)
