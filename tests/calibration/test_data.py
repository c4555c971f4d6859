"""The shipped calibration set: enough varied items, and labels consistent with our scorers.

The JSONL file is the source of truth (edited by hand); these tests are its validator.
"""

from collections import Counter
from pathlib import Path

import pytest

from langchain_ragmetrics._text import segment
from langchain_ragmetrics.calibration import CalibrationItem, load_calibration_set
from langchain_ragmetrics.metrics.context_entity_recall import score_entity_recall
from langchain_ragmetrics.metrics.context_precision import (
    SingleContextVerdict,
    score_context_precision,
)
from langchain_ragmetrics.metrics.context_recall import RecallStatements, score_context_recall
from langchain_ragmetrics.metrics.context_relevance import score_context_relevance, split_contexts

ITEMS = load_calibration_set()
IDS = [item.id for item in ITEMS]
ROOT = Path(__file__).resolve().parents[2]


def test_at_least_forty_items_per_metric_in_both_languages() -> None:
    assert len(set(IDS)) == len(IDS)
    assert len(ITEMS) >= 40  # every item is labelled for recall, precision and relevance
    with_entities = [i for i in ITEMS if i.labels.context_entity_recall.score is not None]
    assert len(with_entities) >= 40
    languages = Counter(item.language for item in ITEMS)
    assert set(languages) == {"en", "ja"}
    assert min(languages.values()) >= 15
    assert load_calibration_set(language="ja") == [i for i in ITEMS if i.language == "ja"]


def test_the_hard_cases_are_covered() -> None:
    tags = Counter(tag for item in ITEMS for tag in item.tags)
    for tag in (
        "paraphrase",
        "partial-support",
        "numbers-dates",
        "duplicate",
        "near-duplicate",
        "distractor",
        "spelling-variant",
        "unanswerable",
    ):
        assert tags[tag] >= 2, tag
    for language in ("en", "ja"):
        assert any("unanswerable" in i.tags for i in ITEMS if i.language == language)
    # both verdicts occur for every metric, so kappa is defined on the labels
    recall = [v for i in ITEMS for v in i.labels.context_recall.attributed]
    useful = [v for i in ITEMS for v in i.labels.context_precision.useful]
    found = [
        bool(e.found) for i in ITEMS for e in i.labels.context_entity_recall.reference_entities
    ]
    for flags in (recall, useful, found):
        assert True in flags
        assert False in flags


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
