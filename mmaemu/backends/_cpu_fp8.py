"""The cpu backend's FP8 kernel on AVX-512: each term truncated by a fused multiply-add rounded toward zero.

Within a block, with grid unit ``u = 2**(E - F)``, two accumulators per output start at
``C = 1.5 * 2**23 * u``: an fp32 in [2**23 u, 2**24 u), whose ulp is ``u``. A fused multiply-add
rounded toward zero, ``fma_rz(|a|, |b|, P)``, adds ``|a| |b|`` truncated to a multiple of ``u``:
the exact sum ``P + |a||b|`` is rounded down onto P's grid, which is ``u`` while the sum stays
below ``2**24 u``. Products with a positive sign go into P, negative ones (by magnitude) into N,
so every term is truncated toward zero in sign-magnitude, as :func:`mmaemu.model.block_fma` does;
``c`` enters the same way (its positive part into P, its negative part into N, by an addition
rounded toward zero). Then ``P - N`` is the exact sum of the truncated terms (both in
[2**23 u, 2**24 u): exact by Sterbenz's lemma, and an exact zero is +0), and keeping F + 1
significant bits is a mask of its significand. Two fused multiply-adds per product and no
scaling, truncation or conversion instruction.

The products' sign routing: B is decoded as two arrays, ``|b|`` where ``b >= 0`` (else 0) and
``|b|`` where ``b < 0``; for ``a >= 0`` P takes the first and N the second, for ``a < 0`` the
other way round: A's sign selects an address offset (one scalar per row and k), never a lane mask.

Capacity: the block's terms are below ``2**(F + 2)`` units each and c's below ``2**(F + 1)``, so
P - C and N - C stay below ``B 2**(F + 2) + 2**(F + 1)``, which must be at most ``2**22``
(:func:`expresses`); hopper and ada use 2**20 + 2**14.

Layout (cache blocking): B in panels of 64 columns, ``[panel, k, sign, 64]`` fp32 plus
``[panel, k, 64]`` int8 exponents, so one block of one panel (32 k: 16 KiB + 2 KiB) stays in L1
while every row of an M tile passes over it; A per block, ``[block, m, B]`` (values, the sign as
the offset 0 or 64, int8 exponents), contiguous for consecutive rows; k in the plan's order
(the permutation is applied while decoding, so the kernel walks k linearly). Two rows of A and
four vectors of 16 columns are held in 16 accumulator registers over a block; the block maximum
(64 int8 lanes, two partial maxima per row) is computed just before, and the block's set-up
(the grid of each lane from E and c) and its end (``P - N``, the mask) happen in registers.

[Note: measured] On the 2-core development machine (Xeon with AVX-512, shared with other jobs),
CPU time of one thread, 256 x 1920 x 2048 E4M3, hopper fast: this kernel 52-62 ms, the
portable kernel of :mod:`mmaemu.backends.cpu` 163-217 ms, torch's fp32 matmul 14.5-14.9 ms
(2026-12-02). The bench figures are in docs/performance.md.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..presets import CMode, Preset, Rounding
from . import _cpu_simd

__all__ = [
    "PANEL",
    "available",
    "block_bounds",
    "code_tables",
    "decode_a_blocks",
    "decode_b_panels",
    "decode_code",
    "expresses",
    "kernel",
    "panels",
]

#: Columns of a B panel (four vectors of 16 fp32 lanes; one int8 vector of exponents).
PANEL = 64
#: int8 exponent of zero and non-finite operands (as in :mod:`mmaemu.backends.cpu`).
ZERO8 = -64
#: A block maximum below this means the block has no nonzero product (real sums are >= -28).
NO_PRODUCT_BELOW = -40


def expresses(preset: Preset) -> bool:
    """Whether this kernel computes ``preset`` exactly: aligned c, truncation, and the accumulators' capacity."""
    return (preset.c_mode is CMode.ALIGNED and preset.rounding is Rounding.TRUNCATE and preset.frac_bits <= 23
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
    """int32 ``[5, 256]`` per FP8 code: |value| bits where positive (else 0), where negative, the
    exponent (``ZERO8`` for zeros and non-finite codes), the sign offset (PANEL for a negative
    nonzero finite code), whether it is an Inf. Built once per format from :func:`decode_code`."""
    key = (man_bits, bias, has_inf)
    if key not in _TABLES:
        out = np.zeros((5, 256), dtype=np.int32)
        _fill_tables(man_bits, bias, has_inf, out)
        _TABLES[key] = out
    return _TABLES[key]


def panels(n: int) -> int:
    """Panels covering ``n`` columns."""
    return math.ceil(n / PANEL)


try:  # pragma: no cover - exercised where numba is installed (a dependency)
    from numba import njit, prange

    from . import _numba_cache

    _numba_cache.install()  # before the decorators below: compiled code in the per-user cache
    _HAVE_NUMBA = True
except Exception:  # noqa: BLE001
    _HAVE_NUMBA = False


if _HAVE_NUMBA:  # pragma: no cover - compiled
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

    @njit(cache=True)
    def _fill_tables(man_bits: int, bias: int, has_inf: bool, out: np.ndarray) -> None:
        """Per code: |value| bits where positive, where negative, exponent, sign offset, is Inf (int32 rows)."""
        nonfinite_from = 0x7C if has_inf else 0x7F
        for code in range(256):
            bits, exponent, live = decode_code(np.int32(code), man_bits, bias, nonfinite_from)
            negative = (code >> 7) != 0
            out[0, code] = 0 if negative else bits
            out[1, code] = bits if negative else 0
            out[2, code] = exponent
            out[3, code] = PANEL if live and negative else 0
            out[4, code] = 1 if has_inf and (code & 0x7F) == 0x7C else 0

    @njit(parallel=True, cache=True)
    def decode_a_blocks(codes: np.ndarray, kseq: np.ndarray, identity: bool, blk_start: np.ndarray,
                        blk_stop: np.ndarray, man_bits: int, bias: int, has_inf: bool,
                        out_v: np.ndarray, out_sel: np.ndarray, out_e: np.ndarray, inf_rows: np.ndarray) -> None:
        """Row-side codes ``[R, K]`` into ``[block, r, W]``: |value|, the sign as an offset (0 or PANEL), exponent.

        All three as 32-bit lanes (``W``, a multiple of 16, at least the block size). Position ``j``
        of block ``bi`` is k = ``kseq[blk_start[bi] + j]`` (``identity``: ``kseq[i] == i``); positions
        past the block's end hold anything (the kernel reads a block's own k only). Sixteen rows at
        a time are decoded whole into a local buffer (long loops that vectorise), then copied block
        by block, 16 lanes a move, so that each block's stores are 16 rows long and contiguous.
        Rows holding an Inf code are flagged in ``inf_rows``.
        """
        nonfinite_from = 0x7C if has_inf else 0x7F
        n_blocks, n_rows, width = out_v.shape
        k_cols = codes.shape[1]
        v_out = out_v.reshape(-1)
        s_out = out_sel.reshape(-1)
        e_out = out_e.reshape(-1).view(np.float32)
        rows_per_task = 16
        stride = k_cols + width
        for t in prange((n_rows + rows_per_task - 1) // rows_per_task):
            r0 = t * rows_per_task
            nr = min(rows_per_task, n_rows - r0)
            lv = np.empty(rows_per_task * stride, dtype=np.float32)
            ls = np.empty(rows_per_task * stride, dtype=np.float32)
            le = np.empty(rows_per_task * stride, dtype=np.float32)
            lv_bits = lv.view(np.int32)
            ls_bits = ls.view(np.int32)
            le_bits = le.view(np.int32)
            k_codes = np.empty(k_cols, dtype=np.uint8)
            for q in range(nr):
                row = codes[r0 + q]
                if not identity:
                    for i in range(k_cols):
                        k_codes[i] = row[kseq[i]]
                src = row if identity else k_codes
                base = q * stride
                n_inf = 0
                for i in range(k_cols):
                    code = np.int32(src[i])
                    bits, exponent, live = decode_code(code, man_bits, bias, nonfinite_from)
                    lv_bits[base + i] = bits
                    ls_bits[base + i] = np.int32(PANEL) if live and (code >> 7) != 0 else np.int32(0)
                    le_bits[base + i] = np.int32(exponent)
                    n_inf += np.int32((code & 0x7F) == 0x7C)
                inf_rows[r0 + q] = has_inf and n_inf != 0
            for bi in range(n_blocks):
                b0 = blk_start[bi]
                for q in range(nr):
                    o = (bi * n_rows + r0 + q) * width
                    src_o = q * stride + b0
                    for j in range(0, width, 16):
                        v.store(v_out, o + j, v.load(lv, src_o + j))
                        v.store(s_out, o + j, v.load(ls, src_o + j))
                        v.store(e_out, o + j, v.load(le, src_o + j))

    @njit(parallel=True, cache=True)
    def decode_b_panels(codes: np.ndarray, kseq: np.ndarray, tables: np.ndarray,
                        out_pn: np.ndarray, out_e: np.ndarray, inf_tiles: np.ndarray) -> None:
        """B's codes ``[N, K]`` into panels: ``out_pn [panel, i, sign, 64]``, ``out_e [panel, i, 64]``, k = ``kseq[i]``.

        ``out_pn[p, i, 0]`` holds ``|b|`` where ``b >= 0`` (else +0), ``out_pn[p, i, 1]`` ``|b|`` where
        ``b < 0``; columns past N are zeros with exponent ``ZERO8``. One task per 64 x 64 tile: its
        codes are gathered transposed into a 4 KiB tile (k in plan order), then decoded a row of 64
        at a time. ``inf_tiles[t]`` is set where tile ``t`` holds an Inf code.
        """
        n_rows, k_cols = codes.shape
        n_panels = out_e.shape[0]
        k_tiles = (k_cols + PANEL - 1) // PANEL
        flat = codes.reshape(-1)
        t_pos = tables[0]
        t_neg = tables[1]
        t_e = tables[2].astype(np.int8)
        t_inf = tables[4]
        pn_out = out_pn.reshape(-1).view(np.int32)
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
                o = ((p * k_cols + i0 + i) * 2) * PANEL
                oe = (p * k_cols + i0 + i) * PANEL
                for j in range(PANEL):
                    code = tile[i * PANEL + j]
                    pn_out[o + j] = t_pos[code]
                    pn_out[o + PANEL + j] = t_neg[code]
                    e_out[oe + j] = t_e[code]
                    n_inf += t_inf[code]
            inf_tiles[t] = n_inf != 0

    @njit(inline="always")
    def _aligned_zeros(n: int) -> np.ndarray:
        """fp32 zeros of length ``n`` starting on a 64-byte boundary (whole-vector loads and stores)."""
        buf = np.zeros(n + 16, dtype=np.float32)
        shift = ((-v.address(buf)) % 64) // 4
        return buf[shift:shift + n]

    @njit(inline="always")
    def _row_maxima(eb: np.ndarray, ea: np.ndarray, a0: int, a1: int, e_base: int, b0: int, b1: int,
                    start: Any) -> tuple[Any, Any]:
        """The block maxima of ``e(a) + e(b)`` of two rows over one panel (64 int8 lanes each).

        Two partial maxima per row (even and odd k) halve the dependency chain.
        """
        e0 = start
        e1 = start
        f0 = start
        f1 = start
        k = b0
        while k + 2 <= b1:
            r = v.load8(eb, e_base + k * PANEL)
            s = v.load8(eb, e_base + (k + 1) * PANEL)
            e0 = v.add_max8(e0, ea, a0 + k, r)
            e1 = v.add_max8(e1, ea, a1 + k, r)
            f0 = v.add_max8(f0, ea, a0 + k + 1, s)
            f1 = v.add_max8(f1, ea, a1 + k + 1, s)
            k += 2
        if k < b1:
            r = v.load8(eb, e_base + k * PANEL)
            e0 = v.add_max8(e0, ea, a0 + k, r)
            e1 = v.add_max8(e1, ea, a1 + k, r)
        return v.max8(e0, f0), v.max8(e1, f1)

    @njit(inline="always")
    def _start_row(c: np.ndarray, o: int, emax: Any, frac: int) -> tuple[Any, Any, Any, Any, Any, Any, Any, Any]:
        """P and N of one row's 64 lanes at a block's start: the offset accumulator plus c's truncated parts."""
        c0 = v.load(c, o)
        c1 = v.load(c, o + 16)
        c2 = v.load(c, o + 32)
        c3 = v.load(c, o + 48)
        g0 = v.grid_offset0(emax, c0, frac, NO_PRODUCT_BELOW, -100)
        g1 = v.grid_offset1(emax, c1, frac, NO_PRODUCT_BELOW, -100)
        g2 = v.grid_offset2(emax, c2, frac, NO_PRODUCT_BELOW, -100)
        g3 = v.grid_offset3(emax, c3, frac, NO_PRODUCT_BELOW, -100)
        return (v.add_rz(g0, v.positive_part(c0)), v.add_rz(g1, v.positive_part(c1)),
                v.add_rz(g2, v.positive_part(c2)), v.add_rz(g3, v.positive_part(c3)),
                v.add_rz(g0, v.negative_part(c0)), v.add_rz(g1, v.negative_part(c1)),
                v.add_rz(g2, v.negative_part(c2)), v.add_rz(g3, v.negative_part(c3)))

    @njit(inline="always")
    def _end_row(c: np.ndarray, o: int, p0: Any, p1: Any, p2: Any, p3: Any, q0: Any, q1: Any, q2: Any, q3: Any,
                 keep: Any) -> None:
        """c = P - N (exact) truncated to F + 1 significant bits (a mask of the significand)."""
        v.store(c, o, v.mask_bits(v.sub(p0, q0), keep))
        v.store(c, o + 16, v.mask_bits(v.sub(p1, q1), keep))
        v.store(c, o + 32, v.mask_bits(v.sub(p2, q2), keep))
        v.store(c, o + 48, v.mask_bits(v.sub(p3, q3), keep))

    @njit(inline="always")
    def _step(va: np.ndarray, sel: np.ndarray, bpn: np.ndarray, ao: int, kb: int,
              p0: Any, p1: Any, p2: Any, p3: Any, q0: Any, q1: Any, q2: Any, q3: Any) -> tuple[Any, ...]:
        """One k of one row: |a| times the same-sign half of B into P, the other half into N (toward zero)."""
        a = v.broadcast(va, ao)
        s = np.int64(v.scalar(sel, ao))
        same = kb + s
        other = kb + PANEL - s
        p0 = v.fma_rz(a, v.load(bpn, same), p0)
        p1 = v.fma_rz(a, v.load(bpn, same + 16), p1)
        p2 = v.fma_rz(a, v.load(bpn, same + 32), p2)
        p3 = v.fma_rz(a, v.load(bpn, same + 48), p3)
        q0 = v.fma_rz(a, v.load(bpn, other), q0)
        q1 = v.fma_rz(a, v.load(bpn, other + 16), q1)
        q2 = v.fma_rz(a, v.load(bpn, other + 32), q2)
        q3 = v.fma_rz(a, v.load(bpn, other + 48), q3)
        return p0, p1, p2, p3, q0, q1, q2, q3

    @njit(parallel=True, cache=True)
    def kernel(va: np.ndarray, sel: np.ndarray, ea: np.ndarray, bpn: np.ndarray, ebp: np.ndarray,
               blk_start: np.ndarray, blk_stop: np.ndarray, chain_blk: np.ndarray, chain_part: np.ndarray,
               n_parts: int, order: np.ndarray, role: np.ndarray, frac: int, m_tile: int, out: np.ndarray,
               transposed: bool) -> None:
        """fp32 accumulators from the decoded operands (:func:`decode_a_blocks`, :func:`decode_b_panels`).

        ``out`` is ``[rows, columns]`` (the row side's rows, the panels' columns), or its transpose
        with ``transposed``: the block FMA is symmetric in its two operands, so either matrix may
        take either side.

        One task per (M tile, panel); per chain, per block, per pair of rows: the block maxima,
        the set-up, two fused multiply-adds per product and lane group, the end of the block; the
        chain results are added in fp32 (K order from +0) per part, and the parts combined.
        """
        m_rows, width = va.shape[1], va.shape[2]  # element (r, k) of block bi: (bi * R + r) * W + k - blk_start[bi]
        n_cols = out.shape[0] if transposed else out.shape[1]
        n_panels, k_all, _ = ebp.shape
        m_tiles = (m_rows + m_tile - 1) // m_tile
        keep = np.int32(~((1 << (23 - frac)) - 1))  # F fraction bits of an fp32 significand
        va_f = va.reshape(-1)
        sel_f = sel.reshape(-1)
        ea_f = ea.reshape(-1)
        bpn_f = bpn.reshape(-1)
        eb_f = ebp.reshape(-1)
        for t in prange(m_tiles * n_panels):
            m0 = (t // n_panels) * m_tile
            mm = min(m_tile, m_rows - m0)
            panel = t % n_panels
            partial = np.zeros((n_parts, mm, PANEL), dtype=np.float32)
            c = _aligned_zeros(mm * PANEL)
            start = v.splat8(ZERO8)
            e_base = panel * k_all * PANEL
            for ch in range(chain_part.shape[0]):
                c[:] = 0.0
                for bi in range(chain_blk[ch], chain_blk[ch + 1]):
                    b0 = blk_start[bi]
                    b1 = blk_stop[bi]
                    a_base = (bi * m_rows + m0) * width - b0  # + k: row m0's value of k in this block
                    for i in range(0, mm, 2):
                        i1 = min(i + 1, mm - 1)  # an odd last row is computed twice (same bits)
                        a0 = a_base + i * width
                        a1 = a_base + i1 * width
                        e0, e1 = _row_maxima(eb_f, ea_f, a0, a1, e_base, b0, b1, start)
                        o0 = i * PANEL
                        o1 = i1 * PANEL
                        p00, p01, p02, p03, q00, q01, q02, q03 = _start_row(c, o0, e0, frac)
                        p10, p11, p12, p13, q10, q11, q12, q13 = _start_row(c, o1, e1, frac)
                        for k in range(b0, b1):
                            kb = (panel * k_all + k) * 2 * PANEL
                            p00, p01, p02, p03, q00, q01, q02, q03 = _step(
                                va_f, sel_f, bpn_f, a0 + k, kb, p00, p01, p02, p03, q00, q01, q02, q03)
                            p10, p11, p12, p13, q10, q11, q12, q13 = _step(
                                va_f, sel_f, bpn_f, a1 + k, kb, p10, p11, p12, p13, q10, q11, q12, q13)
                        _end_row(c, o1, p10, p11, p12, p13, q10, q11, q12, q13, keep)
                        _end_row(c, o0, p00, p01, p02, p03, q00, q01, q02, q03, keep)
                p = chain_part[ch]
                for i in range(mm):
                    for j in range(PANEL):
                        partial[p, i, j] = partial[p, i, j] + c[i * PANEL + j]  # fp32, K order from +0
            combine_parts(partial, order, role, out, m0, panel * PANEL, mm, min(PANEL, n_cols - panel * PANEL),
                          transposed)
