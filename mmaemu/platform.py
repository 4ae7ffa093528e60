"""Reference platforms (profiles) and cuBLAS's split-K decisions on them.

A profile is a reference platform: a GPU with its SM count, cuBLASLt and torch versions, the
caller (torch or Transformer Engine) with its cuBLAS workspace, the tensor-core preset, the split-K
family of its cuBLAS and the split-K table recorded on it. :func:`resolve_splitk` decides, from
evidence only, whether that platform splits K for a call and how:

1. ``table``: the call's row in the table recorded on the profile's GPU (cuBLASLt's heuristic
   queried with torch 2.7.1's descriptor; ``mmaemu/data/splitk``, converted by
   ``tools/convert_splitk.py``);
2. ``workspace0``: without a workspace cuBLAS never splits (653,400 H100 queries, none split);
3. ``live-query``: on the reference platform itself, cuBLASLt's heuristic is asked
   (:mod:`mmaemu.cublaslt`); never elsewhere;
4. ``envelope``: above a bound on M*N, S = 1 (H100: a bound per setting and K, fitted and tested on a
   sealed held-out set; RTX 4060: twice the setting's largest split M*N). ``MMAEMU_SPLITK_STRICT=1``
   (or ``true``, ``yes``, ``on``; :func:`env_flag`) turns it off.

Anything else raises :class:`~mmaemu.errors.SplitKUnknownError`.
"""

from __future__ import annotations

import enum
import functools
import json
import os
import warnings
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from .accumulation import Scheme, SplitK
from .errors import (
    ExperimentalPresetWarning,
    SplitKUnknownError,
    UnvalidatedEnvelopeWarning,
    UnverifiedSplitWarning,
)
from .formats import Fp8Format, OutFormat
from .model import ADA, B200_MMA_SYNC, HOPPER, Maturity, Preset

__all__ = [
    "SplitFamily",
    "SplitSource",
    "Caller",
    "Profile",
    "SplitDecision",
    "Problem",
    "SplitTable",
    "PROFILES",
    "profiles",
    "get_profile",
    "default_profile_name",
    "resolve_splitk",
    "split_warnings",
    "combo_verified",
    "scheme_for",
    "live_query",
    "register_profile",
    "unregister_profile",
    "register_table",
    "USER_PROFILES",
    "env_flag",
    "splitk_strict",
]

MIB = 1 << 20
_WS_CODES = {0: 0, 1 * MIB: 1, 4 * MIB: 2, 32 * MIB: 3}
_OUT_CODES = {OutFormat.FLOAT32: 0, OutFormat.BFLOAT16: 1, OutFormat.FLOAT16: 2, OutFormat.E4M3: 3, OutFormat.E5M2: 4}
_OUT_NAMES = {f: n for f, n in zip(_OUT_CODES, ["float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"])}
_FMT_CODES = {Fp8Format.E4M3: 0, Fp8Format.E5M2: 1}
_FIELD_BITS = 21


class SplitFamily(enum.Enum):
    """How a platform's cuBLAS deals K to split parts and combines them."""

    CONTIGUOUS = "contiguous 128-wide k-tiles, serial combination"
    ROUND_ROBIN = "round-robin 64-wide k-tiles, serial or pairwise combination"


class SplitSource(enum.Enum):
    """What decided a split-K decision."""

    EXPLICIT = "explicit"
    TABLE = "table"
    WORKSPACE0 = "workspace0"
    ENVELOPE = "envelope"
    LIVE_QUERY = "live-query"


class Caller(enum.Enum):
    """Who calls cuBLASLt on the reference platform."""

    TORCH = "torch._scaled_mm (torch 2.7.1)"
    TRANSFORMER_ENGINE = "Transformer Engine 2.3"


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
        table_id: the recorded table consulted, if any.
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
class SplitTable:
    """A recorded cuBLASLt split-K table: sorted binary columns, looked up with a binary search.

    Rows of setting ``s`` (one byte: fa, fb, out, fast, ws) are ``setting_start[s]:setting_start[s+1]``,
    sorted by ``key = M << 42 | N << 21 | K``.
    """

    table_id: str
    info: dict[str, Any] = field(repr=False)
    key: np.ndarray = field(repr=False)
    setting_start: np.ndarray = field(repr=False)
    S: np.ndarray = field(repr=False)
    custom: np.ndarray = field(repr=False)
    verified: frozenset[tuple[bool, int, str, str, str]] = field(repr=False)

    @staticmethod
    def load(table_id: str) -> SplitTable:
        """A registered user table (:func:`register_table`), else a shipped table (cached per process)."""
        user = _USER_TABLES.get(table_id)
        return user if user is not None else SplitTable._load_shipped(table_id)

    @staticmethod
    @functools.lru_cache(maxsize=None)
    def _load_shipped(table_id: str) -> SplitTable:
        base = resources.files("mmaemu") / "data" / "splitk"
        info = json.loads((base / f"{table_id}.json").read_text())
        with (base / f"{table_id}.npz").open("rb") as fh:
            return SplitTable.from_arrays(table_id, info, np.load(fh))

    @staticmethod
    def from_files(npz_path: str | os.PathLike[str], json_path: str | os.PathLike[str]) -> SplitTable:
        """Load a table written in the shipped format (``<table_id>.npz`` and ``.json``) from any path."""
        info = json.loads(Path(json_path).read_text())
        with np.load(Path(npz_path)) as data:
            return SplitTable.from_arrays(str(info["table_id"]), info, data)

    @staticmethod
    def from_arrays(table_id: str, info: dict[str, Any], data: Any) -> SplitTable:
        """A table from its ``info`` and a mapping holding the ``key``, ``setting_start``, ``S`` and ``custom`` columns."""
        arrays = {k: np.asarray(data[k]) for k in ("key", "setting_start", "S", "custom")}
        verified = frozenset((bool(c[0]), int(c[1]), str(c[2]), str(c[3]), str(c[4])) for c in info["verified_combos"])
        return SplitTable(table_id, info, arrays["key"], arrays["setting_start"], arrays["S"], arrays["custom"], verified)

    @staticmethod
    def setting(fmt_a: Fp8Format, fmt_b: Fp8Format, out: OutFormat, fast: bool, ws_code: int) -> int:
        """The one-byte setting code of the table's key."""
        return (_FMT_CODES[fmt_a] << 7) | (_FMT_CODES[fmt_b] << 6) | (_OUT_CODES[out] << 3) | (int(fast) << 2) | ws_code

    def lookup(self, setting: int, m: int, n: int, k: int) -> int | None:
        """The row index of a call, or None when it is not recorded."""
        if max(m, n, k) >= 1 << _FIELD_BITS or min(m, n, k) < 0:
            return None
        lo, hi = int(self.setting_start[setting]), int(self.setting_start[setting + 1])
        key = (m << 2 * _FIELD_BITS) | (n << _FIELD_BITS) | k
        i = lo + int(np.searchsorted(self.key[lo:hi], key))
        return i if i < hi and int(self.key[i]) == key else None

    def lookup_many(self, settings: np.ndarray, m: np.ndarray, n: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`lookup`: row indices, -1 where not recorded."""
        settings = np.asarray(settings, np.int64)
        keys = (np.asarray(m, np.int64) << 2 * _FIELD_BITS) | (np.asarray(n, np.int64) << _FIELD_BITS) | np.asarray(k, np.int64)
        idx = np.full(keys.shape, -1, dtype=np.int64)
        for s in np.unique(settings):
            sel = np.nonzero(settings == s)[0]
            lo, hi = int(self.setting_start[s]), int(self.setting_start[s + 1])
            if hi == lo:
                continue
            pos = lo + np.searchsorted(self.key[lo:hi], keys[sel])
            pos_ok = np.minimum(pos, hi - 1)
            found = (pos < hi) & (self.key[pos_ok] == keys[sel])
            idx[sel[found]] = pos_ok[found]
        return idx

    def setting_stats(self, ws_bytes: int, out: OutFormat, fast: bool, fmt_a: Fp8Format, fmt_b: Fp8Format) -> dict[str, Any] | None:
        """The recorded statistics of one setting (rows, split rows, largest split M*N, ...)."""
        for s in self.info["settings"]:
            if (s["ws"], s["out"], s["fast"], s["fmt_a"], s["fmt_b"]) == (
                ws_bytes, _OUT_NAMES[out], fast, fmt_a.short_name, fmt_b.short_name
            ):
                return dict(s)
        return None


@dataclass(frozen=True)
class Profile:
    """A reference platform.

    Attributes:
        name: registry name.
        preset: the tensor-core arithmetic.
        split_family: how its cuBLAS splits K.
        gpu: the reference GPU (as ``torch.cuda.get_device_name`` prints it).
        sm_count: its SM count.
        cublaslt: cuBLASLt version.
        torch_version: torch version of the recordings.
        caller: torch._scaled_mm or Transformer Engine.
        workspace_bytes: the caller's cuBLAS workspace.
        maturity: validated or experimental (experimental profiles warn when used).
        table_id: the split-K table recorded on this platform (None: no table).
        source: where these numbers come from.
        evidence: for a profile built from a recording (:meth:`from_recording`), what its replay proved.
    """

    name: str
    preset: Preset
    split_family: SplitFamily
    gpu: str
    sm_count: int
    cublaslt: str
    torch_version: str
    caller: Caller
    workspace_bytes: int
    maturity: Maturity
    table_id: str | None
    source: str
    evidence: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_recording(cls, directory: str | os.PathLike[str], **options: Any) -> Profile:
        """A profile recorded by ``python -m mmaemu record`` (see :func:`mmaemu.recording.profile_from_recording`)."""
        from .recording import profile_from_recording

        return profile_from_recording(directory, **options)

    def __post_init__(self) -> None:
        if self.sm_count <= 0:
            raise ValueError(f"profile {self.name}: sm_count must be positive")
        if self.workspace_bytes not in _WS_CODES:
            raise ValueError(f"profile {self.name}: workspace {self.workspace_bytes} is not a recorded setting")
        if self.table_id is not None and not self.table_id.startswith("heur_"):
            raise ValueError(f"profile {self.name}: {self.table_id!r} is not a split-K table id")

    @property
    def ws_code(self) -> int:
        """The workspace column of the recorded tables (0: none, 1: 1 MiB, 2: 4 MiB, 3: 32 MiB)."""
        return _WS_CODES[self.workspace_bytes]

    @property
    def schemes(self) -> tuple[Scheme, ...]:
        """The split schemes this platform's cuBLAS uses."""
        if self.split_family is SplitFamily.CONTIGUOUS:
            return (Scheme.CONTIGUOUS,)
        return (Scheme.SERIAL, Scheme.PAIRWISE)

    @property
    def transformer_engine(self) -> bool:
        """Whether the caller is Transformer Engine (its split decisions are experimental)."""
        return self.caller is Caller.TRANSFORMER_ENGINE

    def __repr__(self) -> str:
        ws = f"{self.workspace_bytes // MIB} MiB" if self.workspace_bytes else "no"
        return (
            f"Profile({self.name!r}: {self.gpu}, {self.sm_count} SMs, cuBLASLt {self.cublaslt}, via "
            f"{self.caller.value}, {ws} workspace, preset {self.preset.name!r}, {self.maturity.value})"
        )


def _profile(name: str, preset: Preset, gpu_key: str, caller: Caller, workspace: int, maturity: Maturity = Maturity.VALIDATED,
             table: bool = True) -> Profile:
    h100 = gpu_key == "h100"
    return Profile(
        name=name,
        preset=preset,
        split_family=SplitFamily.CONTIGUOUS if h100 else SplitFamily.ROUND_ROBIN,
        gpu="NVIDIA H100 PCIe" if h100 else "NVIDIA GeForce RTX 4060",
        sm_count=114 if h100 else 24,
        cublaslt="12.8.3.14",
        torch_version="2.7.1",
        caller=caller,
        workspace_bytes=workspace,
        maturity=maturity,
        table_id=("heur_h100pcie_lt12.8.3.14" if h100 else "heur_rtx4060_lt12.8.3.14") if table else None,
        source=(
            "seeds 000-004: H100 PCIe probe (1,423 live calls) and split-K sweep (2,744 live jobs); recordings/splitk"
            if h100
            else "recordings/rtx4060 (7,070 RTX 4060 outputs and calls); recordings/splitk"
        ),
    )


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        _profile("hopper", HOPPER, "h100", Caller.TORCH, 1 * MIB),
        _profile("hopper-te", HOPPER, "h100", Caller.TRANSFORMER_ENGINE, 32 * MIB),
        _profile("hopper-ws0", HOPPER, "h100", Caller.TORCH, 0),
        _profile("ada", ADA, "rtx4060", Caller.TORCH, 1 * MIB),
        _profile("ada-te", ADA, "rtx4060", Caller.TRANSFORMER_ENGINE, 4 * MIB),
        _profile("ada-ws0", ADA, "rtx4060", Caller.TORCH, 0),
        _profile("hopper-experimental", HOPPER, "h100", Caller.TORCH, 1 * MIB, Maturity.EXPERIMENTAL, table=False),
        Profile(
            name="b200-mma-sync-experimental",
            preset=B200_MMA_SYNC,
            split_family=SplitFamily.CONTIGUOUS,
            gpu="none: fitted to B200 mma.sync vectors, not to a GPU's cuBLAS",
            sm_count=148,
            cublaslt="none",
            torch_version="none",
            caller=Caller.TORCH,
            workspace_bytes=1 * MIB,
            maturity=Maturity.EXPERIMENTAL,
            table_id=None,
            source="hw-vectors/b200_e4m3.npz (instruction level only; MATLAB tensor-core toolbox)",
        ),
    )
}

#: The names used before the profiles were renamed; they raise KeyError naming the new name.
RENAMED = {
    "hopper-h100pcie-torch": "hopper",
    "hopper-h100pcie-te": "hopper-te",
    "hopper-h100pcie-ws0": "hopper-ws0",
    "ada-rtx4060-torch": "ada",
    "ada-rtx4060-te": "ada-te",
    "ada-rtx4060-ws0": "ada-ws0",
}
DEFAULT_PROFILE = "hopper"

#: Profiles registered at run time (:func:`register_profile`), e.g. built from a recording.
USER_PROFILES: dict[str, Profile] = {}
_USER_TABLES: dict[str, SplitTable] = {}


def register_table(table: SplitTable, *, replace: bool = False) -> None:
    """Make a split-K table (e.g. a recording's) loadable by :meth:`SplitTable.load` under its id."""
    if not replace and table.table_id in _USER_TABLES and _USER_TABLES[table.table_id] is not table:
        raise ValueError(f"a different split-K table {table.table_id!r} is already registered")
    _USER_TABLES[table.table_id] = table


def register_profile(profile: Profile, *, table: SplitTable | None = None, replace: bool = False) -> Profile:
    """Register a user profile (and its table) so that ``profile="<name>"`` and ``MMAEMU_PROFILE`` find it.

    Raises:
        ValueError: the name is a shipped profile's, or already registered and ``replace`` is false.
    """
    if profile.name in PROFILES or profile.name in RENAMED:
        raise ValueError(f"profile {profile.name!r} is a shipped profile's name")
    if profile.name in USER_PROFILES and not replace:
        raise ValueError(f"profile {profile.name!r} is already registered (pass replace=True)")
    if table is not None:
        register_table(table, replace=replace)
    USER_PROFILES[profile.name] = profile
    return profile


def unregister_profile(name: str) -> None:
    """Remove a user profile and its table (no-op for unknown names)."""
    profile = USER_PROFILES.pop(name, None)
    if profile is not None and profile.table_id is not None:
        if not any(p.table_id == profile.table_id for p in USER_PROFILES.values()):
            _USER_TABLES.pop(profile.table_id, None)


def profiles() -> list[Profile]:
    """All registered profiles, in registry order (shipped first, then user profiles)."""
    return [*PROFILES.values(), *USER_PROFILES.values()]


_TRUE_WORDS = ("1", "true", "yes", "on")
_FALSE_WORDS = ("0", "false", "no", "off")


def env_flag(name: str) -> bool:
    """A boolean environment variable: ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off``.

    Case-insensitive, surrounding whitespace ignored; unset or empty means False.

    Raises:
        ValueError: any other value; the message names the variable and the accepted values.
    """
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if value in _TRUE_WORDS:
        return True
    if value in ("", *_FALSE_WORDS):
        return False
    raise ValueError(
        f"{name}={raw!r} is not a boolean; accepted (case-insensitive): {', '.join(_TRUE_WORDS)} to turn it on, "
        f"{', '.join(_FALSE_WORDS)} (or empty, or unset) to turn it off"
    )


def splitk_strict() -> bool:
    """Whether ``MMAEMU_SPLITK_STRICT`` turns the envelope rule off (:func:`env_flag`)."""
    return env_flag("MMAEMU_SPLITK_STRICT")


def default_profile_name() -> str:
    """``MMAEMU_PROFILE`` if set and not blank (surrounding whitespace ignored), else ``"hopper"``."""
    return os.environ.get("MMAEMU_PROFILE", "").strip() or DEFAULT_PROFILE


def get_profile(profile: str | Profile | None, *, warn: bool = True) -> Profile:
    """Resolve a profile name (None: the process default). Experimental profiles warn.

    Raises:
        KeyError: for a name used before the rename (the message names the new one).
        ValueError: for an unknown name, listing the known profiles (naming ``MMAEMU_PROFILE`` when
            the name came from it).
        TypeError: ``profile`` is not a string, a :class:`Profile` or None.
    """
    if isinstance(profile, Profile):
        found = profile
    elif profile is not None and not isinstance(profile, str):
        raise TypeError(
            f"profile must be a profile name (str), a Profile or None, not {type(profile).__name__}"
        )
    else:
        name = default_profile_name() if profile is None else profile
        source = f"MMAEMU_PROFILE={name!r} (the default profile)" if profile is None else f"profile={name!r}"
        if name in RENAMED:
            where = "MMAEMU_PROFILE: " if profile is None else ""
            raise KeyError(f"{where}profile {name!r} was renamed to {RENAMED[name]!r}")
        try:
            found = PROFILES[name] if name in PROFILES else USER_PROFILES[name]
        except KeyError:
            known = ", ".join(repr(p) for p in [*PROFILES, *USER_PROFILES])
            fix = "; set it to one of them, or unset it for 'hopper'" if profile is None else ""
            raise ValueError(f"{source} is not a profile; accepted: {known}{fix}") from None
    if warn and found.maturity is Maturity.EXPERIMENTAL:
        reason = ("its recording's replay did not prove every claim (see profile.evidence)" if found.evidence is not None
                  else "no reference platform's recordings back its split-K decisions")
        warnings.warn(
            f"profile {found.name!r} is experimental: {reason}"
            + (" and its preset is fitted to instruction-level vectors only" if found.preset is B200_MMA_SYNC else ""),
            ExperimentalPresetWarning,
            stacklevel=3,
        )
    return found


@functools.lru_cache(maxsize=None)
def _live_query_tool(gpu: str, sm_count: int, cublaslt: str) -> Any:
    """A cuBLASLt handle when this process runs on that reference platform, else None (cached)."""
    from . import cublaslt as lt

    if not lt.reference_platform_matches(gpu, sm_count, cublaslt):
        return None
    try:
        return lt.CublasLt()
    except Exception:  # noqa: BLE001 - no live query where cuBLASLt cannot be used
        return None


def live_query(profile: Profile, problem: Problem) -> tuple[int, int] | None:
    """``(S, customOption)`` from cuBLASLt's heuristic, only on the profile's own reference platform.

    Off the reference platform (another GPU, SM count or cuBLASLt version, or no GPU) it returns
    None without loading anything but torch's CUDA probe. A rejected configuration also gives None.
    """
    if profile.table_id is None:
        return None
    tool = _live_query_tool(profile.gpu, profile.sm_count, profile.cublaslt)
    if tool is None:
        return None
    from .cublaslt import HeuristicQuery

    result = tool.query(HeuristicQuery(
        m=problem.m, n=problem.n, k=problem.k, dtype_a=problem.fmt_a.dtype, dtype_b=problem.fmt_b.dtype,
        out_dtype=problem.out.dtype, use_fast_accum=problem.fast, workspace_bytes=profile.workspace_bytes,
    ))
    return (int(result.splitk), int(result.custom_option)) if result.ok else None


def scheme_for(profile: Profile, s: int, custom: int) -> Scheme:
    """The split scheme of a cuBLASLt decision (S and customOption) on ``profile``'s platform."""
    if s == 1:
        return Scheme.NONE
    if profile.split_family is SplitFamily.CONTIGUOUS:
        return Scheme.CONTIGUOUS  # every customOption combines contiguously and serially (seeds 002)
    return Scheme.PAIRWISE if custom == 1 else Scheme.SERIAL


def combo_verified(profile: Profile, problem: Problem, s: int, scheme: Scheme) -> bool:
    """Whether this split combination's arithmetic was reproduced on a recorded hardware call."""
    if s == 1 or profile.table_id is None:
        return s == 1
    pair = f"{problem.fmt_a.short_name}x{problem.fmt_b.short_name}"
    return (problem.fast, s, scheme.value, _OUT_NAMES[problem.out], pair) in SplitTable.load(profile.table_id).verified


def split_warnings(profile: Profile, problem: Problem, decision: SplitDecision) -> None:
    """Emit the warnings a decision carries (unverified splits, TE splits, unvalidated envelopes)."""
    if decision.S > 1 and profile.transformer_engine and decision.source != SplitSource.EXPLICIT.value:
        warnings.warn(
            f"{profile.name}: S = {decision.S} is experimental under Transformer Engine (no split call ran through TE's "
            "own GEMM on the reference GPU)", UnverifiedSplitWarning, stacklevel=4,
        )
    elif decision.S > 1 and not decision.verified:
        warnings.warn(
            f"{profile.name}: split-K S = {decision.S} {decision.scheme} for this output and format pair has not been "
            "replayed on hardware", UnverifiedSplitWarning, stacklevel=4,
        )
    if decision.source == SplitSource.ENVELOPE.value and not decision.verified:
        warnings.warn(
            f"{profile.name}: {decision.note}; this envelope failed or lacks a held-out test",
            UnvalidatedEnvelopeWarning, stacklevel=4,
        )


def _envelope(profile: Profile, problem: Problem, table: SplitTable) -> SplitDecision | None:
    mn = problem.m * problem.n
    env = table.info["envelope"]
    if env["kind"] == "k_grid":
        if not env["K_min"] <= problem.k <= env["K_max"]:
            return None
        want = (profile.workspace_bytes, _OUT_NAMES[problem.out], problem.fast, problem.fmt_a.short_name, problem.fmt_b.short_name)
        for b in env["bounds"]:
            if (b["ws"], b["out"], b["fast"], b["fmt_a"], b["fmt_b"]) == want:
                grid = env["K_grid"]
                i = int(np.searchsorted(grid, problem.k, side="left"))
                bound = int(b["B"][i])
                if mn <= bound:
                    return None
                status = env["validation"].get(str(profile.workspace_bytes), {}).get("status")
                return SplitDecision(
                    1, Scheme.NONE.value, SplitSource.ENVELOPE.value, status == "validated", table.table_id,
                    f"M*N = {mn:,} > {bound:,}, the {profile.gpu.removeprefix('NVIDIA ')} bound for K <= {grid[i]:,} in this setting "
                    f"(held-out test: {status})",
                )
        return None
    stats = table.setting_stats(profile.workspace_bytes, problem.out, problem.fast, problem.fmt_a, problem.fmt_b)
    if stats is None or stats["max_split_MN"] is None:
        return None
    bound = 2 * int(stats["max_split_MN"])
    if mn <= bound:
        return None
    return SplitDecision(
        1, Scheme.NONE.value, SplitSource.ENVELOPE.value, True, table.table_id,
        f"M*N = {mn:,} > {bound:,}, twice the largest split M*N of this setting on the RTX 4060",
    )


def resolve_splitk(profile: Profile, problem: Problem) -> SplitDecision:
    """cuBLAS's split-K decision for ``problem`` on ``profile``'s reference platform, from evidence.

    Emits :class:`UnverifiedSplitWarning` / :class:`UnvalidatedEnvelopeWarning` where the decision
    carries one.

    Raises:
        SplitKUnknownError: when no recorded row, workspace rule, live query or envelope decides.
    """
    decision = _decide(profile, problem)
    split_warnings(profile, problem, decision)
    return decision


def _decide(profile: Profile, problem: Problem) -> SplitDecision:
    strict = splitk_strict()  # read first: a bad value raises whichever rule decides
    table = SplitTable.load(profile.table_id) if profile.table_id else None
    if table is not None:
        setting = SplitTable.setting(problem.fmt_a, problem.fmt_b, problem.out, problem.fast, profile.ws_code)
        row = table.lookup(setting, problem.m, problem.n, problem.k)
        if row is not None:
            s, custom = int(table.S[row]), int(table.custom[row])
            scheme = scheme_for(profile, s, custom)
            verified = combo_verified(profile, problem, s, scheme)
            if s > 1 and profile.split_family is SplitFamily.CONTIGUOUS and custom >= 4:
                verified = False  # customOption 4-7 on split rows: never replayed (seeds 002)
            return SplitDecision(s, scheme.value, SplitSource.TABLE.value, verified, table.table_id,
                                 f"row {row} of {table.table_id} (customOption {custom})")
    if profile.workspace_bytes == 0:
        return SplitDecision(1, Scheme.NONE.value, SplitSource.WORKSPACE0.value, True, None,
                             "cuBLAS never splits K without a workspace (653,400 H100 queries, none split)")
    answer = live_query(profile, problem)
    if answer is not None:
        s, custom = answer
        scheme = scheme_for(profile, s, custom)
        return SplitDecision(s, scheme.value, SplitSource.LIVE_QUERY.value, combo_verified(profile, problem, s, scheme),
                             None, f"cuBLASLt heuristic queried on this {profile.gpu} (customOption {custom})")
    if table is not None and not strict:
        inferred = _envelope(profile, problem, table)
        if inferred is not None:
            return inferred
    schemes = " or ".join(f'(S, "{s.value}")' for s in profile.schemes)
    where = f"the {profile.gpu}" if profile.table_id else f"profile {profile.name!r} (it has no split-K table)"
    raise SplitKUnknownError(
        f"no recorded evidence decides whether {where} splits K for M, N, K = {problem.m}, {problem.n}, {problem.k} "
        f"({problem.fmt_a.short_name} x {problem.fmt_b.short_name} -> {_OUT_NAMES[problem.out]}, "
        f"use_fast_accum={problem.fast}) under profile {profile.name!r}. Run mmaemu.explain(...) to see what is "
        f"known; pass splitk=1 only if you know the reference GPU did not split this call, or its known split as "
        f"splitk={schemes}."
    )
