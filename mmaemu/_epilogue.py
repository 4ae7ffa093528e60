"""The GEMM epilogue: scaling the fp32 accumulator and rounding it to the output type.

What the reference GPUs compute (seeds 000 and 002; RTX 4060 recordings ``epilogue.*``):

- ``alpha = fp32(scale_a * scale_b)``, rounded to nearest even;
- ``y = fma(acc, alpha, +0)``: the exact product rounded once to fp32. An exactly-zero product
  gives +0 (so ``-0 * alpha`` is +0), while a nonzero product that rounds to zero keeps its sign;
- bf16 and fp16 outputs are rounded (to nearest even) from ``y``: the result is rounded twice;
- FP8 outputs: ``z = fp32(y * scale_result)`` when ``scale_result`` is given (a separate fp32
  multiply), then a saturating round-to-nearest-even conversion: magnitudes beyond the format's
  largest finite value, infinities included, become +-448 (E4M3) or +-57344 (E5M2);
- NaN results are written as the output type's canonical NaN (fp32 0x7FFFFFFF, bf16/fp16 0x7FFF,
  FP8 0x7F).

[Note: bias] A bias (``bias=``, bf16 or fp16 outputs only, as torch 2.7.1 allows) is experimental:
no recording of a biased call's output exists. cuBLASLt's bias epilogue adds the bias vector to
every row in fp32 before the conversion to the output type; where exactly is open, and
:class:`BiasOrder` names the two candidates. ``AFTER_SCALE`` (the default) is CUTLASS's
``LinearCombinationBias``-style order: ``y = fma(acc, alpha, +0)`` rounded to fp32 as above, then
``y + bias`` rounded to fp32 again. ``FUSED`` adds the bias inside the fused multiply-add:
``fma(acc, alpha, bias)``, one rounding to fp32. They differ where the second rounding of
``AFTER_SCALE`` changes a bit (most outputs agree once rounded to bf16), and in the sign of a zero.
``python -m mmaemu record`` records biased probe calls that tell them apart, and its replay names
the one that fits.
"""

from __future__ import annotations

import enum

import torch

from .formats import OUT_DTYPES, OutFormat, out_format_of
from ._host import check_cpu_subnormals, refuse_autograd

__all__ = ["BiasOrder", "epilogue"]


class BiasOrder(enum.Enum):
    """Where the bias enters the epilogue ([Note: bias]): the candidates a recording decides between."""

    #: ``RN32(RN32(fma(acc, alpha, +0)) + bias)``: scaled and rounded, then the bias added and rounded.
    AFTER_SCALE = "after-scale"
    #: ``RN32(acc * alpha + bias)``: the bias is the fused multiply-add's addend, one rounding.
    FUSED = "fused"

_ACCEPTED = ", ".join(str(d) for d in OUT_DTYPES)


def _scalar_fp32(x: object, name: str, device: torch.device) -> torch.Tensor:
    """A one-element fp32 tensor scale as a 0-dim tensor on ``device`` (moving it is exact)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{name} must be a float32 torch.Tensor with one element, as torch._scaled_mm takes it, got "
            f"{type(x).__name__}; pass torch.tensor(value, dtype=torch.float32) (a Python float is not "
            "accepted: its rounding to fp32 would be implicit)"
        )
    if x.numel() != 1:
        raise ValueError(f"{name} must have exactly one element (tensor-wise scaling), got shape {tuple(x.shape)}")
    if x.dtype != torch.float32:
        raise TypeError(f"{name} must be a float32 tensor, got {x.dtype}; convert it first if the conversion is exact")
    return x.detach().reshape(()).to(device)


def scratch_epilogue(acc: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *, out_dtype: torch.dtype,
                     scale_result: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                     bias_order: BiasOrder = BiasOrder.AFTER_SCALE) -> torch.Tensor:
    """:func:`epilogue` of an accumulator the caller owns and no longer needs: ``acc`` may be overwritten.

    The same bits, checks and errors; :func:`mmaemu.scaled_mm` passes it the backend's fresh
    accumulators ([Note: fma(acc, alpha, +0) in fp32]).
    """
    return _epilogue(acc, scale_a, scale_b, out_dtype=out_dtype, scale_result=scale_result, bias=bias,
                     bias_order=bias_order, scratch=True)


def epilogue(
    acc: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    *,
    out_dtype: torch.dtype,
    scale_result: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    bias_order: BiasOrder = BiasOrder.AFTER_SCALE,
) -> torch.Tensor:
    """Scale an fp32 accumulator and round it to ``out_dtype`` as the reference GPU's epilogue does.

    ``epilogue(accumulate(a, b, ...), scale_a, scale_b, out_dtype=...)`` equals
    ``scaled_mm(a, b.t(), scale_a, scale_b, out_dtype=...)`` wherever both apply.

    Args:
        acc: fp32 accumulator of any shape (for example from :func:`mmaemu.accumulate`).
        scale_a: fp32 tensor with one element (any shape; moved to ``acc``'s device).
        scale_b: fp32 tensor with one element.
        out_dtype: ``torch.float32``, ``bfloat16``, ``float16``, ``float8_e4m3fn`` or ``float8_e5m2``.
        scale_result: fp32 tensor with one element, applied for FP8 outputs only (ignored for the
            others, as by cuBLASLt's D scale, but checked for every output as torch checks it).
        bias: experimental ([Note: bias]): a 1-D bf16 or fp16 tensor of ``acc.shape[-1]`` elements
            added to every row, for bf16 and fp16 outputs only. Its values are converted to fp32
            exactly; a NaN bias gives NaN, an infinite one infinity (IEEE addition).
        bias_order: where the bias enters (:class:`BiasOrder`).

    Returns:
        A tensor of ``acc``'s shape and ``out_dtype`` on ``acc``'s device. NaN accumulators or
        scales (and ``inf * 0``) give the canonical NaN of ``out_dtype``; an exactly-zero product
        (-0 accumulators included) gives +0, while a nonzero product that rounds to zero keeps its
        sign; infinities stay infinite for fp32, bf16 and fp16 outputs (as do overflows) and
        saturate to +-max for FP8 outputs.

    Raises:
        TypeError: ``acc`` is not a float32 tensor, or a scale is not a float32 tensor (Python
            numbers are refused: pass ``torch.tensor(x, dtype=torch.float32)``).
        ValueError: a scale with more than one element, an ``out_dtype`` no FP8 GEMM produces, or a
            bias that is not a bf16 or fp16 vector of ``acc.shape[-1]`` elements, or one with an
            fp32 or FP8 output.
        UnsupportedFeatureError: an argument requires grad with grad mode on (inference only).
        MmaemuError: ``acc`` is on the CPU and the CPU flushes subnormals to zero (for example
            after ``torch.set_flush_denormal(True)``), which would change the rounding to fp32.

    Example:
        >>> import torch, mmaemu
        >>> acc = torch.tensor([-0.0, 1.0, 3.0])
        >>> mmaemu.epilogue(acc, torch.tensor(1.0), torch.tensor(0.5), out_dtype=torch.bfloat16)
        tensor([0.0000, 0.5000, 1.5000], dtype=torch.bfloat16)
    """
    return _epilogue(acc, scale_a, scale_b, out_dtype=out_dtype, scale_result=scale_result, bias=bias,
                     bias_order=bias_order, scratch=False)


def _epilogue(acc: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *, out_dtype: torch.dtype,
              scale_result: torch.Tensor | None = None, bias: torch.Tensor | None = None,
              bias_order: BiasOrder = BiasOrder.AFTER_SCALE, scratch: bool) -> torch.Tensor:
    """:func:`epilogue`; ``scratch``: ``acc`` may be overwritten (:func:`scratch_epilogue`)."""
    if not isinstance(acc, torch.Tensor):
        raise TypeError(f"acc must be a float32 torch.Tensor, got {type(acc).__name__}")
    if acc.dtype != torch.float32:
        raise TypeError(f"acc must be float32 (the fp32 accumulator), got {acc.dtype}")
    if not isinstance(out_dtype, torch.dtype) or out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype={out_dtype!r} is not an output dtype of an FP8 GEMM; accepted: {_ACCEPTED}")
    refuse_autograd(("acc", acc), ("scale_a", scale_a), ("scale_b", scale_b), ("scale_result", scale_result),
                    ("bias", bias))
    fmt = out_format_of(out_dtype)
    device = acc.device
    sa = _scalar_fp32(scale_a, "scale_a", device).to(torch.float64)
    sb = _scalar_fp32(scale_b, "scale_b", device).to(torch.float64)
    # checked for every output dtype, as torch checks it, though only FP8 outputs use it
    sr = None if scale_result is None else _scalar_fp32(scale_result, "scale_result", device).to(torch.float64)
    if device.type == "cpu":
        check_cpu_subnormals()  # MmaemuError under flush-to-zero: the fp32 rounding needs subnormals
    b32 = None if bias is None else _bias_fp32(bias, acc, fmt.fp8 is None and out_dtype != torch.float32)
    alpha = (sa * sb).to(torch.float32)  # exact product, one rounding to fp32
    return _round_to_output(_scaled_fp32(acc, alpha, b32, bias_order, scratch), fmt, sr)


def _scaled_fp32(acc: torch.Tensor, alpha: torch.Tensor, b32: torch.Tensor | None, bias_order: BiasOrder,
                 scratch: bool) -> torch.Tensor:
    """The first rounding: ``acc * alpha`` (and the bias, by ``bias_order``) rounded to fp32.

    [Note: fma(acc, alpha, +0) in fp32] Without a bias, ``(acc * sign(alpha) + 0.0) * |alpha|`` in
    fp32: the first multiply is exact, adding +0.0 turns only zeros into +0, and the last multiply is
    the exact product rounded once (IEEE), with the sign of a nonzero product that rounds to zero
    kept. It gives fma's bits for every alpha: 0 (zeros for finite acc, NaN for infinite), +-Inf
    (NaN for zero acc) and NaN (sign(NaN) is NaN), with no host synchronisation. ``scratch``: ``acc``
    is the caller's own buffer and is overwritten (three passes in place instead of fresh tensors,
    whose first touch costs more than the arithmetic on a CPU).
    """
    if b32 is None:
        y = acc.mul_(torch.sign(alpha)) if scratch else acc * torch.sign(alpha)
        return y.add_(0.0).mul_(torch.abs(alpha))
    # fma(acc, alpha, +0): the float64 product is exact (24 x 24 bits, no float64 underflow);
    # adding +0.0 turns only an exactly-zero product into +0; then one rounding to fp32.
    product = acc.to(torch.float64) * alpha.to(torch.float64)
    if bias_order is BiasOrder.AFTER_SCALE:
        return ((product + 0.0).to(torch.float32).to(torch.float64) + b32.to(torch.float64)).to(torch.float32)
    if bias_order is BiasOrder.FUSED:
        return _round_sum_to_fp32(product, b32.to(torch.float64).expand_as(product))
    raise TypeError(f"bias_order must be a BiasOrder, got {bias_order!r}")


def _round_to_output(y: torch.Tensor, fmt: OutFormat, sr: torch.Tensor | None) -> torch.Tensor:
    """The second rounding: fp32 ``y`` into ``fmt`` (FP8: times ``sr``, saturated), NaN as ``fmt``'s canonical NaN."""
    nan = torch.isnan(y)
    fp8 = fmt.fp8
    if fp8 is not None:
        if sr is not None:
            y = (y.to(torch.float64) * sr).to(torch.float32)
            nan = torch.isnan(y)
        limit = fp8.max_finite
        out = torch.clamp(y, -limit, limit).to(fmt.dtype)  # saturate, then round to nearest even
    else:
        out = y.to(fmt.dtype)
    return out_format_of(out.dtype).write_nan(out, nan)


def _bias_fp32(bias: object, acc: torch.Tensor, output_takes_bias: bool) -> torch.Tensor:
    """The bias as fp32 (exact from bf16 or fp16) on ``acc``'s device, checked."""
    if not isinstance(bias, torch.Tensor):
        raise TypeError(f"bias must be a tensor or None, got {type(bias).__name__}")
    if not output_takes_bias:
        raise ValueError("bias with an fp32 or FP8 output: torch 2.7.1 refuses fp32 outputs with a bias, and where "
                         "cuBLASLt adds a bias to an FP8 output (before or after scale_result) is not recorded")
    n = acc.shape[-1] if acc.dim() else 1
    if bias.dtype not in (torch.bfloat16, torch.float16) or bias.dim() != 1 or bias.numel() != n:
        raise ValueError(f"bias must be a bf16 or fp16 vector of {n} elements (one per output column), got "
                         f"{bias.dtype} of shape {tuple(bias.shape)}")
    return bias.detach().to(device=acc.device, dtype=torch.float32)


def _round_sum_to_fp32(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x + y`` (float64 values, each exact) rounded once to fp32, without double rounding.

    The float64 sum is rounded to odd (a TwoSum gives the exact error; an inexact sum with an even
    last bit moves one ulp toward the error), and rounding a round-to-odd value with 53 bits to 24
    bits equals rounding the exact sum (53 >= 24 + 2). An exact zero sum is +0 unless both are -0.
    """
    s = x + y
    bb = s - x
    err = (x - (s - bb)) + (y - bb)  # TwoSum: x + y == s + err exactly (finite values)
    bits = s.view(torch.int64)
    inexact = (err != 0) & torch.isfinite(s) & ((bits & 1) == 0)
    toward = torch.where(err > 0, torch.full_like(s, float("inf")), torch.full_like(s, float("-inf")))
    odd = torch.where(inexact, torch.nextafter(s, toward), s)
    return odd.to(torch.float32)
