"""Tests of the slow reference model (tests/slowmodel.py) against facts that come from no code
of this project: the recorded hardware vectors, hand-worked cases from shared/NUMERICS.md, and
independent IEEE oracles (numpy float32 arithmetic, torch dtype conversions) used only here.
"""

from __future__ import annotations

import os
import random
import struct
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import slowmodel as sm  # noqa: E402
from conftest import require  # noqa: E402

from evidence import evidence_root  # noqa: E402

HW_DIR = evidence_root() / "hw-vectors"
FULL = os.environ.get("MMAEMU_FULL") == "1"
SAMPLE = 300


def f32(x) -> int:
    """fp32 bits of a Python float exactly representable in fp32."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    assert struct.unpack("<f", struct.pack("<I", bits))[0] == x or x != x
    return bits


def bits_to_float(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def p2(k: int) -> float:
    return 2.0 ** k


E4M3_ONE = 0x38  # 1.0
E5M2_ONE = 0x3C  # 1.0


# ---------------------------------------------------------------------------------------------
# (a) recorded tensor-core vectors
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fname, block_size, use_c",
    [("h100_e4m3.npz", 32, False), ("ada_e4m3.npz", 16, True)],
)
def test_hw_vectors(fname, block_size, use_c):
    path = HW_DIR / fname
    d = np.load(require(path))
    assert bool(d["c_applied"]) is use_c
    n = len(d["d_fp32_bits"]) if FULL else min(SAMPLE, len(d["d_fp32_bits"]))
    mismatches = []
    for i in range(n):
        c = int(d["c_bits"][i]) if use_c else 0
        got = sm.dot([int(x) for x in d["a_codes"][i]], [int(x) for x in d["b_codes"][i]], c,
                     "e4m3", "e4m3", block_size, 13)
        want = int(d["d_fp32_bits"][i])
        if got != want:
            mismatches.append((i, hex(got), hex(want)))
    assert not mismatches, f"{len(mismatches)}/{n} mismatches, first: {mismatches[:5]}"


# ---------------------------------------------------------------------------------------------
# (b) formats: decode and rounding against independent oracles
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt, tdtype", [("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)])
def test_fp8_decode_all_codes(fmt, tdtype):
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    ref = codes.view(tdtype).float()
    for code in range(256):
        want = float(ref[code])
        got = sm.fp8_decode(code, fmt)
        if want != want:
            assert got == "nan", code
        elif want in (float("inf"), float("-inf")):
            assert got == ("+inf" if want > 0 else "-inf"), code
        else:
            assert isinstance(got, Fraction) and got == Fraction(want), code
            kind, sign, _ = sm.fp8_decode_signed(code, fmt)
            assert kind == "fin" and sign == int(torch.signbit(ref[code])), code


def test_fp8_decode_named_values():
    assert sm.fp8_decode(0x7E, "e4m3") == 448
    assert sm.fp8_decode(0x7F, "e4m3") == "nan" and sm.fp8_decode(0xFF, "e4m3") == "nan"
    assert sm.fp8_decode(0x01, "e4m3") == Fraction(1, 512)
    assert sm.fp8_decode(0x80, "e4m3") == 0 and sm.fp8_decode_signed(0x80, "e4m3")[1] == 1
    assert sm.fp8_decode(0x7B, "e5m2") == 57344
    assert sm.fp8_decode(0x7C, "e5m2") == "+inf" and sm.fp8_decode(0xFC, "e5m2") == "-inf"
    assert sm.fp8_decode(0x7D, "e5m2") == "nan"
    assert sm.fp8_decode(0x01, "e5m2") == Fraction(1, 1 << 16)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_fp32_decode_vs_struct(bits):
    x = bits_to_float(bits)
    kind, sign, mag = sm.f32_value(bits)
    if x != x:
        assert kind == "nan"
    elif x in (float("inf"), float("-inf")):
        assert kind == "inf" and sign == (x < 0)
    else:
        assert kind == "fin" and (-mag if sign else mag) == Fraction(x)
        assert sm.f32_bits_from_value((kind, sign, mag)) == bits


def _np_f32(bits: int) -> np.float32:
    return np.array([bits], dtype=np.uint32).view(np.float32)[0]


def _np_bits(x: np.float32) -> int:
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


def _near_pair():
    """Pairs of fp32 patterns with close exponents (rounding, cancellation, subnormals)."""
    return st.tuples(st.integers(0, 1), st.integers(0, 255), st.integers(0, 2**23 - 1),
                     st.integers(0, 1), st.integers(-3, 3), st.integers(0, 2**23 - 1)).map(
        lambda t: ((t[0] << 31) | (t[1] << 23) | t[2],
                   (t[3] << 31) | (min(max(t[1] + t[4], 0), 255) << 23) | t[5]))


def _check_binop(x, y, model, npop):
    with np.errstate(all="ignore"):
        ref = npop(_np_f32(x), _np_f32(y))
    got = model(x, y)
    if ref != ref:
        assert got == 0x7FFFFFFF
    else:
        assert got == _np_bits(ref), (hex(x), hex(y), hex(got), hex(_np_bits(ref)))


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_fp32_add_random_bits_vs_numpy(x, y):
    _check_binop(x, y, sm.fp32_add_bits, lambda a, b: a + b)


@settings(max_examples=400, deadline=None)
@given(_near_pair())
def test_fp32_add_near_exponents_vs_numpy(xy):
    _check_binop(xy[0], xy[1], sm.fp32_add_bits, lambda a, b: a + b)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_fp32_mul_random_bits_vs_numpy(x, y):
    _check_binop(x, y, sm.fp32_mul_bits, lambda a, b: a * b)


def test_fp32_add_named_cases():
    add = sm.fp32_add_bits
    assert add(f32(1.5), f32(-1.5)) == 0x00000000          # x + (-x) = +0
    assert add(0x80000000, 0x80000000) == 0x80000000       # (-0) + (-0) = -0
    assert add(0x80000000, 0x00000000) == 0x00000000
    assert add(0x7F7FFFFF, 0x7F7FFFFF) == 0x7F800000       # overflow -> inf
    assert add(0x7F800000, 0xFF800000) == 0x7FFFFFFF       # inf - inf -> NaN
    assert add(0x7F800000, f32(-3.0)) == 0x7F800000
    assert add(0x7FC00001, f32(1.0)) == 0x7FFFFFFF         # NaN canonicalised
    assert add(0x00000001, 0x00000001) == 0x00000002       # subnormals, no flush
    assert add(0x007FFFFF, 0x00000001) == 0x00800000
    assert add(f32(p2(24)), f32(1.0)) == f32(p2(24))       # tie -> even (down)
    assert add(f32(p2(24) + 2), f32(1.0)) == f32(p2(24) + 4)  # tie -> even (up)


def _random_f32_patterns(n, seed):
    rng = random.Random(seed)
    pats = [rng.getrandbits(32) for _ in range(n)]
    # near-tie patterns for bf16 (low 16 bits around 0x8000) and fp16 (exponents of its range)
    for _ in range(n):
        e = rng.randint(95, 145)
        low = rng.choice([0x8000, 0x7FFF, 0x8001, 0x0000, 0xFFFF, rng.getrandbits(16)])
        pats.append((rng.getrandbits(1) << 31) | (e << 23) | (rng.getrandbits(7) << 16) | low)
        # fp16 ties: set the bit just below the fp16 quantum at this exponent
        shift = 13 + max(0, 113 - e)  # fp16 keeps 10 bits; subnormal below 2^-14 (biased 113)
        if shift < 23:
            m = (rng.getrandbits(23) >> (shift + 1) << (shift + 1)) | (1 << shift)
            pats.append((rng.getrandbits(1) << 31) | (e << 23) | m)
    pats += [0x7F7FFFFF, 0xFF7FFFFF, 0x477FF000, 0x477FEFFF, 0x477FF001, 0x33000000, 0x33000001,
             0x7F800000, 0x00000001, 0x80000000]
    return pats


@pytest.mark.parametrize("dtype, name", [(torch.bfloat16, "bfloat16"), (torch.float16, "float16")])
def test_bf16_fp16_rounding_vs_torch(dtype, name):
    pats = _random_f32_patterns(4000, seed=1234 if name == "bfloat16" else 5678)
    x = torch.tensor(pats, dtype=torch.int64).to(torch.int32).view(torch.float32)
    ref = x.to(dtype).view(torch.int16).to(torch.int64) & 0xFFFF
    for bits, r in zip(pats, ref.tolist()):
        v = sm.f32_value(bits)
        if v[0] == "nan":
            continue  # torch keeps a payload; the model canonicalises
        assert sm.encode_rne(v, name) == r, (hex(bits), hex(r))


@pytest.mark.parametrize("dtype, name", [(torch.float8_e4m3fn, "e4m3"), (torch.float8_e5m2, "e5m2")])
def test_fp8_saturating_rounding_vs_torch(dtype, name):
    pats = _random_f32_patterns(3000, seed=42)
    rng = random.Random(7)
    # values concentrated in the fp8 ranges, with ties
    for _ in range(3000):
        e = rng.randint(127 - 20, 127 + 17)
        pats.append((rng.getrandbits(1) << 31) | (e << 23) | (rng.getrandbits(4) << 19)
                    | rng.choice([1 << 18, 1 << 19, 1 << 20, 1 << 21, 0, rng.getrandbits(18)]))
    x = torch.tensor(pats, dtype=torch.int64).to(torch.int32).view(torch.float32)
    ref = x.to(dtype).view(torch.uint8).tolist()
    fmax = sm.FORMATS[name].max_finite
    for bits, r in zip(pats, ref):
        v = sm.f32_value(bits)
        if v[0] == "nan":
            continue
        got = sm.encode_rne(v, name, overflow="saturate")
        rv = sm.fp8_decode(r, name)
        if isinstance(rv, Fraction) and abs(rv) <= fmax:
            assert got == r, (hex(bits), hex(got), hex(r))
        else:  # torch overflowed to inf/NaN: satfinite gives +-max
            assert sm.fp8_decode(got, name) == (-fmax if v[1] else fmax)


# ---------------------------------------------------------------------------------------------
# (b) hand-worked block cases (NUMERICS section 1)
# ---------------------------------------------------------------------------------------------


def blk(c, a, b, fa="e4m3", fb="e4m3", B=32, F=13):
    a = list(a) + [0] * (B - len(a))
    b = list(b) + [0] * (B - len(b))
    return sm.block(c, a, b, fa, fb, F)


def test_block_truncation_tie_worked_by_hand():
    # c = 0; products 1.75*1.75 = 3.0625 (e = 0, significand 3.0625 in [2, 4)) twice, and
    # 2^-6 * 2^-7 = 2^-13 (e = -6 + -6 = -12, significand 1 * 0.5).  E = 0, grid 2^(0-13):
    # every term is on the grid, exact sum S = 6.125 + 2^-13.  S is in [4, 8), k = 2, so the
    # normalised result keeps 13 fraction bits at 2^2: grid 2^-11.  2^-13 is a quarter of that
    # grid step; truncation drops it: 6.125 (IEEE RNE would have kept 6.125 + 2^-13 exactly).
    a = [0x3E, 0x3E, 0x08]   # 1.75, 1.75, 2^-6
    b = [0x3E, 0x3E, 0x04]   # 1.75, 1.75, 2^-7 (subnormal 4/8 * 2^-6)
    assert sm.fp8_decode(0x04, "e4m3") == Fraction(1, 128)
    assert blk(0, a, b) == f32(6.125)
    # toward zero in sign-magnitude, not floor: the negated block gives -6.125
    assert blk(0, [0xBE, 0xBE, 0x88], b) == f32(-6.125)
    # step 3 truncation: 1 - 2^-14 with E = 0 and grid 2^-13: -2^-14 truncates toward zero to 0
    # (floor would give -2^-13), so the result is 1.0, not 1 - 2^-14 (exact) or 1 - 2^-13.
    # 2^-14 = 2^-7 * 2^-7: e = -12, significand 0.25.
    assert blk(0, [E4M3_ONE, 0x84], [E4M3_ONE, 0x04]) == f32(1.0)


def test_block_all_zero_truncates_c():
    # seeds 002: an all-zero block still truncates c: E = exponent of c = 0, grid 2^-13
    assert blk(f32(1.0 + p2(-20)), [], []) == f32(1.0)
    assert blk(f32(-(1.0 + p2(-13) + p2(-14))), [], []) == f32(-(1.0 + p2(-13)))
    # exact zero -> +0, for c = +0 and c = -0
    assert blk(0x00000000, [], []) == 0x00000000
    assert blk(0x80000000, [], []) == 0x00000000
    assert blk(0x80000000, [0x80], [E4M3_ONE]) == 0x00000000


def test_block_cancellation_gives_plus_zero():
    assert blk(0, [E4M3_ONE, E4M3_ONE], [E4M3_ONE, 0xB8]) == 0x00000000
    assert blk(f32(-1.0), [E4M3_ONE], [E4M3_ONE]) == 0x00000000


def test_block_exponent_is_nominal():
    # a = 0x01 = 2^-9 (subnormal: e = -6, m = 1/8), b = 1.0: product 2^-9 with e_i = -6.
    # E = -6, grid 2^-19: c = 2^-21 truncates to 0 (a magnitude-based exponent -9 would keep it).
    assert blk(f32(p2(-21)), [0x01], [E4M3_ONE]) == f32(p2(-9))
    assert blk(f32(p2(-19)), [0x01], [E4M3_ONE]) == f32(p2(-9) + p2(-19))


def test_block_c_sets_E():
    # c = 2^20 dominates: E = 20, grid 2^7; product 448*448 = 200704 = 1568 * 2^7 stays,
    # product 1.0 truncates to 0.  Sum 2^20 + 200704 = 1249280, k = 20, grid 2^7: exact.
    assert blk(f32(p2(20)), [0x7E, E4M3_ONE], [0x7E, E4M3_ONE]) == f32(p2(20) + 200704)


def test_block_subnormal_c_floor():
    # c exponent floored at -126: c = 2^-140 (subnormal) alone: E = -126, grid 2^-139 -> 0 -> +0
    assert blk(f32(p2(-140)), [], []) == 0x00000000
    # c = 3 * 2^-140: truncated to 2^-139
    assert blk(f32(3 * p2(-140)), [], []) == f32(p2(-139))


def test_block_nonfinite_rules():
    INF, NINF, NAN5 = 0x7C, 0xFC, 0x7E
    one, zero = E5M2_ONE, 0x00
    e5 = dict(fa="e5m2", fb="e5m2")
    assert blk(0, [INF], [zero], **e5) == 0x7FFFFFFF                    # inf * 0
    assert blk(0, [INF, NINF], [one, one], **e5) == 0x7FFFFFFF          # +inf and -inf
    assert blk(0, [INF, INF], [one, 0xBC], **e5) == 0x7FFFFFFF          # +inf * -1 is -inf
    assert blk(0, [INF, one], [one, one], **e5) == 0x7F800000
    assert blk(0, [INF], [0xBC], **e5) == 0xFF800000
    assert blk(0, [NAN5], [zero], **e5) == 0x7FFFFFFF                   # NaN * 0
    assert blk(0, [0x7F], [zero]) == 0x7FFFFFFF                         # e4m3 NaN
    assert blk(0x7FC00000, [], [], **e5) == 0x7FFFFFFF                   # c NaN
    assert blk(0xFF800000, [one], [one], **e5) == 0xFF800000             # c inf passes through
    assert blk(0x7F800000, [NINF], [one], **e5) == 0x7FFFFFFF            # c +inf, -inf product
    assert blk(0x7F800000, [INF], [one], **e5) == 0x7F800000


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 255), st.integers(0, 255)), min_size=1, max_size=16),
       st.integers(0, 2**31 - 1).filter(lambda b: (b >> 23) != 0xFF), st.randoms())
def test_block_symmetries(pairs, c, rnd):
    a = [p[0] for p in pairs if p[0] & 0x7F != 0x7F and p[1] & 0x7F != 0x7F]
    b = [p[1] for p in pairs if p[0] & 0x7F != 0x7F and p[1] & 0x7F != 0x7F]
    r = blk(c, a, b, B=16)
    # sign symmetry: truncation is toward zero in sign-magnitude
    neg = blk(c ^ 0x80000000, [x ^ 0x80 for x in a], b, B=16)
    assert neg == (r ^ 0x80000000 if r != 0 else 0)
    # the sum is exact: product order within a block does not matter
    idx = list(range(len(a)))
    rnd.shuffle(idx)
    assert blk(c, [a[i] for i in idx], [b[i] for i in idx], B=16) == r


# ---------------------------------------------------------------------------------------------
# (b) chains and accumulation (NUMERICS section 2)
# ---------------------------------------------------------------------------------------------


def test_dot_padding_and_empty():
    assert sm.dot([], [], f32(2.5), "e4m3", "e4m3", 16, 13) == f32(2.5)
    # K = 3 with B = 16: one zero-padded block
    assert sm.dot([E4M3_ONE] * 3, [E4M3_ONE] * 3, 0, "e4m3", "e4m3", 16, 13) == f32(3.0)


def test_fast_vs_slow_accumulation():
    # k = 0: 1 * 1; k = 128: 2^-9 * 2^-9 = 2^-18.  fast: one chain, the second block has c = 1,
    # E = 0, grid 2^-13, the 2^-18 product truncates away -> 1.0.  slow: chains [0, 128) and
    # [128, 256) give 1.0 and 2^-18, added in fp32 RNE: 1 + 2^-18 (exact).
    a = [0] * 256
    b = [0] * 256
    a[0] = b[0] = E4M3_ONE
    a[128] = b[128] = 0x01
    args = ("e4m3", "e4m3", 32, 13)
    assert sm.accumulate(a, b, *args, fast=True) == f32(1.0)
    assert sm.accumulate(a, b, *args, fast=False) == f32(1.0 + p2(-18))
    # the same elements at k = 0 and k = 64 stay in one slow chain: 1.0
    a2, b2 = [0] * 256, [0] * 256
    a2[0] = b2[0] = E4M3_ONE
    a2[64] = b2[64] = 0x01
    assert sm.accumulate(a2, b2, *args, fast=False) == f32(1.0)


def test_accumulate_empty_and_errors():
    for scheme, S in [("none", 1), ("contiguous", 3), ("serial", 2), ("pairwise", 4)]:
        for fast in (True, False):
            assert sm.accumulate([], [], "e4m3", "e4m3", 32, 13, fast, S, scheme) == 0
    with pytest.raises(ValueError):
        sm.accumulate([0] * 16, [0] * 16, "e4m3", "e4m3", 32, 13, True, 2, "none")


def _split_vectors():
    # e5m2 x e5m2 (allowed by the model): three 64-wide tiles worth 1, 2^24, -2^24.
    # 2^12 in e5m2: exponent field 12 + 15 = 27 -> 0x6C.
    a, b = [0] * 192, [0] * 192
    a[0], b[0] = E5M2_ONE, E5M2_ONE
    a[64], b[64] = 0x6C, 0x6C
    a[128], b[128] = 0xEC, 0x6C
    return a, b


def test_split_schemes_worked_by_hand():
    a, b = _split_vectors()
    args = ("e5m2", "e5m2", 32, 13)
    for fast in (True, False):
        # round-robin, S = 3: part j = tile j -> parts 1, 2^24, -2^24 (exact).
        # serial: (1 + 2^24) = 2^24 (tie to even), + (-2^24) = +0.
        assert sm.accumulate(a, b, *args, fast, 3, "serial") == 0x00000000
        # pairwise S = 3 (NUMERICS: (p2 + p0) + p1): (1 - 2^24) exact, + 2^24 = 1.
        assert sm.accumulate(a, b, *args, fast, 3, "pairwise") == f32(1.0)
        # contiguous, S = 3: C = ceil(ceil(192/128)/3)*128 = 128: parts [0,128), [128,192), empty.
        # Part 0's chain: block at k = 64 has c = 1, E = 24, c truncates to 0 -> 2^24.
        # (2^24 + -2^24) + 0 = +0.
        assert sm.accumulate(a, b, *args, fast, 3, "contiguous") == 0x00000000
        # no split: fast = the same chain -> 2^24, then -2^24 -> 0; slow: chains 2^24 and -2^24 -> +0
        assert sm.accumulate(a, b, *args, fast) == 0x00000000
    # S = 2 round-robin: part 0 = tiles 0, 2 (1 and -2^24); part 1 = tile 1 (2^24).
    # fast part 0: chain over k 0..63 then 128..191: c = 1, block with -2^24 truncates c: -2^24.
    assert sm.accumulate(a, b, *args, True, 2, "serial") == 0x00000000
    # slow part 0: one chain of 128 elements (its two tiles) -> the same -2^24
    assert sm.accumulate(a, b, *args, False, 2, "serial") == 0x00000000


def test_combine_trees():
    one, big, nbig = f32(1.0), f32(p2(24)), f32(-p2(24))
    assert sm.combine_serial([one, big, nbig]) == 0x00000000
    assert sm.combine_pairwise([one, big, nbig]) == one       # (p0 + p2) + p1
    assert sm.combine_pairwise([big, one]) == big
    assert sm.combine_pairwise([one]) == one
    # S = 4 pairwise order 0, 2, 3, 1 with p = 2^24, -2^24, 1, 1:
    # ((2^24 + 1) + 1) - 2^24: each + 1 is a tie that rounds to even 2^24, so the sum is +0.
    # A halving tree (p0 + p2) + (p1 + p3) = 2^24 + (1 - 2^24) would give 1; serial gives 2.
    assert sm.combine_pairwise([big, nbig, one, one]) == 0x00000000
    assert sm.combine_serial([big, nbig, one, one]) == f32(2.0)


def test_contiguous_dealing():
    # K = 384, S = 2: C = ceil(3/2)*128 = 256: parts [0, 256), [256, 384)
    # put 2^24 at k = 0 and 1 at k = 200 and at k = 300: part 0 = fast chain 2^24 (the 1 truncates),
    # part 1 = 1.  Combined 2^24 + 1 = 2^24 (tie to even).
    # With S = 3 (C = 128): parts 2^24, 1, 1 -> 2^24 + 1 = 2^24, + 1 = 2^24.
    a, b = [0] * 384, [0] * 384
    a[0], b[0] = 0x6C, 0x6C
    a[200], b[200] = E5M2_ONE, E5M2_ONE
    a[300], b[300] = E5M2_ONE, E5M2_ONE
    args = ("e5m2", "e5m2", 32, 13, True)
    assert sm.accumulate(a, b, *args, 2, "contiguous") == f32(p2(24))
    # reverse order of magnitudes: 1 at k = 0 and 2^24 at k = 300; S = 2:
    # part 0 = 1 + 1 (k = 0, 200) = 2; part 1 = 2^24; 2 + 2^24 exact -> 2^24 + 2
    a, b = [0] * 384, [0] * 384
    a[0] = b[0] = a[200] = b[200] = E5M2_ONE
    a[300], b[300] = 0x6C, 0x6C
    assert sm.accumulate(a, b, *args, 2, "contiguous") == f32(p2(24) + 2)
    # S = 4: C = 128: parts [0,128) = 1, [128,256) = 1, [256,384) = 2^24, empty = +0:
    # ((1 + 1) + 2^24) + 0 = 2^24 + 2
    assert sm.accumulate(a, b, *args, 4, "contiguous") == f32(p2(24) + 2)
    # no split, fast: one chain, the 2^24 block truncates c = 2 -> 2^24
    assert sm.accumulate(a, b, *args) == f32(p2(24))


# ---------------------------------------------------------------------------------------------
# (b) epilogue facts (NUMERICS section 3)
# ---------------------------------------------------------------------------------------------

ONE = 0x3F800000


def test_epilogue_zero_signs():
    # fma(-0, alpha, +0) = +0
    for dt in ("float32", "bfloat16", "float16", "e4m3", "e5m2"):
        assert sm.epilogue(0x80000000, ONE, ONE, dt) == 0
    # a nonzero product that rounds to zero keeps its sign: -2^-100 * 2^-60 -> -0
    assert sm.epilogue(f32(-p2(-100)), f32(p2(-60)), ONE, "float32") == 0x80000000
    assert sm.epilogue(f32(-p2(-100)), f32(p2(-60)), ONE, "bfloat16") == 0x8000
    # small negative y in e4m3 rounds to -0 = 0x80
    assert sm.epilogue(f32(-p2(-20)), ONE, ONE, "e4m3") == 0x80


def test_epilogue_alpha_rounded_first():
    # scale_a = scale_b = 1 + 2^-12: exact 1 + 2^-11 + 2^-24 is a tie at 1 + 2^-11 -> alpha =
    # 1 + 2^-11.  acc = 1 + 2^-23: y = 1 + 2^-11 + 2^-23 + 2^-34 -> 1 + 2^-11 + 2^-23.
    # (Rounding acc * sa * sb once would give 1 + 2^-11 + 2^-22.)
    s = f32(1 + p2(-12))
    assert sm.epilogue(f32(1 + p2(-23)), s, s, "float32") == f32(1 + p2(-11) + p2(-23))


def test_epilogue_bf16_double_rounding():
    # acc = 1 + 2^-8 - 2^-23, alpha = 1 + 2^-23: exact product 1 + 2^-8 + 2^-31 - 2^-46,
    # fp32 y = 1 + 2^-8, a bf16 tie -> even: 1.0 = 0x3F80 (direct rounding would give 0x3F81).
    assert sm.epilogue(f32(1 + p2(-8) - p2(-23)), f32(1 + p2(-23)), ONE, "bfloat16") == 0x3F80
    assert sm.epilogue(f32(1 + p2(-8) + p2(-23)), ONE, ONE, "bfloat16") == 0x3F81


def test_epilogue_fp16():
    assert sm.epilogue(f32(70000.0), ONE, ONE, "float16") == 0x7C00           # overflow -> inf
    assert sm.epilogue(f32(65504.0), ONE, ONE, "float16") == 0x7BFF
    assert sm.epilogue(f32(65520.0), ONE, ONE, "float16") == 0x7C00           # tie -> even = inf
    assert sm.epilogue(f32(p2(-25)), ONE, ONE, "float16") == 0x0000           # tie -> even 0
    assert sm.epilogue(f32(3 * p2(-25)), ONE, ONE, "float16") == 0x0002       # tie -> 2^-23
    assert sm.epilogue(f32(-1.5), ONE, ONE, "float16") == 0xBE00


def test_epilogue_fp8_saturation_and_scale_result():
    assert sm.epilogue(f32(1000.0), ONE, ONE, "e4m3") == 0x7E
    assert sm.epilogue(f32(-p2(100)), ONE, ONE, "e4m3") == 0xFE
    assert sm.epilogue(0x7F800000, ONE, ONE, "e4m3") == 0x7E                  # inf saturates [open]
    assert sm.epilogue(0xFF800000, ONE, ONE, "e5m2") == 0xFB
    assert sm.epilogue(f32(1e6), ONE, ONE, "e5m2") == 0x7B                    # 57344
    # scale_result: 100 * 10 = 1000 -> 448; 100 * 0.5 = 50: a tie between 48 (1.100b * 2^5) and
    # 52 (1.101b * 2^5) -> even 48 = exponent field 12, mantissa 100b = 0x64
    assert sm.epilogue(f32(100.0), ONE, ONE, "e4m3", f32(10.0)) == 0x7E
    assert sm.epilogue(f32(100.0), ONE, ONE, "e4m3", f32(0.5)) == 0x64
    # 100 without scale_result: grid 8 in [64, 128): a tie between 96 (1.100b * 2^6) and 104
    # (1.101b * 2^6) -> even 96 = exponent field 13, mantissa 100b = 0x6C
    assert sm.epilogue(f32(100.0), ONE, ONE, "e4m3") == 0x6C
    # y = 3 * (0.5 * 1) = 1.5, then * scale_result 2 = 3.0 = 1.1b * 2^1: e5m2 field 16, 10b = 0x42
    assert sm.epilogue(f32(3.0), f32(0.5), ONE, "e5m2", f32(2.0)) == 0x42
    # scale_result ignored for non-fp8 outputs ([open] in the model)
    assert sm.epilogue(f32(3.0), ONE, ONE, "float32", f32(2.0)) == f32(3.0)


def test_epilogue_nan():
    for dt, nan in sm.CANONICAL_NAN.items():
        assert sm.epilogue(0x7FC00000, ONE, ONE, dt) == nan
        assert sm.epilogue(0x7F800000, 0, ONE, dt) == nan                     # inf * 0
        assert sm.epilogue(ONE, 0xFFC00000, ONE, dt) == nan
    assert sm.epilogue(0x7F800000, ONE, ONE, "float32") == 0x7F800000
    assert sm.epilogue(0x7F800000, ONE, ONE, "bfloat16") == 0x7F80
    assert sm.epilogue(f32(2.0), ONE, ONE, "e4m3", 0x7F800000) == 0x7E        # 2 * inf saturates


def test_gemm_output():
    K = 32
    a = [E4M3_ONE] * K
    b = [0x40] * K  # 2.0
    args = ("e4m3", "e4m3", 32, 13, True, 1, "none", ONE, ONE)
    assert sm.gemm_output(a, b, *args, "float32") == f32(64.0)
    assert sm.gemm_output(a, b, *args, "bfloat16") == 0x4280
    a_nan = list(a)
    a_nan[5] = 0xFF
    b_zero = [0] * K
    for dt, nan in sm.CANONICAL_NAN.items():
        assert sm.gemm_output(a_nan, b_zero, *args, dt) == nan                # NaN * 0 is NaN
    # e5m2 inf * 0 -> NaN through accumulate
    a5 = [0x7C] + [0] * (K - 1)
    assert sm.gemm_output(a5, [0] * K, "e5m2", "e4m3", 32, 13, True, 1, "none", ONE, ONE,
                          "bfloat16") == 0x7FFF
    assert sm.gemm_output(a5, [E4M3_ONE] * K, "e5m2", "e4m3", 32, 13, True, 1, "none", ONE, ONE,
                          "e4m3") == 0x7E
