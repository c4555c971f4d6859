"""Run every benchmark in turn and collect their tables in ``bench/results/summary.md``.

Usage (from the repository root, with the project installed: ``pip install -e ".[test]"``)::

    python bench/run_all.py [--tiny] [--no-ragas] [--only NAME,...] [--out DIR] [--write-docs]

``--write-docs`` then collects the results into ``bench/figures.json`` and rewrites the figures
of ``bench/README.md`` and ``docs/performance.md`` from it (``bench/render.py``): the one
command that regenerates every published figure. ``--only economy,online`` re-measures some
benchmarks and keeps the others' figures (each block says when it was measured).

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

import render
from _common import BENCH, base_parser, ensure_ragas_venv, machine

SCRIPTS = render.SCRIPTS
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
    parser.add_argument(
        "--only",
        default=None,
        metavar="NAMES",
        help="comma-separated benchmarks to run (default: all): "
        + ", ".join(n for n, _ in SCRIPTS),
    )
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help="then write the figures into bench/figures.json, bench/README.md and "
        "docs/performance.md (refused with --tiny: a smoke run is not a figure)",
    )
    args = parser.parse_args(argv)
    names = [n for n, _ in SCRIPTS]
    only = names if args.only is None else [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(only) - set(names))
    if unknown:
        parser.error(
            f"--only: unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(names)}"
        )
    if args.write_docs and args.tiny:
        parser.error("--write-docs with --tiny: tiny runs are plumbing checks, not figures")
    check_dataset()
    if not args.no_ragas:
        ensure_ragas_venv()
    passthrough = [
        flag for flag, on in (("--tiny", args.tiny), ("--no-ragas", args.no_ragas)) if on
    ]
    passthrough += ["--out", str(args.out)]
    if args.repeats:
        passthrough += ["--repeats", str(args.repeats)]
    now = machine()
    sections = [
        f"Measured {now['when']} on {now['platform']}, {now['cpus']} CPUs, Python "
        f"{now['python']}; load average at the start {now['load_at_end']}."
    ]
    for name, script in SCRIPTS:
        if name not in only:
            continue
        started = time.perf_counter()
        print(f"==> {script} {' '.join(passthrough)}", flush=True)
        subprocess.run([sys.executable, str(BENCH / script), *passthrough], check=True)
        print(f"    ({time.perf_counter() - started:.0f} s)", flush=True)
        result = json.loads((args.out / f"{name}.json").read_text(encoding="utf-8"))
        sections.append(f"### {TITLES[name]}\n\n{result['table']}")
    summary = args.out / "summary.md"
    summary.write_text("\n\n".join(sections) + "\n", encoding="utf-8")
    print(f"\nsummary: {summary}")
    if args.write_docs:
        return render.main(["--collect", str(args.out)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
