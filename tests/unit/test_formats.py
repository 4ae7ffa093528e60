"""FP8 decoding, all 256 codes of both formats, against torch's own conversion."""

from __future__ import annotations

import math

import pytest
import torch

from mmaemu.formats import EXPONENT_OF_ZERO, Fp8Format, OutFormat, bits_of, decode_fp8, fp32_exponent, from_bits


@pytest.mark.parametrize("fmt", list(Fp8Format))
def test_every_code_decodes_like_torch(fmt: Fp8Format) -> None:
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    x = codes.view(fmt.dtype)
    d = decode_fp8(x)
    torch_values = x.to(torch.float64)
    for code in range(256):
        v = float(torch_values[code])
        if math.isnan(v):
            assert bool(d.is_nan[code]) and not bool(d.is_inf[code])
            assert float(d.value[code]) == 0.0
            continue
        assert not bool(d.is_nan[code])
        if math.isinf(v):
            assert bool(d.is_inf[code]) and float(d.value[code]) == 0.0
            continue
        assert float(d.value[code]) == v
        assert bool(d.negative[code]) == (math.copysign(1.0, v) < 0)
        sig, exp = int(d.significand[code]), int(d.exponent[code])
        if v == 0:
            assert sig == 0 and exp == EXPONENT_OF_ZERO
        else:
            assert abs(v) == sig * 2.0 ** (exp - fmt.mantissa_bits)
            assert exp >= fmt.emin
            # e(x) is the unbiased exponent floored at emin: subnormals keep emin
            assert exp == max(math.floor(math.log2(abs(v))), fmt.emin)


def test_format_constants() -> None:
    assert Fp8Format.E4M3.emin == -6 and Fp8Format.E5M2.emin == -14
    assert Fp8Format.E4M3.max_finite == float(torch.finfo(torch.float8_e4m3fn).max) == 448.0
    assert Fp8Format.E5M2.max_finite == float(torch.finfo(torch.float8_e5m2).max) == 57344.0
    nan_codes = {f: [c for c in range(256) if math.isnan(float(torch.tensor([c], dtype=torch.uint8).view(f.dtype).float()))] for f in Fp8Format}
    assert nan_codes[Fp8Format.E4M3] == [0x7F, 0xFF]
    assert OutFormat.E4M3.canonical_nan in nan_codes[Fp8Format.E4M3]
    assert OutFormat.E5M2.canonical_nan in nan_codes[Fp8Format.E5M2]


def test_fp32_exponent_floors_subnormals() -> None:
    x = from_bits(torch.tensor([0x00000001, 0x007FFFFF, 0x00800000, 0x3F800000, 0x7F7FFFFF], dtype=torch.int32), torch.float32)
    assert fp32_exponent(x).tolist() == [-126, -126, -126, 0, 127]


def test_bits_round_trip() -> None:
    x = torch.tensor([-0.0, 1.5, float("inf")], dtype=torch.bfloat16)
    assert bits_of(x).tolist() == [-32768, 0x3FC0, 0x7F80]
    assert torch.equal(bits_of(from_bits(bits_of(x), torch.bfloat16)), bits_of(x))


@pytest.mark.parametrize("fmt", list(Fp8Format))
def test_nan_mask_matches_torch(fmt: Fp8Format) -> None:
    from mmaemu.formats import fp8_nan_mask

    x = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(fmt.dtype)
    assert torch.equal(fp8_nan_mask(x), torch.isnan(x.float()))


@pytest.mark.parametrize("fmt", list(Fp8Format))
def test_nan_rows_flag_exactly_the_rows_with_a_nan_code(fmt: Fp8Format) -> None:
    from mmaemu.formats import fp8_nan_rows

    # every code alone in a row of +0, at the first and the last position
    codes = torch.zeros(2, 256, 5, dtype=torch.uint8)
    codes[0, :, 0] = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    codes[1, :, 4] = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    x = codes.view(fmt.dtype)
    assert torch.equal(fp8_nan_rows(x), torch.isnan(x.float()).any(-1))
    assert fp8_nan_rows(x).sum() == 2 * (2 if fmt is Fp8Format.E4M3 else 6)
    assert fp8_nan_rows(torch.zeros(3, 0, dtype=torch.uint8).view(fmt.dtype)).tolist() == [False] * 3
