"""Reference platforms (profiles) and their split-K decisions.

A profile is a reference platform: a GPU with its SM count, cuBLASLt and torch versions, the
caller's cuBLAS workspace, the tensor-core preset, and the split-K family of its cuBLAS. Two are
shipped now: ``hopper`` (the default; H100 PCIe) and ``ada`` (RTX 4060).

[Note: interim split-K decisions] Until the recorded split-K tables are shipped, ``splitk="auto"``
decides only the shapes that published evidence decides (``../shared/NUMERICS.md`` section 5;
seeds 000 and 001), listed in :data:`PUBLISHED_DECISIONS`, and the published H100 envelope
bound at 1 MiB; every other shape raises :class:`~mmaemu.errors.SplitKUnknownError`. The test
suite checks every published decision against the recorded tables when they are present.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass

from .accumulation import Scheme, SplitK
from .errors import SplitKUnknownError
from .formats import Fp8Format, OutFormat
from .model import ADA, HOPPER, Maturity, Preset

__all__ = [
    "SplitFamily",
    "SplitSource",
    "Profile",
    "SplitDecision",
    "Problem",
    "PROFILES",
    "get_profile",
    "default_profile_name",
    "resolve_splitk",
    "PUBLISHED_DECISIONS",
]

MIB = 1 << 20


class SplitFamily(enum.Enum):
    """How a platform's cuBLAS deals K to split parts."""

    CONTIGUOUS = "contiguous 128-wide k-tiles, serial combination"
    ROUND_ROBIN = "round-robin 64-wide k-tiles, serial or pairwise combination"


class SplitSource(enum.Enum):
    """What decided a split-K decision."""

    EXPLICIT = "explicit"
    TABLE = "table"
    WORKSPACE0 = "workspace0"
    ENVELOPE = "envelope"
    LIVE_QUERY = "live-query"


@dataclass(frozen=True)
class Profile:
    """A reference platform.

    Attributes:
        name: registry name.
        preset: the tensor-core arithmetic.
        split_family: how its cuBLAS splits K.
        gpu: the reference GPU.
        sm_count: its SM count.
        cublaslt: cuBLASLt version.
        torch_version: torch version of the caller.
        caller: ``"torch._scaled_mm"`` or ``"Transformer Engine 2.3"``.
        workspace_bytes: the caller's cuBLAS workspace.
        maturity: validated or experimental.
        table_id: the split-K table recorded on this platform.
        source: where these numbers come from.
    """

    name: str
    preset: Preset
    split_family: SplitFamily
    gpu: str
    sm_count: int
    cublaslt: str
    torch_version: str
    caller: str
    workspace_bytes: int
    maturity: Maturity
    table_id: str
    source: str

    def __post_init__(self) -> None:
        if self.sm_count <= 0 or self.workspace_bytes < 0:
            raise ValueError(f"profile {self.name}: SM count and workspace must be positive")

    @property
    def schemes(self) -> tuple[Scheme, ...]:
        """The split schemes this platform's cuBLAS uses."""
        if self.split_family is SplitFamily.CONTIGUOUS:
            return (Scheme.CONTIGUOUS,)
        return (Scheme.SERIAL, Scheme.PAIRWISE)

    def __repr__(self) -> str:
        return (
            f"Profile({self.name!r}, {self.gpu}, sm_count={self.sm_count}, cuBLASLt {self.cublaslt}, "
            f"{self.caller} {self.torch_version}, workspace {self.workspace_bytes // MIB} MiB, "
            f"preset={self.preset.name!r}, {self.maturity.value})"
        )


PROFILES: dict[str, Profile] = {
    "hopper": Profile(
        name="hopper",
        preset=HOPPER,
        split_family=SplitFamily.CONTIGUOUS,
        gpu="NVIDIA H100 PCIe (sm_90)",
        sm_count=114,
        cublaslt="12.8.3.14",
        torch_version="2.7.1",
        caller="torch._scaled_mm",
        workspace_bytes=1 * MIB,
        maturity=Maturity.VALIDATED,
        table_id="heur_h100pcie_lt12.8.3.14",
        source="seeds 000-002 (H100 PCIe probe and split-K sweep); recordings/splitk",
    ),
    "ada": Profile(
        name="ada",
        preset=ADA,
        split_family=SplitFamily.ROUND_ROBIN,
        gpu="NVIDIA GeForce RTX 4060 (sm_89)",
        sm_count=24,
        cublaslt="12.8.3.14",
        torch_version="2.7.1",
        caller="torch._scaled_mm",
        workspace_bytes=1 * MIB,
        maturity=Maturity.VALIDATED,
        table_id="heur_rtx4060_lt12.8.3.14",
        source="recordings/rtx4060 (7,070 RTX 4060 outputs); recordings/splitk",
    ),
}

DEFAULT_PROFILE = "hopper"


def default_profile_name() -> str:
    """``MMAEMU_PROFILE`` if set, else ``"hopper"``."""
    return os.environ.get("MMAEMU_PROFILE", DEFAULT_PROFILE)


def get_profile(profile: str | Profile | None) -> Profile:
    """Resolve a profile name (None: the process default).

    Raises:
        ValueError: for an unknown name, listing the known profiles.
    """
    if isinstance(profile, Profile):
        return profile
    name = default_profile_name() if profile is None else profile
    try:
        return PROFILES[name]
    except (KeyError, TypeError):
        known = ", ".join(repr(p) for p in PROFILES)
        raise ValueError(f"profile={name!r} is not a profile; accepted: {known}") from None


@dataclass(frozen=True)
class Problem:
    """The features of a call that decide cuBLAS's split-K choice."""

    m: int
    n: int
    k: int
    fmt_a: Fp8Format
    fmt_b: Fp8Format
    out: OutFormat
    fast: bool


@dataclass(frozen=True)
class SplitDecision:
    """A split-K decision and what it rests on.

    Attributes:
        S: number of K parts (1: unsplit).
        scheme: ``"none"``, ``"contiguous"``, ``"serial"`` or ``"pairwise"``.
        source: ``"explicit"``, ``"table"``, ``"workspace0"``, ``"envelope"`` or ``"live-query"``.
        verified: whether hardware evidence backs this decision and its arithmetic.
        table_id: the recorded table the decision comes from, if any.
        note: which row, bound or argument decided.
    """

    S: int
    scheme: str
    source: str
    verified: bool
    table_id: str | None
    note: str

    @property
    def split(self) -> SplitK:
        """The decision as a :class:`~mmaemu.accumulation.SplitK`."""
        return SplitK(self.S, Scheme(self.scheme))


@dataclass(frozen=True)
class _Published:
    profile: str
    m: int | None  # None: any M up to m_max
    m_max: int | None
    n: int
    k: int
    pairs: tuple[tuple[Fp8Format, Fp8Format], ...]
    outs: tuple[OutFormat, ...]
    fast: tuple[bool, ...]
    S: int
    scheme: Scheme
    note: str


_E4 = Fp8Format.E4M3
_E5 = Fp8Format.E5M2
_ALL_PAIRS = ((_E4, _E4), (_E4, _E5), (_E5, _E4))
_ALL_OUTS = tuple(OutFormat)
_BOTH = (False, True)

#: Split-K decisions stated by published evidence (NUMERICS.md section 5), each a row of the
#: reference GPU's recorded cuBLASLt heuristic table (checked by tests/test_platform.py).
PUBLISHED_DECISIONS: tuple[_Published, ...] = (
    _Published("hopper", 64, None, 5760, 1920, ((_E4, _E4),), (OutFormat.BFLOAT16,), (True,), 1, Scheme.NONE,
               "the seeds' quickstart shape: an S = 1 row of the H100 PCIe table (seeds 001)"),
    *(
        _Published("hopper", None, 8192, n, k, ((_E4, _E4),), (OutFormat.BFLOAT16,), (True,), 1, Scheme.NONE,
                   f"Evo 2 projection (K, N) = ({k}, {n}), M <= 8,192: never split on the H100 PCIe (seeds 000, 001)")
        for k, n in ((1920, 5760), (8192, 24576))
    ),
    *(
        _Published("ada", None, 8192, n, k, ((_E4, _E4),), (OutFormat.BFLOAT16,), (True,), 1, Scheme.NONE,
                   f"Evo 2 projection (K, N) = ({k}, {n}), M <= 8,192: never split on the RTX 4060 at 1 MiB "
                   "with bf16 output (seeds 000, 001)")
        for k, n in ((1920, 5760), (8192, 24576))
    ),
    _Published("ada", 64, None, 256, 1920, _ALL_PAIRS, _ALL_OUTS, _BOTH, 1, Scheme.NONE,
               "64 x 256 x 1920 does not split on the RTX 4060 (seeds 002, tcemu test cases)"),
    _Published("ada", 16, None, 128, 8192, ((_E4, _E4), (_E5, _E4)), (OutFormat.FLOAT32,), _BOTH, 8,
               Scheme.PAIRWISE, "16 x 128 x 8192, fp32 output: S = 8 pairwise on the RTX 4060 (seeds 002)"),
    _Published("ada", 16, None, 128, 8192, ((_E4, _E4), (_E5, _E4)), (OutFormat.BFLOAT16,), (True,), 8,
               Scheme.PAIRWISE, "16 x 128 x 8192, bf16 output, fast: S = 8 pairwise on the RTX 4060 (seeds 002)"),
    _Published("ada", 16, None, 128, 8192, ((_E4, _E4), (_E5, _E4)), (OutFormat.BFLOAT16,), (False,), 12,
               Scheme.PAIRWISE, "16 x 128 x 8192, bf16 output, slow: S = 12 pairwise on the RTX 4060 (seeds 002)"),
)

# The H100 PCIe envelope at torch's 1 MiB workspace (NUMERICS.md section 5; seeds 001, 004):
# for 1,024 <= K <= 4,194,304 no call splits above a bound on M*N that is 15,360 for K <= 5,120
# and never above 268,004. Validated on a sealed held-out set (0 of 154,191 split).
_H100_ENVELOPE_K = (1024, 4_194_304)
_H100_ENVELOPE_SMALL_K = 5120
_H100_BOUND_SMALL_K = 15_360
_H100_BOUND_MAX = 268_004


def _published(profile: Profile, p: Problem) -> _Published | None:
    for row in PUBLISHED_DECISIONS:
        if row.profile != profile.name or row.n != p.n or row.k != p.k:
            continue
        if row.m is not None and row.m != p.m:
            continue
        if row.m is None and (row.m_max is None or not 1 <= p.m <= row.m_max):
            continue
        if (p.fmt_a, p.fmt_b) in row.pairs and p.out in row.outs and p.fast in row.fast:
            return row
    return None


def resolve_splitk(profile: Profile, problem: Problem) -> SplitDecision:
    """cuBLAS's split-K decision for ``problem`` on ``profile``'s reference platform.

    Raises:
        SplitKUnknownError: when no evidence decides the shape.
    """
    row = _published(profile, problem)
    if row is not None:
        return SplitDecision(row.S, row.scheme.value, SplitSource.TABLE.value, True, profile.table_id, row.note)
    mn = problem.m * problem.n
    strict = os.environ.get("MMAEMU_SPLITK_STRICT") == "1"
    if profile.name == "hopper" and not strict and _H100_ENVELOPE_K[0] <= problem.k <= _H100_ENVELOPE_K[1]:
        bound = _H100_BOUND_SMALL_K if problem.k <= _H100_ENVELOPE_SMALL_K else _H100_BOUND_MAX
        if mn > bound:
            return SplitDecision(
                1, Scheme.NONE.value, SplitSource.ENVELOPE.value, True, profile.table_id,
                f"M*N = {mn:,} is above the H100 PCIe 1 MiB envelope bound {bound:,} for K = {problem.k:,}",
            )
    schemes = " or ".join(f'(S, "{s.value}")' for s in profile.schemes)
    raise SplitKUnknownError(
        f"no recorded evidence decides whether the {profile.gpu} splits K for M, N, K = "
        f"{problem.m}, {problem.n}, {problem.k} ({problem.fmt_a.short_name} x {problem.fmt_b.short_name} -> "
        f"{problem.out.dtype}, use_fast_accum={problem.fast}) under profile {profile.name!r}. Run "
        f"mmaemu.explain(...) to see what is known; pass splitk=1 only if you know the reference GPU did "
        f"not split this call, or its known split as splitk={schemes}."
    )
