"""The HTML report in a real headless Chromium: what a person opening the file sees.

Runs Debian's ``/usr/bin/chromium`` (or ``$CHROMIUM_PATH``) through Playwright, with the
network cut: the page must render from the file alone. Skipped only outside CI when no
browser is installed; with ``CI=true`` a missing browser fails the test (``.ci/run`` installs
it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests._support.report_data import report_runs

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

_CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def _chromium() -> str | None:
    configured = os.environ.get("CHROMIUM_PATH")
    if configured:
        return configured
    return next((found for name in _CANDIDATES if (found := shutil.which(name))), None)


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason}: CI must run the browser test (.ci/run installs chromium)")
    pytest.skip(f"{reason} (outside CI the browser test is optional)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = _chromium()
    if executable is None:
        _unavailable("no chromium on PATH")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser, tmp_path: Path) -> Iterator[tuple[Page, list[str]]]:
    new, base = report_runs()
    report = new.to_html(tmp_path / "report.html", compare=base)
    assert report
    context = browser.new_context(viewport={"width": 1200, "height": 900}, offline=True)
    fetched: list[str] = []

    def record(route: Any) -> None:
        url = route.request.url
        if not url.startswith("file://"):
            fetched.append(url)
            route.abort()
        else:
            route.continue_()

    context.route("**/*", record)
    tab = context.new_page()
    tab.goto((tmp_path / "report.html").as_uri())
    try:
        yield tab, fetched
    finally:
        shot = os.environ.get("REPORT_SCREENSHOT")
        if shot:  # for a human to look at: REPORT_SCREENSHOT=/tmp/report.png
            tab.screenshot(path=shot, full_page=True)
        context.close()


def test_the_report_renders_offline(page: tuple[Page, list[str]]) -> None:
    tab, fetched = page
    assert tab.title() == "RAG evaluation: eval_new.jsonl"
    heading = tab.locator("h1")
    assert heading.is_visible()
    assert heading.inner_text() == "RAG evaluation: eval_new.jsonl"
    assert fetched == []  # nothing but the file itself was requested


def test_summary_table_is_visible_with_the_means(page: tuple[Page, list[str]]) -> None:
    tab, _ = page
    table = tab.locator("table.summary")
    assert table.is_visible()
    rows = table.locator("tr")
    assert rows.count() == 3
    recall = rows.nth(1).locator("td").all_inner_texts()
    assert recall[:2] == ["context_recall", "0.6875"]
    assert recall[5:7] == ["8", "1"]  # scored, failed
    box = table.bounding_box()
    assert box is not None
    assert box["width"] > 200
    assert box["height"] > 40


def test_histogram_bars_are_drawn(page: tuple[Page, list[str]]) -> None:
    tab, _ = page
    charts = tab.locator("svg.histogram")
    assert charts.count() == 2
    for i in range(2):
        chart = charts.nth(i)
        assert chart.is_visible()
        bars = chart.locator("rect.bar")
        assert bars.count() == 10
        drawn = 0
        for n in range(10):
            bar = bars.nth(n)
            count = int(bar.get_attribute("data-count") or 0)
            box = bar.bounding_box()
            assert box is not None
            if count:
                assert box["height"] > 1
                assert box["width"] > 1
                drawn += 1
            else:
                assert box["height"] < 1
        assert drawn >= 2
        frame = chart.bounding_box()
        assert frame is not None
        for label in chart.locator("text").all():  # counts and ticks are not clipped
            box = label.bounding_box()
            assert box is not None
            assert frame["y"] <= box["y"]
            assert box["y"] + box["height"] <= frame["y"] + frame["height"] + 0.5
    # the fullest recall bin (score 1.0: 4 rows) is the tallest bar
    recall_bars = charts.nth(0).locator("rect.bar")
    heights = [(recall_bars.nth(n).bounding_box() or {"height": 0})["height"] for n in range(10)]
    assert max(heights) == heights[9]


def test_worst_samples_show_reasons_and_verdicts(page: tuple[Page, list[str]]) -> None:
    tab, _ = page
    worst = tab.locator("h2", has_text="Worst samples")
    assert worst.is_visible()
    sample = tab.locator(".sample", has_text="Which element has the symbol Fe?").first
    assert sample.is_visible()
    text = sample.inner_text()
    assert "0 of 4 reference statements are supported by the contexts." in text
    verdicts = sample.locator(".verdicts table")
    assert verdicts.is_visible()
    assert "Reference statement 1 of row 7." in verdicts.inner_text()
    # data containing markup is shown as text
    origin = tab.get_by_text("Who wrote <b>On the Origin of Species</b>?").first
    assert origin.is_visible()


def test_comparison_view(page: tuple[Page, list[str]]) -> None:
    tab, _ = page
    title = tab.locator("#comparison")
    assert title.is_visible()
    assert title.inner_text() == "Comparison with eval_base.jsonl"
    row = tab.locator("table.comparison tr", has_text="context_recall")
    cells = row.locator("td").all_inner_texts()
    assert cells[:4] == ["context_recall", "0.8438", "0.6875", "-0.1562"]
    change = tab.locator(".sample", has_text="1.00 → 0.25").first
    assert change.is_visible()
    assert "before:" in change.inner_text()


def test_failures_are_listed(page: tuple[Page, list[str]]) -> None:
    tab, _ = page
    assert tab.locator("h2", has_text="Failed jobs (1)").is_visible()
    assert tab.get_by_text("TimeoutError: judge took too long").is_visible()
