"""The package's import graph: no cycles, and every import points down DESIGN.md's layers.

Every ``import`` in the package counts, wherever it stands (module level, inside a function,
under ``TYPE_CHECKING``): a cycle hidden behind a lazy import still ties the modules
together for a reader, a type checker and the next refactoring.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import langchain_ragmetrics

PACKAGE = "langchain_ragmetrics"
ROOT = Path(langchain_ragmetrics.__file__).parent

LAYERS: tuple[tuple[str, ...], ...] = (
    # schema / scoring, and the pure helpers they and the metrics share
    (
        "_breaker",
        "_dataset",
        "_errors",
        "_extract",
        "_files",
        "_gate",
        "_ids",
        "_interrupts",
        "_links",
        "_loops",
        "_options",
        "_otel",
        "_plain",
        "_progress",
        "_prompts",
        "_redact",
        "_schema",
        "_segment_fast",
        "_text",
        "_transient",
        "_version",
        "scoring",
    ),
    ("metrics", "_cache"),  # the judged metrics and their verdict cache
    # the engine, its queue and threads, the one path to scores, the requests to observability
    # servers (one retry loop) and the LangSmith feedback client
    (
        "_engine",
        "_guarded",
        "_langsmith_feedback",
        "_queue",
        "_retrieval",
        "_threads",
        "_user_calls",
    ),
    ("callbacks", "evaluation"),
    ("calibration", "demo", "integrations"),
    ("_cli",),
)
"""Bottom to top (DESIGN.md: schema/scoring < metrics < engine < callbacks, evaluation <
integrations < cli). The package root, which only re-exports, sits above them all."""
ALLOWED_CYCLES: set[frozenset[str]] = set()
"""None: every import points down or across a layer without a loop."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The package modules ``path`` imports (``from pkg import submodule`` names the module)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                for a in node.names
            ]
        else:
            continue
        yield from (name for name in names if name in modules)


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {
        name: {target for target in _imports(path, modules) if target != name}
        for name, path in modules.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def _layer(module: str) -> int:
    if module == PACKAGE:
        return len(LAYERS)
    first = module.split(".")[1]
    for level, names in enumerate(LAYERS):
        if first in names:
            return level
    msg = f"{module} is in no layer: add {first!r} to LAYERS"
    raise AssertionError(msg)


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [frozenset({"a", "b", "c"})]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_cycle() -> None:
    cycles = [sorted(c) for c in _cycles(_graph()) if c not in ALLOWED_CYCLES]
    assert cycles == []


def test_every_import_points_down_the_layers() -> None:
    graph = _graph()
    upward = sorted(
        f"{source} (layer {_layer(source)}) imports {target} (layer {_layer(target)})"
        for source, targets in graph.items()
        for target in targets
        if _layer(target) > _layer(source)
    )
    assert upward == []


def test_every_module_is_in_a_layer() -> None:
    for module in _graph():
        _layer(module)  # raises, naming the module, when it is in none
