"""The envelope's decisions at and beyond the shapes its sweep reached (issue 46).

The H100 split-K sweep that fitted and tested the envelope covered M from 1 to 16,384 and N from 16 to
2^20; its report calls larger shapes extrapolated ("Shapes with M above 16,384 or N above 2^20 are
extrapolated": seeds 004, "What this does not show"; the recording's envelope assumption 4). There the
decision keeps S = 1 (the bits do not change) and says so: ``extrapolated=True``, not verified, an
``UnvalidatedEnvelopeWarning``, and ``explain`` shows it. Inside, at 1 MiB, the sealed held-out test
passed (0 of 154,191 held-out shapes above the bound split: seeds 004), so the decision stays verified.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mmaemu
from mmaemu._cli import main
from mmaemu.formats import Fp8Format, OutFormat
from mmaemu.platforms._profiles import get_profile
from mmaemu.platforms._splitk import Problem, SplitSource, resolve_splitk, trace_splitk
from mmaemu.platforms._table import H100_TABLE, SplitTable
from mmaemu._split import Scheme

E4 = Fp8Format.E4M3
BF16 = OutFormat.BFLOAT16
K = 4112  # inside the envelope's K range (1,024 to 4,194,304) and no K of the H100 table
M_MAX, N_MAX = 16_384, 1 << 20  # the sweep's largest M and N (seeds 004)


def decide(profile: str, m: int, n: int, fast: bool = True) -> tuple[mmaemu.SplitDecision, list[str]]:
    problem = Problem(m, n, K, E4, E4, BF16, fast)
    table = SplitTable.load(H100_TABLE)
    assert table.lookup(problem.setting(get_profile(profile).workspace_bytes).code, m, n, K) is None  # off the table
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decision = resolve_splitk(get_profile(profile), problem)
    return decision, [f"{w.category.__name__}: {w.message}" for w in caught]


# (M, N, beyond): a shape at each bound and one just past it, N a multiple of 16 as torch requires.
SHAPES = [
    (M_MAX, 4096, ""),
    (M_MAX + 1, 4096, "M = 16,385 is outside the 1 <= M <= 16,384"),
    (1, N_MAX, ""),
    (1, N_MAX + 16, "N = 1,048,592 is outside the 16 <= N <= 1,048,576"),
    (M_MAX + 1, N_MAX + 16, "M = 16,385 is outside the 1 <= M <= 16,384 its sweep reached and N = 1,048,592"),
]


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize(("m", "n", "beyond"), SHAPES)
def test_hopper_envelope_says_extrapolated_beyond_the_sweep(m: int, n: int, beyond: str, fast: bool) -> None:
    """Old code: verified=True, no flag and no warning beyond the sweep's M and N."""
    d, caught = decide("hopper", m, n, fast)
    assert (d.parts, d.scheme, d.source, d.table_id) == (1, Scheme.NONE, SplitSource.ENVELOPE, H100_TABLE)
    assert d.extrapolated is bool(beyond)
    assert d.verified is not bool(beyond)  # 1 MiB: validated on the held-out shapes, which stop at the same M and N
    assert f"extrapolated={bool(beyond)}" in repr(d)
    if beyond:
        assert "extrapolated: " + beyond in d.note
        assert len(caught) == 1 and caught[0].startswith("UnvalidatedEnvelopeWarning: hopper: ")
        assert "S = 1 is extrapolated" in caught[0]
    else:
        assert "extrapolated" not in d.note and caught == []


@pytest.mark.parametrize(("m", "n", "beyond"), SHAPES)
def test_hopper_te_envelope_says_extrapolated_too(m: int, n: int, beyond: str) -> None:
    """32 MiB: unvalidated everywhere (its held-out test failed); beyond the sweep it is also extrapolated."""
    d, caught = decide("hopper-te", m, n)
    assert (d.parts, d.source, d.verified, d.extrapolated) == (1, SplitSource.ENVELOPE, False, bool(beyond))
    assert "held-out test: unvalidated" in d.note
    assert [c.split(":")[0] for c in caught] == ["UnvalidatedEnvelopeWarning"]
    assert ("extrapolated" in caught[0]) is bool(beyond)


def test_trace_shows_the_extrapolation() -> None:
    steps = trace_splitk(get_profile("hopper"), Problem(M_MAX + 1, 4096, K, E4, E4, BF16, True))
    assert steps[-1].decided and steps[-1].source is SplitSource.ENVELOPE and "extrapolated: M = 16,385" in steps[-1].why


def test_an_envelope_without_ranges_is_extrapolated_everywhere() -> None:
    """A fitted envelope that does not record the M and N it reached claims nothing as tested."""
    shipped = SplitTable.load(H100_TABLE)
    env = {k: v for k, v in shipped.info["envelope"].items() if k not in ("M_range", "N_range")}
    table = SplitTable.from_arrays("heur_no_ranges", {**shipped.info, "table_id": "heur_no_ranges", "envelope": env},
                                   {"key": np.zeros(0, np.int64), "setting_start": np.zeros(257, np.int64),
                                    "S": np.zeros(0, np.uint8), "custom": np.zeros(0, np.uint8)})
    from mmaemu.platforms._splitk import _envelope

    d, why = _envelope(get_profile("hopper"), Problem(64, 4096, K, E4, E4, BF16, True), table)
    assert d is not None and why == ""
    assert (d.parts, d.verified, d.extrapolated) == (1, False, True)
    assert "records no range of M and N" in d.note


def test_explain_says_extrapolated(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m mmaemu explain``: inside, verified and validated; beyond, extrapolated and why not validated."""
    assert main(["explain", str(M_MAX), "4096", str(K), "--fast"]) == 0
    out = capsys.readouterr().out
    assert "from envelope (verified): " in out and "validated:  yes" in out and "extrapolated" not in out
    assert main(["explain", str(M_MAX + 1), "4096", str(K), "--fast"]) == 0
    out = capsys.readouterr().out
    assert "S = 1, none, from envelope (not verified, extrapolated): " in out
    assert "extrapolated: M = 16,385 is outside the 1 <= M <= 16,384 its sweep reached" in out
    assert ("validated:  no: the split-K decision (S = 1, from envelope) is extrapolated beyond the shapes its "
            "envelope was fitted and tested on") in out
    assert "warns:      UnvalidatedEnvelopeWarning: hopper: " in out


def test_explain_says_extrapolated_for_n(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mmaemu._cli_options._machine_memory", lambda: 1 << 40)  # N = 2^20 + 16: 4 GiB of mat2
    assert main(["explain", "1", str(N_MAX), str(K), "--fast"]) == 0
    assert "from envelope (verified)" in capsys.readouterr().out
    assert main(["explain", "1", str(N_MAX + 16), str(K), "--fast"]) == 0
    out = capsys.readouterr().out
    assert "(not verified, extrapolated)" in out and "N = 1,048,592 is outside the 16 <= N <= 1,048,576" in out


# H100 table rows at 32 MiB (hopper-te) whose split the table lists as replayed for the setting, with the
# customOption of the row: no live split call ran with customOption 4 to 7 (seeds 004), 0 to 3 did.
@pytest.mark.parametrize(("m", "n", "k", "parts", "custom", "verified"), [
    (112, 8192, 28672, 2, 4, False),
    (65, 8192, 28672, 3, 5, False),
    (48, 64, 5760, 2, 3, True),
])
def test_a_customoption_no_split_call_replayed_is_unverified(m: int, n: int, k: int, parts: int, custom: int,
                                                              verified: bool) -> None:
    problem = Problem(m, n, k, E4, E4, OutFormat.FLOAT32, False)
    profile = get_profile("hopper-te")
    table = SplitTable.load(H100_TABLE)
    assert table.is_verified(problem.setting(profile.workspace_bytes), parts, Scheme.CONTIGUOUS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.MmaemuWarning)
        d = resolve_splitk(profile, problem)
    assert (d.parts, d.scheme, d.source, d.verified) == (parts, Scheme.CONTIGUOUS, SplitSource.TABLE, verified)
    assert d.note.endswith(f"(customOption {custom})")


def test_the_rtx4060_envelope_beyond_its_tables_k_is_extrapolated() -> None:
    """The RTX 4060 envelope (S = 1 above twice the setting's largest split M*N) was checked on its table and
    live queries, whose K stop at 16,384: inside that K it stays verified; above it the decision is the same
    S = 1 but extrapolated, not verified, and warned (seeds 002: envelope decisions are not validated there)."""
    import warnings

    import mmaemu
    from mmaemu.formats import Fp8Format, OutFormat
    from mmaemu.platforms._profiles import get_profile
    from mmaemu.platforms._splitk import Problem, SplitSource, resolve_splitk, trace_splitk

    ada = get_profile("ada")
    for k, extrapolated in ((16384, False), (16400, True), (4194304, True)):
        problem = Problem(2048, 5760, k, Fp8Format.E4M3, Fp8Format.E4M3, OutFormat.BFLOAT16, True)
        steps = trace_splitk(ada, problem)
        if k == 16384 and steps[-1].source is not SplitSource.ENVELOPE:
            continue  # a table row decides this one
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            decision = resolve_splitk(ada, problem)
        assert (decision.parts, decision.source) == (1, SplitSource.ENVELOPE)
        assert (decision.extrapolated, decision.verified) == (extrapolated, not extrapolated), decision
        warned = [w for w in caught if issubclass(w.category, mmaemu.UnvalidatedEnvelopeWarning)]
        assert bool(warned) == extrapolated
        if extrapolated:
            assert "above the largest K its table records (16,384)" in decision.note
