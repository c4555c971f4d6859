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

``--instructions`` counts instructions instead of timing (deterministic: the machine's load
does not move it): each config runs alone in its own process under valgrind's callgrind,
which dumps its counters at ``os.getppid()`` calls placed around the timed loop (after the
warm-up and a ``gc.collect()``); the figure is the loop's instructions per call. Needs
``valgrind`` on the PATH and takes minutes (the interpreter runs about 50x slower).

Usage: ``python bench/handler_dispatch.py [--calls 2000] [--seed 1] [--instructions]``
(``--calls`` per config; with ``--instructions`` 300 is plenty).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import langchain_ragmetrics  # before bench modules: the checkout on PYTHONPATH is measured

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
    from _online_driver import build_chain  # it puts the repository root on sys.path

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


def one_region(name: str, calls: int, seed: int) -> None:
    """The calls of one config between two ``os.getppid()`` marks (callgrind dumps there)."""
    from _online_driver import build_chain

    callbacks = handlers()[name]
    chain, questions = build_chain(calls + WARMUP, seed=seed)
    for question in questions[:WARMUP]:
        chain.invoke(question, config={"callbacks": callbacks})
    gc.collect()
    os.getppid()  # the region starts
    for question in questions[WARMUP:]:
        chain.invoke(question, config={"callbacks": callbacks})
    os.getppid()  # the region ends


def region_instructions(dump: Path) -> int:
    """The instruction count (``summary:``) of one callgrind dump."""
    with dump.open(encoding="utf-8") as lines:
        for line in lines:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    msg = f"{dump}: no summary line (not a callgrind dump?)"
    raise ValueError(msg)


def count_instructions(calls: int, seed: int) -> dict[str, float]:
    """Instructions per call of every config, each in its own process under callgrind."""
    if shutil.which("valgrind") is None:
        msg = "--instructions needs valgrind on the PATH"
        raise SystemExit(msg)
    with tempfile.TemporaryDirectory() as tmp:

        def run(name: str) -> float:
            out = Path(tmp) / f"{name}.out"
            command = [
                "valgrind", "--tool=callgrind", "--dump-before=os_getppid",
                f"--callgrind-out-file={out}", sys.executable, __file__,
                "--region", name, "--calls", str(calls), "--seed", str(seed),
            ]  # fmt: skip
            subprocess.run(command, check=True, capture_output=True)
            # dump .1: start-up to the first mark; .2: the region; the final dump: the exit
            return region_instructions(Path(f"{out}.2")) / calls

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            return dict(zip(CONFIGS, pool.map(run, CONFIGS), strict=True))


def print_instructions(calls: int, seed: int) -> None:
    per_call = count_instructions(calls, seed)
    print("| config | calls | instructions per call (K) | added (K) | added share |")
    print("|---|---|---|---|---|")
    for name, count in per_call.items():
        added = count - per_call["none"]
        print(
            f"| {name} | {calls} | {count / 1e3:.1f} | {added / 1e3:+.1f} "
            f"| {added / per_call['none']:+.2%} |"
        )
    floor = per_call["floor"] - per_call["none"]
    ours = per_call["ours"] - per_call["floor"]
    print(
        f"added instructions per call: LangChain's dispatch of our handler (floor) "
        f"{floor / 1e3:+.1f} K, our callbacks (ours - floor) {ours / 1e3:+.1f} K, "
        f"total {(floor + ours) / 1e3:+.1f} K"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per config")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--instructions", action="store_true", help="count, under callgrind")
    parser.add_argument("--region", choices=CONFIGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.region is not None:  # one config, run by --instructions under callgrind
        one_region(args.region, args.calls, args.seed)
        return
    print(f"command: python bench/handler_dispatch.py {' '.join(sys.argv[1:])}".rstrip())
    package = Path(langchain_ragmetrics.__file__).resolve().parent.parent
    print(f"python {sys.version.split()[0]}, package from {package}")
    if args.instructions:
        print_instructions(args.calls, args.seed)
        return
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
