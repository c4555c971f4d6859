"""Online overhead of two checkouts of the package, interleaved: the blocks method, run by run.

What one change does to the caller's latency is smaller than what separates two benchmark
sessions on a shared machine, so the two sides must take turns in one session. This runs
``bench_online.py``'s blocks method (issue 18's: blocks of 50 paced calls with no handler, a
do-nothing handler and ours take turns in one process) for each ``--configs`` entry, one
fresh process per run, alternating the checkout and which side goes first in each pair of
runs. Each side runs its own checkout's ``bench/_online_driver.py``, which imports the package
from that checkout; the judge and the LangSmith stub are this checkout's, shared by both.

Per run: added median and p99 of ours and of the do-nothing handler (against the no-handler
blocks of the same process), the process's CPU over the timed loop per scored retrieval (the
chain calls of all three sides, the callbacks and the handler's threads; not the child's: it
compares the two checkouts, not with other tables), retrievals sampled / scored / dropped, and
where scoring ran and which sinks the child delivered with.

Usage: ``python bench/online_checkouts.py --before DIR [--after DIR] [--configs prod,default]
[--runs N] [--rounds N] [--out DIR]``; ``DIR`` is a checkout's root (``git worktree add
/tmp/before HEAD~1``); ``--after`` defaults to this checkout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _common import (
    base_parser,
    command_line,
    load_average,
    median,
    publish,
    table,
)
from bench_online import (
    BLOCK_SIZE,
    RATE,
    SEED,
    WARMUP,
    _servers,
    blocks_run,
    blocks_summary,
)

ROOT = Path(__file__).resolve().parent.parent
RUNS = 3
ROUNDS = 10


def measure(
    *, before: Path, after: Path, configs: list[str], runs: int, rounds: int, block_size: int
) -> dict[str, Any]:
    """``runs`` blocks runs per side and config, the sides alternating (first side swapped)."""
    sides = {"before": before, "after": after}
    out: dict[str, Any] = {c: {s: [] for s in sides} for c in configs}
    judge, stub = _servers()
    with judge, stub:
        for run in range(runs):
            for config in configs:
                order = list(sides) if run % 2 == 0 else list(sides)[::-1]
                for side in order:
                    report = blocks_run(
                        config,
                        judge,
                        stub,
                        rounds=rounds,
                        block_size=block_size,
                        warmup=WARMUP // 2,
                        seed=SEED + run,
                        script=str(sides[side] / "bench" / "_online_driver.py"),  # its checkout's
                    )
                    summary = blocks_summary(report, config)
                    summary["run_index"] = run
                    out[config][side].append(summary)
    return out


def _row(config: str, side: str, summaries: list[dict[str, Any]]) -> list[Any]:
    scored = [s["accounting"]["processed"] - s["accounting"]["failed_results"] for s in summaries]
    cpu = [s["run"]["app_cpu_s"] * 1000 / n for s, n in zip(summaries, scored, strict=True) if n]
    sinks = summaries[0]["accounting"]["sinks"]
    where = summaries[0]["runtime"]
    return [
        config,
        side,
        ", ".join(f"{s['added_median_ms']:.3f}" for s in summaries),
        f"{median([s['added_median_ms'] for s in summaries]):.3f}",
        ", ".join(f"{s['added_p99_ms']:.2f}" for s in summaries),
        f"{median([s['added_p99_ms'] for s in summaries]):.2f}",
        f"{median([s['noop_added_median_ms'] for s in summaries]):.3f}",
        f"{median(cpu):.1f}" if cpu else "-",
        sum(s["accounting"]["sampled"] for s in summaries),
        sum(scored),
        sum(s["accounting"]["dropped"] for s in summaries),
        where,
        "; ".join(f"{k}: {v.get('delivered', 0)} delivered" for k, v in sinks.items()),
    ]


def render(result: dict[str, Any], *, runs: int, rounds: int, block_size: int) -> str:
    """One row per config and side."""
    head = [
        "config",
        "checkout",
        "added median ms, per run",
        "median",
        "added p99 ms, per run",
        "median",
        "no-op added median ms",
        "process CPU ms per scored retrieval (all sides' calls)",
        "sampled",
        "scored",
        "dropped",
        "scoring ran in",
        "sinks (first run)",
    ]
    rows = [
        _row(config, side, summaries)
        for config, by_side in result["configs"].items()
        for side, summaries in by_side.items()
    ]
    lines = [
        f"Blocks method, {runs} runs per side and config, alternating (first side swapped each "
        f"run), {rounds} rounds of {block_size}-call blocks per run at {RATE:g} calls a second; "
        f"before = `{result['before']}`, after = `{result['after']}`.",
        "",
        table(head, rows),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout's root")
    parser.add_argument("--after", type=Path, default=ROOT, help="default: this checkout")
    parser.add_argument("--configs", default="prod", help="comma-separated (default prod)")
    parser.add_argument("--runs", type=int, default=None, help=f"runs per side ({RUNS})")
    parser.add_argument("--rounds", type=int, default=None, help=f"rounds per run ({ROUNDS})")
    args = parser.parse_args(argv)
    runs = args.repeats or args.runs or (1 if args.tiny else RUNS)
    rounds = args.rounds or (2 if args.tiny else ROUNDS)
    block_size = 5 if args.tiny else BLOCK_SIZE
    load_at_start = load_average()
    configs = measure(
        before=args.before.resolve(),
        after=args.after.resolve(),
        configs=args.configs.split(","),
        runs=runs,
        rounds=rounds,
        block_size=block_size,
    )
    result = {
        "before": str(args.before),
        "after": str(args.after),
        "configs": configs,
        "load_at_start": load_at_start,
        "load_at_end": load_average(),
    }
    text = render(result, runs=runs, rounds=rounds, block_size=block_size)
    print(f"Command: {command_line()}")
    publish(args.out, "online_checkouts", "Online overhead, two checkouts", text, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
