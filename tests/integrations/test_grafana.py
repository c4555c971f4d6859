"""The shipped Grafana dashboard and Prometheus alert rules read only series we export.

A real run (scored, failed and skipped results, judge usage, a sink that drops, a sink that
raises, a retrieval dropped by a closed handler) goes through OpenTelemetrySink and the
Prometheus recipe; the test scrapes ``/metrics`` and checks every series, label and label
value that the dashboard's and the rules' PromQL use.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from langchain_ragmetrics import (
    CallableSink,
    ContextRelevance,
    IDBasedContextRecall,
    OnlineResult,
    OpenTelemetrySink,
    RagMetricsCallbackHandler,
    SinkUnavailableError,
)
from tests._support.fixtures import judge_factory
from tests._support.openai_server import JudgeServer, reply_error
from tests._support.prometheus import prometheus_endpoint
from tests._support.promql import Selector, grafana_to_promql, selectors
from tests._support.rag import FAST, question, rag_app, rag_router, relevance_judge

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "ragmetrics-dashboard.json"
RULES = ROOT / "deploy" / "prometheus" / "ragmetrics-alerts.yml"

Series = dict[str, list[dict[str, str]]]
"""Sample name -> label sets of its series in one scrape."""


def _refuse(_item: OnlineResult) -> None:
    raise SinkUnavailableError("backend down")


def _explode(_item: OnlineResult) -> None:
    raise RuntimeError("sink bug")


def _judge_or_fail(req: Any) -> Any:
    """Relevance judge that answers 500 for item 3 (so some results fail)."""
    if "item003" in req.user:
        return reply_error(500, "judge down")
    return relevance_judge(req)


@pytest.fixture(scope="module")
def scrape() -> Series:
    """One scrape of ``/metrics`` after a run that produces every kind of series."""
    with prometheus_endpoint() as endpoint, JudgeServer() as judge_server:
        app = rag_app(judge_server, judge_factory(judge_server), max_retries=2)
        judge_server.script = rag_router(RelevantSentences=_judge_or_fail)
        sink = OpenTelemetrySink(meter_provider=endpoint.meter_provider, events="span")
        handler = RagMetricsCallbackHandler(
            metrics=[ContextRelevance(llm=app.llm, retry=FAST), IDBasedContextRecall()],
            sinks=[sink, CallableSink(_refuse), CallableSink(_explode)],
            name="grafana-test",
        )
        sink.observe(handler)
        for i in range(5):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert handler.flush(timeout=60)
        assert handler.close(timeout=30)
        app.chain.invoke(question(9), config={"callbacks": [handler]})  # dropped: closed
        stats = handler.stats
        assert stats.failed == 1
        assert stats.skipped == 5
        assert stats.dropped == 1
        text = endpoint.scrape()
    series: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series.setdefault(sample.name, []).append(dict(sample.labels))
    return series


def dashboard_queries() -> list[str]:
    """Every PromQL expression of the dashboard's panels."""
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [target["expr"] for panel in board["panels"] for target in panel["targets"]]


def dashboard_variables() -> list[tuple[str, str]]:
    """``(series, label)`` of every ``label_values(series, label)`` template variable."""
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    out = []
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]["query"]
        assert query.startswith("label_values("), query
        assert query.endswith(")"), query
        name, label = (part.strip() for part in query[len("label_values(") : -1].split(","))
        out.append((name, label))
    return out


def rule_groups() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in data["groups"] for rule in group["rules"]]


def recording_rules() -> dict[str, str]:
    return {rule["record"]: rule["expr"] for rule in rule_groups() if "record" in rule}


def missing(selector: Selector, series: Series) -> str | None:
    """Why no scraped series satisfies ``selector`` (None when one does)."""
    candidates = series.get(selector.name)
    if not candidates:
        return f"no series named {selector.name}"
    needed = selector.labels | set(selector.matchers)
    for labels in candidates:
        if not needed <= set(labels):
            continue
        if all(
            op != "=" or labels[name] == value for name, (op, value) in selector.matchers.items()
        ):
            return None
    return f"{selector.name}: no series with labels {sorted(needed)} / {selector.matchers}"


def test_the_run_exports_every_kind_of_series(scrape: Series) -> None:
    assert {
        labels["gen_ai_evaluation_name"] for labels in scrape["ragmetrics_evaluation_score_count"]
    } == {"context_relevance"}
    (failed,) = scrape["ragmetrics_evaluation_failed_total"]
    assert failed["gen_ai_evaluation_name"] == "context_relevance"
    (skipped,) = scrape["ragmetrics_evaluation_skipped_total"]
    assert skipped["gen_ai_evaluation_name"] == "id_based_context_recall"
    sinks = {labels["ragmetrics_sink"] for labels in scrape["ragmetrics_sink_dropped_total"]}
    assert sinks == {"OpenTelemetrySink", "CallableSink", "CallableSink#2"}
    assert {
        labels["ragmetrics_handler"] for labels in scrape["ragmetrics_retrievals_dropped_total"]
    } == {"grafana-test"}


def test_sink_figures_are_exported_with_their_values() -> None:
    """The per-sink counters carry the handler's figures, not just their names."""
    with prometheus_endpoint() as endpoint:
        sink = OpenTelemetrySink(meter_provider=endpoint.meter_provider, events="span")
        handler = RagMetricsCallbackHandler(
            metrics=[IDBasedContextRecall()],
            sinks=[sink, CallableSink(_refuse), CallableSink(_explode)],
            name="figures-test",
        )
        with handler:
            sink.observe(handler)
            from tests._support.rag import corpus, make_retriever

            retriever = make_retriever(corpus(4))
            for i in range(3):
                retriever.invoke(question(i), config={"callbacks": [handler]})
            assert handler.flush(timeout=30)
        values = {
            (s.name, s.labels["ragmetrics_sink"]): s.value
            for family in text_string_to_metric_families(endpoint.scrape())
            for s in family.samples
            if s.name.startswith("ragmetrics_sink_")
        }
    assert values[("ragmetrics_sink_dropped_total", "CallableSink")] == 3
    assert values[("ragmetrics_sink_errors_total", "CallableSink#2")] == 3
    assert values[("ragmetrics_sink_dropped_total", "OpenTelemetrySink")] == 0


@pytest.mark.parametrize("expr", dashboard_queries())
def test_dashboard_series_exist(expr: str, scrape: Series) -> None:
    found = selectors(grafana_to_promql(expr))
    assert found, expr
    problems = [p for s in found if (p := missing(s, scrape))]
    assert not problems, f"{expr}\n{problems}"


@pytest.mark.parametrize(("name", "label"), dashboard_variables())
def test_dashboard_variables_list_values(name: str, label: str, scrape: Series) -> None:
    assert any(label in labels for labels in scrape.get(name, [])), (name, label)


@pytest.mark.parametrize("rule", rule_groups(), ids=lambda r: r.get("alert") or r["record"])
def test_rule_series_exist(rule: dict[str, Any], scrape: Series) -> None:
    found = selectors(rule["expr"], rules=recording_rules())
    assert found, rule["expr"]
    problems = [p for s in found if (p := missing(s, scrape))]
    assert not problems, f"{rule['expr']}\n{problems}"
    for text in rule.get("annotations", {}).values():
        for label in _template_labels(text):
            assert all(label in s.labels for s in found), (label, rule["expr"])


def test_alerts_cover_low_scores_failures_and_drops() -> None:
    alerts = {rule["alert"]: rule["expr"] for rule in rule_groups() if "alert" in rule}
    names = {
        name: {s.name for s in selectors(expr, rules=recording_rules())}
        for name, expr in alerts.items()
    }
    assert "ragmetrics_evaluation_score_sum" in names["RagMetricsScoreLow"]
    assert "ragmetrics_evaluation_failed_total" in names["RagMetricsFailedRateHigh"]
    assert names["RagMetricsRetrievalsDropped"] == {"ragmetrics_retrievals_dropped_total"}
    assert names["RagMetricsSinkDroppingResults"] == {"ragmetrics_sink_dropped_total"}


def _template_labels(text: str) -> set[str]:
    import re

    return set(re.findall(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)", text))


def test_the_parser_reads_names_matchers_and_grouping() -> None:
    (bucket,) = selectors(
        'histogram_quantile(0.1, sum by (le, a) (rate(m_bucket{a=~"x|y", b="z"}[5m])))'
    )
    assert bucket.name == "m_bucket"
    assert bucket.matchers == {"a": ("=~", "x|y"), "b": ("=", "z")}
    assert bucket.labels == {"le", "a"}
    left, right = selectors("sum by (a) (rate(x[5m])) and on (c) y > 0")
    assert (left.name, left.labels, right.name, right.labels) == ("x", {"a", "c"}, "y", {"c"})
    with pytest.raises(ValueError, match="cannot parse"):
        selectors("rate(x[5m]) @@ 2")


def test_docs_page_example_runs(tmp_path: Path) -> None:
    from tests._support.examples import python_blocks, run_example

    (block,) = python_blocks(ROOT / "docs" / "integrations" / "grafana.md")
    done = run_example(cwd=tmp_path, code=block)
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'gen_ai_evaluation_name="context_relevance"' in done.stdout
    assert "} 1.0" in done.stdout  # one scored result


def test_docs_page_config_blocks_name_the_shipped_files() -> None:
    """The page's Prometheus and Grafana provisioning snippets parse and point at deploy/."""
    text = (ROOT / "docs" / "integrations" / "grafana.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```yaml\n(.*?)^```", text, flags=re.M | re.S)
    prometheus, provider = (yaml.safe_load(b) for b in blocks)
    (rules,) = prometheus["rule_files"]
    assert (ROOT / "deploy" / "prometheus" / rules).is_file()
    assert prometheus["scrape_configs"][0]["static_configs"][0]["targets"]
    assert provider["apiVersion"] == 1
    assert provider["providers"][0]["type"] == "file"
