"""Differential test: every compiled backend against the reference backend, bit for bit.

The backends are the capability table's (``compiled_backend`` fixture, tests/conftest.py): the cpu
backend, and the Triton kernels in Triton's interpreter (eight configurations in CI, all with
``--full``).

240 FP8 configurations (preset x format pair x accumulation x split x data kind), and 65 of the
zoo formats (13 presets x data kind), each one GEMM of random or adversarial operands from a seeded
generator. CI runs 32 x 32 outputs per configuration (245,760 FP8 outputs); ``--full`` (or
``MMAEMU_FULL=1``) runs 72 x 64 (1,105,920).
The reference backend is itself checked against the hardware and the independent slow model
elsewhere; here the question is only whether the fast path gives the same bits.
"""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch

import mmaemu
from mmaemu._accumulation import CONTIGUOUS_TILE, MAX_EMPTY_PARTS, ROUND_ROBIN_TILE
from conftest import FULL
from mmaemu.testing import assert_bitwise_equal

M, N = (72, 64) if FULL else (32, 32)
PRESETS = ("hopper", "ada")
PAIRS = ((torch.float8_e4m3fn, torch.float8_e4m3fn), (torch.float8_e4m3fn, torch.float8_e5m2),
         (torch.float8_e5m2, torch.float8_e4m3fn))
SPLITS = (1, (3, "contiguous"), (4, "serial"), (5, "pairwise"))
KINDS = ("normal", "all_codes", "cancellation", "wide_range", "sparse")
KS = (1, 17, 100, 128, 200, 257, 384, 500)
CONFIGS = list(itertools.product(PRESETS, PAIRS, (True, False), SPLITS, KINDS))


def _operand(kind: str, rows: int, k: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    top = 448.0 if dtype == torch.float8_e4m3fn else 57344.0
    if kind == "normal":
        x = torch.randn(rows, k, generator=gen) * 30
    elif kind == "all_codes":  # every code, NaN and Inf codes included
        return torch.randint(0, 256, (rows, k), generator=gen, dtype=torch.int32).to(torch.uint8).view(dtype)
    elif kind == "cancellation":  # each row holds x and -x: exact sums near zero, truncation decides
        half = torch.randn(rows, (k + 1) // 2, generator=gen) * 8
        x = torch.cat([half, -half], 1)[:, :k]
        x = x[:, torch.randperm(k, generator=gen)]
    elif kind == "wide_range":  # magnitudes from subnormal to the largest finite: products far apart
        exps = torch.randint(-20, 16, (rows, k), generator=gen).to(torch.float32)
        x = torch.sign(torch.randn(rows, k, generator=gen)) * torch.exp2(exps) * (1 + torch.rand(rows, k, generator=gen))
    else:  # sparse: mostly zeros (both signs), whole zero blocks
        x = torch.randn(rows, k, generator=gen) * 4
        x = torch.where(torch.rand(rows, k, generator=gen) < 0.85, torch.zeros(()), x)
        x = torch.where(torch.rand(rows, k, generator=gen) < 0.5, x, -x)
    return x.clamp(-top, top).to(dtype)


@pytest.mark.parametrize(("preset", "pair", "fast", "split", "kind"), CONFIGS)
def test_backend_equals_reference_backend(compiled_backend: str, preset: str, pair: tuple[torch.dtype, torch.dtype],
                                          fast: bool, split: int | tuple[int, str], kind: str) -> None:
    index = CONFIGS.index((preset, pair, fast, split, kind))
    gen = torch.Generator().manual_seed(index)
    k = KS[index % len(KS)]
    if isinstance(split, tuple):  # at most MAX_EMPTY_PARTS parts without a k-tile are accepted
        width = CONTIGUOUS_TILE if split[1] == "contiguous" else ROUND_ROBIN_TILE
        k = max(k, (split[0] - MAX_EMPTY_PARTS - 1) * width + 1)
    a = _operand(kind, M, k, pair[0], gen)
    b = _operand(kind, N, k, pair[1], gen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnverifiedSplitWarning)
        got = mmaemu.accumulate(a, b, use_fast_accum=fast, splitk=split, profile=preset, backend=compiled_backend)
        want = mmaemu.accumulate(a, b, use_fast_accum=fast, splitk=split, profile=preset, backend="reference")
    assert_bitwise_equal(got, want)


# ---- the zoo formats (fp16, bf16, tf32): one chain over K (accumulate's only mode for them)

ZOO_KINDS = ("normal", "all_codes", "cancellation", "wide_range", "sparse")
ZOO_CONFIGS = [(arch.value, fmt.short_name, kind) for (arch, fmt) in mmaemu.presets.ZOO for kind in ZOO_KINDS]
_ZOO_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32}


def _zoo_operand(kind: str, rows: int, k: int, fmt: str, gen: torch.Generator) -> torch.Tensor:
    dtype = _ZOO_DTYPE[fmt]
    if kind == "all_codes":  # every bit pattern: subnormals, the largest values, Inf and NaN
        if fmt == "tf32":
            bits = torch.randint(0, 1 << 19, (rows, k), generator=gen, dtype=torch.int64) << 13
            return torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32).view(torch.float32)
        bits = torch.randint(0, 1 << 16, (rows, k), generator=gen, dtype=torch.int32)
        return torch.where(bits >= 2**15, bits - 2**16, bits).to(torch.int16).view(dtype)
    if kind == "normal":
        x = torch.randn(rows, k, generator=gen) * 3
    elif kind == "cancellation":
        half = torch.randn(rows, (k + 1) // 2, generator=gen) * 8
        x = torch.cat([half, -half], 1)[:, :k]
        x = x[:, torch.randperm(k, generator=gen)]
    elif kind == "wide_range":  # subnormal to huge: the cpu backend's float64 rows, products beyond fp32
        low, high = (-25, 16) if fmt == "fp16" else (-134, 128)
        exps = torch.randint(low, high, (rows, k), generator=gen).to(torch.float64)
        x64 = torch.sign(torch.randn(rows, k, generator=gen, dtype=torch.float64)) * torch.exp2(exps) \
            * (1 + torch.rand(rows, k, generator=gen, dtype=torch.float64))
        x = x64.to(torch.float32) if fmt != "fp16" else x64.to(torch.float16).float()
    else:
        x = torch.randn(rows, k, generator=gen) * 4
        x = torch.where(torch.rand(rows, k, generator=gen) < 0.85, torch.zeros(()), x)
        x = torch.where(torch.rand(rows, k, generator=gen) < 0.5, x, -x)
    return mmaemu.quantization.round_to_tf32(x) if fmt == "tf32" else x.to(dtype)


@pytest.mark.parametrize(("preset", "fmt", "kind"), ZOO_CONFIGS)
def test_zoo_backend_equals_reference_backend(compiled_backend: str, preset: str, fmt: str, kind: str) -> None:
    index = ZOO_CONFIGS.index((preset, fmt, kind))
    gen = torch.Generator().manual_seed(1000 + index)
    k = KS[index % len(KS)]
    a = _zoo_operand(kind, M, k, fmt, gen)
    b = _zoo_operand(kind, N, k, fmt, gen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.ExperimentalPresetWarning)
        got = mmaemu.accumulate(a, b, use_fast_accum=True, splitk=1, preset=preset, backend=compiled_backend)
        want = mmaemu.accumulate(a, b, use_fast_accum=True, splitk=1, preset=preset, backend="reference")
    assert_bitwise_equal(got, want)


def test_the_output_count() -> None:
    assert len(CONFIGS) == 240
    assert len(ZOO_CONFIGS) == 65
    assert len(CONFIGS) * M * N == (1_105_920 if FULL else 245_760)
