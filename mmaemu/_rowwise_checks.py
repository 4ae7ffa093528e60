"""torch 2.7.1's checks of a row-wise ``_scaled_mm`` call, after the checks every call passes.

[Note: row-wise checks] ``_scaled_mm_out_cuda`` (aten/src/ATen/native/cuda/Blas.cpp) runs, for row-wise
scales, its generic checks (:func:`mmaemu._checks.check_call`; with them a bias is bf16 here), then
``resize_output(out, {M, N})``, the zero-size return, then ``TORCH_CHECK(out.dtype() == kBFloat16, "Only
bf16 high precision output types are supported for row-wise scaling.")`` and
``at::cuda::detail::f8f8bf16_rowwise``, whose ``check_inputs`` (RowwiseScaledMM.cu) are bare
``TORCH_CHECK(cond)`` s: the message is ``Expected <cond> to be true, but got false.  (Could this error
message be improved?  If so, please report an enhancement request to PyTorch.)``, and the conditions
(strings of the wheel's libtorch_cuda.so, byte for byte) are checked in the order of :data:`_ORDER`.
Device conditions always hold here (one device, the emulated GPU), and so do the scale dtypes, dims and
sizes, which Blas.cpp already required; the ones that can fail are listed with their test. So
row-wise calls need mat1 row-major (``stride(1) == 1``) and mat2 column-major, and take no copy; a
``[1, N]`` bias or a non-contiguous one is refused here; ``out`` must be row-major (``stride(1) == 1``).

[Note: row-wise out resize] torch resizes a wrong-shaped ``out`` *before* these checks, so on the GPU
a call they refuse has already resized ``out`` (with torch's resize warning). mmaemu keeps its rule
that a refused call modifies nothing (:mod:`mmaemu._checks`, [Note: out]): the checks below read
``out`` as it will be once resized (contiguous ``[M, N]`` when its shape differs), refuse with torch's
message, and leave it as it was.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .errors import ReferenceRejectsError

__all__ = ["BF16_ONLY_MESSAGE", "bare_check", "check_rowwise"]

BF16_ONLY_MESSAGE = "Only bf16 high precision output types are supported for row-wise scaling."


def bare_check(condition: str) -> str:
    """The message of torch's ``TORCH_CHECK(condition)`` without a message of its own."""
    return (
        f"Expected {condition} to be true, but got false.  (Could this error message be improved?  If so, "
        "please report an enhancement request to PyTorch.)"
    )


def _out_strides(out: torch.Tensor | None, m: int, n: int) -> tuple[int, int]:
    """``out``'s strides once torch resized it (contiguous when its shape differs); ``[M, N]``'s without out."""
    if out is None or tuple(out.shape) != (m, n):
        return n, 1
    return int(out.stride(0)), int(out.stride(1))


_FP8_A = (torch.float8_e4m3fn, torch.float8_e5m2)

#: check_inputs' conditions that can fail once Blas.cpp's checks passed, in its order.
_ORDER: tuple[tuple[str, Callable[..., bool]], ...] = (
    ("a.dtype() == at::kFloat8_e4m3fn || a.dtype() == at::kFloat8_e5m2", lambda a, b, sa, sb, bias, o: a.dtype in _FP8_A),
    ("b.dtype() == at::kFloat8_e4m3fn", lambda a, b, sa, sb, bias, o: b.dtype == torch.float8_e4m3fn),
    ("a.stride(1) == 1", lambda a, b, sa, sb, bias, o: a.stride(1) == 1),
    ("a.stride(0) >= a.size(1)", lambda a, b, sa, sb, bias, o: a.stride(0) >= a.size(1)),
    ("b.stride(0) == 1", lambda a, b, sa, sb, bias, o: b.stride(0) == 1),
    ("b.stride(1) >= b.size(0)", lambda a, b, sa, sb, bias, o: b.stride(1) >= b.size(0)),
    ("scale_a.stride(0) == 1", lambda a, b, sa, sb, bias, o: sa.stride(0) == 1),
    ("scale_b.stride(1) == 1", lambda a, b, sa, sb, bias, o: sb.stride(1) == 1),
    ("bias->dtype() == at::kFloat || bias->dtype() == at::kBFloat16",
     lambda a, b, sa, sb, bias, o: bias is None or bias.dtype in (torch.float32, torch.bfloat16)),
    ("bias->dim() == 1", lambda a, b, sa, sb, bias, o: bias is None or bias.dim() == 1),
    ("bias->size(0) == b.size(1)", lambda a, b, sa, sb, bias, o: bias is None or bias.size(0) == b.size(1)),
    ("bias->stride(0) == 1", lambda a, b, sa, sb, bias, o: bias is None or bias.stride(0) == 1),
    ("out.stride(1) == 1", lambda a, b, sa, sb, bias, o: o[1] == 1),
    ("out.stride(0) >= out.size(1)", lambda a, b, sa, sb, bias, o: o[0] >= b.size(1)),
)


def check_rowwise(mat1: torch.Tensor, mat2: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                  bias: torch.Tensor | None, out: torch.Tensor | None, result_dtype: torch.dtype) -> None:
    """torch 2.7.1's row-wise checks after the zero-size return ([Note: row-wise checks]); modifies nothing.

    Raises:
        ReferenceRejectsError: with torch's message.
    """
    if result_dtype != torch.bfloat16:
        raise ReferenceRejectsError(BF16_ONLY_MESSAGE)
    strides = _out_strides(out, int(mat1.shape[0]), int(mat2.shape[1]))
    for condition, holds in _ORDER:
        if not holds(mat1, mat2, scale_a, scale_b, bias, strides):
            raise ReferenceRejectsError(bare_check(condition))
