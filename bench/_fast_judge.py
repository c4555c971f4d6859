"""A cheap benchmark judge: ``BenchJudge``'s answers from a process of its own, memoised.

The loopback ``JudgeServer`` (a ``ThreadingHTTPServer`` working out every answer by word
overlap) spends about 2 ms of CPU per request, on the same cores as the client it measures:
with two cores, a client that scales to both has none left. This server answers the same
way (``BenchJudge``, same completion format as ``JudgeServer``) but costs a fraction of that:

* one asyncio loop in its own process, HTTP/1.1 keep-alive, the protocol read by hand
  (an ``asyncio.Protocol``: no stream or task per request);
* every answer memoised by the exact request body, so a timed round that repeats an untimed
  warm-up round with the same dataset costs parsing the headers and one dict lookup per
  request (misses are counted and reported: a timed round should have none);
* ``GET /stats`` returns the requests, misses and the server's own CPU seconds, so a
  benchmark reports the judge's CPU per request beside its figures, a tally of calls and
  misses per ``x-bench-side`` / ``x-bench-metric`` header since the last ``GET /reset``, and
  the most requests each side had at once (not answered yet) since then;
* ``GET /bodies/<side>`` returns the request bodies of one side since the last reset (what
  the floor of ``bench_throughput.py`` replays).

Latency is applied per request with ``asyncio.sleep`` (answers are not serialised).

Usage from a benchmark::

    with FastJudge(latency=0.1) as judge:
        ...  # clients use judge.base_url
        judge.stats()  # {"requests": ..., "misses": ..., "cpu_s": ...}

Run directly (``python bench/_fast_judge.py --latency 0.1``) it prints its port and serves
until its stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent

__all__ = ["FastJudge"]


class _Server:
    """The serving process's state: the memo and the counters."""

    def __init__(self, latency: float) -> None:
        sys.path[:0] = [str(BENCH), str(REPO)]
        from _judge import BenchJudge

        from tests._support.openai_server import JudgeRequest, JudgeServer

        self.latency = latency
        self.judge = BenchJudge()
        self.request_type = JudgeRequest
        self.shaper = JudgeServer()  # never started: only its completion format is used
        self.memo: dict[bytes, bytes] = {}
        self.requests = 0
        self.misses = 0
        self.tally: dict[tuple[str, str], list[int]] = {}  # (side, metric) -> [calls, misses]
        self.bodies: dict[str, list[bytes]] = {}
        self.in_flight: dict[str, int] = {}  # side -> requests not answered yet
        self.peak: dict[str, int] = {}  # side -> most requests at once since the last reset

    def reset(self) -> bytes:
        """Forget the tally and the recorded bodies (the memo and the totals stay)."""
        self.tally.clear()
        self.bodies.clear()
        self.peak = {side: n for side, n in self.in_flight.items() if n}
        return b"{}"

    def opened(self, side: str) -> None:
        """A request of ``side`` arrived: one more at once."""
        now = self.in_flight[side] = self.in_flight.get(side, 0) + 1
        self.peak[side] = max(self.peak.get(side, 0), now)

    def closed(self, side: str) -> None:
        """A request of ``side`` was answered."""
        self.in_flight[side] -= 1

    def record(self, head: bytes, body: bytes) -> bytes:
        """Count a chat request under its side and metric headers; the response body."""
        side, metric = _header(head, b"\r\nx-bench-side:"), _header(head, b"\r\nx-bench-metric:")
        misses = self.misses
        data = self.answer(body)
        counts = self.tally.setdefault((side, metric), [0, 0])
        counts[0] += 1
        counts[1] += self.misses - misses
        self.bodies.setdefault(side, []).append(body)
        return data

    def side_bodies(self, side: str) -> bytes:
        """The request bodies of ``side`` since the last reset, as one JSON list."""
        return b"[" + b",".join(self.bodies.get(side, [])) + b"]"

    def answer(self, body: bytes) -> bytes:
        """The response body for a chat request (memoised by the exact request bytes)."""
        cached = self.memo.get(body)
        if cached is not None:
            return cached
        from tests._support.openai_server import _as_reply

        self.misses += 1
        req = self.request_type.from_body(json.loads(body))
        reply = _as_reply(self.judge(req))
        answer = self.shaper._answer(req, reply)
        usage = self.shaper._usage(req, answer, reply)
        data = json.dumps(self.shaper._completion(req, answer, usage)).encode()
        self.memo[body] = data
        return data

    def stats(self) -> bytes:
        tally: dict[str, dict[str, dict[str, int]]] = {}
        for (side, metric), (calls, misses) in sorted(self.tally.items()):
            tally.setdefault(side, {})[metric] = {"calls": calls, "misses": misses}
        cpu = time.process_time()
        stats = {
            "requests": self.requests,
            "misses": self.misses,
            "cpu_s": cpu,
            "tally": tally,
            "peak_in_flight": self.peak,
        }
        return json.dumps(stats).encode()


def _header(head: bytes, name: bytes) -> str:
    """A header's value in a raw request head (``name`` lower-case, with its CRLF), or ''."""
    at = head.lower().find(name)
    if at < 0:
        return ""
    stop = head.find(b"\r\n", at + 2)
    return head[at + len(name) : stop if stop >= 0 else None].strip().decode()


class _Connection(asyncio.Protocol):
    """One keep-alive connection, read by hand: no stream or task per request."""

    def __init__(self, server: _Server) -> None:
        self.server = server
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end]
            at = head.lower().find(b"content-length:")
            stop = head.find(b"\r\n", at)
            length = int(head[at + 15 : stop if stop >= 0 else None]) if at >= 0 else 0
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            if head.startswith(b"GET /"):
                self.send(self._get(head))
                continue
            self.server.requests += 1
            side = _header(head, b"\r\nx-bench-side:")
            self.server.opened(side)
            data = self.server.record(head, body)
            if self.server.latency:
                self.loop.call_later(self.server.latency, self.answered, side, data)
            else:
                self.answered(side, data)

    def _get(self, head: bytes) -> bytes:
        path = head[4 : head.find(b" ", 4)].decode()
        if path == "/reset":
            return self.server.reset()
        if path.startswith("/bodies/"):
            return self.server.side_bodies(path.removeprefix("/bodies/"))
        return self.server.stats()

    def answered(self, side: str, data: bytes) -> None:
        """Send a chat request's answer, which ends it (see :meth:`_Server.closed`)."""
        self.server.closed(side)
        self.send(data)

    def send(self, data: bytes) -> None:
        """Write one response (answers of one connection go out in request order)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(data)).encode()
                + b"\r\n\r\n"
                + data
            )


async def _main(latency: float) -> None:
    server = _Server(latency)
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(lambda: _Connection(server), "127.0.0.1", 0, backlog=512)
    port = listener.sockets[0].getsockname()[1]
    print(port, flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # serve until the parent closes stdin
    os._exit(0)  # open keep-alive connections need no goodbye


class FastJudge:
    """The memoising judge in a child process; ``base_url`` for clients, ``stats()``."""

    def __init__(self, *, latency: float) -> None:
        self.latency = latency
        self.process: subprocess.Popen[str] | None = None
        self.port = 0

    def __enter__(self) -> FastJudge:
        cmd = [sys.executable, __file__, "--latency", str(self.latency)]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.process = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.process is not None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=30) as r:
            return json.loads(r.read())

    def stats(self) -> dict[str, Any]:
        """Requests served, memo misses, the server process's CPU seconds so far, and the tally.

        ``tally`` maps side -> metric -> ``{"calls", "misses"}`` (the ``x-bench-side`` /
        ``x-bench-metric`` headers; '' where absent) since the last :meth:`reset`;
        ``peak_in_flight`` maps side -> the most requests it had waiting for an answer at
        once since then (how many the client really sent at a time).
        """
        data: dict[str, Any] = self._get("/stats")
        return data

    def reset(self) -> None:
        """Forget the tally and the recorded bodies (the memo and the totals stay)."""
        self._get("/reset")

    def bodies(self, side: str) -> list[dict[str, Any]]:
        """The request bodies ``side`` sent since the last :meth:`reset`, in arrival order."""
        data: list[dict[str, Any]] = self._get(f"/bodies/{side}")
        return data


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="memoising benchmark judge")
    parser.add_argument("--latency", type=float, default=0.1)
    asyncio.run(_main(parser.parse_args().latency))
