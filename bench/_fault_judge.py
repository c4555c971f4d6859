"""The benchmark judge with faults on request, in its own process (for the fault CPU scripts).

A request's ``x-bench-fault`` header names the reply: ``ok`` (the benchmark judge's answer),
``500``, ``429`` (``Retry-After: 0``) or ``malformed`` (a 200 whose tool-call arguments are not
JSON). A fault is injected once per distinct request body, so the retry of that body is
answered; ``always-<kind>`` injects it every time. Started as
``python bench/_fault_judge.py [--latency S]``: prints the base URL, serves until stdin closes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def start(*, latency: float = 0.0) -> tuple[subprocess.Popen[str], str]:
    """Start the fault judge in a child process; returns the process and its base URL."""
    server = subprocess.Popen(  # our own interpreter and script
        [sys.executable, str(Path(__file__)), "--latency", str(latency)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    return server, server.stdout.readline().strip()


def _serve(latency: float) -> None:
    sys.path[:0] = [str(HERE), str(HERE.parent)]
    from _judge import BenchJudge

    from tests._support.openai_server import JudgeServer, reply_error, reply_garbage

    judge, seen, lock = BenchJudge(), set(), threading.Lock()

    def script(req: Any) -> Any:
        kind = req.headers.get("x-bench-fault", "ok")
        always = kind.startswith("always-")
        kind = kind.removeprefix("always-")
        with lock:
            first = (kind, req.text) not in seen
            seen.add((kind, req.text))
        if kind == "ok" or not (first or always):
            return judge(req)
        if kind == "500":
            return reply_error(500, "injected server error")
        if kind == "429":
            return reply_error(429, "injected rate limit", headers={"Retry-After": "0"})
        return reply_garbage()

    with JudgeServer(script, latency=latency) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.0)
    _serve(parser.parse_args().latency)
