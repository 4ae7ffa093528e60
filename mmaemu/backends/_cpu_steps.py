"""The steps the cpu backend's tiled kernels share, as numba functions inlined into each kernel.

The portable FP8 kernel (:mod:`mmaemu.backends._cpu`) and the two zoo kernels
(:mod:`mmaemu.backends._cpu_zoo`) walk the output in the same (M tile, N tile) tasks and, within a
block, do the same two passes over its k: the block maximum of the exponent sums, then the
truncated terms. They differ only in their number types (int8 or int16 exponents; fp32, float64 or
int32 terms) and in a block's set-up and end, which each kernel keeps. The number types are
arguments here (``narrow``: the exponent type a sum is cast to; ``term``: how a scaled product
becomes a term), so one definition serves all three; numba compiles one specialisation per kernel
and inlines it (``inline="always"``), so the loops vectorise as if written in place.

[Note: exactness] Nothing here rounds: exponent sums fit the ``narrow`` type (the callers' zero
sentinels are chosen so), and each term is ``term(p * 2**(F - E))`` of an exact product ``p``
scaled by a power of two; the terms' sums are exact in the accumulator's type (each kernel's
docstring says why).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["add_chain", "add_terms", "block_max", "combine_parts", "grid_exponent", "tile_grid", "tile_of", "truncate", "walk_tile"]

try:  # pragma: no cover - exercised where numba is installed (a dependency)
    from numba import njit

    _HAVE_NUMBA = True
except Exception:  # noqa: BLE001
    _HAVE_NUMBA = False


if _HAVE_NUMBA:  # pragma: no cover - compiled

    @njit(inline="always")
    def tile_grid(m_rows: int, n_cols: int, tile: tuple[int, int]) -> tuple[int, int, int, int, int, int]:
        """(rows, columns, M tiles, N tiles, M tile, N tile): the tasks covering ``[m_rows, n_cols]``."""
        m_tile, n_tile = tile
        return m_rows, n_cols, (m_rows + m_tile - 1) // m_tile, (n_cols + n_tile - 1) // n_tile, m_tile, n_tile

    @njit(inline="always")
    def tile_of(t: int, grid: tuple[int, int, int, int, int, int]) -> tuple[int, int, int, int]:
        """(first row, rows, first column, columns) of task ``t`` of :func:`tile_grid`'s ``grid``
        (row-major over the tiles)."""
        m_rows, n_cols, _, n_tiles, m_tile, n_tile = grid
        m0 = (t // n_tiles) * m_tile
        n0 = (t % n_tiles) * n_tile
        return m0, min(m_tile, m_rows - m0), n0, min(n_tile, n_cols - n0)

    @njit(inline="always")
    def grid_exponent(emax: Any, empty_below: int, empty: int, c_nonzero: Any, c_exponent: Any) -> Any:
        """E of one output's block: the larger of the products' maximum exponent sum ``emax`` and c's
        exponent (floored at -126: c holds an fp32 value), c counting only when nonzero.

        A block whose maximum is below ``empty_below`` has no nonzero product; it takes ``empty``, an
        exponent low enough that c (or the zero sum) decides, and high enough that the kernel's
        powers of two ``2**(F - E)`` and ``2**(E - F)`` stay in its number type.
        """
        e = emax if emax >= empty_below else empty
        if c_nonzero:
            e = max(e, max(c_exponent, -126))
        return e

    @njit(inline="always")
    def truncate(x: Any) -> Any:
        """``x`` truncated toward zero, in its own type (the float kernels' ``term``)."""
        return np.trunc(x)

    @njit(inline="always")
    def block_max(
        emax: np.ndarray, zero: Any, narrow: Any, ea: np.ndarray, eb_t: np.ndarray, kseq: np.ndarray,
        m: int, b0: int, b1: int, n0: int, nn: int,
    ) -> None:
        """``emax[j]`` = ``max(zero, e(a[m, k]) + e(b[k, n0 + j]))`` over the block's k (``kseq[b0:b1]``).

        Four k at a time, each sum cast to ``narrow`` (``np.int8`` or ``np.int16``: the exponents'
        type, so 64 or 32 lanes to an AVX-512 vector). Zero and non-finite operands carry the
        caller's sentinel exponent, so their sums never win against a real product.
        """
        emax[:] = zero
        idx = b0
        while idx + 4 <= b1:
            k0, k1, k2, k3 = kseq[idx], kseq[idx + 1], kseq[idx + 2], kseq[idx + 3]
            e0, e1, e2, e3 = ea[m, k0], ea[m, k1], ea[m, k2], ea[m, k3]
            r0, r1 = eb_t[k0, n0:n0 + nn], eb_t[k1, n0:n0 + nn]
            r2, r3 = eb_t[k2, n0:n0 + nn], eb_t[k3, n0:n0 + nn]
            for j in range(nn):
                emax[j] = max(emax[j], max(max(narrow(e0 + r0[j]), narrow(e1 + r1[j])),
                                           max(narrow(e2 + r2[j]), narrow(e3 + r3[j]))))
            idx += 4
        while idx < b1:
            k0 = kseq[idx]
            e0 = ea[m, k0]
            r0 = eb_t[k0, n0:n0 + nn]
            for j in range(nn):
                emax[j] = max(emax[j], narrow(e0 + r0[j]))
            idx += 1

    @njit(inline="always")
    def add_terms(
        acc: np.ndarray, term: Any, va: np.ndarray, vb_t: np.ndarray, kseq: np.ndarray, scale: np.ndarray,
        m: int, b0: int, b1: int, n0: int, nn: int,
    ) -> None:
        """``acc[j] += term(a[m, k] * b[k, n0 + j] * scale[j])`` over the block's k (``kseq[b0:b1]``).

        Four k at a time, so each vector of ``acc`` is loaded and stored once per four products;
        a group of four k whose ``a`` values are all zero is skipped (its terms are zeros).
        """
        idx = b0
        while idx + 4 <= b1:
            k0, k1, k2, k3 = kseq[idx], kseq[idx + 1], kseq[idx + 2], kseq[idx + 3]
            v0, v1, v2, v3 = va[m, k0], va[m, k1], va[m, k2], va[m, k3]
            if v0 != 0.0 or v1 != 0.0 or v2 != 0.0 or v3 != 0.0:
                q0, q1 = vb_t[k0, n0:n0 + nn], vb_t[k1, n0:n0 + nn]
                q2, q3 = vb_t[k2, n0:n0 + nn], vb_t[k3, n0:n0 + nn]
                for j in range(nn):
                    s = scale[j]
                    acc[j] += ((term((v0 * q0[j]) * s) + term((v1 * q1[j]) * s))
                               + (term((v2 * q2[j]) * s) + term((v3 * q3[j]) * s)))
            idx += 4
        while idx < b1:
            k0 = kseq[idx]
            v0 = va[m, k0]
            if v0 != 0.0:
                q0 = vb_t[k0, n0:n0 + nn]
                for j in range(nn):
                    acc[j] += term((v0 * q0[j]) * scale[j])
            idx += 1

    @njit(inline="always")
    def add_chain(partial: np.ndarray, p: int, c: np.ndarray) -> None:
        """``partial[p] += c`` in fp32 (a chain's result joins its part; ``c`` may hold fp32 values in float64)."""
        for i in range(c.shape[0]):
            for j in range(c.shape[1]):
                partial[p, i, j] = partial[p, i, j] + np.float32(c[i, j])

    @njit(inline="always")
    def combine_parts(partial: np.ndarray, order: np.ndarray, role: np.ndarray, out: np.ndarray,
                      m0: int, n0: int, mm: int, nn: int, transposed: bool = False) -> None:
        """``out[m0:m0+mm, n0:n0+nn]`` from the part results in the scheme's steps (fp32 additions).

        ``_accumulation.flat_combination``: role 0 joins the total, 1 is held, 2 is added to the held
        part and the pair sum joins the total. ``transposed``: written to ``out[n0 + j, m0 + i]``.
        """
        n_parts = partial.shape[0]
        for i in range(mm):
            for j in range(nn):
                total = partial[order[0], i, j]
                held = np.float32(0.0)
                for q in range(1, n_parts):
                    value = partial[order[q], i, j]
                    if role[q] == 1:
                        held = value
                    elif role[q] == 2:
                        total = total + (held + value)
                    else:
                        total = total + value
                if transposed:
                    out[n0 + j, m0 + i] = total
                else:
                    out[m0 + i, n0 + j] = total

    @njit(inline="always")
    def walk_tile(
        block_step: Any, state: Any, c: np.ndarray, plan: Any, out: np.ndarray, m0: int, n0: int, mm: int, nn: int,
    ) -> None:
        """One tile of the output, ``out[m0:m0+mm, n0:n0+nn]``, under the kernel plan
        (:func:`mmaemu.backends._cpu_scratch.flatten`).

        Every chain from ``c = +0``: ``block_step(state, i, m0 + i, b0, b1)`` for each block
        ``kseq[b0:b1]`` of the chain and each row ``i`` of the tile (the kernel's own step: it
        reads and writes ``c[i]``); the chain's result joins its part (:func:`add_chain`); then the
        parts are combined in the scheme's order (:func:`combine_parts`).
        """
        _, chain_start, chain_part, n_parts, order, role, block = plan  # (kseq: the block step's)
        partial = np.zeros((n_parts, mm, nn), dtype=np.float32)
        for ch in range(chain_part.shape[0]):
            c[:, :] = 0.0
            start, stop = chain_start[ch], chain_start[ch + 1]
            for b0 in range(start, stop, block):
                b1 = min(b0 + block, stop)
                for i in range(mm):
                    block_step(state, i, m0 + i, b0, b1)
            add_chain(partial, chain_part[ch], c)
        combine_parts(partial, order, role, out, m0, n0, mm, nn)
