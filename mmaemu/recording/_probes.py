"""Probes of a GPU's FP8 GEMM numerics, and the analysis that names the model they fit.

A probe is one ``torch._scaled_mm(a, b.t(), 1, 1, out_dtype=float32)`` call whose inputs are built to
make the emulator's candidate models disagree. The analysis (pure CPU) runs every candidate through the
reference backend and keeps those whose bits equal the GPU's, in three stages:

1. **arithmetic** (fast accumulation, unsplit; one E4M3 x E4M3 and one E5M2 x E4M3 call): candidates
   ``(block size, fraction bits, how c enters, rounding)``; the designed rows are

   - *block*: ``p`` small products, then a large one at position ``p`` (p = 4 ... 128): the small ones
     survive only when a block boundary separates them from the large one (block size <= p);
   - *fraction*: a large product and one ``2**-f`` below it: it survives only with >= f fraction bits;
   - *c*: a chain builds ``c = 1 + 2**-9``, then a large product arrives in a later block: ``c``'s low
     bits are lost if c is aligned and truncated with the products, kept if c is added afterwards in fp32;
   - random codes over the whole finite range, for everything else;

2. **slow interval** (slow accumulation, K = 1024, unsplit): a large product at k = 0 and small ones
   every 32 elements: the small ones in chains that do not hold k = 0 survive, so their count gives the
   interval (16 ... 1024) after which a fresh chain starts;

3. **split-K** (the shapes the recorder found cuBLAS splitting): one product of random exponent per
   64-wide k-tile; which tiles meet in a part, and the fp32 order of the part sums, change the bits.
   Candidates: contiguous 128-wide tiles added serially, round-robin 64-wide tiles added serially or
   pairwise (:mod:`mmaemu._accumulation`).

The verdict names the shipped preset that fits (``hopper``, ``ada``, ``b200_mma_sync``, ``sm120``), or the
single candidate that fits outside them, or says that none fits. The arithmetic rows tell the two Blackwell
candidates apart (``b200_mma_sync``: B = 32, F = 25, c added after the block by a rounded fp32 addition, the
sum rounded to nearest; ``sm120``: the same block with c aligned and the sum truncated), so a recording on an
sm_120 GPU confirms or refutes ``sm120`` (:func:`mmaemu.recording._verdict.sm120_note`).
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .._accumulation import SLOW_CHUNK, AccumulationPlan, cut_chains, plan_accumulation
from ..backends import _reference as reference
from .._epilogue import BiasOrder, epilogue
from ..formats import Fp8Format
from ..presets import (
    ADA,
    B200_MMA_SYNC,
    HOPPER,
    SM120,
    CMode,
    Maturity,
    Preset,
    Rounding,
)
from .._split import Scheme, SplitFamily, SplitK

__all__ = [
    "CANDIDATES", "NAMED", "SLOW_INTERVALS", "Candidate", "ProbeInput", "ProbeResult", "ProbeStage", "ProbeVerdict",
    "analyse", "candidate_plan", "one_thread", "split_probe", "unsplit_probes"
]

PROBES_FORMAT = "mmaemu-probes/1"
#: The output corner a split probe's analysis compares (rows, columns).
CORNER = (16, 16)
#: Candidate slow-accumulation intervals (elements of K per chain).
SLOW_INTERVALS = (16, 32, 64, 128, 256, 512, 1024)


class ProbeStage(enum.Enum):
    """Which question a probe answers."""

    ARITHMETIC = "arithmetic"
    SLOW_INTERVAL = "slow-interval"
    SPLIT = "split"


@dataclass(frozen=True)
class ProbeInput:
    """A probe call: ``a [M, K]`` and ``b [N, K]`` FP8 tensors, fp32 output, unit scales.

    Attributes:
        name: unique name.
        stage: what it answers.
        a: mat1 ``[M, K]``.
        b: ``[N, K]`` (the call passes ``b.t()``).
        fast: ``use_fast_accum``.
    """

    name: str
    stage: ProbeStage
    a: torch.Tensor = field(repr=False)
    b: torch.Tensor = field(repr=False)
    fast: bool

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(M, N, K)``."""
        return int(self.a.shape[0]), int(self.b.shape[0]), int(self.a.shape[1])


@dataclass(frozen=True)
class ProbeResult:
    """What the GPU returned for a probe.

    Attributes:
        probe: the probe (its ``a`` and ``b`` may be cut to the compared corner).
        output: fp32 output (the whole output, or its top-left corner for split probes).
        S: the heuristic's split for the call.
        custom: its customOption.
    """

    probe: ProbeInput
    output: torch.Tensor = field(repr=False)
    S: int = 1
    custom: int = 0


@dataclass(frozen=True)
class Candidate:
    """A candidate tensor-core arithmetic (the fields of :class:`~mmaemu.model.Preset`)."""

    block_size: int
    frac_bits: int
    c_mode: CMode
    rounding: Rounding

    def preset(self) -> Preset:
        """The shipped preset with these fields, else an experimental one named after them."""
        for shipped in NAMED:
            if Candidate.of(shipped) == self:
                return shipped
        return Preset(self.name, block_size=self.block_size, frac_bits=self.frac_bits, c_mode=self.c_mode,
                      rounding=self.rounding, maturity=Maturity.EXPERIMENTAL, source="fitted by mmaemu probes")

    @property
    def name(self) -> str:
        """``"B32-F13-aligned-truncate"``-style name."""
        return f"B{self.block_size}-F{self.frac_bits}-{self.c_mode.value}-{self.rounding.value}"

    @staticmethod
    def of(preset: Preset) -> Candidate:
        """The candidate of a preset."""
        return Candidate(preset.block_size, preset.frac_bits, preset.c_mode, preset.rounding)


#: The shipped FP8 presets a verdict names when their candidate fits: the validated GEMM presets, and the two
#: experimental Blackwell ones the probes exist to tell apart on a GPU (``b200_mma_sync``: c added last, the sum
#: rounded to nearest; ``sm120``: the paper's B200 model, c aligned and truncated).
NAMED: tuple[Preset, ...] = (HOPPER, ADA, B200_MMA_SYNC, SM120)

#: The candidates stage 1 searches: block size x fraction bits x c mode x rounding.
CANDIDATES: tuple[Candidate, ...] = tuple(
    Candidate(b, f, c, r)
    for b in (8, 16, 32, 64)
    for f in (10, 11, 12, 13, 14, 15, 16, 23, 24, 25)
    for c in (CMode.ALIGNED, CMode.ROUNDED_ADD)
    for r in (Rounding.TRUNCATE, Rounding.NEAREST_EVEN)
)

# --------------------------------------------------------------------------------------------------
# Probe construction
# --------------------------------------------------------------------------------------------------


def _fp8(values: np.ndarray, fmt: Fp8Format) -> torch.Tensor:
    """Exact FP8 tensor of ``values`` (each must be representable)."""
    t = torch.from_numpy(np.asarray(values, np.float32))
    q = t.to(fmt.dtype)
    if not torch.equal(q.float(), t):
        raise ValueError("probe value not representable in " + fmt.short_name)
    return q


def _finite_codes(rng: np.random.Generator, shape: tuple[int, ...], fmt: Fp8Format) -> np.ndarray:
    """Uniform random finite codes (zeros and subnormals included, no Inf/NaN)."""
    codes = rng.integers(0, 256, size=shape, dtype=np.int64).astype(np.uint8)
    if fmt is Fp8Format.E4M3:
        bad = (codes & 0x7F) == 0x7F
    else:
        bad = (codes & 0x7C) == 0x7C
    return np.where(bad, codes & 0xB3, codes).astype(np.uint8)  # clear exponent bits of Inf/NaN codes


def _b_rows(rng: np.random.Generator, k: int, fmt: Fp8Format = Fp8Format.E4M3) -> torch.Tensor:
    """16 b rows: +1, -1, 1/8, 2 everywhere, then 12 rows of random codes in a band."""
    rows = np.zeros((16, k), np.float32)
    for i, v in enumerate((1.0, -1.0, 0.125, 2.0)):
        rows[i] = v
    b = _fp8(rows, fmt)
    raw = rng.integers(0, 256, size=(12, k), dtype=np.int64)
    band = ((raw & 0x87) | (((raw >> 3) & 7) + 4) << 3).astype(np.uint8)  # E4M3 exponent field 4..11
    b[4:] = torch.from_numpy(band).view(fmt.dtype)
    return b


def _arithmetic_rows(fmt_a: Fp8Format, k: int, rows: int, rng: np.random.Generator) -> torch.Tensor:
    big_exp = 8 if fmt_a is Fp8Format.E4M3 else 15
    tiny_exp = -9 if fmt_a is Fp8Format.E4M3 else -16
    big = 2.0**big_exp
    designed: list[np.ndarray] = []
    small = 1.5 * 2.0**-6
    for p in (4, 8, 16, 32, 64, 128):  # block size
        r = np.zeros(k, np.float32)
        r[:p] = small
        r[p] = big if fmt_a is Fp8Format.E4M3 else 256.0
        designed.append(r)
    for f in range(9, big_exp - tiny_exp + 1):  # fraction bits
        r = np.zeros(k, np.float32)
        r[0], r[1] = big, 2.0 ** (big_exp - f)
        designed.append(r)
    for sign in (1.0, -1.0):  # how c enters
        for low in (-9, -7):
            r = np.zeros(k, np.float32)
            r[0], r[1], r[128] = 1.0, 2.0**low, sign * 256.0
            designed.append(r)
    r = np.zeros(k, np.float32)  # a sum that carries into the next binade
    r[:32] = 1.75
    designed.append(r)
    a = torch.zeros((rows, k), dtype=fmt_a.dtype)
    a[: len(designed)] = _fp8(np.stack(designed), fmt_a)
    filler = _finite_codes(rng, (rows - len(designed), k), fmt_a)
    a[len(designed):] = torch.from_numpy(filler).view(fmt_a.dtype)
    return a


def unsplit_probes(seed: int = 20260101) -> list[ProbeInput]:
    """The arithmetic and slow-interval probes (fixed shapes, unsplit on the GPUs recorded so far).

    Example:
        >>> [(p.name, p.shape, p.fast) for p in unsplit_probes()]  # doctest: +NORMALIZE_WHITESPACE
        [('arith-e4m3', (64, 16, 256), True), ('arith-e5m2', (64, 16, 256), True),
         ('slow-e4m3', (16, 16, 1024), False)]
    """
    rng = np.random.default_rng(seed)
    probes = []
    for fmt_a in (Fp8Format.E4M3, Fp8Format.E5M2):
        a = _arithmetic_rows(fmt_a, 256, 64, rng)
        probes.append(ProbeInput(f"arith-{fmt_a.short_name}", ProbeStage.ARITHMETIC, a, _b_rows(rng, 256), True))
    k = 1024
    designed = []
    for step in (32, 96):
        r = np.zeros(k, np.float32)
        r[0] = 256.0
        r[step::step] = 1.5 * 2.0**-6
        designed.append(r)
    r = np.zeros(k, np.float32)
    r[k - 1] = 256.0
    r[: k - 1 : 32] = 1.5 * 2.0**-6
    designed.append(r)
    a = torch.zeros((16, k), dtype=torch.float8_e4m3fn)
    a[:3] = _fp8(np.stack(designed), Fp8Format.E4M3)
    a[3:] = torch.from_numpy(_finite_codes(rng, (13, k), Fp8Format.E4M3)).view(torch.float8_e4m3fn)
    probes.append(ProbeInput("slow-e4m3", ProbeStage.SLOW_INTERVAL, a, _b_rows(rng, k), False))
    return probes


def split_probe(name: str, m: int, n: int, k: int, fast: bool, seed: int) -> ProbeInput:
    """A split-K probe of shape ``(M, N, K)`` (E4M3 x E4M3).

    Each a row holds one product per 64-wide k-tile: a subnormal (tiny) one, except for one or two tiles
    of the row that hold a large one. A part that owns no large tile keeps its tiny bits; added in fp32 to
    a large part sum they are rounded, and the order of the additions (and which tiles share a part)
    changes the bits. b rows: +1, -1, then random codes in a band of 8 binades.
    """
    rng = np.random.default_rng(seed)
    tiles = -(-k // 64)
    a_codes = np.zeros((m, k), np.uint8)
    sign = (rng.integers(0, 2, size=(m, tiles)) << 7).astype(np.int64)
    tiny = sign | rng.integers(1, 8, size=(m, tiles))  # exponent field 0: subnormal, 2**-9 .. 7 * 2**-9
    big = sign | (15 << 3) | rng.integers(0, 7, size=(m, tiles))  # 2**8 .. 1.75 * 2**8
    chosen = np.zeros((m, tiles), bool)
    for row in range(m):
        chosen[row, rng.choice(tiles, size=min(tiles, 1 + row % 2), replace=False)] = True
    codes = np.where(chosen, big, tiny).astype(np.uint8)
    pos = np.minimum(np.arange(tiles) * 64 + rng.integers(0, 64, size=(m, tiles)), k - 1)
    np.put_along_axis(a_codes, pos, codes, axis=1)
    b = np.ones((n, k), np.float32)
    b[1] = -1.0
    b_t = _fp8(b, Fp8Format.E4M3)
    if n > 2:
        raw = rng.integers(0, 256, size=(n - 2, k), dtype=np.int64)
        band = ((raw & 0x87) | (((raw >> 3) & 7) + 4) << 3).astype(np.uint8)
        b_t[2:] = torch.from_numpy(band).view(torch.float8_e4m3fn)
    return ProbeInput(name, ProbeStage.SPLIT, torch.from_numpy(a_codes).view(torch.float8_e4m3fn), b_t, fast)


# --------------------------------------------------------------------------------------------------
# Analysis
# --------------------------------------------------------------------------------------------------


def candidate_plan(k: int, fast: bool, split: SplitK, interval: int = SLOW_CHUNK) -> AccumulationPlan:
    """The emulator's plan with a slow-accumulation ``interval`` other than 128 (for the candidates)."""
    if fast or interval == SLOW_CHUNK:
        return plan_accumulation(k, fast=fast, split=split)
    base = plan_accumulation(k, fast=True, split=split)
    parts = tuple(cut_chains(base.part_sequence(i), interval) if chains else () for i, chains in enumerate(base.parts))
    return AccumulationPlan(k=k, fast=False, split=split, parts=parts, empty_parts=base.empty_parts)


def _bits(result: ProbeResult, preset: Preset, plan: AccumulationPlan) -> bool:
    """Whether ``preset`` under ``plan`` gives the GPU's bits (a small corner first, to reject early)."""
    a, b = result.probe.a, result.probe.b
    rows, cols = result.output.shape
    one = torch.tensor(1.0)
    for r, c in ((rows, 1), (rows, cols)):
        acc = reference.accumulate(a[:r], b[:c], preset, plan)
        out = epilogue(acc, one, one, out_dtype=torch.float32)
        if not torch.equal(out.view(torch.int32), result.output[:r, :c].contiguous().view(torch.int32)):
            return False
    return True


@dataclass(frozen=True)
class ProbeVerdict:
    """Which models fit a GPU's probe outputs.

    Attributes:
        candidates_tested: how many arithmetic candidates were tried.
        fitting: the arithmetic candidates that reproduce every arithmetic probe.
        shipped: names of the shipped presets among them.
        preset: the preset to use (a shipped one when exactly one fits, else the single fitting
            candidate), or None.
        slow_intervals: the slow-accumulation intervals that fit (for the chosen preset), or empty.
        split_schemes: per split probe, the schemes that fit.
        split_family: the split family every split probe fits, or None.
        custom_schemes: customOption -> schemes seen to fit it.
        notes: probes that could not be used, and why.
        fits: whether a preset, the emulator's slow interval (128) and (when split probes ran) a
            split family all fit (and, when bias probes ran, at least one bias order; when row-wise probes
            ran, exactly one row-wise kernel candidate).
        summary: one line.
        bias_probes: how many bias probes were recorded (:mod:`mmaemu.recording._bias`).
        bias_orders: the bias orders that reproduce every bias probe under the preset.
        rowwise_probes: how many row-wise probes were recorded (:mod:`mmaemu.recording._rowwise`).
        rowwise_kernels: the names of the row-wise kernel candidates that reproduce every row-wise probe.
        block_probes: how many block probes were recorded (:mod:`mmaemu.recording._blockwise`).
        block_base: the block kernel model whose kernel the block probes ran (None without block probes).
        block_kernels: the names of that model's candidates that reproduce every block probe.
    """

    candidates_tested: int
    fitting: tuple[Candidate, ...]
    shipped: tuple[str, ...]
    preset: Preset | None
    slow_intervals: tuple[int, ...]
    split_schemes: dict[str, tuple[str, ...]]
    split_family: SplitFamily | None
    custom_schemes: dict[int, tuple[str, ...]]
    notes: tuple[str, ...]
    fits: bool
    summary: str
    bias_probes: int = 0
    bias_orders: tuple[BiasOrder, ...] = ()
    rowwise_probes: int = 0
    rowwise_kernels: tuple[str, ...] = ()
    block_probes: int = 0
    block_base: str | None = None
    block_kernels: tuple[str, ...] = ()

    @property
    def bias_order(self) -> BiasOrder | None:
        """The bias order the bias probes decide (exactly one fits), else None."""
        return self.bias_orders[0] if len(self.bias_orders) == 1 else None

    @property
    def rowwise_kernel(self) -> str | None:
        """The row-wise kernel candidate the row-wise probes decide (exactly one fits), else None."""
        return self.rowwise_kernels[0] if len(self.rowwise_kernels) == 1 else None

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {
            "candidates_tested": self.candidates_tested,
            "fitting": [c.name for c in self.fitting],
            "shipped": list(self.shipped),
            "preset": self.preset.name if self.preset is not None else None,
            "slow_intervals": list(self.slow_intervals),
            "split_schemes": {k: list(v) for k, v in self.split_schemes.items()},
            "split_family": self.split_family.name if self.split_family is not None else None,
            "custom_schemes": {str(k): list(v) for k, v in self.custom_schemes.items()},
            "notes": list(self.notes),
            "fits": self.fits,
            "summary": self.summary,
            "bias_probes": self.bias_probes,
            "bias_orders": [o.value for o in self.bias_orders],
            "rowwise_probes": self.rowwise_probes,
            "rowwise_kernels": list(self.rowwise_kernels),
            "block_probes": self.block_probes,
            "block_base": self.block_base,
            "block_kernels": list(self.block_kernels),
        }


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread: the probes' tensors are tiny, and spare threads only contend."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def analyse(results: Sequence[ProbeResult], candidates: Iterable[Candidate] = CANDIDATES) -> ProbeVerdict:
    """Say which preset, slow interval and split family reproduce the GPU's probe outputs.

    Args:
        results: the probes and what the GPU returned.
        candidates: the arithmetic candidates to try (default :data:`CANDIDATES`).

    Returns:
        The verdict; ``fits`` is False when none fits.
    """
    with one_thread():
        return _analyse(results, candidates)


def _analyse(results: Sequence[ProbeResult], candidates: Iterable[Candidate]) -> ProbeVerdict:
    notes: list[str] = []
    stage1 = [r for r in results if r.probe.stage is ProbeStage.ARITHMETIC and r.S == 1]
    stage2 = [r for r in results if r.probe.stage is ProbeStage.SLOW_INTERVAL and r.S == 1]
    stage3 = [r for r in results if r.probe.stage is ProbeStage.SPLIT and r.S > 1]
    for r in results:
        if r not in stage1 and r not in stage2 and r not in stage3:
            notes.append(f"{r.probe.name}: not used (cuBLAS chose S = {r.S})")
    tested = list(candidates)
    fitting: list[Candidate] = []
    if stage1:
        unsplit = SplitK(1, Scheme.NONE)
        for cand in tested:
            trial = cand.preset()
            if all(_bits(r, trial, candidate_plan(r.probe.shape[2], True, unsplit)) for r in stage1):
                fitting.append(cand)
    else:
        notes.append("no arithmetic probe ran unsplit: the arithmetic is undetermined")
    shipped = tuple(c.preset().name for c in fitting if any(c.preset() is p for p in NAMED))
    preset: Preset | None = None
    if len(shipped) == 1:
        preset = next(c.preset() for c in fitting if c.preset().name == shipped[0])
    elif len(fitting) == 1:
        preset = fitting[0].preset()
    elif len(fitting) > 1:
        notes.append(f"{len(fitting)} candidates fit the arithmetic probes; they do not decide between them")
    intervals: tuple[int, ...] = ()
    if preset is not None and stage2:
        unsplit = SplitK(1, Scheme.NONE)
        intervals = tuple(i for i in SLOW_INTERVALS
                          if all(_bits(r, preset, candidate_plan(r.probe.shape[2], False, unsplit, i)) for r in stage2))
    split_schemes: dict[str, tuple[str, ...]] = {}
    custom_schemes: dict[int, set[str]] = {}
    family: SplitFamily | None = None
    if preset is not None and stage3:
        interval = SLOW_CHUNK if (not intervals or SLOW_CHUNK in intervals) else intervals[0]
        schemes = [scheme for f in SplitFamily for scheme in f.schemes]
        for r in stage3:
            k = r.probe.shape[2]
            ok = tuple(s.value for s in schemes
                       if _bits(r, preset, candidate_plan(k, r.probe.fast, SplitK(r.S, s), interval)))
            split_schemes[r.probe.name] = ok
            custom_schemes.setdefault(r.custom, set()).update(ok)
        family = next((f for f in SplitFamily
                       if all(f.scheme_for(r.S, r.custom).value in split_schemes[r.probe.name] for r in stage3)), None)
        if family is None:
            notes.append("no split family fits every split probe (with the customOption mapping of mmaemu's families)")
    elif stage3:
        notes.append("split probes not analysed: no preset fits")
    else:
        notes.append("no split probe: the split family is undetermined")
    fits = preset is not None and (not stage2 or SLOW_CHUNK in intervals) and (not stage3 or family is not None)
    if preset is None:
        what = "no candidate fits" if not fitting else f"{len(fitting)} candidates fit, none decided"
        summary = f"none fits: {what} ({len(tested)} arithmetic candidates)"
    else:
        parts = [f"preset {preset.name!r}" + ("" if shipped else " (no shipped preset fits)")]
        if stage2:
            parts.append(f"slow interval {list(intervals) or 'none'}")
        if stage3:
            parts.append(f"split family {family.name.lower() if family else 'none'}")
        summary = ("fits: " if fits else "none fits: ") + ", ".join(parts)
    return ProbeVerdict(
        candidates_tested=len(tested), fitting=tuple(fitting), shipped=shipped, preset=preset,
        slow_intervals=intervals, split_schemes=split_schemes, split_family=family,
        custom_schemes={k: tuple(sorted(v)) for k, v in custom_schemes.items()}, notes=tuple(notes), fits=fits,
        summary=summary,
    )
