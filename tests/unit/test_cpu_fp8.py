"""The cpu backend's AVX-512 FP8 kernel (``mmaemu.backends._cpu_fp8``) at the edges of its formulation.

The kernel truncates each term by a fused multiply-add rounded toward zero into an accumulator
offset to 1.5 * 2**23 grid units; these tests aim at what that could get wrong: terms partly or
wholly below the grid (c much larger than the products), the largest and the smallest (subnormal)
products, c's own truncation, exact cancellation (+0), -0 operands, NaN and Inf rows, the sign
routing (all four sign pairs), N not a multiple of the 64-column panel, odd row counts, short
blocks at chain ends, splits and slow accumulation. Expected bits come from the reference backend
(and, on small cases, from the slow model ``tests/slowmodel.py``); the portable kernel is checked
against the same bits.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import slowmodel
import torch

import mmaemu
from mmaemu.presets import CMode, Preset, Rounding, get_preset

cpu = pytest.importorskip("mmaemu.backends._cpu")
_cpu_fp8 = pytest.importorskip("mmaemu.backends._cpu_fp8")
if not cpu.available()[0]:  # pragma: no cover
    pytest.skip("numba is not installed", allow_module_level=True)

needs_avx512 = pytest.mark.skipif(not _cpu_fp8.available(), reason="needs a CPU with AVX-512F and AVX-512BW")

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


@contextmanager
def _portable(on: bool) -> Iterator[None]:
    old = os.environ.get("MMAEMU_CPU_PORTABLE")
    os.environ["MMAEMU_CPU_PORTABLE"] = "1" if on else "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ["MMAEMU_CPU_PORTABLE"]
        else:
            os.environ["MMAEMU_CPU_PORTABLE"] = old


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def _check(a: torch.Tensor, b: torch.Tensor, *, fast: bool = True, profile: str = "hopper",
           splitk: object = 1) -> torch.Tensor:
    """The AVX-512 kernel's and the portable kernel's bits equal the reference backend's."""
    want = mmaemu.accumulate(a, b, use_fast_accum=fast, backend="reference", profile=profile, splitk=splitk)
    with _portable(False):
        got = mmaemu.accumulate(a, b, use_fast_accum=fast, backend="cpu", profile=profile, splitk=splitk)
    with _portable(True):
        portable = mmaemu.accumulate(a, b, use_fast_accum=fast, backend="cpu", profile=profile, splitk=splitk)
    assert torch.equal(_bits(got), _bits(want)), (got[_bits(got) != _bits(want)][:8], want[_bits(got) != _bits(want)][:8])
    assert torch.equal(_bits(portable), _bits(want))
    return want


def _codes(shape: tuple[int, ...], codes: list[int] | range, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    table = torch.tensor(list(codes), dtype=torch.int32)
    pick = torch.randint(0, len(table), shape, generator=gen)
    return table[pick].to(torch.uint8).view(dtype)


def test_capacity_bound_admits_the_shipped_presets_only_within_two_to_the_22() -> None:
    assert _cpu_fp8.expresses(get_preset("hopper")) and _cpu_fp8.expresses(get_preset("ada"))
    edge = Preset("edge", block_size=32, frac_bits=15, c_mode=CMode.ALIGNED, rounding=Rounding.TRUNCATE)
    over = Preset("over", block_size=33, frac_bits=15, c_mode=CMode.ALIGNED, rounding=Rounding.TRUNCATE)
    assert _cpu_fp8.expresses(edge) is False  # 32 * 2**17 + 2**16 > 2**22
    small = Preset("small", block_size=16, frac_bits=15, c_mode=CMode.ALIGNED, rounding=Rounding.TRUNCATE)
    assert _cpu_fp8.expresses(small)  # 16 * 2**17 + 2**16 <= 2**22
    assert not _cpu_fp8.expresses(over)
    nearest = Preset("nearest", block_size=32, frac_bits=13, c_mode=CMode.ALIGNED, rounding=Rounding.NEAREST_EVEN)
    assert not _cpu_fp8.expresses(nearest)


def test_block_bounds_follow_the_chains() -> None:
    starts, stops, first = _cpu_fp8.block_bounds([0, 70, 100], 32)
    assert starts.tolist() == [0, 32, 64, 70] and stops.tolist() == [32, 64, 70, 100] and first.tolist() == [0, 3, 4]


@needs_avx512
@pytest.mark.parametrize(("fmt_a", "fmt_b"), [(E4M3, E4M3), (E5M2, E4M3), (E4M3, E5M2), (E5M2, E5M2)])
def test_every_finite_code_against_every_finite_code(fmt_a: torch.dtype, fmt_b: torch.dtype) -> None:
    """Codes drawn from all finite codes (subnormals, +0 and -0, the extremes), both signs, odd M, N = 131."""
    gen = torch.Generator().manual_seed(11)
    finite = [c for c in range(256) if (c & 0x7F) < (0x7C if fmt_a == E5M2 else 0x7F)]
    finite_b = [c for c in range(256) if (c & 0x7F) < (0x7C if fmt_b == E5M2 else 0x7F)]
    a = _codes((37, 333), finite, gen, fmt_a)
    b = _codes((131, 333), finite_b, gen, fmt_b)
    _check(a, b)
    _check(a, b, fast=False, profile="ada")


@needs_avx512
def test_terms_partly_and_wholly_below_the_grid() -> None:
    """Large first products make c dominate; later blocks' products fall 1 to 20 binades below its grid."""
    gen = torch.Generator().manual_seed(12)
    k = 32 * 12
    scale = torch.ones(k)
    scale[:32] = 400.0  # block 0: |c| grows to about 2**20
    scale[32:] *= 2.0 ** -torch.arange(k - 32).remainder(24).float()  # later: products down to 2**-30
    a = ((torch.rand(19, k, generator=gen) * 2 - 1) * scale).to(E4M3)
    b = ((torch.rand(70, k, generator=gen) * 2 - 1) * 3).to(E4M3)
    _check(a, b)
    _check(a, b, fast=False)
    _check(a, b, splitk=(3, "contiguous"))


@needs_avx512
@pytest.mark.parametrize("lead_blocks", [1, 3, 12, 60, 400])
def test_grids_far_above_the_products_lowest_bits(lead_blocks: int) -> None:
    """E5M2's largest products first (c grows to 2**36 .. 2**45, so the grid exponent E - F reaches 23 to
    32), then large products of both signs whose lowest set bit lies just below, at or above that grid
    (exponents 7 + 13 up to 15 + 15): the kernel's count of negative products below the grid at grids above 20,
    and at its clamp (the lowest bits of live products end at 30)."""
    gen = torch.Generator().manual_seed(lead_blocks)
    k = 32 * (lead_blocks + 3)
    a = torch.full((3, k), 57344.0)
    b = torch.full((66, k), 57344.0)
    tail = 32 * lead_blocks
    mags = torch.tensor([640.0, 768.0, 1024.0, 1280.0, 5120.0, 20480.0, 57344.0, 49152.0, 40960.0, 32768.0])
    pick = torch.randint(0, len(mags), (66, k - tail), generator=gen)
    signs = torch.randint(0, 2, (66, k - tail), generator=gen).float() * 2 - 1
    b[:, tail:] = mags[pick] * signs
    a[1, tail:] = -57344.0
    a[2, tail::2] = 40960.0  # 5 * 2**13
    a[0, tail::3] = 32768.0  # 2**15: products whose lowest bit is 2**30
    _check(a.to(E5M2), b.to(E5M2))
    _check(a.to(E5M2), b.to(E5M2), fast=False)


@needs_avx512
def test_largest_and_smallest_products_and_c_truncation() -> None:
    """448 * 448 with 2**-9 * 2**-9 (E4M3's smallest subnormal) in one block, and c's truncated low bits."""
    k = 96
    a = torch.full((4, k), 2.0**-9)
    b = torch.full((65, k), 2.0**-9)
    a[0, 0], b[:, 0] = 448.0, 448.0  # one huge product in block 0, every other product 2**-18
    a[1, 33], b[:, 33] = -448.0, 448.0  # block 1: c ~ 2**17.6, then a product of -2**17.6
    a[2, ::7] = -0.0  # -0 operands: zero products
    a[3] = torch.tensor([(-1.0) ** i * 2.0 ** (i % 17 - 8) for i in range(k)])
    _check(a.to(E4M3), b.to(E4M3))


@needs_avx512
def test_every_sign_pair_and_cancellation() -> None:
    """Rows x and -x against columns x and -x: the four sign pairs, and x.x against (-x).x."""
    gen = torch.Generator().manual_seed(13)
    x = (torch.randn(1, 200, generator=gen) * 30).to(E4M3)
    both = torch.cat([x, (-x.float()).to(E4M3)])
    got = _check(both, both)
    assert torch.equal(_bits(got[0, 0]), _bits(got[1, 1])) and torch.equal(_bits(got[0, 1]), _bits(got[1, 0]))
    assert torch.equal(_bits(got[0, 1]), _bits(-got[0, 0]))  # sign-magnitude truncation is odd
    halves = torch.cat([x, (-x.float()).to(E4M3)], dim=1)  # x.x - x.x over one chain
    _check(halves, torch.cat([x, x], dim=1))


@needs_avx512
def test_exact_zero_sum_is_plus_zero() -> None:
    """A block whose terms cancel exactly ends at P == N: +0, never -0."""
    a = torch.tensor([[1.0, -1.0] * 16, [-2.0, 2.0] * 16]).to(E4M3)
    b = torch.ones(3, 32).to(E4M3)
    with _portable(False):
        got = mmaemu.accumulate(a, b, use_fast_accum=True, splitk=1, backend="cpu")
    assert _bits(got).eq(0).all()


@needs_avx512
def test_nan_and_inf_rows() -> None:
    gen = torch.Generator().manual_seed(14)
    a = (torch.randn(6, 100, generator=gen) * 20).to(E5M2)
    b = (torch.randn(67, 100, generator=gen) * 20).to(E5M2)
    av, bv = a.view(torch.uint8).clone(), b.view(torch.uint8).clone()
    av[1, 5] = 0x7C  # +Inf
    av[2, 50] = 0xFC  # -Inf
    av[3, 7] = 0x7E  # NaN
    bv[4, 99] = 0x7C
    bv[5, 0] = 0x00  # +0 against row 1's Inf: Inf * 0 stays out of this column's products
    _check(av.view(E5M2), bv.view(E5M2))
    e4 = (torch.randn(5, 64, generator=gen) * 20).to(E4M3)
    e4v = e4.view(torch.uint8).clone()
    e4v[2, 3] = 0x7F  # E4M3 NaN
    _check(e4v.view(E4M3), (torch.randn(9, 64, generator=gen) * 20).to(E4M3))


@needs_avx512
@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (2, 31, 64), (3, 33, 65), (5, 200, 127), (17, 1000, 300)])
def test_shapes_short_blocks_and_panel_edges(m: int, k: int, n: int) -> None:
    gen = torch.Generator().manual_seed(m * 1000 + n)
    a = (torch.randn(m, k, generator=gen) * 40).clamp(-448, 448).to(E4M3)
    b = (torch.randn(n, k, generator=gen) * 40).clamp(-448, 448).to(E4M3)
    _check(a, b)
    _check(a, b, fast=False)


@needs_avx512
@pytest.mark.parametrize("splitk", [(2, "contiguous"), (4, "contiguous")])
def test_splits(splitk: tuple[int, str]) -> None:
    gen = torch.Generator().manual_seed(15)
    a = (torch.randn(9, 1024, generator=gen) * 40).clamp(-448, 448).to(E4M3)
    b = (torch.randn(100, 1024, generator=gen) * 40).clamp(-448, 448).to(E4M3)
    _check(a, b, splitk=splitk)


@needs_avx512
def test_ada_splits_serial_and_pairwise() -> None:
    gen = torch.Generator().manual_seed(16)
    a = (torch.randn(7, 512, generator=gen) * 40).clamp(-448, 448).to(E5M2)
    b = (torch.randn(70, 512, generator=gen) * 40).clamp(-448, 448).to(E4M3)
    _check(a, b, profile="ada", splitk=(2, "serial"))
    _check(a, b, profile="ada", splitk=(3, "pairwise"), fast=False)


@needs_avx512
def test_against_the_slow_model() -> None:
    """A few outputs of a hard case, bit for bit from the Fraction-exact slow model (independent of mmaemu)."""
    gen = torch.Generator().manual_seed(17)
    finite = [c for c in range(256) if (c & 0x7F) < 0x7F]
    a = _codes((3, 70), finite, gen, E4M3)
    b = _codes((5, 70), finite, gen, E4M3)
    with _portable(False):
        got = mmaemu.accumulate(a, b, use_fast_accum=True, splitk=1, backend="cpu")
    hopper = get_preset("hopper")
    for i in range(3):
        for j in range(5):
            want = slowmodel.dot(a[i].view(torch.uint8).tolist(), b[j].view(torch.uint8).tolist(), 0,
                                 "e4m3", "e4m3", hopper.block_size, hopper.frac_bits)
            assert int(_bits(got)[i, j]) & 0xFFFFFFFF == want
