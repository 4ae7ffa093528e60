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
