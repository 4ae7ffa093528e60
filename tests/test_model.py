"""Presets, their registry, and the dot API's edge semantics."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

from mmaemu.errors import UnsupportedFeatureError

import mmaemu
from mmaemu.presets import ADA, B200_MMA_SYNC, HOPPER, CMode, Maturity, Preset, Rounding, get_preset, presets


def test_shipped_presets() -> None:
    assert (HOPPER.block_size, HOPPER.frac_bits, HOPPER.maturity) == (32, 13, Maturity.VALIDATED)
    assert (ADA.block_size, ADA.frac_bits, ADA.maturity) == (16, 13, Maturity.VALIDATED)
    assert B200_MMA_SYNC.maturity is Maturity.EXPERIMENTAL
    assert (B200_MMA_SYNC.c_mode, B200_MMA_SYNC.rounding) == (CMode.ROUNDED_ADD, Rounding.NEAREST_EVEN)
    assert set(presets()) == {"hopper", "ada", "b200_mma_sync"}
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
def test_sm120_is_not_modelled(name: str) -> None:
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="sm_120 .*not modelled"):
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
