"""Profiles and split-K resolution against the recorded cuBLASLt tables (recordings/splitk)."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch
from conftest import RECORDINGS, require

import mmaemu
from mmaemu.formats import Fp8Format, OutFormat
from mmaemu.platforms._profiles import PROFILES, get_profile, profiles
from mmaemu.platforms._splitk import Problem, SplitSource, resolve_splitk
from mmaemu.platforms._table import WS_BYTES, Setting, SplitTable
from mmaemu._split import Scheme

E4, E5 = Fp8Format.E4M3, Fp8Format.E5M2
OUTS = [OutFormat.FLOAT32, OutFormat.BFLOAT16, OutFormat.FLOAT16, OutFormat.E4M3, OutFormat.E5M2]
RAW = {"heur_h100pcie_lt12.8.3.14": "hopper", "heur_rtx4060_lt12.8.3.14": "ada"}
PROFILE_BY_WS = {"hopper": {0: "hopper-ws0", 1: "hopper", 3: "hopper-te"}, "ada": {0: "ada-ws0", 1: "ada", 2: "ada-te"}}


def problem(m: int, n: int, k: int, out: OutFormat = OutFormat.BFLOAT16, fast: bool = True, fa: Fp8Format = E4,
            fb: Fp8Format = E4) -> Problem:
    return Problem(m, n, k, fa, fb, out, fast)


def quiet(profile: str, p: Problem) -> mmaemu.SplitDecision:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.MmaemuWarning)
        return resolve_splitk(get_profile(profile), p)


@pytest.mark.parametrize("table_id", sorted(RAW))
def test_every_recorded_row_resolves_to_the_recorded_split(table_id: str) -> None:
    """All 2,995,864 rows: the shipped table gives each row's S and customOption (vectorised)."""
    raw = np.load(require(RECORDINGS / "splitk" / f"{table_id}.npz"))
    table = SplitTable.load(table_id)
    settings = (raw["fa"].astype(np.int64) << 7) | (raw["fb"].astype(np.int64) << 6) | (raw["out"].astype(np.int64) << 3) \
        | (raw["fast"].astype(np.int64) << 2) | raw["ws"].astype(np.int64)
    idx = table.lookup_many(settings, raw["M"], raw["N"], raw["K"])
    assert (idx >= 0).all()
    assert np.array_equal(table.S[idx], raw["splitK"])
    assert np.array_equal(table.custom[idx], raw["custom"])
    # and through resolve_splitk, under the profile whose workspace matches the row, on a sample
    rng = np.random.default_rng(0)
    sample = rng.choice(len(idx), 300, replace=False)
    split_rows = np.nonzero(raw["splitK"] > 1)[0]
    sample = np.concatenate([sample, rng.choice(split_rows, 300, replace=False)])
    family = RAW[table_id]
    for i in sample:
        ws = int(raw["ws"][i])
        if ws not in PROFILE_BY_WS[family]:
            continue
        p = problem(int(raw["M"][i]), int(raw["N"][i]), int(raw["K"][i]), OUTS[raw["out"][i]], bool(raw["fast"][i]),
                    (E4, E5)[raw["fa"][i]], (E4, E5)[raw["fb"][i]])
        d = quiet(PROFILE_BY_WS[family][ws], p)
        assert (d.parts, d.source) == (int(raw["splitK"][i]), SplitSource.TABLE)
        expected_scheme = Scheme.NONE if d.parts == 1 else (Scheme.CONTIGUOUS if family == "hopper" else
                                                     (Scheme.PAIRWISE if raw["custom"][i] == 1 else Scheme.SERIAL))
        assert d.scheme == expected_scheme


@pytest.mark.parametrize("table_id", sorted(RAW))
def test_every_workspace_and_customoption_resolves(table_id: str) -> None:
    """One row of each (workspace, customOption, split or not) resolves to its S and scheme, under the
    profile of that workspace or a variant of it (H100 at 4 MiB, RTX 4060 at 32 MiB)."""
    import dataclasses

    raw = np.load(require(RECORDINGS / "splitk" / f"{table_id}.npz"))
    family = RAW[table_id]
    code = raw["ws"].astype(np.int64) * 512 + raw["custom"].astype(np.int64) * 2 + (raw["splitK"] > 1)
    _, first = np.unique(code, return_index=True)
    combos = {(int(raw["ws"][i]), int(raw["custom"][i]), bool(raw["splitK"][i] > 1)): int(i) for i in first}
    base_profile = get_profile(family)
    for (ws, custom, split), i in combos.items():
        name = PROFILE_BY_WS[family].get(ws)
        profile = get_profile(name) if name else dataclasses.replace(
            base_profile, name=f"{family}-ws{ws}", workspace_bytes=[0, 1 << 20, 4 << 20, 32 << 20][ws])
        p = problem(int(raw["M"][i]), int(raw["N"][i]), int(raw["K"][i]), OUTS[raw["out"][i]], bool(raw["fast"][i]),
                    (E4, E5)[raw["fa"][i]], (E4, E5)[raw["fb"][i]])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mmaemu.MmaemuWarning)
            d = resolve_splitk(profile, p)
        assert (d.parts, d.source) == (int(raw["splitK"][i]), SplitSource.TABLE)
        if split:
            assert d.scheme == (Scheme.CONTIGUOUS if family == "hopper" else (Scheme.PAIRWISE if custom == 1 else Scheme.SERIAL))


def test_shipped_tables_match_a_fresh_conversion() -> None:
    require(RECORDINGS / "splitk")
    import subprocess
    import sys
    from pathlib import Path

    tool = Path(__file__).resolve().parents[2] / "tools" / "evidence" / "convert_splitk.py"
    done = subprocess.run([sys.executable, str(tool), "--check", "--recordings", str(RECORDINGS / "splitk")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_tables_record_the_profiles_platforms() -> None:
    for p in profiles():
        if p.table_id:
            info = SplitTable.load(p.table_id).info
            assert (info["gpu"], info["sm_count"], info["cublaslt"]) == (p.gpu, p.sm_count, p.cublaslt)


def test_cases_from_the_seeds() -> None:
    d = quiet("hopper", problem(64, 5760, 1920))
    assert (d.parts, d.scheme, d.source, d.verified) == (1, Scheme.NONE, SplitSource.TABLE, True)
    # K = 128 is below every recorded H100 K: the seeds' example of a refusal. At 1 MiB the small-K rule now
    # infers S = 1 (experimental); at 32 MiB nothing decides it
    d = quiet("hopper", problem(16, 256, 128))
    assert (d.parts, d.source, d.verified) == (1, SplitSource.INFERENCE, False)
    with pytest.raises(mmaemu.SplitKUnknownError, match="explain"):
        quiet("hopper-te", problem(16, 256, 128))
    assert quiet("ada", problem(16, 128, 8192)).parts == 8
    d = quiet("ada", problem(16, 128, 8192, fast=False))
    assert (d.parts, d.scheme, d.source) == (12, Scheme.PAIRWISE, SplitSource.TABLE)
    assert quiet("ada", problem(16, 128, 8192, fast=True)).scheme is Scheme.PAIRWISE
    assert quiet("ada", problem(64, 256, 1920)).parts == 1
    for k, n in ((1920, 5760), (8192, 24576)):  # Evo 2 projections, hopper-te and ada-te, M up to 8,192
        for m in (1, 7, 100, 2048, 8192):
            for prof in ("hopper-te", "ada-te"):
                assert quiet(prof, problem(m, n, k)).parts == 1


def test_workspace0_source() -> None:
    d = quiet("hopper-ws0", problem(3, 4096, 999_936))
    assert (d.parts, d.source) == (1, SplitSource.WORKSPACE0)


def test_h100_envelope_break_points(monkeypatch: pytest.MonkeyPatch) -> None:
    hopper = "hopper"
    table = SplitTable.load("heur_h100pcie_lt12.8.3.14")
    bounds = next(b for b in table.info["envelope"]["bounds"]
                  if (b["ws"], b["out"], b["fast"], b["fmt_a"], b["fmt_b"]) == (1 << 20, "bfloat16", True, "e4m3", "e4m3"))
    grid = table.info["envelope"]["K_grid"]

    def bound(k: int) -> int:
        return int(bounds["B"][int(np.searchsorted(grid, k))])

    for k in (1024, 5120, 5136, 16384, 65536, 4_194_304):
        b = bound(k)
        n = 64
        m_above = b // n + 1  # M*N just above the bound, with shapes off the table (M odd)
        if m_above % 2 == 0:
            m_above += 1
        d = quiet(hopper, problem(m_above, n, k))
        assert d.source in (SplitSource.ENVELOPE, SplitSource.TABLE) and d.parts == 1
        m_below = b // n - 1
        if m_below * n <= b and table.lookup(Setting(E4, E4, OutFormat.BFLOAT16, True, WS_BYTES[1]).code, m_below, n, k) is None:
            if k < 5136 or 8 * m_below * n > 1 << 20:  # the K floor or the workspace capacity (tests/unit/test_inference.py)
                d = quiet(hopper, problem(m_below, n, k))
                assert (d.parts, d.source, d.verified) == (1, SplitSource.INFERENCE, False)
            else:
                with pytest.raises(mmaemu.SplitKUnknownError):
                    quiet(hopper, problem(m_below, n, k))
    assert bound(1024) == 15_360 and bound(5120) == 15_360 and bound(5136) > 15_360
    for k in (1023, 4_194_305):  # just outside the envelope's K range
        with pytest.raises(mmaemu.SplitKUnknownError):
            quiet("hopper-te", problem(4095, 4097, k))
    with pytest.raises(mmaemu.SplitKUnknownError):
        quiet(hopper, problem(4095, 4097, 4_194_305))
    d = quiet(hopper, problem(4095, 4097, 1023))  # below it, at 1 MiB, the small-K rule decides
    assert (d.parts, d.source, d.verified) == (1, SplitSource.INFERENCE, False) and "h100-small-k" in d.note
    monkeypatch.setenv("MMAEMU_SPLITK_STRICT", "1")
    with pytest.raises(mmaemu.SplitKUnknownError):
        quiet(hopper, problem(4095, 4097, 3000))


def test_rtx4060_envelope_is_twice_the_largest_split() -> None:
    table = SplitTable.load("heur_rtx4060_lt12.8.3.14")
    stats = table.setting_stats(Setting(E4, E4, OutFormat.BFLOAT16, True, 1 << 20))
    assert stats is not None
    bound = 2 * stats["max_split_MN"]
    d = quiet("ada", problem(bound // 16 + 1, 16, 3000))
    assert (d.parts, d.source) == (1, SplitSource.ENVELOPE)
    with pytest.raises(mmaemu.SplitKUnknownError):
        quiet("ada", problem(bound // 16 - 1, 16, 3000))


def test_warnings_of_decisions() -> None:
    te = get_profile("hopper-te")
    with pytest.warns(mmaemu.UnvalidatedEnvelopeWarning):
        d = resolve_splitk(te, problem(4095, 4097, 3000))
    assert (d.source, d.verified) == (SplitSource.ENVELOPE, False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_splitk(get_profile("hopper"), problem(4095, 4097, 3000)).verified
    # S > 1 under Transformer Engine is experimental
    table = SplitTable.load("heur_rtx4060_lt12.8.3.14")
    s = Setting(E4, E4, OutFormat.BFLOAT16, True, WS_BYTES[2]).code
    lo, hi = int(table.setting_start[s]), int(table.setting_start[s + 1])
    row = lo + int(np.nonzero(table.S[lo:hi] > 1)[0][0])
    key = int(table.key[row])
    m, n, k = key >> 42, (key >> 21) & ((1 << 21) - 1), key & ((1 << 21) - 1)
    with pytest.warns(mmaemu.UnverifiedSplitWarning, match="Transformer Engine"):
        resolve_splitk(get_profile("ada-te"), problem(m, n, k))
    # an explicit split never replayed on hardware warns
    a = torch.ones(16, 256).to(torch.float8_e4m3fn)
    with pytest.warns(mmaemu.UnverifiedSplitWarning, match="not been replayed"):
        mmaemu.scaled_mm(a, a.t(), torch.tensor(1.0), torch.tensor(1.0), out_dtype=torch.bfloat16, splitk=(2, "pairwise"))


def test_profiles_registry() -> None:
    assert list(PROFILES) == ["hopper", "hopper-te", "hopper-ws0", "ada", "ada-te", "ada-ws0", "hopper-experimental",
                              "b200-mma-sync-experimental"]
    assert get_profile("hopper-te").workspace_bytes == 32 << 20 and get_profile("ada-te").workspace_bytes == 4 << 20
    for error in (ValueError, KeyError, mmaemu.UnknownNameError):  # one error type for every bad name
        with pytest.raises(error, match="accepted: 'hopper'"):
            get_profile("h100")
    with pytest.raises(mmaemu.UnknownNameError, match="^unknown preset 'nope'"):
        mmaemu.presets.get_preset("nope")
    with pytest.raises(mmaemu.UnknownNameError, match="is not a backend"):
        mmaemu.backends.parse_backend("gpu")
    with pytest.warns(mmaemu.ExperimentalPresetWarning):
        p = get_profile("hopper-experimental")
    with pytest.raises(mmaemu.SplitKUnknownError, match="no split-K table"):
        resolve_splitk(p, problem(64, 5760, 1920))


def test_default_profile_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert get_profile(None).name == "hopper"
    monkeypatch.setenv("MMAEMU_PROFILE", "ada")
    assert get_profile(None).name == "ada"


def test_lookup_agrees_with_lookup_many() -> None:
    """Not timed (tools/measure/bench_splitk.py is the benchmark): the scalar and vectorised lookups find the same rows."""
    table = SplitTable.load("heur_h100pcie_lt12.8.3.14")
    s = Setting(E4, E4, OutFormat.BFLOAT16, True, WS_BYTES[1]).code
    row = table.lookup(s, 64, 5760, 1920)
    assert row is not None
    assert [table.lookup(s, 64, 5760, 1920) for _ in range(3)] == [row] * 3
    many = table.lookup_many(np.array([s, s]), np.array([64, 3]), np.array([5760, 48]), np.array([1920, 13_008]))
    assert many.tolist() == [row, -1]


def test_live_query_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the reference platform a live cuBLASLt answer decides shapes off the table (simulated here)."""
    import mmaemu.platforms._splitk as plat

    assert plat.live_query(get_profile("hopper"), problem(16, 256, 128)) is None  # not the reference GPU
    monkeypatch.setattr(plat, "live_query", lambda profile, p: (3, 1))
    table = SplitTable.load("heur_rtx4060_lt12.8.3.14")
    assert table.lookup(Setting(E4, E4, OutFormat.BFLOAT16, True, WS_BYTES[1]).code, 3, 48, 13_008) is None
    d = quiet("ada", problem(3, 48, 13_008))
    assert (d.parts, d.scheme, d.source) == (3, Scheme.PAIRWISE, SplitSource.LIVE_QUERY)
    d = quiet("hopper", problem(16, 256, 128))
    assert (d.parts, d.scheme, d.source) == (3, Scheme.CONTIGUOUS, SplitSource.LIVE_QUERY)


def test_an_undecided_shape_says_what_is_known_and_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    """SplitKUnknownError names the nearest decided shapes (really decided by the table), the explain
    command for the shape, when splitk=1 is justified, and how a recording settles it."""
    from mmaemu._cli import main
    from mmaemu.platforms._splitk import SplitSource

    p = problem(32, 48, 5152, fast=False)  # above the K floor, off the table, below the envelope's bound
    with pytest.raises(mmaemu.SplitKUnknownError) as info:
        resolve_splitk(get_profile("hopper"), p)
    message = str(info.value)
    near = re.findall(r"(\d+) x (\d+) x (\d+): S = (\d+)", message)
    assert len(near) == 3
    for m, n, k, s in near:
        d = quiet("hopper", problem(int(m), int(n), int(k), fast=False))
        assert (d.parts, d.source) == (int(s), SplitSource.TABLE)
    command = re.search(r"python -m mmaemu (explain [^.]*)\.", message)
    assert command is not None
    assert main(command.group(1).split()) == 1  # the same call, refused: its plan says what each source found
    out = capsys.readouterr().out
    assert "SplitKUnknownError" in out and "split-K:    undecided" in out and "See what is known" not in out
    assert "splitk=1 only if" in message and "python -m mmaemu record --out DIR" in message
    assert "register_recording(DIR)" in message
