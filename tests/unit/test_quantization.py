"""mmaemu/quantization.py against the formats' definitions, computed here with exact fractions.

``quantize`` is ``fp8(saturate(fp32(x) * scale))`` (Transformer Engine's cast): every bf16 bit pattern
is multiplied by power-of-two scales (exact in fp32) and rounded here onto the E4M3 and E5M2 grids from
their definitions (OCP FP8: bias 7 and 15, 3 and 2 fraction bits, largest finite 448 and 57344, NaN and
Inf saturated as SATFINITE does). ``round_to_tf32`` is round to nearest, ties to even, onto 10 fraction
bits, checked on every fp32 pattern of a random sample and on the ties.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import pytest
import torch

from mmaemu.quantization import quantize, reciprocal_scale, round_to_tf32

#: (fraction bits, exponent bias, largest finite value, the NaN code's magnitude) of the FP8 formats.
FP8 = {torch.float8_e4m3fn: (3, 7, Fraction(448), 0x7F), torch.float8_e5m2: (2, 15, Fraction(57344), 0x7E)}


def _grid_round(value: Fraction, frac: int, bias: int) -> Fraction:
    """``value`` rounded to nearest, ties to even, on the grid of a format with ``frac`` fraction bits and
    exponent bias ``bias`` (subnormals on the grid 2**(1 - bias - frac)); no saturation here."""
    if value == 0:
        return Fraction(0)
    e = max(math.floor(math.log2(abs(value))), 1 - bias)
    # the floor of log2 of a Fraction can be off by one at powers of two: settle it exactly
    while abs(value) >= Fraction(2) ** (e + 1):
        e += 1
    while e > 1 - bias and abs(value) < Fraction(2) ** e:
        e -= 1
    ulp = Fraction(2) ** (e - frac)
    q, r = divmod(abs(value), ulp)
    if r > ulp / 2 or (r == ulp / 2 and q % 2 == 1):
        q += 1
    return (q * ulp) if value > 0 else -(q * ulp)


def _expected_fp8(x: float, scale: float, dtype: torch.dtype) -> float:
    frac, bias, largest, _ = FP8[dtype]
    if math.isnan(x):
        return math.nan
    if math.isinf(x):
        return math.copysign(float(largest), x)
    value = Fraction(x) * Fraction(scale)
    rounded = _grid_round(value, frac, bias)
    if abs(value) > largest:  # SATFINITE: saturate, then round (the saturated value is on the grid)
        rounded = largest if value > 0 else -largest
    if rounded == 0:
        return math.copysign(0.0, x)
    return float(rounded)


@pytest.mark.parametrize("dtype", list(FP8), ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("scale", [1.0, 2.0**-3, 2.0**5])
def test_quantize_every_bf16_pattern(dtype: torch.dtype, scale: float) -> None:
    codes = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    x = codes.view(torch.bfloat16)
    got = quantize(x, scale, dtype).float()
    expected = torch.tensor([_expected_fp8(v, scale, dtype) for v in x.float().tolist()], dtype=torch.float32)
    nan = torch.isnan(expected)
    assert bool((torch.isnan(got) == nan).all()), "NaN inputs must stay NaN, and only they"
    same = got[~nan].view(torch.int32) == expected[~nan].view(torch.int32)  # bits: -0 is not +0
    bad = (~same).nonzero().flatten()[:5]
    assert bool(same.all()), [(x[~nan][i].item(), got[~nan][i].item(), expected[~nan][i].item()) for i in bad]


def _expected_tf32(bits: int) -> int:
    """The tf32 rounding of one fp32 bit pattern, by the definition (exact fractions for finite values)."""
    sign = bits & 0x80000000
    magnitude = bits & 0x7FFFFFFF
    if magnitude > 0x7F800000:
        return sign | 0x7FC00000
    if magnitude == 0x7F800000:
        return bits
    value = Fraction(struct.unpack("<f", struct.pack("<I", magnitude))[0])
    rounded = _grid_round(value, 10, 127)
    if rounded >= Fraction(2) ** 128:
        return sign | 0x7F800000
    return sign | struct.unpack("<I", struct.pack("<f", float(rounded)))[0]


def test_round_to_tf32_by_definition() -> None:
    g = torch.Generator().manual_seed(26)
    sample = torch.randint(0, 2**32, (20000,), generator=g, dtype=torch.int64)
    # the ties and their neighbours, at both parities of the kept bit, subnormals and the top of the range
    ties = torch.tensor([0x3F801000, 0x3F803000, 0x3F800FFF, 0x3F801001, 0x00001000, 0x00003000,
                         0x7F7FF000, 0x7F7FEFFF, 0xBF801000, 0xFF7FF000, 0x00000000, 0x80000000])
    bits = torch.cat([sample, ties])
    x = torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32).view(torch.float32)
    got = (round_to_tf32(x).view(torch.int32).to(torch.int64) & 0xFFFFFFFF).tolist()
    expected = [_expected_tf32(int(b)) for b in bits.tolist()]
    bad = [(hex(int(b)), hex(g_), hex(e)) for b, g_, e in zip(bits.tolist(), got, expected) if g_ != e][:5]
    assert not bad, bad


def test_reciprocal_scale_is_the_correctly_rounded_inverse() -> None:
    for s in [3.0, 7.0, 1e-30, 448.0 / 3, 2.0**-120]:
        expected = _grid_round(Fraction(1) / Fraction(struct.unpack("<f", struct.pack("<f", s))[0]), 23, 127)
        assert Fraction(reciprocal_scale(s).item()) == expected, s
    assert reciprocal_scale(2.0**-140).item() == math.inf  # 2**140 is past fp32's range
    assert math.copysign(1.0, reciprocal_scale(-0.0).item()) == -1.0 and math.isinf(reciprocal_scale(-0.0).item())
