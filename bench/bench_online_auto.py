"""Application CPU per scored retrieval of the default ``isolation="auto"``, production set-up.

A production user passes a live judge (``llm=ChatOpenAI(base_url=..., api_key=...)``) and
sinks of their own (here an ``InMemorySink``). Configs, each in a fresh process, interleaved
over ``--repeats`` rounds:

* ``production``: that handler with the default isolation (a child process rebuilds the
  judge from a recipe and scores; the sink delivers in the application's process);
* ``production-thread``: the same with ``isolation="thread"`` (what ``auto`` fell back to
  before live judges and user sinks were supported: scoring on the application's threads);
* ``default``: ``RagMetricsCallbackHandler()`` with no options (default judge from
  ``OPENAI_*``, ``LoggingSink``).

Each process runs an LCEL RAG chain (its answering model a real ``ChatOpenAI``) against the
loopback judge server, which runs in a process of its own, so its CPU is not counted. Every
call asks about a different item (distinct texts, no memo hits), paced at ``--rate`` calls a
second. The process's CPU time (``time.process_time``) over ``--invocations`` calls without
callbacks, then over as many calls with the handler and its flush: the difference per scored
retrieval is what scoring costs the application's process (its threads compete with the
requests for the GIL). Scored and dropped retrievals are printed beside it.

Usage: ``python bench/bench_online_auto.py [--tiny] [--invocations N] [--repeats N] [--rate R]
[--out DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import base_parser, command_line, median, publish, table

REPO = Path(__file__).resolve().parents[1]
CONFIGS = ("production", "production-thread", "default")
SERVER = """
import sys, threading
from tests._support.openai_server import JudgeServer
from tests._support.rag import rag_router
with JudgeServer(rag_router()) as server:
    print(server.base_url, flush=True)
    sys.stdin.read()
"""


def drive(config: str, base_url: str, invocations: int, rate: float) -> dict[str, float]:
    """One config in this process: CPU without and with the handler, per scored retrieval."""
    import logging

    from langchain_openai import ChatOpenAI

    from langchain_ragmetrics import (
        ContextPrecision,
        ContextRelevance,
        InMemorySink,
        RagMetricsCallbackHandler,
    )
    from tests._support.rag import build_chain, corpus, make_retriever, question

    logging.basicConfig(level=logging.INFO, stream=open(os.devnull, "w"))  # noqa: SIM115
    os.environ["OPENAI_BASE_URL"] = base_url
    os.environ["OPENAI_API_KEY"] = "test"
    warmup = 10
    chain = build_chain(
        ChatOpenAI(model="answer", base_url=base_url, api_key="test", max_retries=0),
        make_retriever(corpus(warmup + 2 * invocations)),
    )
    if config == "default":
        handler = RagMetricsCallbackHandler()
    else:
        judge = ChatOpenAI(model="judge", base_url=base_url, api_key="test", timeout=30)
        handler = RagMetricsCallbackHandler(
            metrics=[ContextRelevance(llm=judge), ContextPrecision(llm=judge)],
            sinks=[InMemorySink()],
            isolation="thread" if config == "production-thread" else "auto",
        )
    pause = 1.0 / rate

    def run(callbacks: list[object], first: int) -> None:
        for i in range(first, first + invocations):
            chain.invoke(question(i), config={"callbacks": callbacks})
            time.sleep(pause)

    for i in range(warmup):
        chain.invoke(question(i), config={"callbacks": [handler]})
    handler.flush(300)
    before = handler.stats
    start = time.process_time()
    run([], warmup)
    bare = time.process_time() - start
    start = time.process_time()
    run([handler], warmup + invocations)
    handler.flush(300)
    used = time.process_time() - start
    stats = handler.stats
    handler.close(60)
    scored = stats.processed - before.processed
    return {
        "mode": 1.0 if handler.settings.process else 0.0,
        "scored": scored,
        "dropped": stats.dropped - before.dropped,
        "cpu_ms": (used - bare) * 1000 / max(1, scored),
    }


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--invocations", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--config", choices=CONFIGS, help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.config:
        print(json.dumps(drive(args.config, args.base_url, args.invocations, args.rate)))
        return
    invocations = 5 if args.tiny else args.invocations
    repeats = args.repeats or (1 if args.tiny else 3)
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert server.stdin is not None
    assert server.stdout is not None
    base_url = server.stdout.readline().strip()
    runs: dict[str, list[dict[str, float]]] = {c: [] for c in CONFIGS}
    try:
        for round_ in range(repeats):
            shift = round_ % len(CONFIGS)
            for config in CONFIGS[shift:] + CONFIGS[:shift]:  # rotated: none always first
                done = subprocess.run(
                    [
                        *(sys.executable, __file__, "--config", config, "--base-url", base_url),
                        *("--invocations", str(invocations), "--rate", str(args.rate)),
                    ],
                    capture_output=True,
                    text=True,
                    env=env,
                    check=True,
                )
                runs[config].append(json.loads(done.stdout.strip().splitlines()[-1]))
    finally:
        server.stdin.close()
        server.wait(30)
    rows = [
        [
            config,
            "child process" if found[0]["mode"] else "threads here",
            median([r["cpu_ms"] for r in found]),
            ", ".join(f"{r['cpu_ms']:.1f}" for r in found),
            sum(int(r["scored"]) for r in found),
            sum(int(r["dropped"]) for r in found),
        ]
        for config, found in runs.items()
    ]
    headers = ["config", "scored in", "app CPU ms / scored retrieval", "runs", "scored", "dropped"]
    text = table(headers, rows) + (
        f"\n\nCommand: `{command_line()}`. {invocations} calls per run at {args.rate:g}/s, "
        f"{repeats} runs per config (fresh processes, rotated order); median over runs."
    )
    publish(
        args.out,
        "online_auto",
        "Online: the application's CPU, production set-up",
        text,
        {"runs": runs},
    )


if __name__ == "__main__":
    main()
