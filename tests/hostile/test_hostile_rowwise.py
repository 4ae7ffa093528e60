"""Hostile row-wise calls: special values in every scale, the bias and the operands, and hostile kernel names.

Expected values from the independent slow model (tests/slowmodel.py), element by element: the row-wise
kernels' NaN, Inf, -0, subnormal and overflow behaviour is IEEE fp32 (no FTZ) with bf16's canonical NaN.
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
from slowmodel import chains_sum, epilogue_rowwise

import mmaemu
from mmaemu.errors import UnknownNameError
from mmaemu.kernels._model import kernel_model
from mmaemu.platforms._profiles import get_profile

M, N, K = 16, 128, 64
NAN, INF = float("nan"), float("inf")


def _bits(t: torch.Tensor) -> list[int]:
    return [int(x) & 0xFFFFFFFF for x in t.contiguous().view(torch.int32).flatten().tolist()]


def _operands(e5m2: bool) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    a = (torch.randn(M, K, generator=g) * 8).to(torch.float8_e5m2 if e5m2 else torch.float8_e4m3fn)
    b = (torch.randn(N, K, generator=g) * 8).to(torch.float8_e4m3fn)
    if e5m2:
        codes = a.view(torch.uint8)
        codes[2, 5], codes[3, 7], codes[4, 9] = 0x7C, 0xFC, 0x7E  # +Inf, -Inf, NaN
    return a, b


def _scales() -> tuple[torch.Tensor, torch.Tensor]:
    sa = torch.full((M,), 0.75)
    sa[:8] = torch.tensor([NAN, INF, -INF, 0.0, -0.0, 2.0**-140, 2.0**127, -(2.0**-149)])
    sb = torch.full((N,), 1.25)
    sb[:8] = torch.tensor([NAN, INF, 0.0, -0.0, 2.0**-130, 2.0**120, -3.0, 2.0**-149])
    return sa, sb


def _bias() -> torch.Tensor:
    bias = torch.full((N,), 0.5).to(torch.bfloat16)
    bias[8:14] = torch.tensor([NAN, INF, -INF, -0.0, 2.0**-133, 3.0e38]).to(torch.bfloat16)
    return bias


@pytest.mark.parametrize("profile", ["hopper", "ada"])
@pytest.mark.parametrize("e5m2", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_special_values_follow_the_slow_model(profile: str, e5m2: bool, with_bias: bool) -> None:
    """NaN, +-Inf, +-0, subnormal and overflowing scales, biases and (E5M2) operands: every row, and the columns that
    hold the special scales and biases (0 to 15) and two ordinary ones. 16 x 128 does not run transposed on the H100
    (dispatch rule 7), and never on the RTX 4060."""
    a, b = _operands(e5m2)
    sa, sb = _scales()
    bias = _bias() if with_bias else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnrecordedKernelWarning)
        got = mmaemu.scaled_mm(a, b.t(), sa[:, None], sb[None, :], bias, out_dtype=torch.bfloat16, use_fast_accum=False,
                               profile=profile)
    ca, cb = a.view(torch.uint8).tolist(), b.view(torch.uint8).tolist()
    fa = "e5m2" if e5m2 else "e4m3"
    block = (32, 13) if profile == "hopper" else (16, 13)
    if profile == "hopper":
        chains = [list(range(0, 64)) + [None] * 64]  # one 128-wide k-tile, zero-padded
    else:
        chains = [list(range(0, 32)), list(range(32, 64))]  # staged: {h0}, {h1} of one 64-wide k-tile
    sa_bits, sb_bits = _bits(sa), _bits(sb)
    bias_bits = None if bias is None else [int(x) & 0xFFFF for x in bias.view(torch.int16).tolist()]
    out = got.view(torch.int16)
    bad = []
    for i in range(M):
        for j in [*range(16), 64, N - 1]:
            acc = chains_sum(ca[i], cb[j], chains, fa, "e4m3", *block)
            want = epilogue_rowwise(acc, sa_bits[i], sb_bits[j], None if bias_bits is None else bias_bits[j])
            if int(out[i, j]) & 0xFFFF != want:
                bad.append(((i, j), int(out[i, j]) & 0xFFFF, want))
    assert not bad, f"{len(bad)} outputs differ, e.g. {bad[:5]}"


@pytest.mark.parametrize("name", [7, None, b"cutlass-rowwise-sm90"])
def test_a_kernel_name_of_another_type_is_refused(name: object) -> None:
    with pytest.raises(TypeError, match="a kernel model's name is a string"):
        kernel_model(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", "../x", "cutlass-rowwise-sm90/order=dispatch", "cutlass-rowwise-sm90/",
                                  "cutlass-rowwise-sm89/promotion=64", "CUTLASS-ROWWISE-SM90", "x" * 100_000])
def test_a_name_that_names_no_kernel_model_is_refused(name: str) -> None:
    """Names are exact: a choice at the base model's value, a choice the model has no candidate for, another case."""
    with pytest.raises(UnknownNameError, match="is not a kernel model"):
        kernel_model(name)


def test_a_profile_naming_no_kernel_model_refuses_row_wise_calls_only() -> None:
    profile = dataclasses.replace(get_profile("hopper"), name="bogus-rowwise", rowwise_kernel="no-such-kernel")
    a = torch.ones(16, 32).to(torch.float8_e4m3fn)
    with pytest.raises(UnknownNameError, match="'no-such-kernel' is not a kernel model"):
        mmaemu.scaled_mm(a, a.t(), torch.ones(16, 1), torch.ones(1, 16), out_dtype=torch.bfloat16, profile=profile)
    one = torch.tensor(1.0)
    mmaemu.scaled_mm(a, a.t(), one, one, out_dtype=torch.bfloat16, profile=profile, splitk=1)  # tensor-wise: served
