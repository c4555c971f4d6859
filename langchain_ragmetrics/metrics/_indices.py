"""Checks that a judge answered exactly once for every numbered item it was shown."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

__all__ = ["check_index_cover"]


def check_index_cover(indices: Iterable[int], count: int, *, items: str) -> None:
    """Raise ValueError unless ``indices`` hold each of 0..count-1 exactly once.

    A missing, unexpected or repeated index is a parse failure (the caller's retry layer
    asks the judge again): a verdict list that does not line up with what was sent would
    silently change the denominator or the ranks.
    """
    seen = Counter(indices)
    expected = set(range(count))
    missing = sorted(expected - set(seen))
    extra = sorted(set(seen) - expected)
    duplicated = sorted(i for i, n in seen.items() if n > 1)
    if missing or extra or duplicated:
        msg = (
            f"expected one verdict for each of {count} {items}; "
            f"missing {missing}, unexpected {extra}, duplicated {duplicated}"
        )
        raise ValueError(msg)
