"""The shipped calibration set: enough varied items, and labels consistent with our scorers.

The JSONL file is the source of truth (edited by hand); these tests are its validator.
"""

from collections import Counter
from pathlib import Path

import pytest

from langchain_ragmetrics._text import segment
from langchain_ragmetrics.calibration import CalibrationItem, load_calibration_set
from langchain_ragmetrics.metrics._context_entity_recall import score_entity_recall
from langchain_ragmetrics.metrics._context_precision import (
    SingleContextVerdict,
    score_context_precision,
)
from langchain_ragmetrics.metrics._context_recall import RecallStatements, score_context_recall
from langchain_ragmetrics.metrics._context_relevance import score_context_relevance, split_contexts

ITEMS = load_calibration_set()
IDS = [item.id for item in ITEMS]
ROOT = Path(__file__).resolve().parents[2]


def _verdicts(item: CalibrationItem) -> dict[str, list[bool]]:
    """The item's labelled verdicts per metric, as check_judge compares them."""
    labels = item.labels
    relevance = labels.context_relevance
    return {
        "context_recall": list(labels.context_recall.attributed),
        "context_precision": list(labels.context_precision.useful),
        "context_entity_recall": [
            bool(e.found) for e in labels.context_entity_recall.reference_entities
        ],
        "context_relevance": [i in relevance.relevant for i in range(len(relevance.sentences))],
    }


def test_enough_items_in_both_languages() -> None:
    assert len(set(IDS)) == len(IDS)
    assert len(ITEMS) >= 80  # every item is labelled for all four metrics
    languages = Counter(item.language for item in ITEMS)
    assert set(languages) == {"en", "ja"}
    assert min(languages.values()) >= 35
    assert load_calibration_set(language="ja") == [i for i in ITEMS if i.language == "ja"]


@pytest.mark.parametrize("language", [None, "en", "ja"])
def test_every_metric_has_a_hundred_verdicts_a_third_of_them_negative(
    language: str | None,
) -> None:
    """Enough verdicts for a kappa with a useful interval, and enough "no" labels that a judge
    answering "yes" to everything cannot look good; per language, both answers occur."""
    items = [i for i in ITEMS if language is None or i.language == language]
    for metric in ("context_recall", "context_precision", "context_entity_recall"):
        flags = [v for item in items for v in _verdicts(item)[metric]]
        if language is None:
            assert len(flags) >= 100, metric
            assert flags.count(False) >= len(flags) / 3, metric
        assert True in flags, (metric, language)
        assert False in flags, (metric, language)
    relevance = [v for item in items for v in _verdicts(item)["context_relevance"]]
    assert len(relevance) >= (100 if language is None else 1)
    assert relevance.count(False) >= len(relevance) / 3
    assert True in relevance


def test_passages_have_realistic_lengths() -> None:
    lengths = [len(c) for item in ITEMS for c in item.contexts]
    assert sum(300 <= n <= 800 for n in lengths) >= 40
    # Japanese packs more into a character: a 200-character passage reads like ~500 in English
    japanese = [len(c) for item in ITEMS if item.language == "ja" for c in item.contexts]
    assert sum(n >= 200 for n in japanese) >= 10


def test_items_are_told_apart_by_question_reference_and_passages() -> None:
    """The loopback judges find an item by any of these, so each must be unique."""
    for key in (
        lambda i: i.question,
        lambda i: i.reference,
        lambda i: "\n\n".join(i.contexts),
    ):
        values = [key(item) for item in ITEMS]
        assert len(set(values)) == len(values)


def test_the_hard_cases_are_covered() -> None:
    tags = Counter(tag for item in ITEMS for tag in item.tags)
    for tag in (
        "paraphrase",
        "contradiction",
        "partial-support",
        "numbers-dates",
        "near-miss",
        "duplicate",
        "near-duplicate",
        "distractor",
        "spelling-variant",
        "unanswerable",
        "long-passage",
    ):
        assert tags[tag] >= 2, tag
    for language in ("en", "ja"):
        held = Counter(tag for i in ITEMS if i.language == language for tag in i.tags)
        for tag in ("contradiction", "near-miss", "partial-support", "unanswerable", "duplicate"):
            assert held[tag] >= 2, (language, tag)


@pytest.mark.parametrize("item", ITEMS, ids=IDS)
def test_pysbd_yields_exactly_the_labelled_sentences(item: CalibrationItem) -> None:
    assert segment(item.reference, item.language) == item.labels.context_recall.sentences
    sentences = [s.text for s in split_contexts(item.contexts, item.language)]
    assert sentences == item.labels.context_relevance.sentences


@pytest.mark.parametrize("item", ITEMS, ids=IDS)
def test_labelled_scores_equal_our_pure_scorers(item: CalibrationItem) -> None:
    labels = item.labels
    recall = labels.context_recall
    answer = RecallStatements.model_validate(
        {
            "statements": [
                {"index": i, "reason": "", "attributed": flag}
                for i, flag in enumerate(recall.attributed)
            ]
        }
    )
    assert score_context_recall(recall.sentences, answer).score == recall.score

    precision = labels.context_precision
    assert len(precision.useful) == len(item.contexts)
    verdicts = [SingleContextVerdict(reason="", useful=flag) for flag in precision.useful]
    assert score_context_precision(verdicts, mode="reference").score == precision.score

    relevance = labels.context_relevance
    sentences = split_contexts(item.contexts, item.language)
    assert score_context_relevance(sentences, relevance.relevant).score == relevance.score

    entities = labels.context_entity_recall
    verdict = score_entity_recall(
        [e.forms() for e in entities.reference_entities],
        [e.forms() for e in entities.context_entities],
    )
    if entities.score is None:
        assert not entities.reference_entities
        assert verdict.score != verdict.score  # NaN: nothing to recall
    else:
        assert verdict.score == entities.score
        assert verdict.details["found"] == [e.name for e in entities.reference_entities if e.found]


def test_the_set_ships_in_the_wheel() -> None:
    from hatchling.builders.wheel import WheelBuilder

    files = {f.distribution_path for f in WheelBuilder(str(ROOT)).recurse_included_files()}
    assert "langchain_ragmetrics/calibration/data/calibration_set.jsonl" in files


def test_the_docs_describe_the_set_as_it_is() -> None:
    """The docs' counts of the set come from the data, not from memory."""
    readme = " ".join((ROOT / "docs" / "check-judge.md").read_text(encoding="utf-8").split())
    languages = Counter(item.language for item in ITEMS)
    assert (
        f"holds {len(ITEMS)} items written for this package, {languages['en']} English and "
        f"{languages['ja']} Japanese" in readme
    )
    what = {
        "context_recall": "reference sentences",
        "context_precision": "passages",
        "context_entity_recall": "reference entities",
        "context_relevance": "context sentences",
    }
    for metric, unit in what.items():
        flags = [v for item in ITEMS for v in _verdicts(item)[metric]]
        share = round(100 * flags.count(False) / len(flags))
        assert f"{len(flags)} {unit} ({share} % not" in readme, metric
    lengths = [len(c) for item in ITEMS for c in item.contexts]
    japanese = [len(c) for item in ITEMS if item.language == "ja" for c in item.contexts]
    assert f"up to {max(lengths)} characters" in readme
    assert f"({sum(300 <= n <= 800 for n in lengths)} of 300-800;" in readme
    assert f"Japanese ones up to {max(japanese)})" in readme
