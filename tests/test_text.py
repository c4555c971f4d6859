import pytest

from langchain_ragmetrics._text import (
    check_language,
    clear_segmenter_cache,
    language_name,
    normalize_for_match,
    segment,
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
