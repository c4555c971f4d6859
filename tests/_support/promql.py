"""Just enough of PromQL to list what an expression reads: series names and their labels.

``promtool`` is not available in CI and no well-kept Python PromQL parser exists, so this
tokenizes an expression and walks it: an identifier not followed by ``(`` and not a keyword
is a series; ``{...}`` after it holds label matchers; ``by``/``without`` labels belong to every
series inside the aggregation's parentheses; ``on``/``ignoring`` labels to every series of the
whole expression. Grafana variables (``$metric``, ``${x}``, ``$__rate_interval``) are replaced
by values PromQL accepts first. Anything it does not understand raises, so a typo in a
dashboard fails the test instead of passing unseen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Selector", "grafana_to_promql", "selectors"]

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<range>\[[^\]]*\])
  | (?P<number>\d+(?:\.\d+)?(?:e[+-]?\d+)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=,(){}])
    """,
    re.VERBOSE,
)
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "group_left", "group_right", "inf", "nan"}
_GROUPING = {"by", "without"}
_MATCHING = {"on", "ignoring"}
_AGGREGATIONS = {
    "sum",
    "avg",
    "min",
    "max",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
}


@dataclass
class Selector:
    """One series an expression reads: its name, label matchers and the labels it must carry."""

    name: str
    matchers: dict[str, tuple[str, str]] = field(default_factory=dict)
    """label -> (operator, value)."""
    labels: set[str] = field(default_factory=set)
    """Labels the expression groups or matches on, which the series must therefore have."""


def grafana_to_promql(expr: str) -> str:
    """Replace Grafana's variables by values PromQL accepts (``$x`` inside a regex -> ``.*``)."""
    expr = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m")
    return re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", ".*", expr)


def _tokens(expr: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            msg = f"cannot parse PromQL at {expr[pos : pos + 20]!r} in {expr!r}"
            raise ValueError(msg)
        kind = match.lastgroup or ""
        if kind != "space":
            out.append((kind, match.group()))
        pos = match.end()
    return out


def _closing(tokens: list[tuple[str, str]], start: int) -> int:
    """Index of the parenthesis closing the one at ``start``."""
    depth = 0
    for i in range(start, len(tokens)):
        if tokens[i][1] == "(":
            depth += 1
        elif tokens[i][1] == ")":
            depth -= 1
            if depth == 0:
                return i
    msg = "unbalanced parentheses"
    raise ValueError(msg)


def _label_list(tokens: list[tuple[str, str]], start: int) -> tuple[set[str], int]:
    """Labels of ``( a, b )`` starting at ``start``; returns them and the index after ``)``."""
    if tokens[start][1] != "(":
        msg = f"expected '(' after a grouping keyword, got {tokens[start][1]!r}"
        raise ValueError(msg)
    end = _closing(tokens, start)
    labels = {value for kind, value in tokens[start + 1 : end] if kind == "ident"}
    return labels, end + 1


def selectors(expr: str, *, rules: dict[str, str] | None = None) -> list[Selector]:
    """The series ``expr`` reads; recording rules named in ``rules`` are expanded first."""
    for name, body in (rules or {}).items():
        expr = re.sub(rf"(?<![A-Za-z0-9_:]){re.escape(name)}(?![A-Za-z0-9_:])", f"({body})", expr)
    tokens = _tokens(expr)
    found: list[tuple[int, Selector]] = []
    scoped: list[tuple[set[str], int, int]] = []  # labels, token span of an aggregation body
    matching: set[str] = set()
    i = 0
    while i < len(tokens):
        kind, value = tokens[i]
        following = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind != "ident" or value in _KEYWORDS:
            i += 1
            continue
        if value in _MATCHING:
            labels, i = _label_list(tokens, i + 1)
            matching |= labels
            continue
        if value in _AGGREGATIONS and following in _GROUPING:
            labels, body = _label_list(tokens, i + 2)
            scoped.append((labels, body, _closing(tokens, body)))
            i = body
            continue
        if following == "(":  # a function or an aggregation without grouping
            i += 1
            continue
        if value in _GROUPING:
            msg = f"put `{value} (...)` before the aggregation's parentheses in {expr!r}"
            raise ValueError(msg)
        selector = Selector(value)
        i += 1
        if i < len(tokens) and tokens[i][1] == "{":
            i += 1
            while tokens[i][1] != "}":
                (_, label), (_, op), (vkind, raw) = tokens[i : i + 3]
                if vkind != "string" or op not in ("=", "!=", "=~", "!~"):
                    msg = f"bad label matcher {label}{op}{raw} in {expr!r}"
                    raise ValueError(msg)
                selector.matchers[label] = (op, raw[1:-1])
                i += 3
                if tokens[i][1] == ",":
                    i += 1
            i += 1
        found.append((i, selector))
    for position, selector in found:
        selector.labels |= matching
        for labels, start, end in scoped:
            if start < position <= end:
                selector.labels |= labels
    return [selector for _, selector in found]
