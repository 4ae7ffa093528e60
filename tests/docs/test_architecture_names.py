"""Every dotted name docs/architecture.md gives in code (``platforms._table.Setting``, ``_host.env_flag``,
``OutFormat.write_nan``, ``mmaemu.kernels._streamk``) names something that exists, so the maintainers' map
cannot drift from the package as the API reference (generated from the docstrings) cannot.

A name is read relative to ``mmaemu`` (``_split.parse_splitk`` is ``mmaemu._split.parse_splitk``); one that
starts with a class (``SplitK.text``) is that class of whichever module of the package defines it; ``torch.``,
``tl.`` (``triton.language``) and ``np.`` names resolve in those libraries. File names (``pyproject.toml``,
``RowwiseScaledMM.cu``) and paths are not dotted names; tests/tools/test_architecture.py checks the modules.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import pkgutil
import re
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import mmaemu

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_FILES = {"py", "toml", "md", "json", "npz", "cu", "cuh", "yml", "yaml", "txt", "so", "cpp", "h", "pth", "whl", "cfg"}
_LIBRARIES = {"torch": "torch", "tl": "triton.language", "triton": "triton", "np": "numpy", "numba": "numba"}


def dotted_names(text: str) -> list[str]:
    """The dotted names of the code spans of ``text`` (a call's arguments dropped: ``f(a, b)`` is ``f``)."""
    names = []
    for span in re.findall(r"`([^`\n]+)`", text):
        span = re.sub(r"\(.*\)$", "", span.strip())
        if _DOTTED.fullmatch(span) and span.rsplit(".", 1)[-1] not in _FILES and "/" not in span:
            names.append(span)
    return sorted(set(names))


@cache
def _modules() -> tuple[ModuleType, ...]:
    found = [mmaemu]
    for info in pkgutil.walk_packages(mmaemu.__path__, "mmaemu."):
        if info.name.startswith("mmaemu.backends._triton._kernels") or info.name.endswith("__main__"):
            continue  # Triton's kernels need Triton; __main__ runs the command line
        try:
            found.append(importlib.import_module(info.name))
        except ImportError:
            continue
    return tuple(found)


def _attribute(owner: Any, name: str) -> Any:
    if hasattr(owner, name):
        return getattr(owner, name)
    if dataclasses.is_dataclass(owner) and name in {f.name for f in dataclasses.fields(owner)}:
        return dataclasses.MISSING  # a field without a class-level default
    members = list(owner) if isinstance(owner, enum.EnumMeta) else []
    if members and all(hasattr(member, name) for member in members):
        return getattr(members[0], name)  # an attribute every member of an enum carries
    raise AttributeError(f"{getattr(owner, '__qualname__', owner)!r} has no {name!r}")


def resolve(name: str) -> Any:
    """The object ``name`` names (see the module docstring); AttributeError or ImportError when none."""
    parts = name.split(".")
    if parts[0] in _LIBRARIES:
        module, rest = importlib.import_module(_LIBRARIES[parts[0]]), parts[1:]
    else:
        parts = parts[1:] if parts[0] == "mmaemu" else parts
        module, rest = mmaemu, parts
        for i in range(len(parts), 0, -1):  # the longest prefix that is a module of the package
            try:
                module, rest = importlib.import_module("mmaemu." + ".".join(parts[:i])), parts[i:]
                break
            except ImportError:
                continue
        if module is mmaemu and not hasattr(mmaemu, parts[0]):  # a class of some module: OutFormat.write_nan
            homes = [m for m in _modules() if getattr(getattr(m, parts[0], None), "__module__", None) == m.__name__]
            if not homes:
                raise AttributeError(f"no module of mmaemu defines {parts[0]!r}")
            module, rest = homes[0], parts
    obj: Any = module
    for part in rest:
        obj = _attribute(obj, part)
    return obj


NAMES = dotted_names(PAGE.read_text())


def test_the_page_names_things() -> None:
    assert len(NAMES) >= 40, NAMES


@pytest.mark.parametrize("name", NAMES)
def test_every_dotted_name_resolves(name: str) -> None:
    resolve(name)


def test_a_stale_name_fails() -> None:
    """The check itself: a module, function or attribute that does not exist fails."""
    for stale in ("host.env_flag", "backends._dispatch.EXECUTORS", "split.no_such_function", "NoSuchClass.attr"):
        with pytest.raises((AttributeError, ImportError)):
            resolve(stale)
    assert resolve("_host.env_flag") and resolve("formats.OutFormat.write_nan") and resolve("tl.dot")


def _cited_in_the_source() -> list[tuple[str, str]]:
    """``(file, name)`` of every absolute name a docstring or comment of the package cites with a Sphinx role."""
    cited = []
    for path in sorted((ROOT / "mmaemu").rglob("*.py")):
        for match in re.finditer(r":(?:func|meth|class|mod|data|attr|exc|obj):`~?(mmaemu\.[\w.]+)`", path.read_text()):
            cited.append((str(path.relative_to(ROOT)), match.group(1)))
    return cited


def test_every_name_the_source_cites_resolves() -> None:
    """The docstrings the API reference is generated from cite other code by name (``:data:`mmaemu.x.Y```):
    each such name exists."""
    cited = _cited_in_the_source()
    assert len(cited) >= 100
    stale = []
    for where, name in cited:
        try:
            resolve(name)
        except (AttributeError, ImportError) as exc:
            stale.append(f"{where}: {name} ({exc})")
    assert stale == []
