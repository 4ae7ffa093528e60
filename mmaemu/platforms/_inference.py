"""Split-K decisions inferred by rules that every recorded row of a table obeys (experimental).

A recorded table decides only the shapes it holds. The rules here decide some shapes it does not hold,
each from a mechanism of cuBLAS's split-K and within the domain its evidence covers. Every rule is
checked against every row of its table (:func:`check_rule`: the rows it makes a claim about, and how
many of those claims the recorded row contradicts; ``tools/evidence/shape_grid.py --rules`` prints them, and
``tests/unit/test_inference.py`` requires 0). Fitting every record does not make a rule true: an inferred
decision is ``verified=False`` and warns (:class:`~mmaemu.errors.InferredSplitWarning`), and
``MMAEMU_SPLITK_STRICT=1`` refuses it.

The shipped rules (:data:`SHIPPED`), each bound to the one table its evidence comes from:

- :attr:`Rule.H100_K_FLOOR`: at 1 MiB the H100 PCIe does not split K below 5,136;
- :attr:`Rule.H100_SMALL_K`: nor below the K range anything was recorded in (K < 1,024), at 1 MiB;
- :attr:`Rule.H100_WORKSPACE`: on the H100 PCIe a split into S parts keeps S fp32 partial outputs in the
  workspace, so where not even two fit, S = 1;
- :attr:`Rule.RTX4060_FORMAT_PAIR`: on the RTX 4060 the decision does not depend on the FP8 formats, so a
  shape recorded under another format pair of the same output, accumulation and workspace decides.

:data:`CANDIDATES` also holds rules that were tried and are not shipped, with the reason; the tool checks
them too, so their contradictions stay visible.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from .._enums import TextEnum
from ._gpus import GPUS, ReferenceGpu
from ._table import FP8_FORMATS, WS_BYTES, Setting, SplitTable, unpack_key

__all__ = [
    "CANDIDATES",
    "SHIPPED",
    "Domain",
    "Inferred",
    "Rule",
    "RuleCheck",
    "RuleKind",
    "RuleSpec",
    "check_rule",
    "infer",
]

_MIB = 1 << 20


class Rule(TextEnum):
    """The name of an inference rule (a string enum, printed as its value)."""

    H100_K_FLOOR = "h100-k-floor"
    H100_SMALL_K = "h100-small-k"
    H100_WORKSPACE = "h100-workspace"
    RTX4060_FORMAT_PAIR = "rtx4060-format-pair"
    H100_K_FLOOR_32MIB = "h100-k-floor-32mib"
    H100_SMALL_K_32MIB = "h100-small-k-32mib"
    RTX4060_SMALL_K = "rtx4060-small-k"
    H100_FORMAT_PAIR = "h100-format-pair"
    RTX4060_WORKSPACE = "rtx4060-workspace"


class RuleKind(enum.Enum):
    """The mechanism a rule states."""

    K_FLOOR = "no split below a K"
    SMALL_K = "no split below the recorded K range: splits only grow with K, and every part keeps many k-tiles"
    WORKSPACE = "S fp32 partial outputs must fit in the workspace"
    FORMAT_PAIR = "the decision does not depend on the FP8 format pair"


@dataclass(frozen=True)
class Domain:
    """The shapes and workspaces a rule may decide: what its evidence covers, nothing beyond.

    Attributes:
        workspaces: the cuBLAS workspaces (bytes).
        k_min: smallest K (inclusive).
        k_max: largest K (inclusive).
        m_max: largest M.
        n_max: largest N.
    """

    workspaces: tuple[int, ...]
    k_min: int
    k_max: int
    m_max: int
    n_max: int

    def outside(self, workspace: int, m: int, n: int, k: int) -> str | None:
        """Why a call is outside the domain, or None when it is inside."""
        if workspace not in self.workspaces:
            return f"the workspace is {_ws(workspace)}, not {' or '.join(_ws(w) for w in self.workspaces)}"
        if not self.k_min <= k <= self.k_max:
            return f"K = {k:,} is outside {self.k_min:,} <= K <= {self.k_max:,}"
        if m > self.m_max or n > self.n_max:
            return f"M = {m:,}, N = {n:,} exceed the recorded M <= {self.m_max:,}, N <= {self.n_max:,}"
        return None

    def mask(self, ws: np.ndarray, m: np.ndarray, n: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`outside` is None."""
        return (np.isin(ws, self.workspaces) & (k >= self.k_min) & (k <= self.k_max) & (m <= self.m_max)
                & (n <= self.n_max))

    def text(self) -> str:
        """The domain in words."""
        return (f"workspace {', '.join(_ws(w) for w in self.workspaces)}; {self.k_min:,} <= K <= {self.k_max:,}; "
                f"M <= {self.m_max:,}; N <= {self.n_max:,}")


@dataclass(frozen=True)
class RuleSpec:
    """One inference rule: its table, mechanism, parameter and domain.

    Attributes:
        rule: its name.
        kind: the mechanism it states.
        table_id: the one recorded table it is checked against and applies to.
        domain: what it may decide.
        k_floor: for :attr:`RuleKind.K_FLOOR`, the smallest K at which a split was recorded (S = 1 below it).
        pad: for :attr:`RuleKind.WORKSPACE`, the padding of M and N in the mechanism check (the inference
            itself uses the unpadded M and N, the weaker claim).
        k_tile: for :attr:`RuleKind.SMALL_K`, the width of the k-tiles the platform's split parts own.
        mechanism: why the rule should hold, and its evidence.
        shipped: whether ``splitk="auto"`` uses it.
        why_not: for a candidate that is not shipped, why.
    """

    rule: Rule
    kind: RuleKind
    table_id: str
    domain: Domain
    mechanism: str
    k_floor: int = 0
    pad: int = 1
    k_tile: int = 0
    shipped: bool = True
    why_not: str = ""


@dataclass(frozen=True)
class Inferred:
    """A decision a rule infers: S and customOption (0 where S = 1), and which rule and row."""

    rule: Rule
    parts: int
    custom: int
    note: str


@dataclass(frozen=True)
class RuleCheck:
    """A rule checked against every row of its table.

    Attributes:
        rule: the rule.
        table_id: the table.
        rows: the table's rows.
        rows_checked: rows the rule makes a claim about (inside its domain, where it decides).
        contradictions: rows among those whose recorded decision differs from the rule's.
        mechanism_rows: rows the mechanism itself was checked on (workspace: the split rows).
        mechanism_contradictions: rows among those that break the mechanism.
        example: one contradicting row ``(M, N, K, setting names, recorded S)``, or None.
    """

    rule: Rule
    table_id: str
    rows: int
    rows_checked: int
    contradictions: int
    mechanism_rows: int
    mechanism_contradictions: int
    example: tuple[int, int, int, str, int] | None

    @property
    def holds(self) -> bool:
        """Whether no recorded row contradicts the rule or its mechanism."""
        return self.contradictions == 0 and self.mechanism_contradictions == 0


def _table_of(gpu: ReferenceGpu) -> str:
    """The id of the table recorded on ``gpu``, whose rows a rule of that GPU is checked against."""
    if gpu.table_id is None:
        raise ValueError(f"reference GPU {gpu.key!r} has no split-K table to bind an inference rule to")
    return gpu.table_id


#: The tables the rules below are bound to (each rule's evidence comes from that GPU's recordings), and the
#: width of the k-tiles its split parts own (its split family's).
_H100, _RTX4060 = _table_of(GPUS["h100"]), _table_of(GPUS["rtx4060"])
_H100_TILE, _RTX4060_TILE = GPUS["h100"].split_family.tile, GPUS["rtx4060"].split_family.tile

_SWEEP_K = (1024, 4_194_304)  # the K range of the H100 split-K sweep's grid (seeds 004, p1)
_SWEEP_M, _SWEEP_N = 16_384, 1 << 20  # "shapes with M above 16,384 or N above 2^20 were not tested" (seeds 004)

# [Note: the H100 K floor]
# Mechanism (presumed, not read from cuBLAS): a split-K kernel pays for a second pass over S partial
# outputs, so cuBLASLt's heuristic takes it only when K is long enough for each part to keep many 128-wide
# k-tiles busy. In the H100 sweep's dense K part (p2: K from 1,024 in steps of 16 to 16,384, M in
# {1, 16, 128, 1024}, M*N from 30,720 to 307,200) the first split at 1 MiB is at K = 5,136; on its coarse grid (p1: 24 M from 1 to 16,384,
# M*N from 7,680 to about 15.7 million, 33 K) the first is at K = 5,744 (seeds 004). Every 1 MiB row of the
# recorded table with K <= 5,120 (1,024, 1,920, 2,048, 3,584, 4,096 and 5,120; M*N down to 64) is unsplit.
# Domain: 1 MiB only (no dense K sweep is documented at 32 MiB, so the same floor there is a candidate,
# not shipped), 1,024 <= K <= 5,135, M <= 16,384, N <= 2^20. Below K = 1,024 no H100 heuristic was
# recorded at all, so nothing is claimed there. The table alone cannot tell a floor of 5,136 from one of
# 5,760 (it has no K in between); the dense sweep fixes it, and a floor above 5,760 is contradicted by
# table rows (tests/unit/test_inference.py breaks it on purpose). Assumed, not shown: a shape between the
# table's rows with M*N below the sweeps' 7,680 splits no more readily than its recorded neighbours at
# K = 4,096 and 5,120.
_K_FLOOR = RuleSpec(
    Rule.H100_K_FLOOR, RuleKind.K_FLOOR, _H100,
    Domain((_MIB,), _SWEEP_K[0], 5135, _SWEEP_M, _SWEEP_N),
    "cuBLASLt splits only long K: the H100 sweep's dense K part first splits at K = 5,136 at 1 MiB "
    "(specified), and every 1 MiB table row with K <= 5,120 is unsplit",
    k_floor=5136,
)

# [Note: the H100 below the recorded K range]
# No H100 heuristic was recorded below K = 1,024 (the sweep's grids start there, seeds 004 p1 and p2; the
# table's smallest K is 1,024), so no row decides a toy GEMM (16^3 to 512^3, a 256 -> 512 -> 128 MLP). The
# rule h100-small-k takes S = 1 there, at 1 MiB, from three premises, each checked on every row (check_rule):
# 1. the K floor above: at 1 MiB nothing splits for 1,024 <= K <= 5,135 (the dense sweep; 459,396 table rows);
# 2. the split set only grows with K: in no (M, N, setting) group of the H100 table does an unsplit row lie
#    at a larger K than a split row (every workspace). At 1 MiB, 283,533 rows have an unsplit row above them
#    in K and none of them splits; 6,017 of the 10,355 split rows have rows above them, all split. The
#    envelope's fit assumes the same (its assumption 2) and passed its sealed held-out test at 1 MiB
#    (seeds 004). So a shape unsplit at K = 1,024 is unsplit below it;
# 3. the mechanism (presumed, not read from cuBLAS): each split part runs the main loop over its own run of
#    128-wide k-tiles (the contiguous split, seeds 002), which pays only when the part is long. Every part
#    of every recorded H100 split has at least 18 k-tiles, the largest part at least 22 (36,457 split
#    rows, every workspace), where a split of a K < 1,024 call (8 k-tiles at most) could give no part more
#    than 4; a split row whose largest part has 4 or fewer counts as a contradiction. NVIDIA's open sm90
#    GEMM templates have limits of this kind (CUTLASS, include/cutlass/gemm/kernel/tile_scheduler_params.h:
#    a stream-K unit gets at least min_iters_per_sk_unit_ = 8 k-tiles, line 467; a split-K is clamped to
#    the k-tile count, line 1605); cuBLASLt's heuristic is closed, so that is an analogy, not its source.
# The RTX 4060 shows that this is the H100's behaviour, not cuBLASLt's: its table (K from 16) splits
# K = 16 into 3 parts and has split rows below unsplit ones in K (candidate rtx4060-small-k,
# contradicted). Assumed, not shown: an (M, N) the table does not record behaves as its recorded
# neighbours do (the K floor's assumption). Domain: 1 MiB only (no K floor is established at 32 MiB: the
# candidate h100-small-k-32mib fits the table and is not shipped, like h100-k-floor-32mib),
# 16 <= K <= 1,023, and the sweep's M <= 16,384, N <= 2^20.
_SMALL_K = RuleSpec(
    Rule.H100_SMALL_K, RuleKind.SMALL_K, _H100,
    Domain((_MIB,), 16, _SWEEP_K[0] - 1, _SWEEP_M, _SWEEP_N),
    "below the recorded K range the H100 does not split at 1 MiB: nothing splits below K = 5,136 there, no "
    "recorded split row lies below an unsplit row of its M, N and setting in K, and every part of every recorded "
    "split keeps at least 18 of the 128-wide k-tiles, where a split of a K < 1,024 call could give a part 4 at most",
    k_tile=_H100_TILE,
)

# [Note: the H100 workspace capacity]
# Mechanism (presumed from the rows' tightness, not read from cuBLAS): the H100's split-K kernels write
# each part's fp32 partial output (M x N, padded) to the cuBLAS workspace and reduce them afterwards, so a
# split into S parts needs S x padded M x padded N x 4 bytes.
# Every split row of the recorded table (36,457 rows, every workspace) fits with M and N padded to
# multiples of 8, the tightest at 0.98 of the workspace; padded to 16, 210 rows would not fit, so the
# padding is at most 8. The inference uses unpadded M and N (the weaker claim): when 2 x M x N x 4 bytes
# exceed the workspace, no split fits and S = 1 (M*N > 131,072 at 1 MiB, > 4,194,304 at 32 MiB).
# The seeds agree: at 1 MiB the sweep's largest split M*N is 129,024 at every K; at 32 MiB 3.93 million
# splits and 5.90 million never does (seeds 004). Domain: the sweep's K range, 1,024 <= K <= 4,194,304, and
# its M <= 16,384, N <= 2^20, at every recorded workspace (at 0 it agrees with the workspace0 rule, which
# decides first; 4 MiB has table rows but no H100 profile). Outside that K range no split was recorded,
# and a kernel that splits without a workspace (the RTX 4060 has them: the candidate rtx4060-workspace is
# contradicted by 1,835 split rows) would break the mechanism.
_WORKSPACE = RuleSpec(
    Rule.H100_WORKSPACE, RuleKind.WORKSPACE, _H100,
    Domain(WS_BYTES, *_SWEEP_K, _SWEEP_M, _SWEEP_N),
    "a split keeps S fp32 partial outputs in the workspace: every H100 split row has "
    "S x padded M x padded N x 4 bytes <= workspace (padding 8)",
    pad=8,
)

# [Note: the RTX 4060 format pair]
# Mechanism (presumed): on the RTX 4060 cuBLASLt's heuristic weighs the sizes, the output and the
# accumulation, not the FP8 encoding of the operands (E4M3 and E5M2 run at the same tensor-core rate).
# Evidence: the 998,480 rows of the table whose shape is recorded under two or more format pairs of the
# same output, accumulation and workspace agree in both S and customOption. The rule copies a recorded row
# of another pair; it never decides a shape no pair recorded. Domain: the shapes of the table (K 16 to
# 16,384, M <= 16,384, N <= 24,576), every recorded workspace (the profiles use 1 and 4 MiB); a setting
# with no row at all (one the heuristic rejects) is never inferred. The H100's decisions do depend on the
# pair (candidate h100-format-pair: 87,108 rows contradict it).
_FORMAT_PAIR = RuleSpec(
    Rule.RTX4060_FORMAT_PAIR, RuleKind.FORMAT_PAIR, _RTX4060,
    Domain(WS_BYTES, 16, 16_384, 16_384, 24_576),
    "the RTX 4060's decision does not depend on the FP8 formats: every shape recorded under two or more "
    "format pairs has one (S, customOption)",
)

#: The rules ``splitk="auto"`` uses, in the order they are tried.
SHIPPED: tuple[RuleSpec, ...] = (_K_FLOOR, _SMALL_K, _WORKSPACE, _FORMAT_PAIR)

#: Every rule checked by the tool: the shipped ones and the candidates that are not shipped.
CANDIDATES: tuple[RuleSpec, ...] = SHIPPED + (
    RuleSpec(Rule.H100_K_FLOOR_32MIB, RuleKind.K_FLOOR, _H100, Domain((32 * _MIB,), _SWEEP_K[0], 5135, _SWEEP_M,
             _SWEEP_N), "the 1 MiB floor at Transformer Engine's 32 MiB", k_floor=5136, shipped=False,
             why_not="fits the table, but the table has only six K values below 5,136 and no dense K sweep is "
                     "documented at 32 MiB"),
    RuleSpec(Rule.H100_SMALL_K_32MIB, RuleKind.SMALL_K, _H100, Domain((32 * _MIB,), 16, _SWEEP_K[0] - 1,
             _SWEEP_M, _SWEEP_N), "the 1 MiB small-K rule at Transformer Engine's 32 MiB", k_tile=_H100_TILE,
             shipped=False,
             why_not="fits the table, but it rests on a K floor at 32 MiB, which is not established (h100-k-floor-32mib)"),
    RuleSpec(Rule.RTX4060_SMALL_K, RuleKind.SMALL_K, _RTX4060, Domain((_MIB, 4 * _MIB), 16, 1023, 16_384, 24_576),
             "the H100 small-K rule on the RTX 4060 (64-wide k-tiles)", k_tile=_RTX4060_TILE, shipped=False,
             why_not="contradicted by the RTX 4060 table (it splits K = 16 into 3 parts, and some of its splits lie "
                     "below unsplit rows in K)"),
    RuleSpec(Rule.H100_FORMAT_PAIR, RuleKind.FORMAT_PAIR, _H100, Domain((_MIB, 32 * _MIB), *_SWEEP_K, _SWEEP_M,
             _SWEEP_N), "the RTX 4060 format-pair rule on the H100", shipped=False,
             why_not="contradicted by the H100 table"),
    RuleSpec(Rule.RTX4060_WORKSPACE, RuleKind.WORKSPACE, _RTX4060, Domain((_MIB, 4 * _MIB), 16, 16_384, 16_384,
             24_576), "the H100 workspace rule on the RTX 4060", pad=1, shipped=False,
             why_not="contradicted by the RTX 4060 table (its kernels split without a workspace per part)"),
)


def _ws(workspace: int) -> str:
    return f"{workspace // _MIB} MiB" if workspace else "0 (none)"


def _other_pairs(setting: Setting) -> list[Setting]:
    return [Setting(a, b, setting.out, setting.fast, setting.workspace_bytes)
            for a in FP8_FORMATS for b in FP8_FORMATS if (a, b) != (setting.fmt_a, setting.fmt_b)]


def _decide(spec: RuleSpec, table: SplitTable, setting: Setting, m: int, n: int, k: int) -> tuple[Inferred | None, str]:
    """The rule's decision for one call inside its domain, or None and why it does not decide."""
    if spec.kind is RuleKind.K_FLOOR:
        if k < spec.k_floor:
            return Inferred(spec.rule, 1, 0, f"K = {k:,} < {spec.k_floor:,}: at this workspace no split was recorded "
                                             f"below K = {spec.k_floor:,} ({spec.rule.value})"), ""
        return None, f"K = {k:,} >= {spec.k_floor:,}"
    if spec.kind is RuleKind.SMALL_K:
        tiles = -(-k // spec.k_tile)
        return Inferred(spec.rule, 1, 0, f"K = {k:,} is below the recorded K range: {tiles} k-tiles of {spec.k_tile}, so "
                                         f"a split part would have at most {-(-tiles // 2)}, fewer than every recorded "
                                         f"split part ({spec.rule.value})"), ""
    if spec.kind is RuleKind.WORKSPACE:
        need = 2 * m * n * 4
        if need > setting.workspace_bytes:
            return Inferred(spec.rule, 1, 0, f"two fp32 partial outputs of M x N = {m:,} x {n:,} need {need:,} bytes, "
                                             f"more than the {_ws(setting.workspace_bytes)} workspace "
                                             f"({spec.rule.value})"), ""
        return None, f"two fp32 partial outputs ({need:,} bytes) fit in the {_ws(setting.workspace_bytes)} workspace"
    if int(table.setting_start[setting.code + 1]) == int(table.setting_start[setting.code]):
        return None, "the table holds no row of this setting (the heuristic may reject it)"
    found = []
    for other in _other_pairs(setting):
        row = table.lookup(other.code, m, n, k)
        if row is not None:
            found.append((other, row))
    if not found:
        return None, "no other format pair records this shape"
    decisions = {(int(table.S[r]), int(table.custom[r])) for _, r in found}
    if len(decisions) > 1:
        return None, f"the format pairs that record this shape disagree ({sorted(decisions)})"
    other, row = found[0]
    s, custom = decisions.pop()
    return Inferred(spec.rule, s, custom, f"row {row} of {table.table_id}, recorded for "
                                          f"{other.fmt_a.short_name} x {other.fmt_b.short_name} "
                                          f"(customOption {custom}; {spec.rule.value})"), ""


def infer(table: SplitTable, setting: Setting, m: int, n: int, k: int,
          steps: list[str] | None = None) -> Inferred | None:
    """The first shipped rule of ``table`` that decides the call, or None.

    Args:
        table: the profile's split-K table (only the rules bound to its id apply).
        setting: the call's setting (formats, output, fast, the profile's workspace).
        m: M.
        n: N.
        k: K.
        steps: if given, one line per rule tried that did not decide, saying why.
    """
    applicable = [spec for spec in SHIPPED if spec.table_id == table.table_id]
    if not applicable and steps is not None:
        steps.append(f"no inference rule is checked against table {table.table_id}")
    for spec in applicable:
        why = spec.domain.outside(setting.workspace_bytes, m, n, k)
        if why is None:
            inferred, why = _decide(spec, table, setting, m, n, k)
            if inferred is not None:
                return inferred
        if steps is not None:
            steps.append(f"{spec.rule.value}: {why}")
    return None


def _rows(table: SplitTable) -> tuple[np.ndarray, ...]:
    """Per row: setting code, workspace bytes, M, N, K, S, customOption."""
    starts = np.asarray(table.setting_start, np.int64)
    setting = np.repeat(np.arange(256, dtype=np.int64), np.diff(starts))
    ws = np.asarray(WS_BYTES, np.int64)[setting & 3]
    m, n, k = unpack_key(table.key)
    return setting, ws, m, n, k, np.asarray(table.S, np.int64), np.asarray(table.custom, np.int64)


def _example(table: SplitTable, setting: np.ndarray, m: np.ndarray, n: np.ndarray, k: np.ndarray, s: np.ndarray,
             bad: np.ndarray) -> tuple[int, int, int, str, int] | None:
    idx = np.nonzero(bad)[0]
    if len(idx) == 0:
        return None
    i = int(idx[0])
    names = Setting.from_code(int(setting[i])).names()
    text = f"{names['fmt_a']} x {names['fmt_b']} -> {names['out']}, fast={names['fast']}, {_ws(names['ws'])}"
    return int(m[i]), int(n[i]), int(k[i]), text, int(s[i])


def _small_k_claims(spec: RuleSpec, table: SplitTable, setting: np.ndarray, ws: np.ndarray, k: np.ndarray,
                    s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A small-K rule's claims (S = 1) and its broken mechanism rows, over every row at its workspaces.

    Claimed: a row inside the domain, and a row with an unsplit row of its M, N and setting at a larger K
    (the step from an unsplit K to every K below it). Broken: a split row whose largest part has no more
    k-tiles than a part of a split of the domain's largest K could have.
    """
    at_ws = np.isin(ws, spec.domain.workspaces)
    m, n, _ = unpack_key(table.key)
    _, group = np.unique((setting << 42) | (np.asarray(table.key, np.int64) >> 21), return_inverse=True)
    group = group.reshape(-1)
    top_unsplit = np.full(int(group.max(initial=-1)) + 1, -1, np.int64)
    np.maximum.at(top_unsplit, group[s == 1], k[s == 1])
    claimed = spec.domain.mask(ws, m, n, k) | (at_ws & (k < top_unsplit[group]))
    longest = -(-(-(-spec.domain.k_max // spec.k_tile)) // 2)
    parts = -(-(-(-k // spec.k_tile)) // np.maximum(s, 1))
    return claimed, at_ws & (s > 1) & (parts <= longest)


def check_rule(spec: RuleSpec, table: SplitTable) -> RuleCheck:
    """Check a rule against every row of ``table``: its claims, and for a workspace rule its mechanism.

    A row is checked when it lies in the rule's domain and the rule decides its shape from what it
    would know without that row (the format-pair rule: the rows of the other pairs; the small-K rule: an
    unsplit row of the same M, N and setting at a larger K); it contradicts the rule when its recorded S
    (and, for the format-pair rule, customOption) differs from the rule's.
    """
    setting, ws, m, n, k, s, custom = _rows(table)
    inside = spec.domain.mask(ws, m, n, k)
    mech_rows = mech_bad = 0
    bad_example: np.ndarray | None = None
    if spec.kind is RuleKind.K_FLOOR:
        claimed = inside & (k < spec.k_floor)
        bad = claimed & (s != 1)
    elif spec.kind is RuleKind.SMALL_K:
        claimed, broken = _small_k_claims(spec, table, setting, ws, k, s)
        bad = claimed & (s != 1)
        mech_rows, mech_bad = int((np.isin(ws, spec.domain.workspaces) & (s > 1)).sum()), int(broken.sum())
        if not bad.any():
            bad_example = broken
    elif spec.kind is RuleKind.WORKSPACE:
        claimed = inside & (2 * m * n * 4 > ws)
        bad = claimed & (s != 1)
        split = s > 1
        padded = s * (-(-m // spec.pad) * spec.pad) * (-(-n // spec.pad) * spec.pad) * 4
        broken = split & (padded > ws)
        mech_rows, mech_bad = int(split.sum()), int(broken.sum())
        if not bad.any():
            bad_example = broken
    else:
        group = setting & 0x3F  # the setting without its format pair (bits 7 and 6)
        order = np.lexsort((table.key, group))
        g, key = group[order], np.asarray(table.key)[order]
        same = (g[1:] == g[:-1]) & (key[1:] == key[:-1])
        start = np.concatenate([[True], ~same])
        gid = np.cumsum(start) - 1
        size = np.bincount(gid)
        decision = (s * 256 + custom)[order]
        lo = np.full(len(size), np.iinfo(np.int64).max)
        hi = np.full(len(size), np.iinfo(np.int64).min)
        np.minimum.at(lo, gid, decision)
        np.maximum.at(hi, gid, decision)
        claimed_sorted = size[gid] > 1
        bad_sorted = claimed_sorted & (lo[gid] != hi[gid])
        claimed, bad = np.zeros(len(s), bool), np.zeros(len(s), bool)
        claimed[order], bad[order] = claimed_sorted, bad_sorted
        claimed &= inside
        bad &= claimed
    return RuleCheck(spec.rule, table.table_id, len(s), int(claimed.sum()), int(bad.sum()), mech_rows, mech_bad,
                     _example(table, setting, m, n, k, s, bad if bad_example is None else bad_example))
