"""Presets, their registry, and the dot API's edge semantics."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

from mmaemu.errors import UnsupportedFeatureError

import mmaemu
from mmaemu.presets import (
    ADA,
    B200_MMA_SYNC,
    HOPPER,
    HOPPER_MMA_SYNC,
    SM120,
    Accumulator,
    CMode,
    HalfAccumulation,
    Maturity,
    Preset,
    Rounding,
    get_preset,
    presets,
)


def test_shipped_presets() -> None:
    assert (HOPPER.block_size, HOPPER.frac_bits, HOPPER.maturity) == (32, 13, Maturity.VALIDATED)
    assert (ADA.block_size, ADA.frac_bits, ADA.maturity) == (16, 13, Maturity.VALIDATED)
    assert B200_MMA_SYNC.maturity is Maturity.EXPERIMENTAL
    assert (B200_MMA_SYNC.c_mode, B200_MMA_SYNC.rounding) == (CMode.ROUNDED_ADD, Rounding.NEAREST_EVEN)
    assert set(presets()) == {"hopper", "ada", "b200_mma_sync", "hopper_mma_sync", "sm120"}
    assert (HOPPER_MMA_SYNC.block_size, HOPPER_MMA_SYNC.frac_bits) == (32, 25)
    assert HOPPER_MMA_SYNC.unmodelled == frozenset({Accumulator.FP32}) and "open" in HOPPER_MMA_SYNC.source
    assert HOPPER.unmodelled == frozenset({Accumulator.FP16})
    assert [p.fp16_accumulation for p in (ADA, HOPPER_MMA_SYNC, B200_MMA_SYNC)] == [
        HalfAccumulation.BLOCKS, HalfAccumulation.HMMA_REWRITE, HalfAccumulation.HMMA_REWRITE]
    assert (SM120.block_size, SM120.frac_bits, SM120.c_mode, SM120.rounding, SM120.maturity) == (
        32, 25, CMode.ALIGNED, Rounding.TRUNCATE, Maturity.EXPERIMENTAL)
    with pytest.raises(dataclasses.FrozenInstanceError, match="frac_bits"):
        HOPPER.frac_bits = 12  # type: ignore[misc]  # frozen


def test_experimental_presets_and_alias_warn() -> None:
    with pytest.warns(mmaemu.ExperimentalPresetWarning, match="alias"):
        assert get_preset("blackwell") is B200_MMA_SYNC
    with pytest.warns(mmaemu.ExperimentalPresetWarning):
        get_preset("b200_mma_sync")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        get_preset("hopper")
        get_preset("ada")


@pytest.mark.parametrize("name", ["sm_120", "rtx_blackwell"])
def test_sm120_names_other_than_sm120_are_refused_and_point_to_it(name: str) -> None:
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="sm_120 .*not modelled under this name.*'sm120'"):
        get_preset(name)


def test_b200_mma_sync_warns_that_it_is_not_an_sm120_model() -> None:
    for name in ("b200_mma_sync", "b200", "blackwell"):
        with pytest.warns(mmaemu.ExperimentalPresetWarning, match="not an sm_120 .*model for FP8 GEMMs"):
            get_preset(name)


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="hopper"):
        get_preset("pascal")


@pytest.mark.parametrize("name", ["volta", "ampere"])
def test_fp8_on_an_architecture_without_fp8_tensor_cores_is_refused(name: str) -> None:
    with pytest.raises(UnsupportedFeatureError, match="no FP8 tensor cores"):
        get_preset(name)
    a = torch.ones(4).to(torch.float8_e4m3fn)
    with pytest.raises(UnsupportedFeatureError, match="no FP8 tensor cores"):
        mmaemu.model.dot(a, a, preset=name)


@pytest.mark.parametrize("kwargs", [dict(block_size=0, frac_bits=13), dict(block_size=32, frac_bits=0), dict(block_size=32, frac_bits=41)])
def test_preset_validates(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        Preset("bad", **kwargs)


def f32(bits: int) -> torch.Tensor:
    return torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)


def test_dot_edge_semantics() -> None:
    e4 = torch.float8_e4m3fn
    zeros = torch.zeros(32).to(e4)
    # -0 accumulator and zero products: +0
    assert f32(0x80000000).view(torch.int32) == -(2**31)
    r = mmaemu.model.dot(zeros, zeros, f32(0x80000000), preset="hopper")
    assert int(r.view(torch.int32)) == 0
    # K = 0 returns c unchanged
    empty = torch.zeros(0).to(e4)
    assert int(mmaemu.model.dot(empty, empty, f32(0x3F800001), preset="ada").view(torch.int32)) == 0x3F800001
    # an all-zero block truncates c to 13 fraction bits
    assert int(mmaemu.model.dot(zeros, zeros, f32(0x3F800001), preset="hopper").view(torch.int32)) == 0x3F800000
    # a NaN code anywhere gives the canonical NaN, even against a zero
    a = zeros.clone().view(torch.uint8)
    a[3] = 0x7F
    r = mmaemu.model.dot(a.view(e4), zeros, preset="hopper")
    assert int(r.view(torch.int32)) == 0x7FFFFFFF
    # batched, broadcasting b over a batch of a
    ab = torch.ones(4, 48).to(e4)
    assert mmaemu.model.dot(ab, torch.ones(48).to(e4), preset="ada").tolist() == [48.0] * 4


def test_custom_preset_for_research() -> None:
    a = torch.tensor([1.0] + [2.0**-8] * 31).to(torch.float8_e4m3fn)
    b = torch.ones(32).to(torch.float8_e4m3fn)
    exact = 1 + 31 * 2.0**-8
    assert float(mmaemu.model.dot(a, b, preset=Preset("wide", block_size=32, frac_bits=20))) == exact
    assert float(mmaemu.model.dot(a, b, preset="hopper")) == exact  # 2**-8 is on the 2**-13 grid
    assert float(mmaemu.model.dot(a, b, preset=Preset("narrow", block_size=32, frac_bits=6))) == 1.0


def test_b200_exact_zero_is_plus_zero() -> None:
    """The block rule 'an exact zero is +0' holds for the rounded-add preset too (c = -0, no products).

    Unverified on hardware for b200_mma_sync (the vectors have no such case): this pins the rule.
    """
    zeros = torch.zeros(32).to(torch.float8_e4m3fn)
    with pytest.warns(mmaemu.ExperimentalPresetWarning):
        r = mmaemu.model.dot(zeros, zeros, f32(0x80000000), preset="b200_mma_sync")
    assert int(r.view(torch.int32)) == 0


def test_rounded_add_with_an_fp16_accumulator_adds_c() -> None:
    """Old code: the fp16-accumulator branch returned before c was added (1.0, not 3.0)."""
    rn = Preset("rn", 4, 25, c_mode=CMode.ROUNDED_ADD, rounding=Rounding.NEAREST_EVEN)
    a = torch.tensor([1.0, 0, 0, 0], dtype=torch.float16)
    assert mmaemu.model.dot(a, a, torch.tensor(2.0, dtype=torch.float16), preset=rn).item() == 3.0
    assert mmaemu.model.dot(a, a, torch.tensor(2.0), preset=rn).item() == 3.0  # the fp32 accumulator agreed


def test_rounded_add_with_an_fp16_accumulator_rounds_the_sum_then_adds_c() -> None:
    """Expected values from exact integer arithmetic: the products' sum (integers, exact at F = 25) rounded to
    fp16 by torch's float64 -> fp16 conversion, then c added and rounded again. Each case is chosen where
    that order differs from one rounding of sum + c and from dropping c."""
    rn = Preset("rn", 4, 25, c_mode=CMode.ROUNDED_ADD, rounding=Rounding.NEAREST_EVEN)

    def fp16(x: float) -> float:
        return float(torch.tensor(x, dtype=torch.float64).to(torch.float16))

    gen = torch.Generator().manual_seed(24)
    checked = 0
    for _ in range(4000):
        a = torch.randint(0, 64, (4,), generator=gen).to(torch.float64)
        b = torch.randint(0, 64, (4,), generator=gen).to(torch.float64)
        c = float(torch.randint(-40, 40, (1,), generator=gen)) * 2.0 ** int(torch.randint(-2, 3, (1,), generator=gen))
        if fp16(c) != c:
            continue
        total = float((a * b).sum())
        expected = fp16(fp16(total) + c)
        if expected in (fp16(total + c), fp16(total)):
            continue
        got = mmaemu.model.dot(a.to(torch.float16), b.to(torch.float16), torch.tensor(c, dtype=torch.float16), preset=rn)
        assert got.item() == expected, (a.tolist(), b.tolist(), c)
        checked += 1
    assert checked > 20


def test_fp16_accumulator_with_fp8_operands_follows_the_preset() -> None:
    """Old code refused every float16 c with FP8 operands (ValueError); the recordings have them on three GPUs."""
    a = torch.tensor([1.0, 2.0**-9, -0.75, 3.0] * 8).to(torch.float8_e4m3fn)
    c16 = torch.tensor(0.5, dtype=torch.float16)
    for name in ("ada", "hopper_mma_sync", "b200_mma_sync"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mmaemu.ExperimentalPresetWarning)
            out = mmaemu.model.dot(a, a, c16, preset=name)
        assert out.dtype == torch.float16 and out.shape == ()
    # no recording decides these: refused, not approximated
    with pytest.raises(UnsupportedFeatureError, match="hopper_mma_sync"):
        mmaemu.model.dot(a, a, c16, preset="hopper")  # the H100's wgmma: the file's fp16 outputs are mma.sync
    with pytest.raises(UnsupportedFeatureError, match="fp32 accumulator"):
        mmaemu.model.dot(a, a, torch.tensor(0.5), preset="hopper_mma_sync")
    with pytest.raises(UnsupportedFeatureError, match="fp16 accumulator"), pytest.warns(mmaemu.ExperimentalPresetWarning):
        mmaemu.model.dot(a, a, c16, preset="sm120")
    with pytest.raises(UnsupportedFeatureError, match="fp32 accumulator"):
        mmaemu.accumulate(a.reshape(1, -1), a.reshape(1, -1), use_fast_accum=True, splitk=1, preset="hopper_mma_sync")
    # bf16 and tf32 instructions have no fp16 accumulator
    h = torch.ones(8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="FP8 and fp16 operands only"):
        mmaemu.model.dot(h, h, torch.tensor(0.0, dtype=torch.float16), preset="ampere")


def test_the_hmma_rewrite_needs_a_32_product_instruction() -> None:
    with pytest.raises(ValueError, match="block_size must be 32"):
        Preset("r16", block_size=16, frac_bits=25, fp16_accumulation=HalfAccumulation.HMMA_REWRITE)
    with pytest.raises(TypeError, match="frozenset of Accumulator"):
        Preset("bad", block_size=32, frac_bits=25, unmodelled={"fp32"})  # type: ignore[arg-type]


def h16(bits: int) -> torch.Tensor:
    return torch.tensor(bits, dtype=torch.int32).to(torch.int16).view(torch.float16)


def test_hmma_rewrite_edge_semantics() -> None:
    """Expected values worked by hand from the rule of docs/zoo.md (two fp16 steps from +0, then c)."""
    e4 = torch.float8_e4m3fn
    zeros = torch.zeros(32).to(e4)
    rw = "hopper_mma_sync"
    # c = -0 and zero products: +0 (d = +0, and +0 + -0 = +0)
    assert int(mmaemu.model.dot(zeros, zeros, h16(0x8000), preset=rw).view(torch.int16)) == 0
    # K = 0 returns c unchanged, -0 included
    empty = torch.zeros(0).to(e4)
    assert int(mmaemu.model.dot(empty, empty, h16(0x8000), preset=rw).view(torch.int16)) == -0x8000
    # products 2048 (k = 0), 1 (k = 1) and 1 (k = 2): the step over k mod 4 in {0, 1} rounds before k = 2 is added
    a = torch.zeros(32)
    a[0], a[1], a[2] = 256.0, 1.0, 1.0
    b = torch.zeros(32)
    b[0], b[1], b[2] = 8.0, 1.0, 1.0
    a8, b8 = a.to(e4), b.to(e4)
    # step 1: 2048 + 1 = 2049, on fp16's grid of 2 above 2048 a tie, to even: 2048; step 2: 2048 + 1 -> 2048
    assert mmaemu.model.dot(a8, b8, h16(0), preset=rw).item() == 2048.0
    # one rounding of the exact sum would give 2050
    assert float(torch.tensor(2050.0, dtype=torch.float64).to(torch.float16)) == 2050.0
    # ada's blocks hold all three products in its first 16-product block: 2050 exactly, rounded once
    assert mmaemu.model.dot(a8, b8, h16(0), preset="ada").item() == 2050.0
    # c is added after both steps: 2048 from the products, c = 1: a tie again -> 2048
    assert mmaemu.model.dot(a8, b8, h16(0x3C00), preset=rw).item() == 2048.0
    # overflow of a step gives +Inf (448 * 448 * 2 > 65504)
    big = torch.full((32,), 448.0).to(e4)
    assert mmaemu.model.dot(big, big, h16(0), preset=rw).item() == float("inf")
    # a NaN code gives the canonical fp16 NaN
    nan = zeros.clone().view(torch.uint8)
    nan[5] = 0x7F
    assert int(mmaemu.model.dot(nan.view(e4), zeros, h16(0), preset=rw).view(torch.int16)) == 0x7FFF
    # E5M2 infinities: +Inf * 1 and -Inf * 1 in one instruction give NaN
    e5 = torch.float8_e5m2
    inf = torch.zeros(32).to(e5).view(torch.uint8)
    inf[0], inf[3] = 0x7C, 0xFC
    ones = torch.ones(32).to(e5)
    assert int(mmaemu.model.dot(inf.view(e5), ones, h16(0), preset=rw).view(torch.int16)) == 0x7FFF


def test_no_backend_approximates_an_unmodelled_fp32_accumulator() -> None:
    """hopper_mma_sync's fp32 accumulator is open: the capability table says no backend supports it, and the
    reference backend raises before computing, even when handed the preset directly."""
    from mmaemu._accumulation import plan_accumulation
    from mmaemu.backends import _capabilities as capabilities, _reference as reference

    a = torch.ones(2, 32).to(torch.float8_e4m3fn)
    for backend in capabilities.CONCRETE:
        support = capabilities.supports(backend, HOPPER_MMA_SYNC, [a.dtype], "cpu")
        assert not support.usable and "fp32 accumulator" in support.reason
    assert capabilities.supports("reference", HOPPER, [a.dtype], "cpu").usable
    with pytest.raises(UnsupportedFeatureError, match="fp32 accumulator"):
        reference.accumulate(a, a, HOPPER_MMA_SYNC, plan_accumulation(32, fast=True, split=mmaemu.SplitK(1, mmaemu.Scheme.NONE)))
