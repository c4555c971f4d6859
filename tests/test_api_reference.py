"""The API reference is the public surface: docs/api/ documents exactly what ``__all__`` says.

Each ``::: langchain_ragmetrics...`` line of a docs/api page renders one object (mkdocstrings),
or a public module's docstring. The public modules are listed below; for each, the names its
``__all__`` exports must be documented, once, and nothing else may be: a name a subpackage
shares with the root (``langchain_ragmetrics.metrics.ContextRecall`` is
``langchain_ragmetrics.ContextRecall``) is documented at the root only. Every other module of
the package is private (``_name``) or listed, for now, in ``PENDING_PRIVATE``.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

import langchain_ragmetrics

REPO = Path(__file__).resolve().parents[1]
API_PAGES = sorted((REPO / "docs" / "api").glob("*.md"))
ROOT = "langchain_ragmetrics"

PUBLIC_MODULES = (
    ROOT,
    f"{ROOT}.calibration",
    f"{ROOT}.callbacks",
    f"{ROOT}.demo",
    f"{ROOT}.evaluation",
    f"{ROOT}.integrations.langsmith",
    f"{ROOT}.integrations.mlflow",
    f"{ROOT}.integrations.monitor",
    f"{ROOT}.integrations.opentelemetry",
    f"{ROOT}.integrations.phoenix",
    f"{ROOT}.integrations.ray",
    f"{ROOT}.metrics",
    f"{ROOT}.scoring",
)
"""The modules a user imports from; each has an ``__all__`` (kept sorted by ruff's RUF022)."""

NAMESPACES = (f"{ROOT}.integrations",)
"""Packages that only hold public modules and export nothing themselves."""

PENDING_PRIVATE = (
    f"{ROOT}.callbacks.handler",
    f"{ROOT}.callbacks.langsmith_feedback",
    f"{ROOT}.callbacks.sinks",
)
"""Modules without a leading ``_`` that are not public: to be renamed ``_name``.

Everything they export that a user needs is exported by a public module already. Delete an
entry when its module is renamed (the test below says which entries are stale).
"""

PENDING_DROPS: dict[str, frozenset[str]] = {}
"""Internals still in a public module's ``__all__``: to be dropped from it, then from here."""

_DIRECTIVE = re.compile(r"^:::\s+(\S+)\s*$", re.M)


def documented() -> list[tuple[str, str]]:
    """``(page, identifier)`` for every ``:::`` line of the API pages."""
    return [
        (page.name, match.group(1))
        for page in API_PAGES
        for match in _DIRECTIVE.finditer(page.read_text(encoding="utf-8"))
    ]


def split(identifier: str) -> tuple[str, str | None]:
    """``(public module, name)``, or ``(module, None)`` for a module's own docstring."""
    if identifier in PUBLIC_MODULES:
        return identifier, None
    module, _, name = identifier.rpartition(".")
    if module not in PUBLIC_MODULES:
        msg = f"{identifier} is not a name of a public module ({', '.join(PUBLIC_MODULES)})"
        raise AssertionError(msg)
    return module, name


def documented_pairs() -> list[tuple[str, str | None]]:
    """``split`` of every identifier that names a public module or one of its objects.

    An identifier of no public module is reported by its own test, not by every test using this.
    """
    found = [identifier for _, identifier in documented()]
    return [
        split(i) for i in found if i in PUBLIC_MODULES or i.rpartition(".")[0] in PUBLIC_MODULES
    ]


def exported(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    assert isinstance(names, list), f"{module.__name__} has no __all__ list"
    return names


def documented_at_root(module: ModuleType, name: str) -> bool:
    """A subpackage's name that is the very object the root exports under the same name."""
    return name in langchain_ragmetrics.__all__ and getattr(module, name) is getattr(
        langchain_ragmetrics, name
    )


def test_api_pages_exist_and_name_only_public_modules() -> None:
    assert len(API_PAGES) >= 5, "docs/api/ is missing"
    for page, identifier in documented():
        try:
            split(identifier)
        except AssertionError as exc:
            pytest.fail(f"docs/api/{page}: {exc}")


def test_each_object_is_documented_once() -> None:
    counts = Counter(identifier for _, identifier in documented())
    assert [i for i, n in counts.items() if n > 1] == []


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_documented_names_are_the_public_names(module_name: str) -> None:
    module = importlib.import_module(module_name)
    names = exported(module)
    pending = PENDING_DROPS.get(module_name, frozenset())
    assert pending <= set(names), (
        f"{sorted(pending - set(names))} left {module_name}.__all__: remove them from PENDING_DROPS"
    )
    public = set(names) - pending
    if module_name != ROOT:
        public = {n for n in public if not documented_at_root(module, n)}
    docs = documented_pairs()
    assert (module_name, None) in docs or module_name == ROOT, (
        f"document the module itself: `::: {module_name}` with `members: false`"
    )
    here = {name for mod, name in docs if mod == module_name and name is not None}
    assert sorted(public - here) == [], f"public in {module_name} but not in docs/api/"
    assert sorted(here - public) == [], f"in docs/api/ but not public in {module_name}"


def test_the_root_module_is_documented() -> None:
    assert (ROOT, None) in documented_pairs()


def test_every_module_is_public_private_or_pending() -> None:
    modules = {
        info.name
        for info in pkgutil.walk_packages(langchain_ragmetrics.__path__, f"{ROOT}.")
        if not any(part.startswith("_") for part in info.name.split(".")[1:])
    }
    stale = sorted(set(PENDING_PRIVATE) - modules)
    assert stale == [], f"{stale} are private now: remove them from PENDING_PRIVATE"
    unknown = sorted(modules - set(PUBLIC_MODULES) - set(NAMESPACES) - set(PENDING_PRIVATE))
    assert unknown == [], (
        f"{unknown}: a new public module? Document it in docs/api/ and add it to PUBLIC_MODULES,"
        " or name it with a leading underscore"
    )
    for name in NAMESPACES:
        assert not getattr(importlib.import_module(name), "__all__", None), name


def test_split_names_the_module_and_the_object() -> None:
    assert split(ROOT) == (ROOT, None)
    assert split(f"{ROOT}.RagSample") == (ROOT, "RagSample")
    assert split(f"{ROOT}.metrics.Plan") == (f"{ROOT}.metrics", "Plan")
    assert split(f"{ROOT}.integrations.monitor") == (f"{ROOT}.integrations.monitor", None)
    with pytest.raises(AssertionError, match="not a name of a public module"):
        split(f"{ROOT}.callbacks.sinks.JsonlSink")
