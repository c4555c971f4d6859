"""check_judge and ``ragmetrics check-judge`` end to end against the loopback judge."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from langchain_ragmetrics import check_judge
from langchain_ragmetrics._cli import ExitCode, main
from langchain_ragmetrics.calibration import (
    DEFAULT_MIN_KAPPA,
    DEFAULT_VARIANTS,
    JudgeGate,
    JudgeReport,
    UnknownMetricError,
    acheck_judge,
    load_calibration_set,
)
from langchain_ragmetrics.metrics import RetryPolicy
from langchain_ragmetrics.scoring import average_precision
from tests._support.calibration_judge import fixed_judge, label_judge
from tests._support.openai_server import JudgeServer, reply_error, reply_garbage, reply_hold

JudgeFactory = Callable[..., Any]
ITEMS = load_calibration_set()
FAST = RetryPolicy(initial_backoff=0.01, max_backoff=0.02)
# Every fourth item gets its first verdict of each metric answered the other way round.
FLIPPED = {item.id for n, item in enumerate(ITEMS) if n % 4 == 0}


def _kappa(labels: list[bool], judged: list[bool]) -> float:
    n = len(labels)
    observed = sum(a == b for a, b in zip(labels, judged, strict=True)) / n
    p_label, p_judged = sum(labels) / n, sum(judged) / n
    chance = p_label * p_judged + (1 - p_label) * (1 - p_judged)
    return (observed - chance) / (1 - chance)


def _flip_first(flags: list[bool], item_id: str) -> list[bool]:
    return [not f if item_id in FLIPPED and i == 0 else f for i, f in enumerate(flags)]


def expected_figures() -> dict[str, tuple[float, float, float]]:
    """(accuracy, kappa, score MAE) per metric, worked out from the labels and the flips."""
    out: dict[str, tuple[float, float, float]] = {}
    vectors: dict[str, list[tuple[str, list[bool], float | None, Callable[..., float]]]] = {
        "context_recall": [
            (i.id, list(i.labels.context_recall.attributed), 1.0, lambda f: sum(f) / len(f))
            for i in ITEMS
        ],
        "context_precision": [
            (i.id, list(i.labels.context_precision.useful), 1.0, average_precision) for i in ITEMS
        ],
        "context_relevance": [
            (
                i.id,
                [
                    n in i.labels.context_relevance.relevant
                    for n in range(len(i.labels.context_relevance.sentences))
                ],
                1.0,
                lambda f: sum(f) / len(f),
            )
            for i in ITEMS
        ],
        "context_entity_recall": [
            (
                i.id,
                [bool(e.found) for e in i.labels.context_entity_recall.reference_entities],
                1.0,
                lambda f: sum(f) / len(f),
            )
            for i in ITEMS
            if i.labels.context_entity_recall.score is not None
        ],
    }
    for metric, rows in vectors.items():
        labels = [v for _, flags, _, _ in rows for v in flags]
        judged = [v for item_id, flags, _, _ in rows for v in _flip_first(flags, item_id)]
        flips = sum(1 for item_id, _, _, _ in rows if item_id in FLIPPED)
        accuracy = (len(labels) - flips) / len(labels)
        assert accuracy == sum(a == b for a, b in zip(labels, judged, strict=True)) / len(labels)
        mae = sum(
            abs(score(_flip_first(flags, item_id)) - score(flags))
            for item_id, flags, _, score in rows
        ) / len(rows)
        out[metric] = (accuracy, _kappa(labels, judged), mae)
    return out


def _rows(out: str, metric: str) -> tuple[list[str], list[str]]:
    """The metric's cells in the agreement table and in the cost table."""
    return _all_rows(out, metric)[0], _all_rows(out, metric)[2]


def _all_rows(out: str, metric: str) -> list[list[str]]:
    """The metric's cells in the agreement, chance-baseline and cost tables."""
    rows = [cells for line in out.splitlines() if (cells := line.split()) and cells[0] == metric]
    assert len(rows) == 3, out
    return rows


def test_a_judge_answering_from_the_labels_agrees_fully(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = label_judge()
    report = check_judge(make_judge())
    assert isinstance(report, JudgeReport)
    assert report.judge == "judge-model"
    assert [m.metric for m in report.metrics] == list(DEFAULT_VARIANTS)
    for row in report.metrics:
        assert row.items == len(ITEMS)
        assert row.answered == len(ITEMS)
        assert row.accuracy == 1.0
        assert row.kappa == 1.0
        assert row.accuracy_ci == row.kappa_ci == (1.0, 1.0)  # every resample agrees fully
        assert row.always_yes is not None
        assert row.always_no is not None
        assert row.label_yes_rate is not None
        assert row.always_yes.accuracy == pytest.approx(row.label_yes_rate)
        assert row.always_no.accuracy == pytest.approx(1 - row.label_yes_rate)
        assert row.always_yes.kappa == row.always_no.kappa == 0.0
        assert row.passes() is True
        assert row.score_mae == 0.0
        assert row.parse_failure_rate == row.error_rate == row.retry_rate == 0.0
        assert row.disagreements == []
        assert row.input_tokens > 0
        assert row.output_tokens > 0
        assert row.latency_p50_s is not None
        assert row.latency_p95_s is not None
        assert row.latency_p50_s <= row.latency_p95_s
    assert report.row("context_recall").verdicts == sum(
        len(i.labels.context_recall.sentences) for i in ITEMS
    )
    assert report.row("context_entity_recall").calls_per_item == 2.0  # two independent reads
    assert report.row("context_recall").calls_per_item == 1.0
    assert report.failing() == []
    assert report.passed
    assert report.gate.min_kappa == DEFAULT_MIN_KAPPA == 0.6


@pytest.mark.parametrize("answer", [True, False], ids=["always-yes", "always-no"])
def test_a_judge_that_does_not_read_fails_the_default_gate(
    judge_server: JudgeServer, capsys: pytest.CaptureFixture[str], answer: bool
) -> None:
    """The labels are unbalanced, so a fixed answer can score a fair accuracy: kappa sees it."""
    judge_server.script = fixed_judge(answer)
    base = ["check-judge", "--model", "judge-model", "--base-url", judge_server.base_url]
    assert main([*base, "--no-progress"]) == ExitCode.JUDGE_DISAGREES
    captured = capsys.readouterr()
    assert captured.err.strip().endswith(f"{', '.join(DEFAULT_VARIANTS)} (see the table)")
    for metric in DEFAULT_VARIANTS:
        agreement, cost = _rows(captured.out, metric)
        assert cost[1] == cost[2] == str(len(ITEMS)) or metric == "context_entity_recall"
        assert agreement[6] == "0.000", metric  # kappa: no better than chance
        assert agreement[-1] == "FAIL"
        chance = _all_rows(captured.out, metric)[1]
        # always-yes: accuracy, its interval, kappa, its interval (two cells each); then always-no
        own = chance[1:7] if answer else chance[7:13]
        assert own == agreement[3:9]  # it scores exactly its chance baseline
        assert own[3:] == ["0.000", "[0.00,", "0.00]"]


def test_every_judging_mode_can_be_measured(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    """The entity-recall decision: agreement vs calls of one call and two independent reads."""
    judge_server.script = label_judge()
    names = [
        "context_entity_recall",
        "context_entity_recall:one-call",
        "context_precision:per-context",
        "context_recall:statement",
    ]
    report = check_judge(make_judge(), metrics=names, language="en")
    assert [m.metric for m in report.metrics] == names
    english = len(load_calibration_set(language="en"))
    two, one, per_context, statement = report.metrics
    assert two.items == one.items == english
    assert two.accuracy == one.accuracy == 1.0
    assert (two.calls_per_item, one.calls_per_item) == (2.0, 1.0)
    contexts = sum(len(i.contexts) for i in load_calibration_set(language="en"))
    assert per_context.judge_calls == contexts
    assert per_context.accuracy == 1.0
    assert statement.accuracy is None  # the judge's own statements cannot be lined up
    assert statement.score_mae == 0.0
    assert statement.kappa is None
    assert statement.passes() is None  # answered everything, nothing to line up: not gated
    assert "n/a" in report.table()


def test_flipped_verdicts_give_the_figures_the_flips_imply(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = label_judge(flip=FLIPPED)
    report = check_judge(make_judge())
    for metric, (accuracy, kappa, mae) in expected_figures().items():
        row = report.row(metric)
        assert row.accuracy == pytest.approx(accuracy, abs=1e-12), metric
        assert row.kappa == pytest.approx(kappa, abs=1e-12), metric
        assert row.score_mae == pytest.approx(mae, abs=1e-12), metric
        no_entities = {i.id for i in ITEMS if i.labels.context_entity_recall.score is None}
        assert sorted(row.disagreements) == sorted(
            i for i in FLIPPED if metric != "context_entity_recall" or i not in no_entities
        )


def test_the_command_prints_full_agreement_and_exits_zero(
    judge_server: JudgeServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    judge_server.script = label_judge()
    out_file = tmp_path / "report.json"
    code = main(
        [
            "check-judge",
            "--model",
            "judge-model",
            "--base-url",
            judge_server.base_url,
            "--json",
            str(out_file),
        ]
    )
    out = capsys.readouterr().out
    assert code == ExitCode.OK, out
    assert "Judge check of judge-model on the calibration set:" in out
    for metric in DEFAULT_VARIANTS:
        agreement, cost = _rows(out, metric)
        # accuracy, its interval, kappa, its interval, ..., gate
        assert agreement[3:9] == ["1.000", "[1.00,", "1.00]", "1.000", "[1.00,", "1.00]"]
        assert agreement[-1] == "pass"
        assert cost[1:4] == [str(len(ITEMS)), str(len(ITEMS)), "0.000"]
    assert "Every checked metric meets the gate: kappa >= 0.60 and answered >= 0.90." in out
    assert "95 % percentile bootstrap over items (2000 resamples, seed 0)" in out
    saved = json.loads(out_file.read_text(encoding="utf-8"))
    assert [m["accuracy"] for m in saved["metrics"]] == [1.0] * 4
    assert [m["kappa_ci"] for m in saved["metrics"]] == [[1.0, 1.0]] * 4
    assert saved["gate"] == {"min_kappa": 0.6, "min_answered": 0.9, "min_accuracy": None}


@pytest.mark.parametrize(
    ("gate", "figure"),
    [
        (["--min-kappa", "0.9"], 1),  # the kappa gate
        (["--min-kappa", "0", "--min-agreement", "0.9"], 0),  # the optional accuracy floor
    ],
)
def test_the_command_prints_the_flipped_figures_and_exits_11(
    judge_server: JudgeServer, capsys: pytest.CaptureFixture[str], gate: list[str], figure: int
) -> None:
    judge_server.script = label_judge(flip=FLIPPED)
    base = ["check-judge", "--model", "judge-model", "--base-url", judge_server.base_url]
    code = main([*base, *gate, "--no-progress"])
    captured = capsys.readouterr()
    failing = []
    for metric, figures in expected_figures().items():
        accuracy, kappa, mae = figures
        agreement, cost = _rows(captured.out, metric)
        assert (agreement[3], agreement[6], cost[3]) == (
            f"{accuracy:.3f}",
            f"{kappa:.3f}",
            f"{mae:.3f}",
        ), metric
        if figures[figure] < 0.9:
            failing.append(metric)
            assert agreement[-1] == "FAIL"
        else:
            assert agreement[-1] == "pass"
    assert failing  # the flips push at least one metric under 0.9
    assert code == ExitCode.JUDGE_DISAGREES == 11
    assert "below the gate (" in captured.err
    named = captured.err.split("): ", 1)[1].removesuffix(" (see the table)\n").split(", ")
    assert sorted(named) == sorted(failing)


def test_the_help_names_the_gate_and_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-judge", "--help"]) == ExitCode.OK
    out = " ".join(capsys.readouterr().out.split())
    assert "with 95 % bootstrap intervals" in out
    assert "--min-kappa MIN_KAPPA lowest acceptable Cohen's kappa per metric (default: 0.6" in out
    assert "--min-answered" in out
    assert "--min-agreement MIN_AGREEMENT also require this verdict accuracy" in out


def test_the_command_without_a_judge_says_how_to_configure_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check-judge"]) == ExitCode.NO_API_KEY
    assert "OPENAI_API_KEY" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--metrics", "context_recall,nonsense"], ExitCode.UNKNOWN_METRIC, "nonsense"),
        (["--metrics", " , "], ExitCode.USAGE, "--metrics is empty"),
        (["--language", "xx"], ExitCode.USAGE, "--language"),
        (["--language", "de"], ExitCode.USAGE, "no 'de' items"),
        (["--min-agreement", "1.5"], ExitCode.USAGE, "between 0 and 1"),
        (["--min-kappa", "-0.5"], ExitCode.USAGE, "between 0 and 1"),
        (["--min-answered", "2"], ExitCode.USAGE, "between 0 and 1"),
    ],
)
def test_the_command_rejects_bad_options(
    capsys: pytest.CaptureFixture[str], args: list[str], code: int, message: str
) -> None:
    assert main(["check-judge", "--base-url", "http://127.0.0.1:9/v1", *args]) == code
    assert message in capsys.readouterr().err


def test_unknown_metric_in_python_names_the_known_ones(make_judge: JudgeFactory) -> None:
    with pytest.raises(UnknownMetricError, match="context_entity_recall:one-call"):
        check_judge(make_judge(), metrics=["context_recal"])
    with pytest.raises(ValueError, match="`language`"):
        check_judge(make_judge(), language="xx")
    with pytest.raises(ValueError, match="no 'fr' items"):
        check_judge(make_judge(), language="fr")


async def test_async_twin_and_the_sync_one_inside_a_running_loop(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    """``check_judge`` scores on threads, as ``evaluate`` does: it works where a loop runs
    (a notebook cell) and never builds a loop of its own."""
    judge_server.script = label_judge()
    report = await acheck_judge(make_judge(), metrics=["context_relevance"], language="ja")
    assert report.row("context_relevance").accuracy == 1.0
    assert report.language == "ja"
    asyncio.get_running_loop()  # this test runs inside one
    again = check_judge(make_judge(), metrics=["context_relevance"], language="ja")
    assert again.row("context_relevance").accuracy == 1.0
    assert again.row("context_relevance").judge_calls == report.row("context_relevance").judge_calls


def test_a_judge_answering_garbage_counts_as_parse_failures(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = lambda req: reply_garbage()
    report = check_judge(make_judge(), metrics=["context_precision"], language="ja", retry=FAST)
    row = report.row("context_precision")
    ja = len(load_calibration_set(language="ja"))
    assert row.answered == 0
    assert row.parse_failure_rate == row.error_rate == 1.0
    assert row.retry_rate == 1.0  # one parse retry per expected call
    assert row.judge_calls == 2 * ja
    assert row.accuracy is None
    assert row.score_mae is None
    assert len(row.disagreements) == ja
    assert row.passes() is False  # a judge that never answers usably fails the gate
    assert report.failing() == ["context_precision"]


@pytest.mark.parametrize("status", [429, 500])
def test_a_failing_judge_is_retried_then_counted_as_errors(
    judge_server: JudgeServer, make_judge: JudgeFactory, status: int
) -> None:
    judge_server.script = lambda req: reply_error(status)
    report = check_judge(make_judge(), metrics=["context_relevance"], language="ja", retry=FAST)
    row = report.row("context_relevance")
    assert row.error_rate == 1.0
    assert row.parse_failure_rate == 0.0
    assert row.retry_rate == FAST.max_retries
    assert row.answered == 0


def test_a_second_run_meets_the_first_runs_closed_loop_and_still_retries_every_item(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    """Each check_judge call runs its own event loop, while langchain-openai keeps one async
    HTTP client per process: the second call's first request meets an idle connection of
    the first call's loop, now closed ("Event loop is closed"). That attempt is retried like
    a dropped connection, so every item still gets its retries (it was a NaN before)."""
    judge_server.script = lambda req: reply_error(429)
    for _ in range(2):
        report = check_judge(make_judge(), metrics=["context_relevance"], language="ja", retry=FAST)
        row = report.row("context_relevance")
        assert row.retry_rate >= FAST.max_retries  # every item: all its retries, at least
        assert not any("Event loop is closed" in str(d) for d in row.disagreements)
        judge_server.cut_connections()  # the server closes the idle connections, as one does


def test_a_judge_that_never_answers_is_abandoned_by_the_timeout(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    release = threading.Event()
    judge_server.script = lambda req: reply_hold(release)
    try:
        report = check_judge(
            make_judge(), metrics=["context_recall"], language="ja", timeout=0.5, retry=FAST
        )
    finally:
        release.set()
    row = report.row("context_recall")
    assert row.answered == 0
    assert row.error_rate == 1.0
    assert all(math.isfinite(x) for x in (row.retry_rate, row.calls_per_item))


def test_half_failing_judge_is_gated_on_the_answered_share(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    answer = label_judge()
    ja = load_calibration_set(language="ja")
    dropped = {i.question for n, i in enumerate(ja) if n % 2 == 0}

    def script(req: Any) -> Any:
        data = json.loads(req.messages[-1]["content"])
        return reply_error(400) if data["question"] in dropped else answer(req)

    judge_server.script = script
    report = check_judge(make_judge(), metrics=["context_precision"], language="ja", retry=FAST)
    row = report.row("context_precision")
    assert row.answered == len(ja) - len(dropped)
    assert row.accuracy == 1.0  # everything it answered agrees ...
    assert row.kappa == 1.0
    assert row.passes() is False  # ... but it answered only half the items
    assert report.failing() == ["context_precision"]
    lenient = JudgeGate(min_answered=0.4)
    assert row.passes(lenient) is True


def test_a_metric_built_by_the_caller_is_checked_as_custom(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    """Comparing prompts: pass metrics you built; they keep their own prompt and judge."""
    from langchain_core.prompts import ChatPromptTemplate

    from langchain_ragmetrics import ContextRecall

    judge_server.script = label_judge()
    mine = ChatPromptTemplate.from_messages(
        [("system", "My own rubric, answer in {language}."), ("human", "{payload}")]
    )
    report = check_judge(
        make_judge(),
        metrics=[
            "context_recall",
            ContextRecall(llm=make_judge(), prompt=mine),
            ContextRecall(llm=make_judge(), prompt=mine),
        ],
        language="ja",
    )
    assert [m.metric for m in report.metrics] == [
        "context_recall",
        "context_recall:custom",
        "context_recall:custom2",
    ]
    assert all(m.accuracy == 1.0 for m in report.metrics)
    assert any(r.system == "My own rubric, answer in Japanese." for r in judge_server.requests)
    with pytest.raises(ValueError, match="at least one"):
        check_judge(make_judge(), metrics=[])


def test_the_readme_figures_of_a_word_overlap_judge(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    """The docs' "Checking a judge" page quotes these figures; they come from this run."""
    from tests._support.lexical_judge import lexical_judge

    judge_server.script = lexical_judge()
    report = check_judge(make_judge())
    figures = {m.metric: (f"{m.accuracy:.3f}", f"{m.kappa:.3f}") for m in report.metrics}
    assert figures == {
        "context_recall": ("0.844", "0.669"),
        "context_precision": ("0.812", "0.590"),
        "context_entity_recall": ("0.648", "0.373"),
        "context_relevance": ("0.657", "0.216"),
    }
    entity = report.row("context_entity_recall")
    assert entity.always_yes is not None
    assert entity.accuracy is not None
    assert entity.accuracy < entity.always_yes.accuracy  # worse than not reading at all
    page = Path(__file__).parents[2] / "docs" / "check-judge.md"
    readme = " ".join(page.read_text(encoding="utf-8").split())
    assert f"always-yes judge ({entity.always_yes.accuracy:.3f})" in readme
    for accuracy, kappa in figures.values():
        assert f"{accuracy} (kappa {kappa})" in readme or f"{accuracy} ({kappa})" in readme
    precision = report.row("context_precision")
    assert precision.accuracy is not None
    assert precision.accuracy > 0.8  # an accuracy gate of 0.8 would have passed it
    assert report.failing() == [
        "context_precision",
        "context_entity_recall",
        "context_relevance",
    ]


def _pulled(name: str, passages: str) -> bool:
    """A sloppy reading: a reference entity 'is there' when a piece of it is (a word of four
    letters or more in English, two characters in a row in Japanese)."""
    import re

    words = set(re.findall(r"[a-z]{4,}", name.casefold()))
    if words & set(re.findall(r"[a-z]{4,}", passages.casefold())):
        return True
    pairs = {name[i : i + 2] for i in range(len(name) - 1)}
    return any(not p.isascii() and p in passages for p in pairs)


def test_comparing_modes_catches_a_judge_pulled_by_the_reference(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    """The entity-recall decision, measured: a judge that lets the reference it can see pull
    its reading of the passages loses agreement in one call, not in two independent calls."""
    answer = label_judge()
    by_reference = {i.reference: i for i in ITEMS}

    def script(req: Any) -> Any:
        if req.schema_name != "EntityLists":
            return answer(req)  # two-call mode: it never sees the reference with the passages
        data = json.loads(req.messages[-1]["content"])
        item = by_reference[data["reference"]]
        labels = item.labels.context_entity_recall
        passages = "\n".join(item.contexts)
        extra = [
            e.name for e in labels.reference_entities if not e.found and _pulled(e.name, passages)
        ]
        return {
            "reference_entities": [
                {"name": e.name, "aliases": e.aliases} for e in labels.reference_entities
            ],
            "passage_entities": [
                {"name": e.name, "aliases": e.aliases} for e in labels.context_entities
            ]
            + [{"name": name} for name in extra],
        }

    judge_server.script = script
    report = check_judge(
        make_judge(), metrics=["context_entity_recall", "context_entity_recall:one-call"]
    )
    pulled = [
        e.name
        for i in ITEMS
        for e in i.labels.context_entity_recall.reference_entities
        if not e.found and _pulled(e.name, "\n".join(i.contexts))
    ]
    assert pulled  # the set holds near-misses a sloppy reading turns into hits
    verdicts = sum(len(i.labels.context_entity_recall.reference_entities) for i in ITEMS)
    two, one = report.metrics
    assert two.accuracy == 1.0
    assert one.accuracy == (verdicts - len(pulled)) / verdicts
    assert one.score_mae is not None
    assert one.score_mae > 0
    assert (two.calls_per_item, one.calls_per_item) == (2.0, 1.0)


def test_bad_options_are_refused_before_any_call(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """Before: a plain string was read letter by letter ("unknown metric 'c'"); a dict
    ``retry`` made every call fail as a judge error, so a good judge looked failing; an
    unwritable ``--json`` was found after the whole paid run."""
    with pytest.raises(TypeError, match="`metrics` must be a list of metric names or metrics"):
        check_judge(make_judge(), metrics="context_recall")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_retries"):
        check_judge(make_judge(), metrics=["context_recall"], retry={"max_retries": -1})  # type: ignore[arg-type]
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code = main(
        ["check-judge", "--model", "judge-model", "--base-url", judge_server.base_url,
         "--metrics", "context_recall", "--json", str(blocker / "report.json")]
    )  # fmt: skip
    assert code == ExitCode.PREFLIGHT_FAILED
    assert f"cannot write --json {blocker / 'report.json'}" in capsys.readouterr().err
    assert judge_server.count() == 0


def test_a_retry_policy_given_as_a_dict_is_used(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = label_judge()
    report = check_judge(
        make_judge(),
        metrics=["context_recall"],
        language="en",
        retry={"max_retries": 0},  # type: ignore[arg-type]
    )
    (row,) = report.metrics
    assert row.answered == row.items > 0  # every item answered: the policy was usable
