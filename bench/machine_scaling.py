"""How far this machine scales pure-Python CPU work from one process to N: the ceiling.

``bench_workers.py`` asks 2 processes to score at least 1.8x what one does. This script
measures what the machine itself gives to the same kind of work with nothing of ours in it:
each process runs a fixed CPU-bound loop (JSON encode and decode, a regex, string joins:
the shape of a judge call's client work), with no I/O and no shared state. For 1 and N
processes, interleaved over rounds, it prints the wall time, each process's CPU time over
the wall time (its busy share), the scaling (N x the one-process wall time over the
N-process wall time) and the machine's steal and idle time from ``/proc/stat`` (Linux).

Usage: ``python bench/machine_scaling.py [--processes 2] [--rounds 5] [--work 1.0]``
(``--work``: seconds of CPU per process, roughly).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import statistics
import sys
import time
from pathlib import Path

_WORD = re.compile(r"\w+")
_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def _unit(seed: int) -> int:
    """One unit of client-like CPU work (distinct text per call: no memo can help)."""
    text = " ".join(f"passage {seed} sentence {i} about topic {i * seed % 97}." for i in range(40))
    body = json.dumps({"messages": [{"role": "user", "content": text}], "n": seed})
    data = json.loads(body)
    return len(_WORD.findall(data["messages"][0]["content"]))


def _calibrate(seconds: float) -> int:
    """Units that take about ``seconds`` of CPU in one process."""
    start = time.process_time()
    units = 0
    while time.process_time() - start < 0.2:
        _unit(units)
        units += 1
    return max(1, int(units * seconds / 0.2))


def _worker(units: int, offset: int, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(units):
        _unit(offset + i)
    out.put((time.perf_counter() - start, time.process_time() - cpu))


def _stat() -> list[int] | None:
    path = Path("/proc/stat")
    if not path.exists():
        return None
    first = path.read_text().splitlines()[0].split()
    return [int(v) for v in first[1 : 1 + len(_STAT_FIELDS)]]


def _run(processes: int, units: int, offset: int) -> dict[str, float]:
    ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    out: multiprocessing.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [
        ctx.Process(target=_worker, args=(units, offset + p * units, out)) for p in range(processes)
    ]
    before = _stat()
    start = time.perf_counter()
    for proc in procs:
        proc.start()
    figures = [out.get() for _ in procs]
    for proc in procs:
        proc.join()
    wall = time.perf_counter() - start
    after = _stat()
    row = {
        "wall": wall,
        "busy": statistics.mean(cpu / max(w, 1e-9) for w, cpu in figures),
    }
    if before is not None and after is not None:
        delta = [b - a for a, b in zip(before, after, strict=True)]
        total = sum(delta) or 1
        row["steal"] = delta[_STAT_FIELDS.index("steal")] / total
        row["idle"] = delta[_STAT_FIELDS.index("idle")] / total
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", type=float, default=1.0)
    args = parser.parse_args()
    print(f"command: python bench/machine_scaling.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"cores {os.cpu_count()}, load average before {os.getloadavg()[0]:.1f}")
    units = _calibrate(args.work)
    _run(1, units // 10, 0)  # untimed warm-up
    rows: dict[int, list[dict[str, float]]] = {1: [], args.processes: []}
    offset = units
    for r in range(args.rounds):
        order = [1, args.processes] if r % 2 == 0 else [args.processes, 1]
        for n in order:
            rows[n].append(_run(n, units, offset))
            offset += n * units
    print("| processes | wall s (median) | each process busy | machine idle | steal |")
    print("|---|---|---|---|---|")
    for n, runs in rows.items():
        wall = statistics.median(r["wall"] for r in runs)
        busy = statistics.median(r["busy"] for r in runs)
        idle = statistics.median(r.get("idle", float("nan")) for r in runs)
        steal = statistics.median(r.get("steal", float("nan")) for r in runs)
        print(f"| {n} | {wall:.3f} | {busy:.2f} | {idle:.1%} | {steal:.1%} |")
    ratios = [
        args.processes * one["wall"] / many["wall"]
        for one, many in zip(rows[1], rows[args.processes], strict=True)
    ]
    print(
        f"scaling {args.processes} vs 1 process: {statistics.median(ratios):.2f}x "
        f"(rounds {', '.join(f'{x:.2f}' for x in ratios)}; ideal {args.processes}.00x)"
    )
    print(f"load average after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
