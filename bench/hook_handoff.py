"""What running the user's ``question_from`` / ``answer_from`` on a helper thread costs.

In the default (isolated) mode the feeder turns each batch of finished retrievals into plain
data (``ProcessRuntime._plain``). When the user passes a function as ``question_from`` or
``answer_from``, the feeder hands that conversion to a helper thread
(``callbacks._hooks.HookRunner``) and waits at most ``timeout`` for each retrieval, so that a
function that hangs costs one retrieval, not all scoring. This prices the handoff: the same
conversion of the same kind of retrieval (five retrieved documents of about 600 characters,
every one distinct, a function that reads the question from the root input) run by the
feeder's own method on batches of ``--batch`` retrievals, inline (``_hooks`` set to None:
what the feeder does without a function of the user's, here with the function run on the
feeder) and through the runner, in a seeded random interleaving, batch by batch, in one
process. The feeder takes what arrived during its 0.2 s pause: 4 retrievals a batch at 20
sampled retrievals a second (the default here), 1 at 5 a second, 20 at 100 a second.

It prints per side the median and p90 wall time of a batch, and the process CPU per
retrieval (``time.process_time`` over the batch, divided by its size: every thread of the
process, the helper's included), and the CPU the handoff adds per retrieval. It runs in this
process, off any chain: no child, no judge, nothing scored.

Usage: ``python bench/hook_handoff.py [--calls 3000] [--batch 4] [--seed 1]``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from typing import Any

import _common  # noqa: F401 - puts the repository root on sys.path
from _common import median, percentile

SIDES = ("inline", "helper")
WARMUP = 100
"""Retrievals per side converted before timing starts."""


def captures(count: int, seed: int) -> list[Any]:
    """``count`` retrievals of a live trace, each with its own question and documents."""
    from tests._support.captures import make_capture

    rng = random.Random(seed)
    words = [f"w{n}" for n in range(5_000)]

    def text() -> str:
        return " ".join(rng.choice(words) for _ in range(110))[:600]

    out = []
    for i in range(count):
        question = f"What does record {i} say about {rng.choice(words)}?"
        documents = tuple(text() for _ in range(5))
        inputs = {"question": question, "user": f"u{i}"}
        out.append(
            make_capture(question, documents, root_inputs=inputs, root_outputs={"answer": text()})
        )
    return out


def measure(calls: int, batch: int, seed: int) -> dict[str, list[tuple[float, float]]]:
    """(wall s, process CPU s) of every timed batch, per side."""
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    from langchain_ragmetrics import ContextRelevance
    from langchain_ragmetrics.callbacks._isolated import ProcessIsolation, ProcessRuntime
    from langchain_ragmetrics.callbacks._settings import HandlerSettings
    from langchain_ragmetrics.callbacks._stats import Counters, FailureLog

    judge = ChatOpenAI(model="never-called", api_key=SecretStr("unused"))
    settings = HandlerSettings(
        metrics=[ContextRelevance(llm=judge)],
        question_from=lambda inputs: inputs["question"],
        name="hook-handoff",
    )

    def runtime() -> ProcessRuntime:  # never submitted to: no feeder, no child
        return ProcessRuntime(
            settings, ProcessIsolation(), counters=Counters(), failures=FailureLog()
        )

    inline, helper = runtime(), runtime()
    inline._hooks = None  # the function runs on the calling thread, as the feeder's would
    assert helper._hooks is not None
    feeders = {"inline": inline, "helper": helper}
    batches = max(1, calls // batch)
    warmup = max(1, WARMUP // batch)
    items = iter(captures(len(SIDES) * (batches + warmup) * batch, seed))

    def take() -> list[Any]:
        return [next(items) for _ in range(batch)]

    try:
        for _ in range(warmup):
            for side in SIDES:
                feeders[side]._plain(take())
        order = [side for side in SIDES for _ in range(batches)]
        random.Random(seed).shuffle(order)
        times: dict[str, list[tuple[float, float]]] = {side: [] for side in SIDES}
        for side in order:
            taken, feeder = take(), feeders[side]
            wall, cpu = time.perf_counter(), time.process_time()
            plain = feeder._plain(taken)
            times[side].append((time.perf_counter() - wall, time.process_time() - cpu))
            assert len(plain) == batch
    finally:
        helper._hooks.stop()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000, help="timed retrievals per side")
    parser.add_argument("--batch", type=int, default=4, help="retrievals per feeder batch")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    times = measure(args.calls, args.batch, args.seed)
    cpu = {
        side: sum(c for _, c in values) / len(values) / args.batch for side, values in times.items()
    }
    print(
        "| side | retrievals | batches | wall median us per batch | wall p90 us "
        "| process CPU per retrieval us |"
    )
    print("|---|---|---|---|---|---|")
    for side, values in times.items():
        walls = [w for w, _ in values]
        print(
            f"| {side} | {len(values) * args.batch} | {len(values)} | {median(walls) * 1e6:.1f} "
            f"| {percentile(walls, 90) * 1e6:.1f} | {cpu[side] * 1e6:.1f} |"
        )
    added = (cpu["helper"] - cpu["inline"]) * 1e6
    print(f"the helper thread adds {added:.1f} us of process CPU per retrieval")
    print(f"command: python bench/hook_handoff.py {' '.join(sys.argv[1:])}".rstrip())


if __name__ == "__main__":
    main()
