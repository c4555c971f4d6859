"""Agreement statistics between a judge's verdicts and the labels (pure functions)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "Agreement",
    "accuracy",
    "agreement",
    "cohen_kappa",
    "percentile",
]

BOOTSTRAP_RESAMPLES = 2000
"""Resamples of the items behind every 95 % interval of a judge check."""
BOOTSTRAP_SEED = 0
"""Seed of those resamples: the same report every run."""
_CHUNK = 250  # resamples drawn at once (bounds memory)

ItemVerdicts = tuple[Sequence[bool], Sequence[bool]]
"""One item's (labelled verdicts, judged verdicts), aligned."""


def accuracy(labels: Sequence[bool], judged: Sequence[bool]) -> float | None:
    """Share of verdicts that agree with the labels; None when there are none."""
    if not labels:
        return None
    return sum(a == b for a, b in zip(labels, judged, strict=True)) / len(labels)


def cohen_kappa(labels: Sequence[bool], judged: Sequence[bool]) -> float | None:
    """Cohen's kappa of two binary raters: agreement beyond what chance would give.

    None when it is undefined: no verdicts, or both raters always give the same single
    answer (chance agreement is then 1).
    """
    n = len(labels)
    if not n:
        return None
    agree = sum(a == b for a, b in zip(labels, judged, strict=True))
    return _kappa(n, agree, sum(labels), sum(judged))


def _kappa(n: int, agree: int, label_yes: int, judged_yes: int) -> float | None:
    """Kappa from counts, in integers (so a fixed-answer judge gets exactly 0, not 1e-17)."""
    chance = label_yes * judged_yes + (n - label_yes) * (n - judged_yes)  # times n squared
    if chance == n * n:
        return None
    return (n * agree - chance) / (n * n - chance)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Agreement:
    """Accuracy and kappa of pooled verdicts, each with its 95 % bootstrap interval."""

    accuracy: float | None
    accuracy_ci: tuple[float, float] | None
    kappa: float | None
    kappa_ci: tuple[float, float] | None


def _kappas(counts: np.ndarray) -> np.ndarray:
    """Kappa per row of (verdicts, agreeing, labelled yes, judged yes); NaN where undefined."""
    n, agree, label_yes, judged_yes = (counts[:, k] for k in range(4))
    chance = label_yes * judged_yes + (n - label_yes) * (n - judged_yes)  # integers, as _kappa
    undefined = chance == n * n
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa: np.ndarray = (n * agree - chance) / np.where(undefined, 1, n * n - chance)
    kappa[undefined] = np.nan
    return kappa


def _interval(values: np.ndarray) -> tuple[float, float] | None:
    kept = values[~np.isnan(values)]
    if not kept.size:
        return None
    low, high = np.percentile(kept, [2.5, 97.5])
    return float(low), float(high)


def agreement(
    items: Sequence[ItemVerdicts],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Agreement:
    """Accuracy and Cohen's kappa of the pooled verdicts, with percentile bootstrap intervals.

    The bootstrap resamples whole items (with replacement), not single verdicts: the verdicts
    of one item share its passages, so they are not independent. A resample whose labels are
    all one answer leaves kappa undefined and is left out of the kappa interval.

    Args:
        items: Per item, its labelled and judged verdicts, aligned.
        resamples: Bootstrap resamples.
        seed: Seed of the resampling (the same seed gives the same resamples, so intervals of
            two judges on the same items are drawn over the same resamples).
    """
    labels = [v for item_labels, _ in items for v in item_labels]
    judged = [v for _, item_judged in items for v in item_judged]
    if not labels:
        return Agreement(None, None, None, None)
    counts = np.array(
        [
            (len(lab), sum(a == b for a, b in zip(lab, jud, strict=True)), sum(lab), sum(jud))
            for lab, jud in items
        ],
        dtype=np.int64,
    )
    rng = np.random.default_rng(seed)
    sums = np.empty((resamples, 4), dtype=np.int64)
    for start in range(0, resamples, _CHUNK):
        size = min(_CHUNK, resamples - start)
        picks = rng.integers(0, len(items), size=(size, len(items)))
        sums[start : start + size] = counts[picks].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        accuracies = np.where(sums[:, 0] > 0, sums[:, 1] / sums[:, 0], np.nan)
    return Agreement(
        accuracy=accuracy(labels, judged),
        accuracy_ci=_interval(accuracies),
        kappa=cohen_kappa(labels, judged),
        kappa_ci=_interval(_kappas(sums)),
    )
