import re
from pathlib import Path

from langchain_ragmetrics.evaluation import EvaluationResult
from langchain_ragmetrics.evaluation._html import histogram_counts
from tests._support.report_data import report_runs


def test_histogram_counts_cover_zero_to_one() -> None:
    assert histogram_counts([0.0, 0.05, 0.1, 0.55, 0.999, 1.0, float("nan")]) == [
        2, 1, 0, 0, 0, 1, 0, 0, 0, 2,
    ]  # fmt: skip


def test_report_is_one_self_contained_file(tmp_path: Path) -> None:
    new, base = report_runs()
    html = new.to_html(tmp_path / "sub" / "report.html", compare=base)
    assert (tmp_path / "sub" / "report.html").read_text(encoding="utf-8") == html
    assert html.startswith("<!DOCTYPE html>")
    # nothing is fetched: no scripts, stylesheets, images or fonts from anywhere
    assert "<script" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html
    assert "url(" not in html
    for section in ("Summary", "Score distribution", "Worst samples", "Failed jobs (1)"):
        assert f">{section}</h2>" in html
    assert 'id="comparison"' in html
    assert html.count('<svg class="histogram"') == 2


def test_data_is_escaped() -> None:
    new, _ = report_runs()
    html = new.to_html()
    assert "Who wrote &lt;b&gt;On the Origin of Species&lt;/b&gt;?" in html
    assert "<b>On the Origin" not in html


def test_histogram_bars_carry_the_counts() -> None:
    new, _ = report_runs()
    html = new.to_html()
    recall_svg = html[html.index('data-metric="context_recall"') :]
    recall_svg = recall_svg[: recall_svg.index("</svg>")]
    counts = [int(c) for c in re.findall(r'data-count="(\d+)"', recall_svg)]
    assert counts == histogram_counts([s for s in new["context_recall"] if s is not None])
    assert sum(counts) == 8  # the failed row is not a score


def test_notebook_repr_is_a_fragment() -> None:
    new, _ = report_runs()
    fragment = new._repr_html_()
    assert fragment.startswith("<style>")
    assert "<html" not in fragment
    assert 'class="rm-report"' in fragment


def test_a_loaded_run_renders_like_the_original(tmp_path: Path) -> None:
    new, base = report_runs()
    loaded = EvaluationResult.load(new.to_jsonl(tmp_path / "new.jsonl"))
    assert loaded.to_html(compare=base) == new.to_html(compare=base)
