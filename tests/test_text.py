import json
import re
import time
from pathlib import Path

import pytest

from langchain_ragmetrics._text import (
    MAX_SEGMENT_WINDOW,
    SEGMENT_CACHE_MAX_CHARS,
    SEGMENT_WINDOW,
    Truncation,
    _segmented,
    _segmenter,
    cap_texts,
    check_language,
    clear_segmenter_cache,
    language_name,
    normalize_for_match,
    segment,
    segment_in_windows,
)


def test_segment_english() -> None:
    text = "Dr. Smith went to Washington. He arrived at 3 p.m. on Monday! Did he stay?"
    assert segment(text, "en") == [
        "Dr. Smith went to Washington.",
        "He arrived at 3 p.m. on Monday!",
        "Did he stay?",
    ]


def test_segment_japanese() -> None:
    text = "岸田文雄氏は日本の首相です。東京は日本の首都です。本当ですか？"
    assert segment(text, "ja") == [
        "岸田文雄氏は日本の首相です。",
        "東京は日本の首都です。",
        "本当ですか？",
    ]


def test_segment_blank() -> None:
    assert segment("", "en") == []
    assert segment("   \n ", "ja") == []


def test_language_checks() -> None:
    assert check_language("JA") == "ja"
    assert check_language("en-US") == "en"
    assert language_name("ja") == "Japanese"
    with pytest.raises(ValueError, match="`language`: unsupported language 'xx'"):
        check_language("xx")


def test_segmenter_cache_is_resettable() -> None:
    segment("One. Two.", "en")
    clear_segmenter_cache()
    assert segment("One. Two.", "en") == ["One.", "Two."]


def test_normalize_for_match() -> None:
    assert normalize_for_match("  Shah-Jahan ") == normalize_for_match("shah jahan")
    assert normalize_for_match("ＡＢＣ１２３") == "abc123"
    assert normalize_for_match("ムンバイ、インド") == "ムンバイインド"


def test_segment_is_thread_safe() -> None:
    import threading

    texts = [f"The code word of item{i:03d} is word{i}. Another one {i}." for i in range(200)]
    bad: list[str] = []

    def run(chunk: list[str]) -> None:
        bad.extend(t for t in chunk if len(segment(t, "en")) != 2)

    threads = [threading.Thread(target=run, args=(texts[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []


def test_segmentation_is_cached_and_resettable() -> None:
    from langchain_ragmetrics._text import _segmented

    clear_segmenter_cache()
    text = "A first sentence here. A second one follows."
    first = segment(text, "en")
    first.append("mutating the returned list must not leak into the cache")
    assert segment(text, "en") == ["A first sentence here.", "A second one follows."]
    info = _segmented.cache_info()
    assert (info.hits, info.misses) == (1, 1)
    segment(text, "ja")  # the language is part of the key
    assert _segmented.cache_info().misses == 2
    clear_segmenter_cache()
    assert _segmented.cache_info().currsize == 0


TRICKY = [
    'Mr. Smith went to Washington.  He said: "Hi!"   Then he left...  ',
    "a. b. c.",
    "The U.S.A. is big. I.e. it is large.\n\nNew paragraph here.",
    "Hello world. Hello world. Hello world.",
    "x.\u00a0Y. z\u2003w.",
    "He paid $3.50 for it (see p. 4). Dr. No agreed? Yes! No.",
    "Repeated. Repeated.\tRepeated.\nRepeated.",
]


@pytest.mark.parametrize("language", ["en", "ja"])
def test_segmentation_is_exactly_pysbds(language: str) -> None:
    import pysbd

    stock = pysbd.Segmenter(language=language, clean=False)
    texts = [*TRICKY, "日本語の文。次の文！ 最後？「引用。」終わり。"]
    dataset = Path(__file__).resolve().parents[1] / "bench" / "data" / "dataset.json"
    for record in json.loads(dataset.read_text(encoding="utf-8")):
        texts.extend(record["retrieved_contexts"])
    clear_segmenter_cache()
    for text in texts:
        expected = [s.strip() for s in stock.segment(text) if s and s.strip()]
        assert segment(text, language) == expected, text


# --- long texts: pysbd over bounded windows --------------------------------------------------

REPO = Path(__file__).resolve().parents[1]


def whole_text_pass(text: str, language: str) -> list[str]:
    """The segmentation as it was before windows: pysbd over the whole text at once."""
    pieces = _segmenter(language).segment(text)
    return [s.strip() for s in pieces if s and s.strip()]


def windowed(text: str, language: str, **options: int) -> list[str]:
    pieces = segment_in_windows(_segmenter(language), text, **options)
    return [s.strip() for s in pieces if s and s.strip()]


def corpus_texts() -> dict[str, list[str]]:
    """Every context and reference context the repository ships, by language."""
    texts: dict[str, list[str]] = {"en": [], "ja": []}
    for record in json.loads((REPO / "bench/data/dataset.json").read_text(encoding="utf-8")):
        texts[record["language"]] += record["retrieved_contexts"]
    for name in (
        "tests/data/einstein.jsonl",
        "tests/data/japanese.jsonl",
        "cookbook/data/rag_eval.jsonl",
    ):
        for line in (REPO / name).read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            language = record.get("language") or ("ja" if "japanese" in name else "en")
            for key in ("contexts", "retrieved_contexts", "reference_contexts"):
                texts[language] += [c for c in record.get(key) or [] if isinstance(c, str)]
    demo = REPO / "langchain_ragmetrics/demo/corpus.jsonl"
    texts["en"] += [json.loads(line)["text"] for line in demo.read_text("utf-8").splitlines()]
    return texts


CORPUS = corpus_texts()


def test_corpora_are_not_empty() -> None:
    assert len(CORPUS["en"]) > 100
    assert len(CORPUS["ja"]) > 40


@pytest.mark.parametrize("language", ["en", "ja"])
def test_windows_give_the_whole_text_sentences_on_every_corpus_text(language: str) -> None:
    # Windows far smaller than a context put a window edge inside nearly every sentence.
    window = 120
    for text in CORPUS[language]:
        assert windowed(text, language, window=window, max_window=4 * window) == (
            whole_text_pass(text, language)
        ), text


@pytest.mark.parametrize("language", ["en", "ja"])
def test_windows_give_the_whole_text_sentences_on_a_long_text(language: str) -> None:
    joiner = "\n\n" if language == "en" else ""
    text = joiner.join(CORPUS[language])[:20_000]
    expected = whole_text_pass(text, language)
    assert len(expected) > 250
    assert windowed(text, language) == expected
    assert segment(text, language) == expected


def test_pysbd_never_sees_more_than_a_window() -> None:
    seen: list[int] = []
    real = _segmenter("en")

    class Recording:
        def segment(self, text: str) -> list[str]:
            seen.append(len(text))
            return list(real.segment(text))

    text = " ".join(CORPUS["en"])[:50_000]
    pieces = segment_in_windows(Recording(), text)
    assert max(seen) <= SEGMENT_WINDOW
    # Each window is paid about once: the re-read overlap (two sentences) stays small.
    assert sum(seen) < 1.3 * len(text)
    assert re.sub(r"\s", "", "".join(pieces)) == re.sub(r"\s", "", text)


def test_a_run_without_sentence_boundaries_is_cut_not_lost() -> None:
    text = "word " * 20_000  # 100 KB, no punctuation at all
    pieces = segment_in_windows(_segmenter("en"), text)
    assert max(len(p) for p in pieces) <= MAX_SEGMENT_WINDOW
    assert "".join(pieces) == text


@pytest.mark.parametrize("language", ["en", "ja"])
def test_a_100_kb_context_is_segmented_in_bounded_time(language: str) -> None:
    joiner = " " if language == "en" else ""
    text = joiner.join(CORPUS[language])
    text = (text * (100_000 // len(text) + 1))[:100_000]
    clear_segmenter_cache()
    start = time.thread_time()  # CPU of this thread: other processes' load does not count
    sentences = segment(text, language)
    spent = time.thread_time() - start
    assert len(sentences) > 500
    # One whole-text pysbd pass took 10.4 s of CPU here; windows take about 0.8 s.
    assert spent < 5.0, f"{spent:.2f} s of CPU for 100 KB"
    assert re.sub(r"\s", "", "".join(sentences)) == re.sub(r"\s", "", text)


def test_very_long_texts_are_not_kept_in_the_cache() -> None:
    clear_segmenter_cache()
    text = "Short sentence here. " * (SEGMENT_CACHE_MAX_CHARS // 20)
    assert len(text) > SEGMENT_CACHE_MAX_CHARS
    assert len(segment(text, "en")) == SEGMENT_CACHE_MAX_CHARS // 20
    assert _segmented.cache_info().currsize == 0
    segment("Short. Text.", "en")
    assert _segmented.cache_info().currsize == 1


def test_cap_texts() -> None:
    kept, cut = cap_texts(["a" * 10, "b" * 10, "c" * 10], max_chars_each=8, max_chars_total=20)
    assert kept == ["a" * 8, "b" * 8, "c" * 4]
    assert cut == [Truncation(0, 10, 8), Truncation(1, 10, 8), Truncation(2, 10, 4)]
    kept, cut = cap_texts(["a" * 10, "b" * 10], max_chars_each=None, max_chars_total=10)
    assert kept == ["a" * 10, ""]
    assert cut == [Truncation(1, 10, 0)]
    assert cap_texts(["abc"], max_chars_each=None, max_chars_total=None) == (["abc"], [])
