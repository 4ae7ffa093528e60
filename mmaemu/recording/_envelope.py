"""The split-K envelope of a recorded table: fitted on training rows, tested once on held-out rows.

Above a bound on M*N (per setting and K) cuBLAS does not split K. :func:`fit_envelope` fits the bounds
on the training rows only; :func:`validate_envelope` tests them once on the held-out rows
(:func:`heldout_mask`) that the fit never receives, as the seeds' sweep did. The result is the
``envelope`` of a table's info, which :func:`mmaemu.platforms.resolve_splitk` reads.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..platforms._table import Setting, unpack_key
from ._records import Part

__all__ = ["NO_CLAIM", "EnvelopeStatus", "TableRows", "heldout_mask", "fit_envelope", "validate_envelope"]

#: The bound of a K grid point that no training row decides (nothing is claimed there).
NO_CLAIM = 1 << 62


class EnvelopeStatus(enum.Enum):
    """The result of an envelope's held-out test (the strings :mod:`mmaemu.platforms._splitk` reads)."""

    VALIDATED = "validated"  # rows above the bound were tested and none split
    UNVALIDATED = "unvalidated"  # a held-out row above the bound split
    UNTESTED = "untested"  # no held-out row lies above the bound



@dataclass(frozen=True)
class TableRows:
    """Rows of a heuristic table as flat columns (one entry per row)."""

    setting: np.ndarray
    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    S: np.ndarray
    part: np.ndarray

    @staticmethod
    def of(columns: Mapping[str, np.ndarray]) -> TableRows:
        """Flatten a table's columns (``key``, ``setting_start``, ``S``, ``part``)."""
        starts = np.asarray(columns["setting_start"], np.int64)
        setting = np.repeat(np.arange(256, dtype=np.int64), np.diff(starts))
        m, n, k = unpack_key(columns["key"])
        part = np.asarray(columns["part"]) if "part" in columns else np.zeros(len(m), np.uint8)
        return TableRows(setting, m, n, k, np.asarray(columns["S"]), part)

    def select(self, mask: np.ndarray) -> TableRows:
        """The rows where ``mask`` holds."""
        return TableRows(self.setting[mask], self.m[mask], self.n[mask], self.k[mask], self.S[mask], self.part[mask])

    def __len__(self) -> int:
        return len(self.m)


def heldout_mask(rows: TableRows) -> np.ndarray:
    """Which rows the envelope's fit never sees: every :attr:`Part.HELDOUT` row and the grid shapes whose
    hash of (M, N, K) is 0 mod 5 (a fixed fifth of the grid, the same shapes in every setting)."""
    x = (rows.m.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (rows.n.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9)) \
        ^ (rows.k.astype(np.uint64) * np.uint64(0x94D049BB133111EB))
    x ^= x >> np.uint64(31)
    x *= np.uint64(0xD6E8FEB86659FD93)
    x ^= x >> np.uint64(32)
    grid_heldout = (rows.part == Part.GRID) & ((x % np.uint64(5)) == 0)
    return np.asarray((rows.part == Part.HELDOUT) | grid_heldout)


def fit_envelope(train: TableRows, *, margin: int = 2) -> dict[str, Any]:
    """Fit an envelope ``B(setting, K)`` on training rows: above it, no split was seen.

    The K grid is the set of K of the training :attr:`Part.GRID` rows. Per setting and grid K: ``lo`` is
    the largest split M*N among grid rows at that K and other training rows whose K maps to it (the
    smallest grid K at or above theirs); the basis is the smallest grid M*N at that K above ``lo`` (an
    unsplit level; without one nothing is claimed from that K on). ``B(K)`` is ``margin`` times the
    largest basis at grid K's up to K, at least ``margin`` times the smallest grid M*N. ``M_range`` and
    ``N_range`` are the smallest and largest M and N of the training rows: beyond them a decision is
    extrapolated (:mod:`mmaemu.platforms._splitk`, ``[Note: extrapolated envelope decisions]``).

    Args:
        train: rows the fit may use (never the held-out ones).
        margin: the factor between the last unsplit level seen and the bound.

    Returns:
        The ``envelope`` of a table's info (``kind`` ``"k_grid"``, as :mod:`mmaemu.platforms._splitk` reads it),
        with ``validation`` empty (:func:`validate_envelope` fills it).
    """
    grid_rows = train.select(train.part == Part.GRID)
    k_grid = np.unique(grid_rows.k)
    envelope: dict[str, Any] = {
        "kind": "k_grid",
        "claim": "S = 1 when M * N > B(setting, K) and K_min <= K <= K_max; K takes the B of the smallest grid K >= K",
        "K_grid": [int(k) for k in k_grid], "K_min": int(k_grid[0]) if len(k_grid) else 0,
        "K_max": int(k_grid[-1]) if len(k_grid) else -1, "margin": margin, "bounds": [], "validation": {},
        "fit_rows": len(train),
        "M_range": [int(train.m.min()), int(train.m.max())] if len(train) else [1, 0],
        "N_range": [int(train.n.min()), int(train.n.max())] if len(train) else [1, 0],
    }
    if not len(k_grid):
        return envelope
    for s in np.unique(grid_rows.setting):
        g = grid_rows.select(grid_rows.setting == s)
        t = train.select((train.setting == s) & (train.k <= k_grid[-1]))
        gi = np.searchsorted(k_grid, t.k, side="left")
        mn_t = t.m * t.n
        mn_g = g.m * g.n
        floor = margin * int(mn_g.min())
        bounds: list[int] = []
        running = 0
        claimed = True
        for i, kg in enumerate(k_grid):
            split_here = (gi == i) & (t.S > 1)
            lo = int(mn_t[split_here].max()) if split_here.any() else 0
            above = mn_g[(g.k == kg) & (mn_g > lo)]
            if not claimed or not len(above):
                claimed = False
                bounds.append(NO_CLAIM)
                continue
            running = max(running, int(above.min()))
            bounds.append(max(margin * running, floor))
        envelope["bounds"].append({**Setting.from_code(int(s)).names(), "B": bounds})
    return envelope


def validate_envelope(envelope: Mapping[str, Any], heldout: TableRows) -> dict[str, dict[str, Any]]:
    """Test an envelope once on held-out rows: per workspace, the rows above the bound and how many split.

    Returns:
        ``{str(workspace bytes): {"status", "rows", "tested", "split_above_bound", "closest_split_ratio"}}``:
        ``validated`` when rows above the bound were tested and none split, ``unvalidated`` when one did,
        ``untested`` when no held-out row lies above a bound.
    """
    k_grid = np.asarray(envelope["K_grid"], np.int64)
    result: dict[str, dict[str, Any]] = {}
    bounds = {Setting.from_names(b).code: np.asarray(b["B"], np.int64) for b in envelope["bounds"]}
    per_ws: dict[int, list[int]] = {}
    for s in np.unique(heldout.setting):
        ws = Setting.from_code(int(s)).workspace_bytes
        stats = per_ws.setdefault(ws, [0, 0, 0])
        h = heldout.select(heldout.setting == s)
        stats[0] += len(h)
        b = bounds.get(int(s))
        if b is None or not len(k_grid):
            continue
        inside = (h.k >= envelope["K_min"]) & (h.k <= envelope["K_max"])
        idx = np.searchsorted(k_grid, h.k[inside], side="left")
        bound = b[idx]
        mn = (h.m * h.n)[inside]
        above = mn > bound
        stats[1] += int(above.sum())
        stats[2] += int((above & (h.S[inside] > 1)).sum())
        split = h.S[inside] > 1
        if split.any():
            ratio = float((mn[split] / bound[split]).max())
            result.setdefault(str(ws), {})["closest_split_ratio"] = max(ratio, result.get(str(ws), {}).get("closest_split_ratio", 0.0))
    for ws, (rows, tested, bad) in per_ws.items():
        status = EnvelopeStatus.UNVALIDATED if bad else (EnvelopeStatus.VALIDATED if tested else EnvelopeStatus.UNTESTED)
        entry = result.setdefault(str(ws), {})
        entry.update(status=status.value, rows=rows, tested=tested, split_above_bound=bad)
    return result
