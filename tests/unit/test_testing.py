"""mmaemu.testing: bitwise comparison reports, by class."""

from __future__ import annotations

import pytest
import torch

from mmaemu.testing import assert_bitwise_equal, bitwise_diff


def f32(*bits: int) -> torch.Tensor:
    return torch.tensor(list(bits), dtype=torch.int64).to(torch.int32).view(torch.float32)


def test_equal_and_classes() -> None:
    a = f32(0x3F800000, 0x00000000, 0x7FC00000, 0x40000000, 0x3F800000)
    b = f32(0x3F800000, 0x80000000, 0x7FFFFFFF, 0x40000003, 0x7F800000)
    d = bitwise_diff(a, b)
    assert (d.total, d.differing, d.zero_sign, d.nan_payload, d.value) == (5, 4, 1, 1, 2)
    assert d.max_ulps == 0x7F800000 - 0x3F800000  # 1.0 against +Inf
    assert d.first[0] == ((1,), "0x00000000", "0x80000000")
    assert not d.equal and bitwise_diff(a, a).equal


def test_ulps_across_zero_and_small_dtypes() -> None:
    a = torch.tensor([-0.0, 1.0], dtype=torch.bfloat16)
    b = torch.tensor([2.0**-133, 1.0], dtype=torch.bfloat16)  # the smallest positive bf16 subnormal
    d = bitwise_diff(a, b)
    assert (d.value, d.max_ulps) == (1, 1)
    e4 = torch.tensor([0x7E, 0x7F], dtype=torch.uint8).view(torch.float8_e4m3fn)
    e4b = torch.tensor([0x7E, 0xFF], dtype=torch.uint8).view(torch.float8_e4m3fn)
    assert bitwise_diff(e4, e4b).nan_payload == 1


def test_assert_raises_with_report() -> None:
    with pytest.raises(AssertionError, match=r"zero sign 1.*\n  at \(0,\): actual 0x0000, expected 0x8000"):
        assert_bitwise_equal(torch.tensor([0.0], dtype=torch.float16), torch.tensor([-0.0], dtype=torch.float16))
    with pytest.raises(ValueError, match="dtype mismatch"):
        bitwise_diff(torch.zeros(1), torch.zeros(1, dtype=torch.float16))
    with pytest.raises(ValueError, match="shape mismatch"):
        bitwise_diff(torch.zeros(1), torch.zeros(2))
