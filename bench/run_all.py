"""Run every benchmark in turn and collect their tables in ``bench/results/summary.md``.

Usage (from the repository root, with the project installed: ``pip install -e ".[test]"``)::

    python bench/run_all.py [--tiny] [--no-ragas] [--out DIR]

``bash bench/run_all.sh`` does the same on a fresh machine: it creates ``bench/.venv`` with the
project first. The RAGAS side installs ``ragas==0.4.3`` into ``bench/.ragas-venv`` on first use.
The benchmarks run one after another (never in parallel: they time things).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import BENCH, base_parser, ensure_ragas_venv, machine

SCRIPTS = (
    ("economy", "bench_economy.py"),
    ("throughput", "bench_throughput.py"),
    ("online", "bench_online.py"),
    ("import", "bench_import.py"),
    ("cpu", "bench_cpu.py"),
    ("long_context", "bench_long_context.py"),
    ("monitor", "bench_monitor.py"),
    ("faults", "bench_faults.py"),
)
TITLES = {
    "economy": "Judge economy (per sample)",
    "throughput": "Offline throughput",
    "online": "Online overhead",
    "import": "Import cost",
    "cpu": "CPU per sample (deterministic parts)",
    "long_context": "Long contexts",
    "monitor": "Monitor worker sizing (100 ms judge)",
    "faults": "Retries under faults",
}


def check_dataset() -> None:
    """Fail when the shipped dataset differs from what ``make_dataset.py`` generates."""
    shipped = BENCH / "data" / "dataset.json"
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "dataset.json"
        subprocess.run(
            [sys.executable, str(BENCH / "make_dataset.py"), "--out", str(fresh)],
            check=True,
            capture_output=True,
        )
        if fresh.read_bytes() != shipped.read_bytes():
            msg = f"{shipped} is not what make_dataset.py generates; re-run it and commit"
            raise SystemExit(msg)


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    check_dataset()
    if not args.no_ragas:
        ensure_ragas_venv()
    passthrough = [
        flag for flag, on in (("--tiny", args.tiny), ("--no-ragas", args.no_ragas)) if on
    ]
    passthrough += ["--out", str(args.out)]
    if args.repeats:
        passthrough += ["--repeats", str(args.repeats)]
    sections = [
        f"Measured {machine()['when']} on {machine()['platform']}, "
        f"{machine()['cpus']} CPUs, Python {machine()['python']}."
    ]
    for name, script in SCRIPTS:
        started = time.perf_counter()
        print(f"==> {script} {' '.join(passthrough)}", flush=True)
        subprocess.run([sys.executable, str(BENCH / script), *passthrough], check=True)
        print(f"    ({time.perf_counter() - started:.0f} s)", flush=True)
        result = json.loads((args.out / f"{name}.json").read_text(encoding="utf-8"))
        sections.append(f"### {TITLES[name]}\n\n{result['table']}")
    summary = args.out / "summary.md"
    summary.write_text("\n\n".join(sections) + "\n", encoding="utf-8")
    print(f"\nsummary: {summary}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
