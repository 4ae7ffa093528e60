"""The preset registry: a shipped preset object behaves exactly as its name."""

from __future__ import annotations

import warnings

import pytest
import torch

import mmaemu
from mmaemu.errors import ExperimentalPresetWarning
from mmaemu.formats import WideFormat
from mmaemu.presets import (
    SM120,
    SM120_CITATION,
    SM120_ZOO,
    ZOO,
    Architecture,
    Maturity,
    Preset,
    get_preset,
    instruction_preset,
    presets,
)

_OPERANDS = {
    "e4m3": torch.tensor([1.0, 0.5, 2.0**-9, -3.0] * 8).to(torch.float8_e4m3fn),
    "fp16": torch.tensor([1.0, 2.0**-11, 2.0**-12, -0.75] * 8, dtype=torch.float16),
    "bf16": torch.tensor([1.0, 2.0**-9, 2.0**-20, -0.75] * 8, dtype=torch.bfloat16),
    "tf32": torch.tensor([1.0, 2.0**-11, 2.0**-24, -0.75] * 8, dtype=torch.float32),
}
_SHIPPED: list[Preset] = [*presets().values(), *ZOO.values(), *SM120_ZOO.values()]


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


def test_sm120_presets_are_experimental_aliases_of_the_b200_models() -> None:
    """fp16, bf16, tf32: the b200 zoo arithmetic under another name; FP8: the paper's B200 model (B = 32, F = 25,
    c aligned, truncated), not b200_mma_sync. Each warns, and its source cites the paper."""
    for fmt, alias in SM120_ZOO.items():
        b200 = ZOO[(Architecture.B200, fmt)]
        assert (alias.block_size, alias.frac_bits, alias.c_mode, alias.rounding) == (
            b200.block_size, b200.frac_bits, b200.c_mode, b200.rounding)
        assert alias.maturity is Maturity.EXPERIMENTAL and b200.maturity is Maturity.VALIDATED
        assert "arXiv:2512.07004" in alias.source and "no sm_120 recording" in alias.source
        for name in ("sm120", alias.name):
            with pytest.warns(ExperimentalPresetWarning, match="no sm_120 recording validates it.*2512.07004"):
                assert instruction_preset(name, fmt) is alias
    assert "2512.07004" in SM120_CITATION and "4.1.8" in SM120_CITATION and "Tables 3-4" in SM120_CITATION
    with pytest.warns(ExperimentalPresetWarning, match="no sm_120 recording"):
        assert get_preset("sm120") is SM120
    assert SM120.maturity is Maturity.EXPERIMENTAL and "arXiv:2512.07004" in SM120.source
    assert SM120 != presets()["b200_mma_sync"]


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "tf32"])
def test_sm120_computes_the_b200_bits(fmt: str) -> None:
    gen = torch.Generator().manual_seed(7)
    x = _OPERANDS[fmt]
    y = (torch.randn(64, x.shape[0], generator=gen) * 3).to(x.dtype)
    if fmt == "tf32":
        y = mmaemu.quantization.round_to_tf32(y.float())
    c = torch.randn(64, generator=gen)
    with pytest.warns(ExperimentalPresetWarning):
        got = mmaemu.model.dot(y, x, c, preset="sm120")
    assert torch.equal(got.view(torch.int32), mmaemu.model.dot(y, x, c, preset="b200").view(torch.int32))


def test_sm120_fp8_is_not_b200_mma_sync() -> None:
    """One product 1 and c = 2**-23 + 2**-24 (worked by hand): the paper's model aligns c with the product and
    truncates the sum to fp32's 24 bits, 1 + 2**-23; b200_mma_sync adds c by a rounded fp32 addition, a tie,
    to even: 1 + 2**-22."""
    a = torch.zeros(32)
    a[0] = 1.0
    a8 = a.to(torch.float8_e4m3fn)
    c = torch.tensor(2.0**-23 + 2.0**-24)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalPresetWarning)
        sm120 = mmaemu.model.dot(a8, a8, c, preset="sm120")
        b200 = mmaemu.model.dot(a8, a8, c, preset="b200_mma_sync")
    assert sm120.item() == 1 + 2.0**-23
    assert b200.item() == 1 + 2.0**-22


def test_maturity_says_why() -> None:
    assert SM120.maturity_reason.startswith("experimental: no sm_120 recording validates it")
    assert SM120_ZOO[next(iter(SM120_ZOO))].maturity_reason == SM120.maturity_reason
    assert "not an sm_120" in presets()["b200_mma_sync"].maturity_reason
    hopper_mma_sync = presets()["hopper_mma_sync"]
    assert hopper_mma_sync.maturity_reason.startswith("validated: ")
    assert "fp32 accumulator open" in hopper_mma_sync.maturity_reason
