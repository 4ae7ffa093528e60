"""The ``splitk=`` argument: the split-K schemes, an explicit split (:class:`SplitK`), and the one
normaliser and text form of the argument that ``scaled_mm``, ``explain``, ``emulate``, the operators,
the modules and the command line share.

Which k each part owns and how the part results are added is :mod:`mmaemu.accumulation`'s; which
split a platform chooses is :mod:`mmaemu.platforms.splitk`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

from ._enums import TextEnum
from .errors import UnknownNameError

__all__ = ["AUTO", "Scheme", "SplitK", "SplitKArg", "SplitKSpec", "parse_splitk", "splitk_from_text", "splitk_text"]


class Scheme(TextEnum):
    """How K is dealt to split parts and how their partial sums are combined.

    A string enum: ``Scheme.PAIRWISE == "pairwise"``, so code that compared the text keeps working;
    ``str()`` and ``print`` give the value.
    """

    NONE = "none"
    CONTIGUOUS = "contiguous"
    SERIAL = "serial"
    PAIRWISE = "pairwise"


#: An explicit split: ``1``, ``(S, scheme)`` with the scheme as text or :class:`Scheme`, or a :class:`SplitK`.
SplitKArg = Union[int, tuple[int, str], tuple[int, "Scheme"], "SplitK"]
#: What ``splitk=`` takes: an explicit split, or ``"auto"`` (the reference platform's decision).
SplitKSpec = Union[SplitKArg, Literal["auto"]]
#: ``splitk="auto"``.
AUTO: Literal["auto"] = "auto"
_ACCEPTED = "'auto', 1, (S, 'contiguous'), (S, 'serial') or (S, 'pairwise')"


@dataclass(frozen=True)
class SplitK:
    """An explicit split-K form: ``parts`` (S) and the scheme.

    ``SplitK(1, Scheme.NONE)`` is the unsplit call. S > 1 needs a scheme other than NONE.
    """

    parts: int
    scheme: Scheme

    def __post_init__(self) -> None:
        if not isinstance(self.parts, int) or isinstance(self.parts, bool) or self.parts < 1:
            raise ValueError(f"split-K parts must be a positive int, got {self.parts!r}")
        if not isinstance(self.scheme, Scheme):
            raise TypeError("scheme must be a Scheme")
        if (self.parts == 1) != (self.scheme is Scheme.NONE):
            raise ValueError(
                f"splitk=({self.parts}, {self.scheme.value!r}): S = 1 goes with scheme 'none' "
                "and S > 1 with 'contiguous', 'serial' or 'pairwise'"
            )

    @staticmethod
    def parse(value: SplitKArg) -> SplitK:
        """Accept ``1``, ``(S, "contiguous" | "serial" | "pairwise")`` or a :class:`SplitK`.

        ``(1, scheme)`` is accepted as the unsplit call.

        Raises:
            ValueError: for anything else, listing the accepted forms.
        """
        if isinstance(value, SplitK):
            return value
        accepted = "1, (S, 'contiguous'), (S, 'serial') or (S, 'pairwise') with S >= 1"
        if isinstance(value, int) and not isinstance(value, bool):
            if value == 1:
                return SplitK(1, Scheme.NONE)
            raise ValueError(f"splitk={value!r}: an integer splitk must be 1; accepted: {accepted}")
        if isinstance(value, (tuple, list)) and len(value) == 2:
            parts, scheme = value
            if isinstance(scheme, str):
                try:
                    scheme = Scheme(scheme)
                except ValueError:
                    raise UnknownNameError(f"splitk={value!r}: unknown scheme; accepted: {accepted}") from None
            if not isinstance(parts, int) or isinstance(parts, bool) or parts < 1:
                raise ValueError(f"splitk={value!r}: S must be a positive int; accepted: {accepted}")
            if parts == 1:
                return SplitK(1, Scheme.NONE)
            if scheme is Scheme.NONE:
                raise ValueError(f"splitk={value!r}: S > 1 needs a scheme; accepted: {accepted}")
            return SplitK(parts, scheme)
        raise ValueError(f"splitk={value!r} is not a split-K form; accepted: {accepted}")

    @property
    def text(self) -> str:
        """The split's one text form: ``"1"`` or ``"S,scheme"`` (command line, operator schema, reports)."""
        return "1" if self.parts == 1 else f"{self.parts},{self.scheme.value}"

    def __repr__(self) -> str:
        return "SplitK(1)" if self.parts == 1 else f"SplitK({self.parts}, {self.scheme.value!r})"


def parse_splitk(value: object) -> SplitK | Literal["auto"]:
    """The one normaliser of a ``splitk=`` argument: ``"auto"``, or the explicit :class:`SplitK`.

    Raises:
        ValueError: anything but ``"auto"`` or an explicit split (:meth:`SplitK.parse`); the message
            lists the accepted values.
    """
    if isinstance(value, str):
        if value == AUTO:
            return AUTO
        raise ValueError(f"splitk={value!r}: accepted values are {_ACCEPTED}")
    return SplitK.parse(value)  # type: ignore[arg-type]  # anything else raises ValueError there


def splitk_text(value: object) -> str:
    """A ``splitk=`` argument as text: ``"auto"``, ``"1"`` or ``"S,scheme"`` (see :func:`splitk_from_text`).

    Raises:
        ValueError: an invalid ``splitk`` (:func:`parse_splitk`).
    """
    split = parse_splitk(value)
    return AUTO if isinstance(split, str) else split.text


def splitk_from_text(text: str) -> SplitK | Literal["auto"]:
    """The inverse of :func:`splitk_text` (surrounding spaces ignored): ``"auto"``, ``"1"`` or ``"S,scheme"``.

    Raises:
        ValueError: any other text; the message lists the accepted forms.
    """
    text = text.strip()
    if text == AUTO:
        return AUTO
    fields = [f.strip() for f in text.split(",")]
    try:
        if len(fields) == 1:
            return SplitK.parse(int(fields[0]))
        if len(fields) == 2:
            return SplitK.parse((int(fields[0]), fields[1].lower()))
    except ValueError as exc:
        if "accepted" in str(exc):
            raise ValueError(f"{text!r}: {exc} (as text: auto, 1 or S,scheme)") from None
    raise ValueError(f"{text!r} is not a split-K form; as text: auto, 1 or S,scheme (e.g. 4,pairwise)")
