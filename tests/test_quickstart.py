"""The seeds' quickstart (seeds 001): hopper and ada differ on about 8% of the bf16 outputs."""

from __future__ import annotations

import torch

import mmaemu
from mmaemu.cli import _quickstart_operands, main


def test_quickstart_hopper_vs_ada() -> None:
    x, w, sx, sw = _quickstart_operands()
    plan = mmaemu.call.decide_split(
        mmaemu.platform.get_profile("hopper"),
        mmaemu.platform.Problem(64, 5760, 1920, mmaemu.formats.Fp8Format.E4M3, mmaemu.formats.Fp8Format.E4M3,
                                mmaemu.formats.OutFormat.BFLOAT16, True),
        "auto",
    )
    assert (plan.S, plan.source) == (1, "table")
    y = mmaemu.scaled_mm(x, w.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True, profile="hopper")
    y_ada = mmaemu.scaled_mm(x, w.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True, profile="ada")
    differ = (y.view(torch.int16) != y_ada.view(torch.int16)).double().mean().item()
    print(f"quickstart: {differ:.2%} of the bf16 outputs differ between hopper and ada")
    assert 0.07 < differ < 0.09  # the seeds: "about 8%"
    # the accumulate/epilogue split gives the same bits
    acc = mmaemu.accumulate(x, w, use_fast_accum=True)
    assert torch.equal(mmaemu.epilogue(acc, sx, sw, out_dtype=torch.bfloat16).view(torch.int16), y.view(torch.int16))


def test_demo_command_runs(capsys: object) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "bf16 outputs that differ between hopper and ada:" in out and "(7.8%)" in out
