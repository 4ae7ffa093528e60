"""The dispatcher's arithmetic: a call on a concrete backend, with the rules every backend shares.

A backend computes only what it :attr:`~mmaemu.backends.protocol.Executor.expresses`, and may count
NaN and Inf codes as zeros (:mod:`mmaemu.backends.protocol`). This module alone adds what makes every
backend return the model's bits:

1. delegation: a preset (or format) a backend does not express runs on the reference backend whole;
2. the Inf rule: when the backend counted an Inf code as zero, the outputs whose row of ``a`` or of
   ``b`` holds one are recomputed by the reference backend, which implements the IEEE rules of
   :func:`mmaemu.model.block_fma` (Inf results, Inf - Inf and 0 x Inf giving NaN);
3. the NaN rule (:func:`run`): a NaN code anywhere in row m of ``a`` or row n of ``b`` makes output
   (m, n) fp32's canonical NaN, whatever the backend computed there.

Which backend a call uses, and whether it may (self-test, availability), is :mod:`mmaemu.backends`'s,
which also takes backend names (:func:`mmaemu.backends.accumulators`, :func:`mmaemu.backends.run`);
here a backend is its :class:`~mmaemu.backends.protocol.Executor`, so that this module sits below every
backend (the Triton self-test uses it).
"""

from __future__ import annotations

from typing import Any

import torch

from ..accumulation import AccumulationPlan
from ..formats import OutFormat, nan_rows
from .._host import cpu_default_device
from ..presets import Preset
from . import reference
from .protocol import Executor

__all__ = ["accumulators", "run"]


def accumulators(executor: Executor, a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan,
                 **options: Any) -> torch.Tensor:
    """fp32 accumulators ``[M, N]`` of ``a [M, K]`` and ``b [N, K]`` under ``plan`` on ``backend``, with
    delegation and the Inf rule applied (NaN codes still count as zeros, as in
    :func:`mmaemu.backends.reference.accumulate`).

    Args:
        executor: a concrete backend (checked by :func:`mmaemu.backends.require` or chosen by
            :func:`mmaemu.backends.resolve_backend`).
        a: ``[M, K]`` FP8, or fp16, bf16 or tf32 (float32) for the zoo presets.
        b: ``[N, K]``, same device.
        preset: the arithmetic.
        plan: the accumulation plan for K.
        **options: passed to the backend's kernel when it runs (the Triton backend's ``config``,
            ``launch``, ``formulation``); ignored when the call is delegated.
    """
    if not executor.expresses(preset, (a.dtype, b.dtype)):
        return reference.accumulate(a, b, preset, plan)
    result = executor.accumulate(a, b, preset, plan, **options)
    if result.inf_zeroed:  # Inf codes were zeros in the kernel: their outputs follow IEEE
        reference.recompute_infinite(result.values, a, b, preset, plan)
    return result.values


def run(executor: Executor, a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan) -> torch.Tensor:
    """:func:`accumulators`, then the NaN rule: the accumulators a call's epilogue takes.

    Returns:
        fp32 ``[M, N]`` on ``a``'s device: the canonical NaN at (m, n) where row m of ``a`` or row n of
        ``b`` holds a NaN code; Inf operands follow IEEE; exact zeros are +0.
    """
    with cpu_default_device():  # the backends' plan tensors are CPU tensors whatever the default device
        acc = accumulators(executor, a, b, preset, plan)
    rows_nan = nan_rows(a)
    cols_nan = nan_rows(b)
    if bool(rows_nan.any() or cols_nan.any()):
        acc = torch.where(rows_nan[:, None] | cols_nan[None, :], OutFormat.FLOAT32.nan_tensor(acc.device), acc)
    return acc
