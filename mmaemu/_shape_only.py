"""Operands that are shapes only: CPU tensors with sizes, strides and a dtype, and no storage.

:func:`mmaemu.explain` decides from what ``torch._scaled_mm``'s checks read (dimensions, sizes,
strides, storage offsets, dtypes, devices, ``requires_grad``), never from values. Where only a
shape is given (``python -m mmaemu explain M N K``, the bench's check of a configuration), these
operands let ``explain`` plan the call a CPU tensor of that shape would make, for any shape, with
nothing allocated: not meta tensors (which ``scaled_mm``, and so ``explain``, refuses: they stand
for no device a call runs on), and not ``torch.empty`` (which reserves the memory, and fails for a
shape this machine cannot even reserve).

[Note: shape-only operands] An operation on such a tensor (anything dispatched to ATen, e.g.
``.t()``, arithmetic, a copy) raises ``RuntimeError`` naming the operation, so a check that read
values would show as a refusal in the plan, never as a plan of other data;
``tests/unit/test_cli.py`` checks that the plans equal those of real CPU tensors.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["shape_only_operands"]


class _ShapeOnly(torch.Tensor):
    """A CPU tensor's metadata without storage (see [Note: shape-only operands])."""

    @staticmethod
    def __new__(cls, size: tuple[int, int], strides: tuple[int, int], dtype: torch.dtype) -> _ShapeOnly:
        return torch.Tensor._make_wrapper_subclass(
            cls, size, strides=strides, storage_offset=0, dtype=dtype, device=torch.device("cpu"),
            requires_grad=False,
        )

    # torch's stubs type the base's __torch_dispatch__ as a plain function attribute, not a classmethod
    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:  # type: ignore[override]
        raise RuntimeError(
            f"{func} was called on a shape-only operand (mmaemu._shape_only), which holds no values: a plan from "
            "shapes alone cannot use it; report this (mmaemu.explain with real tensors plans the call)"
        )


def shape_only_operands(m: int, n: int, k: int, dtype_a: torch.dtype,
                        dtype_b: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``mat1`` (M x K, row-major) and ``mat2`` (K x N, column-major, as ``w.t()``) of a call, unallocated.

    Args:
        m, n, k: the GEMM's dimensions (>= 0).
        dtype_a, dtype_b: the operands' dtypes.

    Returns:
        Two CPU tensors with the layouts of ``x`` and ``w.t()`` for ``x`` of shape (M, K) and ``w`` of
        shape (N, K), both contiguous, and no storage: they have no values (no NaN, Inf or -0 to speak
        of), and any operation on them raises ``RuntimeError``.
    """
    mat1 = _ShapeOnly((m, k), (max(k, 1), 1), dtype_a)
    mat2 = _ShapeOnly((k, n), (1, max(k, 1)), dtype_b)
    return mat1, mat2
