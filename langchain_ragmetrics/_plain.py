"""Any value as plain JSON data: the one converter for what crosses a process or a file.

A user's cells and a custom metric's details may hold anything (NumPy values, sets, dict
views, dicts keyed by numbers, objects, cycles). A Ray row written as JSON, a ledger key,
and a result a worker process must pickle all need the same thing: plain data (dicts keyed
by text, lists, text, numbers, booleans, None) that says as much as it can of the value.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Set, ValuesView
from typing import Any

__all__ = ["MAX_DEPTH", "exact_scalar", "plain_json", "text_of", "unwrap_numpy"]

logger = logging.getLogger(__name__)

MAX_DEPTH = 64
"""Nesting beyond which :func:`plain_json` cuts a value (a cycle is cut where it closes)."""
_SCALARS = frozenset({str, int, float, bool, type(None)})
"""Exact types only: a subclass (an enum, a str with state) may not pickle where it goes."""


def exact_scalar(value: Any) -> Any:
    """A ``str``, ``int`` or ``float`` of a subclass as the exact built-in; anything else as is.

    An enum member (``class Tier(str, Enum)``), NumPy's ``float64`` or a ``str`` carrying
    state pickles as its class, which another process may not be able to import (one
    defined in the user's ``__main__`` never is): its text or number alone crosses safely.
    A ``str`` enum becomes its value, not its name.
    """
    kind = type(value)
    if kind in _SCALARS:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):  # bool cannot be subclassed: an exact bool returned above
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    return value


def text_of(value: Any) -> str:
    """``str(value)``; an object whose text raises is named by its type. Never raises."""
    try:
        return str(value)
    except Exception:  # any object, whatever its __str__ does
        return f"<{type(value).__name__} object>"


def unwrap_numpy(value: Any) -> Any:
    """A NumPy scalar or array as plain Python values (``tolist()``); anything else as is."""
    module = type(value).__module__
    if module == "numpy" or module.startswith("numpy."):
        tolist = getattr(value, "tolist", None)
        if callable(tolist):
            return tolist()
    return value


def plain_json(value: Any, *, leaf: Callable[[Any], Any] = text_of) -> Any:
    """``value`` as plain JSON data, whatever it holds. Never raises.

    Text, numbers, booleans and None of their exact types stay; a subclass of ``str``,
    ``int`` or ``float`` becomes the exact built-in (:func:`exact_scalar`), NumPy values
    plain ones, dict keys text, tuples and dict values lists, sets and dict keys lists
    (sorted, so that the form does not depend on the process's hash seed). Any other object
    becomes ``leaf(value)`` (its text by default); a cycle, or nesting deeper than
    :data:`MAX_DEPTH`, is cut to ``"..."``.

    Args:
        value: Anything.
        leaf: What an object that is none of the above becomes; it must not raise and
            should return plain data.
    """
    return _plain(value, leaf, ())


def _plain(value: Any, leaf: Callable[[Any], Any], seen: tuple[int, ...]) -> Any:
    kind = type(value)
    if kind in _SCALARS:
        return value
    if isinstance(value, (str, int, float)):  # a subclass: its text or number, not its class
        return exact_scalar(value)
    if id(value) in seen or len(seen) >= MAX_DEPTH:
        return "..."
    inner = (*seen, id(value))
    try:
        unwrapped = unwrap_numpy(value)
        if unwrapped is not value:
            return _plain(unwrapped, leaf, inner)
        if isinstance(value, Mapping):
            return {_key(key): _plain(item, leaf, inner) for key, item in value.items()}
        if isinstance(value, Set):  # a set, a frozenset, a dict's keys or items
            items = [_plain(item, leaf, inner) for item in value]
            return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
        if isinstance(value, (list, tuple, ValuesView)):
            return [_plain(item, leaf, inner) for item in value]
    except Exception:  # a container that cannot be walked: its leaf form below
        logger.debug("a value could not be walked; kept as its leaf form", exc_info=True)
    return leaf(value)


def _key(key: Any) -> str:
    """A dict key as text: plain text stays, a subclass of ``str`` loses its class."""
    if type(key) is str:
        return key
    return str.__str__(key) if isinstance(key, str) else text_of(key)
