"""The one base of mmaemu's string enums."""

from __future__ import annotations

import enum

__all__: list[str] = []


class TextEnum(str, enum.Enum):
    """A string enum that prints as its value: ``Scheme.PAIRWISE == "pairwise"`` and ``str()``,
    ``print`` and f-strings give ``"pairwise"`` (what :class:`enum.StrEnum` does from Python 3.11;
    mmaemu supports 3.10)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
