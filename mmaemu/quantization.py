"""FP8 quantisation of activations and weights, as Transformer Engine casts them; and torchao's FP8 models built on
a machine without an sm_89+ GPU (:func:`torchao_quantize_`).

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
import threading
from collections.abc import Callable
from typing import Any

import torch

from .errors import UnsupportedFeatureError
from .formats import Fp8Format, fp8_format_of
from ._block_quant import BlockQuantizer, dequantize_fp8_blocks, quantize_fp8_blocks, quantize_fp8_groups
from ._host import refuse_autograd, require_cpu_subnormals

__all__ = [
    "ScalingRecipe", "quantize", "reciprocal_scale", "scale_from_amax", "current_scale", "round_to_tf32", "FP32_MAX",
    "torchao_quantize_", "BlockQuantizer", "quantize_fp8_groups", "quantize_fp8_blocks", "dequantize_fp8_blocks",
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
    require_cpu_subnormals(x.device)
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
    require_cpu_subnormals(device)
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
    require_cpu_subnormals(device)
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
    require_cpu_subnormals(x.device)
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


#: The torchao version whose ``quantize_`` :func:`torchao_quantize_` is tested with.
TORCHAO_TESTED = "0.18.0"
_TORCHAO_LOCK = threading.Lock()


def _torchao_fp8_config(config: object) -> tuple[Any, Any]:
    """torchao's ``quant_api`` module and the granularity pair of ``config``, or the error that says why not."""
    try:
        from torchao.quantization import PerRow, PerTensor, quant_api
        from torchao.quantization.quant_api import Float8DynamicActivationFloat8WeightConfig
    except ImportError as exc:
        raise ImportError(f"torchao_quantize_ needs torchao (tested with {TORCHAO_TESTED}): pip install "
                          f"torchao=={TORCHAO_TESTED}") from exc
    if not isinstance(config, Float8DynamicActivationFloat8WeightConfig):
        raise TypeError(f"torchao_quantize_ takes torchao's Float8DynamicActivationFloat8WeightConfig, not "
                        f"{type(config).__name__}; other configs: call torchao.quantization.quantize_ itself")
    granularity = tuple(config.granularity)  # torchao normalised it to [activation, weight]
    if not all(isinstance(g, PerTensor) for g in granularity) and not all(isinstance(g, PerRow) for g in granularity):
        raise UnsupportedFeatureError(
            f"granularity {list(granularity)}: torchao_quantize_ builds the FP8 models mmaemu.emulate() serves, "
            "tensor-wise (PerTensor()) or row-wise (PerRow()) on both operands; torchao's block-wise GEMM "
            "(ao::blockwise_fp8_gemm) is served only as a named kernel model (emulate(kernel=...)), and this function "
            "does not build block-wise models")
    if not callable(getattr(quant_api, "_check_hardware_support", None)):
        import torchao

        raise UnsupportedFeatureError(
            f"torchao {getattr(torchao, '__version__', '?')} has no quant_api._check_hardware_support, the one "
            f"check torchao_quantize_ skips (tested with torchao {TORCHAO_TESTED}): quantize on an sm_89+ GPU")
    return quant_api, granularity


def torchao_quantize_(model: torch.nn.Module, config: object,
                      filter_fn: Callable[[torch.nn.Module, str], bool] | None = None) -> None:
    """torchao's ``quantize_(model, config)`` for an FP8 config, on a machine without an sm_89+ GPU.

    torchao's ``Float8DynamicActivationFloat8WeightConfig`` asserts a GPU of compute capability 8.9 or more
    before it quantizes, though quantizing needs none: the ``Float8Tensor`` weights are computed on the
    CPU by torchao's own code. This runs torchao's ``quantize_`` with that one assertion
    (``torchao.quantization.quant_api._check_hardware_support``) switched off for the duration of the
    call, every quantization step torchao's own, so the model is the one an sm_89+ GPU machine would
    build (its ``Float8Tensor`` weights bit for bit: ``tests/integration/test_torchao.py``). Run it under
    :func:`mmaemu.emulate` to get the reference GPU's outputs (golden outputs) on the CPU. Calls of this
    function are serialised; torchao's check is restored afterwards, also when torchao raises.

    Args:
        model: the module to quantize in place, as torchao's ``quantize_`` (its ``nn.Linear`` layers with
            FP8-compatible shapes; PerRow needs bf16 weights, as torchao requires).
        config: a ``torchao.quantization.Float8DynamicActivationFloat8WeightConfig`` with
            ``PerTensor()`` or ``PerRow()`` granularity (on both operands).
        filter_fn: torchao's ``filter_fn`` (which modules to quantize); None keeps torchao's default
            (every ``nn.Linear``).

    Raises:
        ImportError: torchao is not installed.
        TypeError: ``model`` is not an ``nn.Module``, or ``config`` is another torchao config (call
            torchao's ``quantize_`` for those).
        UnsupportedFeatureError: a block-wise granularity (served only as a named kernel model), a torchao
            without the check this skips, or a CUDA GPU older than sm_89 in this process (torchao's
            quantization step asserts sm_89 whenever CUDA is available: hide the GPU with
            ``CUDA_VISIBLE_DEVICES=``). Nothing is modified by these refusals.

    Example:
        >>> import torch
        >>> from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerTensor
        >>> from mmaemu.quantization import torchao_quantize_
        >>> model = torch.nn.Sequential(torch.nn.Linear(64, 32)).to(torch.bfloat16)
        >>> torchao_quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=PerTensor()))
        >>> type(model[0].weight).__name__, model[0].weight.qdata.dtype
        ('Float8Tensor', torch.float8_e4m3fn)
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    quant_api, _ = _torchao_fp8_config(config)
    from torchao.utils import is_MI300, is_MI350, is_sm_at_least_89

    if torch.cuda.is_available() and not (is_sm_at_least_89() or is_MI300() or is_MI350()):  # quant_api's assertion
        raise UnsupportedFeatureError(
            f"this process sees a CUDA GPU of compute capability {torch.cuda.get_device_capability()}: torchao's "
            "FP8 quantization asserts sm_89 or more whenever CUDA is available, also for CPU tensors; run with the "
            "GPU hidden (CUDA_VISIBLE_DEVICES=)")
    kwargs = {} if filter_fn is None else {"filter_fn": filter_fn}
    with _TORCHAO_LOCK:
        check = quant_api._check_hardware_support
        quant_api._check_hardware_support = lambda granularities: None
        try:
            quant_api.quantize_(model, config, **kwargs)
        finally:
            quant_api._check_hardware_support = check
