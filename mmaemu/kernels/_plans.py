"""The accumulation plans of the kernel models: which k go into which tensor-core chain of one block.

Every plan here is an :class:`~mmaemu._accumulation.AccumulationPlan` of one part (the block's own
accumulator), so every backend computes it through the dispatcher (:func:`mmaemu.backends.run`) and
returns the same bits. A plan covers the block's range of K, numbered from 0 (the caller passes that range's columns of the
operands: every backend takes plans that cover all of their K); its chains list the k that hold operands (the kernels' zero padding is left out: see [Note: padding]).

[Note: padding] The kernels pad K with zeros: sm_90 to a multiple of 128 at the end (TMA's
out-of-bounds fill), sm_89 inside the partial k-tile ([Note: sm_89 staged accumulation]). A padded
position is a zero product, and a block of zero products leaves its chain unchanged under the hopper
and ada presets: the incoming accumulator is a previous block's result (or +0), which already has at
most F + 1 significant bits below its own exponent, so aligning it to the block's largest exponent
(its own) and truncating the sum to F fraction bits keep it exactly. Since K % 16 == 0 (torch's check)
the padding fills whole 16- and 32-element blocks, so leaving it out changes no block boundary.

[Note: sm_89 staged accumulation] CUTLASS 2.x's multistage main loop with ``is_sm89_staged_policy_v``
(FP8 x FP8, instruction 16 x 8 x 32, ``OpMultiplyAdd``: v3.8.0 ``arch/mma_sm89.h`` 74-97) multiplies warp
step 0 of each 64-wide k-tile into a temporary accumulator, adds the temporary into the block's
accumulator and clears it, then multiplies warp step 1 into the fresh temporary; after the loop the
temporary is added once more (``mma_multistage.h`` ``mac_loop_iter``, ``gemm_iters``; SASS of cubin 982:
``QMMA ... R4, ..., RZ`` then ``FADD R199, R4, R199``). With the k-tile halves ``h0, h1, ..., h(2n-1)`` of a
range the chains are ``{h0}, {h1, h2}, {h3, h4}, ..., {h(2n-1)}``, each from +0, added in order into an
accumulator that starts at +0 (``accumulator_tile.clear()``). The k-tiles themselves come from
``PredicatedTileAccessIterator`` (``predicated_tile_access_iterator.h`` 186-221, 511-560), which reads
the *partial* k-tile first: for a range ``[start, stop)`` its first tile holds the ``(stop - start) % 64``
(or 64) elements from ``start``, zero-padded at its end, and the full tiles follow. Only a range that
ends at K with K % 64 != 0 has a partial tile (the stream-K ranges are whole iterations otherwise), so
the chains of a data-parallel tile or of a finishing peer start at ``start``, ``start + r``, ... with
``r`` the residue. Fast accumulation (``OpMultiplyAddFastAccum``) is one chain over the range.
"""

from __future__ import annotations

from .._accumulation import SLOW_CHUNK, AccumulationPlan, Ranges, cut_chains, plan_accumulation
from .._split import Scheme, SplitK
from ._model import Accumulation, KernelModel

__all__ = ["block_plan", "staged_chains"]

_UNSPLIT = SplitK(1, Scheme.NONE)
_K_TILE = 64
_HALF = 32


def _tiles(start: int, stop: int, residue_first: bool) -> list[tuple[int, int]]:
    """The k-tiles of ``[start, stop)`` as element ranges: the partial one first or last."""
    residue = (stop - start) % _K_TILE or _K_TILE
    if not residue_first:
        return [(s, min(s + _K_TILE, stop)) for s in range(start, stop, _K_TILE)]
    tiles = [(start, start + residue)]
    tiles += [(s, s + _K_TILE) for s in range(start + residue, stop, _K_TILE)]
    return tiles


def staged_chains(start: int, stop: int, *, residue_first: bool = True) -> tuple[Ranges, ...]:
    """The chains of CUTLASS's staged accumulation over ``[start, stop)`` ([Note: sm_89 staged accumulation]).

    Example:
        >>> staged_chains(0, 80)       # the 16-element partial tile first
        (((0, 16),), ((16, 48),), ((48, 80),))
        >>> staged_chains(0, 80, residue_first=False)
        (((0, 32),), ((32, 80),))
    """
    halves: list[tuple[int, int]] = []
    for lo, hi in _tiles(start, stop, residue_first):
        halves += [(lo, min(lo + _HALF, hi)), (min(lo + _HALF, hi), hi)]  # the second may be all padding
    groups = [halves[:1]] + [halves[i:i + 2] for i in range(1, len(halves) - 1, 2)] + [halves[-1:]]
    chains = []
    for group in groups:
        ranges = tuple((lo, hi) for lo, hi in group if hi > lo)
        merged: list[tuple[int, int]] = []
        for lo, hi in ranges:
            if merged and merged[-1][1] == lo:
                merged[-1] = (merged[-1][0], hi)
            else:
                merged.append((lo, hi))
        if merged:
            chains.append(tuple(merged))
    return tuple(chains)


def block_plan(model: KernelModel, length: int, fast: bool) -> AccumulationPlan:
    """The plan of one block's accumulator over a K range of ``length`` elements, numbered from 0 (the caller
    passes the operands' columns of the range: every backend takes plans that cover their whole K).

    Fast accumulation: one chain. Slow: the model's :class:`~mmaemu.kernels._model.Accumulation` (a chain
    per ``promotion`` elements, or staged, [Note: sm_89 staged accumulation]).
    """
    if fast or (model.accumulation is Accumulation.PROMOTED and model.promotion == SLOW_CHUNK):
        return plan_accumulation(length, fast=fast, split=_UNSPLIT)  # cuBLAS's own plan: the same chains
    if model.accumulation is Accumulation.PROMOTED:
        chains = cut_chains(((0, length),), model.promotion)
    else:
        chains = staged_chains(0, length, residue_first=model.accumulation is Accumulation.STAGED)
    return AccumulationPlan(k=length, fast=False, split=_UNSPLIT, parts=(chains,), empty_parts=())
