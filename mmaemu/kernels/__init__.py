"""Kernel models: GPU kernels of the reference platform that are not cuBLASLt, computed exactly.

torch 2.7.1 sends row-wise scaled FP8 GEMMs to CUTLASS kernels of its own, not to cuBLASLt
(:mod:`mmaemu.kernels._model`, [Note: the sm_90 row-wise kernel]). Each such kernel is a
:class:`~mmaemu.kernels.KernelModel` (a frozen record of its choices, with their evidence); its
dispatch (:mod:`mmaemu.kernels._sm90`), its division of K (:mod:`mmaemu.kernels._streamk`), its
accumulation plans (:mod:`mmaemu.kernels._plans`) and its epilogue (:mod:`mmaemu.kernels._epilogue`) are
modules of their own, and :mod:`mmaemu.kernels._rowwise` runs a call through them on any backend.

Block-scaled FP8 GEMMs (DeepSeek-V3-style checkpoints) run in kernels of the serving libraries, not torch's:
DeepGEMM and the Triton block-FP8 kernels, each a :class:`~mmaemu.kernels.BlockKernelModel`
(:mod:`mmaemu.kernels._block_model`: the chain, the combination, the order of the scales, the fusions, with their
evidence), computed by :mod:`mmaemu.kernels._block_arith` and called through :mod:`mmaemu.kernels._block_call`
(``mmaemu.block_scaled_mm``).
"""

from __future__ import annotations

from ._block_model import BLOCK_MODELS, BlockKernelModel, block_candidates, block_model
from ._model import ROWWISE_SM89, ROWWISE_SM90, KernelModel, candidates, kernel_model

__all__ = ["KernelModel", "BlockKernelModel", "kernel_model", "block_model", "candidates", "block_candidates"]
