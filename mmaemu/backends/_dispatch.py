"""The dispatcher's arithmetic: a call on a concrete backend, with the rules every backend shares.

A backend computes only what it :attr:`~mmaemu.backends.Executor.expresses`, and may count
NaN and Inf codes as zeros (:mod:`mmaemu.backends._protocol`). This module alone adds what makes every
backend return the model's bits:

1. delegation: a format a backend does not decode (:attr:`~mmaemu.backends.Executor.formats`), or a
   preset it does not express, runs on the reference backend whole;
2. the Inf rule: when the backend counted an Inf code as zero, the outputs whose row of ``a`` or of
   ``b`` holds one are recomputed by the reference backend, which implements the IEEE rules of
   :func:`mmaemu.model.block_fma` (Inf results, Inf - Inf and 0 x Inf giving NaN);
3. the NaN rule (:func:`run`): a NaN code anywhere in row m of ``a`` or row n of ``b`` makes output
   (m, n) fp32's canonical NaN, whatever the backend computed there; and every NaN the accumulators
   hold is written as that canonical NaN ([Note: one NaN in the accumulator]).

[Note: one NaN in the accumulator] An NVIDIA GPU writes every single-precision NaN as 0x7FFFFFFF
(CUDA C++ Programming Guide, "Floating-Point Standard": "the result of a single-precision
floating-point operation involving one or more input NaNs is the quiet NaN of bit pattern
0x7fffffff"; a NaN made by Inf - Inf or 0 x Inf has the same bits there). The model's block writes
it (:func:`mmaemu.model.block_fma`), but the fp32 additions after the blocks (slow accumulation's
chain results, the split parts in every combination order) run on the host when emulated, and an
x86 CPU writes 0xFFC00000 for Inf - Inf (another host may write yet another NaN). The rule is applied
here, once, to the finished accumulators, and not at each addition: a NaN is absorbing (every fp32
addition or block with a NaN input gives NaN), so an accumulator is NaN exactly when one of its
steps made a NaN, and its bits on the GPU are then 0x7FFFFFFF whatever step made it. Here every
backend's result passes, those that delegate or recompute included, so no kernel needs the rule.

Which backend a call uses, and whether it may (self-test, availability), is :mod:`mmaemu.backends`'s,
which also takes backend names (:func:`mmaemu.backends.accumulators`, :func:`mmaemu.backends.run`);
here a backend is its :class:`~mmaemu.backends.Executor`, whatever it is.
"""

from __future__ import annotations

from typing import Any

import torch

from .._accumulation import AccumulationPlan
from ..formats import OutFormat, nan_rows
from .._host import cpu_default_device
from ..presets import Preset
from . import _reference as reference
from ._protocol import Executor

__all__ = ["accumulators", "run"]


def accumulators(executor: Executor, a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan,
                 **options: Any) -> torch.Tensor:
    """fp32 accumulators ``[M, N]`` of ``a [M, K]`` and ``b [N, K]`` under ``plan`` on ``backend``, with
    delegation and the Inf rule applied (NaN codes still count as zeros, as in
    :func:`mmaemu.backends._reference.accumulate`).

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
    dtypes = (a.dtype, b.dtype)
    if not (all(d in executor.formats for d in dtypes) and executor.expresses(preset, dtypes)):
        return reference.accumulate(a, b, preset, plan)
    result = executor.accumulate(a, b, preset, plan, **options)
    if result.inf_zeroed:  # Inf codes were zeros in the kernel: their outputs follow IEEE
        reference.recompute_infinite(result.values, a, b, preset, plan)
    return result.values


def run(executor: Executor, a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan) -> torch.Tensor:
    """:func:`accumulators`, then the NaN rule: the accumulators a call's epilogue takes.

    Returns:
        fp32 ``[M, N]`` on ``a``'s device: the canonical NaN 0x7FFFFFFF at (m, n) where row m of ``a`` or
        row n of ``b`` holds a NaN code, and wherever the accumulation made a NaN (Inf - Inf in a block,
        a chain addition or a split combination; 0 x Inf); Inf operands follow IEEE; exact zeros are +0.
    """
    with cpu_default_device():  # the backends' plan tensors are CPU tensors whatever the default device
        acc = accumulators(executor, a, b, preset, plan)
    nan = torch.isnan(acc) | nan_rows(a)[:, None] | nan_rows(b)[None, :]
    if bool(nan.any()):  # one NaN, the GPU's ([Note: one NaN in the accumulator])
        acc = torch.where(nan, OutFormat.FLOAT32.nan_tensor(acc.device), acc)
    return acc
