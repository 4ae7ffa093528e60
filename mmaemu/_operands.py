"""The operands of a block as the instruction model sees them, and the exact powers of two it scales by.

:class:`BlockOperands` holds one side of a block decoded once: exact values, floored exponents, signs,
and the codes that need IEEE handling (infinities) or are excluded from the exponent maximum
(zeros). The model (:mod:`mmaemu.model`) and the reference backend cut it along k and along rows
with the methods here, so the five fields always travel together.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .formats import FP8_DTYPES, decode_fp8, decode_wide, wide_format_of

__all__ = ["BlockOperands", "pow2"]


def pow2(exponent: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Exact ``2**exponent`` built from bit patterns (normal range of ``dtype`` only).

    Args:
        exponent: integer tensor; must lie in [-126, 127] for fp32, [-1022, 1023] for fp64.
        dtype: ``torch.float32`` or ``torch.float64``.

    Raises:
        ValueError: another dtype.
    """
    e = exponent.to(torch.int64)
    if dtype == torch.float32:
        return ((e + 127) << 23).to(torch.int32).view(torch.float32)
    if dtype == torch.float64:
        return ((e + 1023) << 52).view(torch.float64)
    raise ValueError(f"pow2 supports float32 and float64, not {dtype}")


@dataclass(frozen=True)
class BlockOperands:
    """One side of a block: decoded FP8 (or fp16, bf16, tf32) operands, broadcastable to ``[*batch, B]``.

    Attributes:
        value: exact values (fp32 for FP8, float64 for the wider formats), non-finite codes replaced by 0.
        exponent: floored exponents (int16), zeros and non-finite codes at ``EXPONENT_OF_ZERO``.
        negative: sign bits (-0 is negative).
        is_inf: infinite codes.
        is_zero: zero codes (+0 and -0).
    """

    value: torch.Tensor
    exponent: torch.Tensor
    negative: torch.Tensor
    is_inf: torch.Tensor
    is_zero: torch.Tensor

    @staticmethod
    def of(x: torch.Tensor) -> BlockOperands:
        """Decode an FP8 tensor (values as fp32) or an fp16, bf16 or tf32 one (values as float64).

        NaN codes decode as value 0 and exponent ``EXPONENT_OF_ZERO``, neither Inf nor zero: the NaN
        rule is the caller's.

        Raises:
            ValueError: a float32 tensor that holds values other than tf32 values.
        """
        d = decode_fp8(x) if x.dtype in FP8_DTYPES else decode_wide(x, wide_format_of(x))
        return BlockOperands(
            value=d.value,
            exponent=d.exponent,
            negative=d.negative,
            is_inf=d.is_inf,
            is_zero=(d.significand == 0) & ~d.is_inf & ~d.is_nan,
        )

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> BlockOperands:
        """``fn`` applied to every field (one cut of all five tensors)."""
        return BlockOperands(*(fn(getattr(self, f.name)) for f in dataclasses.fields(self)))

    def k_slice(self, start: int, stop: int) -> BlockOperands:
        """Operands ``start:stop`` of the last dimension."""
        return self.map(lambda t: t[..., start:stop])

    def k_take(self, index: torch.Tensor) -> BlockOperands:
        """Operands at the positions ``index`` (int64, on the operands' device) of the last dimension."""
        return self.map(lambda t: t[..., index])

    def k_gather(self, ranges: tuple[tuple[int, int], ...]) -> BlockOperands:
        """The operands of the k ranges ``(start, stop)``, in order, concatenated along the last dimension."""
        if len(ranges) == 1:
            return self.k_slice(*ranges[0])
        return self.map(lambda t: torch.cat([t[..., start:stop] for start, stop in ranges], -1))

    def rows(self, start: int, stop: int, dim: int) -> BlockOperands:
        """Rows ``start:stop`` of ``[rows, K]`` operands, with a broadcast axis inserted at ``dim``."""
        return self.map(lambda t: t[start:stop].unsqueeze(dim))
