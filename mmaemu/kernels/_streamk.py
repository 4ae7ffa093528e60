"""CUTLASS 2.x stream-K: which thread blocks accumulate which K iterations of which output tile.

[Note: stream-K] ``ThreadblockSwizzleStreamK`` (CUTLASS v3.8.0
include/cutlass/gemm/threadblock/threadblock_swizzle_streamk.h: the heuristic's constants 87-101,
``get_sk_blocks`` 244-299, ``get_blocks`` 303-397, the constructor 400-604, ``get_tile_offset`` 661-690,
``get_sk_block_idx`` 733-751, ``get_iter_extents`` 756-778) is a host function of the problem
(M, N, K), the tile (64 x 128 x 64 for the sm_89 row-wise kernel), the SM count and the occupancy
(``device_sms``, ``sm_occupancy``; ``avail_sms`` = -1 becomes ``device_sms``), evaluated once per call;
:func:`mapping` transcribes it, its float heuristics in float32 as the C++ evaluates them (the
left-to-right products rounded to float, the cost truncated to int, ties to the larger trial). The
output tiles with linear index below ``sk_tiles`` (in ``get_tile_offset``'s raster: row-major, or
column-major when there are fewer tile rows than columns, or 8 x 4 cohorts) are *stream-K tiles*:
block ``b < sk_blocks`` owns the global iterations ``get_iter_extents(b)`` and works on the tiles they
fall into, last tile first (``gemm_universal_with_visitor_streamk.h`` ``gemm()``, ``init_sk_tile_work``);
every other tile is computed whole by one block. The blocks of a stream-K tile (its *peers*) in block
order hold ascending K ranges. Their partial sums are combined (``process_tile``) either by a separate
reduction, ``((P0 + P1) + P2) + ...`` in fp32 (``epilogue_base_streamk.h`` 119-149, chosen when
``sk_waves < sm_occupancy`` and ``sk_blocks > 2 * sk_tiles``), or through the turnstile: P0 stored, each
middle peer in order adding its partial with ``atomicAdd`` (``block_striped.h`` 213-232:
``ATOMG.E.ADD.F32.FTZ.RN`` in the machine code), the finishing peer adding the workspace to its own
(``load_add``, FADD). Both are the same serial fp32 sum: the last addition commutes, and the atomic's
flush of subnormals never acts on these partials, which are multiples of 2**-25 (FP8 products are
multiples of 2**-18 for E4M3 x E4M3 and 2**-25 with an E5M2 operand, block sums truncate to coarser
grids, and fp32 rounding of a nonzero multiple of 2**-25 stays at or above 2**-25 in magnitude), far
above fp32's smallest normal 2**-126. So :func:`peer_ranges` gives each stream-K tile's K ranges in peer
order and the combination is a serial sum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["StreamKMapping", "TILE", "mapping"]

#: The sm_89 row-wise kernel's threadblock tile (M, N, K) (RowwiseScaledMM.cu, ``f8f8bf16_rowwise_impl_sm89``).
TILE = (64, 128, 64)
_MIN_ITERS_PER_SK_BLOCK = 2
_COHORT_M, _COHORT_N = 8, 4
_INT_MIN = -(1 << 31)
_F = np.float32


@dataclass(frozen=True)
class StreamKMapping:
    """The stream-K decomposition of one GEMM (names as in the C++).

    Attributes:
        m, n, k: the problem.
        sms, occupancy: the SM count and blocks per SM it was computed for.
        tiled_m, tiled_n: output tiles along M and N.
        iters_per_tile: 64-wide K iterations per tile.
        sk_tiles: stream-K tiles (the first ``sk_tiles`` linear tile indices); the rest are data-parallel.
        sk_blocks: blocks sharing the stream-K tiles' iterations.
        sk_regions, sk_blocks_per_region, sk_big_blocks_per_region, sk_iters_per_region,
        sk_iters_per_normal_block: how the iterations are dealt to the blocks.
        separate_reduction: the peers' partials are summed by reduction blocks (else the turnstile).
        cohort_raster: tiles are numbered in 8 x 4 cohorts.
    """

    m: int
    n: int
    k: int
    sms: int
    occupancy: int
    tiled_m: int
    tiled_n: int
    iters_per_tile: int
    sk_tiles: int = 0
    sk_blocks: int = 0
    sk_waves: int = 0
    sk_regions: int = 1
    sk_blocks_per_region: int = 0
    sk_big_blocks_per_region: int = 0
    sk_iters_per_region: int = 0
    sk_iters_per_normal_block: int = 0
    separate_reduction: bool = False
    cohort_raster: bool = False

    @property
    def output_tiles(self) -> int:
        """All output tiles."""
        return self.tiled_m * self.tiled_n

    def tile_offset(self, tile: int) -> tuple[int, int]:
        """``get_tile_offset``: the (tile row, tile column) of a linear tile index."""
        r, c = divmod(tile, self.tiled_n)  # row-major raster
        if self.tiled_m < self.tiled_n:
            c, r = divmod(tile, self.tiled_m)  # column-major raster
        if self.cohort_raster:
            cohorts_n = -(-self.tiled_n // _COHORT_N)
            cohort_m, cohort_n = divmod(tile // (_COHORT_M * _COHORT_N), cohorts_n)
            block_m, block_n = divmod(tile % (_COHORT_M * _COHORT_N), _COHORT_N)
            r, c = cohort_m * _COHORT_M + block_m, cohort_n * _COHORT_N + block_n
        return r, c

    def iter_extents(self, block: int) -> tuple[int, int]:
        """``get_iter_extents``: the global iterations ``[begin, end)`` of stream-K block ``block``."""
        region, in_region = divmod(block, self.sk_blocks_per_region)
        begin = region * self.sk_iters_per_region + in_region * self.sk_iters_per_normal_block
        count = self.sk_iters_per_normal_block
        if in_region < self.sk_big_blocks_per_region:
            begin += in_region
            count += 1
        else:
            begin += self.sk_big_blocks_per_region
        return begin, begin + count

    def peer_ranges(self) -> dict[int, tuple[tuple[int, int], ...]]:
        """Every stream-K tile's peers: linear tile index -> its peers' element ranges ``[k0, k1)`` of K, in
        peer (block) order, which is ascending K."""
        peers: dict[int, list[tuple[int, int, int]]] = {}
        ipt = self.iters_per_tile
        for block in range(self.sk_blocks):
            lo, hi = self.iter_extents(block)
            tile = (hi - 1) // ipt
            while True:  # a block works on its tiles last first (gemm(): tile_idx--)
                start = tile * ipt
                first, last = max(lo, start) - start, min(hi - start, ipt)
                peers.setdefault(tile, []).append((block, first * TILE[2], min(self.k, last * TILE[2])))
                if lo >= start:
                    break
                hi, tile = start, tile - 1
        return {t: tuple((k0, k1) for _, k0, k1 in sorted(v)) for t, v in sorted(peers.items())}


def _sk_blocks(sk_tiles: int, iters_per_tile: int, sms: int, max_occupancy: int, partial_wave: bool) -> tuple[int, int]:
    """``get_sk_blocks``: (sk_blocks, savings in iterations) of the best trial."""
    savings, best = _INT_MIN, 0
    if sk_tiles == 0:
        return best, savings
    sk_iters = sk_tiles * iters_per_tile
    dp_equiv_iters = iters_per_tile * (-(-sk_tiles // sms))
    lowest = min(sms, sk_tiles + 1) if partial_wave else sms
    highest = min(sms * max_occupancy, sk_iters // _MIN_ITERS_PER_SK_BLOCK)
    for trial in range(lowest, highest + 1):
        waves = -(-trial // sms)
        iter_equiv = -(-sk_iters // trial) * waves
        peers = -(-trial // sk_tiles) + 1  # one more for alignment skew
        iter_cost = _F(_F(_F(0.02) * _F(peers)) * _F(iter_equiv))
        if trial % sk_tiles == 0:
            peers, iter_cost = trial // sk_tiles, _F(0.0)
        fixup = int(_F(_F(_F(2.0) * _F(waves)) + iter_cost) + _F(_F(2.0) * _F(peers)))
        trial_savings = dp_equiv_iters - iter_equiv - fixup
        if trial_savings >= savings:
            savings, best = trial_savings, trial
    return best, savings


def _blocks(output_tiles: int, iters_per_tile: int, sms: int, occupancy: int) -> tuple[int, int]:
    """``get_blocks``: (data-parallel tiles, stream-K blocks)."""
    full_waves = output_tiles // sms
    full_wave_tiles = full_waves * sms
    partial = output_tiles - full_wave_tiles
    if partial == 0:
        return output_tiles, 0
    if full_waves < occupancy:
        blocks, score = _sk_blocks(partial, iters_per_tile, sms, occupancy - full_waves, True)
        return (output_tiles, 0) if score < 0 else (full_wave_tiles, blocks)
    if occupancy > 1 and full_waves % occupancy == occupancy - 1:
        blocks, score = _sk_blocks(partial, iters_per_tile, sms, 1, True)
        if score >= 0:
            return full_wave_tiles, blocks
    max_occupancy = occupancy - ((full_waves - 1) % occupancy)
    blocks, score = _sk_blocks(partial + sms, iters_per_tile, sms, max_occupancy, False)
    return (output_tiles, 0) if score < 0 else (full_wave_tiles - sms, blocks)


def mapping(m: int, n: int, k: int, sms: int, occupancy: int) -> StreamKMapping:
    """The stream-K decomposition of an ``M x N x K`` GEMM (``mode == kGemm``, split factor 1).

    Example:
        >>> from mmaemu.platforms._gpus import reference_gpu
        >>> d = mapping(16, 128, 1024, reference_gpu("rtx4060").sm_count, 2)
        >>> d.sk_tiles, d.sk_blocks, d.separate_reduction, d.peer_ranges()
        (1, 4, True, {0: ((0, 256), (256, 512), (512, 768), (768, 1024))})
    """
    avail = max(1, sms)
    ipt = -(-k // TILE[2])
    tm, tn = -(-m // TILE[0]), -(-n // TILE[1])
    dp_tiles, sk_blocks = _blocks(tm * tn, ipt, avail, occupancy) if avail > 1 else (tm * tn, 0)
    sk_tiles = tm * tn - dp_tiles
    fields: dict[str, object] = {}
    if sk_blocks > 0:
        waves = -(-sk_blocks // avail)
        sk_iters = sk_tiles * ipt
        sk_blocks = min(sk_blocks, sk_iters)
        regions = sk_tiles if sk_blocks > sk_tiles and sk_blocks % sk_tiles == 0 else 1
        fields = dict(sk_blocks=sk_blocks, sk_waves=waves, sk_regions=regions,
                      sk_blocks_per_region=sk_blocks // regions,
                      sk_big_blocks_per_region=(sk_iters - (sk_iters // sk_blocks) * sk_blocks) // regions,
                      sk_iters_per_region=sk_iters // regions, sk_iters_per_normal_block=sk_iters // sk_blocks,
                      separate_reduction=waves < occupancy and sk_blocks > 2 * sk_tiles)
    cohort = _cohort_raster(tm, tn, sk_tiles, dp_tiles, sms * occupancy)
    return StreamKMapping(m, n, k, sms, occupancy, tm, tn, ipt, sk_tiles=sk_tiles, cohort_raster=cohort,
                          **fields)  # type: ignore[arg-type]


def _cohort_raster(tm: int, tn: int, sk_tiles: int, dp_blocks: int, gpu_occupancy: int) -> bool:
    """The constructor's choice of cohort rasterisation (8 x 4 tiles per cohort)."""
    cohorts_m, cohorts_n = -(-tm // _COHORT_M), -(-tn // _COHORT_N)
    cohort_blocks = cohorts_m * cohorts_n * _COHORT_M * _COHORT_N
    efficiency = _F(dp_blocks) / _F(cohort_blocks)
    in_range = True
    if sk_tiles > 0:
        cohort = (sk_tiles - 1) // (_COHORT_M * _COHORT_N)
        grid_m = cohort // cohorts_n
        grid_n = cohorts_n - 1 if grid_m > 0 else cohort % cohorts_n
        in_range = not ((grid_m + 1) * _COHORT_M >= tm or (grid_n + 1) * _COHORT_N >= tn)
    return bool(in_range and dp_blocks >= gpu_occupancy * 2 and efficiency > _F(0.85))
