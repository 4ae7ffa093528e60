"""The cpu backend's FP8 kernel on AVX-512: one fused multiply-add per product, rounded toward zero.

Within a block, with grid unit ``u = 2**(E - F)``, one accumulator per output starts at
``C = 1.5 * 2**23 * u`` plus c truncated toward zero onto the grid: an fp32 in [2**23 u, 2**24 u),
whose ulp is ``u``. A fused multiply-add rounded toward zero, ``fma_rz(a, b, X)``, adds the signed
product ``a b`` rounded *down* to a multiple of ``u``: the exact sum ``X + a b`` is positive, so
rounding it toward zero floors it onto X's grid. Flooring is truncation toward zero (what
:func:`mmaemu.model.block_fma` does to each term, in sign-magnitude) except for a negative product
that is not a multiple of ``u``: there the floor lies one unit further from zero. So the kernel
also counts, per output and block, the negative products below the grid, and adds that count
(in units) at the block's end; ``X + count - C`` is then the exact sum of the truncated terms (an
integer number of units below 2**22, subtracted exactly; an exact zero is +0), and keeping F + 1
significant bits is a mask of its significand.

[Note: the count] A product ``a b`` is a multiple of ``u`` exactly when the exponent of its
lowest set bit, ``low(a) + low(b)`` (the product of the two odd significands is odd), is at least
``E - F``. Both exponents are int8 lanes: per panel column and k, ``low(b)`` where ``b < 0`` and
``low(b)`` where ``b > 0`` (``NEVER`` elsewhere), of which A's sign picks the half that makes the
product negative (an address offset, never a lane mask); per row and k, ``low(a)``, read as its
64-lane vector in :func:`mmaemu.backends._cpu_simd.broadcast_table`. The count is one saturating
subtraction (``(E - F) - low(a)``, the vector a memory operand), one comparison with 64 lanes of
``low(b)`` (a memory operand; the result a mask register) and one masked increment per row, k and
64 columns: about one vector operation per 21 products, beside the one FMA per 16. (Written as
``count - sext(mask)``, LLVM moved the mask into a vector first, one instruction more; the
increment is a ``select`` whose 1s LLVM cannot see are constant, which lowers to ``vpaddb {k}``.)
The block maxima take two per row and k (an addition with ``e(a)``'s vector from the same table, a
maximum). On Intel cores, where 512-bit integer instructions share ports 0 and 5 with the FMAs,
these integer instructions, not the FMAs, bound the kernel's speed (docs/backends.md).

The row side is read as FP8 codes (``[R, K]``, k in the plan's order), each decoded by loads from
a 256-entry table as the kernel reads it (the fp32 value, broadcast; a word holding the offsets of
``low(a)``'s vector and of its sign's half of the panel; the offset of ``e(a)``'s vector), so the
row side costs no decoding pass.

Capacity: the block's terms are below ``2**(F + 2)`` units each (floored: at least ``-2**(F + 2)``)
and c's below ``2**(F + 1)``, so ``X - C`` stays within ``B 2**(F + 2) + 2**(F + 1)``, which must
be at most ``2**22`` (:func:`expresses`; hopper and ada use 2**20 + 2**14); the count is an int8
lane, so ``B <= 127``.

Layout (cache blocking): B in panels of 64 columns, ``[panel, k, 64]`` fp32 values plus
``[panel, k, 3, 64]`` int8 (the exponents, ``low(b)`` where ``b < 0``, ``low(b)`` where ``b > 0``),
so one block of one panel (32 k: 8 KiB + 6 KiB) stays in L1 while every row of an M tile passes
over it; k in the plan's order (the permutation is applied while decoding, so the kernel walks k
linearly). Two rows of A and four vectors of 16 columns are held in 8 accumulator registers over a
block; the block maximum (64 int8 lanes, two partial maxima per row) is computed just before, and
the block's set-up (the grid of each lane from E and c) and its end happen in registers.

[Note: measured] ``python -m mmaemu bench`` times this kernel against torch's fp32 matmul on the same
operands, after checking its bits against the reference backend; docs/performance.md gives the current
figures, the machine and the command (``docs/data/bench_cpu_avx512.json``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..presets import CMode, Preset, Rounding
from . import _cpu_simd, _numba_cache
from ._cpu_simd import PANEL, panels

__all__ = [
    "PANEL",
    "available",
    "block_bounds",
    "code_tables",
    "decode_b_panels",
    "decode_code",
    "expresses",
    "kernel",
    "panels",
    "tile_chain",
    "flat_inputs",
]

#: The largest block: the count of a block's negative terms below the grid is an int8 lane.
MAX_BLOCK = 127
#: int8 exponent of zero and non-finite operands (as in :mod:`mmaemu.backends._cpu`).
ZERO8 = -64
#: A block maximum below this means the block has no nonzero product (real sums are >= -28).
NO_PRODUCT_BELOW = -40
#: Lowest-bit exponent of a zero (or non-finite) operand on the panel side: never below a grid.
NEVER = 127
#: The same on the row side: ``G - NEVER_ROW`` saturates below every live panel exponent (>= -16).
NEVER_ROW = 100
#: The grid exponents the negative-term count compares with, clamped: a live product's lowest bit
#: has exponent -32 to 30, so a grid above 40 or below -64 (no live product) counts the same.
GRID_LOW, GRID_HIGH = -64, 40


def expresses(preset: Preset) -> bool:
    """Whether this kernel computes ``preset`` exactly: aligned c, truncation, and the accumulators' capacity."""
    return (preset.c_mode is CMode.ALIGNED and preset.rounding is Rounding.TRUNCATE and preset.frac_bits <= 23
            and preset.block_size <= MAX_BLOCK
            and preset.block_size * 2 ** (preset.frac_bits + 2) + 2 ** (preset.frac_bits + 1) <= 2**22)


def available() -> bool:
    """Whether the kernel can run here: numba and a CPU with AVX-512F and AVX-512BW."""
    return _HAVE_NUMBA and _cpu_simd.available()


def block_bounds(chain_starts: list[int], block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, stop) of every block in plan order and the first block of each chain (plus the end)."""
    starts: list[int] = []
    stops: list[int] = []
    first = [0]
    for ch in range(len(chain_starts) - 1):
        lo, hi = chain_starts[ch], chain_starts[ch + 1]
        for b0 in range(lo, hi, block):
            starts.append(b0)
            stops.append(min(b0 + block, hi))
        first.append(len(starts))
    return np.asarray(starts, np.int64), np.asarray(stops, np.int64), np.asarray(first, np.int64)


_TABLES: dict[tuple[int, int, bool], np.ndarray] = {}


def code_tables(man_bits: int, bias: int, has_inf: bool) -> np.ndarray:
    """int32 ``[7, 256]`` per FP8 code, from :func:`decode_code` (built once per format): the fp32 bits of
    the value (+0 for zeros and non-finite codes), the exponent (``ZERO8`` there), the lowest set
    bit's exponent where the code is negative (else ``NEVER``), the same where it is positive, whether
    it is an Inf, the row side's packed word (:func:`row_word`) and the offset of the exponent's
    vector in :func:`mmaemu.backends._cpu_simd.broadcast_table`."""
    key = (man_bits, bias, has_inf)
    if key not in _TABLES:
        out = np.zeros((7, 256), dtype=np.int32)
        _fill_tables(man_bits, bias, has_inf, out)
        _TABLES[key] = out
    return _TABLES[key]


_HAVE_NUMBA, _DISK_CACHE = _numba_cache.kernel_cache(__file__)  # the checked per-user cache, never the package


if _HAVE_NUMBA:  # pragma: no cover - compiled
    from numba import njit, prange

    from ._cpu_steps import combine_parts

    v: Any = _cpu_simd  # the vector intrinsics (typed Any: numba, not mypy, checks their calls)

    @njit(inline="always")
    def decode_code(code: Any, man_bits: int, bias: int, nonfinite_from: int) -> tuple[Any, Any, Any]:
        """(fp32 bits of |value|, int8 exponent, finite and nonzero) of one FP8 code, by integer arithmetic.

        Normals ``(field - bias + 127) << 23``, subnormals normalised by their leading bit; zeros and
        non-finite codes give bits 0 and exponent ``ZERO8``.
        """
        mag = code & 0x7F
        field = mag >> man_bits
        frac = mag & ((1 << man_bits) - 1)
        lead = np.int32(frac >= 2) + np.int32(frac >= 4)  # subnormal: leading bit of frac
        sub_bits = ((1 - bias - man_bits + lead + 127) << 23) | ((frac - (1 << lead)) << (23 - lead))
        norm_bits = ((field - bias + 127) << 23) | (frac << (23 - man_bits))
        live = mag != 0 and mag < nonfinite_from
        bits = (norm_bits if field != 0 else sub_bits) if live else 0
        exponent = np.int8(max(field - bias, 1 - bias)) if live else np.int8(ZERO8)
        return bits, exponent, live

    @njit(inline="always")
    def lowest_bit(code: Any, man_bits: int, bias: int) -> Any:
        """The exponent of the lowest set bit of a live code's value (-16 to 15 for the FP8 formats)."""
        mag = code & 0x7F
        field = mag >> man_bits
        m = (mag & ((1 << man_bits) - 1)) | ((1 << man_bits) if field != 0 else 0)
        e = max(field, 1) - bias - man_bits
        while m & 1 == 0:
            m >>= 1
            e += 1
        return e

    @njit(inline="always")
    def row_word(low: Any, negative: Any) -> Any:
        """The row side's int32 per element: bits 0-15 the offset of the lowest bit's exponent's vector in
        :func:`mmaemu.backends._cpu_simd.broadcast_table`, and from bit 16 the offset of the panel's
        lowest-bit lanes that give a negative product with it (``PANEL`` for a >= 0: b < 0;
        ``2 * PANEL`` for a < 0: b > 0)."""
        return np.int32(((low & 0xFF) * PANEL) | ((PANEL + PANEL * np.int32(negative)) << 16))

    @njit(cache=_DISK_CACHE)
    def _fill_tables(man_bits: int, bias: int, has_inf: bool, out: np.ndarray) -> None:
        """Per code: value bits, exponent, lowest bit where negative, where positive, is Inf, row word,
        the exponent's broadcast vector."""
        nonfinite_from = 0x7C if has_inf else 0x7F
        for code in range(256):
            bits, exponent, live = decode_code(np.int32(code), man_bits, bias, nonfinite_from)
            negative = live and (code >> 7) != 0
            low = lowest_bit(code, man_bits, bias) if live else NEVER
            out[0, code] = bits | (np.int32(-2147483648) if negative else np.int32(0))
            out[1, code] = exponent
            out[2, code] = low if negative else NEVER
            out[3, code] = low if live and not negative else NEVER
            out[4, code] = 1 if has_inf and (code & 0x7F) == 0x7C else 0
            out[5, code] = row_word(low if live else NEVER_ROW, negative)
            out[6, code] = (np.int32(exponent) & 0xFF) * PANEL

    @njit(parallel=True, cache=_DISK_CACHE)
    def decode_b_panels(codes: np.ndarray, kseq: np.ndarray, tables: np.ndarray,
                        out_v: np.ndarray, out_e: np.ndarray, inf_tiles: np.ndarray) -> None:
        """B's codes ``[N, K]`` into panels: ``out_v [panel, i, 64]`` fp32 values, ``out_e [panel, i, 3, 64]`` int8, k = ``kseq[i]``.

        ``out_e[p, i, 0]`` holds the exponents, ``out_e[p, i, 1]`` the lowest set bit's exponent where
        ``b < 0`` (else ``NEVER``), ``out_e[p, i, 2]`` the same where ``b > 0``; columns past N are
        zeros with exponent ``ZERO8``. One task per 64 x 64 tile: its codes are gathered transposed
        into a 4 KiB tile (k in plan order), then decoded a row of 64 at a time. ``inf_tiles[t]`` is
        set where tile ``t`` holds an Inf code.
        """
        n_rows, k_cols = codes.shape
        n_panels = out_e.shape[0]
        k_tiles = (k_cols + PANEL - 1) // PANEL
        flat = codes.reshape(-1)
        t_val = tables[0]
        t_e = tables[1].astype(np.int8)
        t_neg = tables[2].astype(np.int8)
        t_pos = tables[3].astype(np.int8)
        t_inf = tables[4]
        v_out = out_v.reshape(-1).view(np.int32)
        e_out = out_e.reshape(-1)
        for t in prange(n_panels * k_tiles):
            p = t // k_tiles
            i0 = (t % k_tiles) * PANEL
            depth = min(PANEL, k_cols - i0)
            width = min(PANEL, n_rows - p * PANEL)
            tile = np.zeros(PANEL * PANEL, dtype=np.uint8)  # [k, n]; codes past N stay +0
            for j in range(width):
                row = (p * PANEL + j) * k_cols
                for i in range(depth):
                    tile[i * PANEL + j] = flat[row + kseq[i0 + i]]
            n_inf = 0
            for i in range(depth):
                o = (p * k_cols + i0 + i) * PANEL
                oe = 3 * o
                for j in range(PANEL):
                    code = tile[i * PANEL + j]
                    v_out[o + j] = t_val[code]
                    e_out[oe + j] = t_e[code]
                    e_out[oe + PANEL + j] = t_neg[code]
                    e_out[oe + 2 * PANEL + j] = t_pos[code]
                    n_inf += t_inf[code]
            inf_tiles[t] = n_inf != 0

    @njit(inline="always")
    def _e_of(ca: np.ndarray, e_at: np.ndarray, bc: np.ndarray, off: int) -> Any:
        """The exponent of the row element ``ca[off]`` (a code) in 64 lanes: its vector in the table ``bc``."""
        return v.load8(bc, np.int64(v.scalar(e_at, np.int64(v.scalar(ca, off)))))

    @njit(inline="always")
    def _plus_e_a(a_state: Any, r: Any, off: int) -> Any:
        """``r + e(a)`` (int8 lanes, wrapping: the sums fit) of the row element ``ca[off]``, its exponent read as
        its vector in the broadcast table ``bc`` at ``e_at[code]`` (:func:`~mmaemu.backends._cpu_simd.row_maxima`'s
        step)."""
        ca, e_at, bc = a_state
        return v.add8(r, _e_of(ca, e_at, bc, off))

    @njit(inline="always")
    def _start_row(c: np.ndarray, o: int, emax: Any, frac: int) -> tuple[Any, Any, Any, Any, Any]:
        """One row's 64 accumulators at a block's start (the offset plus c truncated toward zero),
        and the lanes' grid exponents (int8, clamped)."""
        c0 = v.load(c, o)
        c1 = v.load(c, o + 16)
        c2 = v.load(c, o + 32)
        c3 = v.load(c, o + 48)
        g0 = v.grid_offset0(emax, c0, frac, NO_PRODUCT_BELOW, -100)
        g1 = v.grid_offset1(emax, c1, frac, NO_PRODUCT_BELOW, -100)
        g2 = v.grid_offset2(emax, c2, frac, NO_PRODUCT_BELOW, -100)
        g3 = v.grid_offset3(emax, c3, frac, NO_PRODUCT_BELOW, -100)
        return (v.start_rz(g0, c0), v.start_rz(g1, c1), v.start_rz(g2, c2), v.start_rz(g3, c3),
                v.grid8(g0, g1, g2, g3, GRID_LOW, GRID_HIGH))

    @njit(inline="always")
    def _end_row(c: np.ndarray, o: int, x0: Any, x1: Any, x2: Any, x3: Any, n: Any, keep: Any) -> None:
        """c = the block's sum (the accumulators plus the count, less the offset; exact), truncated to
        F + 1 significant bits (a mask of the significand)."""
        v.store(c, o, v.mask_bits(v.end_units0(x0, n), keep))
        v.store(c, o + 16, v.mask_bits(v.end_units1(x1, n), keep))
        v.store(c, o + 32, v.mask_bits(v.end_units2(x2, n), keep))
        v.store(c, o + 48, v.mask_bits(v.end_units3(x3, n), keep))

    @njit(inline="always")
    def _step(ca: np.ndarray, values: np.ndarray, words: np.ndarray, bc: np.ndarray, eb: np.ndarray, ao: int, kl: int,
              g: Any, n: Any, b0: Any, b1: Any, b2: Any, b3: Any, x0: Any, x1: Any, x2: Any,
              x3: Any) -> tuple[Any, ...]:
        """One k of one row: a times B added rounded down onto the grid, and the negative products
        below the grid counted (each was rounded one unit further from zero than truncation)."""
        code = np.int64(v.scalar(ca, ao))
        a = v.broadcast(values, code)
        w = v.scalar(words, code)
        x0 = v.fma_rz(a, b0, x0)
        x1 = v.fma_rz(a, b1, x1)
        x2 = v.fma_rz(a, b2, x2)
        x3 = v.fma_rz(a, b3, x3)
        t = v.sub_sat8(g, v.load8(bc, np.int64(w & 0xFFFF)))
        n = v.count_where_below8(n, t, eb, kl + np.int64(w >> 16), v.load8(bc, PANEL))  # bc's vector of 1
        return n, x0, x1, x2, x3

    @njit(inline="always")
    def flat_inputs(ca: np.ndarray, tables: np.ndarray, bv: np.ndarray, ebp: np.ndarray) -> Any:
        """The kernels' inputs as the flat views :func:`tile_chain` reads: the row side's codes, the fp32 value
        table, the decode words, the exponent table, the panels' values and their exponents."""
        return ca.reshape(-1), tables[0].view(np.float32), tables[5], tables[6], bv.reshape(-1), ebp.reshape(-1)

    @njit(inline="always")
    def tile_chain(c: np.ndarray, ca_f: np.ndarray, values: np.ndarray, words: np.ndarray, e_at: np.ndarray,
                   bc: np.ndarray, bv_f: np.ndarray, eb_f: np.ndarray, blk_start: np.ndarray, blk_stop: np.ndarray,
                   first_blk: int, stop_blk: int, m0: int, mm: int, k_row: int, panel: int, k_all: int, frac: int,
                   keep: Any, start: Any, zero: Any) -> None:
        """One chain's results for rows ``m0 .. m0 + mm`` of the row side and one panel, into ``c [mm * PANEL]``
        from +0: its blocks ``first_blk .. stop_blk`` in order; per block and pair of rows the block maxima,
        the set-up, one fused multiply-add per product and lane group and the count of negative products
        below the grid, the end of the block. The kernels' one chain computation, its values passed as they
        are (no state tuple): :func:`kernel` adds the results in fp32, :mod:`mmaemu.backends._cpu_block` scales
        them."""
        c[:] = 0.0
        e_base = panel * k_all * 3 * PANEL
        for bi in range(first_blk, stop_blk):
            b0 = blk_start[bi]
            b1 = blk_stop[bi]
            a_base = m0 * k_row  # + k: row m0's code of k
            for i in range(0, mm, 2):
                i1 = min(i + 1, mm - 1)  # an odd last row is computed twice (same bits)
                a0 = a_base + i * k_row
                a1 = a_base + i1 * k_row
                e0, e1 = v.row_maxima(_plus_e_a, (ca_f, e_at, bc), eb_f, 3 * PANEL, e_base, a0, a1, b0, b1, start)
                o0 = i * PANEL
                o1 = i1 * PANEL
                x00, x01, x02, x03, g0 = _start_row(c, o0, e0, frac)
                x10, x11, x12, x13, g1 = _start_row(c, o1, e1, frac)
                n0 = zero
                n1 = zero
                for k in range(b0, b1):
                    kb = (panel * k_all + k) * PANEL
                    y0 = v.load(bv_f, kb)
                    y1 = v.load(bv_f, kb + 16)
                    y2 = v.load(bv_f, kb + 32)
                    y3 = v.load(bv_f, kb + 48)
                    kl = e_base + k * 3 * PANEL
                    n0, x00, x01, x02, x03 = _step(ca_f, values, words, bc, eb_f, a0 + k, kl, g0, n0,
                                                   y0, y1, y2, y3, x00, x01, x02, x03)
                    n1, x10, x11, x12, x13 = _step(ca_f, values, words, bc, eb_f, a1 + k, kl, g1, n1,
                                                   y0, y1, y2, y3, x10, x11, x12, x13)
                _end_row(c, o1, x10, x11, x12, x13, n1, keep)
                _end_row(c, o0, x00, x01, x02, x03, n0, keep)

    @njit(parallel=True, cache=_DISK_CACHE)
    def kernel(ca: np.ndarray, tables: np.ndarray, bc: np.ndarray, bv: np.ndarray, ebp: np.ndarray,
               blk_start: np.ndarray, blk_stop: np.ndarray, chain_blk: np.ndarray, chain_part: np.ndarray,
               n_parts: int, order: np.ndarray, role: np.ndarray, frac: int, m_tile: int, out: np.ndarray,
               transposed: bool) -> None:
        """fp32 accumulators from the row side's codes ``ca [R, K]`` (k in plan order), decoded through
        ``tables`` (:func:`code_tables`) as they are read, and the panels (:func:`decode_b_panels`).

        ``out`` is ``[rows, columns]`` (the row side's rows, the panels' columns), or its transpose
        with ``transposed``: the block FMA is symmetric in its two operands, so either matrix may
        take either side.

        One task per (M tile, panel); per chain its results (:func:`tile_chain`), added in fp32 (K order from
        +0) per part, and the parts combined.
        """
        m_rows, k_row = ca.shape
        n_cols = out.shape[0] if transposed else out.shape[1]
        n_panels, k_all = ebp.shape[0], ebp.shape[1]
        m_tiles = (m_rows + m_tile - 1) // m_tile
        keep = np.int32(~((1 << (23 - frac)) - 1))  # F fraction bits of an fp32 significand
        ca_f, values, words, e_at, bv_f, eb_f = flat_inputs(ca, tables, bv, ebp)
        for t in prange(m_tiles * n_panels):
            m0 = (t // n_panels) * m_tile
            mm = min(m_tile, m_rows - m0)
            panel = t % n_panels
            partial = np.zeros((n_parts, mm, PANEL), dtype=np.float32)
            c = v.aligned_zeros(mm * PANEL)
            start = v.splat8(ZERO8)
            zero = v.splat8(0)
            for ch in range(chain_part.shape[0]):
                tile_chain(c, ca_f, values, words, e_at, bc, bv_f, eb_f, blk_start, blk_stop, chain_blk[ch],
                           chain_blk[ch + 1], m0, mm, k_row, panel, k_all, frac, keep, start, zero)
                v.add_chain(partial, chain_part[ch], c, mm)  # fp32, K order from +0
            combine_parts(partial, order, role, out, m0, panel * PANEL, mm, min(PANEL, n_cols - panel * PANEL),
                          transposed)
