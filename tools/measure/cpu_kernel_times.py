"""CPU time and result digest of each tiled cpu kernel, for comparing two checkouts of mmaemu.

Run it once per checkout, alternating, on one thread (the shared machine's noise is ~10%)::

    NUMBA_NUM_THREADS=1 MMAEMU_CPU_PORTABLE=1 PYTHONPATH=/path/to/checkout python tools/measure/cpu_kernel_times.py

Each line: the kernel's case, the best CPU time of ``--repeat`` calls after one warm-up call, and
the first 12 hex digits of the SHA-1 of the result's bits (equal digests: equal bits). The FP8 case
runs the portable kernel with ``MMAEMU_CPU_PORTABLE=1`` (else the AVX-512 one where the CPU has it);
``bf16-wide`` has values near 2**70, so its rows go to the float64 kernel.
"""

from __future__ import annotations

import argparse
import hashlib
import time
import warnings
from collections.abc import Callable

import torch

import mmaemu


def best_cpu_time(fn: Callable[[], object], repeat: int) -> float:
    """The smallest CPU time of ``repeat`` calls of ``fn`` after one warm-up call, in seconds."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def cases(m: int, k: int, n: int) -> dict[str, tuple[torch.Tensor, torch.Tensor, str | None]]:
    """(a, b, preset) of each case: FP8, fp16 and bf16 at two presets each, and the float64 kernel."""
    torch.manual_seed(0)
    out: dict[str, tuple[torch.Tensor, torch.Tensor, str | None]] = {
        "e4m3": (torch.randn(m, k).to(torch.float8_e4m3fn), torch.randn(n, k).to(torch.float8_e4m3fn), None)}
    for dtype, presets in ((torch.bfloat16, ("hopper", "ampere")), (torch.float16, ("hopper", "volta"))):
        a, b = torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype)
        for preset in presets:
            out[f"{str(dtype).removeprefix('torch.')}-{preset}"] = (a, b, preset)
    out["bf16-wide"] = ((torch.randn(m, k) * 2.0**70).to(torch.bfloat16), torch.randn(n, k).to(torch.bfloat16), "hopper")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="256x2048x1024", help="M x K x N")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    m, k, n = (int(x) for x in args.shape.split("x"))
    warnings.simplefilter("ignore", mmaemu.errors.ExperimentalPresetWarning)
    for name, (a, b, preset) in cases(m, k, n).items():
        def call(a: torch.Tensor = a, b: torch.Tensor = b, preset: str | None = preset) -> torch.Tensor:
            return mmaemu.accumulate(a, b, use_fast_accum=True, splitk=1, backend="cpu", preset=preset)
        seconds = best_cpu_time(call, args.repeat)
        digest = hashlib.sha1(call().view(torch.int32).numpy().tobytes()).hexdigest()[:12]
        print(f"{name:16s} {seconds * 1e3:8.1f} ms  {digest}")


if __name__ == "__main__":
    main()
