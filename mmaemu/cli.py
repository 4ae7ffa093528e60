"""Command line: ``python -m mmaemu demo``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import torch

from . import __version__
from .accumulation import plan_accumulation
from .call import decide_split, scaled_mm
from .formats import Fp8Format, OutFormat
from .platform import Problem, get_profile

__all__ = ["main"]


def _quickstart_operands() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The seeds' quickstart GEMM: M, K, N = 64, 1920, 5760, E4M3, torch.manual_seed(0)."""
    torch.manual_seed(0)
    x = (torch.randn(64, 1920) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    w = (torch.randn(5760, 1920) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    return x, w, torch.tensor(1 / 64), torch.tensor(1 / 32)


def _demo(args: argparse.Namespace) -> int:
    x, w, sx, sw = _quickstart_operands()
    m, k = x.shape
    n = w.shape[0]
    print(f"mmaemu {__version__}, torch {torch.__version__}, device cpu, {torch.get_num_threads()} threads")
    print(f"quickstart GEMM: M, N, K = {m}, {n}, {k}; E4M3 x E4M3 -> bf16; use_fast_accum=True")
    outputs = {}
    for name in ("hopper", "ada"):
        profile = get_profile(name)
        problem = Problem(m, n, k, Fp8Format.E4M3, Fp8Format.E4M3, OutFormat.BFLOAT16, True)
        decision = decide_split(profile, problem, "auto")
        plan = plan_accumulation(k, fast=True, split=decision.split)
        chains = sum(len(p) for p in plan.parts)
        print(f"\nprofile {name!r}: {profile.gpu}, cuBLASLt {profile.cublaslt}, {profile.caller} {profile.torch_version}")
        print(
            f"  preset {profile.preset.name!r}: blocks of {profile.preset.block_size} products, "
            f"{profile.preset.frac_bits} fraction bits ({profile.preset.maturity.value})"
        )
        print(f"  split-K: S={decision.S} scheme={decision.scheme!r} source={decision.source!r}: {decision.note}")
        print(f"  plan: {chains} chain(s) of {-(-k // profile.preset.block_size)} blocks per output; backend 'reference'")
        start = time.perf_counter()
        outputs[name] = scaled_mm(x, w.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True, profile=name)
        print(f"  computed in {time.perf_counter() - start:.2f} s")
    h, a = outputs["hopper"].view(torch.int16), outputs["ada"].view(torch.int16)
    differ = int((h != a).sum())
    ieee = (x.double() @ w.double().t() * (1 / 64) * (1 / 32)).float().to(torch.bfloat16).view(torch.int16)
    print(f"\nbf16 outputs that differ between hopper and ada: {differ} of {h.numel()} ({differ / h.numel():.1%})")
    print(f"bf16 outputs of hopper that differ from an IEEE GEMM (exact sum, rounded to fp32, then bf16): "
          f"{int((h != ieee).sum()) / h.numel():.1%}")
    print(f"first outputs, hopper: {outputs['hopper'][0, :4].tolist()}; ada: {outputs['ada'][0, :4].tolist()}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m mmaemu``."""
    parser = argparse.ArgumentParser(prog="python -m mmaemu", description="Bit-exact FP8 tensor-core GEMMs.")
    parser.add_argument("--version", action="version", version=f"mmaemu {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the quickstart GEMM under the hopper and ada presets, on the CPU")
    demo.set_defaults(run=_demo)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
