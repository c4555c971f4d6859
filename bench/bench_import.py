"""Benchmark 4 - import cost: ``import langchain_ragmetrics`` vs ``import ragas``.

Each statement runs in a fresh interpreter, ``--repeats`` times, the statements alternating
(round 1: every statement of ours and of RAGAS once; round 2: ...); we report the median CPU
time of the child (user + system, from ``os.wait4``: what the import computed, whatever the
machine's load), the median wall time (minus a bare ``python -c pass`` of the same venv, so
interpreter start-up does not count) and the median peak RSS of the child (``ru_maxrss``).

Two levels per library: the bare package import, and importing what a user needs to score with
the four context metrics (the metric classes and ``evaluate``). ``import ragas`` needs the
langchain-community workaround described in ``bench/README.md``; the snippet applies it first
(its cost, one ``sys.modules`` entry, is negligible).

Usage: ``python bench/bench_import.py [--tiny] [--no-ragas] [--repeats N] [--out DIR]``
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from _common import base_parser, ensure_ragas_venv, median, publish, ratio, table

REPEATS = 11
RAGAS_PATCH = (
    "import sys, types; "
    "m = types.ModuleType('langchain_community.chat_models.vertexai'); "
    "m.ChatVertexAI = type('ChatVertexAI', (), {}); "
    "sys.modules.setdefault('langchain_community.chat_models.vertexai', m); "
)
SNIPPETS = {
    "ours": {
        "bare": "import langchain_ragmetrics",
        "metrics + evaluate": (
            "from langchain_ragmetrics import ContextRecall, ContextPrecision, "
            "ContextEntityRecall, ContextRelevance, evaluate"
        ),
    },
    "ragas": {
        "bare": RAGAS_PATCH + "import ragas",
        "metrics + evaluate": RAGAS_PATCH
        + "from ragas import evaluate; from ragas.metrics import LLMContextRecall, "
        "LLMContextPrecisionWithReference, ContextEntityRecall, ContextRelevance",
    },
}


def run_once(python: str, code: str) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (MiB) of one ``python -c code`` child."""
    env = {**os.environ, "RAGAS_DO_NOT_TRACK": "true", "PYTHONWARNINGS": "ignore"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    proc = subprocess.Popen([python, "-c", code], env=env, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        msg = f"{python} -c {code!r} failed:\n{err[-2000:]}"
        raise RuntimeError(msg)
    cpu = usage.ru_utime + usage.ru_stime
    return wall, cpu, usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


def measure_all(
    pythons: dict[str, str], repeats: int, *, warm: bool = True
) -> dict[str, dict[str, Any]]:
    """Every (side, statement) ``repeats`` times, alternating round by round; medians.

    One unmeasured run of each statement first fills the OS's file caches.
    """
    cases = [
        (side, level, python, code)
        for side, python in pythons.items()
        for level, code in {"interpreter": "pass", **SNIPPETS[side]}.items()
    ]
    if warm:
        for _side, _level, python, code in cases:
            run_once(python, code)
    samples: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for _ in range(repeats):
        for side, level, python, code in cases:
            samples.setdefault((side, level), []).append(run_once(python, code))
    out: dict[str, dict[str, Any]] = {}
    for (side, level), runs in samples.items():
        walls, cpus, rss = zip(*runs, strict=True)
        out.setdefault(side, {})[level] = {
            "walls_s": list(walls),
            "median_s": median(walls),
            "cpu_s": list(cpus),
            "median_cpu_s": median(cpus),
            "peak_rss_mib": median(rss),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.tiny else REPEATS)
    pythons = {"ours": sys.executable}
    if not args.no_ragas:
        pythons["ragas"] = str(ensure_ragas_venv())
    results: dict[str, Any] = measure_all(pythons, repeats, warm=not args.tiny)
    for side in results.values():
        base = side["interpreter"]
        for level, m in side.items():
            if level != "interpreter":
                m["import_s"] = m["median_s"] - base["median_s"]
                m["import_cpu_s"] = m["median_cpu_s"] - base["median_cpu_s"]
                m["import_rss_mib"] = m["peak_rss_mib"] - base["peak_rss_mib"]
    rows = []
    for level in ("bare", "metrics + evaluate"):
        o = results["ours"][level]
        t = results.get("ragas", {}).get(level, {})
        rows.append(
            [
                level,
                o["median_cpu_s"] * 1000,
                t.get("median_cpu_s", float("nan")) * 1000,
                ratio(o["median_cpu_s"], t.get("median_cpu_s", 0)),
                o["median_s"] * 1000,
                max(0.0, o["import_s"]) * 1000,
                t.get("median_s", float("nan")) * 1000,
                t.get("import_s", float("nan")) * 1000,
                ratio(o["median_s"], t.get("median_s", 0)),
                o["peak_rss_mib"],
                t.get("peak_rss_mib", float("nan")),
                ratio(o["peak_rss_mib"], t.get("peak_rss_mib", 0)),
            ]
        )
    headers = [
        "import",
        "CPU ms ours",
        "CPU ms RAGAS",
        "CPU ratio",
        "ms ours",
        "net ms ours",
        "ms RAGAS",
        "net ms RAGAS",
        "ratio",
        "peak RSS MiB ours",
        "peak RSS MiB RAGAS",
        "ratio",
    ]
    interpreter = results["ours"]["interpreter"]
    text = (
        f"Median of {repeats} fresh interpreters per row, every statement once per round "
        "(alternating). CPU ms is the child's user + system time for the whole `python -c` run "
        "(what the import computed, whatever the machine's load); ms is its wall time, net ms "
        f"subtracts a bare `python -c pass` ({interpreter['median_s'] * 1000:.0f} ms, "
        f"{interpreter['median_cpu_s'] * 1000:.0f} CPU ms, {interpreter['peak_rss_mib']:.0f} MiB; "
        "0 means within noise of it); ratios are ours / RAGAS on the whole run; peak RSS is the "
        "whole process.\n\n" + table(headers, rows)
    )
    publish(args.out, "import", "Import cost", text, {"repeats": repeats, "sides": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
