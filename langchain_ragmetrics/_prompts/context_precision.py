"""Prompts of ContextPrecision: one verdict per retrieved passage, in one call or one each."""

from __future__ import annotations

from langchain_core.prompts import ChatPromptTemplate

from langchain_ragmetrics._prompts._common import build_prompt

__all__ = ["SINGLE_TASK", "TASK", "build", "build_single"]

_RULES = """A passage is useful when it contains information that the target relies on (in
any wording or language); a passage on the same topic that does not support anything the target
says is not useful. Judge every passage on its own, as if it were the only one retrieved:
never mark a passage not useful because another passage already says the same thing (a
repeat or near-repeat of a useful passage is useful too), and ignore the passages' order."""

TASK = f"""You rate retrieved passages for a question. The target is either the reference
answer or the generated answer (the field "target_kind" says which). For every passage, by its
"index", decide whether it was useful for arriving at the target (useful: true) or not
(useful: false), with a one-sentence reason. {_RULES}
Return exactly one verdict for each index given, no more and no fewer."""

EXAMPLES = [
    (
        {
            "question": "Who painted the Mona Lisa?",
            "target_kind": "reference answer",
            "target": "Leonardo da Vinci painted the Mona Lisa.",
            "passages": [
                {"index": 0, "text": "The Louvre is the most visited museum in the world."},
                {"index": 1, "text": "Leonardo da Vinci began the Mona Lisa around 1503."},
                {"index": 2, "text": "Around 1503 Leonardo da Vinci started the Mona Lisa."},
            ],
        },
        {
            "verdicts": [
                {"index": 0, "reason": "It names the museum, not the painter.", "useful": False},
                {"index": 1, "reason": "It names Leonardo as the painter.", "useful": True},
                {
                    "index": 2,
                    "reason": "It also names Leonardo; repeating passage 1 does not matter.",
                    "useful": True,
                },
            ]
        },
    )
]

SINGLE_TASK = f"""You rate one retrieved passage for a question. The target is either the
reference answer or the generated answer (the field "target_kind" says which). Decide whether
the passage was useful for arriving at the target (useful: true) or not (useful: false), and
give a one-sentence reason. {_RULES}"""

SINGLE_EXAMPLES = [
    (
        {
            "question": "Who painted the Mona Lisa?",
            "target_kind": "reference answer",
            "target": "Leonardo da Vinci painted the Mona Lisa.",
            "passage": "Leonardo da Vinci began the Mona Lisa around 1503.",
        },
        {"reason": "It names Leonardo as the painter.", "useful": True},
    )
]


def build() -> ChatPromptTemplate:
    """The default all-passages-in-one-call prompt."""
    return build_prompt(TASK, EXAMPLES)


def build_single() -> ChatPromptTemplate:
    """The default one-passage-per-call prompt (``per_context=True``)."""
    return build_prompt(SINGLE_TASK, SINGLE_EXAMPLES)
