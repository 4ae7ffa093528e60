"""FP8 quantisation of activations and weights, as Transformer Engine casts them.

An FP8 GEMM's bits depend on its FP8 operands, so a model routed through mmaemu must quantise
exactly as the reference run did. Transformer Engine (TE) casts a tensor to FP8 in three steps,
each reproduced here:

1. **scale**: ``fp32(x) * scale`` in fp32, rounded to nearest even (TE's cast kernels compute in
   fp32 whatever the input type);
2. **saturate** to the format's largest finite value (E4M3 448, E5M2 57344): TE converts with
   CUDA's ``__NV_SATFINITE`` mode, so overflows and infinities become +-max;
3. **cast** to FP8, rounding to nearest even.

The GEMM then receives ``scale_inv = fp32(1 / scale)`` (TE's ``reciprocal``, correctly rounded) as
the operand's ``scale_a`` / ``scale_b``.

Scales come from one of TE's recipes:

- **delayed scaling** (``DelayedScaling``, what Evo 2 uses): a scale stored with the module and
  updated from an amax history between steps, ``scale = (fp8_max / amax) / 2**margin``
  (:func:`scale_from_amax`); at inference the checkpoint's stored scale is used as is;
- **current scaling** (``Float8CurrentScaling``): a scale computed from the tensor itself just
  before the cast, ``scale = fp8_max / amax(x)`` (:func:`current_scale`).

What is verified: the arithmetic of steps 1-3 is IEEE fp32 multiplication and torch's
round-to-nearest-even FP8 conversion of a value already within range, which is what TE's kernels
compute as read from their source (``cast_kernels.cuh``, ``vectorized_pointwise.h``,
``recipe_common.cuh``). What is **not** verified against TE's own bits, for want of a GPU with TE
here: the sign of the NaN code a NaN input becomes (it never changes a GEMM output, where any NaN
operand gives the canonical NaN), TE's handling of NaN inputs in the amax of current scaling
(``fmaxf`` ignores NaNs, as modelled here), and the ``amax_epsilon`` and power-of-two options of
current scaling (not modelled: their defaults, 0 and off, are).
"""

from __future__ import annotations

import enum
import numbers

import torch

from .errors import UnsupportedFeatureError
from .formats import Fp8Format, OutFormat, fp8_format_of, out_format_of
from ._host import check_cpu_subnormals, refuse_autograd

__all__ = [
    "ScalingRecipe", "quantize", "reciprocal_scale", "scale_from_amax", "current_scale", "round_to_tf32", "FP32_MAX",
    "BlockQuantizer", "quantize_fp8_groups", "quantize_fp8_blocks", "dequantize_fp8_blocks",
]

#: the largest finite fp32, which TE uses for a scale that would overflow.
FP32_MAX = float(torch.finfo(torch.float32).max)


class ScalingRecipe(enum.Enum):
    """How the quantisation scale of an activation is obtained."""

    DELAYED = "delayed"  # a stored scale (TE's DelayedScaling; frozen at inference)
    CURRENT = "current"  # computed from the tensor's own amax at each call (TE's Float8CurrentScaling)


def _format(dtype: torch.dtype | Fp8Format) -> Fp8Format:
    return dtype if isinstance(dtype, Fp8Format) else fp8_format_of(dtype)


def _as_fp32_scale(scale: object, device: torch.device, name: str = "scale") -> torch.Tensor:
    """A one-element tensor or a real number as a 0-dim fp32 tensor on ``device`` (rounded to nearest even)."""
    if isinstance(scale, torch.Tensor):
        if scale.numel() != 1:
            raise ValueError(f"{name} must have one element (tensor-wise), got shape {tuple(scale.shape)}")
        if scale.dtype == torch.bool or scale.is_complex():
            raise TypeError(f"{name} must be a real number or a real tensor, got a {scale.dtype} tensor")
        refuse_autograd((name, scale))  # the result is detached: a gradient would be lost in silence
        return scale.detach().to(device=device, dtype=torch.float32).reshape(())
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"{name} must be a one-element tensor or a real number, got {type(scale).__name__}")
    return torch.tensor(float(scale), dtype=torch.float32, device=device)


def _require_subnormals(device: torch.device) -> None:
    """:func:`mmaemu._host.check_cpu_subnormals` where this module's fp32 arithmetic runs on the CPU.

    Skipped while ``torch.compile`` traces (the probe reads a value; it would break the graph):
    the compiled :class:`~mmaemu.nn.EmulatedFP8Linear` still refuses, since its
    ``mmaemu::scaled_mm`` operator probes in the same thread when it runs.
    """
    if device.type == "cpu" and not torch.compiler.is_compiling():
        check_cpu_subnormals()


def quantize(x: torch.Tensor, scale: torch.Tensor | float, dtype: torch.dtype = torch.float8_e4m3fn) -> torch.Tensor:
    """Cast ``x`` to FP8 as Transformer Engine does: ``fp8(saturate(fp32(x) * scale))``.

    Args:
        x: a floating-point tensor (bf16, fp16, fp32, fp64 is converted to fp32 first), any shape.
        scale: the quantisation scale (TE's ``scale``, not ``scale_inv``): a one-element tensor
            or a Python number, used in fp32.
        dtype: ``torch.float8_e4m3fn`` (TE's forward format) or ``torch.float8_e5m2``.

    Returns:
        A tensor of ``dtype`` and ``x``'s shape. The product is rounded to fp32, saturated to the
        format's largest finite value (infinities included, as CUDA's SATFINITE conversion) and
        rounded to nearest even; -0 stays -0; a NaN stays a NaN (its code's sign bit is not
        verified against TE, and no GEMM output depends on it).

    Raises:
        ValueError: a non-FP8 ``dtype``, a non-floating-point ``x`` or a scale with more than one
            element.
        TypeError: ``x`` is not a tensor, or ``scale`` is neither a tensor nor a real number.
        MmaemuError: ``x`` is on the CPU and the CPU flushes subnormals to zero (for example
            after ``torch.set_flush_denormal(True)``): subnormal inputs would be read as zero.
        UnsupportedFeatureError: ``x`` or ``scale`` requires grad with grad mode on (inference only).

    Example:
        >>> import torch
        >>> from mmaemu.quantization import quantize
        >>> x = torch.tensor([1.0, -3.0, 500.0, float("inf"), -0.0, 1.0625])
        >>> quantize(x, 1.0).float()
        tensor([  1.,  -3., 448., 448.,  -0.,   1.])
        >>> quantize(x, torch.tensor(0.5), torch.float8_e5m2).float().tolist()
        [0.5, -1.5, 256.0, 57344.0, -0.0, 0.5]
    """
    fmt = _format(dtype)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"quantize expects a floating-point torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"quantize expects a floating-point tensor, got {x.dtype}")
    refuse_autograd(("x", x))
    s = _as_fp32_scale(scale, x.device)
    _require_subnormals(x.device)
    scaled = x.to(torch.float32) * s
    return scaled.clamp(-fmt.max_finite, fmt.max_finite).to(fmt.dtype)


def reciprocal_scale(scale: torch.Tensor | float) -> torch.Tensor:
    """``scale_inv = fp32(1 / scale)``, correctly rounded: what TE passes to the GEMM.

    Returns:
        A 0-dim fp32 tensor on ``scale``'s device (the CPU for a number). ``1 / +-0`` gives
        +-Inf, ``1 / +-Inf`` +-0 and ``1 / NaN`` NaN, as IEEE division.

    Raises:
        ValueError: a tensor with more than one element.
        TypeError: neither a tensor nor a real number.
        MmaemuError: on the CPU, when the CPU flushes subnormals to zero (see :func:`quantize`).

    Example:
        >>> from mmaemu.quantization import reciprocal_scale
        >>> reciprocal_scale(64.0)
        tensor(0.0156)
    """
    device = scale.device if isinstance(scale, torch.Tensor) else torch.device("cpu")
    s = _as_fp32_scale(scale, device)
    _require_subnormals(device)
    return torch.reciprocal(s)


def scale_from_amax(
    amax: torch.Tensor | float,
    dtype: torch.dtype = torch.float8_e4m3fn,
    *,
    margin: int = 0,
    previous: torch.Tensor | float = 1.0,
) -> torch.Tensor:
    """Delayed scaling's scale update: ``(fp8_max / amax) / 2**margin`` in fp32.

    ``amax`` is the reduced amax history (its maximum under ``amax_compute_algo="max"``, its most
    recent entry under ``"most_recent"``). An amax that is zero, negative, infinite or NaN keeps
    ``previous``; a scale that overflows fp32 becomes the largest finite fp32, as in TE.

    Returns:
        A 0-dim fp32 tensor on ``amax``'s device.

    Raises:
        ValueError: ``amax`` or ``previous`` with more than one element (reduce the history
            first), or a ``margin`` outside [-126, 127] (``2**margin`` must be a normal fp32).
        TypeError: a ``margin`` that is not an int, or ``amax``/``previous`` neither a tensor nor
            a real number.
        MmaemuError: on the CPU, when the CPU flushes subnormals to zero (see :func:`quantize`).

    Example:
        >>> from mmaemu.quantization import scale_from_amax
        >>> scale_from_amax(7.0), scale_from_amax(7.0, margin=1), scale_from_amax(0.0, previous=3.0)
        (tensor(64.), tensor(32.), tensor(3.))
    """
    fmt = _format(dtype)
    if isinstance(margin, bool) or not isinstance(margin, int):
        raise TypeError(f"margin must be an int (TE's DelayedScaling.margin), got {type(margin).__name__}")
    if not -126 <= margin <= 127:
        raise ValueError(f"margin={margin}: 2**margin must be a normal fp32, so margin must lie in [-126, 127]")
    device = amax.device if isinstance(amax, torch.Tensor) else torch.device("cpu")
    a = _as_fp32_scale(amax, device, "amax")
    prev = _as_fp32_scale(previous, device, "previous")
    _require_subnormals(device)
    max_fp8 = torch.tensor(fmt.max_finite, dtype=torch.float32, device=device)
    scale = (max_fp8 / a) / torch.tensor(2.0**margin, dtype=torch.float32, device=device)
    scale = torch.where(torch.isfinite(a) & (a > 0), scale, prev)
    return torch.where(torch.isinf(scale), torch.full_like(scale, FP32_MAX), scale)


def current_scale(x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn) -> torch.Tensor:
    """Current scaling's scale for ``x``: ``fp8_max / amax(x)`` in fp32 (TE's ``compute_scale_from_amax``).

    ``amax`` is the largest ``|x|`` with NaNs ignored (TE reduces with ``fmaxf``). An amax of 0
    (including an empty or all-NaN tensor) or Inf gives scale 1; a scale that overflows fp32
    becomes the largest finite fp32. TE's ``amax_epsilon`` (default 0) and power-of-two scales
    (default off) are not modelled.

    Returns:
        A 0-dim fp32 tensor on ``x``'s device.

    Raises:
        TypeError: ``x`` is not a tensor.
        ValueError: ``x`` is not floating point, or a non-FP8 ``dtype``.
        MmaemuError: on the CPU, when the CPU flushes subnormals to zero (see :func:`quantize`).

    Example:
        >>> import torch
        >>> from mmaemu.quantization import current_scale
        >>> current_scale(torch.tensor([1.0, -7.0, float("nan")]))
        tensor(64.)
        >>> current_scale(torch.zeros(3))
        tensor(1.)
    """
    fmt = _format(dtype)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"current_scale expects a floating-point torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"current_scale expects a floating-point tensor, got {x.dtype}")
    if x.numel() == 0:
        return torch.ones((), dtype=torch.float32, device=x.device)
    _require_subnormals(x.device)
    magnitude = x.detach().to(torch.float32).abs()
    amax = torch.where(torch.isnan(magnitude), torch.zeros_like(magnitude), magnitude).amax()
    max_fp8 = torch.tensor(fmt.max_finite, dtype=torch.float32, device=x.device)
    scale = max_fp8 / amax
    scale = torch.where(torch.isinf(scale), torch.full_like(scale, FP32_MAX), scale)
    return torch.where((amax == 0) | torch.isinf(amax), torch.ones_like(scale), scale)


def round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """Round fp32 values to tf32 (10 fraction bits), to nearest with ties to even, in a new float32 tensor.

    The result is what :func:`mmaemu.model.dot` and :func:`mmaemu.accumulate` accept as tf32 operands.
    Subnormals round on the same grid (their 13 low fraction bits); a value that rounds past the
    largest tf32 becomes +-Inf; +-Inf and -0 are kept; a NaN becomes a quiet NaN of the same sign
    with only its top fraction bit set. The rounding mode of a GPU's own fp32 -> tf32 conversion is
    not modelled here (PTX's ``cvt.rna.tf32.f32`` rounds ties away from zero): round the way your
    program does, this function is one choice.

    Example:
        >>> import torch, mmaemu
        >>> mmaemu.quantization.round_to_tf32(torch.tensor([1 + 2.0**-11, 1 + 3 * 2.0**-11])).tolist()
        [1.0, 1.001953125]
    """
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"round_to_tf32 takes a float32 tensor, got {got}")
    refuse_autograd(("x", x))
    bits = x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    magnitude = bits & 0x7FFFFFFF
    rounded = (bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000  # carries into the exponent: Inf at the top
    nan = magnitude > 0x7F800000
    out = torch.where(nan, (bits & 0x80000000) | 0x7FC00000, torch.where(magnitude == 0x7F800000, bits, rounded))
    return _int32_bits(out).view(torch.float32)


def _int32_bits(unsigned: torch.Tensor) -> torch.Tensor:
    """int64 values in [0, 2**32) as the int32 tensor with the same 32 bits."""
    return torch.where(unsigned >= 2**31, unsigned - 2**32, unsigned).to(torch.int32)


# --- block-scaled checkpoints (DeepSeek-V3 style): 1 x 128 activation groups, 128 x 128 weight blocks --------------


class BlockQuantizer(enum.Enum):
    """The reference quantizers of block-scaled checkpoints, and whether mmaemu reproduces each one exactly.

    [Note: block quantizers] ``VLLM_CUDA``: vLLM's ``per_token_group_fp8_quant`` CUDA kernel, which vLLM runs for
    contiguous CUDA activations (vllm 0.10.0 fp8_utils.py 410-414; ``csrc/quantization/fp8/per_token_group_quant.cu``:
    ``local_absmax = eps``, ``fmaxf(local_absmax, fabsf(x))`` over the group, ``y_s = local_absmax / max_8bit``,
    ``q = fminf(fmaxf(x / y_s, min_8bit), max_8bit)``, ``DST_DTYPE(q)``): IEEE fp32 division (vLLM builds without
    fast math) and c10's round-to-nearest-even conversion, exactly reproducible. ``TRANSFORMERS``: transformers
    5.23's FineGrainedFP8 weight quantizer (``integrations/finegrained_fp8.py`` 1040-1075, ``_quantize_one``): per
    128 x 128 block ``scales = 448 / max|w|`` (1 for an all-zero block; torch computes ``448 / t`` as
    ``t.reciprocal() * 448``: ``torch/_tensor.py`` ``__rdiv__``, two roundings), ``weight_scale_inv = 1 / scales``,
    codes ``clamp(w * scales, -448, 448)`` converted to E4M3: torch operations, reproduced by the same torch
    operations here (assuming torch's CUDA reciprocal, multiply, amax and conversion are IEEE, as its CPU ones are;
    no GPU checked it). ``DEEPSEEK_TRITON`` and ``TORCHAO_TRITON``: DeepSeek-V3's ``act_quant`` / torchao's
    ``fp8_blockwise_*_quant`` Triton kernels, whose ``x / s`` compiles to ``div.full.f32`` (``MUFU.RCP`` and a
    multiply: up to 2 ulp, not specified bit for bit) and whose ``amax / 448`` ptxas folds into
    ``amax * rn(1/448)`` (54.8 % of fp32 significands round differently from the IEEE quotient;
    research/blockfp8 compile_quant.py, check_div448.py): not exactly reproducible, refused. Power-of-two
    (UE8M0) scales go through ``log2f`` / ``torch.log2`` on the GPU, whose last bit is not specified: refused.
    """

    VLLM_CUDA = "vllm-cuda"
    TRANSFORMERS = "transformers"
    DEEPSEEK_TRITON = "deepseek-triton"
    TORCHAO_TRITON = "torchao-triton"


_E4M3 = Fp8Format.E4M3


def _block_quantizer(quantizer: BlockQuantizer | str, allowed: BlockQuantizer) -> None:
    """Raise unless ``quantizer`` is ``allowed`` ([Note: block quantizers])."""
    try:
        chosen = BlockQuantizer(quantizer)
    except ValueError:
        raise ValueError(f"quantizer={quantizer!r}: one of {[q.value for q in BlockQuantizer]}") from None
    if chosen in (BlockQuantizer.DEEPSEEK_TRITON, BlockQuantizer.TORCHAO_TRITON):
        raise UnsupportedFeatureError(
            f"quantizer={chosen.value!r} is not reproducible bit for bit: its Triton kernel divides with div.full.f32 "
            "(an approximate reciprocal, up to 2 ulp, not specified exactly) and folds amax / 448 into amax * "
            "rn(1/448); mmaemu does not approximate it. Use quantizer='vllm-cuda' for activations or "
            "'transformers' for weights, or quantize on the GPU and pass the codes and scales")
    if chosen is not allowed:
        raise ValueError(f"quantizer={chosen.value!r} does not quantize these: pass quantizer={allowed.value!r}")


def _floating(x: object, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        raise TypeError(f"{name} must be a bf16, fp16 or fp32 tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    refuse_autograd((name, x))
    _require_subnormals(x.device)
    return x.detach()


def quantize_fp8_groups(x: torch.Tensor, *, group_size: int = 128, eps: float = 1e-10,
                        quantizer: BlockQuantizer | str = BlockQuantizer.VLLM_CUDA) -> tuple[torch.Tensor, torch.Tensor]:
    """Activations quantized per 1 x ``group_size`` group as vLLM's CUDA kernel does ([Note: block quantizers]).

    Args:
        x: ``[..., K]`` bf16, fp16 or fp32, ``K % group_size == 0``.
        group_size: elements of the last dimension per scale (128 for the block-scaled kernels).
        eps: the absmax's floor (vLLM's default).
        quantizer: ``"vllm-cuda"``; the Triton quantizers raise (not reproducible).

    Returns:
        ``(codes, scales)``: E4M3 codes of ``x``'s shape and fp32 scales ``[..., K / group_size]`` (the dequantisation
        multipliers ``absmax / 448``). NaN elements are ignored by the absmax and become the code of -448 (``fmaxf``
        returns the other operand); an Inf makes its group's scale Inf, its finite elements +-0 and itself -448.

    Raises:
        TypeError: ``x`` not a floating-point tensor. ValueError: ``K`` not a multiple of ``group_size``.
        UnsupportedFeatureError: a Triton quantizer; inputs requiring grad.

    Example:
        >>> import torch
        >>> from mmaemu.quantization import quantize_fp8_groups
        >>> codes, s = quantize_fp8_groups(torch.tensor([[0.5, -2.0, 448.0, 1.0] * 32]))
        >>> s.tolist(), codes[0, :3].float().tolist()
        ([[1.0]], [0.5, -2.0, 448.0])
    """
    _block_quantizer(quantizer, BlockQuantizer.VLLM_CUDA)
    x32 = _floating(x, "x").to(torch.float32)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1 or x32.dim() < 1 \
            or x32.shape[-1] % group_size:
        raise ValueError(f"x's last dimension ({tuple(x32.shape)}) must be a multiple of group_size={group_size!r}")
    groups = x32.reshape(*x32.shape[:-1], x32.shape[-1] // group_size, group_size)
    magnitude = groups.abs()
    absmax = torch.where(torch.isnan(magnitude), 0.0, magnitude).amax(-1).clamp_min(eps)  # fmaxf skips NaN
    scales = absmax / torch.tensor(_E4M3.max_finite, dtype=torch.float32)  # IEEE fp32 division
    q = groups / scales[..., None]
    q = torch.where(torch.isnan(q), -_E4M3.max_finite, q).clamp(-_E4M3.max_finite, _E4M3.max_finite)
    return q.reshape(x32.shape).to(_E4M3.dtype), scales


def quantize_fp8_blocks(w: torch.Tensor, *, block_size: int = 128,
                        quantizer: BlockQuantizer | str = BlockQuantizer.TRANSFORMERS) -> tuple[torch.Tensor, torch.Tensor]:
    """A weight quantized per ``block_size`` x ``block_size`` block as transformers' FineGrainedFP8 does.

    Args:
        w: ``[N, K]`` bf16, fp16 or fp32, both dimensions multiples of ``block_size`` (transformers leaves other
            weights unquantized).
        block_size: 128 for the block-scaled kernels.
        quantizer: ``"transformers"``; the Triton quantizers raise (not reproducible).

    Returns:
        ``(codes, weight_scale_inv)``: E4M3 ``[N, K]`` and fp32 ``[N / block_size, K / block_size]`` (the checkpoints'
        dequantisation multipliers, ``1 / (448 / max|w|)``; 1 for an all-zero block). NaN and Inf propagate as torch's
        operations propagate them (a NaN block's scale is NaN, its codes NaN).

    Raises:
        TypeError: ``w`` not a floating-point tensor. ValueError: not 2-D, or a dimension not a multiple of
        ``block_size``. UnsupportedFeatureError: a Triton quantizer; inputs requiring grad.
    """
    _block_quantizer(quantizer, BlockQuantizer.TRANSFORMERS)
    w32 = _floating(w, "w").to(torch.float32)
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1 or w32.dim() != 2 \
            or w32.shape[0] % block_size or w32.shape[1] % block_size:
        raise ValueError(f"w must be [N, K] with N and K multiples of block_size={block_size!r}, got {tuple(w32.shape)}")
    n, k = w32.shape
    tiles = w32.reshape(n // block_size, block_size, k // block_size, block_size)
    max_abs = tiles.abs().amax(dim=(-3, -1))
    safe = torch.where(max_abs > 0, max_abs, torch.ones_like(max_abs))
    scales = torch.where(max_abs > 0, _E4M3.max_finite / safe, torch.ones_like(safe))  # reciprocal() * 448, as torch
    inv_scales = (1.0 / scales).to(torch.float32)
    scaled = tiles * scales.unsqueeze(-1).unsqueeze(-3)
    codes = torch.clamp(scaled, min=-_E4M3.max_finite, max=_E4M3.max_finite).to(_E4M3.dtype)
    return codes.reshape(n, k), inv_scales


def dequantize_fp8_blocks(codes: torch.Tensor, weight_scale_inv: torch.Tensor, *, block_size: int = 128,
                          out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """DeepSeek-V3's ``weight_dequant``: ``codes * weight_scale_inv`` per block in fp32, rounded once, then to ``out_dtype``.

    inference/kernel.py ``weight_dequant_kernel`` (9b4e9788, 60-86): the E4M3 code and the scale converted to fp32
    exactly, one fp32 multiply, stored in the default dtype (bf16 in generate.py: ``cvt.rn.bf16x2.f32``, round to
    nearest even); partial blocks at the edges (masked). NaN codes give the output's canonical NaN.

    Args:
        codes: E4M3 ``[N, K]``.
        weight_scale_inv: fp32 ``[ceil(N / block_size), ceil(K / block_size)]``.
        block_size: 128.
        out_dtype: bf16 (default), fp16 or fp32.

    Raises:
        TypeError, ValueError: other dtypes or shapes.
    """
    if not isinstance(codes, torch.Tensor) or codes.dtype != _E4M3.dtype or codes.dim() != 2:
        raise TypeError(f"codes must be a 2-D float8_e4m3fn tensor, got {getattr(codes, 'dtype', type(codes).__name__)}")
    n, k = codes.shape
    want = (-(-n // block_size), -(-k // block_size))
    if not isinstance(weight_scale_inv, torch.Tensor) or weight_scale_inv.dtype != torch.float32 \
            or tuple(weight_scale_inv.shape) != want:
        raise ValueError(f"weight_scale_inv must be fp32 {list(want)}, got {getattr(weight_scale_inv, 'shape', None)}")
    fmt = out_format_of(out_dtype)
    if fmt not in (OutFormat.BFLOAT16, OutFormat.FLOAT16, OutFormat.FLOAT32):
        raise ValueError(f"out_dtype must be bf16, fp16 or fp32, got {out_dtype}")
    _require_subnormals(codes.device)
    s = weight_scale_inv.to(codes.device).repeat_interleave(block_size, 0)[:n].repeat_interleave(block_size, 1)[:, :k]
    y = (codes.to(torch.float64) * s.to(torch.float64)).to(torch.float32)  # exact product, one rounding
    return fmt.write_nan(y.to(out_dtype), torch.isnan(y))

