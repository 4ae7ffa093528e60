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

It does the same for the fp16-accumulator outputs of the three FP8 files of ``../shared/hw-vectors/``
(``d_fp16acc_bits``; ``mma.sync m16n8k32 f16.e4m3.e4m3.f16``, c rounded to fp16), under the rule of
each file's preset (``ada``: its 16-product blocks, each rounded to fp16; ``hopper_mma_sync`` and
``b200_mma_sync``: the HMMA rewrite, :func:`mmaemu.model.hmma_rewrite`) and under the alternatives
that a mechanism could suggest instead (:data:`FP8_ALTERNATIVES` names and describes them).

A zero count under an alternative means the vectors do not tell it from the shipped preset. Writes
``docs/data/zoo_fit.json`` (or ``--out``); runs in about half a minute.

    python tools/evidence/zoo_fit.py
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from evidence import evidence_root

ZOO_DIR = evidence_root() / "hw-vectors" / "zoo"
FP8_DIR = evidence_root() / "hw-vectors"

import mmaemu
from mmaemu.formats import WideFormat
from mmaemu.presets import (
    ADA,
    B200_MMA_SYNC,
    HOPPER_MMA_SYNC,
    ZOO,
    Architecture,
    CMode,
    HalfAccumulation,
    Preset,
    Rounding,
)

GPU_ARCH = {"v100": Architecture.VOLTA, "a100": Architecture.AMPERE, "ada": Architecture.ADA,
            "h100": Architecture.HOPPER, "b200": Architecture.B200}


def load(path: Path) -> dict[str, torch.Tensor]:
    """The operands (in their format's dtype), c and the recorded results of one zoo file."""
    _, fmt_name = path.stem.split("_")
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


#: The FP8 files with fp16-accumulator outputs, and the preset whose rule is shipped for each.
FP8_FILES = {"ada_e4m3.npz": ADA, "h100_e4m3.npz": HOPPER_MMA_SYNC, "b200_e4m3.npz": B200_MMA_SYNC}
#: The alternatives counted on each FP8 file's fp16-accumulator outputs, and what each one is.
FP8_ALTERNATIVES = {
    "exact-once": "the exact sum of the 32 products and c, rounded once to fp16 (the issue's simple rule)",
    "products-once-then-c": "the exact sum of the 32 products rounded to fp16, then c added by an fp16 addition",
    "blocks-B16-F13": "ada's rule: two 16-product blocks (k 0-15, 16-31) from c, c aligned, F = 13, each rounded",
    "blocks-B16-F12": "ada's rule with F = 12",
    "blocks-B16-F14": "ada's rule with F = 14",
    "blocks-B32-F13": "one 32-product block from c, F = 13, rounded once",
    "rewrite": "the HMMA rewrite: fp16 steps over k mod 4 in {0, 1} then {2, 3} from +0 (F = 25), then + c",
    "rewrite-contiguous-halves": "the rewrite with steps over k 0-15 then 16-31",
    "rewrite-steps-swapped": "the rewrite with the step over k mod 4 in {2, 3} first",
    "rewrite-c-in-first-step": "the rewrite with c as the first step's accumulator (aligned), no last addition",
    "rewrite-c-in-second-step": "the rewrite with c added to the first step's result (fp16 addition) before the second",
    "rewrite-F13": "the rewrite with F = 13 in its steps",
    "rewrite-F14": "the rewrite with F = 14 in its steps",
    "rewrite-F20": "the rewrite with F = 20 in its steps",
}


def _fp16_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """fp16 x + y, rounded once to nearest even (numpy rounds float64 to float16 directly)."""
    total = x.double().numpy() + y.double().numpy()
    return torch.from_numpy(total.astype(np.float16))


def _steps(a16: torch.Tensor, b16: torch.Tensor, c16: torch.Tensor, groups: list[torch.Tensor], frac_bits: int,
           c_first: bool) -> torch.Tensor:
    """fp16 HMMA steps over the position ``groups`` in order, from c (``c_first``) or from +0."""
    step = Preset("hmma-step", block_size=16, frac_bits=frac_bits)
    acc = c16 if c_first else torch.zeros_like(c16)
    for g in groups:
        acc = mmaemu.model.dot(a16[:, g], b16[:, g], acc, preset=step)
    return acc


def _fp8_alternative(name: str, a: torch.Tensor, b: torch.Tensor, c16: torch.Tensor) -> torch.Tensor:
    k = torch.arange(32)
    low, high = k[k % 4 < 2], k[k % 4 >= 2]
    a16, b16 = a.to(torch.float16), b.to(torch.float16)
    exact = (a.double() * b.double()).sum(-1)  # 32 FP8 products: exact in float64
    if name == "exact-once":
        return torch.from_numpy((exact + c16.double()).numpy().astype(np.float16))
    if name == "products-once-then-c":
        return _fp16_add(torch.from_numpy(exact.numpy().astype(np.float16)), c16)
    if name.startswith("blocks-"):
        block, frac = (int(x[1:]) for x in name.split("-")[1:])
        return mmaemu.model.dot(a, b, c16, preset=Preset(name, block_size=block, frac_bits=frac))
    if name == "rewrite":
        rewrite = Preset(name, block_size=32, frac_bits=25, fp16_accumulation=HalfAccumulation.HMMA_REWRITE)
        return mmaemu.model.dot(a, b, c16, preset=rewrite)
    if name == "rewrite-contiguous-halves":
        return _fp16_add(_steps(a16, b16, c16, [k[:16], k[16:]], 25, False), c16)
    if name == "rewrite-steps-swapped":
        return _fp16_add(_steps(a16, b16, c16, [high, low], 25, False), c16)
    if name == "rewrite-c-in-first-step":
        return _steps(a16, b16, c16, [low, high], 25, True)
    if name == "rewrite-c-in-second-step":
        first = _steps(a16, b16, c16, [low], 25, False)
        return _steps(a16, b16, _fp16_add(first, c16), [high], 25, True)
    if name.startswith("rewrite-F"):
        return _fp16_add(_steps(a16, b16, c16, [low, high], int(name[len("rewrite-F"):]), False), c16)
    raise ValueError(name)


def fit_fp8_fp16_file(path: Path) -> dict[str, object]:
    """The fp16-accumulator counts of one FP8 file: its preset's rule and every alternative."""
    data = np.load(path)
    a = torch.from_numpy(data["a_codes"].copy()).view(torch.float8_e4m3fn)
    b = torch.from_numpy(data["b_codes"].copy()).view(torch.float8_e4m3fn)
    c16 = torch.from_numpy(data["c_bits"].view(np.int32).copy()).view(torch.float32).to(torch.float16)
    want = torch.from_numpy(data["d_fp16acc_bits"].view(np.int32).copy()).view(torch.float32)
    preset = FP8_FILES[path.name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counts = {"shipped": mismatches(mmaemu.model.dot(a, b, c16, preset=preset), want)}
        counts.update({name: mismatches(_fp8_alternative(name, a, b, c16), want) for name in FP8_ALTERNATIVES})
    return {"file": path.name, "preset": preset.name, "rule": preset.fp16_accumulation.value,
            "rows": int(want.shape[0]), "fp16_accumulator": counts}


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
    fp8_rows = [fit_fp8_fp16_file(FP8_DIR / name) for name in FP8_FILES if (FP8_DIR / name).exists()]
    print("FP8 operands, fp16 accumulator (outputs that differ, of 5,000 per file):")
    names = ["shipped", *FP8_ALTERNATIVES]
    print(f"  {'alternative':28s}" + "".join(f"{r['file'].split('_')[0]:>7s}" for r in fp8_rows))
    for name in names:
        print(f"  {name:28s}" + "".join(f"{r['fp16_accumulator'][name]:7d}" for r in fp8_rows))  # type: ignore[index]
    args.out.write_text(json.dumps({"source": "tools/evidence/zoo_fit.py", "files": rows,
                                    "fp8_fp16_accumulator": {"alternatives": FP8_ALTERNATIVES, "files": fp8_rows}},
                                   indent=1) + "\n")
    zoo_ok = all(r["fp32"]["shipped"] == 0 and r.get("fp16_accumulator", {"shipped": 0})["shipped"] == 0  # type: ignore[index]
                 for r in rows)
    fp8_ok = len(fp8_rows) == len(FP8_FILES) and all(r["fp16_accumulator"]["shipped"] == 0  # type: ignore[index]
                                                     for r in fp8_rows)
    return 0 if zoo_ok and fp8_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
