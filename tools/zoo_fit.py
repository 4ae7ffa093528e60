"""Fit and discriminate the zoo presets on the recorded fp16, bf16 and tf32 vectors.

For each file of ``../shared/hw-vectors/zoo/`` this replays the 5,000 recorded dot products through
:func:`mmaemu.model.dot` under the shipped preset of its architecture and under neighbouring
alternatives, and counts the outputs that differ from the hardware's bits:

- ``shipped``: the preset of :data:`mmaemu.presets.ZOO` (and, for fp16 files, the fp16 accumulator);
- ``F-1`` / ``F+1``: one fraction bit fewer or more;
- ``B=K/2``: a block half the recorded length (two chained blocks);
- ``B=2K``: a block twice as long (cannot differ: the recording has K nonzero products at most);
- ``c-rounded-add``: products summed alone, c added by one fp32 round-to-nearest-even addition;
- ``nearest-even``: the block sum rounded to nearest even instead of truncated.

A zero count under an alternative means the vectors do not tell it from the shipped preset. Writes
``docs/data/zoo_fit.json`` (or ``--out``); runs in a few seconds.

    python tools/zoo_fit.py
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from evidence import evidence_root  # noqa: E402

ZOO_DIR = evidence_root() / "hw-vectors" / "zoo"

import mmaemu  # noqa: E402
from mmaemu.presets import ZOO, Architecture, CMode, Rounding  # noqa: E402
from mmaemu.formats import WideFormat  # noqa: E402

GPU_ARCH = {"v100": Architecture.VOLTA, "a100": Architecture.AMPERE, "ada": Architecture.ADA,
            "h100": Architecture.HOPPER, "b200": Architecture.B200}


def load(path: Path) -> dict[str, torch.Tensor]:
    """The operands (in their format's dtype), c and the recorded results of one zoo file."""
    gpu, fmt_name = path.stem.split("_")
    fmt = WideFormat(fmt_name)
    data = np.load(path)

    def as_f32(name: str) -> torch.Tensor:
        return torch.from_numpy(data[name].view(np.int32).copy()).view(torch.float32)

    out = {"a": as_f32("a_bits").to(fmt.dtype), "b": as_f32("b_bits").to(fmt.dtype), "c": as_f32("c_bits"),
           "d": as_f32("d_fp32_bits")}
    if "d_fp16acc_bits" in data.files:
        out["d16"] = as_f32("d_fp16acc_bits")
    return out


def mismatches(got: torch.Tensor, want: torch.Tensor) -> int:
    """Outputs whose bits differ (fp16 results compared through their exact fp32 value)."""
    return int((got.float().view(torch.int32) != want.view(torch.int32)).sum())


def fit_file(path: Path) -> dict[str, object]:
    gpu, fmt_name = path.stem.split("_")
    arch, fmt = GPU_ARCH[gpu], WideFormat(fmt_name)
    shipped = ZOO[(arch, fmt)]
    v = load(path)
    k = v["a"].shape[-1]
    variants = {
        "shipped": shipped,
        "F-1": dataclasses.replace(shipped, frac_bits=shipped.frac_bits - 1),
        "F+1": dataclasses.replace(shipped, frac_bits=shipped.frac_bits + 1),
        "B=K/2": dataclasses.replace(shipped, block_size=k // 2),
        "B=2K": dataclasses.replace(shipped, block_size=2 * k),
        "c-rounded-add": dataclasses.replace(shipped, c_mode=CMode.ROUNDED_ADD),
        "nearest-even": dataclasses.replace(shipped, rounding=Rounding.NEAREST_EVEN),
    }
    row: dict[str, object] = {"gpu": gpu, "architecture": arch.value, "format": fmt.short_name, "K": k,
                              "rows": int(v["d"].shape[0]), "block_size": shipped.block_size,
                              "frac_bits": shipped.frac_bits}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        row["fp32"] = {name: mismatches(mmaemu.model.dot(v["a"], v["b"], v["c"], preset=p), v["d"])
                       for name, p in variants.items()}
        if "d16" in v:
            c16 = v["c"].to(torch.float16)
            row["fp16_accumulator"] = {
                name: mismatches(mmaemu.model.dot(v["a"], v["b"], c16, preset=variants[name]), v["d16"])
                for name in ("shipped", "F-1", "F+1", "B=K/2")
            }
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "data" / "zoo_fit.json")
    args = parser.parse_args(argv)
    files = sorted(ZOO_DIR.glob("*.npz"))
    if not files:
        print(f"no zoo vectors under {ZOO_DIR}", file=sys.stderr)
        return 2
    rows = [fit_file(f) for f in files]
    for r in rows:
        fp16 = r.get("fp16_accumulator")
        print(f"{r['gpu']:>5} {r['format']}: B={r['block_size']:<2} F={r['frac_bits']}  fp32 {r['fp32']}"
              + (f"  fp16 acc {fp16}" if fp16 else ""))
    args.out.write_text(json.dumps({"source": "tools/zoo_fit.py", "files": rows}, indent=1) + "\n")
    return 0 if all(r["fp32"]["shipped"] == 0 and r.get("fp16_accumulator", {"shipped": 0})["shipped"] == 0  # type: ignore[index]
                    for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
