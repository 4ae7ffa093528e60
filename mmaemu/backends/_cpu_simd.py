"""AVX-512 vectors for numba kernels: 16 fp32 lanes, 64 int8 lanes, and fp32 arithmetic rounded toward zero.

numba has no vector type and its loops vectorise only what LLVM's loop vectoriser finds; the
fp8 kernel of the cpu backend (:mod:`mmaemu.backends._cpu_fp8`) needs two things it cannot express:
accumulators held in registers across a loop over k (register blocking), and fused multiply-adds
with a static rounding direction. This module gives both as numba types and intrinsics that lower
to LLVM vectors (``<16 x float>``, ``<64 x i8>``) and to the AVX-512 intrinsics with an embedded
rounding mode (``llvm.x86.avx512.vfmadd.ps.512`` and ``llvm.x86.avx512.add.ps.512`` with
rounding 11, round toward zero with exceptions suppressed: ``vfmadd231ps {rz-sae}``, and 10, round
up, for c's negative values at a block's start). The rounding is a property of each instruction,
not of the MXCSR register, so no other arithmetic is affected. The int8 lanes carry the block
maxima and the count of negative products below the grid (saturating subtraction, comparison).

Loads and stores take a one-dimensional array and an element offset (no bounds or wraparound
checks: the callers' offsets are in range by construction). The FP8 kernel's intrinsics with an
embedded rounding need AVX-512F (:func:`available`: that kernel runs only there); the rest are plain
LLVM vector instructions, which the zoo's vector kernel uses on any x86-64 CPU, with its own operations
(:mod:`mmaemu.backends._cpu_simd_zoo`, [Note: portable vectors]).

[Note: why intrinsics] LLVM's loop vectoriser cannot emit an embedded rounding mode, and with one
each term's truncation costs no instruction of its own: a loop of 16 independent
``vfmadd231ps {rz-sae}`` runs at the rate of plain fused multiply-adds (4.9 G vector FMAs per second
per core both, measured on an AVX-512 Xeon).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

__all__ = ["F32X16", "I8X64", "PANEL", "available", "broadcast_table", "panels"]

#: Columns of a panel, the kernels' unit of B's layout: 64 int8 lanes (one vector), or four vectors of
#: 16 fp32 lanes, held in registers for one row over a block.
PANEL = 64


def panels(n: int) -> int:
    """Panels of :data:`PANEL` columns covering ``n`` columns."""
    return (n + PANEL - 1) // PANEL


_BROADCAST: list[np.ndarray] = []


def broadcast_table() -> np.ndarray:
    """int8 ``[256 * 64]``, 64-byte aligned: at offset ``64 * (x & 0xFF)`` the int8 ``x`` in
    64 lanes (built once).

    [Note: broadcast vectors] A kernel reads a per-row int8 (an exponent, a lowest bit's exponent) as
    its vector here, a memory operand of the integer instruction that uses it, instead of broadcasting
    a byte from memory or a general register: on Intel cores that broadcast is an instruction of its
    own on port 5, which the 512-bit integer and FMA instructions share (docs/backends.md: on Intel
    cores these integer instructions bound the FP8 kernel's speed).
    """
    if not _BROADCAST:
        raw = np.empty(256 * PANEL + PANEL, dtype=np.int8)
        shift = (-raw.ctypes.data) % PANEL
        table = raw[shift:shift + 256 * PANEL]
        table[:] = np.repeat(np.arange(256, dtype=np.uint8).view(np.int8), PANEL)
        _BROADCAST.append(table)
    return _BROADCAST[0]


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether numba compiles for a CPU with AVX-512F (and BW for the int8 lanes) (asked once).

    The host as LLVM sees it; but where ``NUMBA_CPU_NAME`` names another target (numba then compiles
    for that CPU, for example ``haswell`` or ``generic`` for machine code that runs elsewhere), only
    when ``NUMBA_CPU_FEATURES`` lists ``+avx512f`` and ``+avx512bw``: the AVX-512 instructions would
    not compile for a target without them. ``NUMBA_CPU_NAME=haswell`` is also how the tests run the
    kernels' AVX2 paths on an AVX-512 machine (``tests/unit/test_cpu_zoo_vector.py``).
    """
    try:
        from numba.core import config

        target = getattr(config, "CPU_NAME", None)
        if target and str(target).lower() != "host":
            listed = str(getattr(config, "CPU_FEATURES", None) or "").split(",")
            return "+avx512f" in listed and "+avx512bw" in listed
        from llvmlite import binding  # type: ignore[import-untyped]

        features = binding.get_host_cpu_features()
    except Exception:  # noqa: BLE001 - no numba or llvmlite, or a host LLVM cannot describe
        return False
    return bool(features.get("avx512f")) and bool(features.get("avx512bw"))


try:  # pragma: no cover - exercised where numba is installed (a dependency)
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic, models, register_model

    HAVE_NUMBA = True
except Exception:  # noqa: BLE001
    HAVE_NUMBA = False

if HAVE_NUMBA:  # pragma: no cover - compiled code
    _F32 = ir.FloatType()
    I32 = ir.IntType(32)
    _I8 = ir.IntType(8)
    VF = ir.VectorType(_F32, 16)
    VI = ir.VectorType(I32, 16)
    VB = ir.VectorType(_I8, 64)
    ROUND_TOWARD_ZERO = 11  # _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC
    _ROUND_UP = 10  # _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC

    class _F32x16Type(types.Type):
        def __init__(self) -> None:
            super().__init__(name="mmaemu.F32x16")

    class _I8x64Type(types.Type):
        def __init__(self) -> None:
            super().__init__(name="mmaemu.I8x64")

    F32X16: Any = _F32x16Type()
    I8X64: Any = _I8x64Type()

    @register_model(_F32x16Type)
    class _F32x16Model(models.PrimitiveModel):
        def __init__(self, dmm: Any, fe_type: Any) -> None:
            super().__init__(dmm, fe_type, VF)

    @register_model(_I8x64Type)
    class _I8x64Model(models.PrimitiveModel):
        def __init__(self, dmm: Any, fe_type: Any) -> None:
            super().__init__(dmm, fe_type, VB)

    def _pointer(context: Any, builder: Any, arrty: Any, arr: Any, off: Any, offty: Any) -> Any:
        ary = context.make_array(arrty)(context, builder, arr)
        return builder.gep(ary.data, [context.cast(builder, off, offty, types.intp)], inbounds=True)

    def splat(builder: Any, vector_type: Any, x: Any) -> Any:
        v = builder.insert_element(ir.Constant(vector_type, ir.Undefined), x, ir.Constant(I32, 0))
        mask = ir.Constant(ir.VectorType(I32, vector_type.count), [0] * vector_type.count)
        return builder.shuffle_vector(v, ir.Constant(vector_type, ir.Undefined), mask)

    def ints(values: list[int]) -> Any:
        return ir.Constant(VI, values)

    def smax(builder: Any, a: Any, b: Any) -> Any:
        return builder.select(builder.icmp_signed(">", a, b), a, b)

    def _vector_load(vector: Any, numba_type: Any, align: int) -> Any:
        """An intrinsic ``(arr, off)`` loading the lanes of ``vector`` from ``arr[off:]`` (alignment ``align``)."""
        @intrinsic
        def vector_load(typingctx: Any, arr: Any, off: Any) -> Any:
            def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
                p = _pointer(context, builder, sig.args[0], args[0], args[1], sig.args[1])
                return builder.load(builder.bitcast(p, vector.as_pointer()), align=align)
            return numba_type(arr, off), codegen
        return vector_load

    #: 16 fp32 lanes ``arr[off:off + 16]`` (``arr`` one-dimensional float32).
    load = _vector_load(VF, F32X16, 4)
    #: 64 int8 lanes ``arr[off:off + 64]``.
    load8 = _vector_load(VB, I8X64, 1)

    @intrinsic
    def store(typingctx: Any, arr: Any, off: Any, v: Any) -> Any:
        """``arr[off:off + 16] = v``."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            p = _pointer(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            builder.store(args[2], builder.bitcast(p, VF.as_pointer()), align=4)
            return context.get_dummy_value()
        return types.void(arr, off, v), codegen

    @intrinsic
    def broadcast(typingctx: Any, arr: Any, off: Any) -> Any:
        """``arr[off]`` (float32) in all 16 lanes."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            p = _pointer(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            return splat(builder, VF, builder.load(p, align=4))
        return F32X16(arr, off), codegen

    @intrinsic
    def scalar(typingctx: Any, arr: Any, off: Any) -> Any:
        """``arr[off]`` without a bounds or wraparound check."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.load(_pointer(context, builder, sig.args[0], args[0], args[1], sig.args[1]))
        return arr.dtype(arr, off), codegen

    @intrinsic
    def fma_rz(typingctx: Any, a: Any, b: Any, c: Any) -> Any:
        """``a * b + c`` rounded once toward zero (``vfmadd231ps {rz-sae}``)."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(VF, [VF, VF, VF, I32]),
                                                "llvm.x86.avx512.vfmadd.ps.512")
            return builder.call(fn, [*args, ir.Constant(I32, ROUND_TOWARD_ZERO)])
        return F32X16(F32X16, F32X16, F32X16), codegen

    @intrinsic
    def start_rz(typingctx: Any, g: Any, c: Any) -> Any:
        """``g + c`` with ``c`` truncated toward zero onto ``g``'s grid: ``g >= 0`` large, so the sum
        rounded toward zero is ``g + floor(c)``, and rounded up (``{ru-sae}``) ``g + ceil(c)``; the
        second where ``c < 0``."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(VF, [VF, VF, I32]),
                                                "llvm.x86.avx512.add.ps.512")
            down = builder.call(fn, [*args, ir.Constant(I32, ROUND_TOWARD_ZERO)])
            up = builder.call(fn, [*args, ir.Constant(I32, _ROUND_UP)])
            negative = builder.fcmp_ordered("<", args[1], ir.Constant(VF, [0.0] * 16))
            return builder.select(negative, up, down)
        return F32X16(F32X16, F32X16), codegen

    @intrinsic
    def grid8(typingctx: Any, g0: Any, g1: Any, g2: Any, g3: Any, low: int, high: int) -> Any:
        """The grid exponents ``E - F`` of four offset accumulators (64 lanes, int8), clamped to [low, high]."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            lo_v = splat(builder, VI, context.cast(builder, args[4], sig.args[4], types.int32))
            hi_v = splat(builder, VI, context.cast(builder, args[5], sig.args[5], types.int32))
            parts = []
            for x in args[:4]:
                e = builder.sub(builder.and_(builder.ashr(builder.bitcast(x, VI), ints([23] * 16)),
                                             ints([255] * 16)), ints([150] * 16))
                e = smax(builder, e, lo_v)
                e = builder.select(builder.icmp_signed("<", e, hi_v), e, hi_v)
                parts.append(builder.trunc(e, ir.VectorType(_I8, 16)))
            lo = builder.shuffle_vector(parts[0], parts[1], ir.Constant(ir.VectorType(I32, 32), list(range(32))))
            hi = builder.shuffle_vector(parts[2], parts[3], ir.Constant(ir.VectorType(I32, 32), list(range(32))))
            return builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(I32, 64), list(range(64))))
        return I8X64(F32X16, F32X16, F32X16, F32X16, low, high), codegen

    @intrinsic
    def count_where_below8(typingctx: Any, count: Any, t: Any, arr: Any, off: Any, one: Any) -> Any:
        """``count + one`` in the lanes where ``arr[off:off + 64] < t``, else ``count`` (int8).

        ``one`` (64 lanes of 1) is best a value LLVM cannot see is constant (a load): then the
        selection lowers to a comparison with a memory operand and a masked addition; with a
        constant one LLVM widens the mask to a vector and subtracts it (one instruction more).
        """
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            p = _pointer(context, builder, sig.args[2], args[2], args[3], sig.args[3])
            x = builder.load(builder.bitcast(p, VB.as_pointer()), align=1)
            below = builder.icmp_signed("<", x, args[1])
            return builder.select(below, builder.add(args[0], args[4]), args[0])
        return I8X64(I8X64, I8X64, arr, off, I8X64), codegen

    def _saturating8(llvm_name: str) -> Any:
        @intrinsic
        def saturating(typingctx: Any, a: Any, b: Any) -> Any:
            def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
                fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(VB, [VB, VB]), llvm_name)
                return builder.call(fn, [args[0], args[1]])
            return I8X64(I8X64, I8X64), codegen
        return saturating

    #: ``a - b`` and ``a + b`` lane by lane, saturated to int8.
    sub_sat8 = _saturating8("llvm.ssub.sat.v64i8")
    add_sat8 = _saturating8("llvm.sadd.sat.v64i8")

    @intrinsic
    def add8(typingctx: Any, a: Any, b: Any) -> Any:
        """``a + b`` lane by lane (int8, wrapping)."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.add(args[0], args[1])
        return I8X64(I8X64, I8X64), codegen

    @intrinsic
    def mask_bits(typingctx: Any, a: Any, mask: Any) -> Any:
        """The fp32 bit patterns of ``a`` and the int32 ``mask`` (a truncation of the significand)."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            bits = builder.and_(builder.bitcast(args[0], VI), splat(builder, VI, args[1]))
            return builder.bitcast(bits, VF)
        return F32X16(F32X16, types.int32), codegen

    @intrinsic
    def splat8(typingctx: Any, x: Any) -> Any:
        """The int8 ``x`` in all 64 lanes."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return splat(builder, VB, context.cast(builder, args[0], sig.args[0], types.int8))
        return I8X64(x), codegen

    @intrinsic
    def max8(typingctx: Any, a: Any, b: Any) -> Any:
        """``max(a, b)`` lane by lane (int8)."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return smax(builder, args[0], args[1])
        return I8X64(I8X64, I8X64), codegen

    @intrinsic
    def address(typingctx: Any, arr: Any) -> Any:
        """The address of ``arr``'s first element (to align scratch arrays)."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            return builder.ptrtoint(ary.data, ir.IntType(64))
        return types.int64(arr), codegen

    from numba import njit

    from ._cpu_steps import combine_parts

    _address: Any = address  # an intrinsic: numba, not mypy, checks its calls

    @njit(inline="always")
    def aligned_zeros(n: int) -> Any:
        """fp32 zeros of length ``n`` starting on a 64-byte boundary (whole-vector loads and stores)."""
        buf = np.zeros(n + 16, dtype=np.float32)
        shift = ((-_address(buf)) % 64) // 4
        return buf[shift:shift + n]

    _load8: Any = load8  # intrinsics: numba, not mypy, checks their calls
    _max8: Any = max8

    @njit(inline="always")
    def row_maxima(plus_e_a: Any, a_state: Any, eb: np.ndarray, stride: int, e_base: int, a0: int, a1: int, b0: int,
                   b1: int, start: Any) -> tuple[Any, Any]:
        """The block maxima of ``e(a) + e(b)`` of two rows over one panel (64 int8 lanes each), from ``start``.

        ``e(b)`` of k is the 64 lanes at ``eb[e_base + k * stride]``; ``plus_e_a(a_state, r, off)`` adds to the
        lanes ``r`` the row's ``e(a)`` of its element at ``off`` (``a0 + k`` and ``a1 + k``: each kernel's own
        reading of its row side). Two partial maxima per row (even and odd k) halve the dependency chain.
        """
        e0 = start
        e1 = start
        f0 = start
        f1 = start
        k = b0
        while k + 2 <= b1:
            r = _load8(eb, e_base + k * stride)
            s = _load8(eb, e_base + (k + 1) * stride)
            e0 = _max8(e0, plus_e_a(a_state, r, a0 + k))
            e1 = _max8(e1, plus_e_a(a_state, r, a1 + k))
            f0 = _max8(f0, plus_e_a(a_state, s, a0 + k + 1))
            f1 = _max8(f1, plus_e_a(a_state, s, a1 + k + 1))
            k += 2
        if k < b1:
            r = _load8(eb, e_base + k * stride)
            e0 = _max8(e0, plus_e_a(a_state, r, a0 + k))
            e1 = _max8(e1, plus_e_a(a_state, r, a1 + k))
        return _max8(e0, f0), _max8(e1, f1)

    @njit(inline="always")
    def walk_panel(pair_step: Any, state: Any, plan: Any, out: np.ndarray, t: int, n_panels: int, m_tile: int,
                   n_cols: int, transposed: bool) -> None:
        """Task ``t`` of a panel kernel: row tiles of ``m_tile`` rows against the ``n_panels`` panels (the panel
        varying fastest) of ``out`` (or of its transpose, with ``transposed``; ``n_cols``: its columns).

        ``plan`` is ``(m_rows, blk_start, blk_stop, chain_blk, chain_part, n_parts, order, role)``
        (:func:`mmaemu.backends._cpu_fp8.block_bounds` and the flattened plan). Every chain from ``c = +0``
        (the tile's rows, :data:`PANEL` lanes each): ``pair_step(state, c, m0, panel, i, i1, b0, b1)`` for each
        block ``b0:b1`` of the chain and each pair of rows ``i, i1`` of the tile from row ``m0`` (an odd last
        row is computed twice, same bits: the kernel's own step, which reads and writes ``c``); the chain's
        result joins its part in fp32 (K order from +0); then the parts are combined in the scheme's order.
        """
        m_rows, blk_start, blk_stop, chain_blk, chain_part, n_parts, order, role = plan
        m0 = (t // n_panels) * m_tile
        mm = min(m_tile, m_rows - m0)
        panel = t % n_panels
        c = aligned_zeros(mm * PANEL)
        partial = np.zeros((n_parts, mm, PANEL), dtype=np.float32)
        for ch in range(chain_part.shape[0]):
            c[:] = 0.0
            for bi in range(chain_blk[ch], chain_blk[ch + 1]):
                for i in range(0, mm, 2):
                    pair_step(state, c, m0, panel, i, min(i + 1, mm - 1), blk_start[bi], blk_stop[bi])
            add_chain(partial, chain_part[ch], c, mm)
        combine_parts(partial, order, role, out, m0, panel * PANEL, mm, min(PANEL, n_cols - panel * PANEL),
                      transposed)

    @njit(inline="always")
    def add_chain(partial: np.ndarray, part: int, c: np.ndarray, mm: int) -> None:
        """A chain's results (``c``: ``mm`` rows of :data:`PANEL` lanes) added to its part in fp32, K order
        from +0 (each panel kernel's end of a chain)."""
        for i in range(mm):
            for j in range(PANEL):
                partial[part, i, j] = partial[part, i, j] + c[i * PANEL + j]

    def _grid_offset(group: int) -> Any:
        @intrinsic
        def grid_offset(typingctx: Any, emax: Any, c: Any, frac: Any, no_product_below: Any, zero_e: Any) -> Any:
            """1.5 * 2**(E - F + 23) for lanes ``16 * group ...`` of the int8 product maxima ``emax``.

            ``E`` = the block maximum: the product maximum (``zero_e`` where it is below
            ``no_product_below``: no nonzero product), raised to ``c``'s exponent (floored at -126)
            where ``c != 0``, capped at 100. The result is the block's offset accumulator: an fp32 in
            [2**23, 2**24) times the grid unit 2**(E - F), so its ulp is that unit.
            """
            def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
                em, cv, fr, below, zero_e = args
                lanes = ir.Constant(VI, list(range(16 * group, 16 * group + 16)))
                e = builder.sext(builder.shuffle_vector(em, ir.Constant(VB, ir.Undefined), lanes), VI)
                below_v = splat(builder, VI, context.cast(builder, below, sig.args[3], types.int32))
                zero_v = splat(builder, VI, context.cast(builder, zero_e, sig.args[4], types.int32))
                e = builder.select(builder.icmp_signed("<", e, below_v), zero_v, e)
                bits = builder.bitcast(cv, VI)
                e_c = builder.sub(builder.and_(builder.ashr(bits, ints([23] * 16)), ints([255] * 16)),
                                  ints([127] * 16))
                e_c = smax(builder, e_c, ints([-126] * 16))
                nonzero = builder.icmp_signed("!=", builder.and_(bits, ints([0x7FFFFFFF] * 16)), ints([0] * 16))
                e = builder.select(nonzero, smax(builder, e, e_c), e)
                e = builder.select(builder.icmp_signed("<", e, ints([100] * 16)), e, ints([100] * 16))
                bias = builder.sub(ir.Constant(I32, 150), context.cast(builder, fr, sig.args[2], types.int32))
                o = builder.or_(builder.shl(builder.add(e, splat(builder, VI, bias)), ints([23] * 16)),
                                ints([1 << 22] * 16))
                return builder.bitcast(o, VF)
            return F32X16(I8X64, F32X16, frac, no_product_below, zero_e), codegen
        return grid_offset

    grid_offset0, grid_offset1, grid_offset2, grid_offset3 = (_grid_offset(g) for g in range(4))

    def _end_units(group: int) -> Any:
        @intrinsic
        def end_units(typingctx: Any, x: Any, count: Any) -> Any:
            """``x`` plus ``count`` ulps minus the block's offset ``1.5 * 2**23`` ulps, exact (lanes
            ``16 * group ...`` of the int8 ``count``).

            ``x`` lies in ``[2**23, 2**24)`` ulps and stays there with the count added (the callers'
            capacity bound), so adding the count to its bit pattern adds that many ulps, and the
            offset (``x``'s exponent field with the significand 1.5) is subtracted exactly
            (Sterbenz's lemma); an exact zero is +0.
            """
            def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
                lanes = ir.Constant(VI, list(range(16 * group, 16 * group + 16)))
                n = builder.sext(builder.shuffle_vector(args[1], ir.Constant(VB, ir.Undefined), lanes), VI)
                bits = builder.add(builder.bitcast(args[0], VI), n)
                offset = builder.or_(builder.and_(bits, ints([0x7F800000] * 16)), ints([1 << 22] * 16))
                return builder.fsub(builder.bitcast(bits, VF), builder.bitcast(offset, VF))
            return F32X16(F32X16, I8X64), codegen
        return end_units

    end_units0, end_units1, end_units2, end_units3 = (_end_units(g) for g in range(4))
