"""Sentence segmentation (pysbd, per language, cached) and normalisation for matching."""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = [
    "SEGMENT_CACHE_SIZE",
    "SUPPORTED_LANGUAGES",
    "check_language",
    "clear_segmenter_cache",
    "language_name",
    "normalize_for_match",
    "segment",
]

SUPPORTED_LANGUAGES: dict[str, str] = {
    "am": "Amharic",
    "ar": "Arabic",
    "bg": "Bulgarian",
    "da": "Danish",
    "de": "German",
    "el": "Greek",
    "en": "English",
    "es": "Spanish",
    "fa": "Persian",
    "fr": "French",
    "hi": "Hindi",
    "hy": "Armenian",
    "it": "Italian",
    "ja": "Japanese",
    "kk": "Kazakh",
    "mr": "Marathi",
    "my": "Burmese",
    "nl": "Dutch",
    "pl": "Polish",
    "ru": "Russian",
    "sk": "Slovak",
    "ur": "Urdu",
    "zh": "Chinese",
}
"""Language codes that pysbd segments, with their English names (used in prompts)."""

_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


def check_language(code: str, *, field: str = "language") -> str:
    """Return the normalised language code, or raise a ValueError naming the field."""
    norm = code.strip().lower().replace("_", "-").split("-")[0]
    if norm not in SUPPORTED_LANGUAGES:
        supported = ", ".join(sorted(SUPPORTED_LANGUAGES))
        msg = f"`{field}`: unsupported language {code!r}; supported: {supported}"
        raise ValueError(msg)
    return norm


def language_name(code: str) -> str:
    """English name of a supported language code, for prompts."""
    return SUPPORTED_LANGUAGES[check_language(code)]


_SEGMENT_LOCK = threading.Lock()
SEGMENT_CACHE_SIZE = 4096
"""How many segmented texts are kept (least recently used are dropped)."""


def _char_spans(text: str, sentences: list[str]) -> list[Any]:
    """The sentences' spans in ``text``, as pysbd computes them, with ``str.find``.

    pysbd locates each sentence (plus trailing whitespace) in the original text with a regex
    built from the escaped sentence: one compile per sentence, and every sentence pushes a
    pattern out of ``re``'s cache, which pysbd's own rules then recompile. This finds the same
    non-overlapping occurrences (a literal, then a run of ``str.isspace`` characters, which is
    what the regex whitespace class matches), keeps the same spans and drops the same
    sentences: same output, without a regex per sentence.
    """
    from pysbd.utils import TextSpan

    spans = []
    prior_end = 0
    for sent in sentences:
        matches: Iterable[tuple[str, int, int]]
        if not sent:  # pysbd's own regex in the degenerate case
            matches = ((m.group(), *m.span()) for m in re.finditer(r"\s*", text))
        else:
            matches = _occurrences(text, sent)
        for found, start, end in matches:
            if end > prior_end:
                spans.append(TextSpan(found, start, end))
                prior_end = end
                break
    return spans


def _occurrences(text: str, sent: str) -> Iterator[tuple[str, int, int]]:
    """Non-overlapping occurrences of ``sent`` in ``text``, each with its trailing whitespace."""
    pos = 0
    while (start := text.find(sent, pos)) >= 0:
        end = start + len(sent)
        while end < len(text) and text[end].isspace():
            end += 1
        yield text[start:end], start, end
        pos = end


@functools.lru_cache(maxsize=32)
def _segmenter(code: str) -> Any:
    import pysbd

    class Segmenter(pysbd.Segmenter):  # type: ignore[misc]
        def sentences_with_char_spans(self, sentences: list[str]) -> list[Any]:
            return _char_spans(self.original_text, sentences)

    return Segmenter(language=code, clean=False)


def clear_segmenter_cache() -> None:
    """Drop the cached pysbd segmenters and segmentations (both are rebuilt on demand)."""
    _segmenter.cache_clear()
    _segmented.cache_clear()


@functools.lru_cache(maxsize=SEGMENT_CACHE_SIZE)
def _segmented(code: str, text: str) -> tuple[str, ...]:
    """Sentences of one text, memoised (pysbd costs milliseconds a chunk; chunks recur)."""
    segmenter = _segmenter(code)
    with _SEGMENT_LOCK:  # a pysbd Segmenter keeps per-call state: not thread-safe
        sentences = segmenter.segment(text)
    return tuple(s.strip() for s in sentences if s and s.strip())


def segment(text: str, language: str = "en") -> list[str]:
    """Split text into sentences with pysbd rules for the language; blanks are dropped.

    Results are cached per (language, text), up to ``SEGMENT_CACHE_SIZE`` texts;
    :func:`clear_segmenter_cache` empties the cache.
    """
    if not text or not text.strip():
        return []
    return list(_segmented(check_language(language), text))


def normalize_for_match(text: str) -> str:
    """Fold case, width, punctuation and spacing so 'Shah-Jahan' matches 'shah jahan'."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _NON_WORD.sub("", folded)
