"""Prompts of ContextEntityRecall: list the named entities of the reference and passages."""

from __future__ import annotations

from langchain_core.prompts import ChatPromptTemplate

from langchain_ragmetrics.prompts._common import build_prompt

__all__ = ["TASK", "build", "build_single"]

_KINDS = """Entities are proper names and precise values: people, places, organisations,
works, events, products, dates, years and quantities. Copy each entity as it is written in
the text, list each one once, and leave out common nouns and adjectives."""

TASK = f"""You extract named entities from two texts: a reference answer and the
retrieved passages. {_KINDS}
Return the entities of the reference in "reference_entities" and those of all passages
together in "passage_entities"."""

EXAMPLES = [
    (
        {
            "reference": "The Golden Gate Bridge opened in 1937 in San Francisco.",
            "passages": ["San Francisco's Golden Gate Bridge was designed by Joseph Strauss."],
        },
        {
            "reference_entities": ["Golden Gate Bridge", "1937", "San Francisco"],
            "passage_entities": ["San Francisco", "Golden Gate Bridge", "Joseph Strauss"],
        },
    )
]

SINGLE_TASK = f"""You extract the named entities of a text. {_KINDS}"""

SINGLE_EXAMPLES = [
    (
        {"text": "The Golden Gate Bridge opened in 1937 in San Francisco."},
        {"entities": ["Golden Gate Bridge", "1937", "San Francisco"]},
    )
]


def build() -> ChatPromptTemplate:
    """The default one-call prompt (both entity lists at once)."""
    return build_prompt(TASK, EXAMPLES)


def build_single() -> ChatPromptTemplate:
    """The prompt for one text at a time (``single_call=False``)."""
    return build_prompt(SINGLE_TASK, SINGLE_EXAMPLES)
