"""The ``ragmetrics demo``: a small RAG chain over a bundled corpus, scored online.

``load_corpus()`` and ``LexicalEmbeddings`` are public so examples and tests can build the same
offline retriever: ``InMemoryVectorStore.from_documents(corpus.documents, LexicalEmbeddings())``.
"""

from langchain_ragmetrics.demo._corpus import Corpus, DemoQuestion, load_corpus
from langchain_ragmetrics.demo._embeddings import LexicalEmbeddings

__all__ = ["Corpus", "DemoQuestion", "LexicalEmbeddings", "load_corpus"]
