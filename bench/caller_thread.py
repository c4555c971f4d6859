"""Our callbacks' time on the caller's thread per request, by event replay, two checkouts at once.

``bench_online.py`` times whole chain calls, where what one change to the callbacks saves
(tens of microseconds) is smaller than what separates two runs. This times only the
callbacks: it records the callback events one call of ``bench_online.py``'s chain makes (17
events: chain, retriever and model starts and ends), then replays them, with fresh run ids
and the recorded arguments (five retrieved documents), into each handler as LangChain
would, one request at a time, paced (``--pause`` seconds between requests, so each request
finds caches as cold as a paced application leaves them), the handlers in a seeded random
interleaving, call by call, in one process. The judge (the benchmarks' loopback judge,
answering at once) runs in a process of its own, so its threads take no GIL here.

Sides: ``null`` (a handler that overrides nothing: the replay's own cost), ``after`` (this
checkout's ``RagMetricsCallbackHandler()`` with no options: the default, scoring in a child
process) and, with ``--before DIR``, ``before``: the same from another checkout, whose package
is copied and renamed (``rm_before``) into a temporary directory so both load in one process.
It prints the median time per request of each side and, after the run, what each handler
sampled, scored and dropped (every request must be scored, or the sides did different work).

Usage: ``python bench/caller_thread.py [--before DIR] [--requests 1500] [--pause 0.02]
[--seed 1]``; ``DIR`` is a checkout's root (``git worktree add /tmp/before HEAD~1``).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import _common  # noqa: F401 - puts the repository root on sys.path
from _online_driver import build_chain

Event = tuple[str, tuple[Any, ...], dict[str, Any]]

_JUDGE = """
import sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from _judge import BenchJudge
from tests._support.openai_server import JudgeServer
with JudgeServer(BenchJudge()) as judge:
    print(judge.base_url, flush=True)
    sys.stdin.read()
"""


def record_events() -> list[Event]:
    """The callback events of one call of the benchmark chain, in order, with their arguments."""
    from langchain_core.callbacks import BaseCallbackHandler

    events: list[Event] = []

    class Recorder(BaseCallbackHandler):
        """Keeps every event our handler listens to (it ignores the same ones)."""

        ignore_chat_model = True
        ignore_retry = True
        ignore_custom_event = True

        def __getattribute__(self, name: str) -> Any:
            if name.startswith("on_"):

                def keep(*args: Any, **kwargs: Any) -> None:
                    events.append((name, args, kwargs))

                return keep
            return super().__getattribute__(name)

    chain, questions = build_chain(10)  # the dataset generator needs a few samples
    chain.invoke(questions[0], config={"callbacks": [Recorder()]})
    return events


def load_before(checkout: Path, into: Path) -> Any:
    """The other checkout's package, copied and renamed ``rm_before`` so both load here."""
    target = into / "rm_before"
    shutil.copytree(
        checkout / "langchain_ragmetrics", target, ignore=shutil.ignore_patterns("__pycache__")
    )
    for path in target.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace("langchain_ragmetrics", "rm_before"), encoding="utf-8")
    sys.path.insert(0, str(into))
    import rm_before  # type: ignore[import-not-found]

    return rm_before


def replay(handler: Any, events: list[Event]) -> float:
    """One request's events into ``handler``; the seconds its callbacks took."""
    ids: dict[UUID, UUID] = {}
    calls: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []
    for name, args, kwargs in events:
        fresh = dict(kwargs)
        for key in ("run_id", "parent_run_id"):
            if (value := fresh.get(key)) is not None:
                fresh[key] = ids.setdefault(value, uuid4())
        calls.append((getattr(handler, name), args, fresh))
    start = time.perf_counter()
    for method, args, kwargs in calls:
        method(*args, **kwargs)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another checkout's root")
    parser.add_argument("--requests", type=int, default=1500, help="timed requests per side")
    parser.add_argument("--pause", type=float, default=0.02, help="seconds between requests")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"command: python bench/caller_thread.py {' '.join(sys.argv[1:])}".rstrip())
    from langchain_core.callbacks import BaseCallbackHandler

    import langchain_ragmetrics

    events = record_events()
    bench = Path(__file__).resolve().parent
    judge = subprocess.Popen(
        [sys.executable, "-c", _JUDGE, str(bench), str(bench.parent)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        try:
            assert judge.stdout is not None
            os.environ["OPENAI_BASE_URL"] = judge.stdout.readline().strip()
            os.environ["OPENAI_API_KEY"] = "test"
            sides: dict[str, Any] = {"null": BaseCallbackHandler()}
            if args.before is not None:
                sides["before"] = load_before(args.before, Path(tmp)).RagMetricsCallbackHandler()
            sides["after"] = langchain_ragmetrics.RagMetricsCallbackHandler()
            for _ in range(50):  # warm-up: every side's threads and child started
                for handler in sides.values():
                    replay(handler, events)
                    time.sleep(args.pause)
            order = [name for name in sides for _ in range(args.requests)]
            random.Random(args.seed).shuffle(order)
            times: dict[str, list[float]] = {name: [] for name in sides}
            for name in order:
                time.sleep(args.pause)
                times[name].append(replay(sides[name], events))
            for name, handler in sides.items():
                if name == "null":
                    continue
                closed = handler.close(timeout=120)
                stats = handler.stats
                print(
                    f"{name}: {type(handler._background).__name__}, closed in time {closed}, "
                    f"sampled {stats.sampled}, scored {stats.scored} results, "
                    f"dropped {stats.dropped}, handler errors {stats.handler_errors}"
                )
        finally:
            judge.kill()
            judge.wait()
    print(
        f"{len(events)} events per request, {args.requests} requests per side, "
        f"pause {args.pause:g} s, seed {args.seed}"
    )
    print("| side | median us per request | p90 us |")
    print("|---|---|---|")
    for name, values in times.items():
        ordered = sorted(values)
        p90 = ordered[int(0.9 * (len(ordered) - 1))]
        print(f"| {name} | {statistics.median(values) * 1e6:.1f} | {p90 * 1e6:.1f} |")


if __name__ == "__main__":
    main()
