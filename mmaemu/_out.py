"""The ``out=`` argument as torch 2.7.1 treats it: the memory a call would write, torch's resize and its warning.

:func:`check_out_overlap` refuses an ``out`` whose written bytes overlap what the call reads;
:func:`resize_out_like_torch` resizes as torch does, and is called only once a call can no longer be
refused (:mod:`mmaemu._checks`, [Note: out]).
"""

from __future__ import annotations

import math

import torch

from .errors import warn_caller

__all__ = ["check_out_overlap", "out_resize_warning", "resize_out_like_torch"]


def _span(t: torch.Tensor, shape: tuple[int, ...] | None = None) -> tuple[int, int] | None:
    """Bytes ``[start, end)`` of ``t``'s storage that ``t`` spans (resized to ``shape``: contiguous); None if empty."""
    sizes = tuple(int(size) for size in t.shape) if shape is None else shape
    if any(size == 0 for size in sizes):
        return None
    if shape is None:
        strides = tuple(int(stride) for stride in t.stride())
    else:
        strides = tuple(math.prod(sizes[i + 1:]) for i in range(len(sizes)))
    extent = 1 + sum((size - 1) * stride for size, stride in zip(sizes, strides))
    start = int(t.storage_offset()) * t.element_size()
    return start, start + extent * t.element_size()


def check_out_overlap(out: torch.Tensor | None, shape: tuple[int, int], named: list[tuple[str, torch.Tensor | None]]) -> None:
    """Refuse an ``out`` whose written bytes (after torch's resize) overlap a tensor the call reads.

    Tensors on one storage are compared by their storage offsets; tensors on different storages by
    address (two storages may share memory), unless the resize reallocates ``out``'s storage.
    """
    if out is None:
        return
    written = _span(out, None if tuple(out.shape) == shape else shape)
    out_base = out.untyped_storage().data_ptr()
    if written is None or out_base == 0:  # nothing written, or a resize into fresh memory
        return
    reallocates = written[1] > out.untyped_storage().nbytes()
    clashes = []
    for name, t in named:
        span = None if t is None else _span(t)
        if t is None or span is None:
            continue
        base = t.untyped_storage().data_ptr()
        if base == out_base:
            lo, hi = written
        elif reallocates:
            continue
        else:
            lo, hi = out_base + written[0] - base, out_base + written[1] - base
        if span[0] < hi and lo < span[1]:
            clashes.append(name)
    if clashes:
        raise RuntimeError(
            f"out shares memory with {', '.join(clashes)}: the GEMM would overwrite what it reads, and torch gives no "
            "defined result for such a call. Pass an out that overlaps no input, scale, bias or scale_result "
            "(a new tensor, or clone() the overlapping arguments first)"
        )


def out_resize_warning(out: torch.Tensor | None, m: int, n: int) -> str | None:
    """torch's UserWarning text when ``out`` (not empty) must be resized to ``[m, n]``, else None."""
    if out is None or tuple(out.shape) == (m, n) or out.numel() == 0:
        return None
    return (
        f"An output with one or more elements was resized since it had shape {list(out.shape)}, which does "
        f"not match the required output shape {[m, n]}. This behavior is deprecated, and in a future PyTorch "
        "release outputs will not be resized unless they have zero elements. You can explicitly reuse an "
        "out tensor t by resizing it, inplace, to zero elements with t.resize_(0)."
    )


def resize_out_like_torch(out: torch.Tensor | None, m: int, n: int, *, warn: bool = True) -> None:
    """Resize ``out`` to ``[m, n]`` as torch does; no-op when it already has that shape.

    Works on an ``out`` that requires grad (torch resizes it below autograd, e.g. under
    ``torch.no_grad()``). Call it only once the call can no longer be refused.

    Args:
        out: the ``out=`` tensor, or None.
        m, n: the result's shape.
        warn: emit torch's UserWarning (:func:`out_resize_warning`) when a non-empty ``out`` changes shape.
    """
    if out is None or tuple(out.shape) == (m, n):
        return
    message = out_resize_warning(out, m, n) if warn else None
    if message is not None:
        warn_caller(message, UserWarning)
    with torch.no_grad():
        if out.requires_grad:  # torch resizes below autograd; Tensor.resize_ refuses tensors requiring grad
            with torch._C._AutoDispatchBelowAutograd():
                out.resize_(m, n)
        else:
            out.resize_(m, n)
