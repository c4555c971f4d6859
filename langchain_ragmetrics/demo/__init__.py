"""The ``ragmetrics demo``: a small RAG chain over a bundled corpus, scored online."""

from langchain_ragmetrics.demo._embeddings import LexicalEmbeddings

__all__ = ["LexicalEmbeddings"]
