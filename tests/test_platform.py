"""Profiles and the interim split-K decisions, checked against the recorded cuBLASLt tables."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mmaemu
from conftest import RECORDINGS, require
from mmaemu.formats import Fp8Format, OutFormat
from mmaemu.platform import PROFILES, PUBLISHED_DECISIONS, Problem, get_profile, resolve_splitk

E4, E5 = Fp8Format.E4M3, Fp8Format.E5M2
OUT_CODES = {OutFormat.FLOAT32: 0, OutFormat.BFLOAT16: 1, OutFormat.FLOAT16: 2, OutFormat.E4M3: 3, OutFormat.E5M2: 4}
FMT_CODES = {E4: 0, E5: 1}
TABLES = {"hopper": "heur_h100pcie_lt12.8.3.14.npz", "ada": "heur_rtx4060_lt12.8.3.14.npz"}
WS_1MIB = 1


def load_table(profile: str) -> dict[str, np.ndarray]:
    data = np.load(require(RECORDINGS / "splitk" / TABLES[profile]))
    return {k: data[k] for k in data.files}


@pytest.mark.parametrize("row", PUBLISHED_DECISIONS, ids=[r.note[:50] for r in PUBLISHED_DECISIONS])
def test_published_decisions_are_rows_of_the_recorded_table(row: object) -> None:
    t = load_table(row.profile)  # type: ignore[attr-defined]
    sel = (t["N"] == row.n) & (t["K"] == row.k) & (t["ws"] == WS_1MIB)  # type: ignore[attr-defined]
    sel &= (t["M"] == row.m) if row.m is not None else (t["M"] <= row.m_max)  # type: ignore[attr-defined]
    pair_sel = np.zeros_like(sel)
    for fa, fb in row.pairs:  # type: ignore[attr-defined]
        pair_sel |= (t["fa"] == FMT_CODES[fa]) & (t["fb"] == FMT_CODES[fb])
    sel &= pair_sel
    sel &= np.isin(t["out"], [OUT_CODES[o] for o in row.outs])  # type: ignore[attr-defined]
    sel &= np.isin(t["fast"], [int(f) for f in row.fast])  # type: ignore[attr-defined]
    assert sel.sum() > 0, "the published decision must be recorded in the table"
    assert set(t["splitK"][sel].tolist()) == {row.S}  # type: ignore[attr-defined]
    if row.S > 1:  # type: ignore[attr-defined]
        assert set(t["custom"][sel].tolist()) == {1}  # RTX 4060: customOption 1 combines pairwise


def test_h100_envelope_bound_holds_on_the_recorded_table() -> None:
    t = load_table("hopper")
    mn = t["M"].astype(np.int64) * t["N"].astype(np.int64)
    k = t["K"]
    in_range = (t["ws"] == WS_1MIB) & (k >= 1024) & (k <= 4_194_304)
    above = in_range & (((k <= 5120) & (mn > 15_360)) | ((k > 5120) & (mn > 268_004)))
    assert above.sum() > 100_000
    assert (t["splitK"][above] == 1).all()
    # the bound is not vacuous: splits exist just below it
    assert (t["splitK"][in_range & (mn <= 268_004)] > 1).any()


def problem(m: int, n: int, k: int, out: OutFormat = OutFormat.BFLOAT16, fast: bool = True, fa: Fp8Format = E4) -> Problem:
    return Problem(m, n, k, fa, E4, out, fast)


def test_resolve_splitk_cases_from_the_seeds() -> None:
    hopper, ada = get_profile("hopper"), get_profile("ada")
    d = resolve_splitk(hopper, problem(64, 5760, 1920))
    assert (d.S, d.scheme, d.source, d.verified) == (1, "none", "table", True)
    with pytest.raises(mmaemu.SplitKUnknownError, match="explain"):
        resolve_splitk(hopper, problem(16, 256, 128))
    d = resolve_splitk(ada, problem(16, 128, 8192, fast=True))
    assert (d.S, d.scheme) == (8, "pairwise")
    d = resolve_splitk(ada, problem(16, 128, 8192, fast=False))
    assert (d.S, d.scheme) == (12, "pairwise")
    assert resolve_splitk(ada, problem(64, 256, 1920, out=OutFormat.FLOAT16, fast=False)).S == 1
    with pytest.raises(mmaemu.SplitKUnknownError):
        resolve_splitk(ada, problem(16, 128, 8192, out=OutFormat.FLOAT16, fast=True))  # S = 6 there: not published


def test_envelope_and_strict_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    hopper = get_profile("hopper")
    d = resolve_splitk(hopper, problem(128, 4096, 3072))
    assert (d.S, d.source) == (1, "envelope")
    assert resolve_splitk(hopper, problem(17, 16_384, 8192)).source == "envelope"  # 278,528 > 268,004
    with pytest.raises(mmaemu.SplitKUnknownError):
        resolve_splitk(hopper, problem(16, 16_384, 8192))  # 262,144 <= 268,004
    with pytest.raises(mmaemu.SplitKUnknownError):
        resolve_splitk(hopper, problem(4096, 4096, 512))  # K below the envelope's range
    monkeypatch.setenv("MMAEMU_SPLITK_STRICT", "1")
    with pytest.raises(mmaemu.SplitKUnknownError):
        resolve_splitk(hopper, problem(128, 4096, 3072))


def test_profiles_and_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(PROFILES) == {"hopper", "ada"}
    assert get_profile(None).name == "hopper"
    monkeypatch.setenv("MMAEMU_PROFILE", "ada")
    assert get_profile(None).name == "ada"
    with pytest.raises(ValueError, match="accepted: 'hopper', 'ada'"):
        get_profile("h100")
    assert "114" in repr(PROFILES["hopper"]) and "RTX 4060" in repr(PROFILES["ada"])


def test_scaled_mm_auto_split_raises_and_explicit_works() -> None:
    a = torch.ones(16, 128).to(torch.float8_e4m3fn)
    b = torch.ones(256, 128).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    with pytest.raises(mmaemu.SplitKUnknownError):
        mmaemu.scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16)
    y = mmaemu.scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16, splitk=1)
    assert torch.equal(y, torch.full((16, 256), 128.0, dtype=torch.bfloat16))
