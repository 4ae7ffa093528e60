"""docs/api.md is generated from the docstrings (mkdocstrings ``:::`` directives; ``mkdocs build --strict`` in CI
renders it and fails on a name that no longer exists), and it covers the whole public surface: every name of
``mmaemu.__all__`` has a directive (a module through directives of its members)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import mmaemu

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "api.md"


def directives() -> list[str]:
    return re.findall(r"^::: ([\w.]+)\s*$", PAGE.read_text(), flags=re.M)


def _object(path: str) -> object:
    """What a directive's path names, as mkdocstrings reads it: the longest importable module, then attributes."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(path)


def test_every_directive_names_something() -> None:
    found = directives()
    assert len(found) >= 20
    for path in found:
        _object(path)


def test_every_public_name_is_in_the_reference() -> None:
    documented = directives()
    objects = {id(_object(p)) for p in documented}
    missing = []
    for name in mmaemu.__all__:
        value = getattr(mmaemu, name)
        if name.startswith("__"):
            continue
        if inspect.ismodule(value):
            if not any(p == value.__name__ or p.startswith(value.__name__ + ".") for p in documented):
                missing.append(name)
        elif getattr(value, "__module__", None) == "mmaemu.errors":
            if "mmaemu.errors" not in documented:
                missing.append(name)
        elif id(value) not in objects:
            missing.append(name)
    assert missing == [], f"add a '::: mmaemu.NAME' directive to docs/api.md for {missing}"
