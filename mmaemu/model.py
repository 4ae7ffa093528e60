"""The tensor-core instruction model: the exact block fused multiply-add of a preset.

A :class:`~mmaemu.presets.Preset` (:mod:`mmaemu.presets`) names the arithmetic of one tensor-core
instruction: how many products one block adds (``block_size``), how many fraction bits survive the
alignment (``frac_bits``), and whether the incoming accumulator takes part in the alignment. :func:`dot` chains blocks over
the last dimension of FP8 operand vectors, exactly; it is the instruction-level API that the
recorded hardware vectors test, and :func:`block_fma` is the one step every backend must match.

One block, from the fp32 accumulator ``c`` (rules from the recorded tensor-core vectors):

1. Products ``a_i * b_i`` are exact; their exponent is ``e(a_i) + e(b_i)`` with ``e`` the
   unbiased exponent floored at the format's emin (the significand product, in [0, 4), is not
   renormalised).
2. Zero products are excluded. ``E`` is the largest product exponent and, when ``c != 0``, the
   exponent of ``c`` (floored at -126).
3. Every term, ``c`` included, is truncated toward zero (sign-magnitude) to a multiple of
   ``2**(E - frac_bits)``; the truncated terms are added exactly.
4. The sum is normalised and truncated toward zero to ``frac_bits`` fraction bits; an exact
   zero is +0.

Non-finite values follow IEEE: a NaN operand, ``inf * 0``, or infinities of both signs (from
products or ``c``) give NaN (written as the canonical fp32 NaN 0x7FFFFFFF); otherwise an
infinite product or ``c`` gives that infinity.

An fp16 accumulator (``c`` a float16 tensor; fp16 and FP8 operands) rounds each block's exact sum
once to nearest even fp16 instead of step 4, with ``c``'s exponent floored at -14 in step 2; NaN is
0x7FFF. FP8 operands on sm_90 and sm_100 take another path, :func:`hmma_rewrite`: the instruction
as two fp16 HMMA steps from +0 over interleaved halves of its 32 products, then ``c`` added by one
fp16 addition (``Preset.fp16_accumulation``; docs/zoo.md has the rule and its evidence).
"""

from __future__ import annotations

import torch

from .formats import (
    EXPONENT_OF_ZERO,
    FP8_DTYPES,
    WIDE_DTYPES,
    OutFormat,
    fp32_exponent,
    nan_rows,
    wide_format_of,
)
from ._host import check_cpu_subnormals, refuse_autograd
from ._operands import BlockOperands, pow2
from .presets import (
    Accumulator,
    CMode,
    HalfAccumulation,
    Preset,
    Rounding,
    instruction_preset,
)

__all__ = [
    "block_fma",
    "block_sum_exact_in_fp32",
    "chain",
    "dot",
    "hmma_rewrite",
]


def block_sum_exact_in_fp32(preset: Preset, *, with_c: bool) -> bool:
    """Whether a block's truncated terms add exactly in fp32, in any order (the one exactness bound).

    Each truncated term is an integer multiple of the unit below ``2**(F + 2)``; ``n`` of them add
    exactly when ``F + 2 + bit_length(n) <= 24``. ``n`` is the block size, plus one when the
    accumulator ``c`` is added as a term of the same sum (``with_c``: the compiled backends do; the
    reference model adds ``c`` in float64 apart).
    """
    terms = preset.block_size + (1 if with_c else 0)
    return preset.frac_bits + 2 + terms.bit_length() <= 24


def _sum_dtype(preset: Preset) -> torch.dtype:
    return torch.float32 if block_sum_exact_in_fp32(preset, with_c=False) else torch.float64


def block_fma(
    c: torch.Tensor,
    a: BlockOperands,
    b: BlockOperands,
    preset: Preset,
    *,
    has_inf: bool = True,
) -> torch.Tensor:
    """One tensor-core block: ``c`` plus the products of one block of ``a`` and ``b``.

    ``a`` and ``b`` broadcast to ``[*c.shape, B']`` with ``B' <= preset.block_size`` (a shorter
    block is the zero-padded one). NaN *codes* are not seen here: they are zero in
    :class:`BlockOperands`, and callers apply the NaN rule (a NaN operand makes the result NaN).

    Args:
        c: fp32 accumulator (any finite or non-finite value).
        a: left operands.
        b: right operands.
        preset: the arithmetic.
        has_inf: False promises that no operand is infinite (skips the Inf bookkeeping).

    Returns:
        fp32 tensor of ``c``'s shape. Exact zero results are +0; NaN results are the canonical
        fp32 NaN; a finite sum of magnitude 2**128 or more is +-Inf [open: never recorded].

    Raises:
        TypeError: ``c`` is not a float32 tensor.
        MmaemuError: ``c`` is on the CPU and the CPU flushes subnormals to zero (for example
            after ``torch.set_flush_denormal(True)``): subnormal accumulators would be lost.
        UnsupportedFeatureError: ``c`` requires grad with grad mode on (inference only).
    """
    if not isinstance(c, torch.Tensor) or c.dtype != torch.float32:
        got = c.dtype if isinstance(c, torch.Tensor) else type(c).__name__
        raise TypeError(f"c must be a float32 tensor, got {got}")
    refuse_autograd(("c", c), ("a", a.value), ("b", b.value))
    if c.device.type == "cpu":
        check_cpu_subnormals()
    return _block_fma(c, a, b, preset, has_inf=has_inf)


def _block_fma(c: torch.Tensor, a: BlockOperands, b: BlockOperands, preset: Preset, *, has_inf: bool = True) -> torch.Tensor:
    """:func:`block_fma` without its checks (:func:`chain`'s callers make them once per call)."""
    frac = preset.frac_bits
    aligned = preset.c_mode is CMode.ALIGNED
    wide = a.value.dtype == torch.float64  # fp16, bf16, tf32 operands: products need float64's range
    half_acc = c.dtype == torch.float16
    # Step 1-2: product exponents and the block maximum over nonzero products.
    e = a.exponent + b.exponent  # zeros sit far below any real exponent
    e_products = e.amax(-1).to(torch.int32)
    c_nonzero = torch.isfinite(c) & (c != 0)
    if aligned:
        e_of_c = fp32_exponent(c) if not half_acc else torch.clamp(fp32_exponent(c), min=-14)
        e_c = torch.where(c_nonzero, e_of_c, torch.full_like(e_products, EXPONENT_OF_ZERO))
        e_max = torch.maximum(e_products, e_c)
    else:
        e_max = e_products
    # Step 3: truncate every product term to a multiple of 2**(E - F). Products are exact in
    # fp32 (at most 8 significant bits, |p| in [2**-32, 2**32)); scaling by a power of two is
    # exact, and trunc() is truncation toward zero of the sign-magnitude value. Real product
    # exponents are >= -28, so the clamp only touches blocks without nonzero products.
    # fp16, bf16 and tf32 products are exact in float64 (at most 22 bits, |p| in [2**-266, 2**256]).
    work = torch.float64 if wide else torch.float32
    e_unit = torch.clamp(e_max, min=-300 if wide else -60) - frac  # the block's grid is 2**e_unit
    products = a.value * b.value
    terms = torch.trunc(products * pow2(-e_unit, work).unsqueeze(-1))
    total = terms.sum(-1, dtype=torch.float64 if wide else _sum_dtype(preset)).to(torch.float64)
    if aligned:
        # The accumulator term, in float64 (24 significant bits times a power of two: exact).
        # Without products, E is c's exponent (>= -126), so e_unit is exact there too.
        e_unit = torch.where(e_products > EXPONENT_OF_ZERO // 2, e_unit, torch.clamp(e_max, min=-126) - frac)
        c_safe = torch.where(c_nonzero, c, torch.zeros_like(c)).to(torch.float64)
        total = total + torch.trunc(c_safe * pow2(-e_unit, torch.float64))
    # Step 4: normalise the exact sum total * 2**e_unit.
    if half_acc:
        # An fp16 accumulator: the exact sum rounded once to nearest even on fp16's grid (fp16 zoo
        # vectors, 5,000 of 5,000 on each of five GPUs); subnormal and overflowing results [open].
        value = total * pow2(torch.clamp(e_unit, -1000, 1000), torch.float64)
        if not aligned:
            # [Note: rounded-add with fp16] c enters as the fp32 path has it: the products' sum is
            # rounded first, then c is added by one round-to-nearest-even addition, on fp16's grid
            # here. Two fp16 values add exactly in float64. No recorded vector has this combination
            # (only custom presets make it) [open].
            value = _round_to_fp16(value).to(torch.float64) + torch.where(c_nonzero, c, torch.zeros_like(c)).to(torch.float64)
        return _apply_specials(_round_to_fp16(value), c, a, b, has_inf)
    if preset.rounding is Rounding.TRUNCATE:
        # Toward zero, to F fraction bits (F + 1 significant bits, at most fp32's 24).
        mant, length = torch.frexp(total)
        keep = min(frac, 23) + 1
        kept = torch.trunc(mant * 2.0**keep)
        exp_out = torch.clamp(length.to(torch.int32) - keep + e_unit, -1000, 1000)
        result64 = kept * pow2(exp_out, torch.float64)
        # Below 2**-126 the fp32 grid is 2**-149: truncate to it (a no-op for F <= 23) [open].
        tiny = result64.abs() < 2.0**-126
        if bool(tiny.any()):
            result64 = torch.where(tiny, torch.trunc(result64 * 2.0**149) * 2.0**-149, result64)
        result = result64.to(torch.float32)  # exact; 2**128 or more gives Inf [open]
    else:
        # To nearest even, once, to fp32 (float64 holds the exact sum).
        result = (total * pow2(torch.clamp(e_unit, -1000, 1000), torch.float64)).to(torch.float32)
    result = result + 0.0  # an exact zero is +0
    if not aligned:
        result = result + c  # fp32 addition, round to nearest even
    return _apply_specials(result, c, a, b, has_inf)


def _round_to_fp16(value: torch.Tensor) -> torch.Tensor:
    """An exact float64 ``value`` rounded to nearest even fp16 in one step (no double rounding).

    The grid is 2**(floor(log2|x|) - 10), or 2**-24 below 2**-14; a result of 2**16 or more is +-Inf;
    an exact zero is +0.
    """
    _, length = torch.frexp(value)
    ulp_exp = torch.clamp(length.to(torch.int32) - 1, min=-14) - 10
    q = torch.round(value * pow2(-ulp_exp, torch.float64)) * pow2(ulp_exp, torch.float64)  # half to even
    q = torch.where(q.abs() >= 2.0**16, q.sign() * float("inf"), q)
    return q.to(torch.float16) + 0.0


def _apply_specials(
    result: torch.Tensor, c: torch.Tensor, a: BlockOperands, b: BlockOperands, has_inf: bool
) -> torch.Tensor:
    """IEEE rules for Inf and NaN coming from ``c`` or from infinite operands."""
    pos_inf = c == float("inf")
    neg_inf = c == float("-inf")
    nan = torch.isnan(c)
    if has_inf:
        inf_product = a.is_inf | b.is_inf
        zero_times_inf = (a.is_inf & b.is_zero) | (b.is_inf & a.is_zero)
        negative = a.negative ^ b.negative
        valid_inf = inf_product & ~zero_times_inf
        pos_inf = pos_inf | (valid_inf & ~negative).any(-1)
        neg_inf = neg_inf | (valid_inf & negative).any(-1)
        nan = nan | zero_times_inf.any(-1)
    nan = nan | (pos_inf & neg_inf)
    if not bool((nan | pos_inf | neg_inf).any()):
        return result
    result = torch.where(pos_inf, float("inf"), result)
    result = torch.where(neg_inf, float("-inf"), result)
    nan_out = (OutFormat.FLOAT16 if result.dtype == torch.float16 else OutFormat.FLOAT32).nan_tensor(result.device)
    return torch.where(nan, nan_out, result)


def chain(
    a: BlockOperands,
    b: BlockOperands,
    c: torch.Tensor,
    preset: Preset,
    *,
    has_inf: bool = True,
) -> torch.Tensor:
    """Blocks of ``preset.block_size`` over the whole last dimension, in order, from ``c``.

    The last block is zero-padded (a shorter block). NaN codes are the caller's business, and so
    are the checks of :func:`dot` (fp32 ``c``, equal K, no flush-to-zero on the CPU): this is the
    backends' inner loop, run after those checks.
    """
    k = max(a.value.shape[-1], b.value.shape[-1])
    step = preset.block_size
    for start in range(0, k, step):
        c = _block_fma(c, a.k_slice(start, start + step), b.k_slice(start, start + step), preset, has_inf=has_inf)
    return c


#: The fp16 HMMA step of the sm_90 / sm_100 rewrite: 16 products (m16n8k16).
HMMA_STEP = 16
#: The FP8 instruction the rewrite splits: 32 products (m16n8k32).
HMMA_INSTRUCTION = 32


def _hmma_step_preset(preset: Preset) -> Preset:
    """The fp16 HMMA step of ``preset``'s rewrite: 16 products, c aligned, ``preset.frac_bits`` fraction bits."""
    return Preset(f"{preset.name}-hmma-step", block_size=HMMA_STEP, frac_bits=preset.frac_bits,
                  maturity=preset.maturity, source=preset.source)


def _rewrite_positions(n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions (within one instruction of ``n <= 32`` products) of the two HMMA steps: k mod 4 in {0, 1}, then
    k mod 4 in {2, 3} (an FP8 register holds four consecutive k; unpacked to fp16 it gives a low and a high pair)."""
    k = torch.arange(n, device=device)
    return k[k % 4 < 2], k[k % 4 >= 2]


def hmma_rewrite(a: BlockOperands, b: BlockOperands, c: torch.Tensor, preset: Preset, *,
                 has_inf: bool = True) -> torch.Tensor:
    """FP8 ``mma.sync`` with an fp16 accumulator as sm_90 and sm_100 run it: two fp16 HMMA steps, then c.

    ``a`` and ``b`` are the FP8 operands converted to fp16 (exact) and decoded as fp16
    (:meth:`BlockOperands.of` of a float16 tensor). Per instruction of 32 products, in order over the last
    dimension (the last one zero-padded): ``d = +0``; ``d`` = the HMMA step over the positions k with
    k mod 4 in {0, 1}, then over k mod 4 in {2, 3} (each a 16-product block of :func:`block_fma`'s rules,
    ``d`` aligned with the products, the exact sum rounded once to nearest even fp16, F =
    ``preset.frac_bits``); then ``c = fp16(d + c)``, one round-to-nearest-even addition. [Note: FP8
    mma.sync on sm_90 and sm_100] in :mod:`mmaemu.presets` has the evidence.

    Args:
        a: left operands (fp16 values in float64).
        b: right operands, broadcastable with ``a``.
        c: the fp16 accumulator, of the batch shape.
        preset: the instruction (``preset.fp16_accumulation`` is ``HMMA_REWRITE``).
        has_inf: False promises that no operand is infinite.

    Returns:
        float16 tensor of ``c``'s shape. NaN codes are the caller's (zero here). Inf operands and
        infinite or NaN ``c`` follow IEEE in each step and in the addition (a NaN is the canonical
        0x7FFF); a step result or sum beyond fp16's range becomes +-Inf [open: never recorded]; an
        exact zero step result is +0, and ``d + c`` is -0 only when both are -0 (never: ``d`` is
        +0 or nonzero), so ``c = -0`` with zero products gives +0.
    """
    step = _hmma_step_preset(preset)
    k = max(a.value.shape[-1], b.value.shape[-1])
    for start in range(0, k, HMMA_INSTRUCTION):
        a_i = a.k_slice(start, start + HMMA_INSTRUCTION)
        b_i = b.k_slice(start, start + HMMA_INSTRUCTION)
        d = torch.zeros_like(c)
        for positions in _rewrite_positions(min(HMMA_INSTRUCTION, k - start), c.device):
            if positions.numel():
                d = _block_fma(d, a_i.k_take(positions), b_i.k_take(positions), step, has_inf=has_inf)
        c = _add_fp16(d, c)
    return c


def _add_fp16(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """IEEE fp16 ``x + y``, round to nearest even (two fp16 values add exactly in float64).

    An exact zero sum is +0 unless both are -0; Inf + -Inf and NaN give the canonical NaN 0x7FFF;
    overflow gives +-Inf.
    """
    total = x.to(torch.float64) + y.to(torch.float64)
    finite = torch.isfinite(total)
    out = torch.where(finite, _round_to_fp16(torch.where(finite, total, torch.zeros_like(total))),
                      total.to(torch.float16))
    both_minus_zero = (x == 0) & (y == 0) & torch.signbit(x) & torch.signbit(y)
    out = torch.where(both_minus_zero, torch.full_like(out, -0.0), out)
    return torch.where(torch.isnan(total), OutFormat.FLOAT16.nan_tensor(out.device), out)


_INPUTS = (*FP8_DTYPES, *WIDE_DTYPES)


def _dot_operand(x: object, name: str) -> torch.Tensor:
    """``x`` if it is an operand vector (or batch of them) that :func:`dot` accepts."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor (FP8 codes, float16, bfloat16, or float32 holding tf32 values), "
            f"got {type(x).__name__}"
        )
    if x.dtype not in _INPUTS:
        raise ValueError(
            f"{name} must be float8_e4m3fn, float8_e5m2, float16, bfloat16 or float32 (tf32 values), got {x.dtype}; "
            "convert it first, for example with x.to(torch.float8_e4m3fn), mmaemu.quantization.quantize or "
            "x.to(torch.bfloat16)"
        )
    if x.dim() == 0:
        raise ValueError(
            f"{name} is 0-dimensional: dot reduces over the last dimension, so operands are [..., K] "
            "(use x.reshape(1) for a single product)"
        )
    if x.dtype == torch.float32:
        wide_format_of(x, name)  # tf32 values only
    return x


def _dot_batch(a: torch.Tensor, b: torch.Tensor, c: object) -> torch.Size:
    """The batch shape of ``dot(a, b, c)``; ValueError/TypeError for anything it does not accept."""
    if (a.dtype in FP8_DTYPES) != (b.dtype in FP8_DTYPES) or (a.dtype not in FP8_DTYPES and a.dtype != b.dtype):
        raise ValueError(
            f"a is {a.dtype} and b is {b.dtype}: a tensor-core instruction takes two FP8 operands (any pair), or "
            "two fp16, two bf16 or two tf32 operands"
        )
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(
            f"a and b must have the same length K in their last dimension, got a {tuple(a.shape)} and "
            f"b {tuple(b.shape)} (dot does not broadcast along K)"
        )
    try:
        batch = torch.broadcast_shapes(a.shape[:-1], b.shape[:-1])
    except RuntimeError:
        raise ValueError(
            f"the batch shapes of a {tuple(a.shape[:-1])} and b {tuple(b.shape[:-1])} do not broadcast"
        ) from None
    if b.device != a.device:
        raise ValueError(f"a and b must be on the same device, got {a.device} and {b.device}")
    if c is None:
        return batch
    if not isinstance(c, torch.Tensor):
        raise TypeError(
            f"c must be a float32 tensor or None (+0), got {type(c).__name__}; pass "
            "torch.tensor(value, dtype=torch.float32)"
        )
    if c.dtype == torch.float16 and a.dtype not in (torch.float16, *FP8_DTYPES):
        raise ValueError(
            f"c is float16 (an fp16 accumulator), which the tensor cores offer for FP8 and fp16 operands only, not "
            f"{a.dtype}; pass a float32 c"
        )
    if c.dtype not in (torch.float32, torch.float16):
        raise ValueError(
            f"c must be float32 (the fp32 accumulator; float16 selects the fp16 accumulator of fp16 or FP8 operands), "
            f"got {c.dtype}; convert it with c.to(torch.float32) where that conversion is what you mean"
        )
    if c.device != a.device:
        raise ValueError(f"c must be on the operands' device {a.device}, got {c.device}")
    try:
        fits = torch.broadcast_shapes(c.shape, batch) == batch
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"c of shape {tuple(c.shape)} does not broadcast to the batch shape {tuple(batch)} of a and b "
            "(the output has the batch shape; c may not enlarge it)"
        )
    return batch


def dot(
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor | None = None,
    *,
    preset: str | Preset,
) -> torch.Tensor:
    """The chained block FMA of a tensor-core instruction, over the last dimension.

    The operands' dtype selects the input format: FP8 (``float8_e4m3fn``, ``float8_e5m2``, any
    pair), or two operands of one of fp16 (``float16``), bf16 (``bfloat16``) and tf32 (``float32``
    tensors holding tf32 values); :data:`mmaemu.presets.ZOO` has those formats' instructions.

    Args:
        a: operands ``[..., K]``, at least 1-D.
        b: operands ``[..., K]`` with the same K; batch dimensions broadcastable with ``a``'s.
        c: accumulator tensor, broadcastable to the batch shape (a 0-d tensor for one vector), on
            the operands' device; default (None) +0 in fp32. float32 is the fp32 accumulator;
            float16 selects the fp16 accumulator (fp16 or FP8 operands: results rounded to nearest
            even fp16). With FP8 operands the preset says how (``Preset.fp16_accumulation``): ``ada``
            its blocks, each rounded to fp16; ``hopper_mma_sync`` and ``b200_mma_sync`` the sm_90 /
            sm_100 rewrite into two fp16 HMMA steps with c added last (:func:`hmma_rewrite`).
        preset: a preset name or a custom :class:`Preset`. FP8: ``"hopper"`` (fp32 accumulator
            only), ``"ada"``, ``"hopper_mma_sync"`` (fp16 accumulator only), ``"b200_mma_sync"``
            (``"b200"`` is its alias) or the experimental ``"sm120"`` (fp32 accumulator only). fp16,
            bf16, tf32: an architecture, ``"volta"`` (fp16 only), ``"ampere"``, ``"ada"``,
            ``"hopper"``, ``"b200"`` or the experimental ``"sm120"``.

    Returns:
        A tensor of the batch shape, of ``c``'s dtype (fp32 when ``c`` is None). A NaN anywhere in
        ``a[..., :]`` or ``b[..., :]`` gives the canonical NaN (fp32 0x7FFFFFFF, fp16 0x7FFF); Inf inputs follow IEEE (``inf * 0`` and opposite
        infinities give NaN); a NaN ``c`` gives the canonical NaN and an infinite ``c`` stays
        infinite unless an opposite infinity meets it; exact zero results are +0 (so ``c = -0``
        with zero products returns +0). K = 0 returns ``c`` unchanged (-0 and NaN payloads included).

    Raises:
        TypeError: ``a`` or ``b`` is not a tensor, or ``c`` is neither a tensor nor None (a
            Python float is refused: pass ``torch.tensor(x, dtype=torch.float32)``).
        ValueError: an operand of another dtype or 0-dimensional, a float32 operand holding a
            value that is not tf32 (:func:`mmaemu.quantization.round_to_tf32` rounds it), operands
            of two different non-FP8 formats, different K in ``a`` and ``b``, batch shapes that do
            not broadcast, a ``c`` that is neither float32 nor (fp16 or FP8 operands) float16 or does
            not broadcast to the batch shape, or tensors on different devices.
        MmaemuError: CPU operands while the CPU flushes subnormals (``torch.set_flush_denormal(True)``).
        KeyError, UnsupportedFeatureError: an unknown or unmodelled preset, one without an
            instruction for the operands' format, or an FP8 preset whose accumulator (``c``'s dtype)
            no recording decides (:func:`mmaemu.presets.instruction_preset`).
        UnsupportedFeatureError: ``a``, ``b`` or ``c`` requires grad with grad mode on (inference only).

    Example:
        >>> import torch, mmaemu
        >>> a = torch.full((32,), 1.0).to(torch.float8_e4m3fn)
        >>> b = torch.full((32,), 2.0**-12).to(torch.float8_e4m3fn)
        >>> c = torch.tensor(1.0)
        >>> mmaemu.model.dot(a, b, c, preset="hopper").item()  # each product truncates away
        1.0
        >>> h = torch.full((4,), 2.0**-12, dtype=torch.float16)  # fp16: products of 2**-24
        >>> mmaemu.model.dot(h, h, c, preset="volta").item()  # 23 fraction bits below c's exponent
        1.0
        >>> mmaemu.model.dot(h, h, c, preset="hopper").item() == 1 + 2.0**-22  # 25 bits keep them
        True
    """
    a = _dot_operand(a, "a")
    b = _dot_operand(b, "b")
    batch = _dot_batch(a, b, c)
    refuse_autograd(("a", a), ("b", b), ("c", c))
    half = isinstance(c, torch.Tensor) and c.dtype == torch.float16
    resolved = instruction_preset(preset, a.dtype, accumulator=Accumulator.FP16 if half else Accumulator.FP32)
    if a.device.type == "cpu":
        check_cpu_subnormals()
    rewrite = half and a.dtype in FP8_DTYPES and resolved.fp16_accumulation is HalfAccumulation.HMMA_REWRITE
    # the rewrite converts the FP8 operands to fp16 first (exact: both FP8 formats are inside fp16)
    a_ops, b_ops = (BlockOperands.of(x.to(torch.float16) if rewrite else x) for x in (a, b))
    acc = torch.zeros(batch, dtype=torch.float32, device=a.device) if c is None else c.expand(batch).clone()
    has_inf = bool(a_ops.is_inf.any() or b_ops.is_inf.any())
    step = hmma_rewrite if rewrite else chain
    return _canonical_nans(step(a_ops, b_ops, acc, resolved, has_inf=has_inf), a, b, batch)


def _canonical_nans(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor, batch: torch.Size) -> torch.Tensor:
    """``acc`` with the canonical NaN of its dtype wherever ``a``'s or ``b``'s vector holds a NaN."""
    nan = nan_rows(a) | nan_rows(b)
    if bool(nan.any()):
        out_format = OutFormat.FLOAT16 if acc.dtype == torch.float16 else OutFormat.FLOAT32
        acc = torch.where(nan.expand(batch), out_format.nan_tensor(acc.device), acc)
    return acc
