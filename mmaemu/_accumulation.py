"""How one GEMM output is accumulated over K: chains, slow accumulation, split-K.

This module only decides *which k indices go into which tensor-core chain* and *in which order
the fp32 partial results are added*; the arithmetic of a chain is :mod:`mmaemu.model`'s.

- Fast accumulation (``use_fast_accum=True``): one chain over all of K, from +0.
- Slow accumulation: a new chain (from +0) every :data:`SLOW_CHUNK` = 128 elements of K; the chain
  results are added into an fp32 accumulator, starting at +0, in K order, rounding to nearest even.
- Split-K into S parts: each part runs its own chain (fast) or chains (slow: a new chain every 128
  elements *of the part's own k sequence*, added serially from +0); the part results are then
  combined in fp32, round to nearest even:

  - ``contiguous`` (:attr:`~mmaemu.platforms.SplitFamily.CONTIGUOUS`, 128-wide k-tiles): tiles in contiguous
    runs, part j owns ``[j*C, min((j+1)*C, K))`` with ``C = ceil(ceil(K/128)/S) * 128``; parts added serially.
  - ``serial`` and ``pairwise`` (:attr:`~mmaemu.platforms.SplitFamily.ROUND_ROBIN`, 64-wide k-tiles): tiles
    dealt round-robin, tile t to part ``t mod S``; ``serial`` adds the parts in index order, ``pairwise``
    by the steps of :func:`pairwise_steps`.

  The family's facts (dealing, tile width, combination orders) are :class:`~mmaemu.platforms.SplitFamily`'s;
  this module computes the plan from them.

[Note: empty parts] A part that owns no k-tile contributes +0. In the round-robin family this is
hardware evidence (:attr:`~mmaemu.platforms.SplitFamily.empty_parts_recorded`): the RTX 4060 table splits K = 16 three ways (one 64-wide tile), and recorded
calls with S = 2 and 3 on a single tile (e.g. ``c4.V1/v1_627``, ``c4.V3/v3_1366``, the
``epilogue.*`` records with K = 32) replay with it. In the contiguous family no H100 table row or
recorded call has a part without a tile: there it is modelled the same way and the plan marks it
(:attr:`AccumulationPlan.unverified_empty_parts`) so that the call warns
(:class:`~mmaemu.errors.UnverifiedSplitWarning`). A split with more than
:data:`MAX_EMPTY_PARTS` parts without a tile is refused (no table of either GPU has one).

[Note: contiguous remainder] Which tiles the last contiguous parts own when the tile count is not
a multiple of S is from the H100 table's metadata and 1,040 live calls with K % 128 != 0 (seeds);
the empty-part case above is not covered by them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ._split import Combination, Dealing, Scheme, SplitFamily, SplitK

__all__ = [
    "AccumulationPlan",
    "plan_accumulation",
    "combination_steps",
    "pairwise_steps",
    "flat_combination",
    "combine_parts",
    "SLOW_CHUNK",
    "CONTIGUOUS_TILE",
    "ROUND_ROBIN_TILE",
    "cut_chains",
    "FlatPlan",
    "flatten_plan",
    "k_tiles",
    "MAX_EMPTY_PARTS",
    "empty_part_count",
]

#: Slow accumulation starts a new chain every 128 elements of K (seeds 001, 002; RTX 4060 recordings).
SLOW_CHUNK = 128
#: k-tile width of the contiguous split family (:attr:`mmaemu.platforms.SplitFamily.tile`).
CONTIGUOUS_TILE = SplitFamily.CONTIGUOUS.tile
#: k-tile width of the round-robin split family (:attr:`mmaemu.platforms.SplitFamily.tile`).
ROUND_ROBIN_TILE = SplitFamily.ROUND_ROBIN.tile


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

    @property
    def unverified_empty_parts(self) -> tuple[int, ...]:
        """Empty parts that no hardware evidence covers (a family without recorded empty parts; see the
        module note)."""
        family = self.split.scheme.family
        return () if family is None or family.empty_parts_recorded else self.empty_parts

    def part_sequence(self, part: int) -> Ranges:
        """All k ranges of a part, in the order its chains consume them."""
        return tuple(r for chain in self.parts[part] for r in chain)


def _part_ranges(k: int, split: SplitK) -> list[Ranges]:
    s, family = split.parts, split.scheme.family
    if family is None:
        return [((0, k),) if k else ()]
    tile = family.tile
    tiles = math.ceil(k / tile)
    if family.dealing is Dealing.CONTIGUOUS:
        width = math.ceil(tiles / s) * tile
        out: list[Ranges] = []
        for j in range(s):
            start, stop = j * width, min((j + 1) * width, k)
            out.append(((start, stop),) if start < stop else ())
        return out
    per_part: list[list[tuple[int, int]]] = [[] for _ in range(s)]
    for t in range(tiles):
        per_part[t % s].append((t * tile, min((t + 1) * tile, k)))
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


#: The most parts without a k-tile a split may have: no row of either reference GPU's table has
#: more (RTX 4060: S = 3 on a single 64-wide tile; recorded calls replay with them).
MAX_EMPTY_PARTS = 2


def k_tiles(k: int, scheme: Scheme) -> int:
    """How many k-tiles a reduction of length ``k`` has in a split family (0 for an unsplit call)."""
    family = scheme.family
    return 0 if family is None else -(-k // family.tile)


def empty_part_count(k: int, split: SplitK) -> int:
    """How many parts of ``split`` own no k-tile over a reduction of length ``k`` (computed, not dealt)."""
    family = split.scheme.family
    if family is None:
        return 0
    tiles = -(-k // family.tile)
    if family.dealing is Dealing.CONTIGUOUS:
        per_part = -(-tiles // split.parts)  # tiles per part
        owning = -(-tiles // per_part) if per_part else 0
        return split.parts - owning
    return max(0, split.parts - tiles)


def _check_parts(k: int, split: SplitK) -> None:
    """Refuse a split with more than :data:`MAX_EMPTY_PARTS` parts without a k-tile (K > 0)."""
    empty = empty_part_count(k, split) if k > 0 else 0
    family = split.scheme.family
    if empty > MAX_EMPTY_PARTS and family is not None:
        raise ValueError(
            f"splitk={split!r} over K = {k}: {empty} of the {split.parts} parts would own none of the "
            f"{k_tiles(k, split.scheme)} k-tile(s) of {family.tile}; at most {MAX_EMPTY_PARTS} are accepted (no reference GPU's table has more). "
            "Pass the split the reference GPU used (mmaemu.explain shows it)."
        )


def plan_accumulation(k: int, *, fast: bool, split: SplitK) -> AccumulationPlan:
    """The chains of a GEMM output of reduction length ``k``.

    Example:
        >>> from mmaemu._accumulation import plan_accumulation, SplitK, Scheme
        >>> plan_accumulation(256, fast=False, split=SplitK(1, Scheme.NONE)).parts
        ((((0, 128),), ((128, 256),)),)
        >>> plan_accumulation(256, fast=True, split=SplitK(2, Scheme.SERIAL)).parts
        ((((0, 64), (128, 192)),), (((64, 128), (192, 256)),))
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    _check_parts(k, split)
    ranges = _part_ranges(k, split)
    parts = tuple(_chains(r, fast) for r in ranges)
    empty = tuple(i for i, p in enumerate(parts) if not p) if split.parts > 1 else ()
    return AccumulationPlan(k=k, fast=fast, split=split, parts=parts, empty_parts=empty)


def combination_steps(parts: int, scheme: Scheme) -> tuple[tuple[int, ...], ...]:
    """How the fp32 part results of a split are added: a sequence of steps.

    Each step is ``(j,)`` (part j joins the running total) or ``(a, b)`` (parts a and b are added
    to each other first, and their fp32 sum joins the total). The first step starts the total
    (no addition). Every addition is fp32, round to nearest even.

    - ``serial`` and ``contiguous``: ``(0,), (1,), ..., (S - 1,)``.
    - ``pairwise``: see :func:`pairwise_steps`.

    Example:
        >>> combination_steps(3, Scheme.SERIAL)
        ((0,), (1,), (2,))
    """
    if scheme.combination is Combination.PAIRWISE:
        return pairwise_steps(parts)
    return tuple((j,) for j in range(parts))


def pairwise_steps(parts: int) -> tuple[tuple[int, ...], ...]:
    """The steps of the ``pairwise`` combination (RTX 4060, cuBLASLt customOption 1).

    Part j is paired with part ``j + h``, ``h = ceil(S / 2)``, for ``j < P = floor(S / 2)``; for
    odd S part ``h - 1`` has no partner. The total is built as

    1. ``p[0] + p[h]`` (pair 0);
    2. ``+ p[S - 1]``, then ``+ p[P - 1]``: the last pair joins one part at a time, upper part first;
    3. ``+ (p[j] + p[j + h])`` for ``j = 1 .. P - 2`` in increasing order: each remaining pair is
       summed first and its sum joins the total;
    4. for odd S, ``+ p[h - 1]`` last.

    S = 2: ``p0 + p1``; S = 3: ``(p0 + p2) + p1`` (the seeds' ``(p2 + p0) + p1``);
    S = 8: ``((((p0 + p4) + p7) + p3) + (p1 + p5)) + (p2 + p6)``.

    [Note: pairwise combination] Where the rule comes from. With cuBLASLt's compute-type
    reduction (every pairwise split row of the RTX 4060 table has reduction scheme 2) the parts
    are written to the workspace in fp32 and summed by a separate reduction. A pairwise reduction
    reads slice j together with slice ``j + h`` and adds them before the pair joins the running
    total; the recordings show the last pair handled apart, one slice at a time right after pair
    0 (as a reduction loop whose last iteration is peeled into its prologue would), and the odd
    slice last. That is a plausible mechanism, not an observed kernel: the rule is what the
    recordings decide, and the recordings that decide each of its features are these
    (``recordings/rtx4060`` ids, and the four of ``recordings/rtx4060-pairwise``):

    - pairs summed before they join the total, not added one part at a time: ``tri_big_0_9.1``
      (S = 20: parts 1 and 11 hold +-65536, part 0 holds 2^-12, and the hardware kept 2^-12) and
      ``c5.j5_cublaslt/59``, ``/65`` (S = 10, 11). The serial order fitted on S <= 8
      (0, h, S-1, P-1, 1, 1+h, S-2, P-2, ...) fails exactly these and ``c5.j5_cublaslt/89``.
    - the remaining pairs in increasing j: ``tri_big_0_9.4`` (S = 24) and ``c5.j5_cublaslt/89``
      (S = 15) fail decreasing order.
    - the last pair one part at a time, upper part first, right after pair 0: the ``adv_split``
      records (a large part 0, a nearly opposite part S - 1, small parts between). Summing the
      last pair first fails 24 of them (e.g. ``r4_038``, ``r4_039``, ``r4_040`` at S = 4,
      ``r4b_109``, ``r4_244`` at S = 8); lower part first fails 22 (e.g. ``r4b_112``); joining it
      after the other pairs fails 19 (e.g. ``r4_107``, ``r4_243`` at S = 8 and
      ``c5.v4_torch_demo/16x96x5760/ws32M.float32.slow`` at S = 6).
    - the odd part last: taking it right after pair 0 fails 8 records: ``r4_062``, ``r4_208``,
      ``r4_209``, ``r4b_211`` (S = 5), ``r4_100``, ``r4_237``, ``r4b_240`` (S = 7) and
      ``c5.j5_cublaslt/89`` (S = 15).
    - rejected whole: a halving-stride tree (34 records fail), a power-of-two tree (40), pairs
      (j, j + h) summed and added in order of j (37), two interleaved accumulators (46), parts
      added in index order (57).

    The rule replays all 514 pairwise records (62,836 outputs, S = 2 to 16, 20, 24, 32) with 0
    mismatches. ``python tools/evidence/pairwise_rules.py`` replays every candidate above on every record;
    ``tests/tools/test_pairwise_rules.py`` checks these counts and record ids. For S = 17..19, 21..23 and 25..31 no record exists: the rule is extended to them
    by the same construction, unverified.

    Example:
        >>> pairwise_steps(8)
        ((0,), (4,), (7,), (3,), (1, 5), (2, 6))
        >>> pairwise_steps(5)
        ((0,), (3,), (4,), (1,), (2,))
    """
    if parts < 1:
        raise ValueError("parts must be >= 1")
    h = (parts + 1) // 2
    pairs = parts - h
    steps: list[tuple[int, ...]] = [(0,)]
    if pairs >= 1:
        steps.append((h,))
    if pairs >= 2:
        last = pairs - 1
        steps += [(last + h,), (last,)]
        steps += [(j, j + h) for j in range(1, last)]
    if parts % 2 and parts > 1:
        steps.append((h - 1,))
    return tuple(steps)


def flat_combination(parts: int, scheme: Scheme) -> tuple[list[int], list[int]]:
    """:func:`combination_steps` as two arrays for the kernels: ``order`` and ``role``.

    ``order`` lists every part once, in the order its result is taken; ``role[q]`` says what
    happens to part ``order[q]``'s result: 0 it joins the total (or starts it, at q = 0), 1 it is
    held, 2 it is added to the held result and that sum joins the total.

    Example:
        >>> flat_combination(8, Scheme.PAIRWISE)
        ([0, 4, 7, 3, 1, 5, 2, 6], [0, 0, 0, 0, 1, 2, 1, 2])
    """
    order: list[int] = []
    role: list[int] = []
    for step in combination_steps(parts, scheme):
        order += list(step)
        role += [0] if len(step) == 1 else [1, 2]
    return order, role


@dataclass(frozen=True)
class FlatPlan:
    """An :class:`AccumulationPlan` as flat arrays, the form the compiled kernels take.

    Attributes:
        k_order: int32 ``[k]``, every k index in the order the chains consume them (part by part).
        chain_starts: ``[n_chains + 1]``: chain c covers ``k_order[chain_starts[c]:chain_starts[c + 1]]``.
        chain_part: ``[n_chains]``: the part each chain belongs to.
        part_chains: ``[n_parts + 1]``: part p owns chains ``part_chains[p]:part_chains[p + 1]``.
        order, role: the combination (:func:`flat_combination`).
        identity: ``k_order`` is ``0, 1, ..., k - 1``.
    """

    k_order: torch.Tensor
    chain_starts: list[int]
    chain_part: list[int]
    part_chains: list[int]
    order: list[int]
    role: list[int]
    identity: bool


def flatten_plan(plan: AccumulationPlan) -> FlatPlan:
    """The one flattening of a plan for the backends' kernels (no Python list of every k index).

    Example:
        >>> f = flatten_plan(plan_accumulation(256, fast=True, split=SplitK(2, Scheme.SERIAL)))
        >>> f.k_order[::64].tolist(), f.chain_starts, f.part_chains, f.identity
        ([0, 128, 64, 192], [0, 128, 256], [0, 1, 2], False)
    """
    range_starts: list[int] = []
    range_stops: list[int] = []
    chain_starts = [0]
    chain_part: list[int] = []
    part_chains = [0]
    filled = 0
    for p, chains in enumerate(plan.parts):
        for chain in chains:
            for start, stop in chain:
                range_starts.append(start)
                range_stops.append(stop)
                filled += stop - start
            chain_starts.append(filled)
            chain_part.append(p)
        part_chains.append(len(chain_part))
    # k_order without a tensor per range: position i of range r is starts[r] + (i - offset[r])
    starts = torch.tensor(range_starts, dtype=torch.int64)
    lengths = torch.tensor(range_stops, dtype=torch.int64) - starts
    offsets = torch.cumsum(lengths, 0) - lengths
    k_order = torch.repeat_interleave((starts - offsets).to(torch.int32), lengths)
    k_order += torch.arange(filled, dtype=torch.int32)  # int32: K < 2**31 (4 bytes an index)
    identity = bool(torch.equal(starts, offsets))  # every range starts where the previous one stopped
    order, role = flat_combination(len(plan.parts), plan.split.scheme)
    return FlatPlan(k_order, chain_starts, chain_part, part_chains, order, role, identity)


def combine_parts(partials: list[torch.Tensor], scheme: Scheme) -> torch.Tensor:
    """Combine fp32 part results with fp32 additions (round to nearest even) in the scheme's steps."""
    total: torch.Tensor | None = None
    for step in combination_steps(len(partials), scheme):
        value = partials[step[0]] if len(step) == 1 else partials[step[0]] + partials[step[1]]
        total = value if total is None else total + value
    assert total is not None
    return total
