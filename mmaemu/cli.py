"""Command line: ``python -m mmaemu <command>``.

Commands:

- ``demo``: the quickstart GEMM under the hopper and ada profiles, on the CPU;
- ``explain M N K``: the plan of a ``torch._scaled_mm`` call (validation, split-K decision, the backend
  ``backend="auto"`` would run for CPU tensors), without computing it;
- ``bench``: the backends' speed against torch's native matmul, after checking their bits;
- ``info``: versions, device, which profiles this machine is, backend status;
- ``selftest``: the triton backend's kernels checked on a device;
- ``record --out DIR``: record this GPU as a reference platform (:mod:`mmaemu.recording.record`);
- ``replay DIR``: replay a recording through the emulator and report (:mod:`mmaemu.recording.replay`).

Every option is checked while the command line is parsed: a bad value is a usage error (exit status 2,
the reason on stderr) before anything is read, computed or written.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from .accumulation import plan_accumulation
from .backends import CONCRETE, Backend, parse_backend, resolve_backend, supports
from .call import decide_split, scaled_mm
from .formats import FORMAT_NAMES, Fp8Format, OutFormat, dtype_from_name
from .plan import explain
from .platforms.profiles import get_profile
from .platforms.splitk import Problem
from .split import AUTO, splitk_from_text
from .version import __version__

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
    """Plan the call with CPU operands, as a real call on this machine would get them.

    ``torch.empty`` reserves the operands without touching their pages, so a large shape costs no memory;
    only a shape this machine cannot even reserve is planned with meta tensors (the output says so, and
    that the backend shown is not what a CPU call would use).
    """
    dtype_a, dtype_b = args.fmt
    device = torch.device("cpu")
    try:
        mat1 = torch.empty((args.M, args.K), dtype=dtype_a, device=device)
        mat2 = torch.empty((args.N, args.K), dtype=dtype_b, device=device).t()
    except (RuntimeError, MemoryError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        device = torch.device("meta")  # shapes and strides only
        mat1 = torch.empty((args.M, args.K), dtype=dtype_a, device=device)
        mat2 = torch.empty((args.N, args.K), dtype=dtype_b, device=device).t()
        print(f"note: the operands of this shape cannot be allocated on this machine's CPU ({reason}); "
              "planned with meta tensors, so the backend shown is not the one a CPU call would use")
    scale = torch.ones((), dtype=torch.float32, device=device)
    plan = explain(mat1, mat2, scale, scale, out_dtype=dtype_from_name(args.out), use_fast_accum=args.fast,
                   profile=args.profile, splitk=args.splitk, backend="auto")
    print(plan)
    return 0 if plan.ok else 1


def _info(args: argparse.Namespace) -> int:
    import platform

    import numpy

    from .platforms import cublaslt
    from .platforms.profiles import profiles

    print(f"mmaemu {__version__}; torch {torch.__version__}; numpy {numpy.__version__}; Python {platform.python_version()}")
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        print(f"device: {props.name}, sm_{props.major}{props.minor}, {props.multi_processor_count} SMs")
    else:
        print(f"device: CPU only ({platform.machine()}, {torch.get_num_threads()} threads); no CUDA device")
    usable, reason = cublaslt.available()
    print(f"cuBLASLt: {cublaslt.cublaslt_version() or 'not found'} ({'usable' if usable else reason})")
    print("profiles (reference platform; whether this machine is it, for live split-K queries):")
    for p in profiles():
        here = p.table_id is not None and cublaslt.reference_platform_matches(p.gpu, p.sm_count, p.cublaslt)
        print(f"  {p.name:28s} {p.maturity.value:12s} {p.gpu}, cuBLASLt {p.cublaslt}, {p.caller.value}: "
              f"{'this machine' if here else 'not this machine'}")
    from .presets import ZOO, Architecture, presets

    print("presets (instruction models; the operands' dtype selects the format):")
    for fp8 in presets().values():
        print(f"  {fp8.name:14s} {'FP8 E4M3, E5M2':16s} B = {fp8.block_size:2d}, F = {fp8.frac_bits:2d}, "
              f"{fp8.maturity.value}: {fp8.source}")
    for arch in Architecture:
        rows = [(fmt, q) for (a, fmt), q in ZOO.items() if a is arch]
        formats = ", ".join(f"{fmt.short_name} (B = {q.block_size}, F = {q.frac_bits})" for fmt, q in rows)
        print(f"  {arch.value:14s} {formats}; validated on the recorded zoo vectors (dot); accumulate experimental")
    print("  input formats: float8_e4m3fn, float8_e5m2 (any pair); float16 (fp16), bfloat16 (bf16), float32 holding "
          "tf32 values (tf32), two of one kind")
    print("backends (from the capability table, mmaemu.backends.capabilities):")
    devices = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
    auto = {d: resolve_backend(Backend.AUTO, torch.device(d)) for d in devices}
    for backend in CONCRETE:
        for d in devices:
            support = supports(backend, None, (), d)
            chosen = "; backend='auto' takes it" if auto[d] is backend else ""
            print(f"  {backend.value:10s} {d:5s} {'available' if support else 'unavailable'}: {support.reason}{chosen}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from . import bench

    profile = args.profile
    shapes = args.shape or [(64, 1920, 5760)]
    return bench.main_bench(shapes, repeat=args.repeat, configs=args.configs, first_call=args.first_call,
                            json_path=args.json, profile=profile, zoo=args.zoo, native=not args.no_native)


def _selftest(args: argparse.Namespace) -> int:
    """Run the Triton backend's self-test on a device; 0 only if every kernel passed."""
    from .backends.triton.backend import interpreting
    from .backends.triton._selftest import selftest

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
    from .accumulation import plan_accumulation
    from .backends import accumulators, cpu, reference
    from .backends.triton._selftest import CASES, KERNEL_PRESETS, adversarial_codes

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
    from .recording.record import main_record

    return main_record(args.out, args.budget_minutes, args.grid, args.torch_workspace)


def _replay(args: argparse.Namespace) -> int:
    """Replay a recording through the emulator; 0 only if everything it claims matches."""
    from .recording.replay import main_replay

    return main_replay(args.dir, args.backend, args.preset, args.split_family)


# --------------------------------------------------------------------------------------------------
# Option types: each raises argparse.ArgumentTypeError, which argparse turns into a usage error (exit 2)
# --------------------------------------------------------------------------------------------------


def _int(text: str, what: str, minimum: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer ({what})") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{text!r}: {what} must be at least {minimum}")
    return value


#: The largest GEMM dimension the command line takes: cuBLAS's 32-bit dimensions (torch's operands of
#: such shapes could not be described to it, and their element counts would overflow int64 together).
MAX_DIM = (1 << 31) - 1


def _dim(text: str) -> int:
    """A GEMM dimension: an integer in [0, 2**31 - 1] (an empty call is a valid call)."""
    value = _int(text, "a dimension", 0)
    if value > MAX_DIM:
        raise argparse.ArgumentTypeError(f"{text!r}: a dimension must be at most {MAX_DIM:,} (2**31 - 1)")
    return value


def _positive_int(text: str) -> int:
    """An integer >= 1."""
    return _int(text, "a count", 1)


def _shape(text: str) -> tuple[int, int, int]:
    """``MxNxK`` (the order of ``explain M N K``), each a positive integer; returned as (M, K, N)."""
    parts = text.lower().split("x")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape MxNxK (e.g. 64x5760x1920)")
    m, n, k = (_int(p, "M, N and K of a shape MxNxK", 1) for p in parts)
    return m, k, n


def _fmt_pair(text: str) -> tuple[torch.dtype, torch.dtype]:
    """``A,B``: the formats of mat1 and mat2 (:func:`mmaemu.formats.dtype_from_name`)."""
    parts = text.split(",")
    if len(parts) != 2:
        accepted = ", ".join(sorted(FORMAT_NAMES))
        raise argparse.ArgumentTypeError(f"{text!r} is not two formats A,B (e.g. e4m3,e5m2); formats: {accepted}")
    try:
        return dtype_from_name(parts[0]), dtype_from_name(parts[1])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _splitk(text: str) -> object:
    """``auto``, ``1`` or ``S,scheme`` (:func:`mmaemu.split.splitk_from_text`)."""
    try:
        return splitk_from_text(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _profile(text: str) -> str:
    """A registered profile's name."""
    try:
        get_profile(text, warn=False)
    except (KeyError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc.args[0]) if exc.args else str(exc)) from None
    return text


def _preset(text: str) -> str:
    """A modelled preset's name."""
    from .errors import MmaemuError
    from .presets import get_preset

    try:
        get_preset(text, warn=False)
    except (KeyError, ValueError, TypeError, MmaemuError) as exc:
        raise argparse.ArgumentTypeError(str(exc.args[0]) if exc.args else str(exc)) from None
    return text


def _backend(text: str) -> str:
    """A backend name (whether it can run here is checked by the command)."""
    try:
        return parse_backend(text).value
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _device(text: str) -> str:
    """A torch device string."""
    try:
        torch.device(text)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a torch device ({str(exc).splitlines()[0]})") from None
    return text


def _minutes(text: str) -> float:
    """A positive, finite number of minutes."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of minutes") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the budget must be a positive, finite number of minutes")
    return value


def _workspace(text: str) -> int:
    """One of the workspaces a recording queries, in bytes."""
    from .platforms.table import WS_BYTES

    value = _int(text, "a workspace in bytes", 0)
    if value not in WS_BYTES:
        raise argparse.ArgumentTypeError(f"{text!r}: the workspace must be one of {WS_BYTES} bytes (0, 1, 4 or 32 MiB)")
    return value


def _path_type(check: Callable[[str, Path], None]) -> Callable[[str], str]:
    """An argparse type from a check of a path argument: an OSError while checking becomes the argument's error."""

    @functools.wraps(check)
    def parse(text: str) -> str:
        try:
            check(text, Path(text))
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc.strerror or exc}") from None
        return text

    return parse


@_path_type
def _new_dir(text: str, path: Path) -> None:
    """A directory to create, or an empty one."""
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise argparse.ArgumentTypeError(f"{text!r} exists and is not a directory; pass a new directory")
        if any(path.iterdir()):
            raise argparse.ArgumentTypeError(f"{text!r} is not empty: a recording needs a new or empty directory")
    else:
        parent = path.absolute().parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            raise argparse.ArgumentTypeError(f"{text!r}: {str(parent)!r} is not a directory")


@_path_type
def _existing_dir(text: str, path: Path) -> None:
    """An existing directory (an empty string is refused, not read as the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path names no recording (pass the recording's directory)")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text!r} does not exist")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a directory (a recording is a directory)")


@_path_type
def _output_file(text: str, path: Path) -> None:
    """A file to write: its directory must exist and it must not be a directory."""
    if not text or path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file to write")
    if not path.absolute().parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: the directory {str(path.absolute().parent)!r} does not exist")


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
    ex.add_argument("M", type=_dim)
    ex.add_argument("N", type=_dim)
    ex.add_argument("K", type=_dim)
    ex.add_argument("--out", default="bf16", choices=sorted(FORMAT_NAMES), help="output dtype (default bf16)")
    ex.add_argument("--fast", action="store_true", help="use_fast_accum=True")
    ex.add_argument("--profile", default=None, type=_profile,
                    help="reference platform (default: MMAEMU_PROFILE or hopper)")
    ex.add_argument("--fmt", default=(torch.float8_e4m3fn, torch.float8_e4m3fn), type=_fmt_pair,
                    help="formats of mat1,mat2 (default e4m3,e4m3)")
    ex.add_argument("--splitk", default="auto", type=_splitk, help="auto (default), 1, or S,scheme (e.g. 4,pairwise)")
    ex.set_defaults(run=_explain)
    bench = sub.add_parser("bench", help="time the backends against torch's native matmul, after checking bits")
    bench.add_argument("--shape", action="append", type=_shape, help="MxNxK, as explain takes M N K (repeatable; default 64x5760x1920)")
    bench.add_argument("--profile", default="hopper", type=_profile,
                       help="the reference platform of the base configuration (default hopper)")
    bench.add_argument("--repeat", type=_positive_int, default=5, help="runs per median (default 5)")
    bench.add_argument("--configs", action="store_true",
                       help="also time ada slow E5M2 x E4M3 and a split call (S = 4), as ratios to the first")
    bench.add_argument("--zoo", action="store_true",
                       help="also time accumulate for fp16, bf16 and tf32 on every zoo preset, over E4M3's time, at the last --shape")
    bench.add_argument("--first-call", action="store_true",
                       help="also measure the first call's latency in a fresh process (compiling, and cached)")
    bench.add_argument("--no-native", action="store_true",
                       help="do not time torch's native CPU _scaled_mm (seconds per call on some CPUs); the fp32 matmul "
                            "comparator is always timed")
    bench.add_argument("--json", default=None, type=_output_file, help="write the figures to this file")
    bench.set_defaults(run=_bench)
    info = sub.add_parser("info", help="versions, device, matching profiles and backend status")
    info.set_defaults(run=_info)
    st = sub.add_parser("selftest", help="self-test the triton backend's kernels on a device (exit 0 if all pass)")
    st.add_argument("--device", default=None, type=_device,
                    help="device (default: cuda if available; cpu under TRITON_INTERPRET=1)")
    st.set_defaults(run=_selftest)
    rec = sub.add_parser("record", help="record this GPU as a reference platform (heuristics, probes, live calls)")
    rec.add_argument("--out", required=True, type=_new_dir, help="the recording directory (new or empty)")
    rec.add_argument("--budget-minutes", type=_minutes, default=30.0, help="wall-clock budget (default 30)")
    rec.add_argument("--grid", default="quick", choices=["quick", "full"], help="shape grid (default quick)")
    rec.add_argument("--torch-workspace", type=_workspace, default=None,
                     help="the cuBLASLt workspace torch passes, in bytes: 0, 1048576, 4194304 or 33554432 "
                          "(default CUBLASLT_WORKSPACE_SIZE or 1 MiB)")
    rec.set_defaults(run=_record)
    rep = sub.add_parser("replay", help="replay a recording through the emulator and report (exit 0 if all matches)")
    rep.add_argument("dir", type=_existing_dir, help="the recording directory")
    rep.add_argument("--backend", default="auto", type=_backend,
                     help="emulator backend for the live calls: auto (default), reference, cpu or triton")
    rep.add_argument("--preset", default=None, type=_preset, help="use this preset instead of the probes' verdict")
    rep.add_argument("--split-family", default=None, choices=["contiguous", "round-robin"],
                     help="use this split family instead of the probes' verdict")
    rep.set_defaults(run=_replay)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m mmaemu``: the command's exit status (2 for a usage error, 130 if interrupted,
    141 when the output's reader went away, as for ``| head``)."""
    args = build_parser().parse_args(argv)
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
