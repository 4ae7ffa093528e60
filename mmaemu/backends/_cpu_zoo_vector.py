"""The cpu backend's vector zoo kernel (fp16, bf16 and tf32 operands, fp32 accumulators).

The same bits as :func:`mmaemu.model.block_fma` for the zoo presets, by the arithmetic of the
portable fp32 zoo kernel (:func:`mmaemu.backends._cpu_zoo._kernel_zoo`), written in explicit
vectors (:mod:`mmaemu.backends._cpu_simd`, plain LLVM vector instructions: AVX-512 or AVX2) and
held in registers over a block: per product one fp32 multiplication (exact: at most 22
significant bits), one multiplication by the block's ``2**(F - E)`` (exact: a power of two, no
underflow in range), one conversion truncating toward zero to int32 and one integer addition.
c's term (``c * 2**(F - E)`` truncated the same way) is the int32 sum's start; at the block's end
the sum is converted to fp32 truncated toward zero (``vcvtdq2ps {rz-sae}`` on AVX-512; elsewhere
exactly to float64, then a mask of its 24 leading bits) and scaled by ``2**(E - F)``, E + 127 kept
from the block's start in fp32's exponent field ([Note: shifted exponents] in
:mod:`mmaemu.backends._cpu_simd`: the scale and the unit one subtraction each). [Note: c first]
This halves the block's end against adding c's term there (no second E, no second conversion),
which matters most at small B, where a block's end is a larger share of the work (the bench's
figures are in docs/performance.md).

[Note: int32 wrap] The B terms are below ``2**(F + 2)`` each, so their sum is below 2**31 for every
preset the kernel takes (:func:`expresses`), but c's term (below ``2**(F + 1)``) can take the sum
past 2**31 where ``B 2**(F + 2) + 2**(F + 1) >= 2**31`` (:func:`may_wrap`: hopper's and b200's fp16
and bf16, B = 16 with F = 25, when nearly all 16 products are of the block's largest exponent and
one sign). There the int32 addition wraps modulo 2**32. A wrapped sum lies within 2**(F + 1) of
-2**31 or of 2**31, so a block whose sums all lie in [-2**30, 2**30) (one test per 8 vectors,
:func:`mmaemu.backends._cpu_simd_zoo.beyond_2_30`) did not wrap; otherwise (rare: sums of 8 or more
maximal terms of one sign) the block takes the float64 end
(:func:`mmaemu.backends._cpu_simd_zoo.zoo_result_wide`): c's term is recomputed and taken off modulo
2**32, which leaves the terms' exact sum, and the two are added in float64 (exact: below 2**33)
before the same truncation.

A sum of 2**128 or more overflows to +-Inf as in the model, and an exact zero is +0.

[Note: the range] Operands whose exponent lies in [EMIN, EMAX] (every fp16 value: its exponents
are -14 to 15 after the alignment's floor; bf16 and tf32 from 2**-50 to below 2**31) keep every
step exact: products lie in [2**-100, 2**62), so E >= -100, ``2**(F - E)`` and ``2**(E - F)`` are
normal fp32 numbers (F <= 26) and a nonzero result is at least ``2**(E - F) >= 2**-126`` (never
subnormal, so no second truncation onto fp32's subnormal grid). The block maxima are int8 lanes:
exponents plus BIAS (in [-41, 39]), zeros and non-finite values ZERO, added with saturation, so a
sum with a zero operand (at most -89) never reaches a real sum (at least -82). A lane whose E is
below -100 (no nonzero product, and c too small for the scales: c is the result) or whose c is
infinite keeps ``c + 0``; one test per 8 vectors (:func:`mmaemu.backends._cpu_simd_zoo.any_special`)
sends a block with such a lane to the float64 end, which selects them, and the others skip the
selection. Rows of A and B with an operand outside the range are recomputed by the float64 kernel
(:func:`mmaemu.backends._cpu_zoo.accumulate_wide`).

Layout: as the AVX-512 FP8 kernel's (:mod:`mmaemu.backends._cpu_fp8`): B in panels of 64 columns,
``[panel, k, 64]`` fp32 values and ``[panel, k, 64]`` int8 exponents, k in the plan's order; one
task per (M tile, panel); per block and pair of rows the maxima, then 8 int32 accumulators and 8
scale vectors over the block's k (and the 8 vectors of ``(E + 127) << 23``, which LLVM keeps on the
stack over the loop).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..presets import CMode, Preset, Rounding
from . import _cpu_simd, _cpu_simd_zoo, _numba_cache
from ._cpu_simd import PANEL, panels

__all__ = ["BIAS", "EMAX", "EMIN", "PANEL", "ZERO", "expresses", "kernel", "may_wrap", "panel_layout", "panels"]

#: The operand exponents the kernel takes (others: their rows are recomputed in float64).
EMIN, EMAX = -50, 30
#: Added to each operand's exponent in the int8 lanes (real values in [-41, 39]).
BIAS = 9
#: int8 exponent of zero and non-finite operands (sums with it saturate at or below -89).
ZERO = -128
#: int8 product maximum plus this is E + 127 (the two biases removed).
_TO_BIASED = 127 - 2 * BIAS
#: E + 127 below this (E < -100): the lane keeps c.
_LO = 27


def expresses(preset: Preset) -> bool:
    """Whether the kernel computes ``preset`` for zoo operands: c aligned, terms truncated, 23 <= F <= 26
    (``2**(F - E)`` and ``2**(E - F)`` normal fp32 for E >= -100; a normalisation to fp32's 24 bits),
    and the B terms, below ``2**(F + 2)`` each, together below 2**31 (int32 lanes)."""
    return (preset.c_mode is CMode.ALIGNED and preset.rounding is Rounding.TRUNCATE
            and 23 <= preset.frac_bits <= 26 and preset.block_size * 2 ** (preset.frac_bits + 2) <= 2**31)


def may_wrap(preset: Preset) -> bool:
    """Whether the block's int32 sum, c's term included, may pass 2**31 in magnitude (the B terms and
    c's together not below 2**31): the kernel then checks each block's sums ([Note: int32 wrap])."""
    return preset.block_size * 2 ** (preset.frac_bits + 2) + 2 ** (preset.frac_bits + 1) >= 2**31


_HAVE_NUMBA, _DISK_CACHE = _numba_cache.kernel_cache(__file__)  # the checked per-user cache, never the package


if _HAVE_NUMBA:  # pragma: no cover - compiled
    from numba import njit, prange

    v: Any = _cpu_simd
    z: Any = _cpu_simd_zoo  # the zoo's operations (typed Any: numba, not mypy, checks their calls)

    @njit(parallel=True, cache=_DISK_CACHE)
    def panel_layout(values: np.ndarray, exponents: np.ndarray, kseq: np.ndarray, out_v: np.ndarray,
                     out_e: np.ndarray) -> None:
        """B's decoded rows ``[N, K]`` into panels ``out_v [panel, i, 64]`` (fp32) and ``out_e [panel, i, 64]``
        (int8), k = ``kseq[i]``; columns past N are zeros with exponent ``ZERO``. One task per 64 x 64 tile."""
        n_rows, k_cols = values.shape
        n_panels = out_e.shape[0]
        k_tiles = (k_cols + PANEL - 1) // PANEL
        for t in prange(n_panels * k_tiles):
            p = t // k_tiles
            i0 = (t % k_tiles) * PANEL
            depth = min(PANEL, k_cols - i0)
            width = min(PANEL, n_rows - p * PANEL)
            for i in range(depth):
                out_v[p, i0 + i, :] = 0.0
                out_e[p, i0 + i, :] = ZERO
            for j in range(width):
                row = p * PANEL + j
                for i in range(depth):
                    k = kseq[i0 + i]
                    out_v[p, i0 + i, j] = values[row, k]
                    out_e[p, i0 + i, j] = exponents[row, k]

    @njit(inline="always")
    def _at(ea: np.ndarray, off: int) -> int:
        """The offset of ``ea[off]``'s vector in the broadcast table ([Note: broadcast vectors] in _cpu_simd)."""
        return (np.int64(v.scalar(ea, off)) & 0xFF) * PANEL

    @njit(inline="always")
    def _plus_e_a(a_state: Any, r: Any, off: int) -> Any:
        """``r + e(a)`` (biased, saturating) of the row element ``ea[off]``, read as its vector in the broadcast
        table ``bc`` (:func:`~mmaemu.backends._cpu_simd.row_maxima`'s step)."""
        ea, bc = a_state
        return v.add_sat8(r, v.load8(bc, _at(ea, off)))

    @njit(inline="always")
    def _store_rows(c: np.ndarray, o0: int, o1: int, r00: Any, r01: Any, r02: Any, r03: Any,
                    r10: Any, r11: Any, r12: Any, r13: Any) -> None:
        """Both rows' results into c, the second row first (with an odd row count the last row is both)."""
        v.store(c, o1, r10)
        v.store(c, o1 + 16, r11)
        v.store(c, o1 + 32, r12)
        v.store(c, o1 + 48, r13)
        v.store(c, o0, r00)
        v.store(c, o0 + 16, r01)
        v.store(c, o0 + 32, r02)
        v.store(c, o0 + 48, r03)

    @njit(inline="always")
    def _load_rows(c: np.ndarray, o0: int, o1: int) -> tuple[Any, ...]:
        """Both rows' c, four vectors each."""
        return (v.load(c, o0), v.load(c, o0 + 16), v.load(c, o0 + 32), v.load(c, o0 + 48),
                v.load(c, o1), v.load(c, o1 + 16), v.load(c, o1 + 32), v.load(c, o1 + 48))

    @njit(inline="always")
    def _start_row(c: np.ndarray, o: int, em: Any, frac: int) -> tuple[Any, ...]:
        """One row's block set-up: ``(E + 127) << 23``, the scale ``2**(F - E)`` and the int32 sum's start
        (c's term) of its four vectors."""
        eb0 = z.zoo_exponent0(em, v.load(c, o), _TO_BIASED)
        eb1 = z.zoo_exponent1(em, v.load(c, o + 16), _TO_BIASED)
        eb2 = z.zoo_exponent2(em, v.load(c, o + 32), _TO_BIASED)
        eb3 = z.zoo_exponent3(em, v.load(c, o + 48), _TO_BIASED)
        s0 = z.zoo_scale(eb0, frac)
        s1 = z.zoo_scale(eb1, frac)
        s2 = z.zoo_scale(eb2, frac)
        s3 = z.zoo_scale(eb3, frac)
        x0 = z.zoo_cterm(v.load(c, o), s0)
        x1 = z.zoo_cterm(v.load(c, o + 16), s1)
        x2 = z.zoo_cterm(v.load(c, o + 32), s2)
        x3 = z.zoo_cterm(v.load(c, o + 48), s3)
        return eb0, eb1, eb2, eb3, s0, s1, s2, s3, x0, x1, x2, x3

    @njit(inline="always")
    def _end_rows(c: np.ndarray, o0: int, o1: int, frac: int, check: bool, eb00: Any, eb01: Any, eb02: Any,
                  eb03: Any, eb10: Any, eb11: Any, eb12: Any, eb13: Any, x00: Any, x01: Any, x02: Any, x03: Any,
                  x10: Any, x11: Any, x12: Any, x13: Any) -> None:
        """c of both rows = the block's results from the int32 sums of its terms and c's. Blocks with a
        lane that keeps c, and (where ``check``) blocks whose sums may have wrapped ([Note: int32
        wrap]), take the float64 end, which computes both. Both rows' c are read before either is
        written (with an odd row count the last row is both)."""
        if (check and z.beyond_2_30(x00, x01, x02, x03, x10, x11, x12, x13)) or z.any_special(
                eb00, eb01, eb02, eb03, eb10, eb11, eb12, eb13, _LO):
            c00, c01, c02, c03, c10, c11, c12, c13 = _load_rows(c, o0, o1)
            _store_rows(c, o0, o1,
                        z.zoo_result_wide(x00, eb00, c00, frac, _LO),
                        z.zoo_result_wide(x01, eb01, c01, frac, _LO),
                        z.zoo_result_wide(x02, eb02, c02, frac, _LO),
                        z.zoo_result_wide(x03, eb03, c03, frac, _LO),
                        z.zoo_result_wide(x10, eb10, c10, frac, _LO),
                        z.zoo_result_wide(x11, eb11, c11, frac, _LO),
                        z.zoo_result_wide(x12, eb12, c12, frac, _LO),
                        z.zoo_result_wide(x13, eb13, c13, frac, _LO))
            return
        r00 = z.zoo_result(x00, eb00, frac)
        r01 = z.zoo_result(x01, eb01, frac)
        r02 = z.zoo_result(x02, eb02, frac)
        r03 = z.zoo_result(x03, eb03, frac)
        r10 = z.zoo_result(x10, eb10, frac)
        r11 = z.zoo_result(x11, eb11, frac)
        r12 = z.zoo_result(x12, eb12, frac)
        r13 = z.zoo_result(x13, eb13, frac)
        _store_rows(c, o0, o1, r00, r01, r02, r03, r10, r11, r12, r13)

    @njit(inline="always")
    def _rows(state: Any, c: np.ndarray, m0: int, panel: int, i: int, i1: int, b0: int, b1: int) -> None:
        """Rows ``m0 + i`` and ``m0 + i1`` of A against panel ``panel`` over the block ``b0:b1`` (:func:`kernel`'s
        step; ``c`` holds the task's rows): the block maxima, the set-up, the int32 terms held in registers,
        the block's results (``c``'s rows become them)."""
        va_f, ea_f, bc, bv_f, eb_f, k_row, k_all, start, frac, check_wrap = state
        a0 = (m0 + i) * k_row
        a1 = (m0 + i1) * k_row
        e_base = panel * k_all * PANEL
        e0, e1 = v.row_maxima(_plus_e_a, (ea_f, bc), eb_f, PANEL, e_base, a0, a1, b0, b1, start)
        o0 = i * PANEL
        o1 = i1 * PANEL
        (eb00, eb01, eb02, eb03, s00, s01, s02, s03,
         x00, x01, x02, x03) = _start_row(c, o0, e0, frac)
        (eb10, eb11, eb12, eb13, s10, s11, s12, s13,
         x10, x11, x12, x13) = _start_row(c, o1, e1, frac)
        for k in range(b0, b1):
            kb = e_base + k * PANEL
            y0 = v.load(bv_f, kb)
            y1 = v.load(bv_f, kb + 16)
            y2 = v.load(bv_f, kb + 32)
            y3 = v.load(bv_f, kb + 48)
            p = v.broadcast(va_f, a0 + k)
            x00 = z.zoo_term(x00, p, y0, s00)
            x01 = z.zoo_term(x01, p, y1, s01)
            x02 = z.zoo_term(x02, p, y2, s02)
            x03 = z.zoo_term(x03, p, y3, s03)
            q = v.broadcast(va_f, a1 + k)
            x10 = z.zoo_term(x10, q, y0, s10)
            x11 = z.zoo_term(x11, q, y1, s11)
            x12 = z.zoo_term(x12, q, y2, s12)
            x13 = z.zoo_term(x13, q, y3, s13)
        _end_rows(c, o0, o1, frac, check_wrap, eb00, eb01, eb02, eb03, eb10, eb11, eb12, eb13,
                  x00, x01, x02, x03, x10, x11, x12, x13)

    @njit(parallel=True, cache=_DISK_CACHE)
    def kernel(va: np.ndarray, ea: np.ndarray, bc: np.ndarray, bv: np.ndarray, eb: np.ndarray, blk_start: np.ndarray,
               blk_stop: np.ndarray, chain_blk: np.ndarray, chain_part: np.ndarray, n_parts: int, order: np.ndarray,
               role: np.ndarray, frac: int, m_tile: int, check_wrap: bool, out: np.ndarray) -> None:
        """fp32 accumulators ``out [M, N]`` from A's decoded rows ``va, ea [M, K]`` (k in plan order) and
        B's panels (:func:`panel_layout`); blocks, chains and parts as the FP8 kernel takes them
        (:func:`mmaemu.backends._cpu_fp8.block_bounds`). Chain results are added in fp32 from +0 per
        part, and the parts combined in the scheme's order; ``check_wrap``: :func:`may_wrap`."""
        m_rows, k_row = va.shape
        n_panels, k_all = eb.shape[0], eb.shape[1]
        plan = (m_rows, blk_start, blk_stop, chain_blk, chain_part, n_parts, order, role)
        for t in prange(((m_rows + m_tile - 1) // m_tile) * n_panels):
            state = (va.reshape(-1), ea.reshape(-1), bc, bv.reshape(-1), eb.reshape(-1), k_row, k_all, v.splat8(ZERO),
                     frac, check_wrap)
            v.walk_panel(_rows, state, plan, out, t, n_panels, m_tile, out.shape[1], False)
