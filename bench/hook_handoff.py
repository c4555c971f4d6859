"""What running the user's ``question_from`` / ``answer_from`` on a helper thread costs.

In the default (isolated) mode the feeder turns each finished retrieval into plain data. When
the user passes a function as ``question_from`` or ``answer_from``, the feeder hands that
conversion to a helper thread (``callbacks._hooks.HookRunner``) and waits at most ``timeout``
for it, so that a function that hangs costs one retrieval, not all scoring. This prices the
handoff: the same conversion of the same kind of retrieval (five retrieved documents of about
600 characters, every one distinct, a function that reads the question from the root input)
run inline (``convert``, what the feeder does without a function of the user's) and through
the runner, in a seeded random interleaving, call by call, in one process.

It prints per side the median and p90 wall time of a call, and the process CPU per call
(``time.process_time``: every thread of the process, the helper's included), and the CPU the
handoff adds. It runs in this process, off any chain: no judge, nothing scored.

Usage: ``python bench/hook_handoff.py [--calls 3000] [--seed 1]``.
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


def measure(calls: int, seed: int) -> dict[str, list[tuple[float, float]]]:
    """(wall s, process CPU s) of every timed call, per side."""
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    from langchain_ragmetrics import ContextRelevance
    from langchain_ragmetrics.callbacks._hooks import HookRunner, convert
    from langchain_ragmetrics.callbacks._settings import HandlerSettings

    judge = ChatOpenAI(model="never-called", api_key=SecretStr("unused"))
    settings = HandlerSettings(
        metrics=[ContextRelevance(llm=judge)],
        question_from=lambda inputs: inputs["question"],
        name="hook-handoff",
    )
    runner = HookRunner(settings)
    run = {"inline": lambda c: convert(c, settings), "helper": runner.convert}
    items = iter(captures(len(SIDES) * (calls + WARMUP), seed))
    try:
        for _ in range(WARMUP):
            for side in SIDES:
                run[side](next(items))
        order = [side for side in SIDES for _ in range(calls)]
        random.Random(seed).shuffle(order)
        times: dict[str, list[tuple[float, float]]] = {side: [] for side in SIDES}
        for side in order:
            item, fn = next(items), run[side]
            wall, cpu = time.perf_counter(), time.process_time()
            fn(item)
            times[side].append((time.perf_counter() - wall, time.process_time() - cpu))
    finally:
        runner.stop()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000, help="timed calls per side")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    times = measure(args.calls, args.seed)
    cpu = {side: sum(c for _, c in values) / len(values) for side, values in times.items()}
    print("| side | calls | wall median us | wall p90 us | process CPU per call us |")
    print("|---|---|---|---|---|")
    for side, values in times.items():
        walls = [w for w, _ in values]
        print(
            f"| {side} | {len(values)} | {median(walls) * 1e6:.1f} "
            f"| {percentile(walls, 90) * 1e6:.1f} | {cpu[side] * 1e6:.1f} |"
        )
    added = (cpu["helper"] - cpu["inline"]) * 1e6
    print(f"the helper thread adds {added:.1f} us of process CPU per retrieval")
    print(f"command: python bench/hook_handoff.py {' '.join(sys.argv[1:])}".rstrip())


if __name__ == "__main__":
    main()
