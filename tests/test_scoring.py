import math

import pytest

from langchain_ragmetrics.scoring import (
    average_precision,
    entity_overlap,
    entity_recall,
    recall_fraction,
    relevance_ratio,
)


def test_recall_fraction_einstein_seed() -> None:
    assert recall_fraction([1, 1, 0, 0]) == 0.5


def test_recall_fraction_empty_is_nan() -> None:
    assert math.isnan(recall_fraction([]))


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        ([0, 1], 0.5),
        ([0, 1, 1], 7 / 12),
        ([1, 1, 1], 1.0),
        ([0, 0, 0], 0.0),
        ([], 0.0),
        ([1, 0, 1], 5 / 6),
    ],
)
def test_average_precision(verdicts: list[int], expected: float) -> None:
    assert average_precision(verdicts) == pytest.approx(expected, abs=0)


def test_average_precision_japanese_seed_rounds_like_article() -> None:
    # (0 + 1/2 + 2/3) / 2 = 0.58333..., printed as 0.585 in the article after rounding 2/3 to 0.67
    assert round(average_precision([0, 1, 1]), 4) == 0.5833


TAJ_GE = ["Taj Mahal", "Yamuna", "Agra", "1631", "Shah Jahan", "Mumtaz Mahal"]


def test_entity_recall_taj_mahal_seed() -> None:
    ce1 = ["Taj Mahal", "Agra", "Shah Jahan", "Mumtaz Mahal", "India"]
    ce2 = ["Taj Mahal", "UNESCO", "India"]
    assert entity_recall(TAJ_GE, ce1) == 4 / 6
    assert entity_recall(TAJ_GE, ce2) == 1 / 6


def test_entity_matching_ignores_case_punctuation_and_spacing() -> None:
    found, missing = entity_overlap(
        ["Shah Jahan", "U.S.A.", "Ｔａｊ"], ["shah-jahan", "usa", "taj"]
    )
    assert found == ["Shah Jahan", "U.S.A.", "Ｔａｊ"]
    assert missing == []


def test_entity_recall_duplicates_and_empty() -> None:
    assert entity_recall(["Agra", "agra", " Agra "], ["AGRA"]) == 1.0
    assert math.isnan(entity_recall([], ["Agra"]))
    assert math.isnan(entity_recall(["..."], ["Agra"]))


def test_relevance_ratio() -> None:
    assert relevance_ratio(2, 8) == 0.25
    assert relevance_ratio(9, 8) == 1.0
    assert relevance_ratio(0, 8) == 0.0
    assert relevance_ratio(3, 0) == 0.0
