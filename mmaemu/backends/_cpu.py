"""The compiled CPU backend: the reference model's bits from integer arithmetic compiled by numba.

FP8 operands go to one of two kernels with the same bits. On a CPU with AVX-512F and BW,
:mod:`mmaemu.backends._cpu_fp8` floors each term onto the block's grid with one fused multiply-add
rounded toward zero into an accumulator offset to that grid, and counts the negative terms below
the grid (which the floor put one unit further from zero than truncation; no scaling or
truncation instructions; see there). Elsewhere, or with ``MMAEMU_CPU_PORTABLE=1``, the portable kernel
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
intermediate (the AVX-512 kernel: 7 bytes per element of the panel side; the row side's codes
are read in place, or permuted into a copy when the plan reorders k, :func:`_accumulate_avx512`). These operand buffers are kept per thread between calls (up to
``SCRATCH_LIMIT_BYTES`` each; :func:`release_scratch` frees them): fresh memory would cost a page
fault every 4 KiB, more than the decoding itself. Calls from several threads are safe (the buffers
are per thread; kernel launches are serialised under numba's ``workqueue`` threading layer).

The kernels share their pieces as inline numba functions: the FP8 code decoder (and its tables), the combination
of split parts and the addition of chain results (:mod:`mmaemu.backends._cpu_fp8`); the tile walk,
the block maxima of the exponent sums and the truncated terms (:mod:`mmaemu.backends._cpu_steps`,
shared with the zoo kernels of :mod:`mmaemu.backends._cpu_zoo`, which the fp16, bf16 and tf32
operands go to). Tiles, scratch buffers and the launch guard are
:mod:`mmaemu.backends._cpu_scratch`'s.

Exactness: chain results and split parts are added in fp32 (IEEE round to nearest even; numba
without fast-math, so no contraction). Inf codes (E5M2) are zeros in the kernel, and
:class:`~mmaemu.backends.Accumulated` says whether one was met: the dispatcher then recomputes
the outputs whose row of A or of B holds one by the IEEE rules (the reference backend). NaN codes are
zero here and the dispatcher applies the NaN rule. A block result of 2**128 or more cannot occur for K < 2**90, so the Inf rule of
:func:`mmaemu.model.block_fma` needs no code here.

[Note: why numba] A C++ extension would need a compiler at install time; numba compiles at first
use, caches the machine code on disk (in a folder only this user can write:
:mod:`mmaemu.backends._numba_cache`), and is a plain PyPI dependency.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from .._accumulation import AccumulationPlan, flatten_plan
from ..errors import BackendUnavailableError
from ..formats import (
    FP8_DTYPES,
    WIDE_DTYPES,
    Fp8Format,
    fp8_format_of,
    fp8_inf_rows,
)
from .._host import env_flag
from ..model import block_sum_exact_in_fp32
from ..presets import CMode, Preset, Rounding
from . import _cpu_fp8, _cpu_simd, _cpu_zoo
from ._cpu_scratch import (
    SCRATCH_LIMIT_BYTES,
    aligned_buffer,
    buffer,
    flatten,
    launch_guard,
    panel_rows,
    release_scratch,
    tiles,
)
from ._protocol import Accumulated, Backend, Executor

__all__ = ["EXECUTOR", "NAME", "SCRATCH_LIMIT_BYTES", "accumulate", "available", "expresses", "release_scratch"]

NAME = Backend.CPU.value

try:  # pragma: no cover - exercised where numba is installed (a dependency)
    import numba
    from numba import njit, prange

    from . import _numba_cache

    _DISK_CACHE = _numba_cache.disk_cache(__file__)  # the checked per-user cache, never the package; or in memory

    _NUMBA_ERROR: str | None = None
except Exception as exc:  # noqa: BLE001
    numba = None  # type: ignore[assignment]
    _NUMBA_ERROR = f"numba is not importable: {exc}"


def expresses(preset: Preset, dtypes: tuple[torch.dtype, ...] = ()) -> bool:
    """Whether the kernels compute ``preset`` for operands of ``dtypes`` (empty: FP8); the dispatcher
    sends the others to the reference backend whole.

    The FP8 kernels align ``c`` with the products, truncate, and add a block's terms (``c`` included) in
    fp32, which is exact only within :func:`mmaemu.model.block_sum_exact_in_fp32`; the zoo formats
    (fp16, bf16, tf32): :func:`expresses_wide`.
    """
    if any(d not in FP8_DTYPES for d in dtypes):
        return _cpu_zoo.expresses_wide(preset)
    return (preset.c_mode is CMode.ALIGNED and preset.rounding is Rounding.TRUNCATE
            and block_sum_exact_in_fp32(preset, with_c=True))


def available(device: torch.device | None = None) -> tuple[bool, str]:
    """(usable, reason) of the compiled CPU backend (on ``device``, when given: CPU tensors only)."""
    if _NUMBA_ERROR is not None:
        return False, _NUMBA_ERROR
    if device is not None and device.type != "cpu":
        return False, f"backend 'cpu' runs on CPU tensors only, not {device.type!r} tensors"
    return True, f"numba {numba.__version__}, {numba.get_num_threads()} threads"


#: int8 exponent of zero and non-finite operands. Real exponents are in [-14, 15], so real
#: exponent sums are in [-28, 30]; a sum with a zero operand is at most -64 + 15 = -49 and at least
#: -128 (it fits int8 and never wins a block maximum against a real product).
_ZERO8 = -64
#: A block maximum below this means the block has no nonzero product.
_NO_PRODUCT_BELOW = -40

if numba is not None:
    from ._cpu_fp8 import decode_code
    from ._cpu_steps import add_terms, block_max, grid_exponent, tile_grid, tile_of, truncate, walk_tile

    @njit(parallel=True, cache=_DISK_CACHE)
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

    @njit(parallel=True, cache=_DISK_CACHE)
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

    @njit(inline="always")
    def _block(state: Any, i: int, m: int, b0: int, b1: int) -> None:  # pragma: no cover - compiled
        """One block of one row of :func:`_kernel`'s tile: ``c[i]`` becomes the block's result."""
        c, c_bits, emax, w, w_bits, va, ea, vb_t, eb_t, kseq, n0, nn, frac, keep_mask = state
        scale, unit, acc = w[0], w[1], w[2]
        scale_bits, unit_bits, acc_bits = w_bits[0], w_bits[1], w_bits[2]
        # E over the products: int8 sums e(a) + e(b), four k at a time (64 lanes a vector)
        block_max(emax, _ZERO8, np.int8, ea, eb_t, kseq, m, b0, b1, n0, nn)
        # E = max(c's exponent (c != 0), the products'); 2**(F - E) and 2**(E - F) as fp32 bit
        # patterns (E clamped where nothing is nonzero)
        for j in range(nn):
            bits = c_bits[i, j]
            e = np.int32(min(grid_exponent(np.int32(emax[j]), _NO_PRODUCT_BELOW, -100, bits & 0x7FFFFFFF,
                                           ((bits >> 23) & 0xFF) - 127), 100))
            scale_bits[j] = (frac - e + 127) << 23
            unit_bits[j] = (e - frac + 127) << 23
            acc[j] = np.trunc(c[i, j] * scale[j])  # exact
        # the truncated terms: every term and sum is an exact integer
        add_terms(acc, truncate, va, vb_t, kseq, scale, m, b0, b1, n0, nn)
        for j in range(nn):
            # truncate toward zero to F + 1 significant bits (a mask of the significand), scale
            # back, and make an exact zero +0
            acc_bits[j] = acc_bits[j] & keep_mask
            c[i, j] = acc[j] * unit[j] + np.float32(0.0)

    @njit(parallel=True, cache=_DISK_CACHE)
    def _kernel(  # pragma: no cover - compiled
        va: np.ndarray, ea: np.ndarray, vb_t: np.ndarray, eb_t: np.ndarray, plan: Any, frac: int,
        tile: tuple[int, int], out: np.ndarray,
    ) -> None:
        grid = tile_grid(va.shape[0], vb_t.shape[1], tile)
        keep_mask = np.int32(~((1 << (23 - frac)) - 1))  # F fraction bits of an fp32 significand
        # one task per (M tile, N tile): a block of B is loaded once from memory and reused by
        # every row of the M tile while it sits in cache
        for t in prange(grid[2] * grid[3]):
            m0, mm, n0, nn = tile_of(t, grid)
            c = np.zeros((mm, nn), dtype=np.float32)
            w = np.empty((3, nn), dtype=np.float32)  # 2**(F - E), 2**(E - F), the block's sum
            state = (c, c.view(np.int32), np.empty(nn, dtype=np.int8), w, w.view(np.int32),
                     va, ea, vb_t, eb_t, plan[0], n0, nn, frac, keep_mask)
            walk_tile(_block, state, c, plan, out, m0, n0, mm, nn)



def _decode(codes: np.ndarray, fmt: Fp8Format, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fp32 values, int8 exponents, rows holding an Inf code) of uint8 codes ``[R, C]``, in scratch buffers."""
    values = buffer(name + ".values", codes.shape, np.float32)
    exponents = buffer(name + ".exponents", codes.shape, np.int8)
    inf_rows = np.zeros(codes.shape[0], dtype=np.bool_)
    if codes.size:
        _decode_rows(codes, fmt.mantissa_bits, fmt.bias, fmt.value.has_inf, values, exponents, inf_rows)
    return values, exponents, inf_rows


def accumulate(a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan) -> Accumulated:
    """fp32 accumulators ``[M, N]`` of ``a [M, K]`` and ``b [N, K]`` (CPU tensors; FP8, or one zoo format)
    under ``plan``, for a preset the backend :func:`expresses` (the dispatcher's contract: NaN and Inf
    codes counted as zeros, ``inf_zeroed`` saying whether an Inf code was met).

    Raises:
        BackendUnavailableError: numba is missing, or the tensors are not on the CPU.
    """
    if numba is None:
        raise BackendUnavailableError(f"backend 'cpu' is unavailable: {_NUMBA_ERROR}")
    if a.device.type != "cpu" or b.device.type != "cpu":
        raise BackendUnavailableError("backend 'cpu' runs on CPU tensors only")
    if a.dtype not in FP8_DTYPES:
        return _cpu_zoo.accumulate_wide(a, b, preset, plan)
    m, n = a.shape[0], b.shape[0]
    if _use_avx512(preset):
        result = _accumulate_avx512(a, b, preset, plan)
        if result is not None:
            return result
    out = np.zeros((m, n), dtype=np.float32)
    with launch_guard():
        va, ea, a_inf = _decode(a.detach().view(torch.uint8).contiguous().numpy(), fp8_format_of(a.dtype), "a")
        # B [N, K] decoded in the kernel's layout [K, N] (a uint8 transpose first: 1 byte an element)
        codes_b = buffer("b.codes", (b.shape[1], b.shape[0]), np.uint8)
        _transpose_codes(b.detach().view(torch.uint8).contiguous().numpy(), codes_b)
        vb_t, eb_t, b_inf = _decode(codes_b, fp8_format_of(b.dtype), "b")
        if m and n and plan.k:
            _kernel(va, ea, vb_t, eb_t, flatten(plan, preset.block_size), preset.frac_bits,
                    tiles(m, n, numba.get_num_threads()), out)
    return Accumulated(torch.from_numpy(out), bool(a_inf.any() or b_inf.any()))


def _use_avx512(preset: Preset) -> bool:
    """Whether FP8 operands go to the AVX-512 kernel (:mod:`mmaemu.backends._cpu_fp8`).

    Where the CPU has AVX-512F and BW and the preset fits the kernel's accumulators; the
    environment variable ``MMAEMU_CPU_PORTABLE=1`` selects the portable kernel everywhere (both
    compute the same bits; the tests run both).
    """
    return _cpu_fp8.expresses(preset) and _cpu_fp8.available() and not env_flag("MMAEMU_CPU_PORTABLE")


def _tables(fmt: Fp8Format) -> np.ndarray:
    return _cpu_fp8.code_tables(fmt.mantissa_bits, fmt.bias, fmt.value.has_inf)


def _accumulate_avx512(a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan) -> Accumulated | None:
    """:func:`accumulate` on the AVX-512 kernel; None when the shape leaves it nothing to do (empty).

    The vector lanes run over a's rows (a is decoded into panels, b's codes are read row by row, the
    result written transposed) when a has at least a panel's worth of rows, else over b's rows: the
    panels' transposition then costs the smaller operand, and few rows of a do not leave lanes idle.
    """
    m, n, k = a.shape[0], b.shape[0], plan.k
    if not (m and n and k):
        return None
    flat = flatten_plan(plan)
    kseq = flat.k_order.numpy()
    starts, stops, first = _cpu_fp8.block_bounds(list(flat.chain_starts), preset.block_size)
    lanes_over_a = m >= _cpu_fp8.PANEL
    rows, cols = (b, a) if lanes_over_a else (a, b)
    f_rows, f_cols = fp8_format_of(rows.dtype), fp8_format_of(cols.dtype)
    r, c = rows.shape[0], cols.shape[0]
    n_panels = _cpu_fp8.panels(c)
    codes_r = rows.detach().view(torch.uint8)
    if not flat.identity:
        codes_r = codes_r.index_select(1, flat.k_order)  # the row side's k in plan order, as the panels'
    codes_r = codes_r.contiguous()
    inf_r = bool(fp8_inf_rows(rows.detach()).any())
    codes_c = cols.detach().view(torch.uint8).contiguous().numpy()
    out = np.zeros((m, n), dtype=np.float32)
    with launch_guard():
        bv = aligned_buffer("fp8.cols.values", (n_panels, k, _cpu_fp8.PANEL), np.float32)
        eb = aligned_buffer("fp8.cols.exponents", (n_panels, k, 3, _cpu_fp8.PANEL), np.int8)
        inf_c = np.zeros(n_panels * math.ceil(k / _cpu_fp8.PANEL), dtype=np.bool_)
        _cpu_fp8.decode_b_panels(codes_c, kseq, _tables(f_cols), bv, eb, inf_c)
        m_tile = panel_rows(r, n_panels, numba.get_num_threads())
        _cpu_fp8.kernel(codes_r.numpy(), _tables(f_rows), _cpu_simd.broadcast_table(), bv, eb, starts, stops, first,
                       np.asarray(flat.chain_part, np.int64), len(plan.parts), np.asarray(flat.order, np.int64),
                       np.asarray(flat.role, np.int64), preset.frac_bits, m_tile, out, lanes_over_a)
    return Accumulated(torch.from_numpy(out), inf_r or bool(inf_c.any()))


class _Compiled(Executor):
    """The cpu backend as the dispatcher uses it: this module's functions, looked up at each call."""

    def available(self, device: torch.device) -> tuple[bool, str]:
        return available(device)

    def expresses(self, preset: Preset, dtypes: tuple[torch.dtype, ...] = ()) -> bool:
        return expresses(preset, dtypes)

    def accumulate(self, a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan,
                   **options: Any) -> Accumulated:
        return accumulate(a, b, preset, plan)

    def selftest_failure(self, device: torch.device, preset: Preset | None = None) -> str | None:
        """None: the kernels are compiled from the same source on every CPU, and the tests compare both of
        them, on every host they run on, with the reference backend (``python -m mmaemu selftest`` does too
        where there is no GPU)."""
        return None


#: The cpu backend as the dispatcher uses it: ``auto``'s choice for CPU tensors; FP8 and the zoo formats.
EXECUTOR = _Compiled(Backend.CPU, ("cpu",), frozenset((*FP8_DTYPES, *WIDE_DTYPES)),
                     "numba is a dependency of mmaemu: pip install numba, or reinstall mmaemu")
