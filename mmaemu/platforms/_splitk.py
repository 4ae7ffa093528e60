"""cuBLAS's split-K decisions on a reference platform (profile), from evidence only.

:func:`resolve_splitk` decides whether a profile's platform splits K for a call and how:

1. ``table``: the call's row in the table recorded on the profile's GPU (cuBLASLt's heuristic
   queried with torch 2.7.1's descriptor; ``mmaemu/data/splitk``, converted by
   ``tools/evidence/convert_splitk.py``);
2. ``workspace0``: without a workspace cuBLAS never splits (653,400 H100 queries, none split);
3. ``live-query``: on the reference platform itself, cuBLASLt's heuristic is asked
   (:mod:`mmaemu.platforms._cublaslt`); never elsewhere;
4. ``envelope``: above a bound on M*N, S = 1 (H100: a bound per setting and K, fitted and tested on a
   sealed held-out set; RTX 4060: twice the setting's largest split M*N).
   An envelope decision reads the table's ``info["envelope"]`` (:mod:`mmaemu.recording._envelope`
   fits it). A fitted envelope records the M and N its sweep reached (``M_range``, ``N_range``); beyond
   them its decision is ``extrapolated`` and not verified (``[Note: extrapolated envelope decisions]``);
5. ``inference``: a rule of :mod:`mmaemu.platforms._inference` that every row of the table obeys, within
   the domain its evidence covers (experimental: ``verified=False`` and
   :class:`~mmaemu.errors.InferredSplitWarning`).

``MMAEMU_SPLITK_STRICT=1`` (or ``true``, ``yes``, ``on``; :func:`env_flag`) turns 4 and 5 off. Anything
else raises :class:`~mmaemu.errors.SplitKUnknownError`; :func:`trace_splitk` says, per source, why it
did not decide (``explain`` prints it).
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._enums import TextEnum
from ..errors import (
    warn_caller,
    InferredSplitWarning,
    SplitKUnknownError,
    UnvalidatedEnvelopeWarning,
    UnverifiedSplitWarning,
)
from ..formats import Fp8Format, OutFormat
from .._host import env_flag
from .._split import Scheme, SplitK
from . import _cublaslt as cublaslt, _inference as inference
from ._profiles import Profile
from ._table import Setting, SplitTable, unpack_key

__all__ = [
    "Problem",
    "SplitSource",
    "SplitDecision",
    "resolve_splitk",
    "decide_quietly",
    "split_warnings",
    "combo_verified",
    "scheme_for",
    "live_query",
    "splitk_strict",
    "nearest_decided",
    "SplitStep",
    "trace_splitk",
    "splitk_advice",
]


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

    def setting(self, workspace_bytes: int) -> Setting:
        """The split-K table setting of this problem under a cuBLAS workspace."""
        return Setting(self.fmt_a, self.fmt_b, self.out, self.fast, workspace_bytes)


class SplitSource(TextEnum):
    """What decided a split-K decision (a string enum: ``SplitSource.TABLE == "table"``, printed as its value)."""

    EXPLICIT = "explicit"
    TABLE = "table"
    WORKSPACE0 = "workspace0"
    ENVELOPE = "envelope"
    LIVE_QUERY = "live-query"
    INFERENCE = "inference"


@dataclass(frozen=True)
class SplitDecision:
    """A split-K decision and what it rests on.

    Attributes:
        parts: number of K parts (1: unsplit), as :attr:`mmaemu.SplitK.parts`.
        scheme: how the parts are combined.
        source: what decided.
        verified: whether hardware evidence backs this decision and its arithmetic.
        table_id: the recorded table consulted, if any.
        note: which row, bound or argument decided.
        extrapolated: an envelope decision for a shape beyond the M and N its sweep reached (then
            ``verified`` is False and the note says which dimension); False for every other decision.
    """

    parts: int
    scheme: Scheme
    source: SplitSource
    verified: bool
    table_id: str | None
    note: str
    extrapolated: bool = False

    def __repr__(self) -> str:
        return (f"SplitDecision(S={self.parts}, scheme={self.scheme.value!r}, source={self.source.value!r}, "
                f"verified={self.verified}, table_id={self.table_id!r}, note={self.note!r}, "
                f"extrapolated={self.extrapolated})")

    @property
    def S(self) -> int:  # noqa: N802 - the seeds' name for the number of parts
        """The number of K parts (1: unsplit); the same as :attr:`parts`."""
        return self.parts

    @property
    def split(self) -> SplitK:
        """The decision as a :class:`~mmaemu.SplitK`."""
        return SplitK(self.parts, self.scheme)


def splitk_strict() -> bool:
    """Whether ``MMAEMU_SPLITK_STRICT`` turns the envelope and the inference rules off (:func:`env_flag`)."""
    return env_flag("MMAEMU_SPLITK_STRICT")


@functools.lru_cache(maxsize=None)
def _live_query_tool(gpu: str, sm_count: int, version: str) -> Any:
    """A cuBLASLt handle when this process runs on that reference platform, else None (cached)."""
    if not cublaslt.reference_platform_matches(gpu, sm_count, version):
        return None
    try:
        return cublaslt.CublasLt()
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
    result = tool.query(cublaslt.HeuristicQuery(
        m=problem.m, n=problem.n, k=problem.k, dtype_a=problem.fmt_a.dtype, dtype_b=problem.fmt_b.dtype,
        out_dtype=problem.out.dtype, use_fast_accum=problem.fast, workspace_bytes=profile.workspace_bytes,
    ))
    return (int(result.splitk), int(result.custom_option)) if result.ok else None


def scheme_for(profile: Profile, s: int, custom: int) -> Scheme:
    """The split scheme of a cuBLASLt decision (S and customOption) on ``profile``'s platform (its split
    family's rule, :meth:`~mmaemu.platforms.SplitFamily.scheme_for`)."""
    return profile.split_family.scheme_for(s, custom)


def combo_verified(profile: Profile, problem: Problem, s: int, scheme: Scheme) -> bool:
    """Whether this split combination's arithmetic was reproduced on a recorded hardware call."""
    if s == 1 or profile.table_id is None:
        return s == 1
    return SplitTable.load(profile.table_id).is_verified(problem.setting(profile.workspace_bytes), s, scheme)


def split_warnings(profile: Profile, problem: Problem, decision: SplitDecision) -> None:
    """Emit the warnings a decision carries (unverified splits, TE splits, unvalidated envelopes)."""
    if decision.parts > 1 and profile.transformer_engine and decision.source is not SplitSource.EXPLICIT:
        warn_caller(
            f"{profile.name}: S = {decision.parts} is experimental under Transformer Engine (no split call ran through TE's "
            "own GEMM on the reference GPU)", UnverifiedSplitWarning)
    elif decision.parts > 1 and not decision.verified:
        warn_caller(
            f"{profile.name}: split-K S = {decision.parts} {decision.scheme.value} for this output and format pair has not been "
            "replayed on hardware", UnverifiedSplitWarning)
    if decision.source is SplitSource.INFERENCE:
        warn_caller(
            f"{profile.name}: S = {decision.parts} is inferred, not recorded: {decision.note}; experimental (no recorded "
            "row or live query decides this shape; MMAEMU_SPLITK_STRICT=1 refuses it)", InferredSplitWarning)
    if decision.source is SplitSource.ENVELOPE and not decision.verified:
        why = ("S = 1 is extrapolated: the sweep the envelope was fitted and tested on did not reach this shape"
               if decision.extrapolated else "this envelope failed or lacks a held-out test")
        warn_caller(f"{profile.name}: {decision.note}; {why}", UnvalidatedEnvelopeWarning)


# [Note: extrapolated envelope decisions]
# The H100 envelope was fitted on the split-K sweep, whose grid reached M from 1 to 16,384 and N from 16
# to 2^20; its report lists larger M or N as extrapolated in M*N and untested (seeds 004, "What this does
# not show"; seeds 000: "were not tested"; the recording's envelope assumption 4, carried into the
# table's ``info["envelope"]`` as ``M_range`` and ``N_range`` by tools/evidence/convert_splitk.py). There the
# decision keeps S = 1 (the bits do not change) but is ``extrapolated`` and ``verified=False`` with an
# UnvalidatedEnvelopeWarning: no hardware query backs it, as none backs an inference rule, whose domain
# stops at the same M and N (mmaemu/platforms/_inference.py). A fitted envelope that records no range is
# treated as extrapolated everywhere. The RTX 4060 envelope (twice the largest split M*N) is a K-free rule
# checked on its table and 1,512,000 live queries, none beyond the table's K (16 to 16,384); seeds 000 says
# a K bound alone is not safe there, and seeds 002 counts envelope decisions as not validated. So above the
# largest K its table records, its decision is ``extrapolated`` and not verified, the same way.


def _extrapolation(env: dict[str, Any], problem: Problem) -> str:
    """Why a shape lies beyond the M and N a fitted envelope's sweep reached, or "" inside them."""
    if "M_range" not in env or "N_range" not in env:
        return "the envelope records no range of M and N it was fitted on"
    beyond = [f"{name} = {value:,} is outside the {int(lo):,} <= {name} <= {int(hi):,} its sweep reached"
              for name, value, (lo, hi) in (("M", problem.m, env["M_range"]), ("N", problem.n, env["N_range"]))
              if not int(lo) <= value <= int(hi)]
    return " and ".join(beyond)


def _envelope(profile: Profile, problem: Problem, table: SplitTable) -> tuple[SplitDecision | None, str]:
    """The envelope's decision, or None and why it does not decide."""
    mn = problem.m * problem.n
    env = table.info["envelope"]
    if env["kind"] == "k_grid":
        if not env["K_min"] <= problem.k <= env["K_max"]:
            return None, f"K = {problem.k:,} is outside its range {env['K_min']:,} <= K <= {env['K_max']:,}"
        want = problem.setting(profile.workspace_bytes)
        for b in env["bounds"]:
            if Setting.from_names(b) == want:
                grid = env["K_grid"]
                i = int(np.searchsorted(grid, problem.k, side="left"))
                bound = int(b["B"][i])
                if mn <= bound:
                    return None, f"M*N = {mn:,} is not above its bound {bound:,} for K <= {grid[i]:,}"
                status = env["validation"].get(str(profile.workspace_bytes), {}).get("status")
                beyond = _extrapolation(env, problem)
                note = (f"M*N = {mn:,} > {bound:,}, the {profile.gpu.removeprefix('NVIDIA ')} bound for K <= {grid[i]:,} "
                        f"in this setting (held-out test: {status})" + (f"; extrapolated: {beyond}" if beyond else ""))
                return SplitDecision(1, Scheme.NONE, SplitSource.ENVELOPE, status == "validated" and not beyond,
                                     table.table_id, note, extrapolated=bool(beyond)), ""
        return None, "it has no bound for this setting"
    stats = table.setting_stats(problem.setting(profile.workspace_bytes))
    if stats is None or stats["max_split_MN"] is None:
        return None, "the table records no split of this setting to bound"
    bound = 2 * int(stats["max_split_MN"])
    if mn <= bound:
        return None, f"M*N = {mn:,} is not above {bound:,}, twice the setting's largest split M*N"
    k_max = table.largest_k
    beyond = f"K = {problem.k:,} is above the largest K its table records ({k_max:,})" if problem.k > k_max else ""
    return SplitDecision(
        1, Scheme.NONE, SplitSource.ENVELOPE, not beyond, table.table_id,
        f"M*N = {mn:,} > {bound:,}, twice the largest split M*N of this setting on the "
        f"{profile.gpu.removeprefix('NVIDIA ')}" + (f"; extrapolated: {beyond}" if beyond else ""),
        extrapolated=bool(beyond),
    ), ""


def resolve_splitk(profile: Profile, problem: Problem) -> SplitDecision:
    """cuBLAS's split-K decision for ``problem`` on ``profile``'s reference platform, from evidence.

    Emits :class:`UnverifiedSplitWarning` / :class:`UnvalidatedEnvelopeWarning` /
    :class:`InferredSplitWarning` where the decision carries one.

    Raises:
        SplitKUnknownError: when no recorded row, workspace rule, live query, envelope or inference decides.
    """
    decision = _decide(profile, problem)
    split_warnings(profile, problem, decision)
    return decision


def decide_quietly(profile: Profile, problem: Problem) -> SplitDecision | None:
    """:func:`resolve_splitk`'s decision without its warnings, or None where no evidence decides."""
    try:
        return _decide(profile, problem)
    except SplitKUnknownError:
        return None


@dataclass(frozen=True)
class SplitStep:
    """One source of :func:`resolve_splitk`, in its order, and what it found for a call.

    Attributes:
        source: the source.
        decided: whether it decided the call (the last step of a decided call).
        why: what it found: the decision's note, or why it did not decide.
    """

    source: SplitSource
    decided: bool
    why: str

    def __str__(self) -> str:
        return f"{self.source.value}: {'decides, ' if self.decided else ''}{self.why}"


def trace_splitk(profile: Profile, problem: Problem) -> tuple[SplitStep, ...]:
    """Each source :func:`resolve_splitk` consults for ``problem``, in order, with what it found.

    The same code path as :func:`resolve_splitk`, without its warnings. The last step of a decided call
    has ``decided=True``; a call no source decides has only undecided steps. Reads
    ``MMAEMU_SPLITK_STRICT`` as the call does (a bad value raises ``ValueError``).
    """
    steps: list[SplitStep] = []
    try:
        decision = _decide(profile, problem, steps)
    except SplitKUnknownError:
        return tuple(steps)
    return (*steps, SplitStep(decision.source, True, decision.note))


def _decide(profile: Profile, problem: Problem, steps: list[SplitStep] | None = None) -> SplitDecision:
    def skip(source: SplitSource, why: str) -> None:
        if steps is not None:
            steps.append(SplitStep(source, False, why))

    strict = splitk_strict()  # read first: a bad value raises whichever rule decides
    table = SplitTable.load(profile.table_id) if profile.table_id else None
    setting_obj = problem.setting(profile.workspace_bytes)
    if table is not None:
        setting = setting_obj.code
        row = table.lookup(setting, problem.m, problem.n, problem.k)
        if row is not None:
            s, custom = int(table.S[row]), int(table.custom[row])
            scheme = scheme_for(profile, s, custom)
            verified = combo_verified(profile, problem, s, scheme)
            if s > 1 and custom not in profile.split_family.replayed_custom:
                verified = False  # a customOption no split call of the family replayed ([Note: split families])
            return SplitDecision(s, scheme, SplitSource.TABLE, verified, table.table_id,
                                 f"row {row} of {table.table_id} (customOption {custom})")
        skip(SplitSource.TABLE, f"{table.table_id} has no row for {problem.m} x {problem.n} x {problem.k} in this "
                                f"setting ({_setting_text(setting_obj)})")
    else:
        skip(SplitSource.TABLE, f"profile {profile.name!r} has no split-K table")
    if profile.workspace_bytes == 0:
        return SplitDecision(1, Scheme.NONE, SplitSource.WORKSPACE0, True, None,
                             "cuBLAS never splits K without a workspace (653,400 H100 queries, none split)")
    skip(SplitSource.WORKSPACE0, f"the workspace is {profile.workspace_bytes >> 20} MiB, not 0")
    answer = live_query(profile, problem)
    if answer is not None:
        s, custom = answer
        scheme = scheme_for(profile, s, custom)
        return SplitDecision(s, scheme, SplitSource.LIVE_QUERY, combo_verified(profile, problem, s, scheme),
                             None, f"cuBLASLt heuristic queried on this {profile.gpu} (customOption {custom})")
    skip(SplitSource.LIVE_QUERY, f"this machine is not the {profile.gpu} with cuBLASLt {profile.cublaslt}"
         if profile.table_id else "the profile has no reference GPU to query")
    if table is not None and not strict:
        inferred, why = _envelope(profile, problem, table)
        if inferred is not None:
            return inferred
        skip(SplitSource.ENVELOPE, why)
        notes: list[str] = []
        rule = inference.infer(table, setting_obj, problem.m, problem.n, problem.k, notes)
        if rule is not None:
            scheme = scheme_for(profile, rule.parts, rule.custom)
            return SplitDecision(rule.parts, scheme, SplitSource.INFERENCE, False, table.table_id, rule.note)
        skip(SplitSource.INFERENCE, "; ".join(notes))
    elif table is not None:
        skip(SplitSource.ENVELOPE, "off (MMAEMU_SPLITK_STRICT)")
        skip(SplitSource.INFERENCE, "off (MMAEMU_SPLITK_STRICT)")
    raise SplitKUnknownError(_unknown_message(profile, problem, table))


def _setting_text(setting: Setting) -> str:
    return (f"{setting.fmt_a.short_name} x {setting.fmt_b.short_name} -> {setting.out.dtype_name}, "
            f"use_fast_accum={setting.fast}, {setting.workspace_bytes >> 20} MiB workspace")


def nearest_decided(table: SplitTable, setting: Setting, m: int, n: int, k: int,
                    count: int = 3) -> list[tuple[int, int, int, int]]:
    """The ``count`` recorded shapes of ``setting`` nearest to (M, N, K), as ``(M, N, K, S)``.

    Nearness is the Euclidean distance between the shapes' log2 (M, N, K): a shape twice as large in
    one dimension is as near as one half as large. Ties keep the table's order.
    """
    lo, hi = int(table.setting_start[setting.code]), int(table.setting_start[setting.code + 1])
    if hi == lo:
        return []
    rm, rn, rk = unpack_key(table.key[lo:hi])
    want = np.log2(np.maximum([m, n, k], 1)).astype(np.float64)
    got = np.log2(np.maximum(np.stack([rm, rn, rk], 1), 1).astype(np.float64))
    order = np.argsort(((got - want) ** 2).sum(1), kind="stable")[:count]
    return [(int(rm[i]), int(rn[i]), int(rk[i]), int(table.S[lo + i])) for i in order]


def splitk_advice(profile: Profile, problem: Problem) -> tuple[str, ...]:
    """What is known near an undecided call and what to do about it: the nearest decided shapes of the
    table, when an explicit ``splitk=`` is justified, and how a recording settles it (one sentence each)."""
    table = SplitTable.load(profile.table_id) if profile.table_id else None
    lines = []
    if table is not None:
        near = nearest_decided(table, problem.setting(profile.workspace_bytes), problem.m, problem.n, problem.k)
        if near:
            shown = "; ".join(f"{m} x {n} x {k}: S = {s}" for m, n, k, s in near)
            lines.append(f"Nearest shapes the {profile.gpu.removeprefix('NVIDIA ')} table decides (M x N x K): {shown}.")
    schemes = " or ".join(f'(S, "{s.value}")' for s in profile.schemes)
    lines.append(
        "Pass splitk=1 only if you know the reference GPU did not split this call (you recorded it, or it ran "
        f"without a cuBLAS workspace: a '-ws0' profile), or its known split as splitk={schemes}."
    )
    gpu = f"the {profile.gpu} (cuBLASLt {profile.cublaslt})" if profile.table_id else "the GPU this profile stands for"
    lines.append(
        f"To settle it, run python -m mmaemu record --out DIR on {gpu} and load the recording with "
        "mmaemu.recording.register_recording(DIR)."
    )
    return tuple(lines)


def _unknown_message(profile: Profile, problem: Problem, table: SplitTable | None) -> str:
    """What SplitKUnknownError says: what is unknown, what is known nearby, and what to do."""
    where = f"the {profile.gpu}" if table is not None else f"profile {profile.name!r} (it has no split-K table)"
    call = (f"M, N, K = {problem.m}, {problem.n}, {problem.k} ({problem.fmt_a.short_name} x "
            f"{problem.fmt_b.short_name} -> {problem.out.dtype_name}, use_fast_accum={problem.fast})")
    advice = splitk_advice(profile, problem)
    fmt = f"{problem.fmt_a.short_name},{problem.fmt_b.short_name}"
    see = (f"See what is known: python -m mmaemu explain {problem.m} {problem.n} {problem.k} --out "
           f"{problem.out.dtype_name} --fmt {fmt}{' --fast' if problem.fast else ''} --profile {profile.name}.")
    near = [line for line in advice if line.startswith("Nearest")]
    rest = [line for line in advice if not line.startswith("Nearest")]
    first = f"no recorded evidence decides whether {where} splits K for {call} under profile {profile.name!r}."
    return " ".join([first, *near, see, *rest])
