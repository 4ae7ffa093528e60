"""The cpu backend's kernels for the zoo formats (fp16, bf16, tf32 operands, fp32 accumulators).

The default is the vector kernel (:mod:`mmaemu.backends._cpu_zoo_vector`, :func:`_accumulate_vector`);
the loop kernels below run with ``MMAEMU_CPU_PORTABLE=1`` and for presets it does not express, and
the float64 one recomputes the rows outside either fast kernel's exponent range.

Two kernels compute the same bits as :func:`mmaemu.model.block_fma`. The fp32 kernel
(:func:`_kernel_zoo`) runs every row whose operand exponents lie in [_FAST_EMIN, _FAST_EMAX]: each
product is exact in fp32, scaled to the block's grid and truncated into int32 terms. Rows of ``a``
or ``b`` outside that range (bf16 and tf32 only: very large, tiny or subnormal values) are
recomputed by the float64 kernel (:func:`_kernel_wide`), which takes any exponent. Inf operands
count as zeros (:attr:`mmaemu.backends.Accumulated.inf_zeroed` says whether one was met;
the dispatcher recomputes their outputs); NaN operands count as zeros and the dispatcher applies
the NaN rule. The tile walk, the block maxima and the term loop (:mod:`mmaemu.backends._cpu_steps`),
the combination of split parts and the addition of chain results (:mod:`mmaemu.backends._cpu_fp8`)
are the inline helpers the FP8 kernels use too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._host import env_flag
from .._accumulation import AccumulationPlan, flatten_plan
from ..formats import WideFormat, decode_wide, wide_format_of
from ..presets import CMode, Preset, Rounding
from . import _cpu_fp8, _cpu_simd, _cpu_zoo_vector
from ._cpu_scratch import aligned_buffer, buffer, flatten, launch_guard, panel_rows, tiles
from ._protocol import Accumulated

__all__ = ["accumulate_wide", "expresses_wide"]

try:  # pragma: no cover - exercised where numba is installed (a dependency)
    import numba
    from numba import njit, prange

    from . import _numba_cache

    _DISK_CACHE = _numba_cache.disk_cache(__file__)  # the checked per-user cache, never the package; or in memory
except Exception:  # noqa: BLE001
    numba = None  # type: ignore[assignment]


#: int16 exponent of zero and non-finite zoo operands (:data:`mmaemu.formats.EXPONENT_OF_ZERO`): real
#: exponents are in [-126, 127], so a sum with a zero operand is at most -3969 and two zeros give -8192.
_ZERO16 = -4096
#: A zoo block maximum below this means the block has no nonzero product (real sums are >= -252).
_NO_WIDE_PRODUCT_BELOW = -1000
#: The float64 bits kept when a block's sum is truncated to fp32's 24 significant bits.
_KEEP_24 = np.int64(~((1 << 29) - 1))


if numba is not None:
    from ._cpu_steps import add_terms, block_max, grid_exponent, tile_grid, tile_of, truncate, walk_tile

    @njit(inline="always")
    def _wide_block(state: Any, i: int, m: int, b0: int, b1: int) -> None:  # pragma: no cover - compiled
        """One block of one row of :func:`_kernel_wide`'s tile: ``c[i]`` becomes the block's result."""
        c, c_bits, emax, w, w_bits, va, ea, vb_t, eb_t, kseq, n0, nn, frac = state
        scale, unit, acc = w[0], w[1], w[2]
        scale_bits, unit_bits, acc_bits = w_bits[0], w_bits[1], w_bits[2]
        block_max(emax, _ZERO16, np.int16, ea, eb_t, kseq, m, b0, b1, n0, nn)
        for j in range(nn):
            bits = c_bits[i, j]
            e = np.int64(grid_exponent(np.int64(emax[j]), _NO_WIDE_PRODUCT_BELOW, -300,
                                       bits & np.int64(0x7FFFFFFFFFFFFFFF), ((bits >> 52) & 0x7FF) - 1023))
            scale_bits[j] = (frac - e + 1023) << 52
            unit_bits[j] = (e - frac + 1023) << 52
            acc[j] = np.trunc(c[i, j] * scale[j])  # exact
        add_terms(acc, truncate, va, vb_t, kseq, scale, m, b0, b1, n0, nn)
        for j in range(nn):
            acc_bits[j] = acc_bits[j] & _KEEP_24  # toward zero, 24 significant bits
            r = acc[j] * unit[j]
            if abs(r) < 2.0**-126:
                r = np.trunc(r * 2.0**149) * 2.0**-149  # fp32's subnormal grid
            c[i, j] = np.float64(np.float32(r)) + 0.0  # exact below 2**128; +0 for zero

    @njit(parallel=True, cache=_DISK_CACHE)
    def _kernel_wide(  # pragma: no cover - compiled
        va: np.ndarray, ea: np.ndarray, vb_t: np.ndarray, eb_t: np.ndarray, plan: Any, frac: int,
        tile: tuple[int, int], out: np.ndarray,
    ) -> None:
        """The zoo formats (fp16, bf16, tf32): the portable FP8 kernel's steps in float64 with int16 exponents.

        Products are exact in float64 (at most 22 bits); scaling by ``2**(F - E)`` is exact (E - F is
        in [-300, 300]); the truncated terms are integers below ``2**(F + 2)`` and B + 1 of them add
        exactly in float64. Normalising to fp32's 24 significant bits toward zero is a mask of the
        float64 significand; results below 2**-126 are truncated on fp32's grid 2**-149, and a
        result of 2**128 or more becomes +-Inf in the conversion to fp32.
        """
        grid = tile_grid(va.shape[0], vb_t.shape[1], tile)
        for t in prange(grid[2] * grid[3]):
            m0, mm, n0, nn = tile_of(t, grid)
            c = np.zeros((mm, nn), dtype=np.float64)  # fp32 values, held in float64
            w = np.empty((3, nn), dtype=np.float64)  # 2**(F - E), 2**(E - F), the block's sum
            state = (c, c.view(np.int64), np.empty(nn, dtype=np.int16), w, w.view(np.int64),
                     va, ea, vb_t, eb_t, plan[0], n0, nn, frac)
            walk_tile(_wide_block, state, c, plan, out, m0, n0, mm, nn)


#: The fp32 zoo kernel's operand exponent range: with e(a), e(b) in [-50, 60] every product is exact
#: in fp32 (16 to 22 significant bits, 2**-100 <= |p| < 2**122), E >= -100, so 2**(F - E) is an fp32
#: for F <= 26. Rows with an operand outside it (bf16 and tf32 only) go to the float64 kernel.
_FAST_EMIN, _FAST_EMAX = -50, 60


if numba is not None:

    @njit(parallel=True, cache=_DISK_CACHE)
    def _decode_zoo(  # pragma: no cover - compiled
        bits: np.ndarray, shift: int, is_fp16: bool, e_lo: int, e_hi: int, e_bias: int, e_zero: int,
        out_v: np.ndarray, out_e: np.ndarray, inf_rows: np.ndarray, wide_rows: np.ndarray, wide_cols: np.ndarray,
    ) -> None:
        """Decode zoo operands held as fp32 bit patterns (fp16 converted exactly, bf16 shifted, tf32 as is).

        Values: fp32, zeros kept, Inf and NaN as +0. Exponents (``out_e``'s integer type), floored
        at the format's emin (fp16 -14, else -126), clamped to [e_lo, e_hi] and plus ``e_bias``;
        ``e_zero`` for zeros and non-finite values. Rows holding an Inf are flagged in ``inf_rows``;
        rows and columns holding a finite nonzero value whose exponent is outside [e_lo, e_hi] in
        ``wide_rows`` and ``wide_cols`` (only ever set to True): the kernels' results there are
        recomputed.
        """
        n_rows, n_cols = bits.shape
        emin = -14 if is_fp16 else -126
        for r in prange(n_rows):
            row = bits[r]
            v_out = out_v[r].view(np.int32)
            n_inf = 0
            n_wide = 0
            for j in range(n_cols):
                x = np.int32(row[j]) << shift
                field = (x >> 23) & 0xFF
                live = field != 0xFF and (x & 0x7FFFFFFF) != 0
                e = max(field - 127, emin)
                v_out[j] = x if field != 0xFF else 0
                out_e[r, j] = min(max(e, e_lo), e_hi) + e_bias if live else e_zero
                n_inf += np.int32(field == 0xFF and (x & 0x7FFFFF) == 0)
                outside = live and (e < e_lo or e > e_hi)
                n_wide += np.int32(outside)
                if outside:
                    wide_cols[j] = True
            if n_inf:
                inf_rows[r] = True
            if n_wide:
                wide_rows[r] = True

    @njit(inline="always")
    def _zoo_block(state: Any, i: int, m: int, b0: int, b1: int) -> None:  # pragma: no cover - compiled
        """One block of one row of :func:`_kernel_zoo`'s tile: ``c[i]`` becomes the block's result."""
        c, c_bits, emax, w, w_bits, scale, scale_bits, iacc, va, ea, vb_t, eb_t, kseq, n0, nn, frac = state
        unit, scale64, cterm, acc = w[0], w[1], w[2], w[3]
        unit_bits, scale64_bits, acc_bits = w_bits[0], w_bits[1], w_bits[3]
        block_max(emax, _ZERO16, np.int16, ea, eb_t, kseq, m, b0, b1, n0, nn)
        for j in range(nn):
            bits = c_bits[i, j]
            e = np.int32(grid_exponent(np.int32(emax[j]), _NO_WIDE_PRODUCT_BELOW, -300, bits & 0x7FFFFFFF,
                                       ((bits >> 23) & 0xFF) - 127))
            # 2**(F - E) for the products (no product when E - F < -126: any value); c's term in
            # float64, exact
            scale_bits[j] = (min(max(frac - e, -126), 127) + 127) << 23
            unit_bits[j] = np.int64(e - frac + 1023) << 52
            scale64_bits[j] = np.int64(frac - e + 1023) << 52
            cterm[j] = np.trunc(np.float64(c[i, j]) * scale64[j])  # exact
            iacc[j] = 0
        add_terms(iacc, np.int32, va, vb_t, kseq, scale, m, b0, b1, n0, nn)  # exact in int32
        for j in range(nn):
            acc[j] = cterm[j] + np.float64(iacc[j])
            acc_bits[j] = acc_bits[j] & _KEEP_24
            # onto fp32's subnormal grid 2**-149 (a no-op from 2**-126 up, where the 24 kept bits
            # lie above it): branch-free, so the loop vectorises
            r = np.trunc((acc[j] * unit[j]) * 2.0**149) * 2.0**-149
            c[i, j] = np.float32(r) + np.float32(0.0)

    @njit(parallel=True, cache=_DISK_CACHE)
    def _kernel_zoo(  # pragma: no cover - compiled
        va: np.ndarray, ea: np.ndarray, vb_t: np.ndarray, eb_t: np.ndarray, plan: Any, frac: int,
        tile: tuple[int, int], out: np.ndarray,
    ) -> None:
        """The zoo formats with every operand exponent in [_FAST_EMIN, _FAST_EMAX]: fp32 products, int32 terms.

        ``int32(p * 2**(F - E))`` truncates toward zero exactly (the product is exact in fp32 and the
        scaling is by a power of two); the B terms (below ``2**(F + 2)``, at most ``2**31`` together)
        add exactly in int32, and c's term (float64) joins them in float64; normalising to fp32's 24
        significant bits is a mask of the float64 significand, as in :func:`_kernel_wide`.
        """
        grid = tile_grid(va.shape[0], vb_t.shape[1], tile)
        for t in prange(grid[2] * grid[3]):
            m0, mm, n0, nn = tile_of(t, grid)
            c = np.zeros((mm, nn), dtype=np.float32)
            w = np.empty((4, nn), dtype=np.float64)  # 2**(E - F), 2**(F - E), c's term, the block's sum
            scale = np.empty(nn, dtype=np.float32)  # 2**(F - E) for the products
            state = (c, c.view(np.int32), np.empty(nn, dtype=np.int16), w, w.view(np.int64), scale,
                     scale.view(np.int32), np.empty(nn, dtype=np.int32), va, ea, vb_t, eb_t, plan[0], n0, nn, frac)
            walk_tile(_zoo_block, state, c, plan, out, m0, n0, mm, nn)


def _decode_wide(x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(float64 values, int16 exponents) of an fp16, bf16 or tf32 matrix (non-finite values as zeros)."""
    d = decode_wide(x, wide_format_of(x))
    return d.value.numpy(), d.exponent.numpy()


def decode_zoo_rows(
    x: torch.Tensor, name: str, exponent: type[np.generic], e_range: tuple[int, int], e_bias: int, e_zero: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(fp32 values, exponents, rows with an Inf, rows and columns with an exponent outside
    ``e_range``) of a zoo matrix, in scratch buffers named after ``name``; the exponents of type
    ``exponent``, clamped to ``e_range`` and plus ``e_bias``, ``e_zero`` for zeros and non-finite
    values."""
    fmt = wide_format_of(x)
    if fmt is WideFormat.FP16:
        bits, shift = x.to(torch.float32).view(torch.int32).numpy(), 0
    elif fmt is WideFormat.BF16:
        bits, shift = x.view(torch.int16).numpy(), 16
    else:
        bits, shift = x.view(torch.int32).numpy(), 0
    if fmt is WideFormat.BF16:
        bits = bits.astype(np.int32) & 0xFFFF
    values = buffer(name + ".zoo.values", x.shape, np.float32)
    exponents = buffer(name + ".zoo.exponents", x.shape, exponent)
    inf_rows = np.zeros(x.shape[0], dtype=np.bool_)
    wide_rows = np.zeros(x.shape[0], dtype=np.bool_)
    wide_cols = np.zeros(x.shape[1], dtype=np.bool_)
    if x.numel():
        _decode_zoo(bits, shift, fmt is WideFormat.FP16, e_range[0], e_range[1], e_bias, e_zero,
                    values, exponents, inf_rows, wide_rows, wide_cols)
    return values, exponents, inf_rows, wide_rows, wide_cols


def expresses_wide(preset: Preset) -> bool:
    """Whether the zoo kernels compute ``preset`` for fp16, bf16 and tf32 operands (fp32 accumulator).

    They align ``c`` with the products, truncate, and normalise to fp32 by truncation; the terms
    (below ``2**(F + 2)``, B + 1 of them) add exactly in float64 for F <= 45 with F >= 23 (a
    normalisation to fp32's 24 bits).
    """
    return (preset.c_mode is CMode.ALIGNED and preset.rounding is Rounding.TRUNCATE
            and preset.frac_bits >= 23 and preset.frac_bits + 2 + (preset.block_size + 1).bit_length() <= 53)


def _fp32_kernel_expresses(preset: Preset) -> bool:
    """The fp32 zoo kernel's bounds: 2**(F - E) an fp32 for E >= -100, and B int32 terms below 2**31."""
    return preset.frac_bits <= 26 and preset.block_size * 2 ** (preset.frac_bits + 2) <= 2**31


def accumulate_wide(a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan) -> Accumulated:
    """:func:`mmaemu.backends._cpu.accumulate` for fp16, bf16 and tf32 operands (the zoo).

    The fp32 kernel (:func:`_kernel_zoo`) runs the call; rows of ``a`` or ``b`` with an operand
    exponent outside [-50, 60] (bf16 and tf32 only: very large, tiny or subnormal values) are then
    recomputed by the float64 kernel (:func:`_kernel_wide`); rows with an Inf are the dispatcher's.
    """
    if _use_vector(preset):
        return _accumulate_vector(a, b, preset, plan)
    if not _fp32_kernel_expresses(preset):
        return Accumulated(_accumulate_float64(a, b, preset, plan), bool(torch.isinf(a).any() or torch.isinf(b).any()))
    m, n = a.shape[0], b.shape[0]
    out = np.zeros((m, n), dtype=np.float32)
    with launch_guard():
        va, ea, _, a_wide, _ = decode_zoo_rows(a.detach().contiguous(), "a", np.int16, (_FAST_EMIN, _FAST_EMAX), 0, _ZERO16)
        vb_t, eb_t, _, _, b_wide = decode_zoo_rows(b.detach().t().contiguous(), "b", np.int16, (_FAST_EMIN, _FAST_EMAX), 0, _ZERO16)  # b's rows: columns here
        if m and n and plan.k:
            _kernel_zoo(va, ea, vb_t, eb_t, flatten(plan, preset.block_size), preset.frac_bits,
                        tiles(m, n, numba.get_num_threads()), out)
    result = torch.from_numpy(out)
    if m and n and plan.k:
        _recompute_wide(result, a, b, a_wide, b_wide, preset, plan)
    return Accumulated(result, bool(torch.isinf(a).any() or torch.isinf(b).any()))


def _recompute_wide(result: torch.Tensor, a: torch.Tensor, b: torch.Tensor, a_wide: np.ndarray, b_wide: np.ndarray,
                    preset: Preset, plan: AccumulationPlan) -> None:
    """``result``'s rows (``a_wide``) and columns (``b_wide``) recomputed by the float64 kernel, in place:
    those whose operands a fast kernel's exponent range does not take."""
    rows = torch.from_numpy(np.nonzero(a_wide)[0])
    cols = torch.from_numpy(np.nonzero(b_wide)[0])
    if rows.numel():
        result[rows] = _accumulate_float64(a[rows], b, preset, plan)
    if cols.numel():
        result[:, cols] = _accumulate_float64(a, b[cols], preset, plan)


def _use_vector(preset: Preset) -> bool:
    """Whether zoo operands go to the vector kernel (:mod:`mmaemu.backends._cpu_zoo_vector`): where the
    preset fits it; ``MMAEMU_CPU_PORTABLE=1`` selects the loop kernels here instead (the same bits;
    the tests run both)."""
    return _cpu_zoo_vector.expresses(preset) and not env_flag("MMAEMU_CPU_PORTABLE")


def _accumulate_vector(a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan) -> Accumulated:
    """:func:`accumulate_wide` on the vector kernel, then the rows and columns with an operand outside
    its exponent range recomputed in float64."""
    m, n, k = a.shape[0], b.shape[0], plan.k
    inf = bool(torch.isinf(a).any() or torch.isinf(b).any())
    if not (m and n and k):
        return Accumulated(torch.zeros((m, n), dtype=torch.float32), inf)
    flat = flatten_plan(plan)
    starts, stops, first = _cpu_fp8.block_bounds(list(flat.chain_starts), preset.block_size)
    rows = a.detach()
    if not flat.identity:
        rows = rows.index_select(1, flat.k_order)  # A's k in plan order, as the panels'
    z = _cpu_zoo_vector
    n_panels = z.panels(n)
    out = np.zeros((m, n), dtype=np.float32)
    with launch_guard():
        va, ea, _, a_wide, _ = decode_zoo_rows(rows.contiguous(), "a", np.int8, (z.EMIN, z.EMAX), z.BIAS, z.ZERO)
        vb, eb, _, b_wide, _ = decode_zoo_rows(b.detach().contiguous(), "b", np.int8, (z.EMIN, z.EMAX), z.BIAS, z.ZERO)
        bv = aligned_buffer("zoo.cols.values", (n_panels, k, z.PANEL), np.float32)
        be = aligned_buffer("zoo.cols.exponents", (n_panels, k, z.PANEL), np.int8)
        z.panel_layout(vb, eb, flat.k_order.numpy(), bv, be)
        z.kernel(va, ea, _cpu_simd.broadcast_table(), bv, be, starts, stops, first,
                 np.asarray(flat.chain_part, np.int64), len(plan.parts), np.asarray(flat.order, np.int64),
                 np.asarray(flat.role, np.int64), preset.frac_bits,
                 panel_rows(m, n_panels, numba.get_num_threads()), z.may_wrap(preset), out)
    result = torch.from_numpy(out)
    _recompute_wide(result, a, b, a_wide, b_wide, preset, plan)
    return Accumulated(result, inf)


def _accumulate_float64(a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan) -> torch.Tensor:
    """The float64 zoo kernel (any operand exponent; Inf operands counted as zeros)."""
    m, n = a.shape[0], b.shape[0]
    out = np.zeros((m, n), dtype=np.float32)
    va, ea = _decode_wide(a.detach().contiguous())
    vb_t, eb_t = _decode_wide(b.detach().t().contiguous())
    if m and n and plan.k:
        with launch_guard():
            _kernel_wide(va, ea, vb_t, eb_t, flatten(plan, preset.block_size), preset.frac_bits,
                         tiles(m, n, numba.get_num_threads()), out)
    return torch.from_numpy(out)
