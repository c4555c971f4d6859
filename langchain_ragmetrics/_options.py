"""Checks of numeric and bool options, one definition for the whole package.

Every option a user gives as a number (a timeout, a retry count, a concurrency) or as a switch
(``follow``, ``include_answer``) is checked by one of these before it is used, so bad input is
refused when an object is built, by the option's name, with one wording everywhere. A bool is
never a number here (``True`` is an ``int`` to Python, never what a user meant), nor is a
numeric string, NaN or infinity. A switch is only ``True`` or ``False``: a string such as
``"no"`` is truthy, and 0 / 1 say nothing about what the user meant. NumPy scalars, as they
come out of pandas, count: ``numpy.int64`` is a number and ``numpy.bool_`` a bool.
"""

from __future__ import annotations

import math
import numbers
import sys
from typing import Literal, TypeGuard, overload

from pydantic import BeforeValidator, ValidationInfo

__all__ = [
    "AS_GIVEN",
    "finite_number",
    "flag",
    "fraction",
    "number_above_zero",
    "number_at_least_zero",
    "whole_number",
]


def _finite(value: object) -> TypeGuard[numbers.Real]:
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)


def finite_number(name: str, value: object) -> numbers.Real:
    """``value`` as given, checked: a real number, finite (its range is checked apart).

    For pydantic fields, before its lax mode turns ``True`` into 1 or ``"0.5"`` into 0.5.

    Raises:
        ValueError: It is not; the message names the option and the value.
    """
    if not _finite(value):
        msg = f"`{name}` must be a finite number, got {value!r}"
        raise ValueError(msg)
    return value


def _as_given(value: object, info: ValidationInfo) -> object:
    return None if value is None else finite_number(str(info.field_name), value)


AS_GIVEN = BeforeValidator(_as_given)
"""A pydantic number field checked as given: ``Annotated[float | None, AS_GIVEN]``.

It runs :func:`finite_number` (None passes) before pydantic's lax mode, which would take
``True`` as 1 or ``"0.5"`` as 0.5; the range stays the field's own constraint.
"""


def number_above_zero(name: str, value: object) -> float:
    """``value`` as a float, checked: a finite number above 0 (a timeout, a rate).

    Raises:
        ValueError: It is not; the message names the option and the value.
    """
    if not _finite(value) or value <= 0:
        msg = f"`{name}` must be a number above 0, got {value!r}"
        raise ValueError(msg)
    return float(value)


def number_at_least_zero(name: str, value: object) -> float:
    """``value`` as a float, checked: a finite number of at least 0 (a backoff, a wait).

    Raises:
        ValueError: It is not; the message names the option and the value.
    """
    if not _finite(value) or value < 0:
        msg = f"`{name}` must be a number of at least 0, got {value!r}"
        raise ValueError(msg)
    return float(value)


def fraction(name: str, value: object) -> float:
    """``value`` as a float, checked: a number from 0 to 1 (a threshold, a rate, a drop).

    Raises:
        ValueError: It is not; the message names the option and the value (a NaN threshold
            would pass every gate).
    """
    if not _finite(value) or not 0 <= float(value) <= 1:
        msg = f"`{name}` must be a number between 0 and 1, got {value!r}"
        raise ValueError(msg)
    return float(value)


def whole_number(name: str, value: object, *, minimum: int = 1) -> int:
    """``value`` as an int, checked: a whole number (not a bool, not 1.0) of ``minimum`` or more.

    Raises:
        ValueError: It is not; the message names the option, the bound and the value.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        msg = f"`{name}` must be a whole number of at least {minimum}, got {value!r}"
        raise ValueError(msg)
    return int(value)


def _numpy_bool(value: object) -> bool:
    # Without numpy imported no value can be one of its bools, and importing it here would
    # make ``import langchain_ragmetrics`` heavy.
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.bool_)


@overload
def flag(name: str, value: object, *, allow_none: Literal[False] = False) -> bool: ...


@overload
def flag(name: str, value: object, *, allow_none: bool) -> bool | None: ...


def flag(name: str, value: object, *, allow_none: bool = False) -> bool | None:
    """``value`` as a Python bool, checked: ``True`` or ``False`` (or a NumPy bool).

    A switch given as ``"no"`` would be truthy, and 0 / 1 may be a count typed in the wrong
    place, so neither is taken. With ``allow_none``, None passes as itself (the caller's
    "decide for me").

    Raises:
        TypeError: It is not; the message names the option and the value.
    """
    if isinstance(value, bool):
        return value
    if _numpy_bool(value):
        return bool(value)
    if value is None and allow_none:
        return None
    allowed = "True, False or None" if allow_none else "True or False"
    msg = f"`{name}` must be {allowed}, got {value!r}"
    raise TypeError(msg)
