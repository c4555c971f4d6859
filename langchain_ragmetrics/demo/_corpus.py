"""The demo corpus that ships with the package: a few documents and questions about them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

from langchain_core.documents import Document
from pydantic import BaseModel, ConfigDict

__all__ = ["Corpus", "DemoQuestion", "load_corpus"]


class DemoQuestion(BaseModel):
    """A question about the corpus with what a perfect retriever should find."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    question: str
    """The user's question."""
    reference: str
    """A reference answer written from the corpus."""
    reference_context_ids: list[str]
    """Ids of the documents that answer the question."""


@dataclass(frozen=True)
class Corpus:
    """The demo documents (each with an ``id``) and the questions about them."""

    documents: list[Document]
    """Documents with ``id`` set and ``title`` in their metadata."""
    questions: list[DemoQuestion]
    """Questions with reference answers and reference document ids."""

    def texts(self, ids: list[str]) -> list[str]:
        """The texts of the documents with these ids, in the given order."""
        by_id = {d.id: d.page_content for d in self.documents}
        return [by_id[i] for i in ids]


def _read_jsonl(name: str) -> list[dict[str, object]]:
    text = resources.files("langchain_ragmetrics.demo").joinpath(name).read_text("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_corpus() -> Corpus:
    """Load the bundled documents and questions (package data; works offline)."""
    documents = [
        Document(page_content=str(row["text"]), id=str(row["id"]), metadata={"title": row["title"]})
        for row in _read_jsonl("corpus.jsonl")
    ]
    questions = [DemoQuestion.model_validate(row) for row in _read_jsonl("questions.jsonl")]
    return Corpus(documents, questions)
