"""mmaemu.kernels: the row-wise kernel models' parts, each checked against the facts of its source.

Expected values: the sm_90 dispatch table and the stream-K examples of the research on torch 2.7.1's
RowwiseScaledMM.cu and CUTLASS v3.8.0 (its table was checked against the wheel's host code), the slow
model's exact epilogue, and hand-derived staged chains.
"""

from __future__ import annotations

import pytest
import torch
from slowmodel import epilogue_rowwise

from mmaemu.kernels._epilogue import rowwise_epilogue
from mmaemu.kernels._model import (
    ROWWISE_SM89,
    ROWWISE_SM90,
    Fusion,
    ScaleOrder,
    ZeroBias,
    candidates,
    kernel_model,
    rowwise_model_for,
)
from mmaemu.kernels._plans import staged_chains
from mmaemu.kernels._sm90 import dispatch
from mmaemu.kernels._streamk import mapping
from mmaemu.presets import ADA, B200_MMA_SYNC, HOPPER
from mmaemu.errors import UnknownNameError

#: (M, N) -> (rule, transposed, cluster): one shape per rule of dispatch_fp8_rowwise_kernel_on_cluster_size_and_transpose
DISPATCH = {
    (1, 3072): (1, False, (1, 2)),
    (3072, 64): (2, True, (1, 2)),
    (192, 4096): (3, True, (1, 2)),
    (4096, 192): (4, False, (1, 2)),
    (16, 256): (5, True, (2, 1)),
    (256, 16): (6, False, (2, 1)),
    (16, 128): (7, False, (2, 1)),      # (64 <= 128) xor (64 * 128 <= 1024 * 1024)
    (128, 64): (7, True, (2, 1)),
    (1088, 1088): (7, True, (2, 1)),    # 1088**2 > 1024**2
    (4096, 8192): (8, True, (2, 1)),
    (8192, 4096): (8, False, (2, 1)),
    (2048, 1024): (9, True, (2, 1)),
    (1024, 2048): (9, True, (1, 2)),
    (2048, 3072): (9, True, (2, 1)),
}


@pytest.mark.parametrize("shape", sorted(DISPATCH))
def test_sm90_dispatch_rules(shape: tuple[int, int]) -> None:
    d = dispatch(*shape, 114)
    assert (d.rule, d.transposed, d.cluster) == DISPATCH[shape]
    assert d.swizzle == (8 if d.rule == 8 else 1)


def test_sm90_dispatch_products_wrap_as_the_binarys_int32_multiply() -> None:
    """65,600 x 65,536 wraps to 4,194,304 in the host code's 32-bit imul: rule 5 (transposed) instead of rule 8."""
    d = dispatch(65600, 65536, 114)
    assert (d.rule, d.transposed) == (5, True)


def test_sm90_tile_reads_the_sm_count_but_not_the_bits() -> None:
    assert dispatch(64, 128 * 114, 114).tile[0] == 64
    assert dispatch(64, 128 * 115, 114).tile[0] == 128  # more tiles than SMs: the larger tile


def test_stream_k_decompositions_of_the_research() -> None:
    """The research's examples (CUTLASS v3.8.0 ThreadblockSwizzleStreamK, 24 SMs, occupancy 2)."""
    assert mapping(64, 5760, 1920, 24, 2).sk_tiles == 0
    d = mapping(64, 256, 1920, 24, 2)
    assert (d.sk_tiles, d.sk_blocks, d.separate_reduction) == (2, 10, True)
    assert d.peer_ranges()[0] == tuple((64 * a, 64 * b) for a, b in ((0, 6), (6, 12), (12, 18), (18, 24), (24, 30)))
    d = mapping(16, 128, 8192, 24, 2)
    assert (d.sk_tiles, d.separate_reduction) == (1, True)
    assert d.peer_ranges()[0] == tuple((1024 * i, 1024 * (i + 1)) for i in range(8))
    d = mapping(1024, 1024, 1024, 24, 2)
    assert (d.sk_tiles, d.cohort_raster, d.separate_reduction) == (8, True, True)
    assert all(p == ((0, 384), (384, 704), (704, 1024)) for p in d.peer_ranges().values())
    d = mapping(64, 2560, 8192, 24, 2)
    assert (d.sk_tiles, d.sk_blocks, d.sk_regions, d.separate_reduction) == (20, 24, 1, False)
    assert d.peer_ranges()[0] == ((0, 107 * 64), (107 * 64, 8192))


def test_stream_k_depends_on_the_sm_count() -> None:
    """The same shape divides otherwise on 24 SMs (the RTX 4060) than on 114 or one (no stream-K)."""
    assert mapping(64, 256, 1920, 1, 2).sk_tiles == 0
    assert mapping(64, 5760, 1920, 24, 2).sk_tiles == 0 and mapping(64, 5760, 1920, 114, 2).sk_tiles == 45
    assert mapping(64, 2560, 8192, 114, 2).peer_ranges()[0] != mapping(64, 2560, 8192, 24, 2).peer_ranges()[0]


def test_staged_chains_take_the_partial_k_tile_first() -> None:
    """[Note: sm_89 staged accumulation]: the halves of 64-wide k-tiles grouped {h0}, {h1, h2}, ..., {h(2n-1)}."""
    assert staged_chains(0, 256) == (((0, 32),), ((32, 96),), ((96, 160),), ((160, 224),), ((224, 256),))
    assert staged_chains(0, 80) == (((0, 16),), ((16, 48),), ((48, 80),))
    assert staged_chains(0, 112) == (((0, 32),), ((32, 80),), ((80, 112),))  # a partial tile of 48: halves of 32, 16
    assert staged_chains(0, 80, residue_first=False) == (((0, 32),), ((32, 80),))


def test_the_fused_bias_is_rounded_once() -> None:
    """t * s2 + 1 lies 2**-54 above an fp32 midpoint: one rounding gives 1 + 2**-8 + 2**-23 (bf16 1 + 2**-7); the
    float64 sum rounded again to fp32 ties to 1 + 2**-8 (bf16 1.0). The slow model decides."""
    t, s2 = 10387773 * 2.0**-23, 13548586 * 2.0**-32  # T * S = 2**47 + 2**31 + 2
    bits = lambda x: int(torch.tensor([x], dtype=torch.float32).view(torch.int32)) & 0xFFFFFFFF  # noqa: E731
    want = epilogue_rowwise(bits(1.0), bits(t), bits(s2), 0x3F80)
    assert want == 0x3F81
    got = rowwise_epilogue(torch.ones(1, 1), torch.tensor([[t]]), torch.tensor([[s2]]),
                           torch.tensor([1.0], dtype=torch.bfloat16), fusion=Fusion.FMA, zero_bias=ZeroBias.PLUS_ZERO)
    assert int(got.view(torch.int16)) & 0xFFFF == want
    separate = rowwise_epilogue(torch.ones(1, 1), torch.tensor([[t]]), torch.tensor([[s2]]),
                                torch.tensor([1.0], dtype=torch.bfloat16), fusion=Fusion.SEPARATE,
                                zero_bias=ZeroBias.PLUS_ZERO)
    assert int(separate.view(torch.int16)) & 0xFFFF == epilogue_rowwise(bits(1.0), bits(t), bits(s2), 0x3F80, fused=False)


def test_the_zero_bias_makes_an_exact_zero_product_plus_zero() -> None:
    acc = torch.zeros(2, 2)
    s1, s2 = torch.tensor([[-1.0], [1.0]]), torch.tensor([[1.0, -1.0]])
    plus = rowwise_epilogue(acc, s1, s2, None, fusion=Fusion.FMA, zero_bias=ZeroBias.PLUS_ZERO)
    absent = rowwise_epilogue(acc, s1, s2, None, fusion=Fusion.FMA, zero_bias=ZeroBias.ABSENT)
    assert plus.view(torch.int16).tolist() == [[0, 0], [0, 0]]
    assert (absent.view(torch.int16).to(torch.int32) & 0xFFFF).tolist() == [[0x8000, 0], [0, 0x8000]]


def test_nan_and_inf_in_the_epilogue() -> None:
    acc = torch.tensor([[float("inf"), 1.0, float("nan")]])
    s1 = torch.tensor([[0.0]])
    out = rowwise_epilogue(acc, s1, torch.tensor([[1.0, 1.0, 1.0]]), None, fusion=Fusion.FMA,
                           zero_bias=ZeroBias.PLUS_ZERO)
    assert out.view(torch.int16).tolist() == [[0x7FFF, 0, 0x7FFF]]  # inf * 0 and NaN: canonical NaN


def test_candidates_and_the_registry() -> None:
    for base in (ROWWISE_SM90, ROWWISE_SM89):
        found = candidates(base)
        assert found[0] == base and len(found) == len({c.name for c in found}) == 48
        assert all(kernel_model(c.name) == c for c in found)
    assert kernel_model("cutlass-rowwise-sm90/order=column-first").order is ScaleOrder.COLUMN_FIRST
    with pytest.raises(UnknownNameError, match="cutlass-rowwise-sm90"):
        kernel_model("cutlass-rowwise-sm90/order=sideways")
    assert rowwise_model_for(HOPPER, None) is ROWWISE_SM90 and rowwise_model_for(ADA, None) is ROWWISE_SM89
    assert rowwise_model_for(B200_MMA_SYNC, None) is None
    assert rowwise_model_for(B200_MMA_SYNC, "cutlass-rowwise-sm90/promotion=64").promotion == 64


def test_explain_shows_the_kernel_and_the_order_it_assumed() -> None:
    """Item 1: explain names the kernel, its dispatch and its epilogue order; the plan is not validated."""
    import mmaemu

    a = torch.ones(16, 8192).to(torch.float8_e4m3fn)
    b = torch.ones(256, 8192).to(torch.float8_e4m3fn)
    sa, sb = torch.ones(16, 1), torch.ones(1, 256)
    plan = mmaemu.explain(a, b.t(), sa, sb, out_dtype=torch.bfloat16)
    assert plan.ok and plan.kernel is not None and plan.kernel.transposed and plan.split is None
    assert not plan.validated and plan.reason is not None and plan.reason.startswith("UnrecordedKernelWarning")
    text = str(plan)
    assert "kernel:     cutlass-rowwise-sm90 (sm_90; dispatch rule 5, transposed" in text
    assert "epilogue: bf16(fma(fp32(acc * scale_b[n]), scale_a[m], bias[n] or +0))" in text
    ada = mmaemu.explain(a, b[:128].t(), sa, sb[:, :128], out_dtype=torch.bfloat16, profile="ada")
    assert ada.kernel is not None and not ada.kernel.transposed and ada.kernel.splits_k
    assert "stream-K on 24 SMs at occupancy 2 (derived): 1 of 1 tiles of 64 x 128 divided over 8 blocks" in str(ada)
