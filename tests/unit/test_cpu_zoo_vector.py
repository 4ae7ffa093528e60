"""The cpu backend's vector zoo kernel (``mmaemu.backends._cpu_zoo_vector``) at the edges of its formulation.

The kernel starts each block's int32 sum with c's term, truncates the sum to fp32, and leaves c
alone in lanes whose E is below its range. These tests aim at what that could get wrong: sums just
below 2**31 and, with c's term, past it (B = 16, F = 25, the largest products and c of the same
exponent: the int32 sum wraps and the block takes the float64 end), sums in [2**30, 2**31) that
did not wrap, c far below the products' range after a cancellation (the lanes that keep
c), operand exponents at the edges of [EMIN, EMAX] and just outside (rows recomputed in float64),
split plans with their permuted k (the backend protocol takes any plan), odd row counts and N not a
multiple of the 64-column panel. Expected bits come from the reference backend; the loop kernels
(``MMAEMU_CPU_PORTABLE=1``) are checked against the same bits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

import mmaemu
from mmaemu._accumulation import plan_accumulation
from mmaemu.presets import Architecture
from mmaemu.quantization import round_to_tf32
from mmaemu._split import Scheme, SplitK
from mmaemu.testing import assert_bitwise_equal

cpu = pytest.importorskip("mmaemu.backends._cpu")
if not cpu.available()[0]:  # pragma: no cover
    pytest.skip("numba is not installed", allow_module_level=True)
from mmaemu.backends import _cpu_zoo, _cpu_zoo_vector, _reference as reference  # noqa: E402


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


def _check(a: torch.Tensor, b: torch.Tensor, preset: str) -> None:
    """cpu (vector kernel), cpu (loop kernels) and the reference backend give the same bits."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.ExperimentalPresetWarning)
        want = mmaemu.accumulate(a, b, use_fast_accum=True, preset=preset, backend="reference")
        for portable in (False, True):
            with _portable(portable):
                got = mmaemu.accumulate(a, b, use_fast_accum=True, preset=preset, backend="cpu")
            assert_bitwise_equal(got, want)


def test_the_zoo_presets_run_on_the_vector_kernel() -> None:
    for (arch, fmt), preset in mmaemu.presets.ZOO.items():
        assert _cpu_zoo_vector.expresses(preset), (arch, fmt)
    with _portable(False):
        assert _cpu_zoo._use_vector(mmaemu.presets.ZOO[(Architecture.HOPPER, mmaemu.formats.WideFormat.FP16)])
    with _portable(True):
        assert not _cpu_zoo._use_vector(mmaemu.presets.ZOO[(Architecture.HOPPER, mmaemu.formats.WideFormat.FP16)])


def test_the_wrap_check_where_the_terms_and_c_may_pass_int32() -> None:
    """The blocks' sums are checked for an int32 wrap exactly where B 2**(F + 2) + 2**(F + 1) >= 2**31:
    the B = 16, F = 25 presets (hopper and b200 fp16 and bf16)."""
    for (arch, fmt), preset in mmaemu.presets.ZOO.items():
        wide = arch in (Architecture.HOPPER, Architecture.B200) and fmt is not mmaemu.formats.WideFormat.TF32
        assert _cpu_zoo_vector.may_wrap(preset) is wide, (arch, fmt)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("preset", ["hopper", "b200", "ampere", "volta"])
def test_sums_just_below_two_to_the_31(dtype: torch.dtype, sign: float, preset: str) -> None:
    """Every product of the later blocks the largest of its exponent (0), one sign, and c of that exponent
    (the first block's one product, just below 2): with B = 16 and F = 25 the terms reach 2**31 - 2**22
    and c's term almost 2**26 more, so the int32 sum wraps (row 0) and the block takes the float64
    end; elsewhere (B <= 8, or tf32) the int32 sum reaches B 2**(F + 2) + 2**(F + 1) less a little,
    its largest (2**30 + 2**26 for hopper and b200 tf32). Row 1 mixes signs (a sum near 2**29);
    row 2 has 12 terms of one sign and 4 of the other per block (a sum near 2**30: checked, no
    wrap); row 3 one of each sign beside 14 zeros (far below)."""
    if preset == "volta" and dtype != torch.float16:
        pytest.skip("volta's zoo preset is fp16 only")
    top = 2.0 - (2.0**-7 if dtype == torch.bfloat16 else 2.0**-10)  # fp16 and tf32: 10 fraction bits
    k = 16 * 2 + 5  # a short last block too
    a = torch.full((5, k), top)
    b = torch.full((70, k), sign * top)
    a[:, 1:16] = 0.0
    b[:, 0] = sign * 1.0  # c = top after the first block
    a[1, 16::3] = -a[1, 16::3]  # a row of mixed signs beside the extremes
    a[2, 16::4] = -a[2, 16::4]  # 12 - 4 = 8 maximal terms per block: 2**30 less a little, plus c's
    a[3, 18:32] = 0.0
    a[3, 17] = -a[3, 17]
    b[7] = b[7] * 0.5
    if dtype == torch.float32:
        _check(round_to_tf32(a), round_to_tf32(b), preset)
    else:
        _check(a.to(dtype), b.to(dtype), preset)


@pytest.mark.parametrize("seed", range(12))
def test_random_blocks_that_wrap_int32(seed: int) -> None:
    """B = 16, F = 25 (hopper, b200): c in [1, 2) after the first block (one product), then blocks of
    products just below 4 (exponent 0, c's too), a few of the other sign: the int32 sums, c's term
    included, pass 2**31 in many lanes and stay just below it in others (removing the wrap test
    fails these)."""
    gen = torch.Generator().manual_seed(seed)
    k = 16 * int(torch.randint(2, 5, (1,), generator=gen)) + int(torch.randint(0, 16, (1,), generator=gen))
    near_two = torch.tensor([2 - 2.0**-10, 2 - 2.0**-9, 2 - 3 * 2.0**-10, 2 - 2.0**-8])
    a = near_two[torch.randint(0, 4, (6, k), generator=gen)]
    b = near_two[torch.randint(0, 4, (70, k), generator=gen)]
    a = a * torch.where(torch.rand(6, k, generator=gen) < 0.03, -1.0, 1.0)
    a = a * torch.where(torch.rand(6, 1, generator=gen) < 0.5, -1.0, 1.0)
    a[:, 1:16] = 0.0
    b[:, 0] = (torch.rand(70, generator=gen) + 1.0) / 2  # c = a b in [1, 2): the exponent of the products below
    for dtype in (torch.float16, torch.bfloat16):
        for preset in ("hopper", "b200"):
            _check(a.to(dtype), b.to(dtype), preset)


@pytest.mark.parametrize("preset", ["hopper", "ampere"])  # c's term at the block's end, and first
def test_c_far_below_the_products_range_keeps_its_bits(preset: str) -> None:
    """A cancellation leaves c = 2**-107 (below the kernel's E >= -100); blocks without a nonzero
    product keep c, and a later block of products at 2**-100 truncates it onto their grid."""
    k = 16 * 4
    a = torch.zeros(3, k)
    b = torch.zeros(66, k)
    a[:, 0] = 2.0**-50 * (1 + 2.0**-7)
    a[:, 1] = -(2.0**-50)
    b[:, 0] = 2.0**-50
    b[:, 1] = 2.0**-50
    a[:, 48] = 2.0**-50
    b[:, 48] = 2.0**-50 * torch.linspace(1, 1.9, 66)
    a[2, 49] = -(2.0**-44)
    b[:, 49] = 2.0**-50 * 1.5  # every operand in the kernel's range: no row is recomputed in float64
    _check(a.to(torch.bfloat16), b.to(torch.bfloat16), preset)


@pytest.mark.parametrize("fmt", ["bf16", "tf32"])
def test_exponents_at_the_edges_of_the_range_and_outside(fmt: str) -> None:
    """Operands at 2**EMIN and just below 2**(EMAX + 1) run on the vector kernel; one operand at
    2**(EMIN - 1) or 2**(EMAX + 1) sends its row (of A or of B) to the float64 kernel."""
    gen = torch.Generator().manual_seed(5)
    lo, hi = _cpu_zoo_vector.EMIN, _cpu_zoo_vector.EMAX
    a = torch.randn(9, 40, generator=gen)
    b = torch.randn(67, 40, generator=gen)
    a[0] = torch.where(torch.arange(40) % 2 == 0, 2.0**lo, 1.75 * 2.0**hi)
    b[0] = torch.where(torch.arange(40) % 3 == 0, -(2.0**lo), 1.5 * 2.0**hi)
    a[1, 3] = 2.0 ** (lo - 1)
    a[2, 4] = 2.0 ** (hi + 1)
    b[5, 6] = 2.0 ** (lo - 1)
    b[6, 7] = -(2.0 ** (hi + 1))
    if fmt == "tf32":
        _check(round_to_tf32(a), round_to_tf32(b), "ampere")
    else:
        _check(a.to(torch.bfloat16), b.to(torch.bfloat16), "ada")


@pytest.mark.parametrize("split", [SplitK(3, Scheme.SERIAL), SplitK(4, Scheme.PAIRWISE)])
@pytest.mark.parametrize("fast", [True, False])
def test_split_plans_through_the_backend_protocol(split: SplitK, fast: bool) -> None:
    """accumulate gives the zoo one chain; the backend takes any plan (chains, parts, k permuted)."""
    gen = torch.Generator().manual_seed(7)
    k = 300
    a = (torch.randn(7, k, generator=gen) * 3).to(torch.float16)
    b = (torch.randn(65, k, generator=gen) * 3).to(torch.float16)
    plan = plan_accumulation(k, fast=fast, split=split)
    preset = mmaemu.presets.ZOO[(Architecture.AMPERE, mmaemu.formats.WideFormat.FP16)]
    want = reference.accumulate(a, b, preset, plan)
    with _portable(False):
        got = _cpu_zoo.accumulate_wide(a, b, preset, plan).values
    assert_bitwise_equal(got, want)


_AVX2_RUN = textwrap.dedent("""
    import sys, warnings
    sys.path.insert(0, {tests!r})
    import torch, mmaemu
    from mmaemu.backends import _cpu_fp8, _cpu_simd
    from mmaemu.quantization import round_to_tf32
    from mmaemu.testing import assert_bitwise_equal
    assert not _cpu_simd.available() and not _cpu_fp8.available(), "compiled for AVX-512"
    warnings.simplefilter("ignore")
    gen = torch.Generator().manual_seed(11)
    top = 2.0 - 2.0**-10
    a = (torch.randn(7, 37, generator=gen) * 4)
    b = (torch.randn(67, 37, generator=gen) * 4)
    a[0], b[0] = top, -top  # the largest products of one sign: sums near the int32 bound
    a[1, :16] = 2.0 ** -14
    a[2], b[1] = top, top  # c = top after the first block, then 16 products of 4 - 2**-8: hopper fp16 wraps int32
    a[2, 1:16], b[1, 0] = 0.0, 1.0
    for dtype, presets in ((torch.float16, ("volta", "ampere", "hopper")), (torch.bfloat16, ("ada", "b200")),
                           (torch.float32, ("ampere", "hopper"))):
        x, y = (round_to_tf32(a), round_to_tf32(b)) if dtype == torch.float32 else (a.to(dtype), b.to(dtype))
        for preset in presets:
            want = mmaemu.accumulate(x, y, use_fast_accum=True, preset=preset, backend="reference")
            assert_bitwise_equal(mmaemu.accumulate(x, y, use_fast_accum=True, preset=preset, backend="cpu"), want)
    print("avx2 paths ok")
""")


def test_the_avx2_paths_where_numba_targets_a_cpu_without_avx512(tmp_path: Path) -> None:
    """NUMBA_CPU_NAME=haswell: numba compiles for an AVX2 CPU (what a machine without AVX-512 runs), so
    on any x86-64 machine this checks the vector kernel's non-AVX-512 block end (c first: a float64
    conversion and a mask instead of ``vcvtdq2ps {rz-sae}``), its float64 end (sums near and past
    the int32 bound) and the float64 kernel, against the reference backend; ``_cpu_simd.available()``
    must say False there (else the AVX-512 FP8 kernel's intrinsics would not compile)."""
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("haswell is an x86-64 target")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(NUMBA_CPU_NAME="haswell", MMAEMU_CACHE_DIR=str(tmp_path), MMAEMU_CPU_PORTABLE="0")
    code = _AVX2_RUN.format(tests=str(Path(__file__).resolve().parents[1]))
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "avx2 paths ok" in run.stdout, run.stderr[-3000:]
