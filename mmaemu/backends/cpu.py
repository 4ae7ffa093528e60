"""The compiled CPU backend: the reference model's bits from integer arithmetic compiled by numba.

FP8 operands go to one of two kernels with the same bits. On a CPU with AVX-512F and BW,
:mod:`mmaemu.backends.cpu_fp8` truncates each term with a fused multiply-add rounded toward zero
into an accumulator offset to the block's grid (two per product, no scaling or truncation
instructions; see there). Elsewhere, or with ``MMAEMU_CPU_PORTABLE=1``, the portable kernel
:func:`_kernel` below runs:

Each product ``a*b`` of FP8 values is exact in fp32 (at most 8 significant bits); its exponent
``e(a) + e(b)`` (int8 operands, 64 lanes to an AVX-512 vector) gives the block maximum E; scaling by the power of two
``2**(F - E)`` is exact, ``trunc`` is the truncation toward zero of the sign-magnitude term, and the
block's terms (integers below ``2**(F + 2)``) add exactly in fp32 for the shipped presets
(F + 2 + log2(B + 1) <= 24). Normalising to F + 1 significant bits toward zero is a mask of the
fp32 significand. So every step is exact fp32 arithmetic that vectorises (no variable shifts).
Both passes over a block (its maximum, then its terms) take four k at a time, so each vector of
the accumulator row is loaded and stored once per four products. The output is tiled over M and
N (wide N tiles: long vector loops) so that a block of B is reused from cache by every row of the
tile, and the tiles are spread over all cores (``prange``). The FP8 codes are decoded by integer
bit arithmetic (vectorised; checked against :func:`mmaemu.formats.decode_fp8` on all 256 codes).
Memory: the operands re-laid out as fp32 values and int8 exponents (5 bytes per FP8 operand,
plus 1 byte per element of B for its transposed codes) plus the output; no ``[M, N, K]``
intermediate (the AVX-512 kernel: 12 bytes per element of the row side, 9 per element of the
panel side, :func:`_accumulate_avx512`). These operand buffers are kept per thread between calls (up to
``SCRATCH_LIMIT_BYTES`` each; :func:`release_scratch` frees them): fresh memory would cost a page
fault every 4 KiB, more than the decoding itself. Calls from several threads are safe (the buffers
are per thread; kernel launches are serialised under numba's ``workqueue`` threading layer).

The kernels share their pieces as inline numba functions: the FP8 code decoder and the
combination of split parts (:mod:`mmaemu.backends.cpu_fp8`), the block maxima of the exponent sums
(:func:`_block_max8`, :func:`_block_max16`) and the addition of chain results (:func:`_add_chain`).

Exactness: chain results and split parts are added in fp32 (IEEE round to nearest even; numba
without fast-math, so no contraction). Inf codes (E5M2) are zeros in the kernel; the outputs whose
row of A or of B holds one are then recomputed by the reference backend, which implements the IEEE
rules. NaN codes are zero here and the caller applies the NaN rule. A block result of 2**128 or more cannot occur for K < 2**90, so the Inf rule of
:func:`mmaemu.model.block_fma` needs no code here.

[Note: why numba] A C++ extension would need a compiler at install time; numba compiles at first
use, caches the machine code on disk (``cache=True``), and is a plain PyPI dependency.
"""

from __future__ import annotations

import contextlib
import math
import threading

import numpy as np
import torch

from ..accumulation import AccumulationPlan, flatten_plan
from ..errors import BackendUnavailableError
from ..formats import (
    FP8_DTYPES,
    Fp8Format,
    WideFormat,
    decode_wide,
    fp8_format_of,
    wide_format_of,
)
from ..host import env_flag
from ..model import block_sum_exact_in_fp32
from ..presets import CMode, Preset, Rounding
from . import cpu_fp8, reference

__all__ = ["NAME", "SCRATCH_LIMIT_BYTES", "accumulate", "available", "expresses", "release_scratch"]

NAME = "cpu"

try:  # pragma: no cover - exercised where numba is installed (a dependency)
    import numba
    from numba import njit, prange

    from . import numba_cache

    numba_cache.install()  # compiled code in the per-user cache, never in the package

    _NUMBA_ERROR: str | None = None
except Exception as exc:  # noqa: BLE001
    numba = None  # type: ignore[assignment]
    _NUMBA_ERROR = f"numba is not importable: {exc}"


def expresses(preset: Preset) -> bool:
    """Whether the kernel computes ``preset`` (others are delegated to the reference backend whole).

    The kernel aligns ``c`` with the products, truncates, and adds a block's terms (``c`` included) in
    fp32, which is exact only within :func:`mmaemu.model.block_sum_exact_in_fp32`.
    """
    return (preset.c_mode is CMode.ALIGNED and preset.rounding is Rounding.TRUNCATE
            and block_sum_exact_in_fp32(preset, with_c=True))


def available() -> tuple[bool, str]:
    """(usable, reason) of the compiled CPU backend."""
    if _NUMBA_ERROR is not None:
        return False, _NUMBA_ERROR
    return True, f"numba {numba.__version__}, {numba.get_num_threads()} threads"


#: int8 exponent of zero and non-finite operands. Real exponents are in [-14, 15], so real
#: exponent sums are in [-28, 30]; a sum with a zero operand is at most -64 + 15 = -49 and at least
#: -128 (it fits int8 and never wins a block maximum against a real product).
_ZERO8 = -64
#: A block maximum below this means the block has no nonzero product.
_NO_PRODUCT_BELOW = -40

#: int16 exponent of zero and non-finite zoo operands (:data:`mmaemu.formats.EXPONENT_OF_ZERO`): real
#: exponents are in [-126, 127], so a sum with a zero operand is at most -3969 and two zeros give -8192.
_ZERO16 = -4096
#: A zoo block maximum below this means the block has no nonzero product (real sums are >= -252).
_NO_WIDE_PRODUCT_BELOW = -1000


if numba is not None:
    from .cpu_fp8 import combine_parts, decode_code

    @njit(inline="always")
    def _block_max8(  # pragma: no cover - compiled
        emax: np.ndarray, ea: np.ndarray, eb_t: np.ndarray, kseq: np.ndarray, m: int, b0: int, b1: int,
        n0: int, nn: int,
    ) -> None:
        """``emax[j]`` = the block's maximum of ``e(a[m, k]) + e(b[k, n0 + j])`` (int8), four k at a time."""
        emax[:] = _ZERO8
        idx = b0
        while idx + 4 <= b1:
            k0, k1, k2, k3 = kseq[idx], kseq[idx + 1], kseq[idx + 2], kseq[idx + 3]
            e0, e1, e2, e3 = ea[m, k0], ea[m, k1], ea[m, k2], ea[m, k3]
            r0, r1 = eb_t[k0, n0:n0 + nn], eb_t[k1, n0:n0 + nn]
            r2, r3 = eb_t[k2, n0:n0 + nn], eb_t[k3, n0:n0 + nn]
            for j in range(nn):
                emax[j] = max(emax[j], max(max(np.int8(e0 + r0[j]), np.int8(e1 + r1[j])),
                                           max(np.int8(e2 + r2[j]), np.int8(e3 + r3[j]))))
            idx += 4
        while idx < b1:
            k0 = kseq[idx]
            e0 = ea[m, k0]
            r0 = eb_t[k0, n0:n0 + nn]
            for j in range(nn):
                emax[j] = max(emax[j], np.int8(e0 + r0[j]))
            idx += 1

    @njit(inline="always")
    def _block_max16(  # pragma: no cover - compiled
        emax: np.ndarray, ea: np.ndarray, eb_t: np.ndarray, kseq: np.ndarray, m: int, b0: int, b1: int,
        n0: int, nn: int,
    ) -> None:
        """:func:`_block_max8` for the zoo kernels' int16 exponents."""
        emax[:] = _ZERO16
        idx = b0
        while idx + 4 <= b1:
            k0, k1, k2, k3 = kseq[idx], kseq[idx + 1], kseq[idx + 2], kseq[idx + 3]
            e0, e1, e2, e3 = ea[m, k0], ea[m, k1], ea[m, k2], ea[m, k3]
            r0, r1 = eb_t[k0, n0:n0 + nn], eb_t[k1, n0:n0 + nn]
            r2, r3 = eb_t[k2, n0:n0 + nn], eb_t[k3, n0:n0 + nn]
            for j in range(nn):
                emax[j] = max(emax[j], max(max(np.int16(e0 + r0[j]), np.int16(e1 + r1[j])),
                                           max(np.int16(e2 + r2[j]), np.int16(e3 + r3[j]))))
            idx += 4
        while idx < b1:
            k0 = kseq[idx]
            e0 = ea[m, k0]
            r0 = eb_t[k0, n0:n0 + nn]
            for j in range(nn):
                emax[j] = max(emax[j], np.int16(e0 + r0[j]))
            idx += 1

    @njit(inline="always")
    def _add_chain(partial: np.ndarray, p: int, c: np.ndarray) -> None:  # pragma: no cover - compiled
        """``partial[p] += c`` in fp32 (a chain's result joins its part; ``c`` may hold fp32 values in float64)."""
        for i in range(c.shape[0]):
            for j in range(c.shape[1]):
                partial[p, i, j] = partial[p, i, j] + np.float32(c[i, j])

    @njit(parallel=True, cache=True)
    def _decode_rows(  # pragma: no cover - compiled
        codes: np.ndarray, man_bits: int, bias: int, has_inf: bool,
        out_v: np.ndarray, out_e: np.ndarray, inf_rows: np.ndarray,
    ) -> None:
        """Decode FP8 codes ``[R, C]`` bit by bit into fp32 values and int8 exponents.

        Integer arithmetic only (it vectorises): normals ``(field - bias + 127) << 23``, subnormals
        normalised by their leading bit; zeros keep their sign and get exponent ``_ZERO8``; Inf and
        NaN codes get value +0 and exponent ``_ZERO8``, and rows holding an Inf code are flagged.
        """
        n_rows, n_cols = codes.shape
        nonfinite_from = 0x7C if has_inf else 0x7F  # smallest non-finite magnitude code
        for r in prange(n_rows):
            row = codes[r]
            bits_out = out_v[r].view(np.int32)
            exp_out = out_e[r]
            n_inf = 0
            for j in range(n_cols):
                code = np.int32(row[j])
                mag = code & 0x7F
                bits, exponent, _ = decode_code(code, man_bits, bias, nonfinite_from)
                sign = (code >> 7) << 31 if mag < nonfinite_from else 0
                bits_out[j] = bits | sign
                exp_out[j] = exponent
                n_inf += np.int32(has_inf and mag == nonfinite_from)
            if n_inf:
                inf_rows[r] = True

    @njit(parallel=True, cache=True)
    def _transpose_codes(src: np.ndarray, dst: np.ndarray) -> None:  # pragma: no cover - compiled
        """``dst[k, n] = src[n, k]`` for uint8 codes, in 64 x 64 tiles that stay in L1 (parallel)."""
        n_rows, k_cols = src.shape
        tile = 64
        k_tiles = (k_cols + tile - 1) // tile
        for t in prange(((n_rows + tile - 1) // tile) * k_tiles):
            n0 = (t // k_tiles) * tile
            k0 = (t % k_tiles) * tile
            for k in range(k0, min(k0 + tile, k_cols)):
                for n in range(n0, min(n0 + tile, n_rows)):
                    dst[k, n] = src[n, k]

    @njit(parallel=True, cache=True)
    def _kernel(  # pragma: no cover - compiled
        va: np.ndarray, ea: np.ndarray, vb_t: np.ndarray, eb_t: np.ndarray,
        kseq: np.ndarray, chain_start: np.ndarray, chain_part: np.ndarray,
        n_parts: int, order: np.ndarray, role: np.ndarray, block: int, frac: int,
        m_tile: int, n_tile: int, out: np.ndarray,
    ) -> None:
        m_rows = va.shape[0]
        n_cols = vb_t.shape[1]
        n_tiles = (n_cols + n_tile - 1) // n_tile
        m_tiles = (m_rows + m_tile - 1) // m_tile
        n_chains = chain_part.shape[0]
        keep_mask = np.int32(~((1 << (23 - frac)) - 1))  # F fraction bits of an fp32 significand
        # one task per (M tile, N tile): a block of B is loaded once from memory and reused by
        # every row of the M tile while it sits in cache
        for t in prange(m_tiles * n_tiles):
            m0 = (t // n_tiles) * m_tile
            mm = min(m_tile, m_rows - m0)
            n0 = (t % n_tiles) * n_tile
            nn = min(n_tile, n_cols - n0)
            partial = np.zeros((n_parts, mm, nn), dtype=np.float32)
            c = np.zeros((mm, nn), dtype=np.float32)
            c_bits = c.view(np.int32)
            emax = np.empty(nn, dtype=np.int8)
            scale = np.empty(nn, dtype=np.float32)
            scale_bits = scale.view(np.int32)
            unit = np.empty(nn, dtype=np.float32)
            unit_bits = unit.view(np.int32)
            acc = np.empty(nn, dtype=np.float32)
            acc_bits = acc.view(np.int32)
            for ch in range(n_chains):
                c[:, :] = 0.0
                start, stop = chain_start[ch], chain_start[ch + 1]
                for b0 in range(start, stop, block):
                    b1 = min(b0 + block, stop)
                    for i in range(mm):
                        m = m0 + i
                        # E over the products: int8 sums e(a) + e(b), four k at a time (64 lanes a vector)
                        _block_max8(emax, ea, eb_t, kseq, m, b0, b1, n0, nn)
                        # E = max(c's exponent (c != 0), the products'); 2**(F - E) and 2**(E - F) as
                        # fp32 bit patterns (E clamped where nothing is nonzero)
                        for j in range(nn):
                            bits = c_bits[i, j]
                            e = np.int32(emax[j])
                            if e < _NO_PRODUCT_BELOW:
                                e = np.int32(-100)
                            if bits & 0x7FFFFFFF:
                                e = max(e, np.int32(max(((bits >> 23) & 0xFF) - 127, -126)))
                            e = min(e, np.int32(100))
                            scale_bits[j] = (frac - e + 127) << 23
                            unit_bits[j] = (e - frac + 127) << 23
                            acc[j] = np.trunc(c[i, j] * scale[j])  # exact
                        # the truncated terms, four k at a time: every term and sum is an exact integer
                        idx = b0
                        while idx + 4 <= b1:
                            k0, k1, k2, k3 = kseq[idx], kseq[idx + 1], kseq[idx + 2], kseq[idx + 3]
                            v0, v1, v2, v3 = va[m, k0], va[m, k1], va[m, k2], va[m, k3]
                            if v0 != 0.0 or v1 != 0.0 or v2 != 0.0 or v3 != 0.0:
                                q0, q1 = vb_t[k0, n0:n0 + nn], vb_t[k1, n0:n0 + nn]
                                q2, q3 = vb_t[k2, n0:n0 + nn], vb_t[k3, n0:n0 + nn]
                                for j in range(nn):
                                    s = scale[j]
                                    acc[j] += ((np.trunc((v0 * q0[j]) * s) + np.trunc((v1 * q1[j]) * s))
                                               + (np.trunc((v2 * q2[j]) * s) + np.trunc((v3 * q3[j]) * s)))
                            idx += 4
                        while idx < b1:
                            k0 = kseq[idx]
                            v0 = va[m, k0]
                            if v0 != 0.0:
                                q0 = vb_t[k0, n0:n0 + nn]
                                for j in range(nn):
                                    acc[j] += np.trunc((v0 * q0[j]) * scale[j])
                            idx += 1
                        for j in range(nn):
                            # truncate toward zero to F + 1 significant bits (a mask of the significand),
                            # scale back, and make an exact zero +0
                            acc_bits[j] = acc_bits[j] & keep_mask
                            c[i, j] = acc[j] * unit[j] + np.float32(0.0)
                _add_chain(partial, chain_part[ch], c)  # fp32: chain results in K order from +0
            combine_parts(partial, order, role, out, m0, n0, mm, nn)


if numba is not None:

    @njit(parallel=True, cache=True)
    def _kernel_wide(  # pragma: no cover - compiled
        va: np.ndarray, ea: np.ndarray, vb_t: np.ndarray, eb_t: np.ndarray,
        kseq: np.ndarray, chain_start: np.ndarray, chain_part: np.ndarray,
        n_parts: int, order: np.ndarray, role: np.ndarray, block: int, frac: int,
        m_tile: int, n_tile: int, out: np.ndarray,
    ) -> None:
        """The zoo formats (fp16, bf16, tf32): :func:`_kernel`'s loops in float64 with int16 exponents.

        Products are exact in float64 (at most 22 bits); scaling by ``2**(F - E)`` is exact (E - F is
        in [-300, 300]); the truncated terms are integers below ``2**(F + 2)`` and B + 1 of them add
        exactly in float64. Normalising to fp32's 24 significant bits toward zero is a mask of the
        float64 significand; results below 2**-126 are truncated on fp32's grid 2**-149, and a
        result of 2**128 or more becomes +-Inf in the conversion to fp32.
        """
        m_rows = va.shape[0]
        n_cols = vb_t.shape[1]
        n_tiles = (n_cols + n_tile - 1) // n_tile
        m_tiles = (m_rows + m_tile - 1) // m_tile
        n_chains = chain_part.shape[0]
        keep_mask = np.int64(~((1 << 29) - 1))  # 24 significant bits of a float64
        for t in prange(m_tiles * n_tiles):
            m0 = (t // n_tiles) * m_tile
            mm = min(m_tile, m_rows - m0)
            n0 = (t % n_tiles) * n_tile
            nn = min(n_tile, n_cols - n0)
            partial = np.zeros((n_parts, mm, nn), dtype=np.float32)
            c = np.zeros((mm, nn), dtype=np.float64)  # fp32 values, held in float64
            c_bits = c.view(np.int64)
            emax = np.empty(nn, dtype=np.int16)
            scale = np.empty(nn, dtype=np.float64)
            scale_bits = scale.view(np.int64)
            unit = np.empty(nn, dtype=np.float64)
            unit_bits = unit.view(np.int64)
            acc = np.empty(nn, dtype=np.float64)
            acc_bits = acc.view(np.int64)
            for ch in range(n_chains):
                c[:, :] = 0.0
                start, stop = chain_start[ch], chain_start[ch + 1]
                for b0 in range(start, stop, block):
                    b1 = min(b0 + block, stop)
                    for i in range(mm):
                        m = m0 + i
                        _block_max16(emax, ea, eb_t, kseq, m, b0, b1, n0, nn)
                        for j in range(nn):
                            bits = c_bits[i, j]
                            e = np.int64(emax[j])
                            if e < _NO_WIDE_PRODUCT_BELOW:
                                e = np.int64(-300)
                            if bits & np.int64(0x7FFFFFFFFFFFFFFF):
                                # c's exponent, floored at -126 (c holds an fp32 value)
                                e = max(e, max(((bits >> 52) & 0x7FF) - 1023, np.int64(-126)))
                            scale_bits[j] = (frac - e + 1023) << 52
                            unit_bits[j] = (e - frac + 1023) << 52
                            acc[j] = np.trunc(c[i, j] * scale[j])  # exact
                        idx = b0
                        while idx + 4 <= b1:
                            k0, k1, k2, k3 = kseq[idx], kseq[idx + 1], kseq[idx + 2], kseq[idx + 3]
                            v0, v1, v2, v3 = va[m, k0], va[m, k1], va[m, k2], va[m, k3]
                            if v0 != 0.0 or v1 != 0.0 or v2 != 0.0 or v3 != 0.0:
                                q0, q1 = vb_t[k0, n0:n0 + nn], vb_t[k1, n0:n0 + nn]
                                q2, q3 = vb_t[k2, n0:n0 + nn], vb_t[k3, n0:n0 + nn]
                                for j in range(nn):
                                    sc = scale[j]
                                    acc[j] += ((np.trunc((v0 * q0[j]) * sc) + np.trunc((v1 * q1[j]) * sc))
                                               + (np.trunc((v2 * q2[j]) * sc) + np.trunc((v3 * q3[j]) * sc)))
                            idx += 4
                        while idx < b1:
                            k0 = kseq[idx]
                            v0 = va[m, k0]
                            if v0 != 0.0:
                                q0 = vb_t[k0, n0:n0 + nn]
                                for j in range(nn):
                                    acc[j] += np.trunc((v0 * q0[j]) * scale[j])
                            idx += 1
                        for j in range(nn):
                            acc_bits[j] = acc_bits[j] & keep_mask  # toward zero, 24 significant bits
                            r = acc[j] * unit[j]
                            if abs(r) < 2.0**-126:
                                r = np.trunc(r * 2.0**149) * 2.0**-149  # fp32's subnormal grid
                            c[i, j] = np.float64(np.float32(r)) + 0.0  # exact below 2**128; +0 for zero
                _add_chain(partial, chain_part[ch], c)
            combine_parts(partial, order, role, out, m0, n0, mm, nn)


#: The fp32 zoo kernel's operand exponent range: with e(a), e(b) in [-50, 60] every product is exact
#: in fp32 (16 to 22 significant bits, 2**-100 <= |p| < 2**122), E >= -100, so 2**(F - E) is an fp32
#: for F <= 26. Rows with an operand outside it (bf16 and tf32 only) go to the float64 kernel.
_FAST_EMIN, _FAST_EMAX = -50, 60


if numba is not None:

    @njit(parallel=True, cache=True)
    def _decode_zoo(  # pragma: no cover - compiled
        bits: np.ndarray, shift: int, is_fp16: bool, out_v: np.ndarray, out_e: np.ndarray,
        inf_rows: np.ndarray, wide_rows: np.ndarray, wide_cols: np.ndarray,
    ) -> None:
        """Decode zoo operands held as fp32 bit patterns (fp16 converted exactly, bf16 shifted, tf32 as is).

        Values: fp32, zeros kept, Inf and NaN as +0. Exponents: int16, floored at the format's emin
        (fp16 -14, else -126), ``_ZERO16`` for zeros and non-finite values. Rows holding an Inf are
        flagged in ``inf_rows``; rows and columns holding a finite nonzero value whose exponent is
        outside [_FAST_EMIN, _FAST_EMAX] in ``wide_rows`` and ``wide_cols`` (only ever set to True).
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
                out_e[r, j] = np.int16(e) if live else np.int16(_ZERO16)
                n_inf += np.int32(field == 0xFF and (x & 0x7FFFFF) == 0)
                outside = live and (e < _FAST_EMIN or e > _FAST_EMAX)
                n_wide += np.int32(outside)
                if outside:
                    wide_cols[j] = True
            if n_inf:
                inf_rows[r] = True
            if n_wide:
                wide_rows[r] = True

    @njit(parallel=True, cache=True)
    def _kernel_zoo(  # pragma: no cover - compiled
        va: np.ndarray, ea: np.ndarray, vb_t: np.ndarray, eb_t: np.ndarray,
        kseq: np.ndarray, chain_start: np.ndarray, chain_part: np.ndarray,
        n_parts: int, order: np.ndarray, role: np.ndarray, block: int, frac: int,
        m_tile: int, n_tile: int, out: np.ndarray,
    ) -> None:
        """The zoo formats with every operand exponent in [_FAST_EMIN, _FAST_EMAX]: fp32 products, int32 terms.

        ``int32(p * 2**(F - E))`` truncates toward zero exactly (the product is exact in fp32 and the
        scaling is by a power of two); the B terms (below ``2**(F + 2)``, at most ``2**31`` together)
        add exactly in int32, and c's term (float64) joins them in float64; normalising to fp32's 24
        significant bits is a mask of the float64 significand, as in :func:`_kernel_wide`.
        """
        m_rows = va.shape[0]
        n_cols = vb_t.shape[1]
        n_tiles = (n_cols + n_tile - 1) // n_tile
        m_tiles = (m_rows + m_tile - 1) // m_tile
        n_chains = chain_part.shape[0]
        keep_mask = np.int64(~((1 << 29) - 1))
        for t in prange(m_tiles * n_tiles):
            m0 = (t // n_tiles) * m_tile
            mm = min(m_tile, m_rows - m0)
            n0 = (t % n_tiles) * n_tile
            nn = min(n_tile, n_cols - n0)
            partial = np.zeros((n_parts, mm, nn), dtype=np.float32)
            c = np.zeros((mm, nn), dtype=np.float32)
            c_bits = c.view(np.int32)
            emax = np.empty(nn, dtype=np.int16)
            scale = np.empty(nn, dtype=np.float32)
            scale_bits = scale.view(np.int32)
            unit = np.empty(nn, dtype=np.float64)
            unit_bits = unit.view(np.int64)
            scale64 = np.empty(nn, dtype=np.float64)
            scale64_bits = scale64.view(np.int64)
            cterm = np.empty(nn, dtype=np.float64)
            iacc = np.empty(nn, dtype=np.int32)
            acc = np.empty(nn, dtype=np.float64)
            acc_bits = acc.view(np.int64)
            for ch in range(n_chains):
                c[:, :] = 0.0
                start, stop = chain_start[ch], chain_start[ch + 1]
                for b0 in range(start, stop, block):
                    b1 = min(b0 + block, stop)
                    for i in range(mm):
                        m = m0 + i
                        _block_max16(emax, ea, eb_t, kseq, m, b0, b1, n0, nn)
                        for j in range(nn):
                            bits = c_bits[i, j]
                            e = np.int32(emax[j])
                            if e < _NO_WIDE_PRODUCT_BELOW:
                                e = np.int32(-300)
                            if bits & 0x7FFFFFFF:  # c's exponent, floored at -126
                                e = max(np.int32(max(((bits >> 23) & 0xFF) - 127, -126)), e)
                            # 2**(F - E) for the products (no product when E - F < -126: any value);
                            # c's term in float64, exact
                            scale_bits[j] = (min(max(frac - e, -126), 127) + 127) << 23
                            unit_bits[j] = np.int64(e - frac + 1023) << 52
                            scale64_bits[j] = np.int64(frac - e + 1023) << 52
                            cterm[j] = np.trunc(np.float64(c[i, j]) * scale64[j])  # exact
                            iacc[j] = 0
                        idx = b0
                        while idx + 4 <= b1:
                            k0, k1, k2, k3 = kseq[idx], kseq[idx + 1], kseq[idx + 2], kseq[idx + 3]
                            v0, v1, v2, v3 = va[m, k0], va[m, k1], va[m, k2], va[m, k3]
                            if v0 != 0.0 or v1 != 0.0 or v2 != 0.0 or v3 != 0.0:
                                q0, q1 = vb_t[k0, n0:n0 + nn], vb_t[k1, n0:n0 + nn]
                                q2, q3 = vb_t[k2, n0:n0 + nn], vb_t[k3, n0:n0 + nn]
                                for j in range(nn):
                                    s = scale[j]
                                    iacc[j] += ((np.int32((v0 * q0[j]) * s) + np.int32((v1 * q1[j]) * s))
                                                + (np.int32((v2 * q2[j]) * s) + np.int32((v3 * q3[j]) * s)))
                            idx += 4
                        while idx < b1:
                            k0 = kseq[idx]
                            v0 = va[m, k0]
                            if v0 != 0.0:
                                q0 = vb_t[k0, n0:n0 + nn]
                                for j in range(nn):
                                    iacc[j] += np.int32((v0 * q0[j]) * scale[j])
                            idx += 1
                        for j in range(nn):
                            acc[j] = cterm[j] + np.float64(iacc[j])
                            acc_bits[j] = acc_bits[j] & keep_mask
                            # onto fp32's subnormal grid 2**-149 (a no-op from 2**-126 up, where the
                            # 24 kept bits lie above it): branch-free, so the loop vectorises
                            r = np.trunc((acc[j] * unit[j]) * 2.0**149) * 2.0**-149
                            c[i, j] = np.float32(r) + np.float32(0.0)
                _add_chain(partial, chain_part[ch], c)
            combine_parts(partial, order, role, out, m0, n0, mm, nn)


def _tiles(m: int, n: int, threads: int) -> tuple[int, int]:
    """(M tile, N tile): wide N tiles (long vector loops), shrunk until every thread has tasks."""
    m_tile, n_tile = 32, 1024
    while n_tile > 256 and math.ceil(m / m_tile) * math.ceil(n / n_tile) < 4 * threads:
        n_tile //= 2
    while m_tile > 4 and math.ceil(m / m_tile) * math.ceil(n / n_tile) < 4 * threads:
        m_tile //= 2
    return m_tile, n_tile


#: Scratch buffers larger than this are allocated per call instead of kept.
SCRATCH_LIMIT_BYTES = 256 * 2**20
_scratch = threading.local()


def _buffer(name: str, shape: tuple[int, ...], dtype: type[np.generic]) -> np.ndarray:
    """A scratch array of ``shape``, reused by later calls in this thread (its contents are stale).

    Writing freshly mapped memory costs a page fault every 4 KiB, more than the decoding itself:
    a decoded weight of the quickstart (5 bytes x 11 million elements) takes about 2 ms to decode
    into a reused buffer and about 30 ms into a new one (measured on the 2-core development machine).
    """
    size = math.prod(shape)
    nbytes = size * np.dtype(dtype).itemsize
    if nbytes > SCRATCH_LIMIT_BYTES:
        return np.empty(shape, dtype=dtype)
    pool: dict[str, np.ndarray] = _scratch.__dict__.setdefault("pool", {})
    held = pool.get(name)
    if held is None or held.size < size or held.dtype != dtype:
        held = pool[name] = np.empty(size, dtype=dtype)
    return held[:size].reshape(shape)


_WORKQUEUE_LOCK = threading.Lock()


def _launch_guard() -> threading.Lock | contextlib.nullcontext[None]:
    """Serialise kernel launches where numba's threading layer is ``workqueue`` (not thread-safe).

    The ``omp`` and ``tbb`` layers accept concurrent launches from several Python threads; the
    ``workqueue`` fallback (no OpenMP or TBB runtime found) aborts the process on them.
    """
    try:
        layer = numba.threading_layer()
    except ValueError:  # no parallel kernel has run yet in this process: be safe
        return _WORKQUEUE_LOCK
    return _WORKQUEUE_LOCK if layer == "workqueue" else contextlib.nullcontext()


def release_scratch() -> None:
    """Free the calling thread's scratch buffers (they are kept between calls to save page faults)."""
    _scratch.__dict__.pop("pool", None)


def _decode(codes: np.ndarray, fmt: Fp8Format, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fp32 values, int8 exponents, rows holding an Inf code) of uint8 codes ``[R, C]``, in scratch buffers."""
    values = _buffer(name + ".values", codes.shape, np.float32)
    exponents = _buffer(name + ".exponents", codes.shape, np.int8)
    inf_rows = np.zeros(codes.shape[0], dtype=np.bool_)
    if codes.size:
        _decode_rows(codes, fmt.mantissa_bits, fmt.bias, fmt.value.has_inf, values, exponents, inf_rows)
    return values, exponents, inf_rows


def _flatten(plan: AccumulationPlan) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    flat = flatten_plan(plan)
    return (flat.k_order.numpy(), np.asarray(flat.chain_starts, np.int64), np.asarray(flat.chain_part, np.int64),
            np.asarray(flat.order, np.int64), np.asarray(flat.role, np.int64))


def accumulate(a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan) -> torch.Tensor:
    """fp32 accumulators ``[M, N]`` of FP8 ``a [M, K]`` and ``b [N, K]`` (CPU tensors) under ``plan``.

    Raises:
        BackendUnavailableError: numba is missing, or the tensors are not on the CPU.
    """
    if numba is None:
        raise BackendUnavailableError(f"backend 'cpu' is unavailable: {_NUMBA_ERROR}")
    if a.device.type != "cpu" or b.device.type != "cpu":
        raise BackendUnavailableError("backend 'cpu' runs on CPU tensors only")
    if a.dtype not in FP8_DTYPES:
        return _accumulate_wide(a, b, preset, plan)
    if not expresses(preset):
        return reference.accumulate(a, b, preset, plan)  # non-truncating presets: the reference backend
    m, n = a.shape[0], b.shape[0]
    if _use_avx512(preset):
        result = _accumulate_avx512(a, b, preset, plan)
        if result is not None:
            return result
    out = np.zeros((m, n), dtype=np.float32)
    with _launch_guard():
        va, ea, a_inf = _decode(a.detach().view(torch.uint8).contiguous().numpy(), fp8_format_of(a.dtype), "a")
        # B [N, K] decoded in the kernel's layout [K, N] (a uint8 transpose first: 1 byte an element)
        codes_b = _buffer("b.codes", (b.shape[1], b.shape[0]), np.uint8)
        _transpose_codes(b.detach().view(torch.uint8).contiguous().numpy(), codes_b)
        vb_t, eb_t, b_inf = _decode(codes_b, fp8_format_of(b.dtype), "b")
        if m and n and plan.k:
            kseq, starts, parts, order, role = _flatten(plan)
            m_tile, n_tile = _tiles(m, n, numba.get_num_threads())
            _kernel(va, ea, vb_t, eb_t, kseq, starts, parts,
                    len(plan.parts), order, role, preset.block_size, preset.frac_bits, m_tile, n_tile, out)
    result = torch.from_numpy(out)
    if a_inf.any() or b_inf.any():  # Inf codes were zeros in the kernel: their outputs follow IEEE
        reference.recompute_infinite(result, a, b, preset, plan)
    return result


def _use_avx512(preset: Preset) -> bool:
    """Whether FP8 operands go to the AVX-512 kernel (:mod:`mmaemu.backends.cpu_fp8`).

    Where the CPU has AVX-512F and BW and the preset fits the kernel's accumulators; the
    environment variable ``MMAEMU_CPU_PORTABLE=1`` selects the portable kernel everywhere (both
    compute the same bits; the tests run both).
    """
    return cpu_fp8.expresses(preset) and cpu_fp8.available() and not env_flag("MMAEMU_CPU_PORTABLE")


def _aligned_buffer(name: str, shape: tuple[int, ...], dtype: type[np.generic]) -> np.ndarray:
    """:func:`_buffer` starting on a 64-byte boundary (whole-vector loads that never straddle a cache line)."""
    itemsize = np.dtype(dtype).itemsize
    size = math.prod(shape)
    flat = _buffer(name, (size + 64 // itemsize,), dtype)
    shift = (-flat.ctypes.data % 64) // itemsize
    return flat[shift:shift + size].reshape(shape)


def _m_tile(m: int, n_panels: int, threads: int) -> int:
    """Rows per task of the AVX-512 kernel: 256 (B's panels reused from cache by many rows), fewer
    until every thread has at least four tasks."""
    m_tile = 256
    while m_tile > 2 and math.ceil(m / m_tile) * n_panels < 4 * threads:
        m_tile //= 2
    return min(m_tile, max(m, 1))


def _tables(fmt: Fp8Format) -> np.ndarray:
    return cpu_fp8.code_tables(fmt.mantissa_bits, fmt.bias, fmt.value.has_inf)


def _accumulate_avx512(a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan) -> torch.Tensor | None:
    """:func:`accumulate` on the AVX-512 kernel; None when the shape leaves it nothing to do (empty).

    The vector lanes run over a's rows (a is decoded into panels, b into per-block rows, the result
    written transposed) when a has at least a panel's worth of rows, else over b's rows: the
    panels' transposition then costs the smaller operand, and few rows of a do not leave lanes idle.
    """
    m, n, k = a.shape[0], b.shape[0], plan.k
    if not (m and n and k):
        return None
    flat = flatten_plan(plan)
    kseq = flat.k_order.numpy()
    starts, stops, first = cpu_fp8.block_bounds(list(flat.chain_starts), preset.block_size)
    lanes_over_a = m >= cpu_fp8.PANEL
    rows, cols = (b, a) if lanes_over_a else (a, b)
    f_rows, f_cols = fp8_format_of(rows.dtype), fp8_format_of(cols.dtype)
    r, c = rows.shape[0], cols.shape[0]
    n_blocks, width, n_panels = len(starts), -(-preset.block_size // 16) * 16, cpu_fp8.panels(c)
    codes_r = rows.detach().view(torch.uint8).contiguous().numpy()
    codes_c = cols.detach().view(torch.uint8).contiguous().numpy()
    out = np.zeros((m, n), dtype=np.float32)
    with _launch_guard():
        va = _aligned_buffer("fp8.rows.values", (n_blocks, r, width), np.float32)
        sel = _aligned_buffer("fp8.rows.sign", (n_blocks, r, width), np.int32)
        ea = _aligned_buffer("fp8.rows.exponents", (n_blocks, r, width), np.int32)
        inf_r = np.zeros(r, dtype=np.bool_)
        cpu_fp8.decode_a_blocks(codes_r, kseq, flat.identity, starts, stops, f_rows.mantissa_bits, f_rows.bias,
                                f_rows.value.has_inf, va, sel, ea, inf_r)
        bpn = _aligned_buffer("fp8.cols.values", (n_panels, k, 2, cpu_fp8.PANEL), np.float32)
        eb = _aligned_buffer("fp8.cols.exponents", (n_panels, k, cpu_fp8.PANEL), np.int8)
        inf_c = np.zeros(n_panels * math.ceil(k / cpu_fp8.PANEL), dtype=np.bool_)
        cpu_fp8.decode_b_panels(codes_c, kseq, _tables(f_cols), bpn, eb, inf_c)
        m_tile = _m_tile(r, n_panels, numba.get_num_threads())
        cpu_fp8.kernel(va, sel, ea, bpn, eb, starts, stops, first, np.asarray(flat.chain_part, np.int64),
                       len(plan.parts), np.asarray(flat.order, np.int64), np.asarray(flat.role, np.int64),
                       preset.frac_bits, m_tile, out, lanes_over_a)
    result = torch.from_numpy(out)
    if inf_r.any() or inf_c.any():  # Inf codes were zeros in the kernel: their outputs follow IEEE
        reference.recompute_infinite(result, a, b, preset, plan)
    return result


def _decode_wide(x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(float64 values, int16 exponents) of an fp16, bf16 or tf32 matrix (non-finite values as zeros)."""
    d = decode_wide(x, wide_format_of(x))
    return d.value.numpy(), d.exponent.numpy()


def _decode_zoo_rows(x: torch.Tensor, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(fp32 values, int16 exponents, rows with an Inf, rows and columns outside the fp32 kernel's
    exponent range) of a zoo matrix."""
    fmt = wide_format_of(x)
    if fmt is WideFormat.FP16:
        bits, shift = x.to(torch.float32).view(torch.int32).numpy(), 0
    elif fmt is WideFormat.BF16:
        bits, shift = x.view(torch.int16).numpy(), 16
    else:
        bits, shift = x.view(torch.int32).numpy(), 0
    if fmt is WideFormat.BF16:
        bits = bits.astype(np.int32) & 0xFFFF
    values = _buffer(name + ".zoo.values", x.shape, np.float32)
    exponents = _buffer(name + ".zoo.exponents", x.shape, np.int16)
    inf_rows = np.zeros(x.shape[0], dtype=np.bool_)
    wide_rows = np.zeros(x.shape[0], dtype=np.bool_)
    wide_cols = np.zeros(x.shape[1], dtype=np.bool_)
    if x.numel():
        _decode_zoo(bits, shift, fmt is WideFormat.FP16, values, exponents, inf_rows, wide_rows, wide_cols)
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


def _accumulate_wide(a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan) -> torch.Tensor:
    """:func:`accumulate` for fp16, bf16 and tf32 operands (the zoo).

    The fp32 kernel (:func:`_kernel_zoo`) runs the call; rows of ``a`` or ``b`` with an operand
    exponent outside [-50, 60] (bf16 and tf32 only: very large, tiny or subnormal values) are then
    recomputed by the float64 kernel (:func:`_kernel_wide`), and rows with an Inf by the reference
    backend.
    """
    if not expresses_wide(preset):
        return reference.accumulate(a, b, preset, plan)
    if not _fp32_kernel_expresses(preset):
        return _accumulate_float64(a, b, preset, plan)
    m, n = a.shape[0], b.shape[0]
    out = np.zeros((m, n), dtype=np.float32)
    with _launch_guard():
        va, ea, _, a_wide, _ = _decode_zoo_rows(a.detach().contiguous(), "a")
        vb_t, eb_t, _, _, b_wide = _decode_zoo_rows(b.detach().t().contiguous(), "b")  # b's rows: columns here
        if m and n and plan.k:
            kseq, starts, parts, order, role = _flatten(plan)
            m_tile, n_tile = _tiles(m, n, numba.get_num_threads())
            _kernel_zoo(va, ea, vb_t, eb_t, kseq, starts, parts,
                        len(plan.parts), order, role, preset.block_size, preset.frac_bits, m_tile, n_tile, out)
    result = torch.from_numpy(out)
    if m and n and plan.k:
        rows = torch.from_numpy(np.nonzero(a_wide)[0])
        cols = torch.from_numpy(np.nonzero(b_wide)[0])
        if rows.numel():
            result[rows] = _accumulate_float64(a[rows], b, preset, plan)
        if cols.numel():
            result[:, cols] = _accumulate_float64(a, b[cols], preset, plan)
    if bool(torch.isinf(a).any() or torch.isinf(b).any()):  # Inf operands were zeros in the kernel
        reference.recompute_infinite(result, a, b, preset, plan)
    return result


def _accumulate_float64(a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan) -> torch.Tensor:
    """The float64 zoo kernel (any operand exponent), then the reference backend for rows with an Inf."""
    m, n = a.shape[0], b.shape[0]
    out = np.zeros((m, n), dtype=np.float32)
    va, ea = _decode_wide(a.detach().contiguous())
    vb_t, eb_t = _decode_wide(b.detach().t().contiguous())
    if m and n and plan.k:
        kseq, starts, parts, order, role = _flatten(plan)
        m_tile, n_tile = _tiles(m, n, numba.get_num_threads())
        with _launch_guard():
            _kernel_wide(va, ea, vb_t, eb_t, kseq, starts, parts,
                         len(plan.parts), order, role, preset.block_size, preset.frac_bits, m_tile, n_tile, out)
    result = torch.from_numpy(out)
    if bool(torch.isinf(a).any() or torch.isinf(b).any()):  # Inf operands were zeros in the kernel
        reference.recompute_infinite(result, a, b, preset, plan)
    return result
