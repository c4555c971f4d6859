import pytest

from langchain_ragmetrics.calibration._agreement import accuracy, cohen_kappa, percentile


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
