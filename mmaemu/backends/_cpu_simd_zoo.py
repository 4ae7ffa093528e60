"""The zoo's vector kernel's operations for numba (:mod:`mmaemu.backends._cpu_zoo_vector`): int32 terms in 16
lanes, the block's exponent held shifted into fp32's exponent field, and the block's fp32 results.

The vector types, loads, stores and int8 operations are :mod:`mmaemu.backends._cpu_simd`'s.
"""

from __future__ import annotations

from typing import Any

from . import _cpu_simd
from ._cpu_simd import available

__all__ = ["I32X16"]

if _cpu_simd.HAVE_NUMBA:  # pragma: no cover - compiled code
    from llvmlite import ir  # type: ignore[import-untyped]
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic, models, register_model

    from ._cpu_simd import F32X16, I8X64, I32, ROUND_TOWARD_ZERO, VB, VF, VI, ints, smax, splat

    # [Note: portable vectors] The zoo kernel's operations below (and the loads, stores and int8
    # operations of _cpu_simd) are plain LLVM vector instructions, which LLVM lowers for the host: one
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
            super().__init__(dmm, fe_type, VI)

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
                lanes = ir.Constant(VI, list(range(16 * group, 16 * group + 16)))
                e = builder.sext(builder.shuffle_vector(args[0], ir.Constant(VB, ir.Undefined), lanes), VI)
                e = builder.add(e, splat(builder, VI, _i32(context, builder, args[2], sig.args[2])))
                field = builder.and_(builder.bitcast(args[1], VI), ints([255 << 23] * 16))
                return smax(builder, builder.shl(e, ints([23] * 16)), field)
            return I32X16(I8X64, F32X16, to_biased), codegen
        return zoo_exponent

    zoo_exponent0, zoo_exponent1, zoo_exponent2, zoo_exponent3 = (_zoo_exponent(g) for g in range(4))

    def _scale(context: Any, builder: Any, ebs: Any, frac: Any, frac_type: Any) -> Any:
        """``2**(F - E)`` from ``ebs`` (meaningless where E is outside the kernel's range)."""
        f = builder.add(_i32(context, builder, frac, frac_type), ir.Constant(I32, 254))
        return builder.bitcast(builder.sub(splat(builder, VI, builder.shl(f, ir.Constant(I32, 23))), ebs), VF)

    def _unit(context: Any, builder: Any, ebs: Any, frac: Any, frac_type: Any) -> Any:
        """``2**(E - F)`` from ``ebs``."""
        f = builder.shl(_i32(context, builder, frac, frac_type), ir.Constant(I32, 23))
        return builder.bitcast(builder.sub(ebs, splat(builder, VI, f)), VF)

    def _special(context: Any, builder: Any, ebs: Any, lo: Any, lo_type: Any) -> Any:
        """The lanes whose E + 127 is below ``lo`` (E below the kernel's range: no nonzero product, c
        tiny) or 255 (c infinite): one unsigned comparison of ``ebs - (lo << 23)``."""
        low = splat(builder, VI, builder.shl(_i32(context, builder, lo, lo_type), ir.Constant(I32, 23)))
        return builder.icmp_unsigned(">=", builder.sub(ebs, low), builder.sub(ints([255 << 23] * 16), low))

    def _keep_c(context: Any, builder: Any, ebs: Any, c: Any, r: Any, lo: Any, lo_type: Any) -> Any:
        """``r``, or ``c + 0`` in the special lanes (:func:`_special`)."""
        keep = _special(context, builder, ebs, lo, lo_type)
        return builder.select(keep, builder.fadd(c, ir.Constant(VF, [0.0] * 16)), r)

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
            return builder.fptosi(builder.fmul(args[0], args[1]), VI)
        return I32X16(F32X16, F32X16), codegen

    @intrinsic
    def zoo_term(typingctx: Any, acc: Any, a: Any, b: Any, s: Any) -> Any:
        """``acc + trunc(a * b * 2**(F - E))`` (int32 lanes): the product is exact in fp32, its scaling
        by a power of two exact, and the conversion truncates toward zero."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            p = builder.fmul(builder.fmul(args[1], args[2]), args[3])
            return builder.add(args[0], builder.fptosi(p, VI))
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
            cterm = builder.fptosi(builder.fmul(args[2], scale), VI)
            terms = builder.sub(args[0], cterm)
            x = builder.fadd(builder.sitofp(terms, _VD), builder.sitofp(cterm, _VD))
            x = builder.bitcast(builder.and_(builder.bitcast(x, _VQ), ir.Constant(_VQ, [_KEEP_24] * 16)), _VD)
            r = builder.fmul(builder.fptrunc(x, VF), _unit(context, builder, args[1], args[3], sig.args[3]))
            return _keep_c(context, builder, args[1], args[2], r, args[4], sig.args[4])
        return F32X16(I32X16, I32X16, F32X16, frac, lo), codegen

    def _truncated(builder: Any, acc: Any) -> Any:
        """``acc`` (int32) truncated toward zero to fp32: ``vcvtdq2ps {rz-sae}`` where the CPU has
        AVX-512, else a float64 conversion (exact) and a mask of its 24 leading bits."""
        if available():
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(VF, [VI, I32]),
                                                "llvm.x86.avx512.sitofp.round.v16f32.v16i32")
            return builder.call(fn, [acc, ir.Constant(I32, ROUND_TOWARD_ZERO)])
        x = builder.sitofp(acc, _VD)
        x = builder.bitcast(builder.and_(builder.bitcast(x, _VQ), ir.Constant(_VQ, [_KEEP_24] * 16)), _VD)
        return builder.fptrunc(x, VF)

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
            low = splat(builder, VI, builder.shl(_i32(context, builder, args[8], sig.args[8]), ir.Constant(I32, 23)))
            d = builder.sub(args[0], low)
            for e in args[1:8]:
                x = builder.sub(e, low)
                d = builder.select(builder.icmp_unsigned(">", x, d), x, d)
            special = builder.icmp_unsigned(">=", d, builder.sub(ints([255 << 23] * 16), low))
            return _any_lane(builder, special)
        return types.boolean(*([I32X16] * 8), lo), codegen

    @intrinsic
    def beyond_2_30(typingctx: Any, x0: Any, x1: Any, x2: Any, x3: Any, x4: Any, x5: Any, x6: Any, x7: Any) -> Any:
        """Whether a lane of the eight int32 vectors lies outside [-2**30, 2**30): each plus 2**30, ORed
        together, has its sign bit set in some lane (about 2 instructions per vector)."""
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            half = ints([1 << 30] * 16)
            acc = builder.add(args[0], half)
            for x in args[1:]:
                acc = builder.or_(acc, builder.add(x, half))
            negative = builder.icmp_signed("<", acc, ints([0] * 16))
            return _any_lane(builder, negative)
        return types.boolean(*([I32X16] * 8)), codegen
