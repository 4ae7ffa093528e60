"""Command line: ``python -m mmaemu <command>``.

Commands:

- ``demo``: the quickstart GEMM under the hopper and ada profiles, on the CPU;
- ``explain M N K``: the plan of a ``torch._scaled_mm`` call (validation, split-K decision, the backend
  ``backend="auto"`` would run for CPU tensors), without computing it;
- ``bench``: the backends' speed against torch's native matmul, after checking their bits;
- ``info``: versions, device, which profiles this machine is, backend status;
- ``selftest``: the triton backend's kernels checked on a device;
- ``record --out DIR``: record this GPU as a reference platform (:mod:`mmaemu.recording._record`);
- ``replay DIR``: replay a recording through the emulator and report (:mod:`mmaemu.recording._replay`).

Every option is checked while the command line is parsed: a bad value is a usage error (exit status 2,
the reason on stderr) before anything is read, computed or written.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
import time
from collections.abc import Sequence

import torch

from . import _cli_options as options
from ._accumulation import plan_accumulation
from .backends import CONCRETE, Backend, resolve_backend, supports
from ._call import decide_split, scaled_mm
from .formats import FORMAT_NAMES, Fp8Format, OutFormat, dtype_from_name
from ._shape_only import shape_only_operands
from ._plan import explain
from .platforms._profiles import get_profile
from .platforms._splitk import Problem
from ._split import AUTO, SplitFamily
from ._version import __version__

__all__ = ["main"]


def _quickstart_operands() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The seeds' quickstart GEMM: M, N, K = 64, 5760, 1920, E4M3, torch.manual_seed(0)."""
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
        decision = decide_split(profile, problem, AUTO)
        plan = plan_accumulation(k, fast=True, split=decision.split)
        chains = sum(len(p) for p in plan.parts)
        print(f"\nprofile {name!r}: {profile.gpu}, cuBLASLt {profile.cublaslt}, via {profile.caller.value}")
        print(
            f"  preset {profile.preset.name!r}: blocks of {profile.preset.block_size} products, "
            f"{profile.preset.frac_bits} fraction bits ({profile.preset.maturity.value})"
        )
        print(f"  split-K: S={decision.parts} scheme={decision.scheme.value!r} source={decision.source.value!r}: "
              f"{decision.note}")
        backend = resolve_backend(Backend.AUTO, x.device).value
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
    if resolve_backend(Backend.AUTO, x.device) is Backend.CPU:
        print("(the first call of a process also loads, or the first time compiles, the cpu backend's kernels)")
    return 0


def _explain(args: argparse.Namespace) -> int:
    """Plan the call a CPU call of this shape would make, from its shape alone: the operands are never
    allocated (:func:`mmaemu._shape_only.shape_only_operands`), so any shape this machine could hold is
    planned, the backend included."""
    mat1, mat2 = shape_only_operands(args.M, args.N, args.K, *args.fmt)
    scale = torch.ones((), dtype=torch.float32, device="cpu")  # the operands are CPU tensors, whatever the default device
    plan = explain(mat1, mat2, scale, scale, out_dtype=dtype_from_name(args.out), use_fast_accum=args.fast,
                   profile=args.profile, splitk=args.splitk, backend="auto")
    print(plan)
    return 0 if plan.ok else 1


#: The width ``info`` wraps its lines to (continuations indented).
_INFO_WIDTH = 100


def _say(text: str) -> None:
    """One item of ``info``: wrapped to :data:`_INFO_WIDTH` columns, continuation lines indented."""
    indent = " " * (len(text) - len(text.lstrip()) + 4)
    print(textwrap.fill(text, width=_INFO_WIDTH, subsequent_indent=indent, break_long_words=False,
                        break_on_hyphens=False))


def _info(args: argparse.Namespace) -> int:
    import platform

    import numpy

    from .platforms import _cublaslt as cublaslt
    from .platforms._profiles import profiles

    _say(f"mmaemu {__version__}; torch {torch.__version__}; numpy {numpy.__version__}; Python {platform.python_version()}")
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        _say(f"device: {props.name}, sm_{props.major}{props.minor}, {props.multi_processor_count} SMs")
    else:
        _say(f"device: CPU only ({platform.machine()}, {torch.get_num_threads()} threads); no CUDA device")
    usable, reason = cublaslt.available()
    _say(f"cuBLASLt: {cublaslt.cublaslt_version() or 'not found'} ({'usable' if usable else reason})")
    _say("profiles (reference platform; whether this machine is it, for live split-K queries):")
    for p in profiles():
        here = p.table_id is not None and cublaslt.reference_platform_matches(p.gpu, p.sm_count, p.cublaslt)
        _say(f"  {p.name:28s} {p.maturity.value:12s} {p.gpu}, cuBLASLt {p.cublaslt}, {p.caller.value}: "
              f"{'this machine' if here else 'not this machine'}")
    from .presets import ZOO, Architecture, presets

    _say("presets (instruction models; the operands' dtype selects the format):")
    for fp8 in presets().values():
        _say(f"  {fp8.name:14s} {'FP8 E4M3, E5M2':16s} B = {fp8.block_size:2d}, F = {fp8.frac_bits:2d}, "
              f"{fp8.maturity.value}: {fp8.source}")
    for arch in Architecture:
        rows = [(fmt, q) for (a, fmt), q in ZOO.items() if a is arch]
        formats = ", ".join(f"{fmt.short_name} (B = {q.block_size}, F = {q.frac_bits})" for fmt, q in rows)
        _say(f"  {arch.value:14s} {formats}; validated on the recorded zoo vectors (dot); accumulate experimental")
    _say("  input formats: float8_e4m3fn, float8_e5m2 (any pair); float16 (fp16), bfloat16 (bf16), float32 holding "
          "tf32 values (tf32), two of one kind")
    _say("backends (from the capability table, mmaemu.backends._capabilities):")
    devices = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
    auto = {d: resolve_backend(Backend.AUTO, torch.device(d)) for d in devices}
    for backend in CONCRETE:
        for d in devices:
            support = supports(backend, None, (), d)
            chosen = "; backend='auto' takes it" if auto[d] is backend else ""
            _say(f"  {backend.value:10s} {d:5s} {'available' if support else 'unavailable'}: {support.reason}{chosen}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from . import _bench as bench

    profile = args.profile
    shapes = args.shape or [(64, 5760, 1920)]
    return bench.main_bench(shapes, repeat=args.repeat, configs=args.configs, first_call=args.first_call,
                            json_path=args.json, profile=profile, zoo=args.zoo, native=not args.no_native,
                            block_kernel=args.block_scaled)


def _selftest(args: argparse.Namespace) -> int:
    """Run the Triton backend's self-test on a device; 0 only if every kernel passed."""
    from .backends._triton.backend import interpreting
    from .backends._triton._selftest import selftest

    if args.device is None and not torch.cuda.is_available() and not interpreting():
        return _selftest_without_gpu()
    if args.device is not None:
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


def _selftest_without_gpu() -> int:
    """No CUDA device: say so, and check the backend CPU tensors use instead (0 when it agrees)."""
    from ._accumulation import plan_accumulation
    from .backends import accumulators, _cpu as cpu, _reference as reference
    from .backends._triton._selftest import CASES, KERNEL_PRESETS, adversarial_codes

    print(f"mmaemu {__version__} self-test: no CUDA GPU here, so no GPU kernel self-test applies (the triton "
          "backend's kernels run on CUDA devices; 'python -m mmaemu selftest' on a GPU machine tests them).")
    usable, reason = cpu.available()
    if not usable:
        print(f"CPU tensors use the reference backend (exact torch; the cpu backend cannot load: {reason}).")
        return 0
    print(f"Instead, the cpu backend ({reason}), which CPU tensors use, against the reference backend on the "
          f"self-test's {len(CASES)} problems per preset:")
    failed = 0
    for preset in KERNEL_PRESETS:
        bad = []
        for case in CASES:
            a = adversarial_codes(case.m, case.k, case.fmt_a, case.seed)
            b = adversarial_codes(case.n, case.k, case.fmt_b, case.seed + 1000)
            plan = plan_accumulation(case.k, fast=case.fast, split=case.split)
            want, got = reference.accumulate(a, b, preset, plan), accumulators(Backend.CPU, a, b, preset, plan)
            if not torch.equal(want.view(torch.int32), got.view(torch.int32)):
                bad.append(case.name)
        failed += len(bad)
        print(f"  cpu[{preset.name}] {'passed' if not bad else 'FAILED on ' + '; '.join(bad)}")
    print("the cpu backend agrees bit for bit" if not failed else "the cpu backend FAILED: report it")
    return 0 if not failed else 1


def _record(args: argparse.Namespace) -> int:
    """Record this machine's GPU into a recording directory (exit 2 without a usable GPU)."""
    from .recording._record import main_record

    return main_record(args.out, args.budget_minutes, args.grid, args.torch_workspace)


def _replay(args: argparse.Namespace) -> int:
    """Replay a recording through the emulator; 0 only if everything it claims matches."""
    from .recording._replay import main_replay

    return main_replay(args.dir, args.backend, args.preset, args.split_family)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m mmaemu`` (every option's value is checked by its ``type``)."""
    parser = argparse.ArgumentParser(prog="python -m mmaemu", description="Bit-exact FP8 tensor-core GEMMs.")
    parser.add_argument("--version", action="version", version=f"mmaemu {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the quickstart GEMM under the hopper and ada profiles, on the CPU")
    demo.set_defaults(run=_demo)
    ex = sub.add_parser(
        "explain", help="the plan of a torch._scaled_mm call of shape M x K @ K x N, without computing it",
        epilog="Exit status: 0 when the call would run, 1 when it would raise (the plan says what and why: for an "
               "undecided split-K, what each source found and what to do), 2 for a usage error.",
    )
    ex.add_argument("M", type=options.dim)
    ex.add_argument("N", type=options.dim)
    ex.add_argument("K", type=options.dim)
    ex.add_argument("--out", default="bf16", choices=sorted(FORMAT_NAMES), help="output dtype (default bf16)")
    ex.add_argument("--fast", action="store_true", help="use_fast_accum=True")
    ex.add_argument("--profile", default=None, type=options.profile,
                    help="reference platform (default: MMAEMU_PROFILE or hopper)")
    ex.add_argument("--fmt", default=(torch.float8_e4m3fn, torch.float8_e4m3fn), type=options.fmt_pair,
                    help="formats of mat1,mat2 (default e4m3,e4m3)")
    ex.add_argument("--splitk", default="auto", type=options.splitk, help="auto (default), 1, or S,scheme (e.g. 4,pairwise)")
    ex.set_defaults(run=_explain, check=options.check_explain_shape, usage_error=ex.error)
    bench = sub.add_parser("bench", help="time the backends against torch's native matmul, after checking bits")
    bench.add_argument("--shape", action="append", type=options.shape, help="MxNxK, as explain takes M N K (repeatable; default 64x5760x1920)")
    bench.add_argument("--profile", default="hopper", type=options.profile,
                       help="the reference platform of the base configuration (default hopper)")
    bench.add_argument("--repeat", type=options.positive_int, default=5, help="runs per median (default 5)")
    bench.add_argument("--configs", action="store_true",
                       help="also time ada slow E5M2 x E4M3 and a split call (S = 4), as ratios to the first")
    bench.add_argument("--zoo", action="store_true",
                       help="also time accumulate for fp16, bf16 and tf32 on every zoo preset, over E4M3's time, at the last --shape")
    bench.add_argument("--first-call", action="store_true",
                       help="also measure the first call's latency in a fresh process (compiling, and cached)")
    bench.add_argument("--no-native", action="store_true",
                       help="do not time torch's native CPU _scaled_mm (seconds per call on some CPUs); the fp32 matmul "
                            "comparator is always timed")
    bench.add_argument("--block-scaled", nargs="?", const="deepgemm-sm90", default=None, type=options.block_kernel,
                       metavar="KERNEL", help="also time block_scaled_mm as KERNEL (default deepgemm-sm90) against "
                                              "scaled_mm on the same shape")
    bench.add_argument("--json", default=None, type=options.output_file, help="write the figures to this file")
    bench.set_defaults(run=_bench)
    info = sub.add_parser("info", help="versions, device, matching profiles and backend status")
    info.set_defaults(run=_info)
    st = sub.add_parser("selftest", help="self-test the triton backend's kernels on a device (exit 0 if all pass)")
    st.add_argument("--device", default=None, type=options.device,
                    help="device (default: cuda if available; cpu under TRITON_INTERPRET=1)")
    st.set_defaults(run=_selftest)
    rec = sub.add_parser("record", help="record this GPU as a reference platform (heuristics, probes, live calls)")
    rec.add_argument("--out", required=True, type=options.new_dir, help="the recording directory (new or empty)")
    rec.add_argument("--budget-minutes", type=options.minutes, default=30.0, help="wall-clock budget (default 30)")
    rec.add_argument("--grid", default="quick", choices=["quick", "full"], help="shape grid (default quick)")
    rec.add_argument("--torch-workspace", type=options.workspace, default=None,
                     help="the cuBLASLt workspace torch passes, in bytes: 0, 1048576, 4194304 or 33554432 "
                          "(default CUBLASLT_WORKSPACE_SIZE or 1 MiB)")
    rec.set_defaults(run=_record)
    rep = sub.add_parser("replay", help="replay a recording through the emulator and report (exit 0 if all matches)")
    rep.add_argument("dir", type=options.existing_dir, help="the recording directory")
    rep.add_argument("--backend", default="auto", type=options.backend,
                     help="emulator backend for the live calls: auto (default), reference, cpu or triton")
    rep.add_argument("--preset", default=None, type=options.preset, help="use this preset instead of the probes' verdict")
    rep.add_argument("--split-family", default=None, choices=[f.value for f in SplitFamily],
                     help="use this split family instead of the probes' verdict")
    rep.set_defaults(run=_replay)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m mmaemu``: the command's exit status (2 for a usage error, 130 if interrupted,
    141 when the output's reader went away, as for ``| head``)."""
    args = build_parser().parse_args(argv)
    refused = args.check(args) if getattr(args, "check", None) else None
    if refused is not None:  # a check of several arguments together, after each was parsed
        args.usage_error(refused)
    try:
        status = int(args.run(args))
        sys.stdout.flush()  # here, so that a closed pipe is handled below, not at exit
        return status
    except KeyboardInterrupt:
        sys.stderr.write(f"mmaemu {args.command}: interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, as a command killed by SIGPIPE would.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # stdout without a descriptor (captured in tests)
            pass
        return 141


if __name__ == "__main__":
    sys.exit(main())
