"""A recorder device that answers with the emulator: PLUMBING for the record/replay tests, not evidence.

It stands in for a GPU so that the recorder, the recording format, the replay and the envelope fit can
be exercised on a CPU. Its heuristic is a synthetic rule (documented below), and its "GPU outputs" are
mmaemu's own, so a replay of its recordings can only show that the machinery is consistent.
"""

from __future__ import annotations

import dataclasses
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch

import mmaemu
from mmaemu._epilogue import BiasOrder
from mmaemu.platforms._cublaslt import HeuristicQuery, HeuristicResult
from mmaemu.formats import Fp8Format, OutFormat, fp8_format_of
from mmaemu.presets import Preset
from mmaemu.platforms._profiles import Profile, SplitFamily, get_profile
from mmaemu.recording._grid import Grid

E4, E5 = Fp8Format.E4M3, Fp8Format.E5M2

#: A grid small enough for a CPU test (a few hundred queries, a few dozen live calls).
TINY_GRID = Grid(
    "tiny", ms=(16, 64), mn_ref=1 << 13, levels=(0.25, 0.5, 1.0, 2.0, 4.0), ks=(1024, 4096, 6144), heldout=24,
    model_ms=(16,), models=((4096, 192),), workspaces=(0, 1 << 20), outs=(OutFormat.FLOAT32, OutFormat.E4M3),
    pairs=((E4, E4), (E5, E4)), fasts=(True, False), live_per_key=1, live_unsplit=1, live_cost=1 << 21, split_probes=3,
    store_elements=4096, seed=7,
)


class EmulatedDevice:
    """Plumbing stand-in for a GPU.

    Heuristic (synthetic): no split without a workspace; else S = min(4, K // 2048) when K >= 4096 and
    M * N <= 8192, else 1; customOption 1 (pairwise on the round-robin family) for S = 3, else 0.
    E4M3 x E4M3 -> E5M2 is rejected. Outputs: ``mmaemu.scaled_mm`` under ``preset`` with that split (and, for
    biased calls, ``bias_order``; for row-wise calls, the row-wise kernel candidate ``rowwise_kernel``, by default
    the base profile's architecture's model).
    """

    def __init__(self, base: str = "hopper", preset: Preset | None = None, torch_workspace: int = 1 << 20,
                 bias_order: BiasOrder = BiasOrder.AFTER_SCALE, rowwise_kernel: str | None = None) -> None:
        profile = get_profile(base)
        self.family = profile.split_family
        self.profile: Profile = dataclasses.replace(profile, name="emulated-device", preset=preset or profile.preset,
                                                    table_id=None, bias_order=bias_order, rowwise_kernel=rowwise_kernel)
        self.torch_workspace = torch_workspace
        self.base = base

    def environment(self) -> dict[str, Any]:
        return {"gpu": f"EMULATED {self.profile.gpu} (plumbing, not a GPU)", "sm_count": self.profile.sm_count,
                "capability": [0, 0], "driver": None, "cuda": None, "cublaslt": "emulated", "cublaslt_path": None,
                "cublaslt_sha256": None, "torch": torch.__version__, "transformer_engine": None}

    @staticmethod
    def rule(m: int, n: int, k: int, ws: int) -> int:
        if ws == 0 or k < 4096 or m * n > 8192:
            return 1
        return min(4, k // 2048)

    def query(self, q: HeuristicQuery) -> HeuristicResult:
        if (q.dtype_a, q.dtype_b, q.out_dtype) == (torch.float8_e4m3fn, torch.float8_e4m3fn, torch.float8_e5m2):
            return HeuristicResult("rejected", 0, 0, 0, 0, 0, 0, 0, 0)
        s = self.rule(q.m, q.n, q.k, q.workspace_bytes)
        custom = 1 if s == 3 else 0
        return HeuristicResult("ok", s, 0 if s == 1 else 2, custom, 66, 20, 0, 0, 0 if s == 1 else 4096 * s)

    def split_of(self, m: int, n: int, k: int) -> Any:
        s = self.rule(m, n, k, self.torch_workspace)
        if s == 1:
            return 1
        if self.family is SplitFamily.CONTIGUOUS:
            return (s, "contiguous")
        return (s, "pairwise" if s == 3 else "serial")

    def scaled_mm(self, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                  scale_result: torch.Tensor | None, out_dtype: torch.dtype, fast: bool,
                  bias: torch.Tensor | None = None) -> torch.Tensor:
        fp8_format_of(a.dtype)
        rowwise = scale_a.numel() > 1 or scale_b.numel() > 1  # torch 2.7.1's CUTLASS kernel: no cuBLASLt split
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mmaemu.MmaemuWarning)
            return mmaemu.scaled_mm(a, b.t(), scale_a, scale_b, bias, scale_result=scale_result, out_dtype=out_dtype,
                                    use_fast_accum=fast, profile=self.profile,
                                    splitk="auto" if rowwise else self.split_of(a.shape[0], b.shape[0], a.shape[1]))


def copy_recording(src: Path, tmp_path: Path, *, keep_report: bool = True) -> Path:
    """A copy of a recording to change (``tmp_path / "copy"``), with or without its replay.json."""
    dst = tmp_path / "copy"
    shutil.copytree(src, dst)
    if not keep_report:
        (dst / "replay.json").unlink(missing_ok=True)
    return dst
