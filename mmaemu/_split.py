"""The ``splitk=`` argument and the split families: the schemes (:class:`Scheme`), how each family deals
K and combines its parts (:class:`SplitFamily`), an explicit split (:class:`SplitK`), and the one
normaliser and text form of the argument that ``scaled_mm``, ``explain``, ``emulate``, the operators,
the modules and the command line share.

A split family is what a GPU's cuBLAS does with a split: how it deals the k-tiles of K to the parts
(:class:`Dealing`, with the tile width), which combination orders (:class:`Combination`) its parts may be
added in, and which order each cuBLASLt ``customOption`` selects. A :class:`Scheme` is one family with
one combination order. :mod:`mmaemu._accumulation` computes the plan from these facts (which k each part
owns, the steps of each combination); which split a platform chooses is :mod:`mmaemu.platforms._splitk`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, Union

from ._enums import TextEnum
from .errors import UnknownNameError

__all__ = [
    "AUTO",
    "Combination",
    "Dealing",
    "Scheme",
    "SplitFamily",
    "SplitK",
    "SplitKArg",
    "SplitKSpec",
    "parse_splitk",
    "splitk_from_text",
    "splitk_text",
]


class Dealing(TextEnum):
    """How a split family deals the k-tiles of K to the S parts.

    - ``CONTIGUOUS``: part j owns the run of tiles ``[j*C, (j+1)*C)``, ``C = ceil(tiles / S)`` tiles (the
      last parts get the remainder or nothing);
    - ``ROUND_ROBIN``: tile t goes to part ``t mod S``.
    """

    CONTIGUOUS = "contiguous"
    ROUND_ROBIN = "round-robin"


class Combination(TextEnum):
    """The order in which the fp32 part results of a split are added (every addition fp32, round to nearest
    even): ``SERIAL`` in part order, ``PAIRWISE`` by :func:`mmaemu._accumulation.pairwise_steps`."""

    SERIAL = "serial"
    PAIRWISE = "pairwise"


class Scheme(TextEnum):
    """A split family and one of its combination orders (``NONE``: an unsplit call).

    - ``CONTIGUOUS``: the contiguous family (:attr:`SplitFamily.CONTIGUOUS`), parts added serially;
    - ``SERIAL`` and ``PAIRWISE``: the round-robin family (:attr:`SplitFamily.ROUND_ROBIN`), parts added
      serially or pairwise.

    A string enum: ``Scheme.PAIRWISE == "pairwise"``, so code that compared the text keeps working;
    ``str()`` and ``print`` give the value.
    """

    combination: Combination

    def __new__(cls, value: str, combination: Combination = Combination.SERIAL) -> Scheme:
        member = str.__new__(cls, value)
        member._value_ = value
        member.combination = combination
        return member

    NONE = ("none", Combination.SERIAL)
    CONTIGUOUS = ("contiguous", Combination.SERIAL)
    SERIAL = ("serial", Combination.SERIAL)
    PAIRWISE = ("pairwise", Combination.PAIRWISE)

    @property
    def family(self) -> SplitFamily | None:
        """The split family whose scheme this is (None for ``NONE``)."""
        return next((f for f in SplitFamily if self in f.schemes), None)


class SplitFamily(TextEnum):
    """How a platform's cuBLAS deals K to split parts and combines them: the one home of a family's facts.

    Attributes:
        dealing: how the k-tiles are dealt to the parts.
        tile: the k-tile width (elements of K).
        schemes: the schemes its cuBLAS uses, the one every customOption not in ``custom_schemes`` selects
            first.
        custom_schemes: the customOptions that select another scheme than ``schemes[0]``, and that scheme.
        replayed_custom: the customOptions whose split calls were replayed on the family's GPU (a table
            row with another customOption is unverified).
        empty_parts_recorded: whether a split with parts that own no k-tile was replayed on hardware.
        description: the family in words.

    A string enum (``SplitFamily.ROUND_ROBIN == "round-robin"``, the command line's spelling).

    [Note: split families] The contiguous family is the H100 PCIe's: contiguous runs of 128-wide k-tiles,
    parts added serially, whatever the customOption; the split calls replayed cover customOptions 0 to 3
    (seeds 002 and 004: "Live split calls cover customOption 0 to 3"; none ran with 4 to 7), and no table
    row or recorded call has a part without a tile (``[Note: empty parts]`` in :mod:`mmaemu._accumulation`).
    The round-robin family is the RTX 4060's: 64-wide k-tiles dealt round-robin, parts added serially
    (customOption 0, 2) or pairwise (customOption 1) (``recordings/rtx4060``: ``c5.v0_reduce_probes``,
    ``c5.v2_forced_probes`` with all three customOptions; seeds 002); its table splits K = 16 three
    ways, and those calls replay with the empty parts as +0.
    """

    dealing: Dealing
    tile: int
    schemes: tuple[Scheme, ...]
    custom_schemes: Mapping[int, Scheme]
    replayed_custom: frozenset[int]
    empty_parts_recorded: bool
    description: str

    def __new__(cls, value: str, dealing: Dealing, tile: int, schemes: tuple[Scheme, ...],
                custom_schemes: tuple[tuple[int, Scheme], ...], replayed_custom: frozenset[int],
                empty_parts_recorded: bool, description: str) -> SplitFamily:
        member = str.__new__(cls, value)
        member._value_ = value
        member.dealing, member.tile, member.schemes = dealing, tile, schemes
        member.custom_schemes = MappingProxyType(dict(custom_schemes))
        member.replayed_custom, member.empty_parts_recorded = replayed_custom, empty_parts_recorded
        member.description = description
        return member

    #: value, dealing, tile; schemes, other customOptions; customOptions replayed, empty parts recorded; words
    CONTIGUOUS = ("contiguous", Dealing.CONTIGUOUS, 128,
                  (Scheme.CONTIGUOUS,), (),
                  frozenset(range(4)), False,
                  "contiguous 128-wide k-tiles, serial combination")
    ROUND_ROBIN = ("round-robin", Dealing.ROUND_ROBIN, 64,
                   (Scheme.SERIAL, Scheme.PAIRWISE), ((1, Scheme.PAIRWISE),),
                   frozenset(range(3)), True,
                   "round-robin 64-wide k-tiles, serial or pairwise combination")

    def scheme_for(self, parts: int, custom: int) -> Scheme:
        """The scheme of a cuBLASLt split decision (S and customOption) in this family: ``NONE`` for S = 1.

        Example:
            >>> SplitFamily.ROUND_ROBIN.scheme_for(4, 1), SplitFamily.CONTIGUOUS.scheme_for(4, 1)
            (<Scheme.PAIRWISE: 'pairwise'>, <Scheme.CONTIGUOUS: 'contiguous'>)
        """
        if parts == 1:
            return Scheme.NONE
        return self.custom_schemes.get(custom, self.schemes[0])


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
