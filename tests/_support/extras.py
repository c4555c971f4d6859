"""Tests of an optional extra: skipped without it, a failure when CI says it must run.

``.ci/run`` runs those tests in a venv with the extra and ``RAGMETRICS_REQUIRE_EXTRAS=1``:
there a missing package is an error, not a silent skip. Read at import (collection) time,
before the autouse fixture clears ``RAGMETRICS_*`` variables.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

__all__ = ["require_extra"]


def require_extra(module: str, extra: str) -> ModuleType:
    """Import ``module``; skip the calling test module without it, unless extras are required."""
    if os.environ.get("RAGMETRICS_REQUIRE_EXTRAS") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"needs the [{extra}] extra")
