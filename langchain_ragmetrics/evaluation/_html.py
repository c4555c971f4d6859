"""The HTML report of a run: one self-contained file (inline CSS and SVG, no script, no CDN)."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_ragmetrics.evaluation._compare import Comparison, compare_results

if TYPE_CHECKING:
    from langchain_ragmetrics.evaluation._model import EvaluationRow, ResultData

__all__ = ["histogram_counts", "render_report"]

_BINS = 10
_WORST = 5
_MAX_FAILURES = 20
_CHART_W, _CHART_H, _PAD = 320, 120, 18

_CSS = """
.rm-report{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2933;
  max-width:1100px;margin:0 auto;padding:16px}
.rm-report h1{font-size:22px;margin:0 0 4px}
.rm-report h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d9e2ec;padding-bottom:4px}
.rm-report h3{font-size:15px;margin:16px 0 6px}
.rm-report .meta{color:#52606d;font-size:13px}
.rm-report table{border-collapse:collapse;margin:6px 0}
.rm-report th,.rm-report td{border:1px solid #d9e2ec;padding:4px 8px;text-align:left;
  vertical-align:top}
.rm-report th{background:#f0f4f8}
.rm-report td.num{text-align:right;font-variant-numeric:tabular-nums}
.rm-report .charts{display:flex;flex-wrap:wrap;gap:16px}
.rm-report figure{margin:0;border:1px solid #d9e2ec;border-radius:6px;padding:8px}
.rm-report figcaption{font-weight:600;margin-bottom:4px}
.rm-report .bar{fill:#3e7cb1}
.rm-report .axis{stroke:#9aa5b1}
.rm-report svg text{font-size:10px;fill:#52606d}
.rm-report .sample{border:1px solid #d9e2ec;border-radius:6px;padding:8px 12px;margin:8px 0}
.rm-report .score{font-weight:700}
.rm-report .low{color:#b42318}.rm-report .mid{color:#b54708}.rm-report .high{color:#067647}
.rm-report .worse{color:#b42318}.rm-report .better{color:#067647}
.rm-report .reason{margin:4px 0}
.rm-report .error{color:#b42318}
.rm-report .verdicts td{font-size:13px}
.rm-report .muted{color:#7b8794}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _num(value: float | None, signed: bool = False) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:+.4f}" if signed else f"{value:.4f}"


def _band(score: float) -> str:
    return "low" if score < 0.5 else "mid" if score < 0.8 else "high"


def histogram_counts(scores: Sequence[float], bins: int = _BINS) -> list[int]:
    """Counts of finite scores in ``bins`` equal bins over [0, 1] (1.0 in the last bin)."""
    counts = [0] * bins
    for score in scores:
        if math.isnan(score):
            continue
        counts[min(bins - 1, max(0, int(score * bins)))] += 1
    return counts


def _histogram(metric: str, scores: Sequence[float]) -> str:
    counts = histogram_counts(scores)
    top = max(counts) or 1
    width = (_CHART_W - 2 * _PAD) / _BINS
    base = _CHART_H - _PAD
    parts = [
        f'<svg class="histogram" data-metric="{_e(metric)}" width="{_CHART_W}" '
        f'height="{_CHART_H}" viewBox="0 0 {_CHART_W} {_CHART_H}" role="img" '
        f'aria-label="histogram of {_e(metric)}">',
        f'<line class="axis" x1="{_PAD}" y1="{base}" x2="{_CHART_W - _PAD}" y2="{base}"/>',
    ]
    for i, count in enumerate(counts):
        height = (base - 14) * count / top  # headroom for the count label
        x = _PAD + i * width
        low, high = i / _BINS, (i + 1) / _BINS
        parts.append(
            f'<rect class="bar" data-count="{count}" x="{x + 1:.1f}" y="{base - height:.1f}" '
            f'width="{width - 2:.1f}" height="{height:.1f}">'
            f"<title>{low:.1f}-{high:.1f}: {count} rows</title></rect>"
        )
        if count:
            parts.append(
                f'<text x="{x + width / 2:.1f}" y="{base - height - 2:.1f}" '
                f'text-anchor="middle">{count}</text>'
            )
    for tick in (0.0, 0.5, 1.0):
        x = _PAD + tick * (_CHART_W - 2 * _PAD)
        parts.append(f'<text x="{x:.1f}" y="{_CHART_H - 4}" text-anchor="middle">{tick:g}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return _num(value)
    if isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
        return ", ".join(_cell(v) for v in value) or "(none)"
    if isinstance(value, (dict, list)):
        return _e(json.dumps(value, ensure_ascii=False))
    return _e(value)


def _details(details: Mapping[str, Any]) -> str:
    """Verdict lists as small tables (per statement / context / entity / sentence)."""
    parts = []
    for key, value in details.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            columns = list(dict.fromkeys(k for item in value for k in item))
            head = "".join(f"<th>{_e(c)}</th>" for c in columns)
            body = "".join(
                "<tr>" + "".join(f"<td>{_cell(item.get(c))}</td>" for c in columns) + "</tr>"
                for item in value
            )
            parts.append(
                f'<div class="verdicts"><b>{_e(key)}</b><table><tr>{head}</tr>{body}</table></div>'
            )
        else:
            parts.append(f'<div class="verdicts"><b>{_e(key)}</b>: {_cell(value)}</div>')
    return "".join(parts)


def _sample_block(row: EvaluationRow, metric: str, *, extra: str = "") -> str:
    result = row.results.get(metric)
    if result is None:
        return ""
    score = result.score
    if score is None or math.isnan(score):
        score_html = '<span class="score error">failed</span>'
    else:
        score_html = f'<span class="score {_band(score)}">{score:.2f}</span>'
    contexts = "".join(
        f"<li>{_e(c[:300])}{'...' if len(c) > 300 else ''}</li>" for c in row.sample.contexts
    )
    parts = [
        '<div class="sample">',
        f"<div>{score_html} <b>{_e(row.sample.question)}</b> "
        f'<span class="muted">({_e(row.location)})</span></div>',
        extra,
        f'<p class="reason">{_e(result.reason)}</p>' if result.reason else "",
        f'<p class="error">{_e(result.error)}</p>' if result.error else "",
        _details(result.details) if result.details else "",
        f"<details><summary>contexts ({len(row.sample.contexts)})</summary><ol>{contexts}</ol>"
        "</details>"
        if row.sample.contexts
        else "",
        "</div>",
    ]
    return "".join(parts)


def _summary(result: ResultData) -> str:
    head = "".join(
        f"<th>{h}</th>"
        for h in ("metric", "mean", "std", "min", "max", "scored", "failed", "skipped", "not run")
    )
    body = []
    for s in result.aggregates.values():
        cells = [_num(s.mean), _num(s.std), _num(s.min), _num(s.max)]
        counts = [s.count, s.failed, s.skipped, s.not_run]
        body.append(
            f"<tr><td>{_e(s.metric)}</td>"
            + "".join(f'<td class="num">{c}</td>' for c in cells)
            + "".join(f'<td class="num">{c}</td>' for c in counts)
            + "</tr>"
        )
    usage = result.usage
    cache = (
        f"; verdict cache: {usage.cache_hits} hits, {usage.cache_misses} misses"
        if usage.cache_hits or usage.cache_misses
        else ""
    )
    return (
        f'<table class="summary"><tr>{head}</tr>{"".join(body)}</table>'
        f'<p class="meta">Judge calls: {usage.judge_calls}; tokens: {usage.input_tokens:,} in + '
        f"{usage.output_tokens:,} out{cache}</p>"
    )


def _charts(result: ResultData) -> str:
    figures = []
    for metric in result.metrics:
        scores = [s for s in result[metric] if s is not None and not math.isnan(s)]
        figures.append(
            f'<figure><figcaption>{_e(metric)} <span class="muted">({len(scores)} scores)'
            f"</span></figcaption>{_histogram(metric, scores)}</figure>"
        )
    return f'<div class="charts">{"".join(figures)}</div>'


def _worst(result: ResultData) -> str:
    parts = []
    for metric in result.metrics:
        scored = [
            row
            for row in result.rows
            if (r := row.results.get(metric)) is not None
            and r.score is not None
            and not math.isnan(r.score)
            and r.score < 1.0  # a perfect score is not worth a look here
        ]
        scored.sort(key=lambda row: row.results[metric].score or 0.0)  # type: ignore[union-attr]
        blocks = "".join(_sample_block(row, metric) for row in scored[:_WORST])
        empty = "<p class=muted>no row scored below 1.0</p>"
        parts.append(f"<h3>{_e(metric)}</h3>{blocks or empty}")
    return "".join(parts)


def _failures(result: ResultData) -> str:
    failures = result.failures()
    if not failures:
        return ""
    items = "".join(
        f"<tr><td>{_e(loc)}</td><td>{_e(metric)}</td><td class=error>{_e(err)}</td></tr>"
        for loc, metric, err in failures[:_MAX_FAILURES]
    )
    more = (
        f"<p class=muted>... and {len(failures) - _MAX_FAILURES} more</p>"
        if len(failures) > _MAX_FAILURES
        else ""
    )
    return (
        f"<h2>Failed jobs ({len(failures)})</h2>"
        f"<table><tr><th>row</th><th>metric</th><th>error</th></tr>{items}</table>{more}"
    )


def _comparison(comparison: Comparison) -> str:
    head = "".join(
        f"<th>{h}</th>"
        for h in ("metric", "base", "new", "change", "95% CI", "rows", "worse", "better")
    )
    body = []
    for m in comparison.metrics.values():
        tone = "worse" if m.diff < 0 else "better" if m.diff > 0 else ""
        ci = "n/a" if math.isnan(m.ci_low) else f"[{m.ci_low:+.4f}, {m.ci_high:+.4f}]"
        body.append(
            f"<tr><td>{_e(m.metric)}</td><td class=num>{_num(m.base_mean)}</td>"
            f"<td class=num>{_num(m.new_mean)}</td>"
            f'<td class="num {tone}">{_num(m.diff, signed=True)}</td><td class=num>{ci}</td>'
            f"<td class=num>{m.pairs}</td><td class=num>{m.worse}</td>"
            f"<td class=num>{m.better}</td></tr>"
        )
    rows = []
    for change in comparison.worst:
        rows.append(
            '<div class="sample">'
            f'<div><span class="score worse">{change.base_score:.2f} &rarr; '
            f"{change.new_score:.2f}</span> [{_e(change.metric)}] <b>{_e(change.question)}</b> "
            f'<span class="muted">({_e(change.location)})</span></div>'
            f'<p class="reason"><b>now:</b> {_e(change.new_reason)}</p>'
            f'<p class="reason"><b>before:</b> {_e(change.base_reason)}</p>'
            + (_details(change.details) if change.details else "")
            + "</div>"
        )
    matched = (
        f"{comparison.matched} samples matched"
        + (f", {comparison.only_base} only in the base run" if comparison.only_base else "")
        + (f", {comparison.only_new} only in this run" if comparison.only_new else "")
    )
    return (
        f'<h2 id="comparison">Comparison with {_e(comparison.base_source)}</h2>'
        f'<p class="meta">{_e(matched)}; change = this run minus the base, on rows scored in '
        "both; 95% CI by bootstrap.</p>"
        f'<table class="comparison"><tr>{head}</tr>{"".join(body)}</table>'
        f"<h3>Rows that got worse most</h3>{''.join(rows) or '<p class=muted>none</p>'}"
    )


def _meta(result: ResultData) -> str:
    jobs = len(result.rows) * len(result.metrics)
    bits = [f"{len(result.rows)} samples x {len(result.metrics)} metrics = {jobs} jobs"]
    bits.append(f"{result.elapsed_s:.2f} s")
    info = result.info
    if info is not None:
        bits.append(f"finished {info.created_at:%Y-%m-%d %H:%M UTC}")
        if info.judges:
            bits.append("judge " + ", ".join(info.judges))
        bits.append(f"langchain-ragmetrics {info.package_version}")
        bits.append(f"data {info.dataset_fingerprint}")
    if result.interrupted:
        bits.append("INTERRUPTED: some jobs did not run")
    return f'<p class="meta">{_e(" · ".join(bits))}</p>'


def render_report(
    result: ResultData, *, base: ResultData | None = None, standalone: bool = True
) -> str:
    """The report as HTML: a whole document, or a ``<div>`` for a notebook cell."""
    comparison = compare_results(base, result) if base is not None else None
    body = "".join(
        [
            '<div class="rm-report">',
            f"<h1>RAG evaluation: {_e(result.source)}</h1>",
            _meta(result),
            "<h2>Summary</h2>",
            _summary(result),
            "<h2>Score distribution</h2>",
            _charts(result),
            _comparison(comparison) if comparison is not None else "",
            "<h2>Worst samples</h2>",
            _worst(result),
            _failures(result),
            "</div>",
        ]
    )
    if not standalone:
        return f"<style>{_CSS}</style>{body}"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>RAG evaluation: {_e(result.source)}</title><style>{_CSS}</style></head>"
        f"<body>{body}</body></html>"
    )
