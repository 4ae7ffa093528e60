"""Device check of the Triton backend on an NVIDIA GPU: versions, self-test, exactness, speed.

Usage::

    python tools/device_check.py [--out DIR] [--budget-s 450] [--dry-run]

On a machine with an NVIDIA GPU (in well under 8 minutes), it

1. prints the GPU, driver, torch, CUDA, Triton and cuBLASLt versions;
2. runs the Triton backend's self-test on the GPU;
3. checks the Triton kernels' fp32 accumulators bit for bit against the reference backend running
   on the same GPU, at several shapes: both presets, all three format pairs, fast and slow
   accumulation, K not a multiple of 128, every split scheme (S = 2..4), N not a multiple of 16,
   N = 1, M = 1, a custom preset, M * K > 2**31, a second GPU when present, and the timed shapes
   (8192^3 on a row slice);
4. times the Triton kernels (CUDA events, after warm-up, median of many runs) and native
   ``torch._scaled_mm`` (E4M3, bf16 output, fast accumulation) at M, N, K = 2048, 5760, 1920 and
   8192, 8192, 8192, in TMAC/s and as a ratio, plus a few tile configurations at the first shape;
5. writes ``device_check.json`` and ``device_check.txt`` under ``--out`` (default ``$OUT``, else
   the current directory).

Steps that would overrun ``--budget-s`` are skipped and reported as skipped. ``--dry-run`` runs
the same code on the CPU under Triton's interpreter (``TRITON_INTERPRET=1``) with tiny shapes and
wall-clock timing: it checks the script, not the GPU. The exit status is 0 when the self-test and
every exactness check passed (timings never fail the check).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]

#: The timed shapes (M, N, K) and the bar of the issue (hopper E4M3 fast, bf16).
TIMED_SHAPES = [(2048, 5760, 1920), (8192, 8192, 8192)]
DRY_TIMED_SHAPES = [(32, 64, 48), (16, 32, 160)]
TARGET_TMACS = 8.0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT") or ".", help="report directory (default $OUT or .)")
    p.add_argument("--budget-s", type=float, default=450.0, help="skip steps that would run past this (s)")
    p.add_argument("--dry-run", action="store_true", help="CPU, Triton interpreter, tiny shapes")
    p.add_argument("--device", default="cuda", help="device (default cuda; cpu with --dry-run)")
    p.add_argument("--max-cases", type=int, default=None, help="run only the first N exactness cases")
    return p.parse_args(argv)


class Budget:
    """Wall-clock budget: ``ok(estimate)`` says whether a step of about that many seconds still fits."""

    def __init__(self, seconds: float) -> None:
        self.start = time.perf_counter()
        self.seconds = seconds

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def ok(self, estimate: float = 0.0) -> bool:
        return self.elapsed() + estimate <= self.seconds


def _nvidia_smi(field: str) -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def versions(device: Any) -> dict[str, Any]:
    """GPU, driver, torch, CUDA, Triton and cuBLASLt versions."""
    import torch

    from mmaemu.platforms import cublaslt
    from mmaemu.version import __version__

    info: dict[str, Any] = {
        "mmaemu": __version__, "python": platform.python_version(), "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda, "device": str(device),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception as exc:  # noqa: BLE001
        info["triton"] = f"not importable: {exc}"
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu"] = props.name
        info["sm"] = f"sm_{props.major}{props.minor}"
        info["sm_count"] = props.multi_processor_count
        info["driver"] = _nvidia_smi("driver_version")
    else:
        info["gpu"] = f"none (CPU {platform.machine()}, Triton interpreter)"
        info["driver"] = None
    try:
        info["cublaslt"] = cublaslt.cublaslt_version()
    except Exception as exc:  # noqa: BLE001
        info["cublaslt"] = f"unknown: {exc}"
    return info


def _codes(rows: int, k: int, fmt: str, seed: int, device: Any) -> Any:
    from mmaemu.backends.triton.selftest import adversarial_codes

    return adversarial_codes(rows, k, fmt, seed).to(device)


def _random_e4m3(rows: int, k: int, seed: int, device: Any) -> Any:
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(rows, k, generator=gen, device=device) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)


def exactness_cases(dry: bool) -> list[dict[str, Any]]:
    """The exactness problems: (preset, formats, fast, split, M, N, K)."""
    from mmaemu.accumulation import Scheme, SplitK

    m, n = (9, 16) if dry else (192, 320)
    ks = (144, 272) if dry else (1936, 4000)
    cases: list[dict[str, Any]] = []
    for preset in ("hopper", "ada"):
        for pair in (("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3")):
            for fast in (True, False):
                cases.append(dict(preset=preset, fmt=pair, fast=fast, split=SplitK(1, Scheme.NONE), m=m, n=n, k=ks[0]))
        for scheme in (Scheme.CONTIGUOUS, Scheme.SERIAL, Scheme.PAIRWISE):
            for s in (2, 3, 4):
                for fast in (True, False):
                    cases.append(dict(preset=preset, fmt=("e4m3", "e4m3"), fast=fast, split=SplitK(s, scheme),
                                      m=m // 2, n=n // 2, k=ks[1]))
    return cases


def check_exactness(device: Any, dry: bool, budget: Budget, max_cases: int | None = None) -> list[dict[str, Any]]:
    """Triton kernels against the reference backend on the same device, bit for bit."""
    import torch

    from mmaemu.accumulation import plan_accumulation
    from mmaemu.backends import reference
    from mmaemu.backends.triton.backend import accumulate
    from mmaemu.presets import get_preset

    rows = []
    for i, case in enumerate(exactness_cases(dry)[:max_cases]):
        label = (f"{case['preset']} {case['fmt'][0]}x{case['fmt'][1]} {'fast' if case['fast'] else 'slow'} "
                 f"{case['split']!r} M,N,K={case['m']},{case['n']},{case['k']}")
        if not budget.ok(10.0):
            rows.append({"case": label, "status": "skipped (budget)"})
            continue
        a = _codes(case["m"], case["k"], case["fmt"][0], 10 + i, device)
        b = _codes(case["n"], case["k"], case["fmt"][1], 5000 + i, device)
        preset = get_preset(case["preset"])
        plan = plan_accumulation(case["k"], fast=case["fast"], split=case["split"])
        got = accumulate(a, b, preset, plan)
        want = reference.accumulate(a, b, preset, plan)
        differ = int((got.view(torch.int32) != want.view(torch.int32)).sum())
        rows.append({"case": label, "status": "exact" if differ == 0 else f"{differ} outputs differ"})
    return rows


def check_edges(device: Any, dry: bool, budget: Budget) -> list[dict[str, Any]]:
    """Edges a GEMM shape can reach and the timed shapes do not: N not a multiple of 16, N = 1, M = 1,
    a preset no shipped profile uses (its own kernel variant, self-tested on first use), offsets past
    2**31 (M * K > 2**31, checked on the last rows), and a second GPU when there is one. fp32
    accumulators against the reference backend on the same device, bit for bit."""
    import torch

    from mmaemu.accumulation import Scheme, SplitK, plan_accumulation
    from mmaemu.backends import reference
    from mmaemu.backends.triton.backend import accumulate
    from mmaemu.backends.triton.selftest import selftest_kernel
    from mmaemu.presets import HOPPER, Preset

    custom = Preset("device-check-b8-f11", block_size=8, frac_bits=11)
    k = 144 if dry else 1936
    cases: list[tuple[str, Any, int, int, int, Any]] = [
        ("N % 16 != 0 (N = 50)", HOPPER, 33, 50, k, device),
        ("N = 1", HOPPER, 40, 1, k, device),
        ("M = 1", HOPPER, 1, 72, k, device),
        ("M = N = 1", HOPPER, 1, 1, k, device),
        ("custom preset B=8, F=11", custom, 40, 48, k, device),
        # few outputs with several chains: choose_launch runs every (chain, tile) as its own program
        ("few outputs, slow accumulation, S = 3 pairwise", HOPPER, 24, 40, k, device),
        ("few outputs, slow accumulation, S = 3 pairwise, RZ", HOPPER, 24, 40, k, device),
    ]
    if not dry:
        rows_big = 2**31 // 1936 + 64  # M * K > 2**31: int64 offsets, checked on the last 64 rows
        cases.append(("M * K > 2**31", HOPPER, rows_big, 16, 1936, device))
        if device.type == "cuda" and torch.cuda.device_count() > 1:
            cases.append(("second GPU (cuda:1)", HOPPER, 64, 80, k, torch.device("cuda", 1)))
    out: list[dict[str, Any]] = []
    for i, (label, preset, m, n, kk, dev) in enumerate(cases):
        if not budget.ok(30.0 if not dry else 2.0):
            out.append({"case": label, "status": "skipped (budget)"})
            continue
        try:
            if preset is custom:
                result = selftest_kernel(dev, custom)
                if not result.passed:
                    out.append({"case": label, "status": f"self-test failed: {result.reason}"})
                    continue
            a = _codes(m, kk, "e4m3", 700 + i, dev) if m * kk < 2**28 else _random_e4m3(m, kk, 700 + i, dev)
            b = _codes(n, kk, "e5m2" if i % 2 else "e4m3", 900 + i, dev)
            few = label.startswith("few outputs")
            plan = plan_accumulation(kk, fast=not few, split=SplitK(3, Scheme.PAIRWISE) if few else SplitK(1, Scheme.NONE))
            if label.endswith(", RZ"):  # the exactly-defined formulation where the sm_90 one would run
                with _native_off():
                    got = accumulate(a, b, preset, plan)
            else:
                got = accumulate(a, b, preset, plan)
            tail = slice(max(m - 64, 0), m)
            want = reference.accumulate(a[tail], b, preset, plan)
            differ = int((got[tail].view(torch.int32) != want.view(torch.int32)).sum())
            out.append({"case": f"{label}: M,N,K={m},{n},{kk}",
                        "status": "exact" if differ == 0 else f"{differ} outputs differ"})
        except Exception as exc:  # noqa: BLE001 - a crash is a finding, reported with the case
            out.append({"case": label, "status": f"{type(exc).__name__}: {str(exc)[:300]}"})
    return out


class _native_off:
    """A context in which the sm_90 formulation is off (``MMAEMU_TRITON_NATIVE=0``): the RZ kernels run."""

    def __enter__(self) -> None:
        from mmaemu.backends.triton.backend import NATIVE_ENV

        self.saved = os.environ.get(NATIVE_ENV)
        os.environ[NATIVE_ENV] = "0"

    def __exit__(self, *exc: object) -> None:
        from mmaemu.backends.triton.backend import NATIVE_ENV

        if self.saved is None:
            os.environ.pop(NATIVE_ENV, None)
        else:
            os.environ[NATIVE_ENV] = self.saved


def _timer(device: Any) -> Callable[[Callable[[], Any], int, int], float]:
    """Median seconds of ``runs`` calls after ``warmup`` calls (CUDA events on GPUs)."""
    import torch

    def timed(fn: Callable[[], Any], runs: int, warmup: int) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(runs):
            if device.type == "cuda":
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                stop.record()
                torch.cuda.synchronize(device)
                times.append(start.elapsed_time(stop) / 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        return statistics.median(times)

    return timed


def time_shapes(device: Any, dry: bool, budget: Budget) -> list[dict[str, Any]]:
    """Triton backend (accumulate + epilogue via scaled_mm) and native _scaled_mm, with bit checks."""
    import torch

    import mmaemu
    from mmaemu.accumulation import Scheme, SplitK, plan_accumulation
    from mmaemu.backends import reference
    from mmaemu.backends.triton.backend import GPU_CONFIG, TileConfig, accumulate, kernel_name
    from mmaemu.presets import HOPPER

    timed = _timer(device)
    shapes = DRY_TIMED_SHAPES if dry else TIMED_SHAPES
    one = torch.tensor(1.0, device=device)
    rows: list[dict[str, Any]] = []
    for si, (m, n, k) in enumerate(shapes):
        row: dict[str, Any] = {"shape": [m, n, k], "macs": m * n * k, "preset": "hopper", "formats": "e4m3 x e4m3",
                               "out": "bf16", "fast": True}
        rows.append(row)
        if not budget.ok(60.0 if not dry else 5.0):
            row["status"] = "skipped (budget)"
            continue
        x, w = _random_e4m3(m, k, 1, device), _random_e4m3(n, k, 2, device)
        plan = plan_accumulation(k, fast=True, split=SplitK(1, Scheme.NONE))
        # bits first: the fp32 accumulators (before the bf16 rounding, which would hide a difference
        # in the low bits), against the reference on the same device
        got = accumulate(x, w, HOPPER, plan)
        check_rows = m if m * n * k <= 3e10 else 256  # 8192^3: a row slice (the reference is slow)
        want = reference.accumulate(x[:check_rows], w, HOPPER, plan)
        differ = int((got[:check_rows].view(torch.int32) != want.view(torch.int32)).sum())
        row["checked_rows"] = check_rows
        row["exact"] = differ == 0
        row["differing_outputs"] = differ
        runs, warm = (1, 0) if dry else ((20, 3) if si == 0 else (5, 1))
        t = timed(lambda: mmaemu.scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True,
                                           splitk=1, backend="triton"), runs, warm)
        row["triton_scaled_mm_s"] = t
        row["triton_scaled_mm_tmacs"] = m * n * k / t / 1e12
        t_acc = timed(lambda: accumulate(x, w, HOPPER, plan), runs, warm)
        row["kernel"] = kernel_name(HOPPER, x.device)
        row["triton_accumulate_s"] = t_acc
        row["triton_accumulate_tmacs"] = m * n * k / t_acc / 1e12
        with _native_off():  # the exactly-defined formulation, checked and timed too where the sm_90 one runs
            row["rz_kernel"] = kernel_name(HOPPER, x.device)
            rz = accumulate(x, w, HOPPER, plan)
            row["rz_exact"] = bool(torch.equal(rz[:check_rows].view(torch.int32), want.view(torch.int32)))
            t_rz = timed(lambda: accumulate(x, w, HOPPER, plan), runs, warm)
        row["rz_accumulate_s"] = t_rz
        row["rz_accumulate_tmacs"] = m * n * k / t_rz / 1e12
        try:
            def native() -> Any:
                return torch._scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True)

            native()
            t_nat = timed(native, runs if dry else 50, warm if dry else 5)
            row["native_scaled_mm_s"] = t_nat
            row["native_scaled_mm_tmacs"] = m * n * k / t_nat / 1e12
            row["triton_over_native"] = t / t_nat
        except (RuntimeError, NotImplementedError) as exc:
            row["native_scaled_mm_s"] = None
            row["native_note"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if si == 0:  # a small sweep of tile configurations, each checked bit for bit first
            reference_acc = reference.accumulate(x, w, HOPPER, plan) if dry else None
            configs = [TileConfig(16, 16, 1), TileConfig(32, 16, 1)] if dry else [
                GPU_CONFIG, TileConfig(32, 32, 4), TileConfig(64, 64, 4), TileConfig(64, 128, 8),
                TileConfig(128, 64, 8)]  # none spills registers on sm_90 (ptxas -v)
            sweep = []
            base = accumulate(x, w, HOPPER, plan)
            if reference_acc is not None and not torch.equal(base.view(torch.int32), reference_acc.view(torch.int32)):
                row["exact"] = False
            for cfg in configs:
                entry: dict[str, Any] = {"block_m": cfg.block_m, "block_n": cfg.block_n, "num_warps": cfg.num_warps}
                if not budget.ok(45.0 if not dry else 2.0):
                    entry["status"] = "skipped (budget)"
                else:
                    try:
                        out = accumulate(x, w, HOPPER, plan, cfg)
                        entry["exact"] = bool(torch.equal(out.view(torch.int32), base.view(torch.int32)))
                        ts = timed(lambda: accumulate(x, w, HOPPER, plan, cfg), 1 if dry else 10,
                                   0 if dry else 2)
                        entry["s"] = ts
                        entry["tmacs"] = m * n * k / ts / 1e12
                    except Exception as exc:  # noqa: BLE001 - a config that fails to compile is reported
                        entry["status"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                sweep.append(entry)
            row["tile_sweep"] = sweep
    return rows


def text_table(report: dict[str, Any]) -> str:
    """The short text summary."""
    v = report["versions"]
    lines = [
        f"device check ({'DRY RUN, CPU interpreter' if report['dry_run'] else 'GPU'}), {report['elapsed_s']:.0f} s",
        f"GPU {v.get('gpu')} {v.get('sm', '')}, driver {v.get('driver')}, torch {v['torch']} (CUDA {v['cuda_runtime']}), "
        f"triton {v.get('triton')}, cuBLASLt {v.get('cublaslt')}, mmaemu {v['mmaemu']}",
        f"self-test: {'passed' if report['selftest']['passed'] else 'FAILED'} ({report['selftest']['summary']})",
    ]
    exact = report["exactness"]
    bad = [r for r in exact if r["status"] != "exact"]
    lines.append(f"exactness vs reference on the device: {len(exact) - len(bad)} of {len(exact)} exact")
    lines += [f"  {r['case']}: {r['status']}" for r in bad]
    lines.append("")
    lines.append("| M, N, K | exact | triton scaled_mm TMAC/s | triton accumulate TMAC/s | native TMAC/s | triton/native time |")
    lines.append("|---|---|---|---|---|---|")
    for r in report["timing"]:
        shape = ", ".join(str(s) for s in r["shape"])
        if "triton_scaled_mm_s" not in r:
            lines.append(f"| {shape} | {r.get('status', '?')} | | | | |")
            continue

        def f(key: str) -> str:
            val = r.get(key)
            return f"{val:.3f}" if isinstance(val, float) else "n/a"

        ratio = r.get("triton_over_native")
        lines.append(f"| {shape} | {r['exact']} ({r['checked_rows']} rows) | {f('triton_scaled_mm_tmacs')} | "
                     f"{f('triton_accumulate_tmacs')} | {f('native_scaled_mm_tmacs')} | "
                     f"{('%.1fx' % ratio) if isinstance(ratio, float) else 'n/a'} |")
        lines.append(f"  kernel {r.get('kernel')}; exactly-defined {r.get('rz_kernel')}: {f('rz_accumulate_tmacs')} "
                     f"TMAC/s, exact={r.get('rz_exact')}")
        for e in r.get("tile_sweep", []):
            tm = e.get("tmacs")
            lines.append(f"  tile {e['block_m']}x{e['block_n']} warps {e['num_warps']}: "
                         f"{'%.3f TMAC/s' % tm if isinstance(tm, float) else e.get('status')} exact={e.get('exact')}")
    first = report["timing"][0] if report["timing"] else {}
    if not report["dry_run"] and isinstance(first.get("triton_accumulate_tmacs"), float):
        ok = first["triton_accumulate_tmacs"] >= TARGET_TMACS and first.get("exact")
        lines.append(f"bar (hopper E4M3 fast, 2048x5760x1920, >= {TARGET_TMACS} TMAC/s, exact): "
                     f"{'met' if ok else 'NOT met'}")
    return "\n".join(lines) + "\n"


def run(argv: list[str] | None = None) -> int:
    """Run the check; returns the exit status."""
    args = _parse(argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before the kernels are first imported
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import torch

    from mmaemu.backends.triton.selftest import selftest

    budget = Budget(args.budget_s)
    device = torch.device("cpu" if args.dry_run else args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: use --dry-run to check the script on the CPU", file=sys.stderr)
        return 2
    report: dict[str, Any] = {"dry_run": bool(args.dry_run), "versions": versions(device)}
    print(json.dumps(report["versions"], indent=1), flush=True)
    t0 = time.perf_counter()
    st = selftest(device)
    report["selftest"] = {"passed": st.passed, "summary": st.summary(), "seconds": time.perf_counter() - t0,
                          "kernels": [{"kernel": k.kernel, "passed": k.passed, "reason": k.reason} for k in st.kernels]}
    print(f"self-test: {st.summary()} ({report['selftest']['seconds']:.1f} s)", flush=True)
    if st.passed:
        report["exactness"] = check_exactness(device, args.dry_run, budget, args.max_cases)
        report["exactness"] += check_edges(device, args.dry_run, budget)
        print(f"exactness: {sum(r['status'] == 'exact' for r in report['exactness'])} of "
              f"{len(report['exactness'])} exact ({budget.elapsed():.0f} s)", flush=True)
        report["timing"] = time_shapes(device, args.dry_run, budget)
    else:
        report["exactness"], report["timing"] = [], []
    report["elapsed_s"] = budget.elapsed()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "device_check.json").write_text(json.dumps(report, indent=1, default=str))
    table = text_table(report)
    (out_dir / "device_check.txt").write_text(table)
    print(table)
    exact = all(r["status"] == "exact" for r in report["exactness"] if not r["status"].startswith("skipped"))
    timed_exact = all(r.get("exact", True) for r in report["timing"])
    return 0 if st.passed and exact and timed_exact else 1


if __name__ == "__main__":
    sys.exit(run())
