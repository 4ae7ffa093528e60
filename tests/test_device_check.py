"""tools/device_check.py without a GPU: its dry run (Triton interpreter on the CPU) and its non-GPU parts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from conftest import load_tool

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "device_check.py"


def _load() -> ModuleType:
    return load_tool("device_check")


def test_dry_run_writes_the_report(tmp_path: Path) -> None:
    pytest.importorskip("triton", reason="triton is not installed (pip install 'mmaemu[triton]')")
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(tmp_path), "--max-cases", "3"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "device_check.json").read_text())
    assert report["dry_run"] is True
    assert {"torch", "triton", "cublaslt", "gpu", "driver"} <= set(report["versions"])
    assert report["selftest"]["passed"]
    assert [r["status"] for r in report["exactness"]] == ["exact"] * 10  # 3 cases, then the 7 dry edges
    edges = [r["case"] for r in report["exactness"][3:]]
    assert [e.split(":")[0] for e in edges] == ["N % 16 != 0 (N = 50)", "N = 1", "M = 1", "M = N = 1",
                                                "custom preset B=8, F=11", "few outputs, slow accumulation, S = 3 pairwise",
                                                "few outputs, slow accumulation, S = 3 pairwise, RZ"]
    timing = report["timing"]
    assert [r["shape"] for r in timing] == [list(s) for s in _load().DRY_TIMED_SHAPES]
    for row in timing:
        assert row["exact"] and row["triton_scaled_mm_s"] > 0 and row["triton_accumulate_tmacs"] > 0
        assert row["rz_exact"] and row["rz_accumulate_tmacs"] > 0 and row["kernel"].startswith("chain_gemm")
        assert "native_scaled_mm_s" in row
    assert all(e.get("exact") for e in timing[0]["tile_sweep"])
    table = (tmp_path / "device_check.txt").read_text()
    assert "DRY RUN" in table and "| M, N, K |" in table and "self-test: passed" in table


def test_cases_cover_every_scheme_and_k_not_a_multiple_of_128() -> None:
    dc = _load()
    for dry in (True, False):
        cases = dc.exactness_cases(dry)
        assert {c["split"].scheme.value for c in cases} == {"none", "contiguous", "serial", "pairwise"}
        assert {c["split"].parts for c in cases} == {1, 2, 3, 4}
        assert {c["preset"] for c in cases} == {"hopper", "ada"}
        assert {c["fmt"] for c in cases} == {("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3")}
        assert {c["fast"] for c in cases} == {True, False}
        assert any(c["k"] % 128 for c in cases)
    assert dc.TIMED_SHAPES == [(2048, 5760, 1920), (8192, 8192, 8192)]


def test_budget_skips_steps() -> None:
    dc = _load()
    budget = dc.Budget(0.0)
    rows = dc.check_exactness(torch.device("cpu"), True, budget, max_cases=2)
    assert [r["status"] for r in rows] == ["skipped (budget)"] * 2
    timing = dc.time_shapes(torch.device("cpu"), True, budget)
    assert all(r["status"] == "skipped (budget)" for r in timing)


def test_text_table_states_the_bar() -> None:
    dc = _load()
    report = {
        "dry_run": False, "elapsed_s": 300.0,
        "versions": {"gpu": "NVIDIA H200", "sm": "sm_90", "driver": "570", "torch": "2.11", "cuda_runtime": "12.8",
                     "triton": "3.6", "cublaslt": "12.8", "mmaemu": "0"},
        "selftest": {"passed": True, "summary": "all 2 kernels passed"},
        "exactness": [{"case": "c", "status": "exact"}, {"case": "d", "status": "2 outputs differ"}],
        "timing": [{"shape": [2048, 5760, 1920], "exact": True, "checked_rows": 2048, "triton_scaled_mm_s": 0.01,
                    "triton_scaled_mm_tmacs": 2.2, "triton_accumulate_tmacs": 8.5, "native_scaled_mm_tmacs": 600.0,
                    "triton_over_native": 270.0, "tile_sweep": [{"block_m": 64, "block_n": 64, "num_warps": 8,
                                                                 "tmacs": 5.5, "exact": True}]}],
    }
    table = dc.text_table(report)
    assert "1 of 2 exact" in table and "d: 2 outputs differ" in table
    assert "270.0x" in table and "tile 64x64 warps 8: 5.500 TMAC/s" in table
    assert ">= 8.0 TMAC/s, exact): met" in table
    report["timing"][0]["triton_accumulate_tmacs"] = 7.9
    assert ">= 8.0 TMAC/s, exact): NOT met" in dc.text_table(report)


def test_without_a_gpu_it_refuses_politely(tmp_path: Path) -> None:
    if torch.cuda.is_available():  # pragma: no cover
        pytest.skip("a GPU is present")
    dc = _load()
    assert dc.run(["--out", str(tmp_path)]) == 2
