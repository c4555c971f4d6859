"""Shared plumbing of the benchmark scripts: paths, the RAGAS venv, drivers, stats, output.

Imported by the orchestrating scripts, which run with the project's python. The repository
root goes on ``sys.path`` so ``tests._support`` (the loopback judge and LangSmith servers) is
importable without installing anything.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

RESULTS = BENCH / "results"
LOAD_AT_START = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
"""The 1/5/15-minute load averages when the benchmark script started (kept beside its figures)."""
RAGAS_VENV = Path(os.environ.get("RAGAS_VENV", BENCH / ".ragas-venv"))
RAGAS_VERSION = "0.4.3"
RAGAS_REQUIREMENTS = [f"ragas=={RAGAS_VERSION}", "langchain-openai"]

__all__ = [
    "BENCH",
    "REPO",
    "RESULTS",
    "base_parser",
    "command_line",
    "ensure_ragas_venv",
    "load_average",
    "machine",
    "median",
    "percentile",
    "publish",
    "ragas_python",
    "ratio",
    "run_driver",
    "table",
]


def base_parser(description: str) -> argparse.ArgumentParser:
    """Options every benchmark script shares."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--tiny", action="store_true", help="a few samples and repeats (smoke test, not figures)"
    )
    parser.add_argument(
        "--no-ragas", action="store_true", help="skip the RAGAS side (no venv is created)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for the JSON results")
    parser.add_argument("--repeats", type=int, default=None, help="override the repeat count")
    return parser


# --------------------------------------------------------------------------- statistics


def median(values: Sequence[float]) -> float:
    """Median (NaN for no values)."""
    return float(statistics.median(values)) if values else math.nan


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by the nearest-rank method."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])


def ratio(ours: float, theirs: float) -> float:
    """ours / theirs (NaN when theirs is 0 or missing)."""
    return ours / theirs if theirs else math.nan


# --------------------------------------------------------------------------- output


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table (numbers rounded for reading)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def load_average() -> tuple[float, float, float]:
    """The 1/5/15-minute load averages now (NaN where the platform has none)."""
    if hasattr(os, "getloadavg"):
        one, five, fifteen = os.getloadavg()
        return one, five, fifteen
    return math.nan, math.nan, math.nan


def machine() -> dict[str, Any]:
    """What the figures were measured on, and how busy the machine was (load averages)."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "load_at_start": [round(x, 2) for x in LOAD_AT_START],
        "load_at_end": [round(x, 2) for x in load_average()],
    }


def command_line() -> str:
    """The command that is running, as a reader would type it (without ``--out DIR``)."""
    args, skip = [], False
    for arg in sys.argv[1:]:
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        elif not arg.startswith("--out="):
            args.append(arg)
    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(REPO) if script.is_relative_to(REPO) else script
    return " ".join(["python", str(shown), *args])


def publish(out: Path, name: str, title: str, text: str, payload: dict[str, Any]) -> Path:
    """Print a benchmark's tables and write them with its data to ``out/name.json``."""
    print(f"## {title}\n\n{text}")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    data = {"machine": machine(), "command": command_line(), **payload, "table": text}
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"\nresults: {path}")
    return path


# --------------------------------------------------------------------------- subprocesses


def ragas_python() -> Path:
    """The python of the RAGAS venv (it may not exist yet)."""
    return RAGAS_VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_ragas_venv() -> Path:
    """Create the RAGAS venv on first use (``python -m venv`` + ``pip install ragas==0.4.3``)."""
    python = ragas_python()
    check = [
        str(python),
        "-c",
        f"import importlib.metadata as m; assert m.version('ragas') == '{RAGAS_VERSION}'",
    ]
    if python.exists() and subprocess.run(check, capture_output=True, check=False).returncode == 0:
        return python
    print(
        f"creating the RAGAS venv in {RAGAS_VENV} (first run only; takes a few minutes)", flush=True
    )
    subprocess.run([sys.executable, "-m", "venv", str(RAGAS_VENV)], check=True)
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            *RAGAS_REQUIREMENTS,
        ],
        check=True,
    )
    return python


def run_driver(
    python: Path | str, script: str, *args: str, timeout: float = 1800
) -> dict[str, Any]:
    """Run a driver script from bench/ and return the JSON object it printed last."""
    env = {**os.environ, "RAGAS_DO_NOT_TRACK": "true", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(
        [str(python), str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        msg = f"{script} {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        raise RuntimeError(msg)
    result: dict[str, Any] = json.loads(lines[-1])
    return result
