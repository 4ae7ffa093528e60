"""mmaemu.epilogue against the exact slow model (tests/slowmodel.py): without a bias for any finite scales and
every output dtype, and with a bias in both candidate orders.

No recording of a biased output exists (docs: [Note: bias]), so these tests show that each candidate is
computed exactly as defined, that the two are told apart, and that scaled_mm uses the default one and
warns; which one the hardware computes is open.
"""

from __future__ import annotations

import struct

import warnings

import pytest
import slowmodel
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import mmaemu
from mmaemu._epilogue import BiasOrder, epilogue, scratch_epilogue

_OUT = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _ours(acc: int, sa: int, sb: int, bias: int, out: str, order: BiasOrder) -> int:
    t_acc = torch.tensor([acc], dtype=torch.int64).to(torch.int32).view(torch.float32)
    scalar = lambda bits: torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)  # noqa: E731
    t_bias = torch.tensor([bias], dtype=torch.int32).to(torch.int16).view(_OUT[out])
    y = epilogue(t_acc, scalar(sa), scalar(sb), out_dtype=_OUT[out], bias=t_bias, bias_order=order)
    return int(y.view(torch.int16).to(torch.int32)[0]) & 0xFFFF


_fp32 = st.integers(0, 0xFFFFFFFF).filter(lambda b: (b >> 23) & 0xFF != 0xFF)  # finite fp32 bit patterns
_scale = st.sampled_from([1.0, 0.5, 2.0**-6, 0.3712, 3.0, 1 / 448, 2.0**-100, 2.0**60]).map(_f32_bits)
_half = st.integers(0, 0xFFFF)


_OUTS = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
         "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
# scales of every size: products of two of them are rarely exact in fp32, so alpha's rounding shows
_any_scale = st.one_of(_fp32, st.integers(0x3F000000, 0x40000000))


@settings(max_examples=300, deadline=None)
@given(acc=_fp32, sa=_any_scale, sb=_any_scale, out=st.sampled_from(sorted(_OUTS)))
@example(acc=0x80000000, sa=0x71800000, sb=0x71800000, out="e4m3")  # -0 times an alpha that overflows: NaN
def test_the_epilogue_without_a_bias_is_exact(acc: int, sa: int, sb: int, out: str) -> None:
    """alpha = RN32(scale_a * scale_b), then fma(acc, alpha, +0) rounded to fp32 and to the output: bits of the
    slow model, for arbitrary finite fp32 accumulators and scales (the tools/evidence/mutants.py epilogue mutants run
    this first)."""
    scalar = lambda bits: torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)  # noqa: E731
    y = epilogue(scalar([acc]), scalar(sa), scalar(sb), out_dtype=_OUTS[out])
    width = y.element_size()
    got = int(y.view(_BITS[width]).to(torch.int64)[0]) & ((1 << 8 * width) - 1)
    assert got == slowmodel.epilogue(acc, sa, sb, out), (hex(acc), hex(sa), hex(sb), out)


@settings(max_examples=600, deadline=None)
@given(acc=_fp32, sa=_scale, sb=_scale, bias=_half, out=st.sampled_from(sorted(_OUT)),
       order=st.sampled_from(list(BiasOrder)))
def test_each_bias_order_is_exact(acc: int, sa: int, sb: int, bias: int, out: str, order: BiasOrder) -> None:
    want = slowmodel.epilogue_bias(acc, sa, sb, out, bias, order.value)
    got = _ours(acc, sa, sb, bias, out, order)
    if want == slowmodel.CANONICAL_NAN[out]:
        assert got == want
    else:
        assert got == want, (hex(acc), hex(sa), hex(sb), hex(bias), out, order)


@pytest.mark.parametrize("out", sorted(_OUT))
def test_the_orders_differ_where_the_second_rounding_matters(out: str) -> None:
    """acc * alpha = 1 + 2**-24 - 2**-47 (exact) rounds to 1 in fp32; adding a bias of -1 then gives +0 after that
    rounding and about 2**-24 in the fused order: the probes' principle (the recorder's bias calls use it)."""
    acc, sa, sb = _f32_bits(1 + 2.0**-23), _f32_bits(1 - 2.0**-24), _f32_bits(1.0)
    minus_one = 0xBC00 if out == "float16" else 0xBF80
    after = slowmodel.epilogue_bias(acc, sa, sb, out, minus_one, "after-scale")
    fused = slowmodel.epilogue_bias(acc, sa, sb, out, minus_one, "fused")
    assert after != fused
    assert _ours(acc, sa, sb, minus_one, out, BiasOrder.AFTER_SCALE) == after
    assert _ours(acc, sa, sb, minus_one, out, BiasOrder.FUSED) == fused


def test_scaled_mm_uses_the_default_order_and_warns() -> None:
    a = torch.full((16, 32), 1.0).to(torch.float8_e4m3fn)
    b = torch.full((16, 32), 0.5).to(torch.float8_e4m3fn)
    bias = torch.linspace(-8, 8, 16).to(torch.bfloat16)
    one = torch.tensor(1.0)
    with pytest.warns(mmaemu.UnverifiedEpilogueWarning, match="experimental"):
        y = mmaemu.scaled_mm(a, b.t(), one, one, bias, out_dtype=torch.bfloat16, use_fast_accum=True, splitk=1)
    acc = mmaemu.accumulate(a, b, use_fast_accum=True, splitk=1)
    want = epilogue(acc, one, one, out_dtype=torch.bfloat16, bias=bias, bias_order=BiasOrder.AFTER_SCALE)
    mmaemu.testing.assert_bitwise_equal(y, want)


@pytest.mark.parametrize("kwargs,match", [
    ({"out_dtype": torch.float32}, "Bias is not supported when out_dtype is set to Float32"),
    ({"out_dtype": torch.float8_e4m3fn}, "bias with an FP8 output"),
    ({"out_dtype": torch.float16}, "Bias must be Float16"),
])
def test_refused_biases(kwargs: dict[str, torch.dtype], match: str) -> None:
    a = torch.ones(16, 32).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    with pytest.raises(mmaemu.MmaemuError, match=match):
        mmaemu.scaled_mm(a, a.t(), one, one, torch.zeros(16, dtype=torch.bfloat16), splitk=1, **kwargs)


def test_a_bias_with_an_empty_k_gives_torchs_early_zeros() -> None:
    empty = torch.ones(16, 0).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    y = mmaemu.scaled_mm(empty, torch.ones(0, 16).to(torch.float8_e4m3fn), one, one,
                         torch.ones(16, dtype=torch.bfloat16), out_dtype=torch.bfloat16)
    mmaemu.testing.assert_bitwise_equal(y, torch.zeros(16, 16, dtype=torch.bfloat16))


def _rn32_exact(x: float, y: float) -> float:
    """x + y rounded once to fp32, by exact rational arithmetic (the slow model's rounding)."""
    from fractions import Fraction

    total = Fraction(x) + Fraction(y)
    val = ("fin", 1 if total < 0 else 0, abs(total))
    bits = slowmodel.f32_bits_from_value(val)
    return struct.unpack("<f", struct.pack("<I", bits))[0]


_TIE = 8384513 * 8392705  # 2**46 + 1: a product of two fp32 significands one unit above a power of two


@settings(max_examples=400, deadline=None)
@given(e=st.integers(-60, 40), shift=st.integers(-30, 30), sign=st.sampled_from([1.0, -1.0]),
       odd=st.booleans(), noise=st.integers(-3, 3))
def test_the_fused_sum_rounds_once(e: int, shift: int, sign: float, odd: bool, noise: int) -> None:
    """The fused order's float64 sum of a product and a bias rounds to fp32 once: products with a tail far below
    float64's precision next to an fp32 tie (2**46 + 1 times a power of two), where rounding twice is wrong."""
    from mmaemu._epilogue import _round_sum_to_fp32

    product = sign * float(_TIE + noise) * 2.0 ** (e - 46)  # 2**e (1 + tiny), exact in float64
    bias = (2.0 ** (e + 24 + shift)) * (1 + (2.0**-7 if odd else 0.0))
    got = _round_sum_to_fp32(torch.tensor([product], dtype=torch.float64), torch.tensor([bias], dtype=torch.float64))
    assert float(got[0]) == _rn32_exact(product, bias), (product, bias)


_SPECIAL_ACC = [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x3F800000, 0xBF800000, 0x7F7FFFFF,
                0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7FA00001, 0x00800000, 0x80800000]
_SPECIAL_SCALE = [0x00000000, 0x80000000, 0x00000001, 0x3F800000, 0xBF800000, 0x3EBE0DED, 0xC0400000, 0x1F800000,
                  0x5F800000, 0x7F800000, 0xFF800000, 0x7FC00000]


@pytest.mark.parametrize("out", sorted(_OUTS))
@pytest.mark.parametrize("scratch", [False, True], ids=["epilogue", "scratch_epilogue"])
def test_special_accumulators_and_scales(out: str, scratch: bool) -> None:
    """Zeros of both signs, subnormals, the largest values, infinities and NaNs, against alphas of zero (both
    signs), subnormal, negative, overflowing (2**64 * 2**64), underflowing, infinite and NaN: the slow model's
    bits, from the public epilogue (which leaves acc alone) and from the one scaled_mm uses on its own
    accumulators."""
    scalar = lambda bits: torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)  # noqa: E731
    acc = scalar(_SPECIAL_ACC)
    before = acc.clone()
    width = torch.empty((), dtype=_OUTS[out]).element_size()
    for sa in _SPECIAL_SCALE:
        for sb in (0x3F800000, 0x5F800000, 0x1F800000):
            given_acc = acc.clone() if scratch else acc
            fn = scratch_epilogue if scratch else epilogue
            y = fn(given_acc, scalar(sa), scalar(sb), out_dtype=_OUTS[out])
            got = [int(v) & ((1 << 8 * width) - 1) for v in y.view(_BITS[width]).to(torch.int64)]
            want = [slowmodel.epilogue(a, sa, sb, out) for a in _SPECIAL_ACC]
            assert got == want, (hex(sa), hex(sb), out, [(hex(a), hex(g), hex(w)) for a, g, w in
                                                         zip(_SPECIAL_ACC, got, want) if g != w])
    assert torch.equal(acc.view(torch.int32), before.view(torch.int32))  # epilogue did not write into acc


def test_two_steps_equal_scaled_mm_where_the_reference_gpu_splits() -> None:
    """``epilogue(accumulate(...))`` equals ``scaled_mm`` at a shape the H100 table splits (16 x 128 x 16,384:
    S = 6) with the split ``explain`` reports and with ``accumulate``'s default (the same split for every
    output dtype there); the unsplit sum, ``accumulate``'s old default, differs."""
    torch.manual_seed(3)
    a = (torch.randn(16, 16384) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
    b = (torch.randn(128, 16384) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
    sa, sb = torch.tensor(1 / 16), torch.tensor(1 / 8)
    kwargs = {"out_dtype": torch.bfloat16, "use_fast_accum": True}
    plan = mmaemu.explain(a, b.t(), sa, sb, **kwargs)
    assert plan.split is not None and plan.split.parts == 6
    y = mmaemu.scaled_mm(a, b.t(), sa, sb, **kwargs)
    two_steps = epilogue(mmaemu.accumulate(a, b, use_fast_accum=True, splitk=plan.split), sa, sb,
                         out_dtype=torch.bfloat16)
    mmaemu.testing.assert_bitwise_equal(two_steps, y)
    unsplit = epilogue(mmaemu.accumulate(a, b, use_fast_accum=True, splitk=1), sa, sb, out_dtype=torch.bfloat16)
    assert bool((unsplit.view(torch.int16) != y.view(torch.int16)).any())
    by_default = epilogue(mmaemu.accumulate(a, b, use_fast_accum=True), sa, sb, out_dtype=torch.bfloat16)
    mmaemu.testing.assert_bitwise_equal(by_default, y)


def test_accumulate_default_ignores_an_output_the_reference_gpu_cannot_run() -> None:
    """128 x 128 x 5,760, E4M3 x E4M3 on hopper: scaled_mm splits in two for every output dtype it runs (the
    table's rows); E4M3 x E4M3 into E5M2 has no cuBLASLt algorithm (ReferenceRejectsError), so it cannot make
    the split depend on the output dtype: accumulate's default is S = 2, without a warning."""
    torch.manual_seed(4)
    a = (torch.randn(128, 5760) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
    b = (torch.randn(128, 5760) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    for out in (torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn):
        split = mmaemu.explain(a, b.t(), one, one, out_dtype=out, use_fast_accum=True).split
        assert split is not None and split.parts == 2, (out, split)
    rejected = mmaemu.explain(a, b.t(), one, one, out_dtype=torch.float8_e5m2, use_fast_accum=True).validation
    assert rejected[0] == "ReferenceRejectsError", rejected
    with warnings.catch_warnings():
        warnings.simplefilter("error", mmaemu.UnverifiedSplitWarning)
        by_default = mmaemu.accumulate(a, b, use_fast_accum=True)
    mmaemu.testing.assert_bitwise_equal(by_default, mmaemu.accumulate(a, b, use_fast_accum=True, splitk=split))


def test_accumulate_warns_where_its_default_split_is_unknown() -> None:
    """16 x 256 x 128 on hopper-te: no evidence decides the split (scaled_mm raises SplitKUnknownError), so
    accumulate computes no split and says so, naming what to pass."""
    a = torch.ones(16, 128).to(torch.float8_e4m3fn)
    b = torch.ones(256, 128).to(torch.float8_e4m3fn)
    with pytest.warns(mmaemu.UnverifiedSplitWarning, match="no evidence decides it.*splitk=mmaemu.explain"):
        acc = mmaemu.accumulate(a, b, use_fast_accum=True, profile="hopper-te")
    assert float(acc[0, 0]) == 128.0
    # on the default profile (1 MiB) the small-K rule decides S = 1 for every output dtype: no split, its warning
    with pytest.warns(mmaemu.InferredSplitWarning, match="h100-small-k"):
        acc = mmaemu.accumulate(a, b, use_fast_accum=True)
    assert float(acc[0, 0]) == 128.0
