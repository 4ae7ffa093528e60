"""The bias as the reference GPU reads it: torch 2.7.1 hands cuBLASLt a bare pointer, so a bias is the N
elements that lie densely from its data pointer, whatever its shape and strides.

[Note: bias memory] torch 2.7.1 hands cuBLASLt the bias as a bare pointer. ``_scaled_mm_out_cuda``
(``aten/src/ATen/native/cuda/Blas.cpp``) checks only ``bias->numel() == N`` and passes
``bias ? bias->data_ptr() : nullptr`` with its dtype to ``at::cuda::blas::scaled_gemm``, which sets it
as ``CUBLASLT_MATMUL_DESC_BIAS_POINTER`` with ``CUBLASLT_EPILOGUE_BIAS`` (``aten/src/ATen/cuda/
CUDABlas.cpp``): the line reads so in pytorch's Blas.cpp before 2.7 and after it (stored copies), and
torch 2.7.1's own ``at::native::_scaled_mm_out_cuda`` (``libtorch_cuda.so`` of the 2.7.1 wheel,
disassembled) calls no ``contiguous`` or ``clone``: the bias reaches ``scaled_gemm`` only as a
``void const*``. cuBLASLt reads a packed vector of N elements ("Bias vector length must match matrix D
rows, and it must be packed", ``CUBLASLT_EPILOGUE_BIAS``). So the GPU adds the N elements that lie
densely from the bias's data pointer, whatever its shape, strides or storage offset: ``base[::2]``
adds ``base[:N]``, a ``[1, N]`` bias its N values; :func:`cublaslt_bias` reads the same. Refused
by :func:`mmaemu._checks.check_call` (``UnsupportedFeatureError``, before anything is computed): a bias whose N elements would run past its
storage (an expanded scalar): the GPU would read memory the tensor does not own, so no result is
defined; and a bias whose data pointer is not 16-byte aligned: whether cuBLASLt takes such a bias
pointer, and which algorithm it picks then, is not recorded (16 bytes is what its FP8 operands need,
[Note: alignment]). Unverified on hardware: no recording holds a biased call's output.
"""

from __future__ import annotations

import torch

__all__ = ["bias_as_read", "cublaslt_bias"]


def bias_as_read(bias: torch.Tensor | None, n: int) -> torch.Tensor | None:
    """The memory the GPU reads as the bias (:func:`cublaslt_bias`) where it lies in the bias's storage, else the
    bias itself (refused later, [Note: bias memory]): what an ``out`` must not overlap."""
    if bias is None or (bias.storage_offset() + n) * bias.element_size() > bias.untyped_storage().nbytes():
        return bias
    return cublaslt_bias(bias, n)


def cublaslt_bias(bias: torch.Tensor, n: int) -> torch.Tensor:
    """The bias vector cuBLASLt adds in a call torch 2.7.1 accepted: the ``n`` elements that lie densely from
    ``bias``'s data pointer, as a 1-D view of its storage ([Note: bias memory]). For a contiguous bias of any
    shape these are its values in order; for a strided one they are not its logical elements.

    Args:
        bias: a bias :func:`check_call` accepted (its ``n`` elements lie inside its storage).
        n: N, the output's columns.
    """
    return bias.as_strided((n,), (1,), bias.storage_offset())
