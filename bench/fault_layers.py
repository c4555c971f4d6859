"""Where a failed judge request's client CPU goes, layer by layer, in instructions (callgrind).

Run under valgrind (deterministic: instructions, not seconds, so the shared machine's load
does not blur it)::

    valgrind --tool=callgrind --dump-before=os_getppid --callgrind-out-file=OUT/cg.out \\
        python bench/fault_layers.py OUT [--calls 10]

then ``python bench/fault_layers.py OUT --report`` prints the figures. For each reply kind
(``ok``, ``500``, ``429``, ``malformed``) it times N distinct ContextRecall calls, each layer
on its own, from what the layer above would hand it (built outside the timed region): ``sdk``
the bare openai SDK sending the very request body (the floor), ``gen`` LangChain's
``ChatOpenAI._generate`` from the formatted messages, ``call`` our ``call_judge`` (no retry:
one request; it formats the prompt itself), and
``job`` a whole job through ``score_unobserved`` with the default ``RetryPolicy`` (backoff
zeroed) whose *first* request gets the fault: ``job`` of a fault kind minus ``job`` of ``ok``
is what one failed request adds to a job, retry included. ``os.getppid()`` marks the region
boundaries (callgrind dumps its counters there); the collector is off inside a region, so the
counts do not depend on when a collection happens. The judge runs in a child process, which
valgrind does not trace.
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

KINDS = ("ok", "500", "429", "malformed")
LAYERS = ("sdk", "gen", "call", "job")


def measure(out: Path, calls: int) -> None:
    """Run every (kind, layer) region once; write the region names beside the dumps."""
    from _fault_judge import start as start_fault_judge
    from langchain_openai import ChatOpenAI
    from make_dataset import build

    from langchain_ragmetrics._schema import coerce_sample
    from langchain_ragmetrics.evaluation import metric_from_name
    from langchain_ragmetrics.metrics import RetryPolicy
    from langchain_ragmetrics.metrics._judge import call_judge, unobserved

    server, url = start_fault_judge()
    key = "context_recall"
    samples = iter(coerce_sample(r) for r in build((calls + 2) * len(KINDS) * len(LAYERS)))
    once = RetryPolicy(max_retries=0, parse_retries=0)
    regions = []
    for kind in KINDS:
        for layer in LAYERS:
            header = kind if layer == "job" else f"always-{kind}"
            llm = ChatOpenAI(
                model="judge-model",
                base_url=url,
                api_key="test",
                temperature=0,
                timeout=60,
                max_retries=0,
                default_headers={"x-bench-fault": header},
            )
            retry = RetryPolicy(initial_backoff=0.0) if layer == "job" else once
            metric: Any = metric_from_name(key, llm=llm, retry=retry)

            def prepare(batch: list[Any], layer: str = layer, metric: Any = metric) -> list[Any]:
                """What each layer starts from, built outside the timed region."""
                if layer == "job":
                    return batch
                items = []
                for sample in batch:
                    call = metric.plan(metric.prepared(sample)[0]).calls[0]
                    runner = metric.runner(call)
                    messages = runner.prompt.format_messages(**call.variables)
                    body = runner.llm._get_request_payload(messages, **runner.model.kwargs)
                    items.append((runner, call, messages, body))
                return items

            def run(
                items: list[Any], layer: str = layer, metric: Any = metric, header: str = header
            ) -> None:
                if layer == "job":
                    for sample in items:
                        assert not metric.score_unobserved(sample).failed
                    return
                with unobserved():
                    for runner, call, messages, body in items:
                        if layer == "call":
                            call_judge(runner, call, None, once)
                            continue
                        try:
                            if layer == "gen":
                                runner.llm._generate(messages, **runner.direct)
                            else:
                                runner.llm.root_client.chat.completions.create(**body)
                        except Exception:  # the SDK's or LangChain's error: the fault
                            if header == "always-ok":
                                raise

            run(prepare([next(samples) for _ in range(2)]))  # warm-up: client and layer
            batch = prepare([next(samples) for _ in range(calls)])
            gc.collect()
            gc.disable()
            os.getppid()  # callgrind dumps here: the region starts
            run(batch)
            os.getppid()  # and ends
            gc.enable()
            regions.append(f"{kind}/{layer}")
    server.kill()
    (out / "regions.json").write_text(json.dumps({"calls": calls, "regions": regions}))


def report(out: Path) -> None:
    """Print millions of instructions per call for each (kind, layer)."""
    meta = json.loads((out / "regions.json").read_text())
    dumps = sorted(glob.glob(str(out / "cg.out.*")), key=lambda f: int(f.rsplit(".", 1)[1]))
    totals = []
    for dump in dumps:
        with open(dump, encoding="utf-8") as lines:
            totals.append(
                next(int(x.split()[1]) for x in lines if x.startswith(("summary:", "totals:")))
            )
    per = {name: totals[1 + 2 * i] / meta["calls"] / 1e6 for i, name in enumerate(meta["regions"])}
    print(f"M instructions per call ({meta['calls']} distinct calls per region)")
    print("kind       " + "".join(f"{layer:>8s}" for layer in LAYERS))
    for kind in KINDS:
        print(f"{kind:10s} " + "".join(f"{per[f'{kind}/{layer}']:8.2f}" for layer in LAYERS))
    for kind in KINDS[1:]:
        extra = per[f"{kind}/job"] - per["ok/job"]
        print(
            f"a failed {kind} request adds {extra:.2f} M to a job ({extra / per['ok/job']:.0%} "
            f"of a successful job); the SDK's own failed request is {per[f'{kind}/sdk']:.2f} M"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="directory of the callgrind dumps")
    parser.add_argument("--calls", type=int, default=10, help="distinct calls per region")
    parser.add_argument("--report", action="store_true", help="print the figures of a run")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report:
        report(args.out)
    else:
        measure(args.out, args.calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
