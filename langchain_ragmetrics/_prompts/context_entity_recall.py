"""Prompts of ContextEntityRecall: list the distinct named entities of a text."""

from __future__ import annotations

from langchain_core.prompts import ChatPromptTemplate

from langchain_ragmetrics._prompts._common import build_prompt

__all__ = ["SINGLE_TASK", "TASK", "build", "build_single"]

_KINDS = """Entities are proper names and precise values: people, places, organisations,
works, events, products, dates, years and quantities; leave out common nouns, adjectives and
titles (write "Shah Jahan", not "Emperor Shah Jahan").
Give one entry per distinct entity: when the text names the same entity in several ways
("Kishida Fumio", "Kishida", "the Prime Minister Kishida"), merge them into one entry whose
"name" is the fullest form in the text and whose "aliases" list the other forms used in the
text plus well-known other names or spellings of it (former names, romanisations, the name in
English and in the text's language, a date written another way). Leave "aliases" empty when
there are none."""

SINGLE_TASK = f"""You list the named entities of one text (the field "text"). {_KINDS}"""

SINGLE_EXAMPLES = [
    (
        {
            "text": "Bombay's Gateway of India was finished in 1924. Mumbai still uses the "
            "Gateway as a landmark."
        },
        {
            "entities": [
                {"name": "Bombay", "aliases": ["Mumbai"]},
                {"name": "Gateway of India", "aliases": ["Gateway"]},
                {"name": "1924", "aliases": []},
            ]
        },
    )
]

TASK = f"""You list the named entities of two texts: a reference answer and the retrieved
passages. {_KINDS}
Return the entities of the reference in "reference_entities" and those of all passages together
in "passage_entities". List an entity under passage_entities only when the passages themselves
name it; do not copy an entity over from the reference."""

EXAMPLES = [
    (
        {
            "reference": "The Golden Gate Bridge opened in 1937 in San Francisco.",
            "passages": ["San Francisco's Golden Gate Bridge was designed by Joseph Strauss."],
        },
        {
            "reference_entities": [
                {"name": "Golden Gate Bridge", "aliases": []},
                {"name": "1937", "aliases": []},
                {"name": "San Francisco", "aliases": ["SF"]},
            ],
            "passage_entities": [
                {"name": "San Francisco", "aliases": ["SF"]},
                {"name": "Golden Gate Bridge", "aliases": []},
                {"name": "Joseph Strauss", "aliases": ["Strauss"]},
            ],
        },
    )
]


def build_single() -> ChatPromptTemplate:
    """The default prompt: one text at a time (reference and passages in separate calls)."""
    return build_prompt(SINGLE_TASK, SINGLE_EXAMPLES)


def build() -> ChatPromptTemplate:
    """The one-call prompt (``single_call=True``): both entity lists at once."""
    return build_prompt(TASK, EXAMPLES)
