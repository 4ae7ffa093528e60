"""How one GEMM output is accumulated over K: chains, slow accumulation, split-K.

This module only decides *which k indices go into which tensor-core chain* and *in which order
the fp32 partial results are added*; the arithmetic of a chain is :mod:`mmaemu.model`'s.

- Fast accumulation (``use_fast_accum=True``): one chain over all of K, from +0.
- Slow accumulation: a new chain (from +0) every :data:`SLOW_CHUNK` = 128 elements of K; the chain
  results are added into an fp32 accumulator, starting at +0, in K order, rounding to nearest even.
- Split-K into S parts: each part runs its own chain (fast) or chains (slow: a new chain every 128
  elements *of the part's own k sequence*, added serially from +0); the part results are then
  combined in fp32, round to nearest even:

  - ``contiguous`` (the H100 PCIe family): 128-wide k-tiles in contiguous runs, part j owns
    ``[j*C, min((j+1)*C, K))`` with ``C = ceil(ceil(K/128)/S) * 128``; parts added serially.
  - ``serial`` and ``pairwise`` (the RTX 4060 family): 64-wide k-tiles dealt round-robin, tile t to
    part ``t mod S``; ``serial`` adds the parts in index order, ``pairwise`` in the order of
    :func:`pairwise_order`.

[Note: empty parts] A part that owns no k-tile (possible only for ``contiguous`` when
``ceil(K/128)`` is not a multiple of S with a large remainder, or for round-robin when S exceeds the
number of tiles) has never been observed on hardware. It is modelled as contributing +0 and the
plan records it so that the call warns (:class:`~mmaemu.errors.UnverifiedSplitWarning`).

[Note: contiguous remainder] Which tiles the last contiguous parts own when the tile count is not
a multiple of S is from the H100 table's metadata and 1,040 live calls with K % 128 != 0 (seeds);
the empty-part case above is not covered by them.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Union

import torch

__all__ = [
    "Scheme",
    "SplitK",
    "AccumulationPlan",
    "plan_accumulation",
    "pairwise_order",
    "combine_parts",
    "SLOW_CHUNK",
    "CONTIGUOUS_TILE",
    "ROUND_ROBIN_TILE",
    "SplitKArg",
    "cut_chains",
]

#: Slow accumulation starts a new chain every 128 elements of K (seeds 001, 002; RTX 4060 recordings).
SLOW_CHUNK = 128
#: k-tile width of the contiguous (H100 PCIe) split family.
CONTIGUOUS_TILE = 128
#: k-tile width of the round-robin (RTX 4060) split family.
ROUND_ROBIN_TILE = 64


class Scheme(enum.Enum):
    """How K is dealt to split parts and how their partial sums are combined."""

    NONE = "none"
    CONTIGUOUS = "contiguous"
    SERIAL = "serial"
    PAIRWISE = "pairwise"


SplitKArg = Union[int, tuple[int, str], tuple[int, "Scheme"], "SplitK"]


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
                    raise ValueError(f"splitk={value!r}: unknown scheme; accepted: {accepted}") from None
            if not isinstance(parts, int) or isinstance(parts, bool) or parts < 1:
                raise ValueError(f"splitk={value!r}: S must be a positive int; accepted: {accepted}")
            if parts == 1:
                return SplitK(1, Scheme.NONE)
            if scheme is Scheme.NONE:
                raise ValueError(f"splitk={value!r}: S > 1 needs a scheme; accepted: {accepted}")
            return SplitK(parts, scheme)
        raise ValueError(f"splitk={value!r} is not a split-K form; accepted: {accepted}")

    def __repr__(self) -> str:
        return "SplitK(1)" if self.parts == 1 else f"SplitK({self.parts}, {self.scheme.value!r})"


Ranges = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class AccumulationPlan:
    """The chains of one GEMM output and the order their results are added.

    Attributes:
        k: the reduction length.
        fast: fast accumulation (one chain per part) or slow (a chain per 128 elements).
        split: the split-K form.
        parts: per part, its chains; per chain, the k ranges ``(start, stop)`` it runs over, in order.
        empty_parts: indices of parts that own no k index (they contribute +0).
    """

    k: int
    fast: bool
    split: SplitK
    parts: tuple[tuple[Ranges, ...], ...]
    empty_parts: tuple[int, ...]

    def part_sequence(self, part: int) -> Ranges:
        """All k ranges of a part, in the order its chains consume them."""
        return tuple(r for chain in self.parts[part] for r in chain)


def _part_ranges(k: int, split: SplitK) -> list[Ranges]:
    s = split.parts
    if split.scheme is Scheme.NONE:
        return [((0, k),) if k else ()]
    if split.scheme is Scheme.CONTIGUOUS:
        tiles = math.ceil(k / CONTIGUOUS_TILE)
        width = math.ceil(tiles / s) * CONTIGUOUS_TILE
        out: list[Ranges] = []
        for j in range(s):
            start, stop = j * width, min((j + 1) * width, k)
            out.append(((start, stop),) if start < stop else ())
        return out
    tiles = math.ceil(k / ROUND_ROBIN_TILE)
    per_part: list[list[tuple[int, int]]] = [[] for _ in range(s)]
    for t in range(tiles):
        per_part[t % s].append((t * ROUND_ROBIN_TILE, min((t + 1) * ROUND_ROBIN_TILE, k)))
    return [tuple(p) for p in per_part]


def cut_chains(sequence: Ranges, chunk: int) -> tuple[Ranges, ...]:
    """Cut a k sequence into chains of ``chunk`` elements in sequence order (the last may be shorter).

    Example:
        >>> cut_chains(((0, 100), (200, 260)), 128)
        (((0, 100), (200, 228)), ((228, 260),))
    """
    chains: list[Ranges] = []
    current: list[tuple[int, int]] = []
    filled = 0
    for start, stop in sequence:
        while start < stop:
            take = min(stop - start, chunk - filled)
            current.append((start, start + take))
            start += take
            filled += take
            if filled == chunk:
                chains.append(tuple(current))
                current, filled = [], 0
    if current:
        chains.append(tuple(current))
    return tuple(chains)


def _chains(sequence: Ranges, fast: bool) -> tuple[Ranges, ...]:
    """Cut a part's k sequence into chains: one (fast) or one per 128 elements (slow)."""
    if not sequence:
        return ()
    if fast:
        return (sequence,)
    return cut_chains(sequence, SLOW_CHUNK)


def plan_accumulation(k: int, *, fast: bool, split: SplitK) -> AccumulationPlan:
    """The chains of a GEMM output of reduction length ``k``.

    Example:
        >>> from mmaemu.accumulation import plan_accumulation, SplitK, Scheme
        >>> plan_accumulation(256, fast=False, split=SplitK(1, Scheme.NONE)).parts
        ((((0, 128),), ((128, 256),)),)
        >>> plan_accumulation(256, fast=True, split=SplitK(2, Scheme.SERIAL)).parts
        ((((0, 64), (128, 192)),), (((64, 128), (192, 256)),))
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    ranges = _part_ranges(k, split)
    parts = tuple(_chains(r, fast) for r in ranges)
    empty = tuple(i for i, p in enumerate(parts) if not p) if split.parts > 1 else ()
    return AccumulationPlan(k=k, fast=fast, split=split, parts=parts, empty_parts=empty)


def pairwise_order(parts: int) -> list[int]:
    """The order in which the ``pairwise`` scheme adds its S part results (serially, in fp32).

    Pair part j with part ``j + h`` (``h = ceil(S / 2)``), giving ``floor(S / 2)`` pairs; take the
    pairs alternately from the front (in order ``j, j + h``) and from the back (reversed,
    ``j + h, j``); for odd S the unpaired part ``h - 1`` comes last. S = 3: ``0, 2, 1``, the
    ``(p2 + p0) + p1`` of the seeds; S = 8: ``0, 4, 7, 3, 1, 5, 6, 2``.

    [Note: pairwise order] Fitted to the RTX 4060 recordings (all 501 pairwise outputs, S = 2 to
    16, 24 and 32, replay with 0 mismatches; the rule was found on S <= 8 and then held for every
    larger S). The halving-stride tree that fits S = 3 fails 33 of them. For large S the
    recordings constrain mainly the first additions, so the order of the later ones is the
    simplest rule consistent with the data, not an observed fact.

    Example:
        >>> pairwise_order(6)
        [0, 3, 5, 2, 1, 4]
    """
    h = (parts + 1) // 2
    pairs = parts - h
    order: list[int] = []
    front, back = 0, pairs - 1
    take_front = True
    while front <= back:
        if take_front:
            order += [front, front + h]
            front += 1
        else:
            order += [back + h, back]
            back -= 1
        take_front = not take_front
    if parts % 2:
        order.append(h - 1)
    return order


def combine_parts(partials: list[torch.Tensor], scheme: Scheme) -> torch.Tensor:
    """Combine fp32 part results with fp32 additions (round to nearest even) in the scheme's order."""
    order = pairwise_order(len(partials)) if scheme is Scheme.PAIRWISE else range(len(partials))
    total: torch.Tensor | None = None
    for j in order:
        total = partials[j] if total is None else total + partials[j]
    assert total is not None
    return total
