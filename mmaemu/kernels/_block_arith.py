"""The arithmetic of a block-scaled kernel model: chains per k-tile, the scaled combination, the output rounding.

:func:`block_accumulators` computes the fp32 accumulators of ``a [M, K]`` and ``b [N, K]`` (E4M3) with
activation scales ``sa [M, ceil(K/128)]`` and weight scales ``sb [ceil(N/128), ceil(K/128)]`` as a
:class:`~mmaemu.kernels.BlockKernelModel` says:

1. K is cut into k-tiles of ``model.k_block`` elements from 0 (the last one shorter: the kernels' masked
   loads and TMA's fill pad it with zeros, which leave a chain unchanged, [Note: padding] in
   :mod:`mmaemu.kernels._plans`); k-tile t starting at ``k0`` takes the scales of group ``j = k0 // 128``;
2. each k-tile's chain result ``d`` is one chain of the model's preset from +0 over the tile (the
   ``slow accumulation`` chain of 128 elements for ``k_block = 128``), computed by the dispatcher
   (:func:`mmaemu.backends.run`, so every backend gives the same bits; the fp16 path converts the codes to
   fp16 first, exactly), or on the cpu backend by the fused kernel :mod:`mmaemu.backends._cpu_block`;
3. the step of :meth:`~mmaemu.kernels.BlockKernelModel.formula` adds it into the accumulator in
   ascending t.

[Note: the step, exactly] ``rn(x * y)`` of two fp32 values is their float64 product (exact: 24 + 24 bits)
rounded once to fp32; ``fma(x, y, z)`` is that exact product plus ``z`` rounded once
(:func:`mmaemu._epilogue._round_sum_to_fp32`: round to odd in float64, then to fp32); ``rn(x + y)`` is
torch's fp32 addition. So overflow gives infinity, subnormals are kept, an exact zero sum is +0 unless both
terms are -0, and Inf - Inf, Inf * 0 and NaN give NaN (written as the output's canonical NaN at the end).
"""

from __future__ import annotations

import torch

from .._accumulation import plan_accumulation
from ..backends import Backend
from ..backends import run as run_backend
from ..backends._cpu_block import Step, accumulate_block
from .._epilogue import _round_sum_to_fp32
from ..formats import OutFormat, nan_rows, out_format_of
from .._split import Scheme, SplitK
from ._block_model import GROUP, BlockKernelModel, Combination, Operands, Start
from ._model import Fusion, ScaleOrder

__all__ = ["block_accumulators", "chain_bounds", "round_output", "step"]

_UNSPLIT = SplitK(1, Scheme.NONE)


def chain_bounds(k: int, k_block: int) -> list[int]:
    """The k-tiles' boundaries ``[0, k_block, ..., K]`` (one tile per chain; none for K = 0).

    Example:
        >>> chain_bounds(320, 128), chain_bounds(320, 64)
        ([0, 128, 256, 320], [0, 64, 128, 192, 256, 320])
    """
    return [*range(0, k, k_block), k] if k else [0]


def _mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``rn(x * y)`` of fp32 values: the exact float64 product rounded once."""
    return (x.to(torch.float64) * y.to(torch.float64)).to(torch.float32)


def step(acc: torch.Tensor | None, d: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor,
         model: BlockKernelModel) -> torch.Tensor:
    """One k-tile's step of ``model`` ([Note: the step, exactly]); ``acc`` None: the first k-tile.

    Args:
        acc: fp32 ``[M, N]``, or None before the first k-tile.
        d: the k-tile's chain results, fp32 ``[M, N]``.
        sa: its activation scales, fp32 ``[M, 1]``.
        sb: its weight scales, fp32 ``[1, N]``.
        model: the combination, order, fusion and start.
    """
    if model.combination is Combination.SCALES_FIRST:
        x, y = _mul(sa, sb).expand_as(d), d
    else:
        first, second = (sa, sb) if model.order is ScaleOrder.ROW_FIRST else (sb, sa)
        x, y = _mul(d, first), second.expand_as(d)
    if acc is None:
        if model.start is Start.FIRST_STEP:
            return _mul(x, y)
        acc = torch.zeros_like(d)  # +0
    if model.fusion is Fusion.FMA:
        return _round_sum_to_fp32(x.to(torch.float64) * y.to(torch.float64), acc.to(torch.float64))
    return acc + _mul(x, y)


def _tile_scales(scales: torch.Tensor, bounds: list[int]) -> torch.Tensor:
    """fp32 ``[R, T]``: each chain's scale column (the group of its first k) of ``scales [R, groups]``."""
    groups = torch.tensor([k0 // GROUP for k0 in bounds[:-1]], dtype=torch.long, device=scales.device)
    return scales.to(torch.float32).index_select(1, groups)


def _fused(model: BlockKernelModel, a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb_rows: torch.Tensor,
           bounds: list[int]) -> torch.Tensor:
    """The cpu backend's fused kernel (:mod:`mmaemu.backends._cpu_block`), with the NaN rule."""
    fused = model.fusion is Fusion.FMA
    code = ((Step.SCALES_FIRST_FMA if fused else Step.SCALES_FIRST_SEPARATE)
            if model.combination is Combination.SCALES_FIRST
            else (Step.CHAIN_FIRST_FMA if fused else Step.CHAIN_FIRST_SEPARATE))
    acc = accumulate_block(a, b, _tile_scales(sa, bounds).contiguous(), _tile_scales(sb_rows, bounds).contiguous(),
                           bounds, model.preset, code, model.order is ScaleOrder.ROW_FIRST,
                           model.start is Start.FIRST_STEP)
    nan = nan_rows(a)[:, None] | nan_rows(b)[None, :]
    if bool(nan.any()):
        acc = torch.where(nan, OutFormat.FLOAT32.nan_tensor(acc.device), acc)
    return acc


def block_accumulators(model: BlockKernelModel, a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor,
                       sb: torch.Tensor, backend: Backend, fused: bool = False) -> torch.Tensor:
    """fp32 ``[M, N]`` accumulators of the model (module docstring) on ``backend``.

    Args:
        model: the kernel model.
        a: ``[M, K]`` E4M3.
        b: ``[N, K]`` E4M3 on ``a``'s device.
        sa: fp32 ``[M, ceil(K/128)]``.
        sb: fp32 ``[ceil(N/128), ceil(K/128)]`` (the weights' ``weight_scale_inv``).
        backend: a concrete backend.
        fused: run the cpu backend's fused kernel (CPU tensors, FP8 operands, a preset
            :func:`mmaemu.backends._cpu_block.available` says it runs), not one dispatcher call per k-tile.

    Returns:
        fp32 ``[M, N]``: the canonical NaN where row m of ``a`` or row n of ``b`` holds a NaN code and where the
        steps made one; +0 for K = 0.
    """
    m, n, k = a.shape[0], b.shape[0], a.shape[1]
    bounds = chain_bounds(k, model.k_block)
    sb_rows = sb.to(device=a.device).index_select(0, torch.arange(n, device=a.device) // GROUP)  # [N, groups]
    sa = sa.to(a.device)
    if fused:
        return _fused(model, a, b, sa, sb_rows, bounds)
    acc: torch.Tensor | None = None
    for k0, k1 in zip(bounds[:-1], bounds[1:]):
        ta, tb = a[:, k0:k1], b[:, k0:k1]
        if model.operands is Operands.FP16:
            ta, tb = ta.to(torch.float16), tb.to(torch.float16)  # exact; NaN codes stay NaN
        d = run_backend(backend, ta, tb, model.preset, plan_accumulation(k1 - k0, fast=True, split=_UNSPLIT))
        j = k0 // GROUP
        acc = step(acc, d, sa[:, j:j + 1].to(torch.float32), sb_rows[:, j].to(torch.float32)[None, :], model)
    if acc is None:
        return torch.zeros((m, n), dtype=torch.float32, device=a.device)
    nan = torch.isnan(acc)
    if bool(nan.any()):  # one NaN, the GPU's ([Note: one NaN in the accumulator] in mmaemu.backends._dispatch)
        acc = torch.where(nan, OutFormat.FLOAT32.nan_tensor(acc.device), acc)
    return acc


def round_output(acc: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """The kernels' store: bf16 or fp16 rounded to nearest even (overflow to infinity), fp32 as is; NaN as the
    output's canonical NaN (``cvt.rn.bf16x2.f32`` writes 0x7FFF; an fp32 NaN of the GPU is 0x7FFFFFFF)."""
    fmt = out_format_of(out_dtype)
    nan = torch.isnan(acc)
    return fmt.write_nan(acc.to(out_dtype), nan)
