"""A tiny offline embedding for demos and tests: hashed word and character n-gram counts."""

from __future__ import annotations

import hashlib
import math
import re

from langchain_core.embeddings import Embeddings
from typing_extensions import override

__all__ = ["LexicalEmbeddings"]

_WORD = re.compile(r"\w+", re.UNICODE)


class LexicalEmbeddings(Embeddings):
    """Bag of hashed words and character bigrams, L2-normalised.

    Good enough for lexical retrieval in an ``InMemoryVectorStore`` without a model download;
    bigrams make it work for Japanese, which has no spaces between words.
    """

    def __init__(self, *, dimensions: int = 512) -> None:
        self.dimensions = dimensions

    def _bucket(self, token: str) -> int:
        digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
        return int.from_bytes(digest, "little") % self.dimensions

    def _embed(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        for word in _WORD.findall(text.casefold()):
            if len(word) > 2 or not word.isascii():
                vector[self._bucket(word)] += 1.0
            if not word.isascii():
                for i in range(len(word) - 1):
                    vector[self._bucket(word[i : i + 2])] += 1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]

    @override
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed(t) for t in texts]

    @override
    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)
