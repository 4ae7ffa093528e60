"""tools/evidence/gpu_static.py: the SASS reader on a hand-written listing, and one target compiled as CI
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

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_static", TOOLS / "evidence" / "gpu_static.py")
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


def test_the_realistic_model_on_a_hand_written_row() -> None:
    """Synchronous loads pay the global latency every iteration (one worker alone cannot hide it); the
    same loop fed by asynchronous copies is bound by its pipes; more resident programs hide more; the
    realistic figure never exceeds the ceiling."""
    gs = _tool()
    v = gs.Variant("hopper", 32, 13, 128, 128, 8, "chain_gemm_native", True, dot_k=128)
    per_iter = {"LDG": 8, "STS": 8, "BAR": 1, "QGMMA": 4, "IADD3": 20}
    row = {"per_mac": {op: n / v.macs_per_thread_per_k for op, n in per_iter.items()}, "registers": 128,
           "shared_bytes": 99328}
    row["pipes_per_mac"] = gs.pipes(row["per_mac"])
    row["macs_per_clock_per_sm"], row["bound"] = gs.macs_per_clock(row["pipes_per_mac"], gs.RATES[90])
    serial, feed = gs.serial_clocks(v, row, gs.RATES[90])
    assert feed == "synchronous loads" and serial > gs.GLOBAL_LATENCY + 512  # latency, stores, barrier, dots
    fast_dram = gs.GPU("sm_90", 132, 1980, 10**6)  # an H200 whose DRAM never binds
    sync = gs.realistic(v, row, fast_dram)
    assert sync["programs_per_sm"] == 2 and sync["bound"].startswith("latency")
    ceiling = gs.estimate(v, row, fast_dram)
    assert sync["tmacs"] < ceiling["tmacs"]
    async_row = dict(row, per_mac={("LDGSTS" if op == "LDG" else op): n for op, n in row["per_mac"].items()})
    assert gs.serial_clocks(v, async_row, gs.RATES[90])[1] == "asynchronous copies"
    assert gs.realistic(v, async_row, fast_dram)["tmacs"] > sync["tmacs"]
    fewer = gs.realistic(v, dict(row, registers=255), fast_dram)  # one program per SM
    assert fewer["programs_per_sm"] == 1 and fewer["tmacs"] < sync["tmacs"]
    assert gs.realistic(v, row, gs.GPUS["H200"])["bound"] == "dram"  # the H200's own DRAM, no cache reuse


_ATTRS = """
import sys
sys.path.insert(0, "tools/evidence")
import gpu_static as gs
v = gs.Variant("hopper", 32, 13, 128, 128, 8, "chain_gemm_native", True, dot_k=128)
names = gs.kernel_function(v).arg_names
print(" ".join(sorted(names[i] for (i,) in gs.jit_attrs(v))))
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_the_launchers_specialisation_is_compiled() -> None:
    """Pointers and the integers the kernel lets Triton specialise carry the divisibility the launcher gives
    them (the 16-byte asynchronous copies need them); M and N, never specialised, carry none. (In a process
    without TRITON_INTERPRET: interpreted kernels have no JIT parameters.)"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", _ATTRS], capture_output=True, text=True, env=env, timeout=300,
                         check=False, cwd=TOOLS.parent)
    assert run.returncode == 0, run.stderr[-2000:]
    marked = set(run.stdout.split())
    assert {"a_ptr", "b_ptr", "out_ptr", "bounds_ptr", "stride_a", "stride_b"} <= marked
    assert not {"M", "N", "tiles", "tiles_n"} & marked


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_one_target_as_ci_runs_it_equals_the_committed_report(tmp_path: Path) -> None:
    """sm_90 compiled afresh (in a process without TRITON_INTERPRET: the tests' interpreter mode would hand
    Triton interpreted functions) gives the committed figures of this Triton version."""
    import triton

    gs = _tool()
    stored = json.loads(gs.JSON.read_text())
    if triton.__version__ not in stored["triton"]:
        pytest.skip(f"triton {triton.__version__} is not among the analysed versions {stored['triton']}")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = tmp_path / "gpu_static.json"
    run = subprocess.run([sys.executable, str(TOOLS / "evidence" / "gpu_static.py"), "--targets", "sm_90", "--no-sweep",
                          "--json", str(out)], capture_output=True, text=True, env=env, timeout=900, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(out.read_text())
    mine = stored["by_triton"][triton.__version__]
    fresh = gs.version_summary(report)
    for name, rows in fresh["variants"].items():
        assert rows["sm_90"] == mine["variants"][name]["sm_90"], f"{name} stale: run python tools/evidence/gpu_static.py"
    for key in ("estimates", "realistic", "estimates_rz", "realistic_rz"):
        assert fresh[key]["H200"] == mine[key]["H200"], key
    if triton.__version__ == stored["triton_version"]:
        assert report["targets"]["sm_90"] == stored["targets"]["sm_90"], "stale: run python tools/evidence/gpu_static.py"


def _launched(gs: ModuleType, stored: dict[str, object]) -> set[str]:
    """Every variant the backend can launch (names as the report writes them)."""
    from mmaemu.backends._triton.backend import (
        RZ_GENERAL_GPU_CONFIG,
        RZ_GPU_CONFIG,
        SMALL_GRID_TILES,
    )

    launched = {str(stored["targets_variant"])}
    launched |= {name for name in stored["variants"] if name.startswith("chain_gemm_native")}  # type: ignore[attr-defined]
    for preset in ("hopper", "ada"):
        block = 32 if preset == "hopper" else 16
        for t in (*SMALL_GRID_TILES, RZ_GPU_CONFIG):
            launched.add(f"chain_gemm_rz one-chain {preset}[B={block},F=13] {t.text}")
            launched.add(f"chains_rz {preset}[B={block},F=13] {t.text}")
        launched.add(f"chain_gemm_rz general {preset}[B={block},F=13] {RZ_GENERAL_GPU_CONFIG.text}")
    return launched


def test_the_committed_report_meets_the_static_bars() -> None:
    """The static bars, on the committed report, for Triton 3.6 and the newest: no spills in any variant the
    backend can launch on any target from sm_80 to sm_120 (the sm_90 formulation for every format pair and
    both accumulation modes), no F2I in the exactly-defined loops, and a realistic H200 estimate of the
    sm_90 formulation of 100 TMAC/s or more, below its ceiling."""
    gs = _tool()
    stored = json.loads(gs.JSON.read_text())
    assert "3.6.0" in stored["triton"] and len(stored["triton"]) >= 2 and stored["triton_version"] == max(
        stored["triton"], key=lambda v: tuple(int(x) for x in v.split(".")))
    launched = _launched(gs, stored)
    natives = [name for name in launched if name.startswith("chain_gemm_native")]
    assert len(natives) == 8, natives  # four format pairs, fast and slow
    for version in stored["triton"]:
        summary = stored["by_triton"][version]
        for name in sorted(launched):
            rows = summary["variants"][name]
            assert set(rows) == ({"sm_90"} if "native" in name else set(gs.TARGETS)), (version, name)
            for target, row in rows.items():
                assert row["spill_bytes"] == 0, (version, name, target)
        h200 = summary["realistic"]["H200"]
        assert h200["variant"] == stored["targets_native_variant"] and h200["tmacs"] >= 100, (version, h200)
        for gpu, ceiling in summary["estimates"].items():
            assert summary["realistic"][gpu]["tmacs"] <= ceiling["tmacs"], (version, gpu)
    for name in launched:
        for row in stored["variants"][name].values():
            assert row["per_mac"].get("F2I", 0.0) == 0.0, name
    native = stored["targets_native"]["sm_90"]
    assert native["per_mac"]["QGMMA"] > 0 and native["per_mac"].get("LDGSTS", 0) > 0  # asynchronous copies
    assert stored["estimates_rz"]["H200"]["variant"] == stored["targets_variant"]
