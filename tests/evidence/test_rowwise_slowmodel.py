"""Row-wise scaled_mm against the independent slow model: torch 2.7.1's CUTLASS kernels, computed exactly.

The expected values come from ``tests/slowmodel.py`` (exact rationals, no mmaemu code): the tensor-core
blocks, ``chains_sum`` over chain layouts written here from the kernels' source as the research
(docs: mmaemu.kernels) describes them, ``epilogue_rowwise``, and for sm_89 the stream-K decomposition of
``tests/streamk_reference.py`` (the research's own transcription of CUTLASS v3.8.0). The inputs are the
recorder's row-wise probes (built to separate every candidate choice) and random operands.
Each test therefore fails when one of the kernel model's choices is flipped (transposed dispatch,
scale order, the zero bias, promotion interval, fma or not, staged accumulation, stream-K).
"""

from __future__ import annotations

import random
import warnings

import pytest
import streamk_reference as sk_ref
import torch
from slowmodel import chains_sum, epilogue_rowwise

import mmaemu
from mmaemu.recording._rowwise import rowwise_probes

E4 = torch.float8_e4m3fn
HOPPER = (32, 13)  # block size, fraction bits
ADA = (16, 13)


def _codes(t: torch.Tensor) -> list[list[int]]:
    return t.contiguous().view(torch.uint8).tolist()


def _bits32(t: torch.Tensor) -> list[int]:
    return [int(x) & 0xFFFFFFFF for x in t.contiguous().view(torch.int32).flatten().tolist()]


def _fmt(t: torch.Tensor) -> str:
    return "e5m2" if t.dtype == torch.float8_e5m2 else "e4m3"


def sm90_chains(k: int, fast: bool) -> list[list[int | None]]:
    """sm_90: 128-wide k-tiles from 0, zero-padded at the end (TMA); slow: a chain per k-tile; fast: one chain."""
    padded = -(-k // 128) * 128
    positions: list[int | None] = [i if i < k else None for i in range(padded)]
    return [positions] if fast else [positions[i:i + 128] for i in range(0, padded, 128)]


def sm89_chains(start: int, stop: int, fast: bool) -> list[list[int | None]]:
    """sm_89: 64-wide k-tiles, the partial one first (zero-padded at its end); slow: staged groups of halves
    {h0}, {h1, h2}, ..., {h(2n-1)}; fast: one chain over every position."""
    length = stop - start
    residue = length % 64 or 64
    positions: list[int | None] = [start + p if p < residue else None for p in range(64)]
    positions += [start + residue + i for i in range(length - residue)]
    if fast:
        return [positions]
    halves = [positions[i:i + 32] for i in range(0, len(positions), 32)]
    return [halves[0]] + [halves[i] + halves[i + 1] for i in range(1, len(halves) - 1, 2)] + [halves[-1]]


def fp32_add(x: int, y: int) -> int:
    from slowmodel import fp32_add_bits

    return fp32_add_bits(x, y)


def expected(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, bias: torch.Tensor | None,
             fast: bool, arch: str, transposed: bool, cells: list[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """The slow model's bf16 bits at ``cells`` of ``scaled_mm(a, b.t(), sa[:, None], sb[None, :], bias)``."""
    m, k, n = a.shape[0], a.shape[1], b.shape[0]
    ca, cb, fa, fb = _codes(a), _codes(b), _fmt(a), _fmt(b)
    sa_bits, sb_bits = _bits32(sa), _bits32(sb)
    bias_bits = None if bias is None else [int(x) & 0xFFFF for x in bias.view(torch.int16).tolist()]
    peers: dict[tuple[int, int], list[tuple[int, int]]] = {}
    if arch == "sm89":
        mapping = sk_ref.mapping(m, n, k, 24, 2)
        for (r, c), blocks in sk_ref.sk_tiles(mapping).values():
            peers[(r, c)] = [(kb * 64, min(k, ke * 64)) for _, kb, ke in blocks]
    out = {}
    for i, j in cells:
        if arch == "sm90":
            acc = chains_sum(ca[i], cb[j], sm90_chains(k, fast), fa, fb, *HOPPER)
        else:
            ranges = peers.get((i // 64, j // 128), [(0, k)])
            acc = None
            for k0, k1 in ranges:  # peers in K order, summed serially
                part = chains_sum(ca[i], cb[j], sm89_chains(k0, k1, fast), fa, fb, *ADA)
                acc = part if acc is None else fp32_add(acc, part)
        s1, s2 = (sb_bits[j], sa_bits[i]) if transposed else (sa_bits[i], sb_bits[j])
        out[(i, j)] = epilogue_rowwise(acc, s1, s2, None if bias_bits is None else bias_bits[j])
    return out


def _run(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, bias: torch.Tensor | None, fast: bool,
         profile: str) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnrecordedKernelWarning)
        return mmaemu.scaled_mm(a, b.t(), sa.reshape(-1, 1), sb.reshape(1, -1), bias, out_dtype=torch.bfloat16,
                                use_fast_accum=fast, profile=profile)


def _compare(got: torch.Tensor, want: dict[tuple[int, int], int]) -> None:
    bits = got.view(torch.int16)
    bad = [(cell, int(bits[cell]) & 0xFFFF, w) for cell, w in want.items() if int(bits[cell]) & 0xFFFF != w]
    assert not bad, f"{len(bad)} of {len(want)} outputs differ, e.g. (cell, got, want) {bad[:4]}"


#: The sm_90 dispatch's transposition for the probes' shapes, from the research's table (rule 7: 16 x 128 not
#: transposed; rule 5: 16 x 256 transposed; both from RowwiseScaledMM.cu and the wheel's host code).
SM90_TRANSPOSED = {(16, 128): False, (16, 256): True, (16, 16): False}


def _probe_cells(name: str, m: int, n: int) -> list[tuple[int, int]]:
    if name.startswith("order"):  # the cancelled output of every column, and one other row
        return sorted({(j % m, j) for j in range(n)} | {((j + 5) % m, j) for j in range(0, n, 7)})
    if name == "zero-bias":
        return [(i, j) for i in range(m) for j in range(16)]
    return [(i, 0) for i in range(m)] + [(i, 9) for i in range(0, m, 5)]


@pytest.mark.parametrize("profile,arch", [("hopper", "sm90"), ("ada", "sm89")])
@pytest.mark.parametrize("probe", rowwise_probes(), ids=lambda p: p.name)
def test_the_row_wise_probes_against_the_slow_model(probe, profile: str, arch: str) -> None:  # type: ignore[no-untyped-def]
    """Old code: every row-wise call raised UnsupportedFeatureError."""
    m, n, _ = probe.shape
    transposed = arch == "sm90" and SM90_TRANSPOSED[(m, n)]
    got = _run(probe.a, probe.b, probe.scale_a, probe.scale_b, probe.bias, probe.fast, profile)
    want = expected(probe.a, probe.b, probe.scale_a, probe.scale_b, probe.bias, probe.fast, arch, transposed,
                    _probe_cells(probe.name, m, n))
    _compare(got, want)


def _random_call(m: int, n: int, k: int, seed: int, bias: bool) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-6, 6, (m, k), generator=g))).clamp(-448, 448).to(E4)
    b = (torch.randn(n, k, generator=g) * 4).clamp(-448, 448).to(E4)
    sa = (torch.rand(m, generator=g) + 0.5) * torch.where(torch.rand(m, generator=g) < 0.2, -1.0, 1.0)
    sb = torch.rand(n, generator=g) * 3 + 2.0**-20
    beta = (torch.randn(n, generator=g) * 8).to(torch.bfloat16) if bias else None
    return a, b, sa, sb, beta


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("shape,transposed", [((32, 256, 336), True), ((128, 64, 400), True), ((64, 128, 272), False)])
def test_sm90_random_calls_against_the_slow_model(shape: tuple[int, int, int], transposed: bool, fast: bool) -> None:
    """Random operands with wide exponents, K not a multiple of 128, per-row and per-column scales, a bias:
    sampled outputs of the H100 model. 32 x 256 (rule 5) and 128 x 64 (rule 7) run transposed, 64 x 128 not."""
    m, n, k = shape
    a, b, sa, sb, beta = _random_call(m, n, k, seed=m + n + k, bias=True)
    got = _run(a, b, sa, sb, beta, fast, "hopper")
    rng = random.Random(k)
    cells = [(rng.randrange(m), rng.randrange(n)) for _ in range(40)]
    _compare(got, expected(a, b, sa, sb, beta, fast, "sm90", transposed, cells))


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("shape", [(16, 128, 1040), (64, 256, 1936), (100, 1552, 1040), (16, 1152, 1040)])
def test_sm89_random_calls_against_the_slow_model(shape: tuple[int, int, int], fast: bool) -> None:
    """The RTX 4060 model on shapes that stream-K divides (16 x 128 x 1040: one tile, three peers, the last with the
    partial k-tile; 64 x 256 x 1936: two tiles of four peers; 100 x 1552 x 1040: 24 tiles whole and 2 divided in
    three, by a separate reduction; 16 x 1152 x 1040: nine tiles of two peers, through the turnstile), sampled in stream-K
    tiles and data-parallel ones."""
    m, n, k = shape
    a, b, sa, sb, beta = _random_call(m, n, k, seed=m * n + k, bias=m % 2 == 0)
    mapping = sk_ref.mapping(m, n, k, 24, 2)
    assert mapping["sk_tiles"] > 0  # the shape exercises stream-K
    got = _run(a, b, sa, sb, beta, fast, "ada")
    rng = random.Random(m + k)
    sk_cells = [(r * 64 + rng.randrange(min(64, m - r * 64)), c * 128 + rng.randrange(128))
                for (r, c), _ in sk_ref.sk_tiles(mapping).values()]
    cells = sk_cells[:12] + [(rng.randrange(m), rng.randrange(n)) for _ in range(12)]
    _compare(got, expected(a, b, sa, sb, beta, fast, "sm89", False, cells))
