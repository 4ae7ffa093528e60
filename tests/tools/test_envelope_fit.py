"""The envelope fit and its held-out test, on synthetic tables (a made-up split rule: not evidence)."""

from __future__ import annotations

import numpy as np
import pytest

from mmaemu.recording._envelope import NO_CLAIM, TableRows, fit_envelope, heldout_mask, validate_envelope
from mmaemu.recording._format import Part
from mmaemu.platforms._table import setting_code

SETTING = int(setting_code(0, 0, 1, 1, 1))  # e4m3 x e4m3 -> bf16, fast, 1 MiB
KS = (1024, 2048, 4096, 8192)
LEVELS = tuple(1 << e for e in range(10, 19))  # M*N from 1,024 to 262,144


def true_rule(mn: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Synthetic: S = 2 when K >= 2048 and M*N <= 4 * K; else 1."""
    return np.where((k >= 2048) & (mn <= 4 * k), 2, 1)


def synthetic(heldout_random: int = 400, seed: int = 0) -> TableRows:
    m, n, k, part = [], [], [], []
    for kk in KS:
        for mm in (1, 4, 16):
            for level in LEVELS:
                m.append(mm), n.append(level // mm), k.append(kk), part.append(Part.GRID)
    rng = np.random.default_rng(seed)
    for _ in range(heldout_random):
        mm = int(rng.integers(1, 64))
        mn = int(np.exp(rng.uniform(np.log(LEVELS[0]), np.log(LEVELS[-1]))))
        m.append(mm), n.append(max(1, mn // mm)), k.append(int(rng.integers(KS[0], KS[-1] + 1))), part.append(Part.HELDOUT)
    m_, n_, k_ = (np.asarray(x, np.int64) for x in (m, n, k))
    return TableRows(np.full(len(m_), SETTING), m_, n_, k_, true_rule(m_ * n_, k_).astype(np.uint8),
                     np.asarray(part, np.uint8))


def test_fit_is_margin_times_the_first_unsplit_level() -> None:
    rows = synthetic(heldout_random=0)
    env = fit_envelope(rows, margin=2)
    assert env["kind"] == "k_grid" and env["K_grid"] == list(KS)
    (b,) = env["bounds"]
    assert (b["ws"], b["out"], b["fast"], b["fmt_a"], b["fmt_b"]) == (1 << 20, "bfloat16", True, "e4m3", "e4m3")
    # K = 1024: no split, the floor (2 x the lowest level); K = 2048: splits to 8,192, first unsplit level 16,384
    assert b["B"] == [2 * 1024, 2 * 16384, 2 * 32768, 2 * 65536]


def test_heldout_rows_never_reach_the_fit_and_validate_the_bound() -> None:
    rows = synthetic()
    held = heldout_mask(rows)
    assert held[rows.part == Part.HELDOUT].all() and 0 < held[rows.part == Part.GRID].sum() < (rows.part == Part.GRID).sum()
    env = fit_envelope(rows.select(~held))
    # changing every held-out row's decision does not change the fit
    flipped = rows.select(np.ones(len(rows), bool))
    flipped = TableRows(flipped.setting, flipped.m, flipped.n, flipped.k, np.where(held, 7, flipped.S).astype(np.uint8),
                        flipped.part)
    assert fit_envelope(flipped.select(~held)) == env
    result = validate_envelope(env, rows.select(held))
    assert result[str(1 << 20)]["status"] == "validated" and result[str(1 << 20)]["tested"] > 0
    assert result[str(1 << 20)]["split_above_bound"] == 0


def test_a_heldout_split_above_the_bound_fails_the_envelope() -> None:
    rows = synthetic()
    held = heldout_mask(rows)
    env = fit_envelope(rows.select(~held))
    bad = TableRows(np.array([SETTING]), np.array([1]), np.array([100 * 4096]), np.array([4000]), np.array([3], np.uint8),
                    np.array([Part.HELDOUT], np.uint8))
    result = validate_envelope(env, bad)
    assert result[str(1 << 20)] | {} == {"status": "unvalidated", "rows": 1, "tested": 1, "split_above_bound": 1,
                                          "closest_split_ratio": result[str(1 << 20)]["closest_split_ratio"]}
    assert result[str(1 << 20)]["closest_split_ratio"] > 1


def test_no_level_above_the_splits_claims_nothing() -> None:
    rows = synthetic(heldout_random=0)
    every_split = TableRows(rows.setting, rows.m, rows.n, rows.k, np.where(rows.k >= 4096, 2, rows.S).astype(np.uint8),
                            rows.part)
    (b,) = fit_envelope(every_split)["bounds"]
    assert b["B"][2:] == [NO_CLAIM, NO_CLAIM]
    assert validate_envelope(fit_envelope(every_split), TableRows(
        np.array([SETTING]), np.array([1]), np.array([1 << 20]), np.array([8192]), np.array([1], np.uint8),
        np.array([Part.HELDOUT], np.uint8)))[str(1 << 20)]["status"] == "untested"


def test_fit_records_the_m_and_n_it_reached() -> None:
    """Beyond them a decision is extrapolated (issue 46): the synthetic grid has M 1, 4, 16 and N = level // M."""
    env = fit_envelope(synthetic(heldout_random=0))
    assert env["M_range"] == [1, 16] and env["N_range"] == [LEVELS[0] // 16, LEVELS[-1]]


def test_convert_reads_the_tested_ranges_from_the_recording() -> None:
    from conftest import load_tool

    convert = load_tool("convert_splitk")
    stated = ["3. alignment does not matter", "4. the shapes tested: M 1..16,384, N 16..2^20 (p1), model rows to "
              "M = 16,384 (p3); a larger M or N is extrapolated in M*N"]
    assert convert.tested_ranges(stated) == {"M_range": [1, 16_384], "N_range": [16, 1 << 20]}
    with pytest.raises(ValueError, match="does not state the M and N"):
        convert.tested_ranges(stated[:1])
