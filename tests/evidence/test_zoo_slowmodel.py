"""The zoo formats (fp16, bf16, tf32) against the independent slow model, bit for bit.

tests/slowmodel.py's ``zoo_block``/``zoo_dot`` are written from docs/zoo.md's wording with Python
Fractions; here they meet :func:`mmaemu.model.dot` on every zoo preset and format (both
accumulators for fp16), on hypothesis-generated operands and hand-built adversarial ones:
truncation boundaries, cancellation, subnormal operands and results, products beyond fp32's range
(bf16 and tf32), overflow, NaN and Inf, K not a multiple of B, zero blocks with a nonzero c. The
slow model also replays a sample of every recorded zoo file.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mmaemu
import slowmodel as sm
from conftest import FULL, HW_VECTORS
from mmaemu.presets import ZOO

CASES = [(arch.value, fmt.short_name, p.block_size, p.frac_bits) for (arch, fmt), p in ZOO.items()]
DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32}
WIDTH = {"fp16": 16, "bf16": 16, "tf32": 32}
EXAMPLES = 300 if FULL else 30
_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def operands(bits: list[list[int]], fmt: str) -> torch.Tensor:
    if fmt == "tf32":
        return torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)
    return torch.tensor(bits, dtype=torch.int64).to(torch.int16).view(DTYPE[fmt])


def accumulator(bits: list[int], acc: str) -> torch.Tensor:
    if acc == "fp32":
        return torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)
    return torch.tensor(bits, dtype=torch.int64).to(torch.int16).view(torch.float16)


def result_bits(t: torch.Tensor) -> list[int]:
    width = t.element_size() * 8
    view = torch.int32 if width == 32 else torch.int16
    return [int(v) & ((1 << width) - 1) for v in t.view(view).tolist()]


def operand_bits(fmt: str) -> st.SearchStrategy[int]:
    """Bit patterns of one format, weighted toward the interesting ones."""
    if fmt == "tf32":
        any_bits = st.integers(0, (1 << 19) - 1).map(lambda x: x << 13)
        exponent_field = st.sampled_from([0, 1, 2, 100, 126, 127, 128, 200, 253, 254, 255])
        shaped = st.tuples(st.integers(0, 1), exponent_field, st.integers(0, 1023)).map(
            lambda t: (t[0] << 31) | (t[1] << 23) | (t[2] << 13))
        near_one = st.tuples(st.integers(0, 1), st.integers(120, 134), st.integers(0, 1023)).map(
            lambda t: (t[0] << 31) | (t[1] << 23) | (t[2] << 13))
    else:
        ebits, mbits = (5, 10) if fmt == "fp16" else (8, 7)
        bias = (1 << (ebits - 1)) - 1
        top = (1 << ebits) - 1
        any_bits = st.integers(0, 0xFFFF)
        exponent_field = st.sampled_from([0, 1, 2, bias - 8, bias - 1, bias, bias + 1, top - 2, top - 1, top])
        shaped = st.tuples(st.integers(0, 1), exponent_field, st.integers(0, (1 << mbits) - 1)).map(
            lambda t: (t[0] << 15) | (t[1] << mbits) | t[2])
        near_one = st.tuples(st.integers(0, 1), st.integers(bias - 7, bias + 7), st.integers(0, (1 << mbits) - 1)).map(
            lambda t: (t[0] << 15) | (t[1] << mbits) | t[2])
    return st.one_of(any_bits, shaped, near_one, near_one, st.just(0))


def c_bits(acc: str) -> st.SearchStrategy[int]:
    if acc == "fp32":
        return st.one_of(st.integers(0, 0xFFFFFFFF),
                         st.tuples(st.integers(0, 1), st.integers(100, 150), st.integers(0, (1 << 23) - 1)).map(
                             lambda t: (t[0] << 31) | (t[1] << 23) | t[2]), st.just(0), st.just(0x80000000))
    return st.one_of(st.integers(0, 0xFFFF), st.tuples(st.integers(0, 1), st.integers(8, 22), st.integers(0, 1023)).map(
        lambda t: (t[0] << 15) | (t[1] << 10) | t[2]), st.just(0), st.just(0x8000))


@st.composite
def zoo_case(draw: st.DrawFn) -> tuple:
    arch, fmt, block, frac = draw(st.sampled_from(CASES))
    acc = draw(st.sampled_from(["fp32", "fp16"])) if fmt == "fp16" else "fp32"
    k = draw(st.integers(1, 3 * block + 1))
    rows = draw(st.integers(1, 3))
    a = [[draw(operand_bits(fmt)) for _ in range(k)] for _ in range(rows)]
    b = [[draw(operand_bits(fmt)) for _ in range(k)] for _ in range(rows)]
    c = [draw(c_bits(acc)) for _ in range(rows)]
    return arch, fmt, block, frac, acc, a, b, c


def check(arch: str, fmt: str, block: int, frac: int, acc: str, a: list[list[int]], b: list[list[int]],
          c: list[int]) -> None:
    got = result_bits(mmaemu.model.dot(operands(a, fmt), operands(b, fmt), accumulator(c, acc), preset=arch))
    want = [sm.zoo_dot(ra, rb, rc, fmt, block, frac, acc) for ra, rb, rc in zip(a, b, c)]
    assert got == want, (arch, fmt, acc, [hex(g) for g in got], [hex(w) for w in want])


@_SETTINGS
@given(case=zoo_case())
def test_zoo_dot_agrees_with_the_slow_model(case: tuple) -> None:
    check(*case)


def _f16(x: float) -> int:
    return int(torch.tensor(x, dtype=torch.float16).view(torch.int16).item()) & 0xFFFF


def _bf16(x: float) -> int:
    return int(torch.tensor(x, dtype=torch.bfloat16).view(torch.int16).item()) & 0xFFFF


def _f32(x: float) -> int:
    return int(torch.tensor(x, dtype=torch.float32).view(torch.int32).item()) & 0xFFFFFFFF


ENC = {"fp16": _f16, "bf16": _bf16, "tf32": _f32}


def adversarial(fmt: str, block: int, frac: int) -> list[tuple[list[float], list[float], float]]:
    """(a, b, c) value triples built to sit on the edges of the rules."""
    grid = 2.0 ** -frac
    tiny = {"fp16": 2.0**-24, "bf16": 2.0**-133, "tf32": 2.0**-136}[fmt]  # smallest subnormal
    big = {"fp16": 32768.0, "bf16": 2.0**127, "tf32": 2.0**127}[fmt]
    cases = [
        ([1.0] * block, [2.0 ** -12] * block, 1.0),                    # products exactly on / below the grid
        ([1.0, 1.0], [1.0, -1.0], 0.0),                                # exact cancellation: +0
        ([1.0] * 2, [0.5, 0.5 * grid], 0.0),                           # one bit beyond F
        ([1.5] * block, [-1.5] * block, 2.0**-30),                     # significand products >= 2, c truncated away
        ([tiny, 1.0], [1.0, tiny], 0.0),                               # subnormal operands
        ([tiny], [tiny], 0.0),                                         # the smallest product
        ([big, big], [big, 1.0], 0.0),                                 # overflow (Inf) or huge products
        ([big, -big], [big, big], 0.0),                                # huge products cancel
        ([1.0] * (block + 1), [1.0] * (block + 1), -float(block)),     # K not a multiple of B, zero result
        ([0.0] * block, [0.0] * block, -0.0),                          # zero block, c = -0: +0
        ([0.0] * block, [1.0] * block, 1.0 + 2.0**-23),                # zero block keeps c
        ([float("inf"), 1.0], [1.0, 1.0], 1.0),                        # inf product
        ([float("inf"), float("-inf")], [1.0, 1.0], 0.0),              # opposite infinities: NaN
        ([float("inf")], [0.0], 0.0),                                  # inf * 0: NaN
        ([float("nan"), 1.0], [0.0, 1.0], 0.0),                        # NaN times zero: NaN
        ([1.0], [1.0], float("inf")),                                  # inf c
        ([1.0], [1.0], float("nan")),                                  # NaN c
        ([2.0**-14, 2.0**-14], [2.0**-10, -2.0**-10], 2.0**-126),      # subnormal-range c and products
        # an fp16 c below 2**-14 (subnormal): its exponent is floored at -14, so a product of 2**-48
        # truncates away and c + 2**-25 is a tie (to even); unfloored, it would round up
        ([2.0**-12, 2.0**-24], [2.0**-13, 2.0**-24], 2.0**-23),
    ]
    if fmt == "fp16":
        # a subnormal operand's exponent is emin (-14), not -15: the block's E, and so whether the
        # last bit of the second product (2**(-15 - F)) survives, depends on it
        cases.append(([3 * 2.0**-24, 2.0**-14 * (1 + 2.0**-10)], [1.0, 2.0 ** (9 - frac)], 0.0))
    return cases


@pytest.mark.parametrize("arch,fmt,block,frac", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_zoo_adversarial_cases_agree_with_the_slow_model(arch: str, fmt: str, block: int, frac: int) -> None:
    enc = ENC[fmt]
    for av, bv, cv in adversarial(fmt, block, frac):
        a = [[enc(x) for x in av]]
        b = [[enc(x) for x in bv]]
        accs = ["fp32", "fp16"] if fmt == "fp16" else ["fp32"]
        for acc in accs:
            c = [_f32(cv) if acc == "fp32" else _f16(cv)]
            check(arch, fmt, block, frac, acc, a, b, c)


@pytest.mark.parametrize("arch,fmt,block,frac", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_slow_model_replays_a_sample_of_the_recorded_vectors(arch: str, fmt: str, block: int, frac: int) -> None:
    gpu = {"volta": "v100", "ampere": "a100", "ada": "ada", "hopper": "h100", "b200": "b200"}[arch]
    path = HW_VECTORS / "zoo" / f"{gpu}_{fmt}.npz"
    if not path.exists():
        pytest.skip(f"hardware evidence not found at {path} (a clone without ../shared)")
    data = np.load(path)
    rows = random.Random(17).sample(range(5000), 5000 if FULL else 60)
    for i in rows:
        def enc(bits: int) -> int:
            value = torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)
            return ENC[fmt](float(value))
        a = [enc(int(x)) for x in data["a_bits"][i]]
        b = [enc(int(x)) for x in data["b_bits"][i]]
        assert sm.zoo_dot(a, b, int(data["c_bits"][i]), fmt, block, frac) == int(data["d_fp32_bits"][i]), i
        if "d_fp16acc_bits" in data.files:
            c16 = _f16(float(torch.tensor(int(data["c_bits"][i]), dtype=torch.int64).to(torch.int32).view(torch.float32)))
            want16 = _f16(float(torch.tensor(int(data["d_fp16acc_bits"][i]), dtype=torch.int64).to(torch.int32)
                                .view(torch.float32)))
            assert sm.zoo_dot(a, b, c16, fmt, block, frac, "fp16") == want16, i
