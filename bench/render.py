"""Write the measured figures into ``bench/README.md`` and ``docs/performance.md``.

One source for every published figure: ``bench/figures.json``, the benchmarks' result files
(``bench/results/<name>.json``) collected by ``python bench/run_all.py --write-docs``. Each
benchmark's block (when and on what it was measured, the load average, the command, its tables
and verdicts) is rendered from that file and written between marker comments,

    <!-- bench:economy:start -->  ...  <!-- bench:economy:end -->

in both documents, so they cannot disagree with each other or with the data
(``tests/bench/test_render.py`` checks that the committed documents are what this renders).

Usage::

    python bench/render.py                      # re-render both documents from bench/figures.json
    python bench/render.py --collect DIR        # first collect DIR/*.json into bench/figures.json
    python bench/render.py --check              # exit 1 when a document is out of date
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
FIGURES = BENCH / "figures.json"
DOCUMENTS = (BENCH / "README.md", REPO / "docs" / "performance.md")

# (name, script) in the order run_all runs them; the name is the result file's stem.
SCRIPTS: tuple[tuple[str, str], ...] = (
    ("economy", "bench_economy.py"),
    ("throughput", "bench_throughput.py"),
    ("online", "bench_online.py"),
    ("import", "bench_import.py"),
    ("cpu", "bench_cpu.py"),
    ("long_context", "bench_long_context.py"),
    ("monitor", "bench_monitor.py"),
    ("faults", "bench_faults.py"),
)

__all__ = ["DOCUMENTS", "FIGURES", "SCRIPTS", "block", "collect", "main", "render_document"]


def _marks(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"


def _load(values: Any) -> str:
    return " / ".join(f"{v:.1f}" for v in values) if values else "n/a"


def block(name: str, data: Mapping[str, Any]) -> str:
    """The markdown of one benchmark: provenance, load, command, then its tables."""
    m = data.get("machine", {})
    command = data.get("command") or f"python bench/{dict(SCRIPTS)[name]}"
    lines = [
        f"Measured {m.get('when', '?')} on {m.get('platform', '?')}, {m.get('cpus', '?')} CPUs, "
        f"Python {m.get('python', '?')}; load average (1 / 5 / 15 min) "
        f"{_load(m.get('load_at_start'))} at the start, {_load(m.get('load_at_end'))} at the end.",
        f"Command: `{command}`",
        str(data["table"]).strip(),
    ]
    return "\n\n".join(lines)


def render_document(text: str, figures: Mapping[str, Mapping[str, Any]], *, where: str) -> str:
    """``text`` with every benchmark block between its markers replaced from ``figures``.

    Raises:
        ValueError: A marker pair is missing or broken, or a block has no figures.
    """
    for name, _script in SCRIPTS:
        start, end = _marks(name)
        pattern = re.compile(re.escape(start) + r"\n.*?" + re.escape(end), re.S)
        if len(pattern.findall(text)) != 1:
            msg = f"{where}: expected one {start} ... {end} pair"
            raise ValueError(msg)
        if name not in figures:
            msg = f"{where}: no figures for {name!r} (run `python bench/run_all.py --write-docs`)"
            raise ValueError(msg)
        body = f"{start}\n{block(name, figures[name])}\n{end}"
        text = pattern.sub(lambda _m, body=body: body, text)
    return text


def collect(results: Path) -> dict[str, Any]:
    """The result files of ``results`` as one mapping (name -> data), in run order."""
    figures: dict[str, Any] = {}
    for name, _script in SCRIPTS:
        path = results / f"{name}.json"
        if path.exists():
            figures[name] = json.loads(path.read_text(encoding="utf-8"))
    return figures


def load_figures(path: Path | None = None) -> dict[str, Any]:
    """The committed figures (``bench/figures.json``)."""
    data: dict[str, Any] = json.loads((path or FIGURES).read_text(encoding="utf-8"))
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--collect",
        type=Path,
        default=None,
        metavar="DIR",
        help="merge DIR/<name>.json into bench/figures.json first (missing ones are kept)",
    )
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 when a document is stale"
    )
    args = parser.parse_args(argv)
    figures = load_figures() if FIGURES.exists() else {}
    if args.collect is not None:
        fresh = collect(args.collect)
        figures = {name: fresh.get(name, figures.get(name)) for name, _ in SCRIPTS}
        figures = {name: data for name, data in figures.items() if data is not None}
        FIGURES.write_text(
            json.dumps(figures, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        print(f"collected {', '.join(fresh)} from {args.collect} into {FIGURES}")
    stale = []
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        rendered = render_document(text, figures, where=str(path))
        if rendered != text:
            stale.append(path)
            if not args.check:
                path.write_text(rendered, encoding="utf-8")
    verb = "out of date" if args.check else "rewritten"
    for path in stale:
        print(f"{path.relative_to(REPO)}: {verb}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
