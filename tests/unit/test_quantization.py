"""mmaemu/quantization.py against the independent slow model (tests/slowmodel.py, exact fractions).

``quantize`` is ``fp8(saturate(fp32(x) * scale))`` (Transformer Engine's cast): every bf16 bit pattern
times power-of-two scales (exact in fp32), converted by the slow model's round to nearest even with
saturation (``encode_rne(..., overflow="saturate")``, SATFINITE: infinities too), compared code by
code. ``round_to_tf32`` is round to nearest, ties to even, onto 10 fraction bits (tf32: fp32's exponent,
10 fraction bits), on a random sample of fp32 patterns and on the ties; ``reciprocal_scale`` is the
correctly rounded fp32 inverse.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import slowmodel as sm
import torch

from mmaemu.quantization import quantize, reciprocal_scale, round_to_tf32

FP8 = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}
TF32 = sm.Fmt("tf32", 8, 10, 127, True)


@pytest.mark.parametrize("dtype", list(FP8), ids=list(FP8.values()))
@pytest.mark.parametrize("scale", [1.0, 2.0**-3, 2.0**5])
def test_quantize_every_bf16_pattern(dtype: torch.dtype, scale: float) -> None:
    codes = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    got = quantize(codes.view(torch.bfloat16), scale, dtype).view(torch.uint8).tolist()
    for code, mine in zip((codes.to(torch.int32) & 0xFFFF).tolist(), got):
        kind, sign, mag = sm.decode(code, "bfloat16")
        expected = sm.encode_rne((kind, sign, mag * Fraction(scale)), FP8[dtype], overflow="saturate")
        if kind == "nan":  # a NaN stays a NaN (its sign is not claimed)
            assert sm.decode(mine, FP8[dtype])[0] == "nan", hex(code)
        else:
            assert mine == expected, (hex(code), hex(mine), hex(expected))


def _expected_tf32(bits: int) -> int:
    kind, sign, mag = sm.decode(bits, "float32")
    if kind == "nan":
        return (sign << 31) | 0x7FC00000  # the documented quiet NaN of the same sign
    return sm.encode_rne((kind, sign, mag), TF32, overflow="inf") << 13


def test_round_to_tf32_by_definition() -> None:
    g = torch.Generator().manual_seed(26)
    sample = torch.randint(0, 2**32, (20000,), generator=g, dtype=torch.int64)
    # ties and their neighbours at both parities of the kept bit, subnormals, the top of the range, zeros
    ties = torch.tensor([0x3F801000, 0x3F803000, 0x3F800FFF, 0x3F801001, 0x00001000, 0x00003000,
                         0x7F7FF000, 0x7F7FEFFF, 0xBF801000, 0xFF7FF000, 0x00000000, 0x80000000])
    bits = torch.cat([sample, ties])
    x = torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32).view(torch.float32)
    got = (round_to_tf32(x).view(torch.int32).to(torch.int64) & 0xFFFFFFFF).tolist()
    bad = [(hex(b), hex(mine), hex(_expected_tf32(b))) for b, mine in zip(bits.tolist(), got) if mine != _expected_tf32(b)]
    assert not bad, bad[:5]


@pytest.mark.parametrize("scale", [3.0, 7.0, 1e-30, 448.0 / 3, 2.0**-120, 2.0**-140, -0.0])
def test_reciprocal_scale_is_the_correctly_rounded_inverse(scale: float) -> None:
    s_bits = int(torch.tensor(scale).view(torch.int32).item()) & 0xFFFFFFFF
    kind, sign, mag = sm.decode(s_bits, "float32")
    expected = sm.f32_bits_from_value(("inf", sign, Fraction(0)) if mag == 0 else ("fin", sign, 1 / mag))
    assert int(reciprocal_scale(scale).view(torch.int32).item()) & 0xFFFFFFFF == expected
