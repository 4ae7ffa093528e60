"""A griffe extension for the API page (mkdocs.yml): the package's docstrings cite code with Sphinx roles
(``:func:`mmaemu.accumulate```, ``:class:`~mmaemu.kernels._rowwise.KernelPlan```), which Markdown would show
verbatim. Each becomes inline code: the whole dotted name, or its last part where the role says ``~``.
RST's double backticks become single ones. Nothing else of a docstring changes."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|meth|class|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")


def markdown(text: str) -> str:
    """``text`` with Sphinx roles and RST literals written as Markdown inline code."""
    text = _ROLE.sub(lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`", text)
    return re.sub(r"``([^`]+?)``", r"`\1`", text)


class SphinxRoles(griffe.Extension):
    """Rewrite every loaded object's docstring with :func:`markdown`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
