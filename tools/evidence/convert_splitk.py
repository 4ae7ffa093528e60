"""Convert the recorded split-K tables (../shared/recordings/splitk) into mmaemu's package data.

Usage::

    python tools/evidence/convert_splitk.py [--recordings ../shared/recordings/splitk] [--out mmaemu/data/splitk]
    python tools/evidence/convert_splitk.py --check    # exit 1 if the shipped data differ from a fresh conversion

For each table ``heur_<gpu>_lt<version>`` it writes:

- ``<table_id>.npz``: binary columns sorted by (setting, M, N, K): ``key`` (int64, M << 42 | N << 21 | K),
  ``setting_start`` (int64 [257]: the rows of setting s are ``setting_start[s]:setting_start[s + 1]``),
  ``S`` and ``custom`` and ``reduction`` (uint8). A setting packs (fa, fb, out, fast, ws) into one byte.
- ``<table_id>.json``: provenance (source file and sha256, recording device and versions), the settings'
  split statistics, the envelope (H100: bounds per setting and K grid, and the M and N its sweep reached;
  RTX 4060: twice the setting's largest split M*N), the rejected combinations, and the split combinations
  replayed on hardware.

The shipped files' sha256 are pinned in their GPU's record (``table_sha256`` of the ``ReferenceGpu`` in
``mmaemu.platforms._gpus.GPUS``; ``mmaemu.platforms._table.SHIPPED_TABLES`` collects them): after a conversion
that changes them, or for a new GPU, set them there (this tool prints them).

Only numbers and provenance are carried over, not the prose of the recordings' metadata.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from mmaemu.platforms._table import (  # noqa: E402 - the package's one home of the table encoding
    KEY_DESCRIPTION,
    TABLE_FORMAT,
    pack_key,
    serialise_table,
    setting_code,
    table_arrays,
    table_codes,
)

sys.path.insert(0, str(ROOT / "tests"))
from evidence import evidence_root  # noqa: E402

DEFAULT_SRC = evidence_root() / "recordings" / "splitk"
DEFAULT_OUT = ROOT / "mmaemu" / "data" / "splitk"
FORMAT = TABLE_FORMAT
__all__ = ["setting_code", "pack_key", "tested_ranges", "convert_table", "convert", "serialise", "main"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# The recording's envelope states the shapes its sweep tested as prose (assumption 4: "the shapes tested:
# M 1..16,384, N 16..2^20 (p1), ...; a larger M or N is extrapolated in M*N"; seeds 004). Read the numbers
# from it, and fail rather than guess when the text says something else.
_TESTED = re.compile(r"shapes tested: M ([\d,]+)\.\.([\d,]+), N ([\d,]+)\.\.2\^(\d+)")


def tested_ranges(assumptions: list[str]) -> dict[str, list[int]]:
    """``M_range`` and ``N_range`` of the shapes an envelope's sweep tested, from its stated assumptions."""
    found = [m for m in map(_TESTED.search, assumptions) if m is not None]
    if len(found) != 1:
        raise ValueError("the recording's envelope does not state the M and N its sweep tested once "
                         "('shapes tested: M a..b, N c..2^d')")
    m_lo, m_hi, n_lo, n_exp = (int(g.replace(",", "")) for g in found[0].groups())
    return {"M_range": [m_lo, m_hi], "N_range": [n_lo, 1 << n_exp]}


def convert_table(npz_path: Path, json_path: Path, combos_path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    data = np.load(npz_path)
    meta = json.loads(json_path.read_text())
    setting = setting_code(
        data["fa"].astype(np.int64), data["fb"].astype(np.int64), data["out"].astype(np.int64),
        data["fast"].astype(np.int64), data["ws"].astype(np.int64),
    )
    arrays = table_arrays(setting, data["M"], data["N"], data["K"], {
        "S": data["splitK"].astype(np.uint8),
        "custom": data["custom"].astype(np.uint8),
        "reduction": data["reduction"].astype(np.uint8),
    })
    key = arrays["key"]
    combos = json.loads(combos_path.read_text())
    device = meta["profile_device"]
    info: dict[str, Any] = {
        "format": FORMAT,
        "table_id": meta["table_id"],
        "gpu": device["gpu"],
        "sm_count": device["sm_count"],
        "capability": device["capability"],
        "cublaslt": device["cublaslt"],
        "torch": device["torch"],
        "driver": device["driver"],
        "rows": int(len(key)),
        "split_rows": int((arrays["S"] > 1).sum()),
        "key": KEY_DESCRIPTION,
        "codes": table_codes(),
        "source": {
            "npz": npz_path.name, "npz_sha256": sha256(npz_path),
            "json": json_path.name, "json_sha256": sha256(json_path),
            "combos": combos_path.name, "combos_sha256": sha256(combos_path),
            "origin": "mmaemu 0.1.0 (PyPI) recordings, Apache-2.0, Copyright 2026 Xun Ding and the mmaemu contributors",
            "descriptor": meta.get("descriptor"),
        },
        "settings": [
            {k: s[k] for k in ("ws", "out", "fast", "fmt_a", "fmt_b", "rows", "split_rows", "S_values", "max_split_MN", "min_split_K")}
            for s in meta["settings"]
        ],
        "rejects": [{k: r[k] for k in ("fmt_a", "fmt_b", "out")} for r in meta.get("rejects", [])],
        "verified_combos": sorted(
            [[bool(c["fast"]), int(c["S"]), c["scheme"], c["out"], c["fmt_pair"]] for c in combos["combos"] if c["verified"]]
        ),
    }
    env = meta.get("envelope")
    if env is not None:
        info["envelope"] = {
            "kind": "k_grid",
            "claim": "S = 1 when M * N > B(setting, K) and K_min <= K <= K_max; K takes the B of the smallest grid K >= K",
            "K_grid": [int(k) for k in env["K_grid"]],
            "K_min": int(env["K_min"]),
            "K_max": int(env["K_max"]),
            **tested_ranges(env["assumptions"]),
            "bounds": [
                {"ws": b["ws"], "out": b["out"], "fast": b["fast"], "fmt_a": b["fmt_a"], "fmt_b": b["fmt_b"], "B": [int(x) for x in b["B"]]}
                for b in env["bounds"]
            ],
            "validation": {
                ws: {k: v[k] for k in ("status", "tested", "split_above_bound", "rows")}
                for ws, v in env["validation"].items()
            },
        }
    else:
        info["envelope"] = {
            "kind": "twice_max_split_mn",
            "claim": "S = 1 when M * N > 2 * max_split_MN of the setting (in 1,512,000 live queries none split above 1.27 times it)",
        }
    return arrays, info


def convert(src: Path) -> dict[str, tuple[dict[str, np.ndarray], dict[str, Any]]]:
    out = {}
    for npz_path in sorted(src.glob("heur_*.npz")):
        stem = npz_path.stem  # heur_<gpu>_lt<version>
        gpu_version = stem[len("heur_"):]
        combos = src / f"verified_split_combos_{gpu_version}.json"
        arrays, info = convert_table(npz_path, src / f"{stem}.json", combos)
        out[info["table_id"]] = (arrays, info)
    return out


def serialise(arrays: dict[str, np.ndarray], info: dict[str, Any]) -> tuple[bytes, bytes]:
    """The package's table writer (mmaemu.platforms._table.serialise_table), shared with recordings."""
    return serialise_table(arrays, info)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recordings", type=Path, default=DEFAULT_SRC)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="compare the shipped data with a fresh conversion")
    args = parser.parse_args(argv)
    tables = convert(args.recordings)
    if not tables:
        print(f"no tables found in {args.recordings}", file=sys.stderr)
        return 2
    stale = []
    for table_id, (arrays, info) in tables.items():
        npz_path, json_path = args.out / f"{table_id}.npz", args.out / f"{table_id}.json"
        if args.check:
            shipped = np.load(npz_path)
            same = json.loads(json_path.read_text()) == json.loads(json.dumps(info)) and all(
                np.array_equal(shipped[k], v) for k, v in arrays.items()
            )
            if not same:
                stale.append(table_id)
            continue
        args.out.mkdir(parents=True, exist_ok=True)
        npz_bytes, json_bytes = serialise(arrays, info)
        npz_path.write_bytes(npz_bytes)
        json_path.write_bytes(json_bytes)
        print(f"{table_id}: {info['rows']:,} rows ({info['split_rows']:,} split) -> {npz_path} ({len(npz_bytes):,} bytes)")
        print(f"  sha256 (its ReferenceGpu's table_sha256 in mmaemu.platforms._gpus.GPUS): npz {hashlib.sha256(npz_bytes).hexdigest()}, "
              f"json {hashlib.sha256(json_bytes).hexdigest()}")
    if stale:
        print(f"shipped split-K data differ from the recordings: {stale}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
