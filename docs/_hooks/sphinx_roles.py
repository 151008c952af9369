"""Griffe extension: Sphinx cross-reference roles in docstrings read as code.

flowsim's numpydoc docstrings refer to other objects the Sphinx way (``:func:`load_network```,
``:class:`~flowsim.workload.roofline.Roofline```). mkdocstrings does not know these roles;
this extension rewrites each into inline code before the docstring is parsed (a ``~`` keeps
the last component only, as Sphinx shows it), so the API reference reads cleanly.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|data|exc|obj|const|ref|term):`([^`]+)`")


def _code(match: re.Match[str]) -> str:
    target = match.group(1).strip()
    if target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return f"`{target}`"


def plain_roles(text: str) -> str:
    """``text`` with every Sphinx role replaced by inline code."""
    return ROLE.sub(_code, text)


class SphinxRoles(griffe.Extension):
    """Rewrite the roles of every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(obj.docstring.value)
