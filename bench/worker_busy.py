"""How busy each process of ``evaluate(workers=N)`` is: CPU time over wall time, per side.

A diagnostic for the scale check of ``bench_workers.py``: the caller's CPU
(``RUSAGE_SELF``) and its reaped workers' (``RUSAGE_CHILDREN``) are reported apart, each over
the run's wall time, for ``workers`` 1, 2 (and more with ``--workers``), against the memoising
judge of ``_fast_judge.py`` (50 ms). Every run is a fresh process with an untimed warm-up;
the configurations alternate. ``--switch-interval S`` sets ``sys.setswitchinterval`` in the
run (inherited by forked workers); ``--concurrency N`` the total slots.

Usage: ``python bench/worker_busy.py [--samples 400] [--repeats 1] [--workers 1,2]
[--concurrency 64] [--switch-interval S]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

DRIVER = """
import json, resource, sys, time
sys.path[:0] = [{bench!r}, {root!r}]
import bench_workers as bw
from langchain_ragmetrics import evaluate
base, dataset, workers, concurrency, interval = sys.argv[1:6]
if float(interval) > 0:
    sys.setswitchinterval(float(interval))
data = json.loads(open(dataset, encoding="utf-8").read())
evaluate(data["warm"], bw._metrics(base), workers=1, show_progress=False)
metrics = bw._metrics(base)
before = resource.getrusage(resource.RUSAGE_SELF)
start = time.perf_counter()
evaluate(data["rows"], metrics, max_concurrency=int(concurrency), workers=int(workers),
         show_progress=False)
wall = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
own = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
print(json.dumps({{"wall": wall, "caller": own, "workers": kids.ru_utime + kids.ru_stime}}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--switch-interval", type=float, default=0.0)
    args = parser.parse_args()
    from _fast_judge import FastJudge
    from make_dataset import build

    print(f"command: python bench/worker_busy.py {' '.join(sys.argv[1:])}")
    print(f"load average before {os.getloadavg()[0]:.1f}")
    rows = build(args.samples + 4, seed=11)
    with tempfile.TemporaryDirectory() as tmp:
        dataset = Path(tmp) / "rows.json"
        dataset.write_text(json.dumps({"rows": rows[: args.samples], "warm": rows[args.samples :]}))
        driver = Path(tmp) / "driver.py"
        driver.write_text(DRIVER.format(bench=str(HERE), root=str(HERE.parent)))
        with FastJudge(latency=0.05) as judge:

            def run(workers: str) -> dict[str, float]:
                cmd = [sys.executable, str(driver), judge.base_url, str(dataset), workers]
                cmd += [str(args.concurrency), str(args.switch_interval)]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
                return result

            run("1")  # untimed: fills the judge's memo
            print("| workers | wall s | caller CPU s | workers' CPU s | caller busy ", end="")
            print("| each worker busy |")
            print("|---|---|---|---|---|---|")
            for _ in range(args.repeats):
                for workers in args.workers.split(","):
                    r = run(workers)
                    extra = max(1, int(workers) - 1)
                    each = r["workers"] / extra / r["wall"] if int(workers) > 1 else 0.0
                    print(
                        f"| {workers} | {r['wall']:.2f} | {r['caller']:.2f} | {r['workers']:.2f} "
                        f"| {r['caller'] / r['wall']:.2f} | {each:.2f} |",
                        flush=True,
                    )
    print(f"load average after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
