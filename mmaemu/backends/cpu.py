"""The compiled CPU backend: the reference model's bits from integer arithmetic compiled by numba.

Each product is a small integer significand (``|m(a) m(b)| < 256``, 6 fraction bits) with an exponent
``e(a) + e(b)``; the block maximum and the truncation toward zero are integer shifts, and the block
sum is an exact int64. The output row is tiled over N so that the working set (one row of
exponents, significands and running sums per tile) stays in cache; the inner loops run over N with
contiguous operands, so they vectorise, and the tiles are spread over all cores (``prange``).
Memory: the operands re-laid out as int32 (8 bytes per FP8 operand) plus the output; no
``[M, N, K]`` intermediate.

Exactness: the chain value after a block has at most F + 1 <= 24 significant bits and is held as
an fp32; chain results and split parts are added in fp32 (IEEE round to nearest even, no
fast-math, so no contraction). Inputs with an Inf code (E5M2) are delegated to the reference
backend, which implements the IEEE rules; NaN codes are zero here and the caller applies the NaN
rule. A block result of 2**128 or more cannot occur for K < 2**90, so the Inf rule of
:func:`mmaemu.model.block_fma` needs no code here.

[Note: why numba] A C++ extension would need a compiler at install time; numba compiles at first
use, caches the machine code on disk (``cache=True``), and is a plain PyPI dependency.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..accumulation import AccumulationPlan, Scheme, pairwise_order
from ..errors import BackendUnavailableError
from ..model import CMode, Preset, Rounding
from . import reference

__all__ = ["accumulate", "NAME", "available", "N_TILE", "M_TILE"]

NAME = "cpu"
#: Output tile: M_TILE rows x N_TILE columns per task.
N_TILE = 256
M_TILE = 64
_SENTINEL = -(1 << 20)

try:  # pragma: no cover - exercised where numba is installed (a dependency)
    import numba
    from numba import njit, prange

    _NUMBA_ERROR: str | None = None
except Exception as exc:  # noqa: BLE001
    numba = None  # type: ignore[assignment]
    _NUMBA_ERROR = f"numba is not importable: {exc}"


def available() -> tuple[bool, str]:
    """(usable, reason) of the compiled CPU backend."""
    if _NUMBA_ERROR is not None:
        return False, _NUMBA_ERROR
    return True, f"numba {numba.__version__}, {numba.get_num_threads()} threads"


def _tables() -> dict[torch.dtype, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per FP8 format: exponent, signed significand with 3 fraction bits, and Inf flag, by code."""
    out = {}
    for dtype, m_bits, bias in ((torch.float8_e4m3fn, 3, 7), (torch.float8_e5m2, 2, 15)):
        codes = np.arange(256)
        values = torch.from_numpy(codes.astype(np.uint8)).view(dtype).to(torch.float64).numpy()
        field = (codes >> m_bits) & ((1 << (7 - m_bits)) - 1)
        frac = codes & ((1 << m_bits) - 1)
        finite = np.isfinite(values)
        sig = np.where(field != 0, frac + (1 << m_bits), frac) << (3 - m_bits)
        sig = np.where(finite, sig, 0)
        exp = np.maximum(field - bias, 1 - bias)
        exp = np.where(sig != 0, exp, _SENTINEL)
        signed = np.where(codes >= 128, -sig, sig)
        out[dtype] = (exp.astype(np.int32), signed.astype(np.int32), np.isinf(values))
    return out


_TABLES = _tables()


def _decode(x: torch.Tensor) -> tuple[np.ndarray, np.ndarray, bool]:
    exp_t, sig_t, inf_t = _TABLES[x.dtype]
    codes = x.detach().cpu().contiguous().view(torch.uint8).numpy()
    return exp_t[codes], sig_t[codes], bool(inf_t[codes].any())


if numba is not None:

    @njit(cache=True, inline="always")
    def _normalise(total: int, e_unit: int, keep: int) -> np.float32:  # pragma: no cover
        """total * 2**e_unit truncated toward zero to ``keep`` significant bits, as fp32."""
        if total == 0:
            return np.float32(0.0)
        mag = -total if total < 0 else total
        length = math.frexp(float(mag))[1]  # exact: |total| < 2**53
        if length > keep:
            drop = length - keep
            mag >>= drop
            e_unit += drop
        value = math.ldexp(float(mag), e_unit)
        return np.float32(-value if total < 0 else value)

    @njit(parallel=True, cache=True)
    def _kernel(  # pragma: no cover - compiled
        ea: np.ndarray, sa: np.ndarray, eb_t: np.ndarray, sb_t: np.ndarray,
        kseq: np.ndarray, chain_start: np.ndarray, chain_part: np.ndarray,
        n_parts: int, order: np.ndarray, block: int, frac: int, out: np.ndarray,
    ) -> None:
        m_rows = ea.shape[0]
        n_cols = eb_t.shape[1]
        n_tiles = (n_cols + N_TILE - 1) // N_TILE
        m_tiles = (m_rows + M_TILE - 1) // M_TILE
        n_chains = chain_part.shape[0]
        shift0 = frac - 6
        keep = min(frac, 23) + 1
        # one task per (M tile, N tile): a block of B (block x N_TILE operands) is loaded once
        # from memory and reused by every row of the M tile while it sits in cache
        for t in prange(m_tiles * n_tiles):
            m0 = (t // n_tiles) * M_TILE
            mm = min(M_TILE, m_rows - m0)
            n0 = (t % n_tiles) * N_TILE
            nn = min(N_TILE, n_cols - n0)
            partial = np.zeros((n_parts, mm, nn), dtype=np.float32)
            c = np.zeros((mm, nn), dtype=np.float32)
            c_bits = c.view(np.int32)
            emax = np.empty(nn, dtype=np.int32)
            acc = np.empty(nn, dtype=np.int32)
            for ch in range(n_chains):
                c[:, :] = 0.0
                start, stop = chain_start[ch], chain_start[ch + 1]
                for b0 in range(start, stop, block):
                    b1 = min(b0 + block, stop)
                    for i in range(mm):
                        m = m0 + i
                        # the block maximum: c's exponent, then every nonzero product's
                        for j in range(nn):
                            bits = c_bits[i, j]
                            if bits & 0x7FFFFFFF != 0:
                                emax[j] = max(((bits >> 23) & 0xFF) - 127, -126)
                            else:
                                emax[j] = _SENTINEL
                        for idx in range(b0, b1):
                            k = kseq[idx]
                            if sa[m, k] == 0:
                                continue
                            eak = np.int32(ea[m, k])
                            erow = eb_t[k, n0:n0 + nn]
                            for j in range(nn):
                                emax[j] = max(emax[j], np.int32(eak + erow[j]))
                        # the accumulator's term, truncated toward zero to the block's grid
                        for j in range(nn):
                            bits = c_bits[i, j]
                            if bits & 0x7FFFFFFF == 0:
                                acc[j] = 0
                            else:
                                field = (bits >> 23) & 0xFF
                                csig = (bits & 0x7FFFFF) | (0x800000 if field != 0 else 0)
                                sh = 23 - frac + emax[j] - max(field - 127, -126)
                                mag = csig >> sh if sh < 31 else 0
                                acc[j] = np.int32(-mag if bits < 0 else mag)
                        # the products' terms, truncated toward zero (sign-magnitude)
                        for idx in range(b0, b1):
                            k = kseq[idx]
                            sak = np.int32(sa[m, k])
                            if sak == 0:
                                continue
                            erow = eb_t[k, n0:n0 + nn]
                            srow = sb_t[k, n0:n0 + nn]
                            base = np.int32(shift0 + ea[m, k])
                            for j in range(nn):
                                pm = np.int32(sak * srow[j])
                                sh = np.int32(base - emax[j] + erow[j])
                                neg = np.int32(pm >> 31)  # 0 or -1
                                mag = np.int32((pm ^ neg) - neg)
                                left = np.int32(max(sh, 0))
                                right = np.int32(min(max(-sh, 0), 31))
                                q = np.int32(np.int32(mag << left) >> right)
                                acc[j] += np.int32((q ^ neg) - neg)
                        for j in range(nn):
                            c[i, j] = _normalise(np.int64(acc[j]), np.int64(emax[j] - frac), keep)
                p = chain_part[ch]
                for i in range(mm):
                    for j in range(nn):
                        partial[p, i, j] = partial[p, i, j] + c[i, j]  # fp32: chain results in K order from +0
            for i in range(mm):
                for j in range(nn):
                    total = partial[order[0], i, j]
                    for q in range(1, n_parts):
                        total = total + partial[order[q], i, j]
                    out[m0 + i, n0 + j] = total


def _flatten(plan: AccumulationPlan) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    kseq: list[int] = []
    starts = [0]
    parts = []
    for p, chains in enumerate(plan.parts):
        for chain in chains:
            for start, stop in chain:
                kseq.extend(range(start, stop))
            starts.append(len(kseq))
            parts.append(p)
    n_parts = len(plan.parts)
    order = pairwise_order(n_parts) if plan.split.scheme is Scheme.PAIRWISE else list(range(n_parts))
    return (np.asarray(kseq, np.int64), np.asarray(starts, np.int64), np.asarray(parts, np.int64),
            np.asarray(order, np.int64))


def accumulate(a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan) -> torch.Tensor:
    """fp32 accumulators ``[M, N]`` of FP8 ``a [M, K]`` and ``b [N, K]`` (CPU tensors) under ``plan``.

    Raises:
        BackendUnavailableError: numba is missing, or the tensors are not on the CPU.
    """
    if numba is None:
        raise BackendUnavailableError(f"backend 'cpu' is unavailable: {_NUMBA_ERROR}")
    if a.device.type != "cpu" or b.device.type != "cpu":
        raise BackendUnavailableError("backend 'cpu' runs on CPU tensors only")
    unsupported = preset.c_mode is not CMode.ALIGNED or preset.rounding is not Rounding.TRUNCATE or preset.frac_bits > 23
    ea, sa, a_inf = _decode(a)
    eb, sb, b_inf = _decode(b)
    if unsupported or a_inf or b_inf:
        return reference.accumulate(a, b, preset, plan)  # Inf codes and non-truncating presets: the reference
    m, n = a.shape[0], b.shape[0]
    out = np.zeros((m, n), dtype=np.float32)
    if m and n and plan.k:
        kseq, starts, parts, order = _flatten(plan)
        _kernel(ea, sa, np.ascontiguousarray(eb.T), np.ascontiguousarray(sb.T), kseq, starts, parts,
                len(plan.parts), order, preset.block_size, preset.frac_bits, out)
    return torch.from_numpy(out)
