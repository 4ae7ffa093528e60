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
LLVM vector instructions, which the zoo's vector kernel uses on any x86-64 CPU (see [Note:
portable vectors] below).

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

    _HAVE_NUMBA = True
except Exception:  # noqa: BLE001
    _HAVE_NUMBA = False

if _HAVE_NUMBA:  # pragma: no cover - compiled code
    _F32 = ir.FloatType()
    _I32 = ir.IntType(32)
    _I8 = ir.IntType(8)
    _VF = ir.VectorType(_F32, 16)
    _VI = ir.VectorType(_I32, 16)
    _VB = ir.VectorType(_I8, 64)
    _ROUND_TOWARD_ZERO = 11  # _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC
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
            super().__init__(dmm, fe_type, _VF)

    @register_model(_I8x64Type)
    class _I8x64Model(models.PrimitiveModel):
        def __init__(self, dmm: Any, fe_type: Any) -> None:
            super().__init__(dmm, fe_type, _VB)

    def _pointer(context: Any, builder: Any, arrty: Any, arr: Any, off: Any, offty: Any) -> Any:
        ary = context.make_array(arrty)(context, builder, arr)
        return builder.gep(ary.data, [context.cast(builder, off, offty, types.intp)], inbounds=True)

    def _splat(builder: Any, vector_type: Any, x: Any) -> Any:
        v = builder.insert_element(ir.Constant(vector_type, ir.Undefined), x, ir.Constant(_I32, 0))
        mask = ir.Constant(ir.VectorType(_I32, vector_type.count), [0] * vector_type.count)
        return builder.shuffle_vector(v, ir.Constant(vector_type, ir.Undefined), mask)

    def _ints(values: list[int]) -> Any:
        return ir.Constant(_VI, values)

    def _smax(builder: Any, a: Any, b: Any) -> Any:
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
    load = _vector_load(_VF, F32X16, 4)
    #: 64 int8 lanes ``arr[off:off + 64]``.
    load8 = _vector_load(_VB, I8X64, 1)

    @intrinsic
    def store(typingctx: Any, arr: Any, off: Any, v: Any) -> Any:
        """``arr[off:off + 16] = v``."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            p = _pointer(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            builder.store(args[2], builder.bitcast(p, _VF.as_pointer()), align=4)
            return context.get_dummy_value()
        return types.void(arr, off, v), codegen

    @intrinsic
    def broadcast(typingctx: Any, arr: Any, off: Any) -> Any:
        """``arr[off]`` (float32) in all 16 lanes."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            p = _pointer(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            return _splat(builder, _VF, builder.load(p, align=4))
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
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VF, [_VF, _VF, _VF, _I32]),
                                                "llvm.x86.avx512.vfmadd.ps.512")
            return builder.call(fn, [*args, ir.Constant(_I32, _ROUND_TOWARD_ZERO)])
        return F32X16(F32X16, F32X16, F32X16), codegen

    @intrinsic
    def start_rz(typingctx: Any, g: Any, c: Any) -> Any:
        """``g + c`` with ``c`` truncated toward zero onto ``g``'s grid: ``g >= 0`` large, so the sum
        rounded toward zero is ``g + floor(c)``, and rounded up (``{ru-sae}``) ``g + ceil(c)``; the
        second where ``c < 0``."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VF, [_VF, _VF, _I32]),
                                                "llvm.x86.avx512.add.ps.512")
            down = builder.call(fn, [*args, ir.Constant(_I32, _ROUND_TOWARD_ZERO)])
            up = builder.call(fn, [*args, ir.Constant(_I32, _ROUND_UP)])
            negative = builder.fcmp_ordered("<", args[1], ir.Constant(_VF, [0.0] * 16))
            return builder.select(negative, up, down)
        return F32X16(F32X16, F32X16), codegen

    @intrinsic
    def grid8(typingctx: Any, g0: Any, g1: Any, g2: Any, g3: Any, low: int, high: int) -> Any:
        """The grid exponents ``E - F`` of four offset accumulators (64 lanes, int8), clamped to [low, high]."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            lo_v = _splat(builder, _VI, context.cast(builder, args[4], sig.args[4], types.int32))
            hi_v = _splat(builder, _VI, context.cast(builder, args[5], sig.args[5], types.int32))
            parts = []
            for x in args[:4]:
                e = builder.sub(builder.and_(builder.ashr(builder.bitcast(x, _VI), _ints([23] * 16)),
                                             _ints([255] * 16)), _ints([150] * 16))
                e = _smax(builder, e, lo_v)
                e = builder.select(builder.icmp_signed("<", e, hi_v), e, hi_v)
                parts.append(builder.trunc(e, ir.VectorType(_I8, 16)))
            lo = builder.shuffle_vector(parts[0], parts[1], ir.Constant(ir.VectorType(_I32, 32), list(range(32))))
            hi = builder.shuffle_vector(parts[2], parts[3], ir.Constant(ir.VectorType(_I32, 32), list(range(32))))
            return builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_I32, 64), list(range(64))))
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
            x = builder.load(builder.bitcast(p, _VB.as_pointer()), align=1)
            below = builder.icmp_signed("<", x, args[1])
            return builder.select(below, builder.add(args[0], args[4]), args[0])
        return I8X64(I8X64, I8X64, arr, off, I8X64), codegen

    def _saturating8(llvm_name: str) -> Any:
        @intrinsic
        def saturating(typingctx: Any, a: Any, b: Any) -> Any:
            def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
                fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VB, [_VB, _VB]), llvm_name)
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
            bits = builder.and_(builder.bitcast(args[0], _VI), _splat(builder, _VI, args[1]))
            return builder.bitcast(bits, _VF)
        return F32X16(F32X16, types.int32), codegen

    @intrinsic
    def splat8(typingctx: Any, x: Any) -> Any:
        """The int8 ``x`` in all 64 lanes."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return _splat(builder, _VB, context.cast(builder, args[0], sig.args[0], types.int8))
        return I8X64(x), codegen

    @intrinsic
    def max8(typingctx: Any, a: Any, b: Any) -> Any:
        """``max(a, b)`` lane by lane (int8)."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return _smax(builder, args[0], args[1])
        return I8X64(I8X64, I8X64), codegen

    @intrinsic
    def address(typingctx: Any, arr: Any) -> Any:
        """The address of ``arr``'s first element (to align scratch arrays)."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            return builder.ptrtoint(ary.data, ir.IntType(64))
        return types.int64(arr), codegen

    from numba import njit

    _address: Any = address  # an intrinsic: numba, not mypy, checks its calls

    @njit(inline="always")
    def aligned_zeros(n: int) -> Any:
        """fp32 zeros of length ``n`` starting on a 64-byte boundary (whole-vector loads and stores)."""
        buf = np.zeros(n + 16, dtype=np.float32)
        shift = ((-_address(buf)) % 64) // 4
        return buf[shift:shift + n]

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
                lanes = ir.Constant(_VI, list(range(16 * group, 16 * group + 16)))
                e = builder.sext(builder.shuffle_vector(em, ir.Constant(_VB, ir.Undefined), lanes), _VI)
                below_v = _splat(builder, _VI, context.cast(builder, below, sig.args[3], types.int32))
                zero_v = _splat(builder, _VI, context.cast(builder, zero_e, sig.args[4], types.int32))
                e = builder.select(builder.icmp_signed("<", e, below_v), zero_v, e)
                bits = builder.bitcast(cv, _VI)
                e_c = builder.sub(builder.and_(builder.ashr(bits, _ints([23] * 16)), _ints([255] * 16)),
                                  _ints([127] * 16))
                e_c = _smax(builder, e_c, _ints([-126] * 16))
                nonzero = builder.icmp_signed("!=", builder.and_(bits, _ints([0x7FFFFFFF] * 16)), _ints([0] * 16))
                e = builder.select(nonzero, _smax(builder, e, e_c), e)
                e = builder.select(builder.icmp_signed("<", e, _ints([100] * 16)), e, _ints([100] * 16))
                bias = builder.sub(ir.Constant(_I32, 150), context.cast(builder, fr, sig.args[2], types.int32))
                o = builder.or_(builder.shl(builder.add(e, _splat(builder, _VI, bias)), _ints([23] * 16)),
                                _ints([1 << 22] * 16))
                return builder.bitcast(o, _VF)
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
                lanes = ir.Constant(_VI, list(range(16 * group, 16 * group + 16)))
                n = builder.sext(builder.shuffle_vector(args[1], ir.Constant(_VB, ir.Undefined), lanes), _VI)
                bits = builder.add(builder.bitcast(args[0], _VI), n)
                offset = builder.or_(builder.and_(bits, _ints([0x7F800000] * 16)), _ints([1 << 22] * 16))
                return builder.fsub(builder.bitcast(bits, _VF), builder.bitcast(offset, _VF))
            return F32X16(F32X16, I8X64), codegen
        return end_units

    end_units0, end_units1, end_units2, end_units3 = (_end_units(g) for g in range(4))



if _HAVE_NUMBA:  # pragma: no cover - compiled code
    # [Note: portable vectors] The zoo kernel's operations below (and the loads, stores and int8
    # operations above) are plain LLVM vector instructions, which LLVM lowers for the host: one
    # instruction per vector with AVX-512, two or four with AVX2. Unlike fma_rz and start_rz
    # (AVX-512's embedded rounding) they need no particular instruction set, so the zoo kernel
    # (:mod:`mmaemu.backends._cpu_zoo_vector`) runs on every x86-64 CPU numba supports.
    _F64 = ir.DoubleType()
    _VD = ir.VectorType(_F64, 16)
    _VQ = ir.VectorType(ir.IntType(64), 16)
    _KEEP_24 = ~((1 << 29) - 1)  # a float64's sign, exponent and its 24 leading significand bits

    class _I32x16Type(types.Type):
        def __init__(self) -> None:
            super().__init__(name="mmaemu.I32x16")

    I32X16: Any = _I32x16Type()

    @register_model(_I32x16Type)
    class _I32x16Model(models.PrimitiveModel):
        def __init__(self, dmm: Any, fe_type: Any) -> None:
            super().__init__(dmm, fe_type, _VI)

    # [Note: shifted exponents] The zoo kernel holds each lane's E + 127 shifted into fp32's exponent
    # field, ``(E + 127) << 23`` (``ebs``): c's exponent field is then one AND of c's bits, and the
    # block's scale ``2**(F - E)`` and unit ``2**(E - F)`` are one integer subtraction each (their
    # bits ``((F + 254) << 23) - ebs`` and ``ebs - (F << 23)``, modulo 2**32).

    def _i32(context: Any, builder: Any, x: Any, x_type: Any) -> Any:
        return context.cast(builder, x, x_type, types.int32)

    def _zoo_exponent(group: int) -> Any:
        @intrinsic
        def zoo_exponent(typingctx: Any, emax: Any, c: Any, to_biased: Any) -> Any:
            """``(E + 127) << 23`` of lanes ``16 * group ...`` ([Note: shifted exponents]): the larger of the
            int8 product maxima ``emax`` plus ``to_biased`` and c's exponent field (0 for zeros and
            subnormals, 255 for Inf and NaN)."""
            def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
                lanes = ir.Constant(_VI, list(range(16 * group, 16 * group + 16)))
                e = builder.sext(builder.shuffle_vector(args[0], ir.Constant(_VB, ir.Undefined), lanes), _VI)
                e = builder.add(e, _splat(builder, _VI, _i32(context, builder, args[2], sig.args[2])))
                field = builder.and_(builder.bitcast(args[1], _VI), _ints([255 << 23] * 16))
                return _smax(builder, builder.shl(e, _ints([23] * 16)), field)
            return I32X16(I8X64, F32X16, to_biased), codegen
        return zoo_exponent

    zoo_exponent0, zoo_exponent1, zoo_exponent2, zoo_exponent3 = (_zoo_exponent(g) for g in range(4))

    def _scale(context: Any, builder: Any, ebs: Any, frac: Any, frac_type: Any) -> Any:
        """``2**(F - E)`` from ``ebs`` (meaningless where E is outside the kernel's range)."""
        f = builder.add(_i32(context, builder, frac, frac_type), ir.Constant(_I32, 254))
        return builder.bitcast(builder.sub(_splat(builder, _VI, builder.shl(f, ir.Constant(_I32, 23))), ebs), _VF)

    def _unit(context: Any, builder: Any, ebs: Any, frac: Any, frac_type: Any) -> Any:
        """``2**(E - F)`` from ``ebs``."""
        f = builder.shl(_i32(context, builder, frac, frac_type), ir.Constant(_I32, 23))
        return builder.bitcast(builder.sub(ebs, _splat(builder, _VI, f)), _VF)

    def _special(context: Any, builder: Any, ebs: Any, lo: Any, lo_type: Any) -> Any:
        """The lanes whose E + 127 is below ``lo`` (E below the kernel's range: no nonzero product, c
        tiny) or 255 (c infinite): one unsigned comparison of ``ebs - (lo << 23)``."""
        low = _splat(builder, _VI, builder.shl(_i32(context, builder, lo, lo_type), ir.Constant(_I32, 23)))
        return builder.icmp_unsigned(">=", builder.sub(ebs, low), builder.sub(_ints([255 << 23] * 16), low))

    def _keep_c(context: Any, builder: Any, ebs: Any, c: Any, r: Any, lo: Any, lo_type: Any) -> Any:
        """``r``, or ``c + 0`` in the special lanes (:func:`_special`)."""
        keep = _special(context, builder, ebs, lo, lo_type)
        return builder.select(keep, builder.fadd(c, ir.Constant(_VF, [0.0] * 16)), r)

    @intrinsic
    def zoo_scale(typingctx: Any, ebs: Any, frac: Any) -> Any:
        """``2**(F - E)`` from ``ebs = (E + 127) << 23`` (meaningless where E is outside the kernel's
        range: those lanes keep c, :func:`zoo_result_wide`)."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return _scale(context, builder, args[0], args[1], sig.args[1])
        return F32X16(I32X16, frac), codegen

    @intrinsic
    def zoo_cterm(typingctx: Any, c: Any, s: Any) -> Any:
        """c's term: ``c * 2**(F - E)`` truncated toward zero to int32 (exact where the lane's E is in range)."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.fptosi(builder.fmul(args[0], args[1]), _VI)
        return I32X16(F32X16, F32X16), codegen

    @intrinsic
    def zoo_term(typingctx: Any, acc: Any, a: Any, b: Any, s: Any) -> Any:
        """``acc + trunc(a * b * 2**(F - E))`` (int32 lanes): the product is exact in fp32, its scaling
        by a power of two exact, and the conversion truncates toward zero."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            p = builder.fmul(builder.fmul(args[1], args[2]), args[3])
            return builder.add(args[0], builder.fptosi(p, _VI))
        return I32X16(I32X16, F32X16, F32X16, F32X16), codegen

    @intrinsic
    def zoo_result_wide(typingctx: Any, acc: Any, ebs: Any, c: Any, frac: Any, lo: Any) -> Any:
        """The block's fp32 results from ``acc``, the int32 sum of its terms and c's (``ebs = (E + 127) << 23``)
        taken modulo 2**32, where the terms' sum alone is below 2**31 in magnitude: right whether or
        not the sum wrapped, and in every lane.

        c's term (:func:`zoo_cterm`, recomputed as the block's set-up computed it) comes off ``acc``
        modulo 2**32, which leaves the terms' sum exactly; that sum plus c's term, exact in float64
        (below 2**33), keeps its 24 leading significand bits (a mask: the truncation toward zero to
        fp32), is converted exactly and scaled by ``2**(E - F)``: exact for E - F >= -126, and a sum of
        2**128 or more overflows to +-Inf, as in the model. An exact zero is +0. Lanes with E + 127
        below ``lo`` (E below the kernel's range: no nonzero product, c tiny) or 255 (c infinite)
        give ``c + 0``.
        """
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            scale = _scale(context, builder, args[1], args[3], sig.args[3])
            cterm = builder.fptosi(builder.fmul(args[2], scale), _VI)
            terms = builder.sub(args[0], cterm)
            x = builder.fadd(builder.sitofp(terms, _VD), builder.sitofp(cterm, _VD))
            x = builder.bitcast(builder.and_(builder.bitcast(x, _VQ), ir.Constant(_VQ, [_KEEP_24] * 16)), _VD)
            r = builder.fmul(builder.fptrunc(x, _VF), _unit(context, builder, args[1], args[3], sig.args[3]))
            return _keep_c(context, builder, args[1], args[2], r, args[4], sig.args[4])
        return F32X16(I32X16, I32X16, F32X16, frac, lo), codegen

    def _truncated(builder: Any, acc: Any) -> Any:
        """``acc`` (int32) truncated toward zero to fp32: ``vcvtdq2ps {rz-sae}`` where the CPU has
        AVX-512, else a float64 conversion (exact) and a mask of its 24 leading bits."""
        if available():
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VF, [_VI, _I32]),
                                                "llvm.x86.avx512.sitofp.round.v16f32.v16i32")
            return builder.call(fn, [acc, ir.Constant(_I32, _ROUND_TOWARD_ZERO)])
        x = builder.sitofp(acc, _VD)
        x = builder.bitcast(builder.and_(builder.bitcast(x, _VQ), ir.Constant(_VQ, [_KEEP_24] * 16)), _VD)
        return builder.fptrunc(x, _VF)

    @intrinsic
    def zoo_result(typingctx: Any, acc: Any, ebs: Any, frac: Any) -> Any:
        """The block's fp32 results from the int32 sums ``acc`` of its terms and c's (``ebs = (E + 127) << 23``),
        where that sum did not pass 2**31 in magnitude (:func:`beyond_2_30` says where it may have) and
        no lane keeps c (:func:`any_special`); elsewhere :func:`zoo_result_wide`.

        ``acc`` truncated toward zero to fp32 (:func:`_truncated`), scaled by ``2**(E - F)`` as in
        :func:`zoo_result_wide` (a sum of 2**128 or more overflows to +-Inf; an exact zero is +0).
        """
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.fmul(_truncated(builder, args[0]), _unit(context, builder, args[1], args[2], sig.args[2]))
        return F32X16(I32X16, I32X16, frac), codegen

    def _any_lane(builder: Any, mask: Any) -> Any:
        """Whether any lane of a 16-lane i1 vector is set (its bits as an i16, compared with 0)."""
        return builder.icmp_unsigned("!=", builder.bitcast(mask, ir.IntType(16)), ir.Constant(ir.IntType(16), 0))

    @intrinsic
    def any_special(typingctx: Any, e0: Any, e1: Any, e2: Any, e3: Any, e4: Any, e5: Any, e6: Any, e7: Any,
                    lo: Any) -> Any:
        """Whether a lane of the eight ``ebs`` vectors has E + 127 below ``lo`` or 255 (the lanes that keep
        c): the unsigned maximum of ``ebs - (lo << 23)`` over the vectors, compared once."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            low = _splat(builder, _VI, builder.shl(_i32(context, builder, args[8], sig.args[8]), ir.Constant(_I32, 23)))
            d = builder.sub(args[0], low)
            for e in args[1:8]:
                x = builder.sub(e, low)
                d = builder.select(builder.icmp_unsigned(">", x, d), x, d)
            special = builder.icmp_unsigned(">=", d, builder.sub(_ints([255 << 23] * 16), low))
            return _any_lane(builder, special)
        return types.boolean(*([I32X16] * 8), lo), codegen

    @intrinsic
    def beyond_2_30(typingctx: Any, x0: Any, x1: Any, x2: Any, x3: Any, x4: Any, x5: Any, x6: Any, x7: Any) -> Any:
        """Whether a lane of the eight int32 vectors lies outside [-2**30, 2**30): each plus 2**30, ORed
        together, has its sign bit set in some lane (about 2 instructions per vector)."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            half = _ints([1 << 30] * 16)
            acc = builder.add(args[0], half)
            for x in args[1:]:
                acc = builder.or_(acc, builder.add(x, half))
            negative = builder.icmp_signed("<", acc, _ints([0] * 16))
            return _any_lane(builder, negative)
        return types.boolean(*([I32X16] * 8)), codegen
