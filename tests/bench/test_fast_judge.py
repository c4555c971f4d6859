"""The benchmark judge's tally, memo and recorded bodies (what bench_throughput.py counts by).

Real ``ChatOpenAI`` clients (``bench/_data.judge_client``, the benchmarks' own) talk to a real
``FastJudge`` process on 127.0.0.1; nothing is timed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from langchain_core.messages import HumanMessage

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from _data import judge_client  # noqa: E402 - bench/ is not a package
from _fast_judge import FastJudge  # noqa: E402


def test_tally_counts_calls_and_misses_per_side_and_metric() -> None:
    with FastJudge(latency=0) as judge:
        recall = judge_client(judge.base_url, "ours", "context_recall", max_retries=0)
        floor = judge_client(judge.base_url, "floor", "", max_retries=0)
        for text in ("alpha", "beta", "alpha"):  # the second "alpha" is a memo hit
            recall.invoke([HumanMessage(text)])
        floor.invoke([HumanMessage("beta")])  # same body as ours' "beta": a hit
        stats = judge.stats()
        assert stats["tally"] == {
            "floor": {"": {"calls": 1, "misses": 0}},
            "ours": {"context_recall": {"calls": 3, "misses": 2}},
        }
        assert (stats["requests"], stats["misses"]) == (4, 2)
        sent = judge.bodies("ours")
        assert [b["messages"][0]["content"] for b in sent] == ["alpha", "beta", "alpha"]
        assert judge.bodies("floor")[0] == sent[1]  # the bodies the floor would replay

        judge.reset()  # forgets the tally and bodies, keeps the memo and the totals
        recall.invoke([HumanMessage("alpha")])
        stats = judge.stats()
        assert stats["tally"] == {"ours": {"context_recall": {"calls": 1, "misses": 0}}}
        assert (stats["requests"], stats["misses"]) == (5, 2)
        assert len(judge.bodies("ours")) == 1
        assert judge.bodies("floor") == []
