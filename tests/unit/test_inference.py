"""Inferred split-K decisions (mmaemu.platforms._inference): each shipped rule against every recorded row,
the shapes they decide, their warning, MMAEMU_SPLITK_STRICT, and rules broken on purpose."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch
from conftest import RECORDINGS, require

import mmaemu
from mmaemu.errors import InferredSplitWarning
from mmaemu.formats import Fp8Format, OutFormat
from mmaemu.platforms import _inference as inference
from mmaemu.platforms._gpus import GPUS
from mmaemu.platforms._inference import CANDIDATES, SHIPPED, Rule, check_rule
from mmaemu.platforms._profiles import get_profile
from mmaemu.platforms._splitk import Problem, SplitSource, resolve_splitk, trace_splitk
from mmaemu.platforms._table import (
    WS_BYTES,
    Setting,
    SplitTable,
    setting_code,
    table_arrays,
)
from mmaemu._split import Scheme

#: The tables the rules are bound to: those of the reference GPUs' records.
H100_TABLE, RTX4060_TABLE = str(GPUS["h100"].table_id), str(GPUS["rtx4060"].table_id)

E4, E5 = Fp8Format.E4M3, Fp8Format.E5M2
BF16 = OutFormat.BFLOAT16
DECODE = Problem(1, 11008, 4096, E4, E4, BF16, False)  # Llama 2 7B gate/up at M = 1: refused before the rules


def quiet(profile: str, problem: Problem) -> mmaemu.SplitDecision:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.MmaemuWarning)
        return resolve_splitk(get_profile(profile), problem)


def _spec(rule: Rule) -> inference.RuleSpec:
    return next(s for s in CANDIDATES if s.rule is rule)


@pytest.mark.parametrize("spec", SHIPPED, ids=lambda s: s.rule.value)
def test_every_shipped_rule_holds_on_every_row_of_the_shipped_table(spec: inference.RuleSpec) -> None:
    table = SplitTable.load(spec.table_id)
    check = check_rule(spec, table)
    assert check.rows == len(table.key) and check.rows_checked > 100_000
    assert (check.contradictions, check.mechanism_contradictions, check.example) == (0, 0, None)
    if spec.kind is inference.RuleKind.WORKSPACE:
        assert check.mechanism_rows == int((table.S > 1).sum()) > 30_000  # every split row


@pytest.mark.parametrize("spec", SHIPPED, ids=lambda s: s.rule.value)
def test_every_shipped_rule_holds_on_every_recorded_row(spec: inference.RuleSpec) -> None:
    """The same check on the recordings' own rows (recordings/splitk), not the converted table."""
    raw = np.load(require(RECORDINGS / "splitk" / f"{spec.table_id}.npz"))
    col = {k: raw[k].astype(np.int64) for k in ("fa", "fb", "out", "fast", "ws", "M", "N", "K")}
    arrays = table_arrays(setting_code(col["fa"], col["fb"], col["out"], col["fast"], col["ws"]),
                          col["M"], col["N"], col["K"], {"S": raw["splitK"], "custom": raw["custom"]})
    table = SplitTable.from_arrays(spec.table_id, {"verified_combos": []}, arrays)
    check = check_rule(spec, table)
    assert check.rows == len(raw["M"]) and check.rows_checked > 100_000
    assert check.holds, check


def test_the_rules_not_shipped_are_contradicted_or_lack_evidence() -> None:
    """The checker finds contradictions where they exist: the candidates that failed stay failed."""
    for spec in CANDIDATES:
        if spec.shipped:
            continue
        check = check_rule(spec, SplitTable.load(spec.table_id))
        assert spec.why_not
        if spec.rule in (Rule.H100_K_FLOOR_32MIB, Rule.H100_SMALL_K_32MIB):
            assert check.holds  # fits the table; not shipped for want of a dense K sweep at 32 MiB
        else:
            assert not check.holds and check.example is not None


@pytest.mark.parametrize("broken, what", [
    (dataclasses.replace(_spec(Rule.H100_K_FLOOR), k_floor=5800, domain=dataclasses.replace(
        _spec(Rule.H100_K_FLOOR).domain, k_max=5799)), "a K floor above the first recorded split (5,760)"),
    (dataclasses.replace(_spec(Rule.H100_K_FLOOR), domain=dataclasses.replace(
        _spec(Rule.H100_K_FLOOR).domain, workspaces=(32 << 20,), k_max=5799), k_floor=5800), "the same at 32 MiB"),
    (dataclasses.replace(_spec(Rule.H100_WORKSPACE), domain=dataclasses.replace(
        _spec(Rule.H100_WORKSPACE).domain, k_max=1 << 21), table_id=RTX4060_TABLE), "the capacity on the RTX 4060"),
    (dataclasses.replace(_spec(Rule.H100_WORKSPACE), pad=16), "M and N padded to 16"),
    (dataclasses.replace(_spec(Rule.RTX4060_FORMAT_PAIR), table_id=H100_TABLE), "format pairs on the H100"),
])
def test_a_rule_broken_on_purpose_is_contradicted(broken: inference.RuleSpec, what: str) -> None:
    check = check_rule(broken, SplitTable.load(broken.table_id))
    assert not check.holds, what
    assert check.example is not None


def test_single_token_decode_is_inferred_and_warns() -> None:
    """1 x 11008 x 4096 raised SplitKUnknownError before; now S = 1 from the H100 K floor, with a warning."""
    table = SplitTable.load("heur_h100pcie_lt12.8.3.14")
    assert table.lookup(DECODE.setting(1 << 20).code, 1, 11008, 4096) is None  # not a recorded row
    with pytest.warns(InferredSplitWarning, match="inferred, not recorded.*h100-k-floor.*MMAEMU_SPLITK_STRICT"):
        d = resolve_splitk(get_profile("hopper"), DECODE)
    assert (d.parts, d.scheme, d.source, d.verified) == (1, Scheme.NONE, SplitSource.INFERENCE, False)
    assert d.source == "inference" and repr(d).count("source='inference'") == 1


def test_strict_refuses_inferences(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMAEMU_SPLITK_STRICT", "1")
    with pytest.raises(mmaemu.SplitKUnknownError):
        quiet("hopper", DECODE)
    steps = trace_splitk(get_profile("hopper"), DECODE)
    assert [str(s.source) for s in steps][-2:] == ["envelope", "inference"] and "STRICT" in steps[-1].why
    monkeypatch.setenv("MMAEMU_SPLITK_STRICT", "0")
    assert quiet("hopper", DECODE).source is SplitSource.INFERENCE


def test_scaled_mm_runs_a_previously_refused_shape() -> None:
    """A call of a shape off the table (K = 1,040 is no H100 table K): computed, warning, the plan agrees."""
    g = torch.Generator().manual_seed(3)
    a = (torch.randn(3, 1040, generator=g) * 8).to(torch.float8_e4m3fn)
    b = (torch.randn(48, 1040, generator=g) * 8).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    with pytest.warns(InferredSplitWarning):
        got = mmaemu.scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16, backend="reference")
    mmaemu.testing.assert_bitwise_equal(got, mmaemu.scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16, splitk=1,
                                                              backend="reference"))
    plan = mmaemu.explain(a, b.t(), one, one, out_dtype=torch.bfloat16, backend="reference")
    assert plan.ok and plan.split is not None and plan.split.source is SplitSource.INFERENCE
    assert not plan.validated and "from inference" in str(plan.reason)
    assert [w[0] for w in plan.warnings] == ["InferredSplitWarning"]


def test_workspace_rule_decides_above_the_capacity_and_nothing_below() -> None:
    """At 1 MiB two fp32 partial outputs fit up to M*N = 131,072; between that and the envelope's bound
    (K = 65,536) the workspace rule decides S = 1, and below it the shape stays undecided."""
    table = SplitTable.load("heur_h100pcie_lt12.8.3.14")
    k, n = 65_536, 64
    env = table.info["envelope"]
    bounds = next(b for b in env["bounds"] if Setting.from_names(b) == Setting(E4, E4, BF16, False, 1 << 20))
    bound = int(bounds["B"][int(np.searchsorted(env["K_grid"], k))])
    assert bound > 131_072
    above = Problem(131_072 // n + 1, n, k, E4, E4, BF16, False)
    d = quiet("hopper", above)
    assert (d.parts, d.source) == (1, SplitSource.INFERENCE) and "h100-workspace" in d.note
    with pytest.raises(mmaemu.SplitKUnknownError):
        quiet("hopper", Problem(131_072 // n - 1, n, k, E4, E4, BF16, False))
    # at 32 MiB (hopper-te) the capacity is 4,194,304 outputs
    te = Problem(4_194_304 // 1024 + 1, 1024, k, E4, E4, BF16, False)
    assert quiet("hopper-te", te).source in (SplitSource.INFERENCE, SplitSource.ENVELOPE)
    # outside the sweep's K range the rule claims nothing (at 32 MiB no other rule decides K = 512 either)
    assert 2 * 1025 * 4097 * 4 > 32 << 20
    with pytest.raises(mmaemu.SplitKUnknownError):
        quiet("hopper-te", Problem(1025, 4097, 512, E4, E4, BF16, False))


def test_format_pair_rule_copies_the_recorded_pair_split_included() -> None:
    """On the RTX 4060 a shape recorded for E4M3 x E4M3 only decides E5M2 x E4M3 with its S and scheme."""
    table = SplitTable.load("heur_rtx4060_lt12.8.3.14")
    own = Setting(E4, E4, BF16, False, 1 << 20)
    other = Setting(E5, E4, BF16, False, 1 << 20)
    lo, hi = int(table.setting_start[own.code]), int(table.setting_start[own.code + 1])
    for split in (False, True):
        for row in range(lo, hi):
            if (int(table.S[row]) > 1) != split:
                continue
            key = int(table.key[row])
            m, n, k = key >> 42, (key >> 21) & ((1 << 21) - 1), key & ((1 << 21) - 1)
            if table.lookup(other.code, m, n, k) is None:
                break
        else:
            pytest.fail("no shape recorded for e4m3 x e4m3 only")
        d = quiet("ada", Problem(m, n, k, E5, E4, BF16, False))
        want = quiet("ada", Problem(m, n, k, E4, E4, BF16, False))
        assert d.source is SplitSource.INFERENCE and not d.verified and "rtx4060-format-pair" in d.note
        assert (d.parts, d.scheme) == (want.parts, want.scheme) and (d.parts > 1) == split


def test_rules_bind_to_their_table_only() -> None:
    """A rule never applies to another table (a user's recording, another GPU)."""
    table = SplitTable.load("heur_rtx4060_lt12.8.3.14")
    notes: list[str] = []
    assert inference.infer(table, Setting(E4, E4, BF16, False, WS_BYTES[1]), 1, 11008, 4096, notes) is None
    assert notes and all("h100" not in line for line in notes)
    other = SplitTable.from_arrays("heur_other", {"verified_combos": []}, {
        "key": np.zeros(0, np.int64), "setting_start": np.zeros(257, np.int64), "S": np.zeros(0, np.uint8),
        "custom": np.zeros(0, np.uint8)})
    notes = []
    assert inference.infer(other, Setting(E4, E4, BF16, False, WS_BYTES[1]), 1, 11008, 4096, notes) is None
    assert notes == ["no inference rule is checked against table heur_other"]


def test_trace_lists_each_source_in_order() -> None:
    steps = trace_splitk(get_profile("hopper-te"), Problem(16, 256, 128, E4, E4, BF16, True))
    assert [s.source.value for s in steps] == ["table", "workspace0", "live-query", "envelope", "inference"]
    assert not any(s.decided for s in steps) and "K = 128 is outside" in steps[-1].why
    assert "h100-small-k: the workspace is 32 MiB, not 1 MiB" in steps[-1].why
    steps = trace_splitk(get_profile("hopper"), Problem(16, 256, 128, E4, E4, BF16, True))
    assert steps[-1].decided and "below the recorded K range" in steps[-1].why and "h100-small-k" in steps[-1].why
    steps = trace_splitk(get_profile("hopper"), DECODE)
    assert steps[-1].decided and steps[-1].source is SplitSource.INFERENCE
    assert trace_splitk(get_profile("hopper"), Problem(64, 5760, 1920, E4, E4, BF16, True))[-1].source is SplitSource.TABLE


def test_the_warning_names_the_callers_line() -> None:
    """The warning is attributed to the user's line (here, this file), whatever entry point decided it:
    ``scaled_mm`` directly, through ``emulate()`` (torch's dispatch frames between) and through a module."""
    import warnings

    g = torch.Generator().manual_seed(3)
    a = (torch.randn(3, 1040, generator=g) * 8).to(torch.float8_e4m3fn)
    b = (torch.randn(48, 1040, generator=g) * 8).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    entries = {
        "scaled_mm": lambda: mmaemu.scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16, backend="reference"),
        "emulate": lambda: _under_emulate(a, b, one),
    }
    for name, run in entries.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run()
        inferred = [w for w in caught if issubclass(w.category, InferredSplitWarning)]
        assert inferred and all(w.filename == __file__ for w in inferred), (name, [w.filename for w in inferred])


def _under_emulate(a: torch.Tensor, b: torch.Tensor, one: torch.Tensor) -> torch.Tensor:
    with mmaemu.emulate(backend="reference"):
        return torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16)


# [Note: the small-K premises, checked without the code under test]
# The rule h100-small-k (S = 1 below the recorded K range, at 1 MiB) rests on three facts about the raw
# recordings, computed here directly from recordings/splitk with numpy (not through check_rule): no row
# of the H100 table has K < 1,024; in every (M, N, setting) group, no unsplit row lies at a larger K than
# a split one (the split set only grows with K); and every split part keeps more than 4 of the 128-wide
# k-tiles (the most a part of a split K < 1,024 call could have). The RTX 4060's recording, which covers
# K from 16, breaks the last two: the rule is the H100's, not cuBLASLt's.


def _raw_premises(table_id: str, ws_code: int, k_tile: int) -> tuple[int, int, int, int, int]:
    """(rows below K = 1,024, rows at that workspace, split rows, split rows below an unsplit row of their
    group, split rows whose largest part has at most 4 k-tiles of ``k_tile``) at one workspace code."""
    raw = np.load(require(RECORDINGS / "splitk" / f"{table_id}.npz"))
    keep = raw["ws"] == ws_code
    m, n, k, s = (raw[c][keep].astype(np.int64) for c in ("M", "N", "K", "splitK"))
    setting = sum(raw[c][keep].astype(np.int64) << shift for c, shift in (("fa", 0), ("fb", 1), ("out", 2), ("fast", 5)))
    _, group = np.unique((setting << 42) | (m << 21) | n, return_inverse=True)
    group = group.reshape(-1)
    top_unsplit = np.full(group.max() + 1, -1)
    np.maximum.at(top_unsplit, group[s == 1], k[s == 1])
    split = s > 1
    parts = -(-(-(-k // k_tile)) // s)  # ceil(ceil(K / k_tile) / S): the largest part's k-tiles
    return (int((k < 1024).sum()), int(keep.sum()), int(split.sum()), int((split & (k < top_unsplit[group])).sum()),
            int((split & (parts <= 4)).sum()))


def test_the_small_k_rule_rests_on_every_h100_row_and_the_rtx4060_breaks_it() -> None:
    below, rows, split, shrinks, short = _raw_premises(H100_TABLE, 1, 128)
    assert (below, shrinks, short) == (0, 0, 0) and rows == 784_504 and split == 10_355
    check = check_rule(_spec(Rule.H100_SMALL_K), SplitTable.load(H100_TABLE))
    assert check.holds and check.example is None and check.rows_checked > 100_000
    assert check.mechanism_rows == split  # every split row of the 1 MiB workspace
    _, _, split, shrinks, short = _raw_premises(RTX4060_TABLE, 1, 64)
    assert split > 30_000 and shrinks > 1_000 and short > 1_000
    rtx = check_rule(_spec(Rule.RTX4060_SMALL_K), SplitTable.load(RTX4060_TABLE))
    assert not rtx.holds and rtx.contradictions > 10_000 and rtx.mechanism_contradictions > 1_000


@pytest.mark.parametrize("m, n, k", [(16, 16, 16), (32, 32, 32), (512, 512, 512), (1, 512, 256), (4096, 128, 512),
                                     (16_384, 1 << 20, 1008)])
@pytest.mark.parametrize("fast", [False, True])
def test_hopper_small_k_is_inferred_unsplit_with_a_warning(m: int, n: int, k: int, fast: bool) -> None:
    """16^3 to 512^3 and the toy MLP raised SplitKUnknownError under the default profile."""
    with pytest.warns(InferredSplitWarning, match="inferred, not recorded.*h100-small-k.*MMAEMU_SPLITK_STRICT"):
        d = resolve_splitk(get_profile("hopper"), Problem(m, n, k, E4, E4, BF16, fast))
    assert (d.parts, d.scheme, d.source, d.verified) == (1, Scheme.NONE, SplitSource.INFERENCE, False)
    steps = trace_splitk(get_profile("hopper"), Problem(m, n, k, E5, E4, OutFormat.FLOAT32, fast))
    assert steps[-1].decided and steps[-1].source is SplitSource.INFERENCE and "h100-small-k" in steps[-1].why


@pytest.mark.parametrize("profile, m, n, k, why", [
    ("hopper-te", 16, 16, 16, "h100-small-k: the workspace is 32 MiB, not 1 MiB"),  # no floor recorded at 32 MiB
    ("hopper", 16_385, 64, 512, "h100-small-k: M = 16,385, N = 64 exceed"),  # beyond the sweep's M
    ("hopper", 16, 48, 5152, "h100-small-k: K = 5,152 is outside 16 <= K <= 1,023"),  # above the K floor
])
def test_the_small_k_rule_does_not_reach_beyond_its_domain(profile: str, m: int, n: int, k: int, why: str) -> None:
    with pytest.raises(mmaemu.SplitKUnknownError):
        quiet(profile, Problem(m, n, k, E4, E4, BF16, False))
    assert why in trace_splitk(get_profile(profile), Problem(m, n, k, E4, E4, BF16, False))[-1].why


def test_strict_refuses_the_small_k_inference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMAEMU_SPLITK_STRICT", "1")
    with pytest.raises(mmaemu.SplitKUnknownError, match="splitk=1 only if"):
        quiet("hopper", Problem(16, 16, 16, E4, E4, BF16, False))


def test_a_broken_small_k_rule_is_contradicted() -> None:
    spec = _spec(Rule.H100_SMALL_K)
    too_far = dataclasses.replace(spec, domain=dataclasses.replace(spec.domain, k_max=6143))
    check = check_rule(too_far, SplitTable.load(too_far.table_id))
    assert check.contradictions > 0 and check.mechanism_contradictions > 0 and check.example is not None
    at_32 = dataclasses.replace(spec, domain=dataclasses.replace(spec.domain, workspaces=(32 << 20,), k_max=6143))
    assert not check_rule(at_32, SplitTable.load(at_32.table_id)).holds


MLP = ((512, 256), (128, 512))  # (N, K): 256 -> 512 -> 128
#: Off the RTX 4060 table and not above its envelope's bound (twice the largest split M*N of the setting: 262,144).
ADA_REFUSED = {(1, 512, 256), (1, 128, 512), (7, 512, 256), (7, 128, 512), (1000, 128, 512)}


@pytest.mark.parametrize("tokens", [1, 7, 64])
def test_a_toy_mlp_runs_under_hopper_with_the_inferred_split(tokens: int) -> None:
    """Both layers of a 256 -> 512 -> 128 MLP: S = 1 from h100-small-k, the same bits as splitk=1."""
    g = torch.Generator().manual_seed(tokens)
    x = (torch.randn(tokens, 256, generator=g) * 8).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    for n, k in MLP:
        w = (torch.randn(n, k, generator=g) * 8).to(torch.float8_e4m3fn)
        with pytest.warns(InferredSplitWarning, match="h100-small-k"):
            y = mmaemu.scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16, backend="reference")
        mmaemu.testing.assert_bitwise_equal(y, mmaemu.scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16, splitk=1,
                                                                backend="reference"))
        x = y.clamp(-448, 448).to(torch.float8_e4m3fn)


@pytest.mark.parametrize("tokens", [1, 7, 64, 1000])
def test_a_toy_mlp_under_ada_is_decided_where_recorded_and_refused_clearly_elsewhere(tokens: int) -> None:
    """The RTX 4060 table records K from 16: its rows decide; where neither a row nor the envelope does
    (:data:`ADA_REFUSED`), the call raises and says what to do. No H100 rule reaches the RTX 4060."""
    table = SplitTable.load(RTX4060_TABLE)
    for n, k in MLP:
        problem = Problem(tokens, n, k, E4, E4, BF16, False)
        recorded = table.lookup(problem.setting(1 << 20).code, tokens, n, k)
        try:
            d = quiet("ada", problem)
        except mmaemu.SplitKUnknownError as e:
            assert recorded is None and (tokens, n, k) in ADA_REFUSED
            assert f"python -m mmaemu explain {tokens} {n} {k}" in str(e) and "splitk=1 only if" in str(e)
            continue
        assert d.source in (SplitSource.TABLE, SplitSource.ENVELOPE) and d.parts == 1
        assert (d.source is SplitSource.TABLE) == (recorded is not None)
