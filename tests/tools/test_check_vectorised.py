"""tools/measure/check_vectorised.py: the cpu backend's inner loops compile to SIMD instructions."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from conftest import load_tool

TOOL = Path(__file__).resolve().parents[2] / "tools" / "measure" / "check_vectorised.py"


def _tool() -> ModuleType:
    return load_tool("check_vectorised")


def _has_avx2() -> bool:
    try:
        return " avx2" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def test_scalar_code_is_not_counted_as_vectorised() -> None:
    found = _tool().count("vroundss $11, %xmm0, %xmm0, %xmm0\nvmulss %xmm1, %xmm0, %xmm0\nvpmaxsb %xmm1, %xmm2, %xmm3\n")
    assert set(found.values()) == {0}
    found = _tool().count("vrndscaleps $11, %zmm1, %zmm1\nvmulps (%rax), %zmm0, %zmm1\nvpmaxsb 64(%rbx), %zmm2, %zmm2\n")
    assert set(found.values()) == {1}
    rz = "vfmadd231ps\t{rz-sae}, %zmm17, %zmm16, %zmm3\n"
    assert _tool().count(rz, avx512=True)["fma toward zero (AVX-512 kernel)"] == 1
    assert _tool().count("vfmadd231ps\t%zmm17, %zmm16, %zmm3\n", avx512=True)["fma toward zero (AVX-512 kernel)"] == 0
    masked = "masked int8 increment (the count)"
    assert _tool().count("vpaddb\t%zmm13, %zmm9, %zmm9 {%k1}\n", avx512=True)[masked] == 1
    assert _tool().count("vpmovm2b\t%k0, %zmm17\nvpsubb\t%zmm17, %zmm9, %zmm9\n", avx512=True)[masked] == 0


@pytest.mark.skipif(platform.machine() != "x86_64" or not _has_avx2(), reason="needs an x86-64 CPU with AVX2")
def test_the_inner_loops_are_vectorised() -> None:
    pytest.importorskip("numba")
    proc = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from mmaemu.backends import _cpu_fp8

    assert proc.stdout.count(" ok") == (5 if _cpu_fp8.available() else 3)
