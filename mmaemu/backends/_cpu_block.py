"""The cpu backend's block-scaled FP8 kernel: every k-tile's chain scaled into an fp32 accumulator in one pass.

A block-scaled GEMM (:mod:`mmaemu.kernels._block_arith`) runs a fresh tensor-core chain per k-tile and combines
each chain result ``d`` with its k-tile's two fp32 scales. Run as one backend call per k-tile, each call
re-reads and re-writes the whole ``[M, N]`` output and the combination is a pass of its own: several times
one GEMM's time. This kernel computes the chains exactly as the AVX-512 FP8 kernel does (its
:func:`~mmaemu.backends._cpu_fp8.tile_chain`, the same code) and applies the step to each tile while the chain
results are in cache:

- ``SCALES_FIRST_FMA``: ``s = rn(sa * sb)``, ``acc = fma(s, d, acc)``;
- ``SCALES_FIRST_SEPARATE``: ``acc = rn(acc + rn(s * d))``;
- ``CHAIN_FIRST_FMA``: ``t = rn(d * x1)``, ``acc = fma(t, x2, acc)`` (``x1``, ``x2``: the two scales in the
  model's order);
- ``CHAIN_FIRST_SEPARATE``: ``acc = rn(acc + rn(t * x2))``;

from ``acc = +0`` (every step adds), or with the first k-tile's product stored (no addition). The fp32
multiplications and additions are numba's (IEEE, round to nearest even; no fast-math, so no contraction)
and the fused multiply-add is LLVM's ``llvm.fma.f32`` (one rounding: ``vfmadd`` on an x86-64 CPU with
FMA, every CPU this kernel runs on). Subnormals are kept (the caller checks that the CPU does not flush
them). NaN codes count as zeros here, as in every cpu kernel: the caller writes the canonical NaN where a
row of either operand holds one (:func:`accumulate_block`); E4M3 has no Inf code. The reference definition
of the step is :mod:`mmaemu.kernels._block_arith`'s; the differential tests compare the two bit for bit.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np
import torch

from .._host import env_flag
from ..formats import Fp8Format
from ..presets import Preset
from . import _cpu_fp8, _cpu_simd, _numba_cache
from ._cpu_scratch import aligned_buffer, launch_guard, panel_rows

__all__ = ["Step", "accumulate_block", "available"]


class Step(enum.IntEnum):
    """The combination step (the kernel's integer code)."""

    SCALES_FIRST_FMA = 0
    SCALES_FIRST_SEPARATE = 1
    CHAIN_FIRST_FMA = 2
    CHAIN_FIRST_SEPARATE = 3


_HAVE_NUMBA, _DISK_CACHE = _numba_cache.kernel_cache(__file__)  # the checked per-user cache, never the package


def available(preset: Preset) -> bool:
    """Whether this kernel computes chains of ``preset`` here: the AVX-512 FP8 kernel's conditions
    (:func:`mmaemu.backends._cpu_fp8.expresses` and ``available``, and ``MMAEMU_CPU_PORTABLE`` unset)."""
    return (_HAVE_NUMBA and _cpu_fp8.expresses(preset) and _cpu_fp8.available()
            and not env_flag("MMAEMU_CPU_PORTABLE"))


if _HAVE_NUMBA:  # pragma: no cover - compiled
    import numba
    from llvmlite import ir  # type: ignore[import-untyped]
    from numba import njit, prange, types
    from numba.core import cgutils
    from numba.extending import intrinsic

    from ._cpu_fp8 import PANEL, ZERO8, flat_inputs, tile_chain

    v: Any = _cpu_simd  # the vector intrinsics (typed Any: numba, not mypy, checks their calls)

    @intrinsic
    def fma32(typingctx: Any, x: Any, y: Any, z: Any) -> Any:
        """``fma(x, y, z)`` of three fp32 values, rounded once (``llvm.fma.f32``)."""
        if not all(t == types.float32 for t in (x, y, z)):
            return None
        sig = types.float32(types.float32, types.float32, types.float32)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            f32 = ir.FloatType()
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(f32, [f32, f32, f32]), "llvm.fma.f32")
            return builder.call(fn, args)

        return sig, codegen

    fma: Any = fma32  # typed Any: numba, not mypy, checks the intrinsic's calls

    @njit(inline="always")
    def _step(acc: Any, d: Any, sa: Any, sb: Any, step: int, first: bool) -> Any:
        """One k-tile's step on one output (fp32 throughout)."""
        if step <= 1:
            x = sa * sb  # rn(sa * sb)
            y = d
        else:
            x = d * sa  # rn(d * x1): the caller passes the scales in the model's order
            y = sb
        if first:
            return x * y  # the first product stored, no addition
        if step == 0 or step == 2:
            return fma(x, y, acc)
        return acc + x * y  # two roundings

    @njit(parallel=True, cache=_DISK_CACHE)
    def block_kernel(ca: np.ndarray, tables: np.ndarray, bc: np.ndarray, bv: np.ndarray, ebp: np.ndarray,
                     blk_start: np.ndarray, blk_stop: np.ndarray, chain_blk: np.ndarray, s_rows: np.ndarray,
                     s_cols: np.ndarray, rows_first: bool, step: int, store_first: bool, frac: int, m_tile: int,
                     out: np.ndarray, transposed: bool) -> None:
        """fp32 accumulators of a block-scaled GEMM from the row side's codes ``ca [R, K]`` and the panels.

        Chain ``ch`` is the k-tile of blocks ``chain_blk[ch] .. chain_blk[ch + 1]``, computed by the FP8 kernel's
        own chain computation (:func:`mmaemu.backends._cpu_fp8.tile_chain`, from +0); its scales are
        ``s_rows[r, ch]`` (the row side's) and ``s_cols[c, ch]`` (the panels', ``n_panels * PANEL`` rows); ``rows_first``: the row side's scale is the step's first (``sa`` of :class:`Step`). ``out`` is
        ``[rows, columns]``, or its transpose with ``transposed``.
        """
        m_rows, k_row = ca.shape
        n_cols = out.shape[0] if transposed else out.shape[1]
        n_panels, k_all = ebp.shape[0], ebp.shape[1]
        keep = np.int32(~((1 << (23 - frac)) - 1))
        ca_f, values, words, e_at, bv_f, eb_f = flat_inputs(ca, tables, bv, ebp)
        for t in prange(((m_rows + m_tile - 1) // m_tile) * n_panels):
            m0 = (t // n_panels) * m_tile
            mm = min(m_tile, m_rows - m0)
            panel = t % n_panels
            c0 = panel * PANEL
            acc = np.zeros((mm, PANEL), dtype=np.float32)
            c = v.aligned_zeros(mm * PANEL)
            start = v.splat8(ZERO8)
            zero = v.splat8(0)
            for ch in range(chain_blk.shape[0] - 1):
                tile_chain(c, ca_f, values, words, e_at, bc, bv_f, eb_f, blk_start, blk_stop, chain_blk[ch],
                           chain_blk[ch + 1], m0, mm, k_row, panel, k_all, frac, keep, start, zero)
                first = store_first and ch == 0
                for i in range(mm):
                    sr = s_rows[m0 + i, ch]
                    for j in range(PANEL):
                        sc = s_cols[c0 + j, ch]
                        if rows_first:
                            acc[i, j] = _step(acc[i, j], c[i * PANEL + j], sr, sc, step, first)
                        else:
                            acc[i, j] = _step(acc[i, j], c[i * PANEL + j], sc, sr, step, first)
            for i in range(mm):
                for j in range(min(PANEL, n_cols - c0)):
                    if transposed:
                        out[c0 + j, m0 + i] = acc[i, j]
                    else:
                        out[m0 + i, c0 + j] = acc[i, j]


def accumulate_block(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                     chain_starts: list[int], preset: Preset, step: Step, a_first: bool,
                     store_first: bool) -> torch.Tensor:
    """fp32 ``[M, N]`` of a block-scaled GEMM on the CPU, for a preset :func:`available` says this kernel runs.

    Args:
        a: ``[M, K]`` E4M3 (CPU).
        b: ``[N, K]`` E4M3 (CPU).
        scale_a: fp32 ``[M, T]``: row m's scale for each of the T chains.
        scale_b: fp32 ``[N, T]``: column n's scale for each chain.
        chain_starts: the chains' k boundaries ``[0, ..., K]`` (T + 1 of them; k in order).
        preset: the chains' instruction.
        step: the combination step.
        a_first: ``scale_a`` is the step's first scale (``sa`` of :class:`Step`), else ``scale_b``.
        store_first: the first chain's product is stored instead of added to +0.

    Returns:
        fp32 ``[M, N]``; NaN codes counted as zeros (the caller applies the NaN rule); +0 for K = 0.
    """
    m, n = a.shape[0], b.shape[0]
    out = np.zeros((m, n), dtype=np.float32)
    if not (m and n and len(chain_starts) > 1):
        return torch.from_numpy(out)
    k = a.shape[1]
    starts, stops, first = _cpu_fp8.block_bounds(list(chain_starts), preset.block_size)
    lanes_over_a = m >= _cpu_fp8.PANEL  # as the FP8 kernel: the panels take the side with more rows
    rows, cols = (b, a) if lanes_over_a else (a, b)
    s_rows, s_cols = (scale_b, scale_a) if lanes_over_a else (scale_a, scale_b)
    n_panels = _cpu_fp8.panels(cols.shape[0])
    padded = np.zeros((n_panels * _cpu_fp8.PANEL, s_cols.shape[1]), dtype=np.float32)
    padded[: s_cols.shape[0]] = s_cols.numpy()
    codes_r = rows.detach().view(torch.uint8).contiguous().numpy()
    codes_c = cols.detach().view(torch.uint8).contiguous().numpy()
    e4m3 = Fp8Format.E4M3
    tables = _cpu_fp8.code_tables(e4m3.mantissa_bits, e4m3.bias, e4m3.value.has_inf)
    with launch_guard():
        bv = aligned_buffer("block.cols.values", (n_panels, k, _cpu_fp8.PANEL), np.float32)
        eb = aligned_buffer("block.cols.exponents", (n_panels, k, 3, _cpu_fp8.PANEL), np.int8)
        inf_c = np.zeros(n_panels * -(-k // _cpu_fp8.PANEL), dtype=np.bool_)
        _cpu_fp8.decode_b_panels(codes_c, np.arange(k, dtype=np.int32), tables, bv, eb, inf_c)
        m_tile = panel_rows(rows.shape[0], n_panels, numba.get_num_threads())
        block_kernel(codes_r, tables, _cpu_simd.broadcast_table(), bv, eb, starts, stops, first,
                     np.ascontiguousarray(s_rows.numpy(), dtype=np.float32), padded, a_first != lanes_over_a,
                     int(step), store_first, preset.frac_bits, m_tile, out, lanes_over_a)
    return torch.from_numpy(out)
