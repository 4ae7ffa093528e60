"""The Triton backend's self-test: small fixed problems, once per device, kernel variant and process.

Each kernel variant (the preset's block size and fraction bits, and the launch tile, are
compile-time constants) runs a fixed set of small problems on the device the first time a call
uses it there: the shipped presets' variants when a device is first used, a fitted or registered
preset's variant on its first call, with data that stresses the model:
truncation boundaries (a few large products beside many small ones), exact cancellation,
subnormal operands, the largest exponents, zero blocks, K not a multiple of 16, 32 or 128, output
tiles cut by the matrix edge, M = 1, N = 1 and N not a multiple of 16, fast and slow accumulation,
every split scheme, and what a wrong sm_90 kernel could hide: program ids above 0 in both dimensions of
its 128 x 128 tile, the pairwise combination's held pair (S = 6), every FP8 format pair (E5M2 x E5M2
included) and K over 2**16 (the interpreter skips the cases only a compiled kernel can get wrong, and
K over 2**16, which takes minutes there: :attr:`SelfTestCase.compiled_only`). The expected bits
come from the reference backend on the CPU. A kernel that fails is not used on that device:
``backend="auto"`` falls back to the reference backend, and ``backend="triton"`` raises
:class:`~mmaemu.errors.BackendUnavailableError` naming the kernel and the reason.

The data are generated from fixed seeds, so every device runs the same problems.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..._accumulation import plan_accumulation
from ...presets import ADA, HOPPER, Preset
from ..._split import Scheme, SplitK
from .. import _reference as reference
from .._protocol import device_key
from . import backend
from .backend import (
    GPU_CONFIG,
    INTERPRETER_CONFIG,
    NATIVE_GPU_CONFIG,
    RZ_GENERAL_GPU_CONFIG,
    RZ_GPU_CONFIG,
    SMALL_GRID_TILES,
    Formulation,
    Launch,
    TileConfig,
    available,
    disable_native,
    expresses,
    formulation_for,
    interpreting,
    kernel_name,
)

__all__ = [
    "CASES",
    "KERNEL_PRESETS",
    "KernelResult",
    "SelfTestCase",
    "SelfTestReport",
    "adversarial_codes",
    "cached_report",
    "device_key",
    "selftest",
    "selftest_kernel",
    "variant_name",
]

#: The presets whose kernel specialisations the self-test checks (the shipped validated ones).
KERNEL_PRESETS: tuple[Preset, ...] = (HOPPER, ADA)

_FMT = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


@dataclass(frozen=True)
class SelfTestCase:
    """One fixed problem: ``a [m, k]`` of ``fmt_a`` times ``b [n, k]`` of ``fmt_b``."""

    name: str
    m: int
    n: int
    k: int
    fmt_a: str
    fmt_b: str
    fast: bool
    split: SplitK
    seed: int
    #: skipped where the kernels run in Triton's interpreter: what only a compiled kernel can get wrong (the
    #: sm_90 formulation's 128 x 128 tile and gathered layout, which the interpreter never launches by
    #: itself), and K over 2**16, whose per-k loop takes minutes there (milliseconds compiled)
    compiled_only: bool = False


#: Run for every kernel. M and N cut the GPU tiles; K covers short and padded blocks. The last six cover
#: what a wrong sm_90 kernel could hide: program ids above 0 in both dimensions of its 128 x 128 tile
#: (M, N > 128), the pairwise combination's held pair (S >= 6), E5M2 x E5M2 (each format pair is compiled
#: apart, in fast and in slow mode: every one of the eight runs here), K not a multiple of 16 (its
#: gathered layout) and K over 2**16.
CASES: tuple[SelfTestCase, ...] = (
    SelfTestCase("e4m3 x e4m3, fast, K=272", 33, 48, 272, "e4m3", "e4m3", True, SplitK(1, Scheme.NONE), 1),
    SelfTestCase("e4m3 x e5m2, slow, K=272", 17, 32, 272, "e4m3", "e5m2", False, SplitK(1, Scheme.NONE), 2),
    SelfTestCase("e5m2 x e4m3, fast, 3 contiguous parts", 9, 16, 400, "e5m2", "e4m3", True,
                 SplitK(3, Scheme.CONTIGUOUS), 3),
    SelfTestCase("e4m3 x e4m3, slow, 3 pairwise parts", 9, 16, 320, "e4m3", "e4m3", False,
                 SplitK(3, Scheme.PAIRWISE), 4),
    SelfTestCase("e4m3 x e5m2, fast, 2 serial parts", 9, 16, 208, "e4m3", "e5m2", True, SplitK(2, Scheme.SERIAL), 5),
    SelfTestCase("e4m3 x e4m3, fast, edge tiles, K=16", 70, 80, 16, "e4m3", "e4m3", True, SplitK(1, Scheme.NONE), 6),
    SelfTestCase("e4m3 x e4m3, fast, M=1, N=50", 1, 50, 96, "e4m3", "e4m3", True, SplitK(1, Scheme.NONE), 7),
    SelfTestCase("e5m2 x e4m3, slow, N=1", 21, 1, 160, "e5m2", "e4m3", False, SplitK(1, Scheme.NONE), 8),
    SelfTestCase("e4m3 x e5m2, fast, M=N=1, 2 serial parts", 1, 1, 48, "e4m3", "e5m2", True,
                 SplitK(2, Scheme.SERIAL), 9),
    SelfTestCase("e4m3 x e4m3, fast, M=130, N=136 (tiles past 128 in both)", 130, 136, 64, "e4m3", "e4m3", True,
                 SplitK(1, Scheme.NONE), 10, compiled_only=True),
    SelfTestCase("e4m3 x e4m3, fast, 6 pairwise parts (a held pair)", 3, 5, 400, "e4m3", "e4m3", True,
                 SplitK(6, Scheme.PAIRWISE), 11),
    SelfTestCase("e5m2 x e5m2, slow, 2 contiguous parts", 7, 9, 300, "e5m2", "e5m2", False,
                 SplitK(2, Scheme.CONTIGUOUS), 12),
    SelfTestCase("e5m2 x e5m2, fast, K=96", 3, 4, 96, "e5m2", "e5m2", True, SplitK(1, Scheme.NONE), 15),
    SelfTestCase("e4m3 x e5m2, slow, K=200 (not a multiple of 16)", 5, 6, 200, "e4m3", "e5m2", False,
                 SplitK(1, Scheme.NONE), 13, compiled_only=True),
    SelfTestCase("e4m3 x e4m3, fast, K=65600 (over 2**16), 2 contiguous parts", 2, 3, 65600, "e4m3", "e4m3", True,
                 SplitK(2, Scheme.CONTIGUOUS), 14, compiled_only=True),
)


@dataclass(frozen=True)
class KernelResult:
    """The self-test outcome of one kernel specialisation on one device."""

    kernel: str
    passed: bool
    reason: str


@dataclass(frozen=True)
class SelfTestReport:
    """The self-test outcome on one device.

    Attributes:
        device: the device, as ``str(torch.device)`` (``cuda:0``, ``cpu``).
        kernels: one result per kernel specialisation.
    """

    device: str
    kernels: tuple[KernelResult, ...]

    @property
    def passed(self) -> bool:
        """True when every kernel passed."""
        return all(k.passed for k in self.kernels)

    def failed(self) -> tuple[KernelResult, ...]:
        """The kernels that failed."""
        return tuple(k for k in self.kernels if not k.passed)

    def summary(self) -> str:
        """One line: the failed kernels and why, or that all passed."""
        bad = self.failed()
        if not bad:
            return f"all {len(self.kernels)} kernels passed"
        return "; ".join(f"kernel {k.kernel} failed: {k.reason}" for k in bad)


def adversarial_codes(rows: int, k: int, fmt: str, seed: int) -> torch.Tensor:
    """FP8 codes ``[rows, k]`` (no NaN or Inf) that stress truncation, cancellation and range.

    Each element comes from one of: any finite code; a narrow range around 1 (long carries and
    exact cancellations); the largest magnitude; subnormals; zeros. Odd rows repeat the first half
    of every 32-element block negated in the second half (exact cancellation within a block).
    """
    gen = torch.Generator().manual_seed(seed)
    codes = torch.arange(256, dtype=torch.int64)
    if fmt == "e4m3":
        finite = codes[(codes & 0x7F) != 0x7F]
        one, biggest, subnormal_max = 0x38, 0x7E, 0x07
    else:
        finite = codes[(codes & 0x7F) < 0x7C]
        one, biggest, subnormal_max = 0x3C, 0x7B, 0x03
    shape = (rows, k)
    wide = finite[torch.randint(0, finite.numel(), shape, generator=gen)]
    sign = torch.randint(0, 2, shape, generator=gen) << 7
    narrow = (one - 2 + torch.randint(0, 6, shape, generator=gen)) | sign
    big = biggest | sign
    tiny = torch.randint(1, subnormal_max + 1, shape, generator=gen) | sign
    zero = sign
    kind = torch.randint(0, 100, shape, generator=gen)
    out = torch.where(kind < 40, wide, narrow)
    out = torch.where((kind >= 70) & (kind < 78), big, out)
    out = torch.where((kind >= 78) & (kind < 88), tiny, out)
    out = torch.where(kind >= 95, zero, out)
    for start in range(0, k - 31, 32):
        out[1::2, start + 16 : start + 32] = out[1::2, start : start + 16] ^ 0x80
    return out.to(torch.uint8).view(_FMT[fmt])


def _operands(case: SelfTestCase) -> tuple[torch.Tensor, torch.Tensor]:
    a = adversarial_codes(case.m, case.k, case.fmt_a, case.seed)
    b = adversarial_codes(case.n, case.k, case.fmt_b, case.seed + 1000)
    return a, b


def variant_name(preset: Preset, device: torch.device) -> str:
    """The kernel variant a call with ``preset`` runs on ``device``: specialisation and launch tile."""
    def tile(t: TileConfig) -> str:
        return f"{t.block_m}x{t.block_n}/{t.num_warps}w"

    if device.type == "cpu" or interpreting():
        return f"{kernel_name(preset)} tile {tile(INTERPRETER_CONFIG)}"
    formulation = formulation_for(preset, device)
    if formulation is Formulation.NATIVE:
        return f"{kernel_name(preset, device)} tile {tile(NATIVE_GPU_CONFIG)} (the GPU's FP8 instruction)"
    if formulation is Formulation.RZ:
        small = ", ".join(tile(t) for t in SMALL_GRID_TILES)
        return (f"{kernel_name(preset)} tiles {tile(RZ_GPU_CONFIG)}, general {tile(RZ_GENERAL_GPU_CONFIG)}, "
                f"few outputs {small} (one program per tile, and per chain and tile)")
    return f"{kernel_name(preset)} tile {tile(GPU_CONFIG)}"


def _launches(preset: Preset, device: torch.device, n_chains: int) -> list[Launch | None]:
    """Every launch a call with ``preset`` and a plan of ``n_chains`` chains may use on ``device`` (None: the
    default one): the self-test runs each case with each, so every compiled variant that
    :func:`~mmaemu.backends._triton.backend.choose_launch` can pick is checked before its first use."""
    if formulation_for(preset, device) is not Formulation.RZ:
        return [None]
    if device.type == "cpu" or interpreting():
        return [None] if n_chains == 1 else [None, Launch(INTERPRETER_CONFIG, True)]
    if n_chains == 1:  # one chain: the default tile or a smaller one, one program per tile
        return [None] + [Launch(t, False) for t in SMALL_GRID_TILES]
    return [None, Launch(RZ_GENERAL_GPU_CONFIG, False)] + [Launch(t, True) for t in SMALL_GRID_TILES]


def _check_kernel(preset: Preset, device: torch.device) -> KernelResult:
    name = variant_name(preset, device)
    runs = 0
    interpreted = device.type == "cpu" or interpreting()
    cases = [case for case in CASES if not (interpreted and case.compiled_only)]
    for case in cases:
        a, b = _operands(case)
        plan = plan_accumulation(case.k, fast=case.fast, split=case.split)
        expected = reference.accumulate(a, b, preset, plan)
        launches = _launches(preset, device, sum(len(chains) for chains in plan.parts))
        runs += len(launches)
        for launch in launches:
            how = "" if launch is None else (f" (tile {launch.tile.block_m}x{launch.tile.block_n}/"
                                             f"{launch.tile.num_warps}w, parallel chains {launch.parallel_chains})")
            try:  # the kernels alone: the problems hold no NaN or Inf code, so no rule of the dispatcher applies
                got = backend.accumulate(a.to(device), b.to(device), preset, plan, launch=launch).values.cpu()
            except Exception as exc:  # noqa: BLE001 - any failure to compile or run disqualifies the kernel
                return KernelResult(name, False, f"case {case.name!r}{how} raised {type(exc).__name__}: {exc}")
            if got.shape != expected.shape:
                return KernelResult(name, False, f"case {case.name!r}{how}: shape {tuple(got.shape)}, expected "
                                    f"{tuple(expected.shape)}")
            got_bits, want_bits = got.view(torch.int32), expected.view(torch.int32)
            differ = got_bits != want_bits
            if bool(differ.any()):
                i, j = (int(v) for v in differ.nonzero()[0])
                return KernelResult(
                    name, False,
                    f"case {case.name!r}{how}: {int(differ.sum())} of {differ.numel()} outputs differ from the "
                    f"reference backend; first at ({i}, {j}): 0x{int(got_bits[i, j]) & 0xFFFFFFFF:08x}, expected "
                    f"0x{int(want_bits[i, j]) & 0xFFFFFFFF:08x}",
                )
    skipped = len(CASES) - len(cases)
    note = f"; {skipped} compiled-only problems skipped in the interpreter" if skipped else ""
    return KernelResult(name, True, f"{len(cases)} problems bit-exact ({runs} runs: every launch it may use){note}")


_REPORTS: dict[str, SelfTestReport] = {}
_VARIANTS: dict[tuple[str, str], KernelResult] = {}


def cached_report(device: torch.device) -> SelfTestReport | None:
    """The self-test report of ``device`` if it already ran in this process."""
    return _REPORTS.get(device_key(device))


def selftest(device: torch.device | str, *, refresh: bool = False) -> SelfTestReport:
    """Run (once per device and process; cached) the self-test of every Triton kernel on ``device``.

    Args:
        device: where the kernels run (a CUDA device; under ``TRITON_INTERPRET=1`` also ``cpu``).
        refresh: run again even if a report is cached.

    Returns:
        The report; when Triton cannot run on the device, every kernel is reported failed with the
        reason. Never raises for a failing kernel.
    """
    dev = torch.device(device)
    key = device_key(dev)
    if not refresh and key in _REPORTS:
        return _REPORTS[key]
    report = SelfTestReport(key, tuple(selftest_kernel(dev, p, refresh=refresh) for p in KERNEL_PRESETS))
    _REPORTS[key] = report
    return report


def selftest_kernel(device: torch.device | str, preset: Preset, *, refresh: bool = False) -> KernelResult:
    """Run (once per device, kernel variant and process; cached) the self-test of the kernel variant
    that runs ``preset`` on ``device``.

    A preset the kernel does not express (it runs on the reference backend whole) passes without a
    run. A result in the device's cached report (:func:`selftest`) is reused.

    Returns:
        The result; never raises for a failing kernel.
    """
    dev = torch.device(device)
    key = device_key(dev)
    target = torch.device(key)
    name = variant_name(preset, target)
    if not expresses(preset):
        return KernelResult(name, True, "not expressed by the kernel: the reference backend runs it")
    if not refresh:
        if (key, name) in _VARIANTS:
            return _VARIANTS[(key, name)]
        cached = _REPORTS.get(key)
        if cached is not None:
            for k in cached.kernels:
                if k.kernel == name:
                    return k
    usable, reason = available(target)
    result = _check_kernel(preset, target) if usable else KernelResult(name, False, reason)
    _VARIANTS[(key, name)] = result
    if usable and not result.passed and formulation_for(preset, target) is Formulation.NATIVE:
        # the GPU's own instruction disagrees with the model here: never use it on this device, and
        # self-test the exactly-defined formulation that runs instead
        disable_native(target)
        fallback = selftest_kernel(target, preset, refresh=refresh)
        return KernelResult(fallback.kernel, fallback.passed,
                            f"{fallback.reason}; the sm_90 formulation is off on {key}: {result.reason}")
    return result
