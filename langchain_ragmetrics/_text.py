"""Sentence segmentation (pysbd, per language, cached) and normalisation for matching."""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_ragmetrics._errors import UnsupportedLanguageError

__all__ = [
    "MAX_SEGMENT_WINDOW",
    "SEGMENT_CACHE_MAX_CHARS",
    "SEGMENT_CACHE_SIZE",
    "SEGMENT_WINDOW",
    "SUPPORTED_LANGUAGES",
    "Truncation",
    "cap_texts",
    "check_language",
    "clear_segmenter_cache",
    "language_name",
    "normalize_for_match",
    "segment",
    "segment_in_windows",
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
    """Return the normalised language code.

    Raises:
        UnsupportedLanguageError: pysbd has no rules for it (a ValueError naming the field).
    """
    norm = code.strip().lower().replace("_", "-").split("-")[0]
    if norm not in SUPPORTED_LANGUAGES:
        raise UnsupportedLanguageError(code, field=field, supported=SUPPORTED_LANGUAGES)
    return norm


def language_name(code: str) -> str:
    """English name of a supported language code, for prompts."""
    return SUPPORTED_LANGUAGES[check_language(code)]


_SEGMENT_LOCK = threading.Lock()
SEGMENT_CACHE_SIZE = 4096
"""How many segmented texts are kept (least recently used are dropped)."""
SEGMENT_CACHE_MAX_CHARS = 100_000
"""Longer texts are segmented every time instead of being kept in the cache."""
SEGMENT_WINDOW = 2000
"""Characters pysbd is given at a time (see :func:`segment_in_windows`)."""
MAX_SEGMENT_WINDOW = 16_000
"""The widest window tried for a run of text without a sentence boundary."""


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


def _make_segmenter(code: str, *, fast: bool = True) -> Any:
    """A pysbd Segmenter (``clean=False``) finding spans with :func:`_char_spans`.

    ``fast``: process with :class:`~langchain_ragmetrics._segment_fast.FastProcessor` (pysbd's
    own steps with its regexes compiled once; same sentences, several times less CPU) where it
    applies (English, Japanese, pysbd 0.3.4); otherwise, or with False, pysbd's ``Processor``.
    """
    import pysbd

    from langchain_ragmetrics._segment_fast import fast_processor

    processor = fast_processor(code) if fast else None

    class Segmenter(pysbd.Segmenter):  # type: ignore[misc]
        def processor(self, text: str) -> Any:
            return super().processor(text) if processor is None else processor(text)

        def sentences_with_char_spans(self, sentences: list[str]) -> list[Any]:
            return _char_spans(self.original_text, sentences)

    return Segmenter(language=code, clean=False)


@functools.lru_cache(maxsize=32)
def _segmenter(code: str) -> Any:
    return _make_segmenter(code)


def clear_segmenter_cache() -> None:
    """Drop the cached pysbd segmenters and segmentations (both are rebuilt on demand)."""
    _segmenter.cache_clear()
    _segmented.cache_clear()


def _sentences(code: str, text: str) -> tuple[str, ...]:
    pieces = segment_in_windows(_segmenter(code), text)
    return tuple(s.strip() for s in pieces if s and s.strip())


_segmented = functools.lru_cache(maxsize=SEGMENT_CACHE_SIZE)(_sentences)
"""Sentences of one text, memoised (pysbd costs milliseconds a chunk; chunks recur)."""


def _pysbd(segmenter: Any, text: str) -> list[str]:
    with _SEGMENT_LOCK:  # a pysbd Segmenter keeps per-call state: not thread-safe
        return list(segmenter.segment(text))


def segment_in_windows(
    segmenter: Any, text: str, *, window: int = SEGMENT_WINDOW, max_window: int = MAX_SEGMENT_WINDOW
) -> list[str]:
    """Run pysbd over bounded windows of the text, so the cost grows linearly with its length.

    pysbd (non-cleaning mode) is quadratic in the length of what it is given: 25 KB took
    0.64 s and 100 KB 10.4 s in one piece. Here it only ever sees ``window`` characters at a
    time. Of each window's sentences the last two are given back to the next window (the last
    may be cut by the window's edge, and the one before it is thereby decided with a whole
    sentence of look-ahead), so the sentences are those of one whole-text pass. A window with
    fewer than three sentences is doubled, up to ``max_window``; a run of text with no
    sentence boundary in ``max_window`` characters is cut there (where one pass would have
    returned it as one huge sentence).

    Args:
        segmenter: A ``pysbd.Segmenter`` (``clean=False``).
        text: The text.
        window: Characters per pysbd call (pysbd is cheapest per character around 1-2 KB).
        max_window: The longest window tried when no sentence boundary is found.

    Returns:
        The segments as pysbd gives them (not stripped; blanks included).
    """
    pieces: list[str] = []
    start, size = 0, window
    while start < len(text):
        chunk = text[start : start + size]
        parts = _pysbd(segmenter, chunk)
        if start + size >= len(text):
            pieces += parts
            break
        if len(parts) < 3 and size < max_window:
            size = min(2 * size, max_window)  # no settled boundary yet: look further
            continue
        # At max_window, two sentences give one settled boundary; one gives none.
        kept = parts[:-2] if len(parts) >= 3 else parts[:-1]
        used = _consumed(chunk, kept)
        if used == 0:  # no boundary within max_window characters: cut the run here
            kept, used = [chunk], len(chunk)
        pieces += kept
        start += used
        size = window
    return pieces


def _consumed(chunk: str, parts: list[str]) -> int:
    """Characters of ``chunk`` covered by its leading segments ``parts`` (found in order)."""
    pos = 0
    for part in parts:
        core = part.strip()
        found = chunk.find(core, pos) if core else pos
        pos = (found if found >= 0 else pos) + len(core)
    return pos


def segment(text: str, language: str = "en") -> list[str]:
    """Split text into sentences with pysbd rules for the language; blanks are dropped.

    The cost is linear in the text's length (pysbd sees bounded windows, see
    :func:`segment_in_windows`). Results are cached per (language, text), up to
    ``SEGMENT_CACHE_SIZE`` texts of at most ``SEGMENT_CACHE_MAX_CHARS`` characters;
    :func:`clear_segmenter_cache` empties the cache.
    """
    if not text or not text.strip():
        return []
    code = check_language(language)
    if len(text) > SEGMENT_CACHE_MAX_CHARS:  # rare, and would pin megabytes in the cache
        return list(_sentences(code, text))
    return list(_segmented(code, text))


@dataclass(frozen=True)
class Truncation:
    """How much of one text a size cap kept."""

    index: int
    """Position of the text in its list (e.g. the context's index)."""
    chars: int
    """Its length in characters."""
    kept: int
    """Characters kept from its start (0: dropped whole)."""


def cap_texts(
    texts: Sequence[str], *, max_chars_each: int | None, max_chars_total: int | None
) -> tuple[list[str], list[Truncation]]:
    """Cut texts to at most ``max_chars_each`` characters each and ``max_chars_total`` in all.

    The total budget is spent in order, so later texts are cut first. ``None`` means no cap.
    Returns the texts as kept and one :class:`Truncation` per text that was shortened.
    """
    kept: list[str] = []
    cut: list[Truncation] = []
    budget = max_chars_total
    for i, text in enumerate(texts):
        limit = len(text) if max_chars_each is None else min(len(text), max_chars_each)
        if budget is not None:
            limit = min(limit, budget)
            budget -= limit
        kept.append(text[:limit])
        if limit < len(text):
            cut.append(Truncation(i, len(text), limit))
    return kept, cut


def normalize_for_match(text: str) -> str:
    """Fold case, width, punctuation and spacing so 'Shah-Jahan' matches 'shah jahan'."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _NON_WORD.sub("", folded)
