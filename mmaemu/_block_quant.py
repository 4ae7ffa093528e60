"""The quantizers of block-scaled checkpoints (DeepSeek-V3 style): 1 x 128 activation groups, 128 x 128 weight blocks.

Public as :mod:`mmaemu.quantization`'s ``BlockQuantizer``, ``quantize_fp8_groups``, ``quantize_fp8_blocks`` and
``dequantize_fp8_blocks`` ([Note: block quantizers]: which reference each reproduces, and which are refused).
"""

from __future__ import annotations

import enum

import torch

from .errors import UnsupportedFeatureError
from .formats import Fp8Format, OutFormat, out_format_of
from ._host import refuse_autograd, require_cpu_subnormals

__all__ = ["BlockQuantizer", "dequantize_fp8_blocks", "quantize_fp8_blocks", "quantize_fp8_groups"]


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
    the quantizers compiled by Triton for sm_90 and sm_89, the folded constant checked against every significand of a
    binade): not exactly reproducible, refused. Power-of-two
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
    require_cpu_subnormals(x.device)
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
    require_cpu_subnormals(codes.device)
    s = weight_scale_inv.to(codes.device).repeat_interleave(block_size, 0)[:n].repeat_interleave(block_size, 1)[:, :k]
    y = (codes.to(torch.float64) * s.to(torch.float64)).to(torch.float32)  # exact product, one rounding
    return fmt.write_nan(y.to(out_dtype), torch.isnan(y))

