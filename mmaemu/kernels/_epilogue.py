"""The row-wise kernels' epilogue: per-row and per-column scales, the bias, and the rounding to bf16.

[Note: row-wise epilogue] Both row-wise kernels evaluate the EVT ``Cast(Add(Bias, Mul(WScale,
Mul(XScale, Acc))))`` with fp32 round-to-nearest nodes (torch 2.7.1 RowwiseScaledMM.cu; CUTLASS v3.8.0
``sm90_visitor_compute_tma_warpspecialized.hpp`` 173-199 and ``functional.h`` 120-144), which nvcc
compiles to ``FMUL t, x_scale, acc`` and ``FFMA y, t, w_scale, bias`` (one per output element in the SASS
of all 64 sm_90a and all 8 sm_89 kernels of the torch-2.7.1+cu126 wheel; no ``.FTZ``), then
``F2FP.BF16.F32`` (round to nearest even, overflow to infinity). With ``s1`` the kernel's row scale and
``s2`` its column scale (``scale_a[m]`` and ``scale_b[n]``, or the reverse when the kernel runs
transposed: :mod:`mmaemu.kernels._sm90`)::

    out = bf16( fma( fp32(acc * s1), s2, beta ) )

with ``beta`` the bf16 bias widened exactly to fp32, or +0 without a bias (the broadcast's null default:
an exact zero product gives +0). The arithmetic here is exact: ``acc * s1`` and ``t * s2`` are exact in
float64 (24 x 24 bits), the first rounded once to fp32 by the conversion; the fused sum is rounded to
fp32 once, without double rounding, by :func:`mmaemu._epilogue._round_sum_to_fp32` (round to odd in
float64, then to fp32). Subnormals are kept (no flush), NaN results are bf16's canonical NaN (0x7FFF).
:class:`~mmaemu.kernels._model.Fusion` and :class:`~mmaemu.kernels._model.ZeroBias` name the candidates a
recording decides between: the multiply and the addition rounded separately, and nothing added
without a bias.
"""

from __future__ import annotations

import torch

from .._epilogue import _round_sum_to_fp32
from ..formats import OutFormat
from ._model import Fusion, ZeroBias

__all__ = ["rowwise_epilogue"]


def rowwise_epilogue(acc: torch.Tensor, s1: torch.Tensor, s2: torch.Tensor, bias: torch.Tensor | None, *,
                     fusion: Fusion, zero_bias: ZeroBias) -> torch.Tensor:
    """``bf16(fma(fp32(acc * s1), s2, beta))`` exactly ([Note: row-wise epilogue]).

    Args:
        acc: fp32 accumulators ``[M, N]``.
        s1: the first multiplier, fp32, broadcastable to ``acc`` (``[M, 1]`` or ``[1, N]``).
        s2: the second multiplier, fp32, broadcastable to ``acc``.
        bias: a bf16 vector of N elements (added to every row), or None.
        fusion: one rounding for ``t * s2 + beta`` (FMA) or two (SEPARATE).
        zero_bias: without a bias, whether +0 is added (PLUS_ZERO) or nothing (ABSENT).

    Returns:
        bf16 ``[M, N]``. NaN accumulators or scales, ``inf * 0`` and ``inf - inf`` give 0x7FFF; an exact zero
        sum is +0 unless both the product and the bias are -0; overflow gives infinity.
    """
    t = (acc.to(torch.float64) * s1.to(torch.float64)).to(torch.float32)  # exact product, one rounding
    product = t.to(torch.float64) * s2.to(torch.float64)  # exact
    if bias is None and zero_bias is ZeroBias.ABSENT:
        y = product.to(torch.float32)
    else:
        beta = (torch.zeros((), dtype=torch.float64, device=acc.device) if bias is None
                else bias.to(device=acc.device, dtype=torch.float64)[None, :])
        if fusion is Fusion.FMA:
            y = _round_sum_to_fp32(product, beta.expand_as(product))
        else:
            y = product.to(torch.float32) + beta.to(torch.float32)  # two fp32 roundings
    return OutFormat.BFLOAT16.write_nan(y.to(torch.bfloat16), torch.isnan(y))
