import pytest

from langchain_ragmetrics.calibration._agreement import (
    Agreement,
    accuracy,
    agreement,
    cohen_kappa,
    percentile,
)


def test_accuracy() -> None:
    assert accuracy([True, False, True, True], [True, True, True, False]) == 0.5
    assert accuracy([], []) is None


def test_cohen_kappa_hand_worked() -> None:
    # observed 3/4; chance 1/2 * 1/4 + 1/2 * 3/4 = 1/2; kappa = (3/4 - 1/2) / (1 - 1/2) = 1/2
    assert cohen_kappa([True, True, False, False], [True, False, False, False]) == 0.5
    assert cohen_kappa([True, False], [True, False]) == 1.0
    assert cohen_kappa([True, False], [False, True]) == -1.0


def test_cohen_kappa_undefined() -> None:
    assert cohen_kappa([], []) is None
    assert cohen_kappa([True, True], [True, True]) is None


def test_percentile() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 95) == 3.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([float(i) for i in range(1, 101)], 95) == pytest.approx(95.05)


def test_a_fixed_answer_gets_kappa_exactly_zero() -> None:
    labels = [True] * 7 + [False] * 3
    assert cohen_kappa(labels, [True] * 10) == 0.0
    assert cohen_kappa(labels, [False] * 10) == 0.0


def test_agreement_gives_point_figures_and_intervals_around_them() -> None:
    items = [([True, True, False], [True, False, False]), ([False, True], [False, True])] * 10
    figures = agreement(items)
    labels = [v for lab, _ in items for v in lab]
    judged = [v for _, jud in items for v in jud]
    assert figures.accuracy == accuracy(labels, judged) == 0.8
    assert figures.kappa == cohen_kappa(labels, judged)
    assert figures.accuracy_ci is not None
    assert figures.kappa_ci is not None
    assert figures.accuracy_ci[0] < 0.8 < figures.accuracy_ci[1]
    assert figures.kappa_ci[0] < figures.kappa < figures.kappa_ci[1]
    assert agreement(items) == figures  # seeded: the same report every run
    assert agreement(items, seed=1) != figures


def test_the_bootstrap_resamples_items_not_verdicts() -> None:
    """Two items of ten verdicts each, one all right, one all wrong: resampling whole items can
    only give accuracy 0, 0.5 or 1, so the interval spans [0, 1]; resampling single verdicts
    would give a narrow band around 0.5 as if the 20 verdicts were independent."""
    items = [([True] * 5 + [False] * 5,) * 2, ([True] * 5 + [False] * 5, [False] * 5 + [True] * 5)]
    figures = agreement(items)
    assert figures.accuracy == 0.5
    assert figures.accuracy_ci == (0.0, 1.0)


def test_agreement_of_nothing_is_undefined() -> None:
    assert agreement([]) == Agreement(None, None, None, None)
    one_answer = agreement([([True, True], [True, True])])
    assert one_answer.accuracy == 1.0
    assert one_answer.kappa is None  # labels of one answer only: kappa undefined
    assert one_answer.kappa_ci is None


def test_the_intervals_match_the_textbook_ones_on_independent_verdicts() -> None:
    """With one verdict per item the bootstrap must agree with the normal-approximation
    intervals: p +- 1.96 sqrt(p (1 - p) / n) for accuracy, and Cohen's (1960) large-sample
    standard error sqrt(po (1 - po) / (n (1 - pe)^2)) for kappa."""
    import math

    # 400 items; labels 60 % yes; the judge agrees on 320 (both ways in proportion)
    pairs = (
        [(True, True)] * 200 + [(False, False)] * 120 + [(True, False)] * 40 + [(False, True)] * 40
    )
    items = [([label], [judged]) for label, judged in pairs]
    figures = agreement(items, resamples=4000)
    n, po = len(items), 320 / 400
    pe = 0.6 * 0.6 + 0.4 * 0.4
    assert figures.accuracy == po
    assert figures.kappa == pytest.approx((po - pe) / (1 - pe))
    se_accuracy = math.sqrt(po * (1 - po) / n)
    se_kappa = math.sqrt(po * (1 - po) / (n * (1 - pe) ** 2))
    assert figures.accuracy_ci is not None
    assert figures.kappa_ci is not None
    assert figures.kappa is not None
    for (low, high), centre, se in (
        (figures.accuracy_ci, po, se_accuracy),
        (figures.kappa_ci, figures.kappa, se_kappa),
    ):
        assert low == pytest.approx(centre - 1.96 * se, abs=0.2 * se)
        assert high == pytest.approx(centre + 1.96 * se, abs=0.2 * se)
