"""Benchmark 4 - import cost: ``import langchain_ragmetrics`` vs ``import ragas``.

Each statement runs in a fresh interpreter, ``--repeats`` times; we report the median wall time
(minus a bare ``python -c pass`` of the same venv, so interpreter start-up does not count) and
the median peak RSS of the child (``os.wait4`` gives the child's own ``ru_maxrss``).

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


def run_once(python: str, code: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one ``python -c code`` child."""
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
    return wall, usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


def measure(python: str, code: str, repeats: int, *, warm: bool = True) -> dict[str, Any]:
    """Median wall and peak RSS over ``repeats`` runs (after one unmeasured run for caches)."""
    if warm:
        run_once(python, code)
    walls, rss = zip(*(run_once(python, code) for _ in range(repeats)), strict=True)
    return {"walls_s": list(walls), "median_s": median(walls), "peak_rss_mib": median(rss)}


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.tiny else REPEATS)
    pythons = {"ours": sys.executable}
    if not args.no_ragas:
        pythons["ragas"] = str(ensure_ragas_venv())
    results: dict[str, Any] = {}
    for side, python in pythons.items():
        base = measure(python, "pass", repeats, warm=not args.tiny)
        results[side] = {"interpreter": base}
        for level, code in SNIPPETS[side].items():
            m = measure(python, code, repeats, warm=not args.tiny)
            m["import_s"] = m["median_s"] - base["median_s"]
            m["import_rss_mib"] = m["peak_rss_mib"] - base["peak_rss_mib"]
            results[side][level] = m
    rows = []
    for level in ("bare", "metrics + evaluate"):
        o = results["ours"][level]
        t = results.get("ragas", {}).get(level, {})
        rows.append(
            [
                level,
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
        f"Median of {repeats} fresh interpreters per row; ms is the whole `python -c` run, net ms "
        f"subtracts a bare `python -c pass` ({interpreter['median_s'] * 1000:.0f} ms, "
        f"{interpreter['peak_rss_mib']:.0f} MiB; 0 means within noise of it); ratios are "
        "ours / RAGAS on the whole run; peak RSS is the whole process.\n\n" + table(headers, rows)
    )
    publish(args.out, "import", "Import cost", text, {"repeats": repeats, "sides": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
