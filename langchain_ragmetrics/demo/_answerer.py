"""An offline answering model for the demo: it quotes the context sentence that fits best.

It reads the rendered prompt like a chat model would and answers with the sentence of the
context that shares the most words with the question, so the demo chain runs end to end on
a machine without an API key or network.
"""

from __future__ import annotations

import re

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import Runnable, RunnableLambda

__all__ = ["CONTEXT_MARK", "QUESTION_MARK", "extractive_answerer"]

CONTEXT_MARK = "Context:\n"
"""Starts the context block in the demo prompt's human message."""
QUESTION_MARK = "\n\nQuestion: "
"""Separates the context block from the question in the demo prompt's human message."""

_WORD = re.compile(r"\w+", re.UNICODE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_NO_ANSWER = "The context does not say."


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.casefold()) if len(w) > 2}


def _best_sentence(context: str, question: str) -> str:
    wanted = _words(question)
    best, best_hits = _NO_ANSWER, 0
    for sentence in _SENTENCE_END.split(context):
        hits = len(wanted & _words(sentence))
        if hits > best_hits:
            best, best_hits = sentence.strip(), hits
    return best


def _answer(prompt: PromptValue) -> AIMessage:
    messages: list[BaseMessage] = prompt.to_messages()
    text = str(messages[-1].text) if messages else ""
    context, _, question = text.rpartition(QUESTION_MARK)
    context = context.split(CONTEXT_MARK, 1)[-1]
    return AIMessage(content=_best_sentence(context, question))


def extractive_answerer() -> Runnable[PromptValue, AIMessage]:
    """A stand-in chat model: prompt in, the best-matching context sentence out."""
    return RunnableLambda(_answer, name="ExtractiveAnswerer")
