"""tools/gpu_static.py: the SASS reader on a hand-written listing, and one target compiled as CI
runs it, equal to the committed docs/data/gpu_static.json."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_static", TOOLS / "gpu_static.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_2:
        /*0010*/                   IMAD R2, R3, R4, RZ ;
.L_x_0:
        /*0020*/                   LDG.E R5, desc[UR4][R6.64] ;
        /*0030*/                   VIADDMNMX R7, R5, R8, R7, !PT ;
        /*0040*/               @P0 BRA `(.L_x_0) ;
.L_x_1:
        /*0050*/                   FMUL R9, R5, R10 ;
        /*0060*/                   F2I.TRUNC.NTZ R11, R9 ;
        /*0070*/                   IMAD.IADD R12, R12, 0x1, R11 ;
        /*0080*/              @!P1 BRA `(.L_x_1) ;
        /*0090*/                   ISETP.GE.AND P2, PT, R13, R14, PT ;
        /*00a0*/               @P2 BRA `(.L_x_2) ;
        /*00b0*/                   EXIT ;
.L_x_3:
        /*00c0*/                   BRA `(.L_x_3);
"""


def test_reads_loops_and_counts_per_mac() -> None:
    gs = _tool()
    v = gs.Variant("test", block=4, frac=13, block_m=32, block_n=2, num_warps=1)  # 2 MACs per thread per k
    counts, shape = gs.per_mac(SASS, v)
    assert shape["loops"] == 3 and shape["per_k_loops"] == [0x20, 0x30]  # the end padding is no loop
    # per k: 2 + 4 instructions of the inner loops, plus the block loop's own 4 (IMAD, ISETP, BRA, and
    # the first block-loop instruction) / B = 4
    assert counts["F2I"] == 0.5 and counts["LDG"] == 0.5 and counts["VIADDMNMX"] == 0.5
    assert counts["IMAD"] == pytest.approx((1 + 1 / 4) / 2)
    assert counts["BRA"] == pytest.approx((2 + 1 / 4) / 2)
    p = gs.pipes(counts)
    assert p["xu"] == 0.5 and p["lsu"] == 0.5 and p["fp32"] == 0.5
    mpc, bound = gs.macs_per_clock(p, gs.RATES[90])
    assert bound == "xu" and mpc == 32.0  # 16 conversions per clock per SM, half a conversion per MAC


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_one_target_as_ci_runs_it_equals_the_committed_report(tmp_path: Path) -> None:
    """sm_90 compiled afresh (in a process without TRITON_INTERPRET: the tests' interpreter mode
    would hand Triton interpreted functions) gives the committed figures."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = tmp_path / "gpu_static.json"
    run = subprocess.run([sys.executable, str(TOOLS / "gpu_static.py"), "--targets", "sm_90", "--no-sweep",
                          "--json", str(out)], capture_output=True, text=True, env=env, timeout=600, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    gs = _tool()
    report = json.loads(out.read_text())
    stored = json.loads(gs.JSON.read_text())
    assert report["targets_variant"] == stored["targets_variant"]
    assert report["targets"]["sm_90"] == stored["targets"]["sm_90"], "stale: run python tools/gpu_static.py"
    assert report["estimates"]["H200"] == stored["estimates"]["H200"]
    row = stored["targets"]["sm_90"]
    assert {"spill_bytes", "per_mac", "registers"} <= set(row)
    assert set(stored["targets"]) == set(gs.TARGETS)
    assert {"RTX 4060", "A100", "L40S", "H100 SXM", "H200", "B200", "RTX 5090"} <= set(stored["estimates"])


def test_the_committed_report_meets_the_static_bars() -> None:
    """The static bars, on the committed report: no F2I in the inner loop of any launched variant,
    no spills in any variant the backend can launch on any target, and an H200 estimate of 10 TMAC/s or
    more (by the sm_90 formulation; the exactly-defined one's ceiling is stated beside it)."""
    gs = _tool()
    from mmaemu.backends.triton.backend import RZ_GENERAL_GPU_CONFIG, RZ_GPU_CONFIG, SMALL_GRID_TILES

    stored = json.loads(gs.JSON.read_text())
    launched = {stored["targets_variant"], stored["targets_native_variant"]}
    for preset in ("hopper", "ada"):
        block = 32 if preset == "hopper" else 16
        for t in (*SMALL_GRID_TILES, RZ_GPU_CONFIG):
            tile = f"{t.block_m}x{t.block_n}/{t.num_warps}w"
            launched.add(f"chain_gemm_rz one-chain {preset}[B={block},F=13] {tile}")
            launched.add(f"chains_rz {preset}[B={block},F=13] {tile}")
        g = RZ_GENERAL_GPU_CONFIG
        launched.add(f"chain_gemm_rz general {preset}[B={block},F=13] {g.block_m}x{g.block_n}/{g.num_warps}w")
    for name in sorted(launched):
        rows = stored["variants"][name]
        assert set(rows) == ({"sm_90"} if "native" in name else set(gs.TARGETS)), name
        for target, row in rows.items():
            assert row["spill_bytes"] == 0, (name, target)
            assert row["per_mac"].get("F2I", 0.0) == 0.0, (name, target)
    native = stored["targets_native"]["sm_90"]
    assert native["per_mac"]["QGMMA"] > 0 and native["spill_bytes"] == 0
    h200 = stored["estimates"]["H200"]
    assert h200["tmacs"] >= 10 and h200["variant"] == stored["targets_native_variant"]
    assert stored["estimates_rz"]["H200"]["variant"] == stored["targets_variant"]
