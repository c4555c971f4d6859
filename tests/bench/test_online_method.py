"""The online benchmark's method: how pairs and blocks are scheduled and timed.

Pure functions of ``bench/_online_driver.py`` and ``bench/bench_online.py``, checked with a
fake clock: every duration is set by the test, so nothing here depends on the machine's speed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import _online_driver as driver  # noqa: E402 - bench/ is not a package
import bench_online  # noqa: E402

WAIT = 0.050
COST = {"with": 0.003, "without": 0.002, "none": 0.002, "noop": 0.0025, "handler": 0.004}


class FakeClock:
    """A clock that only moves when the pace waits or a call runs, by the amounts set."""

    def __init__(self) -> None:
        self.now = 0.0
        self.events: list[str] = []

    def __call__(self) -> float:
        return self.now

    def wait(self) -> None:
        self.events.append("wait")
        self.now += WAIT

    def call(self, side: str) -> None:
        self.events.append(side)
        self.now += COST[side]


@pytest.mark.parametrize("pairs", [1, 2, 7, 30, 1000])
@pytest.mark.parametrize("order", ["shuffle", "alternate"])
def test_each_side_runs_first_in_half_the_pairs(pairs: int, order: str) -> None:
    orders = driver.pair_orders(pairs, seed=3, order=order)
    assert len(orders) == pairs
    with_first = sum(orders)
    assert with_first == (pairs + 1) // 2  # the odd one out (if any) with callbacks first
    assert pairs - with_first == pairs // 2


def test_shuffled_orders_are_seeded_and_not_periodic() -> None:
    orders = driver.pair_orders(1000, seed=3)
    assert orders == driver.pair_orders(1000, seed=3)
    assert orders != driver.pair_orders(1000, seed=4)
    assert orders != driver.pair_orders(1000, seed=3, order="alternate")
    # each half of the run is near balanced too (a shuffle, not "all with-first, then the rest")
    assert 200 < sum(orders[:500]) < 300


def test_alternate_orders_alternate() -> None:
    assert driver.pair_orders(4, seed=0, order="alternate") == [True, False, True, False]


def test_unknown_order_is_refused() -> None:
    with pytest.raises(ValueError, match="`order` must be 'shuffle' or 'alternate'"):
        driver.pair_orders(4, seed=0, order="random")


def test_pair_timings_exclude_the_wait_and_follow_the_orders() -> None:
    clock = FakeClock()
    orders = [True, False, False, True]
    times = driver.timed_pairs(
        orders, wait=clock.wait, call=clock.call, clock=clock, cpu_clock=clock
    )
    # each timing is its call alone: the 50 ms wait is in neither side
    assert times["with"] == [pytest.approx(COST["with"])] * 4
    assert times["without"] == [pytest.approx(COST["without"])] * 4
    # the calling thread's CPU of each call, kept apart per side the same way
    assert times["cpu_with"] == [pytest.approx(COST["with"])] * 4
    assert times["cpu_without"] == [pytest.approx(COST["without"])] * 4
    # one wait per pair, before it; then the two sides in the order given
    assert clock.events == [
        "wait", "with", "without",
        "wait", "without", "with",
        "wait", "without", "with",
        "wait", "with", "without",
    ]  # fmt: skip


def test_block_schedule_has_every_config_once_per_round() -> None:
    configs = ["none", "noop", "handler"]
    schedule = driver.block_schedule(configs, 20, seed=1)
    assert len(schedule) == 60
    rounds = [schedule[i : i + 3] for i in range(0, 60, 3)]
    assert all(sorted(r) == sorted(configs) for r in rounds)
    assert len({tuple(r) for r in rounds}) > 1  # the order changes from round to round
    assert schedule == driver.block_schedule(configs, 20, seed=1)
    # no config always first: each leads some round
    assert {r[0] for r in rounds} == set(configs)


def test_block_timings_exclude_the_wait() -> None:
    clock = FakeClock()
    schedule = ["noop", "handler", "none"]
    times = driver.timed_blocks(
        schedule, block_size=3, wait=clock.wait, call=clock.call, clock=clock
    )
    assert {k: len(v) for k, v in times.items()} == {"noop": 3, "handler": 3, "none": 3}
    for config, values in times.items():
        assert values == [pytest.approx(COST[config])] * 3
    assert clock.events[:6] == ["wait", "noop", "wait", "noop", "wait", "noop"]
    assert clock.events.count("wait") == 9  # every call paced


def _pairs(added: float, position: float, orders: list[bool]) -> tuple[list[float], list[float]]:
    """Latencies of pairs where callbacks add ``added`` s and running first costs ``position``."""
    with_, without = [], []
    for i, first in enumerate(orders):
        jitter = (i % 7) * 1e-5  # distinct values, same for both sides of a pair
        with_.append(0.004 + added + (position if first else 0.0) + jitter)
        without.append(0.004 + (0.0 if first else position) + jitter)
    return with_, without


def test_balanced_pairs_cancel_the_position_effect() -> None:
    orders = driver.pair_orders(200, seed=5)
    with_, without = _pairs(0.0005, 0.001, orders)
    summary = bench_online._summary(with_, without, orders)
    assert summary["paired_added_median_ms"] == pytest.approx(0.5, abs=0.05)
    assert summary["added_median_when_first_ms"] == pytest.approx(0.5)
    assert summary["added_median_when_second_ms"] == pytest.approx(0.5)
    assert summary["position_effect_median_ms"] == pytest.approx(1.0, abs=0.05)
    assert summary["pairs_with_first"] == 100
    # A/A: identical sides, the paired difference is 0 whatever the position costs
    with_, without = _pairs(0.0, 0.001, orders)
    assert bench_online._summary(with_, without, orders)["paired_added_median_ms"] == (
        pytest.approx(0.0, abs=0.05)
    )


def test_always_pacing_one_side_biases_the_pairs() -> None:
    """The flaw the balanced order fixes: the side always after the wait carries its cost."""
    orders = [True] * 200
    with_, without = _pairs(0.0, 0.001, orders)
    summary = bench_online._summary(with_, without, orders)
    assert summary["paired_added_median_ms"] == pytest.approx(1.0, abs=0.05)  # A/A, not 0


def _run(runtime: str, pid: int | None, warnings: list[str]) -> dict[str, Any]:
    return {"runtime": runtime, "child_pid": pid, "warnings": warnings}


def test_runtime_label_says_where_the_handler_scored() -> None:
    label = bench_online.runtime_label(
        [_run("ProcessRuntime", 11, []), _run("ProcessRuntime", 12, [])]
    )
    assert label == "child process (ProcessRuntime), child pids 11, 12"
    fell_back = "RagMetricsCallbackHandler scores on this process's threads because x."
    label = bench_online.runtime_label([_run("ThreadRuntime", None, [fell_back])])
    assert label == "thread (ThreadRuntime), auto fell back with a warning"
    assert bench_online._fallback_reason([{"warnings": [fell_back]}]) == "x."


def test_accounting_sums_the_sinks() -> None:
    stats = {
        "sampled": 10,
        "dropped": 0,
        "processed": 10,
        "failed": 0,
        "sinks": {"LangSmithFeedbackSink": {"delivered": 19, "dropped": 1}},
    }
    accounting = bench_online.scored_accounting([{"handler_stats": stats}] * 2)
    assert accounting["sinks"] == {"LangSmithFeedbackSink": {"delivered": 38, "dropped": 2}}
    assert accounting["unscored"] == 0


def _blocks_report(none_ms: float, ours_ms: float, pid: int) -> dict[str, Any]:
    """A blocks run's report: 10 calls per side, ours ``ours_ms`` slower than none's."""
    stats = {"sampled": 10, "dropped": 0, "processed": 10, "failed": 0, "sinks": {}}
    return {
        "latencies_s": {
            "none": [none_ms / 1000] * 10,
            "noop": [(none_ms + 0.1) / 1000] * 10,
            "default": [(none_ms + ours_ms) / 1000] * 10,
        },
        "handler": {"runtime": "ProcessRuntime", "child_pid": pid, "handler_stats": stats},
    }


def test_several_blocks_runs_give_medians_and_keep_each_run() -> None:
    summaries = [
        bench_online.blocks_summary(_blocks_report(2.0, added, pid), "default")
        for added, pid in ((0.2, 1), (0.5, 2), (0.3, 3))
    ]
    combined = bench_online.combine_blocks(summaries, "default")
    assert combined["added_median_ms"] == pytest.approx(0.3)
    assert combined["added_median_ms_per_run"] == pytest.approx([0.2, 0.5, 0.3])
    assert combined["noop_added_median_ms"] == pytest.approx(0.1)
    assert combined["default"]["median_ms"] == pytest.approx(2.3)
    assert combined["accounting"]["sampled"] == 30  # every run's retrievals counted
    assert combined["runtime"] == "child process (ProcessRuntime), child pids 1, 2, 3"
