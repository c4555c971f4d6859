"""A griffe extension for the API reference: Sphinx roles in docstrings read as inline code.

The package's docstrings name other objects the Sphinx way (``:class:`JsonlSink```,
``:func:`check_judge```); mkdocstrings reads Google-style Markdown, where those roles would
show as literal text. This turns each into plain inline code (`` `JsonlSink` ``) when griffe
loads the docstring, so the sources stay as they are.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj):`~?([^`]+)`")


class SphinxRolesAsCode(griffe.Extension):
    """Rewrite ``:role:`name``` to `` `name` `` in every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:  # noqa: ARG002
        """Rewrite the docstring of each object as it is created."""
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(r"`\1`", obj.docstring.value)
