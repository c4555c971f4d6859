"""Texts for the sentence-segmentation differential tests: shipped corpora and generated ones."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

__all__ = ["REPO", "plain_pysbd_sentences", "random_text", "shipped_texts"]

REPO = Path(__file__).resolve().parents[2]


def plain_pysbd_sentences(text: str, language: str) -> list[str]:
    """What ``segment`` returned before the fast processor: stock pysbd through our windows."""
    import pysbd

    from langchain_ragmetrics._text import segment_in_windows

    if not text or not text.strip():
        return []
    stock = pysbd.Segmenter(language=language, clean=False)
    pieces = segment_in_windows(stock, text)
    return [s.strip() for s in pieces if s and s.strip()]


def _strings(record: object) -> list[str]:
    """Every string in a JSON value (contexts, references, questions, labels' sentences)."""
    if isinstance(record, str):
        return [record]
    if isinstance(record, dict):
        return [s for v in record.values() for s in _strings(v)]
    if isinstance(record, list):
        return [s for v in record for s in _strings(v)]
    return []


def shipped_texts() -> dict[str, list[str]]:
    """By language: every text of ``bench/make_dataset.build(200)``, the shipped benchmark
    dataset, the calibration set, the test and cookbook data and the demo corpus."""
    texts: dict[str, list[str]] = {"en": [], "ja": []}
    name = "_ragmetrics_bench_make_dataset"
    make_dataset = sys.modules.get(name)
    if make_dataset is None:
        spec = importlib.util.spec_from_file_location(name, REPO / "bench/make_dataset.py")
        assert spec is not None
        assert spec.loader is not None
        make_dataset = importlib.util.module_from_spec(spec)
        sys.modules[name] = make_dataset  # its dataclasses look their module up there
        spec.loader.exec_module(make_dataset)
    records = list(make_dataset.build(200))
    records += json.loads((REPO / "bench/data/dataset.json").read_text(encoding="utf-8"))
    for name in (
        "langchain_ragmetrics/calibration/data/calibration_set.jsonl",
        "tests/data/einstein.jsonl",
        "tests/data/japanese.jsonl",
        "cookbook/data/rag_eval.jsonl",
        "langchain_ragmetrics/demo/corpus.jsonl",
    ):
        for line in (REPO / name).read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            language = record.get("language") or ("ja" if "japanese" in name else "en")
            records.append({**record, "language": language})
    for record in records:
        language = str(record["language"])
        texts[language] += [s for s in _strings(record) if s != language]
    return {lang: list(dict.fromkeys(found)) for lang, found in texts.items()}


# --- a grammar of what pysbd's rules look at ----------------------------------------------------

_WORDS = [
    *[
        "the",
        "cat",
        "sat",
        "on",
        "a",
        "mat",
        "it",
        "was",
        "late",
        "and",
        "he",
        "left",
        "quickly",
        "she",
        "said",
        "yes",
        "no",
        "maybe",
    ],
    *[
        "The",
        "He",
        "She",
        "I",
        "It",
        "We",
        "They",
        "There",
        "When",
        "Where",
        "Who",
        "Why",
        "However",
        "In",
        "A",
        "That",
        "What",
    ],
    *[
        "Millions",
        "I'm",
        "I'll",
        "you're",
        "don't",
        "it's",
        "Smith",
        "Washington",
        "London",
        "Berlin",
        "kg",
        "ok",
        "x",
    ],
]
_NUMBERS = ["3", "3.5", "12.", "1914", "0.5%", "1,000.00", "42", "7", "10.000", "2.", "٣", "３．５"]
_LISTS = [
    "1.", "2.", "3.", "1)", "2)", "3)", "a.", "b.", "c.", "a)", "b)", "(a)", "(b)", "i.", "ii.",
    "iii.", "(iv)", "(v)", "iv)", "-1.", "-2.", "⁃1.", "⁃2.", "9.", "10.", "0.", "x.", "xi.",
]  # fmt: skip
_PUNCT = [
    ".", ".", ".", "!", "?", "!!!", "??", "?!", "!?", "!!", "...", ". . .", " . . . ", ". . . .",
    "....", "。", "！", "？", "．", ":", ",", ";", "--", "—", "'", '"', "(", ")", "[", "]", "-",
]  # fmt: skip
_QUOTED = [
    '"Hello there."', "'quoted. words'", "“Yes! Really?” ", "‘no. never’", "«oui. non»",
    "「はい。そうです。」", "（注。例）", "(see p. 4)", "[1]", "[1, 2]", "(ii)", "(Dr. No)",
    '"Stop!" he said.', "'Why?' she asked.", " (U.S.) ", '" (a) "', "--a. b.--", "'tis",
    "(d) ", " 'word' ", "don't", '"(x)" "y"',
]  # fmt: skip
_SPECIAL = [
    "Yahoo!", "!Kung", "ǃXũ", "Y!J", "U.S.", "U.S.A.", "U.K.", "E.U.", "p.m.", "a.m.", "P.M.",
    "A.M.", "e.g.", "i.e.", "Ph.D.", "Co. KG", "John's", "Inc.'s", "a.b@c.com", "www.example.com",
    "file .pdf", " .jpg ", "45°.5", "90°. 3", "i.v.", "I.V.", "∯", "ȸ", "&ᓴ&", "♨", "☝", "ƪ",
    "\u2028", "\x0c", "{is} ", "Fig. 3", "No. 5", "pp. 12", "art. (3)", "St. Louis", "Mt. Fuji",
]  # fmt: skip
_JA = [
    "東京は日本の首都です", "本当ですか", "岸田文雄氏は首相です", "そうですね", "１．", "２．",
    "（１）", "「引用」", "第3章。", "約1.5キロ", "ＡＢＣ", "の\n", "ムンバイ、インド",
]  # fmt: skip
_SEPARATORS = [" "] * 8 + ["  ", "\n", "\n\n", "\r\n", "\r", "\t", "", "", "\u00a0", " \n "]
_ODD_CASES = {"s": "ſ", "k": "K", "i": "ı", "I": "İ"}  # case-insensitive equivalents in `re`


def _abbreviation(rng: random.Random) -> str:
    from pysbd.lang.common.standard import Standard

    word = rng.choice(Standard.Abbreviation.ABBREVIATIONS)
    style = rng.random()
    if style < 0.3:
        word = word.capitalize()
    elif style < 0.4:
        word = word.upper()
    elif style < 0.45:
        word = "".join(_ODD_CASES.get(c, c) for c in word)
    return word + rng.choice([".", ".", ".", "", ". ", ".:", ".,", ".-", "..", ".?"])


def random_text(rng: random.Random, *, max_pieces: int = 30) -> str:
    """A text mixing abbreviations, numbers, list markers, quotes, ellipses, exclamation words,
    Japanese punctuation, odd whitespace and pysbd's own placeholder characters."""
    kinds = [
        (_WORDS, 30),
        (_NUMBERS, 6),
        (_LISTS, 6),
        (_PUNCT, 16),
        (_QUOTED, 5),
        (_SPECIAL, 6),
        (_JA, 8),
    ]
    pools = [pool for pool, _ in kinds]
    weights = [weight for _, weight in kinds]
    out = []
    for _ in range(rng.randint(1, max_pieces)):
        if rng.random() < 0.12:
            piece = _abbreviation(rng)
        else:
            piece = rng.choice(rng.choices(pools, weights)[0])
        out.append(piece + rng.choice(_SEPARATORS))
    return "".join(out)
