"""The preset registry: a shipped preset object behaves exactly as its name."""

from __future__ import annotations

import warnings

import pytest
import torch

import mmaemu
from mmaemu.errors import ExperimentalPresetWarning
from mmaemu.formats import WideFormat
from mmaemu.presets import ZOO, Preset, get_preset, instruction_preset, presets

_OPERANDS = {
    "e4m3": torch.tensor([1.0, 0.5, 2.0**-9, -3.0] * 8).to(torch.float8_e4m3fn),
    "fp16": torch.tensor([1.0, 2.0**-11, 2.0**-12, -0.75] * 8, dtype=torch.float16),
    "bf16": torch.tensor([1.0, 2.0**-9, 2.0**-20, -0.75] * 8, dtype=torch.bfloat16),
    "tf32": torch.tensor([1.0, 2.0**-11, 2.0**-24, -0.75] * 8, dtype=torch.float32),
}
_SHIPPED: list[Preset] = [*presets().values(), *ZOO.values()]


def _outcome(x: torch.Tensor, preset: str | Preset) -> tuple[str, str]:
    """(bits, "") of dot(x, x, c) or ("", exception class and message)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalPresetWarning)
        try:
            out = mmaemu.model.dot(x, x, torch.tensor(1.0), preset=preset)
        except Exception as exc:  # noqa: BLE001 - the outcome compared
            return "", f"{type(exc).__name__}: {exc}"
    return hex(int(out.view(torch.int32))), ""


@pytest.mark.parametrize("preset", _SHIPPED, ids=[p.name for p in _SHIPPED])
@pytest.mark.parametrize("fmt", sorted(_OPERANDS))
def test_a_shipped_preset_object_behaves_as_its_name(preset: Preset, fmt: str) -> None:
    """Old code: preset=HOPPER ran FP8 arithmetic (B = 32, F = 13) on fp16 operands where preset='hopper' ran the
    H100's fp16 instruction, and preset=B200_MMA_SYNC ran where its name raised; zoo objects ran on FP8 operands."""
    x = _OPERANDS[fmt]
    assert _outcome(x, preset) == _outcome(x, preset.name)


def test_zoo_presets_answer_to_their_names() -> None:
    for (arch, fmt), p in ZOO.items():
        assert instruction_preset(p.name, fmt) is p
        other = next(f for f in WideFormat if f is not fmt)
        with pytest.raises(mmaemu.UnsupportedFeatureError, match=f"for {fmt.short_name} operands"):
            instruction_preset(p.name, other)
        with pytest.raises(mmaemu.UnsupportedFeatureError, match="not FP8"):
            get_preset(p)


def test_a_custom_preset_applies_to_any_format() -> None:
    custom = Preset("mine", block_size=32, frac_bits=13)  # the hopper FP8 arithmetic, not a shipped object
    assert instruction_preset(custom, torch.float16) is custom
    x = _OPERANDS["fp16"]
    assert _outcome(x, custom) != _outcome(x, "hopper")  # FP8 arithmetic, as asked


def test_accumulate_takes_objects_as_names() -> None:
    h = _OPERANDS["fp16"].reshape(1, -1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalPresetWarning)
        by_object = mmaemu.accumulate(h, h, use_fast_accum=True, preset=presets()["hopper"])
        by_name = mmaemu.accumulate(h, h, use_fast_accum=True, preset="hopper")
    assert torch.equal(by_object.view(torch.int32), by_name.view(torch.int32))
    with pytest.raises(mmaemu.UnsupportedFeatureError):
        mmaemu.accumulate(h, h, use_fast_accum=True, preset=presets()["b200_mma_sync"])
