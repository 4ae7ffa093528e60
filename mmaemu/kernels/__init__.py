"""Kernel models: GPU kernels of the reference platform that are not cuBLASLt, computed exactly.

torch 2.7.1 sends row-wise scaled FP8 GEMMs to CUTLASS kernels of its own, not to cuBLASLt
(:mod:`mmaemu.kernels.model`, [Note: the sm_90 row-wise kernel]). Each such kernel is a
:class:`~mmaemu.kernels.model.KernelModel` (a frozen record of its choices, with their evidence); its
dispatch (:mod:`mmaemu.kernels.sm90`), its division of K (:mod:`mmaemu.kernels.streamk`), its
accumulation plans (:mod:`mmaemu.kernels.plans`) and its epilogue (:mod:`mmaemu.kernels.epilogue`) are
modules of their own, and :mod:`mmaemu.kernels.rowwise` runs a call through them on any backend.

Block-scaled FP8 GEMMs (DeepSeek-V3-style checkpoints) run in kernels of the serving libraries, not torch's:
DeepGEMM and the Triton block-FP8 kernels, each a :class:`~mmaemu.kernels.block_model.BlockKernelModel`
(:mod:`mmaemu.kernels.block_model`: the chain, the combination, the order of the scales, the fusions, with their
evidence), computed by :mod:`mmaemu.kernels.block_arith` and called through :mod:`mmaemu.kernels.block_call`
(``mmaemu.block_scaled_mm``).
"""

from __future__ import annotations

from .block_model import BLOCK_MODELS, BlockKernelModel, block_candidates, block_model
from .model import ROWWISE_SM89, ROWWISE_SM90, KernelModel, candidates, kernel_model

__all__ = ["BLOCK_MODELS", "BlockKernelModel", "KernelModel", "ROWWISE_SM89", "ROWWISE_SM90", "block_candidates",
           "block_model", "candidates", "kernel_model"]
