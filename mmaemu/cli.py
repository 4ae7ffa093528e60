"""Command line: ``python -m mmaemu demo``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import torch

from . import __version__
from .accumulation import plan_accumulation
from .backends import resolve_backend
from .call import decide_split, explain, scaled_mm
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
        print(f"\nprofile {name!r}: {profile.gpu}, cuBLASLt {profile.cublaslt}, via {profile.caller.value}")
        print(
            f"  preset {profile.preset.name!r}: blocks of {profile.preset.block_size} products, "
            f"{profile.preset.frac_bits} fraction bits ({profile.preset.maturity.value})"
        )
        print(f"  split-K: S={decision.S} scheme={decision.scheme!r} source={decision.source!r}: {decision.note}")
        backend = resolve_backend("auto", x.device).value
        print(f"  plan: {chains} chain(s) of {-(-k // profile.preset.block_size)} blocks per output; backend {backend!r}")
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
    print("(the first call of a process also loads, or the first time compiles, the cpu backend's kernels)")
    return 0


_DTYPES = {
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "f16": torch.float16,
    "float16": torch.float16, "fp32": torch.float32, "f32": torch.float32, "float32": torch.float32,
    "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2,
}


def _explain(args: argparse.Namespace) -> int:
    fmt_a, fmt_b = (part.strip() for part in args.fmt.split(","))
    dtype_a, dtype_b = _DTYPES[fmt_a], _DTYPES[fmt_b]
    meta = torch.device("meta")  # shapes and strides only: nothing is allocated
    mat1 = torch.empty((args.M, args.K), dtype=dtype_a, device=meta)
    mat2 = torch.empty((args.N, args.K), dtype=dtype_b, device=meta).t()
    scale = torch.empty((), dtype=torch.float32, device=meta)
    splitk: object = "auto" if args.splitk == "auto" else _parse_splitk(args.splitk)
    plan = explain(mat1, mat2, scale, scale, out_dtype=_DTYPES[args.out], use_fast_accum=args.fast,
                   profile=args.profile, splitk=splitk)  # type: ignore[arg-type]
    print(plan)
    return 0 if plan.ok else 1


def _info(args: argparse.Namespace) -> int:
    import platform as host

    import numpy

    from . import cublaslt
    from .platform import profiles

    print(f"mmaemu {__version__}; torch {torch.__version__}; numpy {numpy.__version__}; Python {host.python_version()}")
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        print(f"device: {props.name}, sm_{props.major}{props.minor}, {props.multi_processor_count} SMs")
    else:
        print(f"device: CPU only ({host.machine()}, {torch.get_num_threads()} threads); no CUDA device")
    usable, reason = cublaslt.available()
    print(f"cuBLASLt: {cublaslt.cublaslt_version() or 'not found'} ({'usable' if usable else reason})")
    print("profiles (reference platform; whether this machine is it, for live split-K queries):")
    for p in profiles():
        here = p.table_id is not None and cublaslt.reference_platform_matches(p.gpu, p.sm_count, p.cublaslt)
        print(f"  {p.name:28s} {p.maturity.value:12s} {p.gpu}, cuBLASLt {p.cublaslt}, {p.caller.value}: "
              f"{'this machine' if here else 'not this machine'}")
    print("backends:")
    from .backends import cpu

    print("  reference  available: exact torch model, runs on any device (CPU and CUDA)")
    usable_cpu, why = cpu.available()
    print(f"  cpu        {'available' if usable_cpu else 'unavailable'}: {why}; "
          f"{'chosen by' if usable_cpu else 'not chosen by'} backend='auto' for CPU tensors")
    from .backends import triton_backend

    usable_triton, why_triton = triton_backend.available()
    print(f"  triton     {'available' if usable_triton else 'unavailable'}: {why_triton}; chosen by "
          "backend='auto' for CUDA tensors once 'python -m mmaemu selftest' passes on the device")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from . import bench

    shapes = [tuple(int(v) for v in shape.lower().split("x")) for shape in (args.shape or ["64x1920x5760"])]
    bench.run(shapes, repeat=args.repeat, configs=args.configs, first_call=args.first_call,  # type: ignore[arg-type]
              json_path=args.json, profile=args.preset)
    return 0


def _selftest(args: argparse.Namespace) -> int:
    """Run the Triton backend's self-test on a device; 0 only if every kernel passed."""
    from .backends.triton_backend import interpreting
    from .backends.triton_selftest import selftest

    if args.device:
        device = args.device
    elif torch.cuda.is_available():
        device = "cuda"
    else:
        device = "cpu" if interpreting() else "cuda"
    report = selftest(device)
    print(f"mmaemu {__version__} self-test of the triton backend on {report.device}:")
    for result in report.kernels:
        print(f"  {result.kernel:28s} {'passed' if result.passed else 'FAILED'}: {result.reason}")
    print("all kernels passed" if report.passed else "self-test FAILED: backend='auto' will not use triton here")
    return 0 if report.passed else 1


def _record(args: argparse.Namespace) -> int:
    """Record this machine's GPU into a recording directory (exit 2 without a usable GPU)."""
    from .record import main_record

    return main_record(args.out, args.budget_minutes, args.grid, args.torch_workspace)


def _replay(args: argparse.Namespace) -> int:
    """Replay a recording through the emulator; 0 only if everything it claims matches."""
    from .replay import main_replay

    return main_replay(args.dir, args.backend, args.preset, args.split_family)


def _parse_splitk(text: str) -> object:
    if text.isdigit():
        return int(text)
    parts, scheme = text.split(",")
    return (int(parts), scheme.strip())


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m mmaemu``."""
    parser = argparse.ArgumentParser(prog="python -m mmaemu", description="Bit-exact FP8 tensor-core GEMMs.")
    parser.add_argument("--version", action="version", version=f"mmaemu {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the quickstart GEMM under the hopper and ada presets, on the CPU")
    demo.set_defaults(run=_demo)
    ex = sub.add_parser("explain", help="the plan of a torch._scaled_mm call of shape M x K @ K x N, without computing it")
    ex.add_argument("M", type=int)
    ex.add_argument("N", type=int)
    ex.add_argument("K", type=int)
    ex.add_argument("--out", default="bf16", choices=sorted(_DTYPES), help="output dtype (default bf16)")
    ex.add_argument("--fast", action="store_true", help="use_fast_accum=True")
    ex.add_argument("--profile", default=None, help="reference platform (default: MMAEMU_PROFILE or hopper)")
    ex.add_argument("--fmt", default="e4m3,e4m3", help="formats of mat1,mat2 (default e4m3,e4m3)")
    ex.add_argument("--splitk", default="auto", help="auto (default), 1, or S,scheme (e.g. 4,pairwise)")
    ex.set_defaults(run=_explain)
    bench = sub.add_parser("bench", help="time the backends against torch's native matmul, after checking bits")
    bench.add_argument("--shape", action="append", help="MxKxN (repeatable; default 64x1920x5760)")
    bench.add_argument("--preset", default="hopper", help="profile/preset (default hopper)")
    bench.add_argument("--repeat", type=int, default=5, help="runs per median (default 5)")
    bench.add_argument("--configs", action="store_true",
                       help="also time ada slow E5M2 x E4M3 and a split call (S = 4), as ratios to the first")
    bench.add_argument("--first-call", action="store_true",
                       help="also measure the first call's latency in a fresh process (compiling, and cached)")
    bench.add_argument("--json", default=None, help="write the figures to this file")
    bench.set_defaults(run=_bench)
    info = sub.add_parser("info", help="versions, device, matching profiles and backend status")
    info.set_defaults(run=_info)
    st = sub.add_parser("selftest", help="self-test the triton backend's kernels on a device (exit 0 if all pass)")
    st.add_argument("--device", default=None,
                    help="device (default: cuda if available; cpu under TRITON_INTERPRET=1)")
    st.set_defaults(run=_selftest)
    rec = sub.add_parser("record", help="record this GPU as a reference platform (heuristics, probes, live calls)")
    rec.add_argument("--out", required=True, help="the recording directory (new or empty)")
    rec.add_argument("--budget-minutes", type=float, default=30.0, help="wall-clock budget (default 30)")
    rec.add_argument("--grid", default="quick", choices=["quick", "full"], help="shape grid (default quick)")
    rec.add_argument("--torch-workspace", type=int, default=None,
                     help="the cuBLASLt workspace torch passes, in bytes (default CUBLASLT_WORKSPACE_SIZE or 1 MiB)")
    rec.set_defaults(run=_record)
    rep = sub.add_parser("replay", help="replay a recording through the emulator and report (exit 0 if all matches)")
    rep.add_argument("dir", help="the recording directory")
    rep.add_argument("--backend", default="auto", help="emulator backend for the live calls (default auto)")
    rep.add_argument("--preset", default=None, help="use this preset instead of the probes' verdict")
    rep.add_argument("--split-family", default=None, choices=["contiguous", "round-robin"],
                     help="use this split family instead of the probes' verdict")
    rep.set_defaults(run=_replay)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
