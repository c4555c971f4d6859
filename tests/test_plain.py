"""The one converter of any value to plain JSON data (worker results, Ray rows and keys)."""

from __future__ import annotations

import enum
import json
import pickle
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from typing_extensions import override

from langchain_ragmetrics._plain import MAX_DEPTH, plain_json, text_of, unwrap_numpy


class _Text(str):
    """A str subclass: not plain data (a subclass may hold what does not cross)."""

    __slots__ = ()

    @override
    def __repr__(self) -> str:
        return f"_Text({str(self)!r})"


class _Colour(enum.IntEnum):
    RED = 1


class _NoText:
    """An object whose str() raises."""

    @override
    def __str__(self) -> str:
        raise RuntimeError("no text")


class _BrokenMapping(Mapping[str, int]):
    """A mapping whose walk raises half-way."""

    def __getitem__(self, key: str) -> int:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        yield "a"

    def __len__(self) -> int:
        return 1

    @override
    def __str__(self) -> str:
        return "<broken mapping>"


def test_plain_values_stay_and_containers_become_json_forms() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    value = {
        "text": "a",
        "numbers": [1, 2.5, True, None],
        "pair": ("x", {"y": 1}),
        "by_number": {1: "one", _Text("k"): 2},
        "set": {3, 1, 2},
        "keys": {"k": 0, "j": 1}.keys(),
        "values": {"k": 0}.values(),
        "loop": loop,
        "subclass": _Text("t"),
        "enum": _Colour.RED,
        "numpy": [np.int64(3), np.float32(0.5), np.array([[1, 2]])],
        "lock": threading.Lock(),
    }
    plain = plain_json(value)
    assert {k: v for k, v in plain.items() if k != "lock"} == {
        "text": "a",
        "numbers": [1, 2.5, True, None],
        "pair": ["x", {"y": 1}],
        "by_number": {"1": "one", "k": 2},
        "set": [1, 2, 3],
        "keys": ["j", "k"],
        "values": [0],
        "loop": [1, "..."],
        "subclass": "t",
        "enum": 1,  # an int subclass as the exact int
        "numpy": [3, 0.5, [[1, 2]]],
    }
    assert plain["lock"].startswith("<unlocked _thread.lock object")
    assert type(plain["subclass"]) is str
    assert type(plain["enum"]) is int
    assert type(plain["by_number"]["k"]) is int
    assert [type(key) for key in plain["by_number"]] == [str, str]
    assert json.loads(json.dumps(plain)) == plain
    pickle.dumps(plain)  # plain data always pickles


def test_a_set_has_one_form_whatever_the_hash_seed() -> None:
    """Sorted by its items' JSON text, so a key built from it is the same in every process."""
    assert plain_json({"b", "a", "c"}) == ["a", "b", "c"]
    assert plain_json(frozenset({(2, 1), (1, 2)})) == [[1, 2], [2, 1]]
    assert plain_json({1: "x"}.items()) == [[1, "x"]]


def test_the_leaf_decides_what_an_object_becomes() -> None:
    seen: list[Any] = []

    def leaf(value: Any) -> str:
        seen.append(value)
        return f"leaf:{type(value).__name__}"

    lock = threading.Lock()
    assert plain_json({"a": [lock, 1, "x"]}, leaf=leaf) == {"a": ["leaf:lock", 1, "x"]}
    assert seen == [lock]


def test_nothing_makes_it_raise() -> None:
    assert plain_json(_NoText()) == "<_NoText object>"
    assert plain_json({_NoText(): 1}) == {"<_NoText object>": 1}
    assert plain_json([_BrokenMapping()]) == ["<broken mapping>"]  # cannot be walked: its text
    assert text_of(_NoText()) == "<_NoText object>"


def test_deep_nesting_is_cut() -> None:
    deep: Any = "bottom"
    for _ in range(MAX_DEPTH + 10):
        deep = [deep]
    plain = plain_json(deep)
    depth = 0
    while isinstance(plain, list):
        plain, depth = plain[0], depth + 1
    assert (plain, depth) == ("...", MAX_DEPTH)


def test_unwrap_numpy_leaves_other_values_alone() -> None:
    assert unwrap_numpy(np.int64(7)) == 7
    assert type(unwrap_numpy(np.int64(7))) is int
    assert unwrap_numpy(np.array(["a", "b"])) == ["a", "b"]
    marker = object()
    assert unwrap_numpy(marker) is marker
