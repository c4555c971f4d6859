"""What our callback handler adds to a chain call on the caller's thread, and LangChain's share.

``bench_online.py`` measures the caller's added latency as issue 18 asks (paced, blocks of
calls, scoring running in the background); its figures move with everything else the machine
does. This script isolates the part that runs on the caller's thread, the only part a
callback handler controls: the same LCEL RAG chain as ``bench_online.py`` (an instant model,
five contexts never seen before per call), invoked back to back in one process, with the
handler configs in a seeded random interleaving, call by call:

* ``none``: no callbacks;
* ``do-nothing``: a ``BaseCallbackHandler`` subclass that overrides nothing;
* ``floor``: our handler's class with its event methods emptied: the same ``ignore_*``
  flags, so exactly the dispatch LangChain does for our handler, and none of our code;
* ``ours``: ``RagMetricsCallbackHandler(sample_rate=0.0, isolation="thread")``: every event
  tracked and every trace finished, nothing enqueued (no background scoring to compete with
  the timed calls).

It prints per config the median and p90 latency, and the added median against ``none``;
``ours - floor`` is what our callbacks cost. Every config's handler is built once; every call
retrieves its own documents. Run it with ``PYTHONPATH`` pointing at another checkout to
measure another version of the package with the same method.

Usage: ``python bench/handler_dispatch.py [--calls 2000] [--seed 1]`` (``--calls`` per config).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _online_driver import build_chain

import langchain_ragmetrics

CONFIGS = ("none", "do-nothing", "floor", "ours")
WARMUP = 50


def handlers() -> dict[str, list[Any]]:
    """The callbacks list of each config."""
    from langchain_core.callbacks import BaseCallbackHandler

    from langchain_ragmetrics import RagMetricsCallbackHandler
    from langchain_ragmetrics.callbacks.sinks import InMemorySink

    class DoNothing(BaseCallbackHandler):
        """Overrides nothing: LangChain's dispatch of a plain handler."""

    class Floor(RagMetricsCallbackHandler):
        """Our handler's flags, none of its work."""

        def on_chain_start(self, *args: Any, **kwargs: Any) -> None:
            pass

        def on_chain_end(self, *args: Any, **kwargs: Any) -> None:
            pass

        def on_chain_error(self, *args: Any, **kwargs: Any) -> None:
            pass

        def on_retriever_start(self, *args: Any, **kwargs: Any) -> None:
            pass

        def on_retriever_end(self, *args: Any, **kwargs: Any) -> None:
            pass

        def on_llm_new_token(self, *args: Any, **kwargs: Any) -> None:
            pass

    options: dict[str, Any] = {"sample_rate": 0.0, "isolation": "thread"}
    return {
        "none": [],
        "do-nothing": [DoNothing()],
        "floor": [Floor(sinks=[InMemorySink()], **options)],
        "ours": [RagMetricsCallbackHandler(sinks=[InMemorySink()], **options)],
    }


def measure(calls: int, seed: int) -> dict[str, list[float]]:
    """Latency of every timed call per config, in seconds."""
    configs = handlers()
    chain, questions = build_chain(calls * len(CONFIGS) + WARMUP * len(CONFIGS), seed=seed)
    asked = iter(questions)
    for _ in range(WARMUP):
        for callbacks in configs.values():
            chain.invoke(next(asked), config={"callbacks": callbacks})
    order = [name for name in CONFIGS for _ in range(calls)]
    random.Random(seed).shuffle(order)
    times: dict[str, list[float]] = {name: [] for name in CONFIGS}
    for name in order:
        question, callbacks = next(asked), configs[name]
        start = time.perf_counter()
        chain.invoke(question, config={"callbacks": callbacks})
        times[name].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per config")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"command: python bench/handler_dispatch.py {' '.join(sys.argv[1:])}".rstrip())
    package = Path(langchain_ragmetrics.__file__).resolve().parent.parent
    print(f"python {sys.version.split()[0]}, package from {package}")
    times = measure(args.calls, args.seed)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print("| config | calls | median ms | p90 ms | added median ms |")
    print("|---|---|---|---|---|")
    for name, values in times.items():
        p90 = sorted(values)[int(0.9 * (len(values) - 1))]
        added = (medians[name] - medians["none"]) * 1e3
        print(
            f"| {name} | {len(values)} | {medians[name] * 1e3:.3f} | {p90 * 1e3:.3f} "
            f"| {added:+.3f} |"
        )
    floor = (medians["floor"] - medians["none"]) * 1e3
    ours = (medians["ours"] - medians["floor"]) * 1e3
    print(
        f"added median: LangChain's dispatch of our handler (floor) {floor:+.3f} ms, "
        f"our callbacks (ours - floor) {ours:+.3f} ms, total {floor + ours:+.3f} ms"
    )


if __name__ == "__main__":
    main()
