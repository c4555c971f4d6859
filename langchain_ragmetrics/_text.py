"""Sentence segmentation (pysbd, per language, cached) and normalisation for matching."""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
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


@functools.lru_cache(maxsize=32)
def _segmenter(code: str) -> Any:
    import pysbd

    return pysbd.Segmenter(language=code, clean=False)


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
