"""Bit-for-bit comparison of GEMM outputs, for tests of mmaemu and of your own FP8 kernels.

Values are compared as bit patterns, so +0 and -0 differ, and NaNs differ by payload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .formats import bits_of

__all__ = ["BitwiseDiff", "bitwise_diff", "assert_bitwise_equal"]

_MASK = {8: 0xFF, 16: 0xFFFF, 32: 0xFFFFFFFF}


@dataclass(frozen=True)
class BitwiseDiff:
    """The differences between two tensors' bit patterns.

    Attributes:
        dtype: the compared dtype.
        shape: the compared shape.
        total: number of elements.
        differing: number of elements whose bits differ.
        zero_sign: differences between +0 and -0.
        nan_payload: differences between two NaNs.
        value: all other differences (different numbers, or a number against a NaN).
        max_ulps: the largest distance in units in the last place among ``value`` differences
            between two finite or infinite numbers (None when there is none).
        first: up to ten ``(index, actual_hex, expected_hex)`` of the first differences.
    """

    dtype: torch.dtype
    shape: tuple[int, ...]
    total: int
    differing: int
    zero_sign: int
    nan_payload: int
    value: int
    max_ulps: int | None
    first: list[tuple[tuple[int, ...], str, str]] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        """True when every bit pattern is equal."""
        return self.differing == 0

    def __str__(self) -> str:
        if self.equal:
            return f"bitwise equal: {self.total} elements of {self.dtype}"
        lines = [
            f"{self.differing} of {self.total} {self.dtype} elements differ in their bits "
            f"(value {self.value}, zero sign {self.zero_sign}, NaN payload {self.nan_payload}; "
            f"largest value difference {self.max_ulps} ulps)",
        ]
        for index, got, want in self.first:
            lines.append(f"  at {index}: actual {got}, expected {want}")
        return "\n".join(lines)


def _ordered(bits: torch.Tensor, width: int) -> torch.Tensor:
    """Map sign-magnitude bit patterns to integers whose order is the numbers' order."""
    unsigned = bits.to(torch.int64) & _MASK[width]
    sign = 1 << (width - 1)
    magnitude = unsigned & (sign - 1)
    return torch.where(unsigned >= sign, -magnitude, magnitude)


def bitwise_diff(actual: torch.Tensor, expected: torch.Tensor) -> BitwiseDiff:
    """Compare two tensors of the same dtype and shape bit for bit, without raising.

    Raises:
        ValueError: if dtypes or shapes differ.
    """
    if actual.dtype != expected.dtype:
        raise ValueError(f"dtype mismatch: actual {actual.dtype}, expected {expected.dtype}")
    if tuple(actual.shape) != tuple(expected.shape):
        raise ValueError(f"shape mismatch: actual {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    width = actual.element_size() * 8
    got = bits_of(actual.detach().cpu().contiguous()).to(torch.int64) & _MASK[width]
    want = bits_of(expected.detach().cpu().contiguous()).to(torch.int64) & _MASK[width]
    differ = got != want
    n_diff = int(differ.sum())
    if n_diff == 0:
        return BitwiseDiff(actual.dtype, tuple(actual.shape), actual.numel(), 0, 0, 0, 0, None)
    nan_a = torch.isnan(actual.detach().cpu().to(torch.float32))
    nan_e = torch.isnan(expected.detach().cpu().to(torch.float32))
    zero_a = actual.detach().cpu().to(torch.float32) == 0
    zero_e = expected.detach().cpu().to(torch.float32) == 0
    zero_sign = differ & zero_a & zero_e
    nan_payload = differ & nan_a & nan_e
    value = differ & ~zero_sign & ~nan_payload
    numeric = value & ~nan_a & ~nan_e
    max_ulps = None
    if bool(numeric.any()):
        dist = (_ordered(got, width) - _ordered(want, width)).abs()
        max_ulps = int(dist[numeric].max())
    idx = differ.nonzero()[:10]
    hex_digits = width // 4
    first = [
        (
            tuple(int(i) for i in row),
            f"0x{int(got[tuple(row)]):0{hex_digits}x}",
            f"0x{int(want[tuple(row)]):0{hex_digits}x}",
        )
        for row in idx
    ]
    return BitwiseDiff(
        actual.dtype,
        tuple(actual.shape),
        actual.numel(),
        n_diff,
        int(zero_sign.sum()),
        int(nan_payload.sum()),
        int(value.sum()),
        max_ulps,
        first,
    )


def assert_bitwise_equal(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Assert that two tensors have identical bit patterns (+0 != -0; NaN payloads compared).

    Raises:
        AssertionError: with counts by class, the largest difference in ulps and the first
            differing indices in hex.

    Example:
        >>> import torch
        >>> from mmaemu.testing import assert_bitwise_equal
        >>> assert_bitwise_equal(torch.tensor([0.0]), torch.tensor([0.0]))
        >>> try:
        ...     assert_bitwise_equal(torch.tensor([0.0]), torch.tensor([-0.0]))
        ... except AssertionError as e:
        ...     print(str(e).splitlines()[0])
        1 of 1 torch.float32 elements differ in their bits (value 0, zero sign 1, NaN payload 0; largest value difference None ulps)
    """
    report = bitwise_diff(actual, expected)
    if not report.equal:
        raise AssertionError(str(report))
