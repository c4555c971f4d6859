"""The fast pysbd processor gives exactly pysbd's sentences (differential tests)."""

import ast
import random
import re
import sys

import pysbd
import pytest
from pysbd.languages import Language
from pysbd.processor import Processor

from langchain_ragmetrics._segment_fast import (
    FAST_LANGUAGES,
    PYSBD_VERSION,
    FastProcessor,
    _language_rules,
    _literal,
    fast_processor,
)
from langchain_ragmetrics._text import _segmenter, clear_segmenter_cache, segment
from tests._support.segment_texts import REPO, plain_pysbd_sentences, random_text, shipped_texts

SHIPPED = shipped_texts()
GENERATED = 700  # per language; `python tests/test_segment_fast.py N` runs N more


def strings_of_text_tests() -> list[str]:
    """Every string literal of the tests that segment text (the existing ones, unchanged)."""
    found = []
    for name in (
        "tests/test_text.py",
        "tests/metrics/test_context_relevance.py",
        "tests/metrics/test_context_recall.py",
        "tests/metrics/test_context_relevance_long.py",
    ):
        tree = ast.parse((REPO / name).read_text(encoding="utf-8"))
        found += [
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value
        ]
    return found


def test_the_corpora_are_there() -> None:
    assert len(SHIPPED["en"]) > 1000
    assert len(SHIPPED["ja"]) > 400
    assert len(strings_of_text_tests()) > 100


@pytest.mark.parametrize("language", FAST_LANGUAGES)
def test_segment_is_plain_pysbd_on_every_shipped_text(language: str) -> None:
    # The dataset generator's 200 samples, the benchmark set, the calibration set, the test,
    # cookbook and demo data (in their language), and every string of the existing
    # segmentation tests (in both).
    texts = SHIPPED[language] + strings_of_text_tests()
    clear_segmenter_cache()
    for text in texts:
        assert segment(text, language) == plain_pysbd_sentences(text, language), text


@pytest.mark.parametrize("language", FAST_LANGUAGES)
def test_processor_is_pysbds_on_generated_texts(language: str) -> None:
    check_generated(language, GENERATED, seed=f"segment-{language}")


def check_generated(language: str, count: int, *, seed: str) -> None:
    """``count`` generated texts: our processor's output (before pysbd's span lookup) and
    ``segment``'s are pysbd's, and the texts do reach the rules the fast paths skip."""
    rng = random.Random(seed)
    lang = Language.get_language_code(language)
    fast = fast_processor(language)
    assert fast is not None
    rules = _language_rules(language)
    reached = {"abbreviation": 0, "numbered list": 0, "lettered list": 0, "quote": 0}
    for i in range(count):
        text = random_text(rng)
        assert fast(text).process() == Processor(text, lang).process(), text
        if i % 5 == 0:  # through the windows and span lookup too (the slow side is slow)
            clear_segmenter_cache()
            assert segment(text, language) == plain_pysbd_sentences(text, language), text
        processor = fast(text)
        line = text.replace("\n", "\r")
        reached["abbreviation"] += any(
            processor._abbreviation_spots(part) for part in line.splitlines(True)
        )
        reached["numbered list"] += rules.li_numbered_1_has(line)
        reached["lettered list"] += rules.li_alpha_periods_has(line)
        reached["quote"] += '"' in text or "'" in text
    # The generator is not vacuous: each special case shows up in a fair share of the texts.
    assert all(n > count // 10 for n in reached.values()), reached


def test_odd_case_variants_of_abbreviations() -> None:
    # `re`'s case-insensitive matching finds "ſt" for "st", "K" (Kelvin) for "k", "ı" and
    # "İ" for "i": the abbreviation pass must see them exactly as pysbd does.
    lang = Language.get_language_code("en")
    fast = fast_processor("en")
    assert fast is not None
    for text in (
        "He met Dr. No. Then ſt. Louis. ſT. x. İnc. Co. İd. is. ıs. ıd. I lıve.",
        "Mr. X went to ſt. Paul. Kan. is here. Mo. 5 is. nos. (3) are.",
        "ṡt. and ſt.x and {is} x and {is} Y. Is. A.",
    ):
        assert fast(text).process() == Processor(text, lang).process(), text


def test_isspace_is_the_regex_whitespace_class() -> None:
    # The abbreviation pass tests "after whitespace" with str.isspace, pysbd with \s.
    everything = "".join(map(chr, range(sys.maxunicode + 1)))
    assert re.findall(r"\s", everything) == [c for c in everything if c.isspace()]


def test_literal_patterns() -> None:
    assert _literal("∯") == "∯"
    assert _literal(r"\?!") == "?!"
    assert _literal(r"\\\(") == "\\("
    assert _literal("&ᓴ&") == "&ᓴ&"
    for pattern in (r"\n", r"\d", "a.b", "(x)", "x{2}", "a|b", "^a", "", "a\\"):
        assert _literal(pattern) is None, pattern


def test_the_segmenter_uses_the_fast_processor() -> None:
    clear_segmenter_cache()
    for language in FAST_LANGUAGES:
        assert isinstance(_segmenter(language).processor("One. Two."), FastProcessor)
    assert not isinstance(_segmenter("de").processor("Eins. Zwei."), FastProcessor)


def test_other_pysbd_versions_and_languages_use_pysbds_processor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert pysbd.__version__ == PYSBD_VERSION
    assert fast_processor("de") is None
    monkeypatch.setattr(pysbd, "__version__", "0.3.5")
    clear_segmenter_cache()
    try:
        assert fast_processor("en") is None
        assert not isinstance(_segmenter("en").processor("One. Two."), FastProcessor)
        assert segment("Dr. Smith left. He came back.", "en") == [
            "Dr. Smith left.",
            "He came back.",
        ]
    finally:
        monkeypatch.undo()
        clear_segmenter_cache()
    assert isinstance(_segmenter("en").processor("One. Two."), FastProcessor)


if __name__ == "__main__":  # a longer run: python tests/test_segment_fast.py 20000
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    for code in FAST_LANGUAGES:
        check_generated(code, runs, seed=f"long-{code}")
        print(code, runs, "generated texts: identical")
