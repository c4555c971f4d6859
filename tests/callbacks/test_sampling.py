import math
import uuid

import pytest

from langchain_ragmetrics.callbacks._sampling import check_rate, is_sampled, sample_point

IDS = [uuid.uuid5(uuid.NAMESPACE_URL, f"trace-{i}") for i in range(4000)]


def test_same_trace_same_decision() -> None:
    for trace in IDS[:200]:
        assert is_sampled(trace, 0.3) == is_sampled(uuid.UUID(str(trace)), 0.3)
        assert 0.0 <= sample_point(trace) < 1.0


def test_rates_zero_and_one() -> None:
    assert all(is_sampled(t, 1.0) for t in IDS[:100])
    assert not any(is_sampled(t, 0.0) for t in IDS[:100])


def test_fraction_is_close_to_the_rate_and_nested() -> None:
    low = {t for t in IDS if is_sampled(t, 0.1)}
    high = {t for t in IDS if is_sampled(t, 0.5)}
    assert 0.07 < len(low) / len(IDS) < 0.13
    assert 0.45 < len(high) / len(IDS) < 0.55
    assert low <= high  # raising the rate keeps every trace already selected


def test_uuid7_like_ids_with_shared_prefix_are_spread() -> None:
    prefix = uuid.uuid4().bytes[:10]
    ids = [uuid.UUID(bytes=prefix + i.to_bytes(6, "big")) for i in range(2000)]
    share = sum(is_sampled(t, 0.5) for t in ids) / len(ids)
    assert 0.44 < share < 0.56


@pytest.mark.parametrize("rate", [-0.1, 1.5])
def test_rejects_rates_outside_unit_interval(rate: float) -> None:
    with pytest.raises(ValueError, match="sample_rate"):
        check_rate(rate)


def _ids(n: int, *, seed: int, time_ordered: bool) -> list[uuid.UUID]:
    """``n`` reproducible ids: random UUIDv4, or UUIDv7-like ids sharing a timestamp."""
    import random

    rng = random.Random(seed)
    if not time_ordered:
        return [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(n)]
    stamp = rng.getrandbits(48) << 80
    return [uuid.UUID(int=stamp | rng.getrandbits(80)) for _ in range(n)]


@pytest.mark.parametrize("time_ordered", [False, True])
@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_the_realised_rate_over_many_traces_is_the_requested_rate(
    rate: float, time_ordered: bool
) -> None:
    """Within 4 standard deviations over 50,000 ids: sampling at 90 % of the rate fails."""
    n = 50_000
    ids = _ids(n, seed=12, time_ordered=time_ordered)
    realised = sum(is_sampled(t, rate) for t in ids) / n
    tolerance = 4 * math.sqrt(rate * (1 - rate) / n)  # 0.0054 at 0.1, 0.0089 at 0.5
    assert abs(realised - rate) < tolerance
    assert tolerance < 0.6 * 0.1 * rate  # a 90 %-of-rate sampler lands well outside
