"""Check that numba compiled the cpu backend's inner loops to packed (SIMD) instructions.

Compiles the kernels afresh in a subprocess with ``NUMBA_DUMP_ASSEMBLY=1`` (an empty numba cache
directory, so nothing is loaded from disk), runs one small GEMM on each FP8 kernel (the portable
one, ``MMAEMU_CPU_PORTABLE=1``, and, on a CPU with AVX-512, ``mmaemu.backends._cpu_fp8``), and
counts in the machine code:

- packed truncation of fp32 terms (``vroundps`` / ``vrndscaleps`` on ``ymm`` or ``zmm``): the
  portable kernel's pass 2;
- packed int8 maxima (``vpmaxsb``): the block maximum of the exponent sums (both kernels);
- packed fp32 multiplies (``vmulps`` on ``ymm``/``zmm``): the portable kernel's pass 2;
- fused multiply-adds rounded toward zero on ``zmm`` (``vfmadd...ps {rz-sae}``): the AVX-512
  kernel's terms, and the count's masked int8 increment (``vpaddb ... {%k}``, not a mask moved
  into a vector and subtracted) (both checked only where the CPU has AVX-512F and AVX-512BW).

Usage: ``python tools/measure/check_vectorised.py``; exits 1 when a loop did not vectorise (x86-64 with
AVX2 or AVX-512 only; other machines exit 0 with a note).
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import tempfile

_RUN = """
import os, torch, mmaemu
a = torch.randn(8, 64).to(torch.float8_e4m3fn)
b = torch.randn(300, 64).to(torch.float8_e4m3fn)
os.environ["MMAEMU_CPU_PORTABLE"] = "1"
mmaemu.accumulate(a, b, use_fast_accum=True, splitk=1, backend="cpu")
os.environ["MMAEMU_CPU_PORTABLE"] = "0"
mmaemu.accumulate(a, b, use_fast_accum=True, splitk=1, backend="cpu")
"""

#: name -> regular expression that a vectorised hot loop must produce
CHECKS = {
    "packed fp32 truncation (pass 2)": r"\b(vroundps|vrndscaleps)\s+\$\w+,\s*%(ymm|zmm)",
    "packed int8 maximum (pass 1)": r"\bvpmaxsb\b[^\n]*%(ymm|zmm)",
    "packed fp32 multiply (pass 2)": r"\bvmulps\b[^\n]*%(ymm|zmm)",
}
#: checked only on a CPU with AVX-512F and BW (where the AVX-512 kernel runs)
AVX512_CHECKS = {
    "fma toward zero (AVX-512 kernel)": r"\bvfmadd\d{3}ps\s+\{rz-sae\}[^\n]*%zmm",
    "masked int8 increment (the count)": r"\bvpaddb\b[^\n]*%zmm\d+\s*\{%k\d\}",
}


def count(assembly: str, *, avx512: bool = False) -> dict[str, int]:
    """Occurrences of each checked instruction pattern in ``assembly`` (with ``avx512``, the AVX-512 kernel's too)."""
    checks = {**CHECKS, **(AVX512_CHECKS if avx512 else {})}
    return {name: len(re.findall(pattern, assembly)) for name, pattern in checks.items()}


def _has_avx512() -> bool:
    from mmaemu.backends import _cpu_fp8

    return _cpu_fp8.available()


def main() -> int:
    if platform.machine() not in ("x86_64", "AMD64"):
        print(f"not an x86-64 machine ({platform.machine()}): nothing to check")
        return 0
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_DUMP_ASSEMBLY="1", NUMBA_CACHE_DIR=cache)
        proc = subprocess.run([sys.executable, "-c", _RUN], env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(proc.stderr[-2000:])
        return 1
    found = count(proc.stdout, avx512=_has_avx512())
    for name, n in found.items():
        print(f"{name:34s} {n:4d} {'ok' if n else 'NOT VECTORISED'}")
    return 0 if all(found.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
