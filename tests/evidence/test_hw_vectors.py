"""The recorded tensor-core vectors (../shared/hw-vectors) through mmaemu.model.dot: 0 mismatches.

Each file holds 5,000 K = 32 dot products recorded on real GPUs (Khattak and Mikaitis, MATLAB
tensor-core toolbox). All 5,000 of each file are replayed, compared as bits.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import mmaemu
from conftest import HW_VECTORS, require
from mmaemu.testing import bitwise_diff

FILES = [
    # file, preset, whether the recorded c was applied by the instruction
    ("h100_e4m3.npz", "hopper", False),
    ("ada_e4m3.npz", "ada", True),
    ("b200_e4m3.npz", "b200_mma_sync", True),
]


def replay(name: str, preset: str | mmaemu.Preset) -> tuple[int, int]:
    """(differing, total) outputs of one vector file replayed under ``preset``."""
    got, expected = replay_tensors(name, preset)
    report = bitwise_diff(got, expected)
    return report.differing, report.total


def replay_tensors(name: str, preset: str | mmaemu.Preset) -> tuple[torch.Tensor, torch.Tensor]:
    """(model.dot's outputs, the recorded outputs) of one vector file."""
    data = np.load(require(HW_VECTORS / name))
    assert bool(data["c_applied"]) == (name != "h100_e4m3.npz")
    a = torch.from_numpy(data["a_codes"].copy()).view(torch.float8_e4m3fn)
    b = torch.from_numpy(data["b_codes"].copy()).view(torch.float8_e4m3fn)
    c = torch.from_numpy(data["c_bits"].view(np.int32).copy()).view(torch.float32)
    if not bool(data["c_applied"]):
        c = torch.zeros_like(c)  # the instruction ran with a zero accumulator
    expected = torch.from_numpy(data["d_fp32_bits"].view(np.int32).copy()).view(torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.ExperimentalPresetWarning)
        got = mmaemu.model.dot(a, b, c, preset=preset)
    return got, expected


@pytest.mark.parametrize("name,preset,c_applied", FILES)
def test_hardware_vectors_replay_bit_for_bit(name: str, preset: str, c_applied: bool) -> None:
    differing, total = replay(name, preset)
    print(f"{name} through preset {preset!r}: {total - differing} of {total} equal")
    assert total == 5000
    assert differing == 0


def test_presets_are_not_interchangeable() -> None:
    """Each file discriminates: the other preset, or a neighbouring fraction-bit count, fails."""
    assert replay("h100_e4m3.npz", "ada")[0] > 0
    assert replay("ada_e4m3.npz", "hopper")[0] > 0
    assert replay("h100_e4m3.npz", mmaemu.Preset("f12", block_size=32, frac_bits=12))[0] > 0
    assert replay("h100_e4m3.npz", mmaemu.Preset("f14", block_size=32, frac_bits=14))[0] > 0
    # the common c-aligned truncating model does not fit the B200 vectors
    assert replay("b200_e4m3.npz", mmaemu.Preset("b200-aligned", block_size=32, frac_bits=25))[0] > 100


# The fp16-accumulator outputs of the same files: mma.sync m16n8k32 f16.e4m3.e4m3.f16 on each GPU (the
# toolbox's recorder passes the recorded c rounded to fp16 to the instruction, also on the H100).
FP16_FILES = [
    ("ada_e4m3.npz", "ada"),
    ("h100_e4m3.npz", "hopper_mma_sync"),
    ("b200_e4m3.npz", "b200_mma_sync"),
]


def fp16_vectors(name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(a, b, c as fp16, the recorded fp16 results as fp16) of one file."""
    data = np.load(require(HW_VECTORS / name))
    a = torch.from_numpy(data["a_codes"].copy()).view(torch.float8_e4m3fn)
    b = torch.from_numpy(data["b_codes"].copy()).view(torch.float8_e4m3fn)
    c = torch.from_numpy(data["c_bits"].view(np.int32).copy()).view(torch.float32)
    stored = torch.from_numpy(data["d_fp16acc_bits"].view(np.int32).copy()).view(torch.float32)
    d16 = stored.to(torch.float16)
    # each stored fp32 value is an fp16 value: the conversion is exact (signed zeros and NaN payloads too)
    assert torch.equal(d16.float().view(torch.int32), stored.view(torch.int32))
    return a, b, c.to(torch.float16), d16


def replay_fp16(name: str, preset: str | mmaemu.Preset) -> tuple[int, int]:
    a, b, c16, expected = fp16_vectors(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.ExperimentalPresetWarning)
        got = mmaemu.model.dot(a, b, c16, preset=preset)
    assert got.dtype == torch.float16
    report = bitwise_diff(got, expected)  # bit patterns: +0 and -0 differ, NaN payloads compared
    return report.differing, report.total


@pytest.mark.parametrize("name,preset", FP16_FILES)
def test_fp16_accumulator_vectors_replay_bit_for_bit(name: str, preset: str) -> None:
    differing, total = replay_fp16(name, preset)
    print(f"{name} fp16 accumulator through preset {preset!r}: {total - differing} of {total} equal")
    assert total == 5000
    assert differing == 0


def test_fp16_accumulator_rules_are_not_interchangeable() -> None:
    """The Ada's native blocks and the sm_90 / sm_100 HMMA rewrite each fail the other's files by thousands."""
    assert replay_fp16("ada_e4m3.npz", "hopper_mma_sync")[0] > 1000
    assert replay_fp16("h100_e4m3.npz", "ada")[0] > 1000
    assert replay_fp16("b200_e4m3.npz", "ada")[0] > 1000
    # the same rewrite with few fraction bits in its fp16 steps fails (F = 13: the FP8 unit's width)
    narrow = mmaemu.Preset("rewrite-f13", block_size=32, frac_bits=13,
                           fp16_accumulation=mmaemu.presets.HalfAccumulation.HMMA_REWRITE)
    assert replay_fp16("h100_e4m3.npz", narrow)[0] > 100
