"""The seeds' quickstart (seeds 001): hopper and ada differ on 28,812 of the 368,640 bf16 outputs (7.8%).

The output bits are pinned by the sha256 of each tensor's bytes. They were computed once from the
code that replays all hardware evidence (the H100 and RTX 4060 vectors and recordings); any change
to one output bit of either profile, or of the fp32 accumulator, fails here. The operands are
generated here, not taken from the code under test, and their bytes are pinned too, so a failure
says whether the inputs or the outputs moved.
"""

from __future__ import annotations

import hashlib

import torch

import mmaemu
from mmaemu.platforms._splitk import SplitSource
from mmaemu._cli import _quickstart_operands, main

M, N, K = 64, 5760, 1920

#: sha256 of the operands' fp8 bytes (torch.manual_seed(0), CPU randn).
X_SHA256 = "e2d8d248b0c1333abc5d00a881d85753795227fa0a669b91736e2a3fdf3dbc40"
W_SHA256 = "276fdde7851cbee091d426f6a499303b1095120104fc1bae4a09268fc217328a"
#: sha256 of the bf16 outputs' bytes (little-endian) on each profile, and of the fp32 accumulators.
Y_HOPPER_SHA256 = "ad87785e0891ae680cdf8a0808fdeb324ba310828397d497aa79e94f16173497"
Y_ADA_SHA256 = "ee706d8634b3b3b6a0a3869a5138ccc1abb0a6c1f9b4f6f46544224315c55baf"
ACC_HOPPER_SHA256 = "bdbc970061fe21ad04b9ff5fc9edbcad74c6761d5f94fa81ae9deaa02242b51b"
ACC_ADA_SHA256 = "f96163557a4931aea33b0f41e120fee242c87d3e7e885b1e76978945ff98c5a6"
#: bf16 outputs whose bits differ between hopper and ada, of M * N = 368,640.
DIFFERING = 28_812


def sha256(t: torch.Tensor) -> str:
    """The sha256 of a CPU tensor's bytes in row-major order (the shape is checked separately)."""
    assert t.device.type == "cpu"
    return hashlib.sha256(t.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def quickstart_operands() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The README's operands, generated deterministically on the CPU."""
    torch.manual_seed(0)
    x = (torch.randn(M, K, device="cpu") * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    w = (torch.randn(N, K, device="cpu") * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    return x, w, torch.tensor(1 / 64), torch.tensor(1 / 32)


def test_quickstart_operands_are_pinned() -> None:
    x, w, sx, sw = quickstart_operands()
    assert (sha256(x), sha256(w)) == (X_SHA256, W_SHA256)
    # the demo command's operands are the same bits
    cx, cw, csx, csw = _quickstart_operands()
    assert (sha256(cx), sha256(cw)) == (X_SHA256, W_SHA256)
    assert (sha256(csx), sha256(csw)) == (sha256(sx), sha256(sw))


def test_quickstart_hopper_vs_ada() -> None:
    x, w, sx, sw = quickstart_operands()
    plan = mmaemu._call.decide_split(
        mmaemu.platforms._profiles.get_profile("hopper"),
        mmaemu.platforms._splitk.Problem(M, N, K, mmaemu.formats.Fp8Format.E4M3, mmaemu.formats.Fp8Format.E4M3,
                                mmaemu.formats.OutFormat.BFLOAT16, True),
        "auto",
    )
    assert (plan.parts, plan.source) == (1, SplitSource.TABLE)
    y = mmaemu.scaled_mm(x, w.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True, profile="hopper")
    y_ada = mmaemu.scaled_mm(x, w.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True, profile="ada")
    assert (y.dtype, tuple(y.shape), y_ada.dtype, tuple(y_ada.shape)) == (torch.bfloat16, (M, N), torch.bfloat16, (M, N))
    differing = int((y.view(torch.int16) != y_ada.view(torch.int16)).sum())
    print(f"quickstart: {differing} of {y.numel()} ({differing / y.numel():.2%}) bf16 outputs differ between hopper and ada")
    assert (differing, y.numel()) == (DIFFERING, M * N)  # the seeds: "about 8%"
    assert sha256(y) == Y_HOPPER_SHA256
    assert sha256(y_ada) == Y_ADA_SHA256
    # the accumulate/epilogue split gives the same bits, on both profiles, with the split explain reports
    split = mmaemu.explain(x, w.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True, profile="hopper").split
    split_ada = mmaemu.explain(x, w.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True, profile="ada").split
    acc = mmaemu.accumulate(x, w, use_fast_accum=True, splitk=split, profile="hopper")
    acc_ada = mmaemu.accumulate(x, w, use_fast_accum=True, splitk=split_ada, profile="ada")
    assert (acc.dtype, tuple(acc.shape)) == (torch.float32, (M, N))
    assert sha256(acc) == ACC_HOPPER_SHA256
    assert sha256(acc_ada) == ACC_ADA_SHA256
    assert sha256(mmaemu.epilogue(acc, sx, sw, out_dtype=torch.bfloat16)) == Y_HOPPER_SHA256
    assert sha256(mmaemu.epilogue(acc_ada, sx, sw, out_dtype=torch.bfloat16)) == Y_ADA_SHA256


def _ordered(bits: torch.Tensor) -> torch.Tensor:
    """bf16 bit patterns as integers whose differences count ulps (sign-magnitude to two's complement)."""
    b = bits.view(torch.int16).to(torch.int64) & 0xFFFF
    return torch.where(b >= 0x8000, 0x8000 - b, b)


def _ulp_histogram(a: torch.Tensor, b: torch.Tensor) -> tuple[int, int, int, int]:
    """Outputs equal, 1 ulp, 2 ulps, 3 or more ulps apart."""
    d = (_ordered(a) - _ordered(b)).abs()
    return int((d == 0).sum()), int((d == 1).sum()), int((d == 2).sum()), int((d >= 3).sum())


def test_quickstart_ulp_table() -> None:
    """The table of docs/validation.md: hopper against ada and against the exactly rounded GEMM, in bf16 ulps."""
    x, w, sx, sw = quickstart_operands()
    y = mmaemu.scaled_mm(x, w.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True, profile="hopper")
    y_ada = mmaemu.scaled_mm(x, w.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True, profile="ada")
    # float64 holds these sums exactly (8-bit products over a 2**35 range, K = 1920); scales are powers of 2
    exact = (x.double() @ w.double().t()) * (1 / 64) * (1 / 32)
    rounded = exact.float().to(torch.bfloat16)
    assert _ulp_histogram(y, y_ada) == (339_828, 24_855, 1_651, 2_306)
    assert M * N - 339_828 == DIFFERING
    assert _ulp_histogram(y, rounded) == (299_330, 58_766, 4_453, 6_091)


def test_demo_command_runs(capsys: object) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert f"bf16 outputs that differ between hopper and ada: {DIFFERING} of {M * N} (7.8%)" in out
