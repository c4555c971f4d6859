"""Smoke test of the benchmarks: every script runs end to end on a tiny size.

The figures themselves are not tested (machines are noisy; the full benchmark is not part of
CI): ``--tiny`` shrinks every workload and ``--no-ragas`` skips the RAGAS side, so nothing is
installed. What is checked is that each script produces its result file with sane contents.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests._support.openai_server import JudgeRequest

pytestmark = pytest.mark.slow  # a third of the suite's time: `pytest -m "not slow"` skips them

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import bench_faults  # noqa: E402 - bench/ is not a package
from _judge import BenchJudge  # noqa: E402


def run_bench(
    script: str, out: Path, *extra: str, timeout: float = 120, name: str | None = None
) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LANGSMITH_"))}
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--tiny", "--no-ragas", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| " in proc.stdout  # printed a table
    name = name or script.removeprefix("bench_").removesuffix(".py")
    result: dict[str, Any] = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
    assert result["table"] in proc.stdout
    return result


def test_shipped_dataset_is_what_the_generator_makes(tmp_path: Path) -> None:
    fresh = tmp_path / "dataset.json"
    subprocess.run(
        [sys.executable, str(BENCH / "make_dataset.py"), "--out", str(fresh)],
        check=True,
        capture_output=True,
    )
    assert fresh.read_bytes() == (BENCH / "data" / "dataset.json").read_bytes()
    records = json.loads(fresh.read_text(encoding="utf-8"))
    assert len(records) == 50
    assert {r["language"] for r in records} == {"en", "ja"}
    assert all(len(r["retrieved_contexts"]) == 5 for r in records)


def test_economy_counts_one_call_per_metric(tmp_path: Path) -> None:
    result = run_bench("bench_economy.py", tmp_path)
    ours = result["sides"]["ours"]
    # one call per metric, except entity recall: reference and passages read independently
    assert ours["per_sample"]["total"]["calls"] == 5
    for row in ours["per_sample"].values():  # our tool schemas are billed input too
        assert row["schema_chars"] > 0
        assert row["input_chars"] == row["message_chars"] + row["schema_chars"]
    assert result["command"] == "python bench/bench_economy.py --tiny --no-ragas"
    assert len(result["machine"]["load_at_end"]) == 3
    assert ours["errors"] == 0
    assert ours["unknown_prompts"] == {}  # the judge recognised every prompt
    assert all(s["failed"] == 0 for s in ours["scores"].values())


@pytest.fixture(scope="module")
def throughput(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """One ``bench_throughput.py`` run (two rounds) that the throughput tests read."""
    out = tmp_path_factory.mktemp("throughput")
    # a fill round and two rounds of three sides: eight fresh processes
    return run_bench("bench_throughput.py", out, "--repeats", "2", timeout=300), out


def test_throughput_runs_every_job(throughput: tuple[dict[str, Any], Path]) -> None:
    result, _ = throughput
    sides = result["sides"]
    # the sides alternate run by run: one value per round, and one per-round ratio
    assert list(sides) == ["ours", "ours_w1", "floor"]
    assert all(len(s["walls_s"]) == 2 for s in sides.values())
    assert len(result["paired"]["cpu_per_call_vs_floor"]) == 2
    for side in ("ours", "ours_w1", "floor"):  # counted by the judge, warm-ups apart
        assert sides[side]["calls_per_run_runs"] == [12 * 5] * 2  # entity recall: 2 calls
    for side in ("ours", "ours_w1"):
        assert sum(sides[side]["calls_by_metric"].values()) == 12 * 5
        assert all(s["failed"] == 0 for s in sides[side]["scores"].values())
    assert sides["ours_w1"]["processes"] == 1


def test_throughput_timed_requests_are_memo_hits(throughput: tuple[dict[str, Any], Path]) -> None:
    result, _ = throughput
    for side in result["sides"].values():
        assert side["judge_timed_misses"] == 0  # the fill round answered every body before
        assert side["judge_misses"] == 0  # warm-ups included
        assert side["judge_cpu_ms_per_request"] > 0
    assert "Every timed judge request was a memo hit (0 misses)." in result["table"]


def test_throughput_floor_replays_our_request_bodies(
    throughput: tuple[dict[str, Any], Path],
) -> None:
    result, out = throughput
    sides = result["sides"]
    bodies = json.loads((out / "bodies-12.json").read_text(encoding="utf-8"))
    assert len(bodies) == sides["ours"]["calls_per_run"] == sides["floor"]["calls_per_run"]
    assert all(body["tools"] and body["messages"] for body in bodies)


def test_faults_retry_every_injected_fault(tmp_path: Path) -> None:
    result = run_bench("bench_faults.py", tmp_path, timeout=300)
    runs = result["runs"]
    assert set(runs) == {"none", "mixed", "transient", "mixed-fast", "transient-fast"}
    assert result["models"] == ["slow", "fast"]
    assert runs["none"]["requests"] == result["jobs"] == 24
    for name in ("mixed", "transient", "mixed-fast", "transient-fast"):
        # every fault retried: one success per unfailed job
        run = runs[name]
        assert run["requests"] == result["jobs"] - run["failed_jobs"] + run["faults"]
        (timeline,) = run["timelines"]  # each job's attempts, from the judge's request log
        assert timeline["jobs"] == result["jobs"]
        assert sum(timeline["jobs_by_requests"].values()) == result["jobs"]
        assert 0 <= timeline["last_start_s"] < timeline["end_s"]
    assert "Fault model *429/500 at once, malformed after the latency*: mixed" in result["table"]


def test_faults_on_issue_18s_check_counts_every_judge_call(tmp_path: Path) -> None:
    """``--metrics all``: the four metrics, entity recall's two calls each counted as a job."""
    result = run_bench(
        "bench_faults.py",
        tmp_path,
        "--metrics",
        "all",
        "--model",
        "fast",
        timeout=300,
        name="faults_check",
    )
    assert not (tmp_path / "faults.json").exists()  # the published figures stay apart
    assert result["metrics"] == "all"
    assert set(result["runs"]) == {"none", "mixed-fast", "transient-fast"}
    assert result["runs"]["none"]["requests"] == result["jobs"] == 12 * 5  # 5 calls a sample
    for name in ("mixed-fast", "transient-fast"):
        # every fault retried: one success per call that did not fail; a failed entity
        # recall score is one or both of its two calls
        run = result["runs"][name]
        answered = run["requests"] - run["faults"]
        assert result["jobs"] - 2 * run["failed_jobs"] <= answered
        assert answered <= result["jobs"] - run["failed_jobs"]
        assert run["timelines"][0]["jobs"] == result["jobs"]
    assert (
        "x 4 metrics (the four LLM-judged ones) (60 judge calls without faults)"
        in (result["table"])
    )


def test_faults_with_another_checkout_runs_both_sides_against_their_own_baseline(
    tmp_path: Path,
) -> None:
    """``--before DIR`` (this checkout against itself): every configuration on both sides,
    each faulty run compared with its own side's fault-free runs."""
    result = run_bench(
        "bench_faults.py",
        tmp_path,
        "--model",
        "fast",
        "--before",
        str(REPO),
        timeout=300,
        name="faults_checkouts",
    )
    sides = ("before", "after")
    assert set(result["runs"]) == {
        f"{name}|{side}" for name in ("none", "mixed-fast", "transient-fast") for side in sides
    }
    assert result["sides"] == {"before": str(REPO), "after": str(REPO)}
    for side in sides:
        none = result["runs"][f"none|{side}"]
        assert none["requests"] == result["jobs"] == 24
        mixed = result["runs"][f"mixed-fast|{side}"]
        assert mixed["slowdown"] == pytest.approx(mixed["median_wall_s"] / none["median_wall_s"])
    assert "mixed before" in result["table"]
    assert "mixed after" in result["table"]


def test_the_fault_models_wait_as_labelled() -> None:
    """Answers and malformed answers wait the latency; 429s and 500s only when slow."""
    faulty = bench_faults.FaultyJudge(BenchJudge(), latency=0.1)
    faulty.rate, faulty.kinds = 1.0, ("500", "429", "malformed")
    request = JudgeRequest.from_body(
        {"model": "m", "messages": [{"role": "user", "content": "x"}]},
        path="/v1/chat/completions",
        headers={"x-bench-side": "ours"},
    )
    for slow, error_wait in ((True, 0.1), (False, 0.0)):
        faulty.slow_errors = slow
        waits: dict[int, set[float]] = {}
        for _ in range(60):
            reply = faulty(request)
            waits.setdefault(reply.status, set()).add(reply.delay)
        assert waits == {500: {error_wait}, 429: {error_wait}, 200: {0.1}}
        assert {wait for _, kind, wait in faulty.log if kind == "malformed"} == {0.1}
        faulty.reset()
    faulty.rate = 0.0
    assert faulty(request).delay == 0.1


@pytest.mark.timeout(900)  # 8 paired runs, 4 block runs and the memory run: fresh processes
def test_online_measures_every_config(tmp_path: Path) -> None:
    result = run_bench("bench_online.py", tmp_path, timeout=900)
    runs = result["latency"]["runs"]
    assert set(runs) == {
        "none",
        "default",
        "prod",
        "handler",
        "isolated",
        "tracer",
        "noop",
        "capture",
    }
    for config in ("default", "prod", "handler", "isolated"):
        (run,) = runs[config]
        stats = run["handler_stats_at_loop_end"]
        assert stats["sampled"] == 10 + 30  # warm-up + timed pairs: one sampled call each
        assert run["settled_after_warmup"] is True
        final = run["handler_stats"]  # the queue held them all; all were scored
        assert final["dropped"] == 0
        assert final["processed"] == final["sampled"] == 40
        accounting = result["latency"][config]["accounting"]
        assert accounting["unscored"] == 0
        assert accounting["refused"] is False
        # the runtime is read from the handler: a child process has a pid, threads none
        assert (run["child_pid"] is not None) == (run["runtime"] == "ProcessRuntime")
        assert run["runtime"] in result["latency"][config]["runtime"]
        assert run["pairs_with_first"] == 15  # each side first in half the pairs
        blocks = result["blocks"][config]
        assert blocks["none"]["calls"] == blocks["noop"]["calls"] == blocks[config]["calls"] == 10
        assert blocks["accounting"]["unscored"] == 0
    assert runs["handler"][0]["runtime"] == "ThreadRuntime"
    assert runs["isolated"][0]["runtime"] == "ProcessRuntime"
    assert runs["isolated"][0]["child_rss_mib"] > 0  # the child really ran
    prod = runs["prod"][0]
    assert prod["isolation_asked"] == "auto"
    if prod["runtime"] == "ThreadRuntime":  # auto fell back: it said so, and the table says so
        assert prod["warnings"]
        assert "auto fell back" in result["latency"]["prod"]["runtime"]
    else:  # its LangSmith sink builds its own client: the child delivers with it
        assert prod["sinks_in_child"] == ["LangSmithFeedbackSink"]
        assert (
            "LangSmithFeedbackSink delivered by the child" in result["latency"]["prod"]["runtime"]
        )
        assert runs["default"][0]["sinks_in_child"] == []  # a LoggingSink logs here
    assert result["latency"]["prod"]["accounting"]["sinks"]["LangSmithFeedbackSink"] == {
        "delivered": 80,  # 40 retrievals x 2 metrics, every one sent to the stub
        "skipped": 0,
        "errors": 0,
        "dropped": 0,
        "pending": 0,
    }
    assert result["latency"]["langsmith_feedback"] == 80
    assert runs["capture"][0]["handler_stats_at_loop_end"]["sampled"] == 0
    assert result["latency"]["langsmith_runs"] > 0  # the tracer really sent its runs
    assert "Method check (A/A" in result["table"]
    memory = result["memory"]
    assert memory["delivered"] == memory["handler_stats"]["scored"] > 0


def test_online_checkouts_alternates_both_sides(tmp_path: Path) -> None:
    """``online_checkouts.py --tiny``, this checkout against itself: a run per side, each in
    a process of its own that imports the package from its side's root, every retrieval
    scored and every feedback sent."""
    result = run_bench("online_checkouts.py", tmp_path, "--before", str(REPO), timeout=600)
    prod = result["configs"]["prod"]
    assert set(prod) == {"before", "after"}
    for side in ("before", "after"):
        (run,) = prod[side]
        assert run["none"]["calls"] == run["noop"]["calls"] == run["prod"]["calls"] == 10
        accounting = run["accounting"]
        assert accounting["unscored"] == 0
        assert (
            accounting["sinks"]["LangSmithFeedbackSink"]["delivered"] == 2 * accounting["sampled"]
        )
    assert (
        result["command"] == f"python bench/online_checkouts.py --tiny --no-ragas --before {REPO}"
    )


def test_online_retrievals_are_all_distinct() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import _online_driver  # bench/ is not a package
    finally:
        sys.path.remove(str(BENCH))
    chain, questions = _online_driver.build_chain(30)
    retriever = chain.first.steps__["context"].first
    seen = [
        d.page_content for q in questions for d in retriever.invoke(q)
    ]  # what 30 invocations retrieve
    assert len(seen) == 30 * 5
    assert len(set(seen)) == len(seen)


def test_online_refuses_figures_when_too_much_went_unscored() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import bench_online
    finally:
        sys.path.remove(str(BENCH))
    run = {"handler_stats": {"sampled": 100, "dropped": 6, "processed": 94, "failed": 0}}
    assert bench_online.scored_accounting([run])["refused"] is True
    run = {"handler_stats": {"sampled": 100, "dropped": 5, "processed": 95, "failed": 0}}
    assert bench_online.scored_accounting([run])["refused"] is False
    run = {"handler_stats": {"sampled": 100, "dropped": 0, "processed": 100, "failed": 6}}
    assert bench_online.scored_accounting([run])["unscored"] == 6


@pytest.mark.parametrize("script", ["bench_import.py", "bench_cpu.py", "bench_long_context.py"])
def test_local_benchmarks_run(script: str, tmp_path: Path) -> None:
    result = run_bench(script, tmp_path)
    if script == "bench_import.py":
        assert result["sides"]["ours"]["bare"]["peak_rss_mib"] > 0
    elif script == "bench_cpu.py":
        assert all(case["us_per_sample"] > 0 for case in result["cases"].values())
    else:
        assert set(result["cases"]) == {"5000", "10000"}
        assert all(v > 0 for case in result["cases"].values() for v in case.values())


def test_fault_floor_simulates_every_scenario_with_the_packages_retry_rules(
    tmp_path: Path,
) -> None:
    result = run_bench("fault_floor.py", tmp_path, "--samples", "20")
    assert result["seeds"] == 20
    assert result["calls"] == 100  # entity recall sends two calls a sample
    assert result["fault_free_s"] == pytest.approx(100 * 0.1 / 16, abs=0.1)  # 100 calls
    scenarios = result["scenarios"]
    assert set(scenarios) == {
        "mixed-slow", "transient-slow", "mixed-fast", "transient-fast",
    }  # fmt: skip
    for name, row in scenarios.items():
        assert row["p5_s"] <= row["median_s"] <= row["p95_s"], name
        assert row["median_s"] > result["fault_free_s"]  # faults cost time in every draw
        assert 0.0 <= row["share_within_target"] <= 1.0
        assert row["median_requests"] > 100  # every fault was retried or failed its call


def test_fault_floor_takes_the_metrics_of_the_published_faults_run(tmp_path: Path) -> None:
    result = run_bench(
        "fault_floor.py",
        tmp_path,
        "--samples",
        "32",
        "--metrics",
        "context_recall,context_precision",
    )
    assert result["metrics"] == ["context_recall", "context_precision"]
    assert result["calls"] == 64
    assert result["fault_free_s"] == pytest.approx(0.4)  # 64 calls, 16 at a time, 100 ms each


def test_fault_floor_with_500s_retried_at_once_keeps_the_429_waits(tmp_path: Path) -> None:
    default = run_bench("fault_floor.py", tmp_path / "default", "--samples", "20")
    eager = run_bench(
        "fault_floor.py", tmp_path / "eager", "--samples", "20", "--initial-backoff", "0"
    )
    assert default["retry_policy"]["initial_backoff"] == 0.5
    assert eager["retry_policy"]["initial_backoff"] == 0.0
    for name, row in eager["scenarios"].items():
        # Seeded draws, no timing: deterministic. Retrying 500s at once does not slow the
        # median run, and the 429s' whole seconds still keep it a second above no faults.
        assert row["median_s"] <= default["scenarios"][name]["median_s"], name
        assert row["median_s"] >= eager["fault_free_s"] + 1.0, name


def test_monitor_benchmark_scores_every_run(tmp_path: Path) -> None:
    levels = run_bench("bench_monitor.py", tmp_path)["levels"]
    (level,) = levels.values()
    (run,) = level["runs"]
    assert run["runs_scored"] == 20
    assert run["judge_calls"] == run["feedback_sent"] == 40
    assert level["cpu_ms_per_judge_call"] > 0


def script_lines(script: str, *args: str) -> list[str]:
    """Run ``bench/<script> args`` (no provider keys) and return its printed lines."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LANGSMITH_"))}
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()


def test_fault_cpu_prices_every_fault_kind() -> None:
    """``bench_fault_cpu.py --tiny``: every fault kind was injected and retried, and priced."""
    summary = script_lines("bench_fault_cpu.py", "--tiny")
    assert summary[-1] == "command: python bench/bench_fault_cpu.py --tiny"
    # The CPU figures are differences of noisy timings (a loaded CI machine can make one
    # negative), so only their presence is checked; the fault counts are exact.
    figures = dict(re.findall(r"(500|429|malformed) (-?[\d.]+) ms", summary[-2]))
    assert set(figures) == {"500", "429", "malformed"}
    assert re.search(r"success [\d.]+ ms CPU/request", summary[-2])
    rounds = [line for line in summary if line.startswith("round ")]
    assert len(rounds) == 2
    per_kind = r"(500|429|malformed) [+-][\d.]+ ms/failed request \((\d+)\)"
    for line in rounds:
        counts = dict(re.findall(per_kind, line))
        # 8 samples x 2 metrics, each request failed once and retried once.
        assert counts == {"500": "16", "429": "16", "malformed": "16"}, line


def test_machine_scaling_times_one_and_two_processes() -> None:
    lines = script_lines("machine_scaling.py", "--rounds", "2", "--work", "0.05")
    assert lines[0] == "command: python bench/machine_scaling.py --rounds 2 --work 0.05"
    rows = [line for line in lines if re.match(r"\| [12] \|", line)]
    assert [row.split("|")[1].strip() for row in rows] == ["1", "2"]
    scaling = re.search(r"scaling 2 vs 1 process: ([\d.]+)x \(rounds ([\d., ]+);", lines[-2])
    assert scaling is not None
    assert float(scaling[1]) > 0
    assert len(scaling[2].split(", ")) == 2


def test_auto_threshold_compares_both_sides_for_each_size() -> None:
    lines = script_lines(
        "auto_threshold.py", "--samples", "3,5", "--repeats", "2", "--methods", "fork"
    )
    rows = [line.split("|")[1:-1] for line in lines if line.startswith("| fork")]
    assert [(r[1].strip(), r[2].strip()) for r in rows] == [("3", "12"), ("5", "20")]
    for row in rows:
        one, two, ratio = (float(row[i]) for i in (3, 4, 5))
        assert one > 0
        assert two > 0
        assert ratio == pytest.approx(one / two, abs=0.01)
        assert len(row[6].split(",")) == 2  # one ratio per round


def test_independent_halves_runs_both_sides_every_round() -> None:
    lines = script_lines("independent_halves.py", "--samples", "6", "--rounds", "2")
    rows = [line.split("|")[1:-1] for line in lines if re.match(r"\| \d \| [12] \|", line)]
    assert sorted((r[0].strip(), r[1].strip()) for r in rows) == [
        ("1", "1"), ("1", "2"), ("2", "1"), ("2", "2"),
    ]  # fmt: skip
    two = [r for r in rows if r[1].strip() == "2"]
    assert all(len(r[3].split(",")) == 2 for r in two)  # each process reports its busy share
    assert re.search(r"thread: 1 process [\d.]+ s, 2 independent halves [\d.]+ s", lines[-2])


def test_handler_dispatch_times_every_config_and_splits_the_added_median() -> None:
    lines = script_lines("handler_dispatch.py", "--calls", "20")
    assert lines[0] == "command: python bench/handler_dispatch.py --calls 20"
    rows = [line.split("|") for line in lines if re.match(r"\| [a-z-]+ \| \d", line)]
    assert [row[1].strip() for row in rows] == ["none", "do-nothing", "floor", "ours"]
    assert all(row[2].strip() == "20" and float(row[3]) > 0 for row in rows)
    split = re.search(
        r"floor\) ([+-][\d.]+) ms, our callbacks \(ours - floor\) ([+-][\d.]+) ms, "
        r"total ([+-][\d.]+) ms",
        lines[-1],
    )
    assert split is not None
    assert float(split[3]) == pytest.approx(float(split[1]) + float(split[2]), abs=0.002)


def test_caller_thread_replays_into_both_checkouts_and_counts_their_work() -> None:
    """``caller_thread.py``, this checkout against itself: every side timed, every replayed
    request scored by both handlers (the sides did the same work)."""
    lines = script_lines(
        "caller_thread.py", "--before", str(REPO), "--requests", "20", "--pause", "0.005"
    )
    assert (
        lines[0]
        == f"command: python bench/caller_thread.py --before {REPO} --requests 20 --pause 0.005"
    )
    rows = {
        row[1].strip(): row for row in (line.split("|") for line in lines if line.startswith("| "))
    }
    assert set(rows) == {"side", "null", "before", "after"}
    assert all(float(rows[side][2]) > 0 for side in ("null", "before", "after"))
    for side in ("before", "after"):  # 50 warm-up requests and 20 timed, one retrieval each
        summary = next(line for line in lines if line.startswith(f"{side}: "))
        assert "ProcessRuntime, closed in time True, sampled 70, scored 140 results" in summary
        assert "dropped 0, handler errors 0" in summary
    assert "17 events per request, 20 requests per side" in lines[-6]


def test_saturated_scoring_scores_every_retrieval_beside_busy_processes() -> None:
    """``saturated_scoring.py`` runs end to end: both configs, each retrieval scored while one
    busy process per CPU runs. (The guard itself is tested in tests/callbacks/test_priority.py;
    three retrievals may be scored in time even without it, slowly.)"""
    lines = script_lines(
        "saturated_scoring.py", "--runs", "1", "--retrievals", "3", "--deadline", "120"
    )
    assert lines[-1] == (
        "command: python bench/saturated_scoring.py --runs 1 --retrievals 3 --deadline 120"
    )
    rows = [line.split("|")[1:-1] for line in lines if line.startswith("| after |")]
    assert sorted(row[1].strip() for row in rows) == ["off", "on"]
    for row in rows:
        assert row[3].strip() == "3 of 3"  # scored in time
        assert row[4].strip() == "0"  # dropped
        assert float(row[5]) > 0  # seconds to score all: a number, not "not in 120 s"


def test_hook_handoff_prices_both_sides() -> None:
    """``hook_handoff.py`` runs end to end: both sides timed in feeder batches, the handoff's
    CPU per retrieval printed."""
    lines = script_lines("hook_handoff.py", "--calls", "30", "--batch", "3", "--seed", "2")
    assert lines[-1] == "command: python bench/hook_handoff.py --calls 30 --batch 3 --seed 2"
    rows = {row[1].strip(): row for row in (line.split("|") for line in lines[2:-2])}
    assert set(rows) == {"inline", "helper"}
    assert all((int(row[2]), int(row[3])) == (30, 10) for row in rows.values())
    assert all(float(row[4]) > 0 and float(row[6]) > 0 for row in rows.values())
    assert re.fullmatch(
        r"the helper thread adds -?[\d.]+ us of process CPU per retrieval", lines[-2]
    )


def test_handler_dispatch_reads_the_region_of_a_callgrind_dump(tmp_path: Path) -> None:
    import handler_dispatch

    dump = tmp_path / "ours.out.2"
    dump.write_text("# callgrind format\nversion: 1\nevents: Ir\nsummary: 48700123\n")
    assert handler_dispatch.region_instructions(dump) == 48_700_123
    empty = tmp_path / "empty.out.2"
    empty.write_text("version: 1\n")
    with pytest.raises(ValueError, match=r"empty\.out\.2: no summary line"):
        handler_dispatch.region_instructions(empty)


def test_handler_dispatch_region_mode_runs_one_config_quietly() -> None:
    # What --instructions runs under callgrind, for each config: no output, exit 0.
    assert script_lines("handler_dispatch.py", "--region", "ours", "--calls", "3") == []


def test_sink_throughput_delivers_every_score_in_both_configs() -> None:
    lines = script_lines("sink_throughput.py", "--results", "12", "--rounds", "2", "--latency", "0")
    assert (
        lines[0] == "command: python bench/sink_throughput.py --results 12 --rounds 2 --latency 0"
    )
    rows = [line.split("|") for line in lines if re.match(r"\| \d+ \| [\d.]+ \|", line)]
    assert [row[1].strip() for row in rows] == ["1", "16"]
    for row in rows:
        assert float(row[2]) > 0
        assert row[4].strip() == "1.00"  # the POST; no DELETE: the sink sent no error
        assert row[5].strip() == "24 of 24"
        assert (row[6].strip(), row[7].strip()) == ("0", "0")
    assert "max_concurrency=16:" in lines[-1]


def test_sink_request_cpu_measures_each_cut_with_both_environments() -> None:
    lines = script_lines(
        "sink_request_cpu.py", "--results", "6", "--rounds", "2", "--extra-env", "5"
    )
    assert (
        lines[0] == "command: python bench/sink_request_cpu.py --results 6 --rounds 2 --extra-env 5"
    )
    rows = [line.split("|") for line in lines if re.match(r"\| \d+ \| (now|DELETE)", line)]
    sides = [row[2].strip() for row in rows]
    assert [side.split(":")[0].split(" (")[0] for side in sides] == [
        "now",
        "DELETE after every score",
        "DELETE after every score, environment read per request",
    ] * 2
    counts = [int(row[1]) for row in rows]
    assert counts[3] == counts[0] + 5  # the second pass has the extra variables
    for row in rows:
        assert float(row[3]) > 0
        assert (row[6].strip(), row[7].strip()) == ("0", "12")
    # the POST alone now; the POST and the stale error's DELETE on the sides before the cut
    assert [row[5].strip() for row in rows] == ["1.00", "2.00", "2.00"] * 2
    assert lines[-1].startswith(f"{counts[3]} variables: no DELETE after a score ")
