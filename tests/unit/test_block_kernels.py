"""mmaemu.kernels._block_model's registry and mmaemu.explain_block_scaled: names, candidates, what explain shows."""

from __future__ import annotations

import pytest
import torch

import mmaemu
from mmaemu.kernels._block_model import (
    BLOCK_MODELS,
    DEEPGEMM_SM90,
    Combination,
    Start,
    block_candidates,
    block_model,
    triton_model,
)
from mmaemu.kernels._model import Fusion, ScaleOrder


def test_the_registry_names_every_path_block_k_and_fusion() -> None:
    assert len(BLOCK_MODELS) == 13 and tuple(BLOCK_MODELS) == mmaemu.BLOCK_KERNELS
    assert DEEPGEMM_SM90.out_dtypes == (torch.bfloat16,) and DEEPGEMM_SM90.preset.name == "hopper"
    for arch, path, preset in (("sm90", "wgmma", "hopper"), ("sm90", "hmma", "hopper-fp16"), ("sm89", "mma", "ada")):
        for k in (128, 64):
            for fused in (True, False):
                m = triton_model(arch, path, k, fused)
                assert m.preset.name == preset and m.k_block == k and m.name.endswith("@triton3.3-3.9")
                assert m.fusion is (Fusion.FMA if fused else Fusion.SEPARATE)
                assert m.combination is Combination.CHAIN_FIRST and m.order is ScaleOrder.ROW_FIRST
                assert m.start is Start.PLUS_ZERO and "max_num_imprecise_acc" in m.toolchain


def test_candidates_flip_each_choice_and_resolve_by_name() -> None:
    dg = block_candidates("deepgemm-sm90")
    assert dg[0] == DEEPGEMM_SM90 and len(dg) == len({c.name for c in dg}) == 16
    assert all(c.order is ScaleOrder.ROW_FIRST for c in dg)  # sa * sb commutes: no order choice
    tr = block_candidates(triton_model("sm90", "wgmma"))
    assert len(tr) == len({c.name for c in tr}) == 24
    for c in (*dg, *tr):
        assert block_model(c.name) == c and c.base in BLOCK_MODELS
    flipped = block_model("deepgemm-sm90/fusion=separate/k-block=64")
    assert flipped.fusion is Fusion.SEPARATE and flipped.k_block == 64 and flipped.combination is Combination.SCALES_FIRST
    with pytest.raises(TypeError, match="not a block kernel choice"):
        DEEPGEMM_SM90.variant(preset="ada")


def test_the_formula_says_the_order_of_the_roundings() -> None:
    assert DEEPGEMM_SM90.formula == "acc = +0; s = rn(sa * sb); acc = fma(s, d, acc)"
    assert triton_model("sm89", "mma", 64, False).formula == "acc = +0; t = rn(d * sa); acc = rn(acc + rn(t * sb))"
    swapped = triton_model("sm90", "wgmma").variant(order=ScaleOrder.COLUMN_FIRST, start=Start.FIRST_STEP)
    assert swapped.formula == "first k-tile stored without addition; t = rn(d * sb); acc = fma(t, sa, acc)"


def test_explain_shows_the_model_and_why_it_is_not_validated() -> None:
    a, w = torch.zeros(4, 384).to(torch.float8_e4m3fn), torch.zeros(192, 384).to(torch.float8_e4m3fn)
    sa, sw = torch.ones(4, 3), torch.ones(2, 3)
    plan = mmaemu.explain_block_scaled(a, sa, w, sw, kernel="triton-block-sm90-hmma-bk64-nofpfusion@triton3.3-3.9",
                                       out_dtype=torch.float16, backend="reference")
    text = str(plan)
    assert plan.ok and not plan.validated and plan.shape == (4, 192, 384) and plan.backend == "reference"
    assert "hopper-fp16 preset, a fresh chain from +0 per 64 elements of K (6 per output" in text
    assert "converted to fp16 first (exact)" in text and "acc = rn(acc + rn(t * sb))" in text
    assert "rounded to float16 (nearest even)" in text and "validated:  no: no hardware output" in text
    assert [cls for cls, _ in plan.warnings] == ["UnrecordedKernelWarning"]
    refused = mmaemu.explain_block_scaled(a, sa, w[:96], sw[:1], kernel="deepgemm-sm90")
    assert not refused.ok and refused.validation[0] == "UnsupportedFeatureError" and refused.lines == ()
    assert "runs:       no, UnsupportedFeatureError: deepgemm-sm90: N = 96, K = 384" in str(refused)
