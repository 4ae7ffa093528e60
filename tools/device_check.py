"""Device check of the Triton backend on an NVIDIA GPU, built so that one short run loses nothing.

Usage::

    python tools/device_check.py [--out DIR] [--budget-s 390] [--record-min-s 240] [--dry-run] [--max-cases N]

Steps, in this order (each in its own ``try``; an error is recorded with its traceback and the run goes
on; the JSON report is rewritten after every step, so an interrupted run still returns what it found):

1. ``versions``: GPU, driver, Python, torch, CUDA, Triton, cuBLASLt, mmaemu;
2. ``selftest``: the Triton backend's self-test on the GPU, timed;
3. ``headline``: the headline shape, M, N, K = 2048, 5760, 1920 (hopper, E4M3, fast accumulation, bf16
   out): the fp32 accumulators of the sm_90 formulation and of the exactly-defined one checked bit for
   bit against the model, then each timed end to end (``mmaemu.scaled_mm``) and kernel only, beside
   native ``torch._scaled_mm``;
4. ``scaled_mm_vs_model``: native ``torch._scaled_mm`` on the GPU against the hopper model
   (``mmaemu.scaled_mm``, default profile, on the CPU), bit for bit: fp32 and bf16 outputs, fast and slow
   accumulation, the Evo 2 projection shapes and shapes the profile splits; where they differ, which
   contiguous split S = 1..8 (if any) gives torch's bits;
5. ``exactness``: the Triton backend's accumulators against the model on the same data: both presets,
   every format pair, fast and slow, every split scheme, edges (N = 1, M = 1, a custom preset,
   M * K > 2**31, K > 2**16, a second GPU);
6. ``timing``: 8192 x 8192 x 8192, slow accumulation at the headline shape, a few RZ tiles;
7. ``recording``: when at least ``--record-min-s`` of the budget remain, ``python -m mmaemu record`` on
   the rest of it, packed into one archive under ``--out``.

Files under ``--out`` (default ``$OUT``, else the current directory): ``device_check.json``,
``device_check.txt``, ``device_check.log`` (the progress lines) and ``recording-<gpu>.tar.gz``.

The exit status is 0 only when every step passed; 1 when a step failed, raised or was skipped (a step
that would overrun the budget is skipped, and so is the recording when too little of it remains); 2 when
there is no GPU (without ``--dry-run``). ``--dry-run`` runs every step on the CPU under Triton's
interpreter (``TRITON_INTERPRET=1``) with tiny shapes and small-integer data (whose sums every
formulation computes exactly, the interpreter's float ``tl.dot`` included), and records through the
emulated device of ``tests/emulated_device.py``: it checks the script, not a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import enum
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

REPO = Path(__file__).resolve().parents[1]

#: The headline shape (M, N, K): an Evo 2 1B input projection over 2048 tokens.
HEADLINE = (2048, 5760, 1920)
DRY_HEADLINE = (48, 64, 256)
#: More timed shapes.
TIMED_SHAPES = [(8192, 8192, 8192)]
DRY_TIMED_SHAPES = [(16, 32, 160)]
#: The issue's bars at the headline shape (TMAC/s, end to end, bf16 out, fast accumulation).
NATIVE_TARGET_TMACS = 50.0
#: Evo 2's projections ([3 * hidden, hidden] of the 1B, 7B and 20B/40B) at a few token counts, and shapes the
#: hopper profile splits (S = 3 or 4, contiguous), for torch._scaled_mm against the model.
EVO2_SHAPES = [(64, 5760, 1920), (2048, 5760, 1920), (64, 12288, 4096), (512, 12288, 4096), (64, 24576, 8192),
               (256, 24576, 8192)]
SPLIT_SHAPES = [(16, 64, 8192), (64, 256, 8192), (16, 1024, 16384), (32, 512, 12288), (128, 256, 16384)]
#: Dry-run stand-ins: shapes the hopper profile decides (S = 1 and S = 3), small enough for the CPU.
DRY_EVO2_SHAPES = [(32, 32, 1024), (16, 16, 2048)]
DRY_SPLIT_SHAPES = [(16, 64, 8192)]


class StepStatus(enum.Enum):
    """How a step ended."""

    #: it ran and every check held
    PASSED = "passed"
    #: it ran and a check did not hold
    FAILED = "failed"
    #: it raised (the traceback is in the report)
    ERROR = "error"
    #: the budget left no room for it (or for part of it)
    SKIPPED = "skipped"


class Partial(Exception):
    """Raised by a step whose result is kept but which did not run all of its cases (budget)."""


class CheckFailed(Exception):
    """Raised by a step whose result is kept and one of whose checks did not hold."""


@dataclass
class Context:
    """What the steps share."""

    args: argparse.Namespace
    device: Any
    dry: bool
    start: float
    out: Path
    report: dict[str, Any]
    log: TextIO | None = None
    scratch: dict[str, Any] = field(default_factory=dict)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return self.args.budget_s - self.elapsed()

    def ok(self, estimate: float) -> bool:
        """Whether something of about ``estimate`` seconds still fits the budget."""
        return self.elapsed() + estimate <= self.args.budget_s

    def say(self, text: str) -> None:
        """One progress line, flushed at once (stdout and the log)."""
        line = f"[{self.elapsed():7.1f} s] {text}"
        print(line, flush=True)
        if self.log is not None:
            self.log.write(line + "\n")
            self.log.flush()


# ---- the report ------------------------------------------------------------------------------


def write_report(ctx: Context) -> None:
    """Write device_check.json (by rename: a reader never sees half a file) and device_check.txt."""
    ctx.report["elapsed_s"] = round(ctx.elapsed(), 2)
    ctx.out.mkdir(parents=True, exist_ok=True)
    tmp = ctx.out / "device_check.json.tmp"
    tmp.write_text(json.dumps(ctx.report, indent=1, default=str))
    tmp.replace(ctx.out / "device_check.json")
    (ctx.out / "device_check.txt").write_text(text_summary(ctx.report))


def exit_status(report: dict[str, Any]) -> int:
    """0 when every step passed, else 1."""
    steps = report.get("steps", [])
    return 0 if steps and all(s["status"] == StepStatus.PASSED.value for s in steps) else 1


def run_step(ctx: Context, name: str, estimate: float, fn: Callable[[Context], Any]) -> None:
    """Run one step: skipped when ``estimate`` seconds would overrun the budget; its result or error is
    recorded and the report written, whatever happens."""
    entry: dict[str, Any] = {"name": name, "status": StepStatus.SKIPPED.value, "seconds": 0.0}
    ctx.report["steps"].append(entry)
    if not ctx.ok(estimate):
        entry["reason"] = f"budget: {ctx.left():.0f} s left, the step needs about {estimate:.0f} s"
        ctx.say(f"{name}: SKIPPED ({entry['reason']})")
        write_report(ctx)
        return
    ctx.say(f"{name}: start")
    t0 = time.perf_counter()
    entry["status"] = "running"
    write_report(ctx)
    try:
        entry["result"] = fn(ctx)
        entry["status"] = StepStatus.PASSED.value
    except Partial as exc:
        entry["status"], entry["reason"] = StepStatus.SKIPPED.value, f"partly skipped: {exc}"
        entry["result"] = ctx.scratch.pop(name, None)
    except CheckFailed as exc:
        entry["status"], entry["reason"] = StepStatus.FAILED.value, str(exc)
        entry["result"] = ctx.scratch.pop(name, None)
    except BaseException as exc:  # a crash is a finding: record it and go on
        entry["status"] = StepStatus.ERROR.value
        entry["error"] = f"{type(exc).__name__}: {exc}"
        entry["traceback"] = traceback.format_exc()[-6000:]
        entry["result"] = ctx.scratch.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            entry["seconds"] = round(time.perf_counter() - t0, 2)
            write_report(ctx)
            raise
    entry["seconds"] = round(time.perf_counter() - t0, 2)
    ctx.say(f"{name}: {entry['status'].upper()} in {entry['seconds']:.1f} s"
            + (f" ({entry.get('reason') or entry.get('error')})" if entry["status"] != "passed" else ""))
    write_report(ctx)


def _keep(ctx: Context, name: str, value: Any) -> Any:
    """Keep a step's partial result, so that an exception still reports it."""
    ctx.scratch[name] = value
    return value


# ---- data and the model ----------------------------------------------------------------------


def operands(rows: int, k: int, seed: int, device: Any, dry: bool, fmt: str = "e4m3") -> Any:
    """FP8 ``[rows, k]`` generated on the CPU (the same on every machine; past 2**28 elements on ``device``),
    moved to ``device``.

    On the GPU: normal values times 40, clamped to the format's range (a model's activations). In the dry
    run: small integers in [-3, 3], whose sums every formulation computes exactly.
    """
    import torch

    dtype = torch.float8_e4m3fn if fmt == "e4m3" else torch.float8_e5m2
    where = device if rows * k >= 2**28 else torch.device("cpu")  # huge operands: generated on the device
    gen = torch.Generator(device=where).manual_seed(seed)
    if dry:
        x = torch.randint(-3, 4, (rows, k), generator=gen, device=where).float()
    else:
        x = (torch.randn(rows, k, generator=gen, device=where) * 40).clamp(-448, 448)
    return x.to(dtype).to(device)


def adversarial(rows: int, k: int, fmt: str, seed: int, device: Any) -> Any:
    from mmaemu.backends._triton._selftest import adversarial_codes

    return adversarial_codes(rows, k, fmt, seed).to(device)


def model_accumulate(a: Any, b: Any, preset: Any, plan: Any) -> Any:
    """The model's fp32 accumulators, on the CPU (the compiled cpu backend where numba loads, else the
    reference backend): independent of the GPU under test."""
    from mmaemu.backends import Backend, accumulators, _cpu as cpu, _reference as reference

    a, b = a.cpu(), b.cpu()
    if cpu.available()[0]:
        return accumulators(Backend.CPU, a, b, preset, plan)
    return reference.accumulate(a, b, preset, plan)


def triton_accumulate(a: Any, b: Any, preset: Any, plan: Any, config: Any = None) -> Any:
    """The Triton backend's accumulators through the dispatcher (delegation and the Inf rule included;
    the NaN rule is the call's), with the launch tile ``config`` when given."""
    from mmaemu.backends import Backend, accumulators

    return accumulators(Backend.TRITON, a, b, preset, plan, **({} if config is None else {"config": config}))


def differing(got: Any, want: Any) -> int:
    """How many outputs differ in their bits (int32 or int16 views)."""
    import torch

    view = torch.int32 if got.dtype == torch.float32 else torch.int16
    return int((got.cpu().view(view) != want.cpu().view(view)).sum())


def sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def wall_median(device: Any, fn: Callable[[], Any], runs: int, warmup: int) -> float:
    """Median wall-clock seconds of ``fn`` including its host work, synchronised after each call."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def kernel_median(device: Any, fn: Callable[[], Any], runs: int, warmup: int) -> float:
    """Median device seconds of ``fn`` by CUDA events (its launches only; wall clock on the CPU)."""
    import torch

    if device.type != "cuda":
        return wall_median(device, fn, runs, warmup)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize(device)
        times.append(start.elapsed_time(stop) / 1e3)
    return statistics.median(times)


class native_off:
    """A context in which the sm_90 formulation is off (``MMAEMU_TRITON_NATIVE=0``): the RZ kernels run."""

    def __enter__(self) -> None:
        from mmaemu.backends._triton.backend import NATIVE_ENV

        self.saved = os.environ.get(NATIVE_ENV)
        os.environ[NATIVE_ENV] = "0"

    def __exit__(self, *exc: object) -> None:
        from mmaemu.backends._triton.backend import NATIVE_ENV

        if self.saved is None:
            os.environ.pop(NATIVE_ENV, None)
        else:
            os.environ[NATIVE_ENV] = self.saved


# ---- the steps -------------------------------------------------------------------------------


def _nvidia_smi(field_name: str) -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field_name}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def step_versions(ctx: Context) -> dict[str, Any]:
    """GPU, driver, torch, CUDA, Triton and cuBLASLt versions."""
    import torch

    from mmaemu.platforms import _cublaslt as cublaslt
    from mmaemu._version import __version__

    info: dict[str, Any] = {"mmaemu": __version__, "python": platform.python_version(), "torch": torch.__version__,
                            "cuda_runtime": torch.version.cuda, "device": str(ctx.device)}
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception as exc:  # noqa: BLE001
        info["triton"] = f"not importable: {exc}"
    if ctx.device.type == "cuda":
        props = torch.cuda.get_device_properties(ctx.device)
        info.update(gpu=props.name, sm=f"sm_{props.major}{props.minor}", sm_count=props.multi_processor_count,
                    memory_gib=round(props.total_memory / 2**30, 1), driver=_nvidia_smi("driver_version"),
                    clocks_mhz=_nvidia_smi("clocks.max.sm"), gpus=torch.cuda.device_count())
    else:
        info.update(gpu=f"none (CPU {platform.machine()}, Triton interpreter)", driver=None)
    try:
        info["cublaslt"] = cublaslt.cublaslt_version()
    except Exception as exc:  # noqa: BLE001
        info["cublaslt"] = f"unknown: {exc}"
    info["cpu_threads"] = torch.get_num_threads()
    ctx.report["versions"] = info
    ctx.say("versions: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    return info


def step_selftest(ctx: Context) -> dict[str, Any]:
    """The Triton backend's self-test on the device (every kernel variant a call may launch)."""
    from mmaemu.backends._triton._selftest import selftest

    t0 = time.perf_counter()
    report = selftest(ctx.device)
    result = {"passed": report.passed, "summary": report.summary(), "seconds": round(time.perf_counter() - t0, 2),
              "kernels": [{"kernel": k.kernel, "passed": k.passed, "reason": k.reason} for k in report.kernels]}
    ctx.say(f"self-test: {report.summary()} ({result['seconds']:.1f} s)")
    if not report.passed:
        _keep(ctx, "selftest", result)
        raise CheckFailed(report.summary())
    return result


def _time_path(ctx: Context, row: dict[str, Any], key: str, x: Any, w: Any, runs: int, warm: int,
               out_dtype: Any, fast: bool) -> None:
    """End-to-end timing of ``mmaemu.scaled_mm`` (backend triton) into ``row[key + '_e2e_*']``."""
    import torch

    import mmaemu

    m, k = x.shape
    n = w.shape[0]
    one = torch.tensor(1.0, device=ctx.device)
    try:
        t = wall_median(ctx.device, lambda: mmaemu.scaled_mm(x, w.t(), one, one, out_dtype=out_dtype, use_fast_accum=fast,
                                                             splitk=1, backend="triton"), runs, warm)
    except Exception as exc:  # noqa: BLE001 - e.g. the self-test failed here: recorded, the step goes on
        row[f"{key}_e2e_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        return
    row[f"{key}_e2e_s"] = t
    row[f"{key}_e2e_tmacs"] = m * n * k / t / 1e12


def step_headline(ctx: Context) -> dict[str, Any]:
    """The headline shape: bits of both formulations first, then end-to-end and kernel-only speed."""
    import torch

    from mmaemu._accumulation import flatten_plan, plan_accumulation
    from mmaemu.backends._triton import backend, _native
    from mmaemu.presets import HOPPER
    from mmaemu._split import Scheme, SplitK

    m, n, k = DRY_HEADLINE if ctx.dry else HEADLINE
    row: dict[str, Any] = _keep(ctx, "headline", {"shape": [m, n, k], "macs": m * n * k, "preset": "hopper",
                                                  "formats": "e4m3 x e4m3", "out": "bf16", "fast": True})
    x, w = operands(m, k, 1, ctx.device, ctx.dry), operands(n, k, 2, ctx.device, ctx.dry)
    plan = plan_accumulation(k, fast=True, split=SplitK(1, Scheme.NONE))
    want = model_accumulate(x, w, HOPPER, plan)
    runs, warm = (2, 1) if ctx.dry else (20, 3)
    row["native_applies"] = backend.native_applies(HOPPER, ctx.device)
    # the sm_90 kernel is checked and timed on any compute capability 9.0 device, even where its self-test
    # switched it off (the run is the evidence); in the dry run: its kernel in the interpreter, exact data
    sm90 = ctx.device.type == "cuda" and torch.cuda.get_device_capability(ctx.device) == (9, 0)
    problems = []
    if ctx.dry or sm90:
        call = _native.prepare_native(x, w, plan, flatten_plan(plan))
        got = call.run()
        row["native_differing"] = differing(got, want)
        if row["native_differing"]:
            problems.append(f"sm_90 formulation: {row['native_differing']} outputs differ from the model")
        t = kernel_median(ctx.device, call.run, runs, warm)
        row["native_kernel_s"], row["native_kernel_tmacs"] = t, m * n * k / t / 1e12
        if row["native_applies"]:
            _time_path(ctx, row, "native", x, w, runs, warm, torch.bfloat16, True)
        ctx.say(f"headline sm_90 formulation: exact={not row['native_differing']}, kernel "
                f"{row['native_kernel_tmacs']:.2f} TMAC/s, end to end {row.get('native_e2e_tmacs', float('nan')):.2f}")
    with native_off():  # the exactly-defined formulation (RZ)
        got = triton_accumulate(x, w, HOPPER, plan)
        row["rz_kernel"] = backend.kernel_name(HOPPER, ctx.device)
        row["rz_differing"] = differing(got, want)
        if row["rz_differing"]:
            problems.append(f"exactly-defined formulation: {row['rz_differing']} outputs differ from the model")
        t = wall_median(ctx.device, lambda: triton_accumulate(x, w, HOPPER, plan), runs, warm)
        row["rz_accumulate_s"], row["rz_accumulate_tmacs"] = t, m * n * k / t / 1e12
        _time_path(ctx, row, "rz", x, w, runs, warm, torch.bfloat16, True)
    ctx.say(f"headline exactly-defined: exact={not row['rz_differing']}, end to end "
            f"{row.get('rz_e2e_tmacs', float('nan')):.3f} TMAC/s")
    one = torch.tensor(1.0, device=ctx.device)
    try:
        def native() -> Any:
            return torch._scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True)

        native()
        t = kernel_median(ctx.device, native, runs if ctx.dry else 50, warm)
        row["torch_scaled_mm_s"], row["torch_scaled_mm_tmacs"] = t, m * n * k / t / 1e12
    except (RuntimeError, NotImplementedError) as exc:
        row["torch_scaled_mm_note"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if not ctx.dry and row.get("native_applies"):
        row["native_bar_met"] = row.get("native_e2e_tmacs", 0.0) >= NATIVE_TARGET_TMACS and not row["native_differing"]
    problems += [f"{key}: {row[key]}" for key in ("native_e2e_error", "rz_e2e_error") if key in row]
    if problems:
        raise CheckFailed("; ".join(problems))
    return row


def _matching_split(x: Any, w: Any, sa: Any, sb: Any, out_dtype: Any, fast: bool, native_out: Any) -> int | None:
    """The contiguous split S in 1..8 whose model output equals torch's bits, if any (small shapes only)."""
    import mmaemu

    for s in range(1, 9):
        try:
            y = mmaemu.scaled_mm(x, w.t(), sa, sb, out_dtype=out_dtype, use_fast_accum=fast,
                                 splitk=1 if s == 1 else (s, "contiguous"))
        except Exception:  # noqa: BLE001 - a split the contract refuses matches nothing
            y = None
        if y is not None and differing(y, native_out) == 0:
            return s
    return None


def step_scaled_mm_vs_model(ctx: Context) -> dict[str, Any]:
    """torch._scaled_mm on the device against the hopper model on the CPU, bit for bit."""
    import torch

    import mmaemu

    shapes = (DRY_EVO2_SHAPES + DRY_SPLIT_SHAPES) if ctx.dry else (EVO2_SHAPES + SPLIT_SHAPES)
    rows: list[dict[str, Any]] = _keep(ctx, "scaled_mm_vs_model", [])
    skipped = 0
    for i, (m, n, k) in enumerate(shapes):
        x, w = operands(m, k, 100 + i, ctx.device, ctx.dry), operands(n, k, 200 + i, ctx.device, ctx.dry)
        xc, wc = x.cpu(), w.cpu()
        sa, sb = torch.tensor(1 / 64), torch.tensor(1 / 32)
        for out_dtype in (torch.float32, torch.bfloat16):
            for fast in (True, False):
                row: dict[str, Any] = {"shape": [m, n, k], "out": str(out_dtype).replace("torch.", ""), "fast": fast}
                rows.append(row)
                if not ctx.ok(10.0):
                    row["status"], skipped = "skipped (budget)", skipped + 1
                    continue
                try:
                    got = torch._scaled_mm(x, w.t(), sa.to(ctx.device), sb.to(ctx.device), out_dtype=out_dtype,
                                           use_fast_accum=fast)
                except (RuntimeError, NotImplementedError) as exc:
                    row["status"] = f"torch refuses: {str(exc).splitlines()[0][:200]}"
                    continue
                try:
                    plan = mmaemu.explain(xc, wc.t(), sa, sb, out_dtype=out_dtype, use_fast_accum=fast)
                    row["model_split"] = None if plan.split is None else f"{plan.split.S},{plan.split.scheme}"
                    want = mmaemu.scaled_mm(xc, wc.t(), sa, sb, out_dtype=out_dtype, use_fast_accum=fast)
                except Exception as exc:  # noqa: BLE001 - e.g. SplitKUnknownError: the model has no decision
                    row["status"] = f"model raises {type(exc).__name__}: {str(exc)[:200]}"
                    continue
                row["differing"] = differing(got, want)
                row["status"] = "exact" if row["differing"] == 0 else f"{row['differing']} of {m * n} outputs differ"
                if row["differing"] and m * n * k <= 2**30:
                    row["matching_contiguous_split"] = _matching_split(xc, wc, sa, sb, out_dtype, fast, got)
        ctx.say(f"torch._scaled_mm vs model at {m}x{n}x{k}: "
                + ", ".join(r["status"] for r in rows[-4:]))
    bad = [r for r in rows if r["status"] != "exact" and not r["status"].startswith("skipped")]
    if bad:
        raise CheckFailed(f"{len(bad)} of {len(rows)} calls not bit-exact against the hopper model")
    if skipped:
        raise Partial(f"{skipped} calls skipped by the budget")
    return {"rows": rows}


def exactness_cases(dry: bool) -> list[dict[str, Any]]:
    """The exactness problems: (preset, formats, fast, split, M, N, K).

    Each split scheme runs S = 2, 3, 4 and 6 where the package accepts S parts over the split cases' K (the
    dry run's K = 272 has 3 contiguous k-tiles, too few for S = 6: :func:`split_accepted`), so every case is
    a call the package makes and a failure is the device's (tests/tools/test_device_check.py checks each).
    """
    from mmaemu._split import Scheme, SplitK

    m, n = (9, 16) if dry else (192, 320)
    ks = (144, 272) if dry else (1936, 4000)
    cases: list[dict[str, Any]] = []
    for preset in ("hopper", "ada"):
        for pair in (("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2")):
            for fast in (True, False):
                cases.append({"preset": preset, "fmt": pair, "fast": fast, "split": SplitK(1, Scheme.NONE),
                              "m": m, "n": n, "k": ks[0]})
        for scheme in (Scheme.CONTIGUOUS, Scheme.SERIAL, Scheme.PAIRWISE):
            for s in [parts for parts in (2, 3, 4, 6) if split_accepted(ks[1], SplitK(parts, scheme))]:
                for fast in (True, False):
                    cases.append({"preset": preset, "fmt": ("e4m3", "e4m3"), "fast": fast, "split": SplitK(s, scheme),
                                  "m": m // 2, "n": n // 2, "k": ks[1]})
    return cases


def split_accepted(k: int, split: Any) -> bool:
    """Whether the package accepts ``split`` over a reduction of length ``k``: its own rule
    (mmaemu._accumulation.plan_accumulation refuses a split with more parts without a k-tile than any
    reference GPU's table has), asked, not restated."""
    from mmaemu._accumulation import plan_accumulation

    try:
        plan_accumulation(k, fast=True, split=split)
    except ValueError:
        return False
    return True


def exactness_plan(case: dict[str, Any]) -> Any:
    """The accumulation plan of an exactness case (mmaemu._accumulation's checks: ValueError for a refused split)."""
    from mmaemu._accumulation import plan_accumulation

    return plan_accumulation(case["k"], fast=case["fast"], split=case["split"])


def check_cases(ctx: Context, rows: list[dict[str, Any]], max_cases: int | None) -> int:
    """The Triton backend against the model on :func:`exactness_cases`; returns how many were skipped."""
    accumulate = triton_accumulate
    from mmaemu.presets import get_preset

    skipped = 0
    for i, case in enumerate(exactness_cases(ctx.dry)[:max_cases]):
        label = (f"{case['preset']} {case['fmt'][0]}x{case['fmt'][1]} {'fast' if case['fast'] else 'slow'} "
                 f"{case['split']!r} M,N,K={case['m']},{case['n']},{case['k']}")
        if not ctx.ok(5.0):
            rows.append({"case": label, "status": "skipped (budget)"})
            skipped += 1
            continue
        try:
            a = adversarial(case["m"], case["k"], case["fmt"][0], 10 + i, ctx.device)
            b = adversarial(case["n"], case["k"], case["fmt"][1], 5000 + i, ctx.device)
            preset = get_preset(case["preset"])
            plan = exactness_plan(case)
            d = differing(accumulate(a, b, preset, plan), model_accumulate(a, b, preset, plan))
            rows.append({"case": label, "status": "exact" if d == 0 else f"{d} outputs differ"})
        except Exception as exc:  # noqa: BLE001 - a crash is a finding, reported with the case
            rows.append({"case": label, "status": f"{type(exc).__name__}: {str(exc)[:300]}"})
    return skipped


def edge_cases(ctx: Context) -> list[tuple[str, Any, int, int, int, Any]]:
    """(label, preset, M, N, K, device) of the edges the shape grid does not reach."""
    import torch

    from mmaemu.presets import HOPPER, Preset

    custom = Preset("device-check-b8-f11", block_size=8, frac_bits=11)
    k = 144 if ctx.dry else 1936
    cases: list[tuple[str, Any, int, int, int, Any]] = [
        ("N % 16 != 0 (N = 50)", HOPPER, 33, 50, k, ctx.device),
        ("N = 1", HOPPER, 40, 1, k, ctx.device),
        ("M = 1", HOPPER, 1, 72, k, ctx.device),
        ("M = N = 1", HOPPER, 1, 1, k, ctx.device),
        ("custom preset B=8, F=11", custom, 40, 48, k, ctx.device),
        # few outputs with several chains: choose_launch runs every (chain, tile) as its own program
        ("few outputs, slow accumulation, S = 3 pairwise", HOPPER, 24, 40, k, ctx.device),
        ("few outputs, slow accumulation, S = 3 pairwise, RZ", HOPPER, 24, 40, k, ctx.device),
    ]
    if not ctx.dry:
        cases.append(("K > 2**16", HOPPER, 64, 80, 65600, ctx.device))
        cases.append(("M * K > 2**31", HOPPER, 2**31 // 1936 + 64, 16, 1936, ctx.device))
        if ctx.device.type == "cuda" and torch.cuda.device_count() > 1:
            cases.append(("second GPU (cuda:1)", HOPPER, 64, 80, k, torch.device("cuda", 1)))
    return cases


def edge_plan(label: str, k: int) -> Any:
    """The accumulation plan of an edge of :func:`edge_cases`: the few-output edges split (S = 3 pairwise,
    slow accumulation), the others run one fast chain."""
    from mmaemu._accumulation import plan_accumulation
    from mmaemu._split import Scheme, SplitK

    few = label.startswith("few outputs")
    return plan_accumulation(k, fast=not few, split=SplitK(3, Scheme.PAIRWISE) if few else SplitK(1, Scheme.NONE))


def check_edges(ctx: Context, rows: list[dict[str, Any]]) -> int:
    """The edges of :func:`edge_cases` against the model (the last 64 rows of tall ones); returns how many
    were skipped."""
    accumulate = triton_accumulate
    from mmaemu.backends._triton._selftest import selftest_kernel
    from mmaemu.presets import HOPPER

    skipped = 0
    for i, (label, preset, m, n, kk, dev) in enumerate(edge_cases(ctx)):
        if not ctx.ok(2.0 if ctx.dry else 20.0):
            rows.append({"case": label, "status": "skipped (budget)"})
            skipped += 1
            continue
        try:
            if preset is not HOPPER:
                result = selftest_kernel(dev, preset)
                if not result.passed:
                    rows.append({"case": label, "status": f"self-test failed: {result.reason}"})
                    continue
            a = (adversarial(m, kk, "e4m3", 700 + i, dev) if m * kk < 2**28
                 else operands(m, kk, 700 + i, dev, ctx.dry))
            b = adversarial(n, kk, "e5m2" if i % 2 else "e4m3", 900 + i, dev)
            plan = edge_plan(label, kk)
            if label.endswith(", RZ"):  # the exactly-defined formulation where the sm_90 one would run
                with native_off():
                    got = accumulate(a, b, preset, plan)
            else:
                got = accumulate(a, b, preset, plan)
            tail = slice(max(m - 64, 0), m)
            d = differing(got[tail], model_accumulate(a[tail], b, preset, plan))
            rows.append({"case": f"{label}: M,N,K={m},{n},{kk}", "status": "exact" if d == 0 else f"{d} outputs differ"})
            del a, got
        except Exception as exc:  # noqa: BLE001 - a crash is a finding, reported with the case
            rows.append({"case": label, "status": f"{type(exc).__name__}: {str(exc)[:300]}"})
    return skipped


def step_exactness(ctx: Context) -> dict[str, Any]:
    """The Triton backend's accumulators against the model, bit for bit, on adversarial data."""
    rows: list[dict[str, Any]] = _keep(ctx, "exactness", [])
    skipped = check_cases(ctx, rows, ctx.args.max_cases)
    skipped += check_edges(ctx, rows)
    exact = sum(r["status"] == "exact" for r in rows)
    ctx.say(f"exactness: {exact} of {len(rows)} exact")
    bad = [r for r in rows if r["status"] != "exact" and not r["status"].startswith("skipped")]
    if bad:
        raise CheckFailed(f"{len(bad)} of {len(rows)} cases not exact: " + "; ".join(
            f"{r['case']}: {r['status']}" for r in bad[:5]))
    if skipped:
        raise Partial(f"{skipped} cases skipped by the budget")
    return {"rows": rows}


def step_timing(ctx: Context) -> dict[str, Any]:
    """More shapes: 8192^3 (both formulations, bits on a row slice), slow accumulation at the headline
    shape, and a few RZ tiles there."""
    from mmaemu._accumulation import plan_accumulation
    from mmaemu.backends._triton import backend
    from mmaemu.backends._triton.backend import TileConfig
    from mmaemu.presets import HOPPER
    from mmaemu._split import Scheme, SplitK

    result: dict[str, Any] = _keep(ctx, "timing", {"shapes": [], "tile_sweep": []})
    problems = []
    skipped = 0
    runs, warm = (1, 0) if ctx.dry else (5, 1)
    native = backend.native_applies(HOPPER, ctx.device)
    hm, hn, hk = DRY_HEADLINE if ctx.dry else HEADLINE
    shapes = [(*s, True) for s in (DRY_TIMED_SHAPES if ctx.dry else TIMED_SHAPES)] + [(hm, hn, hk, False)]
    for m, n, k, fast in shapes:
        row: dict[str, Any] = {"shape": [m, n, k], "fast": fast}
        result["shapes"].append(row)
        if not ctx.ok(5.0 if ctx.dry else 40.0):
            row["status"], skipped = "skipped (budget)", skipped + 1
            continue
        x, w = operands(m, k, 11, ctx.device, ctx.dry), operands(n, k, 12, ctx.device, ctx.dry)
        plan = plan_accumulation(k, fast=fast, split=SplitK(1, Scheme.NONE))
        rows_checked = min(m, 256)
        want = model_accumulate(x[:rows_checked], w, HOPPER, plan)
        row["checked_rows"] = rows_checked
        for key, off in (("native", False), ("rz", True)):
            if key == "native" and not native:
                continue
            def call(x: Any = x, w: Any = w, plan: Any = plan) -> Any:
                return triton_accumulate(x, w, HOPPER, plan)

            if off:
                with native_off():
                    got = call()
                    t = wall_median(ctx.device, call, runs, warm)
            else:
                got = call()
                t = wall_median(ctx.device, call, runs, warm)
            row[f"{key}_differing"] = differing(got[:rows_checked], want)
            row[f"{key}_accumulate_s"], row[f"{key}_accumulate_tmacs"] = t, m * n * k / t / 1e12
            if row[f"{key}_differing"]:
                problems.append(f"{key} at {m}x{n}x{k}: {row[f'{key}_differing']} outputs differ")
            del got
        ctx.say(f"timing {m}x{n}x{k} {'fast' if fast else 'slow'}: "
                + ", ".join(f"{k_}={v:.3f}" for k_, v in row.items() if k_.endswith("tmacs")))
    m, n, k = DRY_HEADLINE if ctx.dry else HEADLINE
    x, w = operands(m, k, 1, ctx.device, ctx.dry), operands(n, k, 2, ctx.device, ctx.dry)
    plan = plan_accumulation(k, fast=True, split=SplitK(1, Scheme.NONE))
    base = model_accumulate(x, w, HOPPER, plan)
    configs = [TileConfig(32, 32, 1)] if ctx.dry else [
        TileConfig(128, 64, 4), TileConfig(64, 64, 2), TileConfig(128, 64, 8), TileConfig(128, 128, 8)]
    for cfg in configs:
        entry: dict[str, Any] = {"tile": cfg.text}
        result["tile_sweep"].append(entry)
        if not ctx.ok(2.0 if ctx.dry else 20.0):
            entry["status"], skipped = "skipped (budget)", skipped + 1
            continue
        try:
            out = triton_accumulate(x, w, HOPPER, plan, cfg)
            entry["differing"] = differing(out, base)
            if entry["differing"]:
                problems.append(f"RZ tile {cfg.text}: {entry['differing']} outputs differ")
            ts = wall_median(ctx.device, lambda cfg=cfg: triton_accumulate(x, w, HOPPER, plan, cfg), runs, warm)
            entry["s"], entry["tmacs"] = ts, m * n * k / ts / 1e12
        except Exception as exc:  # noqa: BLE001 - a tile that fails to compile is a finding
            entry["status"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            problems.append(f"RZ tile {cfg.text}: {entry['status']}")
    if problems:
        raise CheckFailed("; ".join(problems))
    if skipped:
        raise Partial(f"{skipped} timings skipped by the budget")
    return result


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")[:40] or "device"


def step_recording(ctx: Context) -> dict[str, Any]:
    """Record the device as a reference platform on what remains of the budget, packed into one archive."""
    budget_s = ctx.left() - 40.0  # the packing and the report after it
    result: dict[str, Any] = _keep(ctx, "recording", {"budget_s": round(budget_s, 1)})
    work = Path(tempfile.mkdtemp(prefix="mmaemu-record-"))
    rec = work / "recording"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    log_path = work / "record.log"
    if ctx.dry:  # plumbing: the emulated device of the tests, a tiny grid, in this process
        sys.path.insert(0, str(REPO / "tests"))
        from emulated_device import TINY_GRID, EmulatedDevice

        from mmaemu.recording._record import record

        with log_path.open("w") as log:
            record(rec, budget_minutes=max(budget_s, 5.0) / 60, grid=TINY_GRID, device=EmulatedDevice(), progress=log)
        result["returncode"] = 0
    else:
        cmd = [sys.executable, "-m", "mmaemu", "record", "--out", str(rec), "--budget-minutes", f"{budget_s / 60:.2f}"]
        result["command"] = " ".join(cmd[1:])
        with log_path.open("w") as log:
            done = subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=budget_s + 60, check=False)
        result["returncode"] = done.returncode
    result["log_tail"] = log_path.read_text(errors="replace")[-3000:]
    gpu = str(ctx.report.get("versions", {}).get("gpu", "device"))
    archive = ctx.out / f"recording-{_slug(gpu if not ctx.dry else 'emulated')}.tar.gz"
    if rec.exists():
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(rec, arcname=archive.name.removesuffix(".tar.gz"))
        result["archive"] = archive.name
        result["archive_bytes"] = archive.stat().st_size
        result["files"] = sorted(p.name for p in rec.iterdir())
    ctx.say(f"recording: exit {result['returncode']}, archive {result.get('archive')} "
            f"({result.get('archive_bytes', 0) / 1e6:.2f} MB)")
    if result["returncode"] != 0 or "archive" not in result:
        raise CheckFailed(f"the recorder exited {result['returncode']}" + ("" if rec.exists() else ", nothing written"))
    return result


#: (name, seconds it needs on an H200, the step). The recording's need is --record-min-s.
STEPS: list[tuple[str, float, Callable[[Context], Any]]] = [
    ("versions", 5.0, step_versions),
    ("selftest", 60.0, step_selftest),
    ("headline", 30.0, step_headline),
    ("scaled_mm_vs_model", 30.0, step_scaled_mm_vs_model),
    ("exactness", 40.0, step_exactness),
    ("timing", 40.0, step_timing),
]
DRY_ESTIMATE = 1.0
#: The default budget on a GPU: the whole run, machine start included, fits about 8 minutes.
GPU_BUDGET_S = 390.0
#: The default budget of the dry run (Triton's interpreter on a CPU is slow; the budget only bounds it).
DRY_BUDGET_S = 3600.0


# ---- the summary -----------------------------------------------------------------------------


def _f(value: Any, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, float) else "n/a"


def text_summary(report: dict[str, Any]) -> str:
    """The short text summary: versions, every step's status, the headline figures."""
    v = report.get("versions", {})
    lines = [(f"device check ({'DRY RUN, CPU interpreter' if report.get('dry_run') else 'GPU'}), "
              f"{report.get('elapsed_s', 0):.0f} s of a {report.get('budget_s', 0):.0f} s budget"),
             (f"GPU {v.get('gpu')} {v.get('sm', '')}, driver {v.get('driver')}, torch {v.get('torch')} "
              f"(CUDA {v.get('cuda_runtime')}), triton {v.get('triton')}, cuBLASLt {v.get('cublaslt')}, "
              f"mmaemu {v.get('mmaemu')}")]
    for step in report.get("steps", []):
        extra = step.get("reason") or step.get("error") or ""
        lines.append(f"  {step['name']:20} {step['status'].upper():8} {step.get('seconds', 0):7.1f} s  {extra}"[:300])
    steps = {s["name"]: s for s in report.get("steps", [])}
    head = (steps.get("headline") or {}).get("result") or {}
    if head:
        lines.append(f"headline {head.get('shape')} (hopper E4M3 fast, bf16 out), TMAC/s:")
        lines.append(f"  sm_90 formulation: end to end {_f(head.get('native_e2e_tmacs'))}, kernel "
                     f"{_f(head.get('native_kernel_tmacs'))}, differing {head.get('native_differing', 'n/a')}")
        lines.append(f"  exactly-defined ({head.get('rz_kernel')}): end to end {_f(head.get('rz_e2e_tmacs'))}, "
                     f"accumulate {_f(head.get('rz_accumulate_tmacs'))}, differing {head.get('rz_differing', 'n/a')}")
        lines.append(f"  torch._scaled_mm: {_f(head.get('torch_scaled_mm_tmacs'))} {head.get('torch_scaled_mm_note', '')}")
        lines += [f"  {key}: {head[key]}" for key in ("native_e2e_error", "rz_e2e_error") if key in head]
        if "native_bar_met" in head:
            lines.append(f"  bar (sm_90 formulation >= {NATIVE_TARGET_TMACS} TMAC/s end to end, exact): "
                         f"{'met' if head['native_bar_met'] else 'NOT met'}")
    cmp_ = (steps.get("scaled_mm_vs_model") or {}).get("result") or {}
    for r in cmp_.get("rows", []) if isinstance(cmp_, dict) else []:
        if r.get("status") != "exact":
            lines.append(f"  torch._scaled_mm {r['shape']} {r['out']} {'fast' if r['fast'] else 'slow'}: {r['status']}"
                         f" (model split {r.get('model_split')}, matching S {r.get('matching_contiguous_split')})")
    lines.append(f"exit status {exit_status(report)}")
    return "\n".join(lines) + "\n"


# ---- main ------------------------------------------------------------------------------------


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT") or ".", help="report directory (default $OUT or .)")
    p.add_argument("--budget-s", type=float, default=None,
                   help=f"skip steps that would run past this (s; default {GPU_BUDGET_S:.0f}, {DRY_BUDGET_S:.0f} dry)")
    p.add_argument("--record-min-s", type=float, default=240.0,
                   help="record the device only when at least this much of the budget remains (s)")
    p.add_argument("--dry-run", action="store_true", help="CPU, Triton interpreter, tiny shapes")
    p.add_argument("--device", default="cuda", help="device (default cuda; cpu with --dry-run)")
    p.add_argument("--max-cases", type=int, default=None, help="run only the first N exactness cases")
    return p.parse_args(argv)


def run(argv: list[str] | None = None) -> int:
    """Run the check; returns the exit status."""
    args = _parse(argv)
    if args.budget_s is None:
        args.budget_s = DRY_BUDGET_S if args.dry_run else GPU_BUDGET_S
    os.environ["PYTHONUNBUFFERED"] = "1"
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before the kernels are first imported
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import torch

    device = torch.device("cpu" if args.dry_run else args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: use --dry-run to check the script on the CPU", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"tool": "tools/device_check.py", "dry_run": bool(args.dry_run),
                              "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              "budget_s": args.budget_s, "record_min_s": args.record_min_s, "steps": []}
    with (out / "device_check.log").open("a") as log:
        ctx = Context(args, device, bool(args.dry_run), time.perf_counter(), out, report, log)
        write_report(ctx)
        for name, estimate, fn in STEPS:
            run_step(ctx, name, DRY_ESTIMATE if ctx.dry else estimate, fn)
        run_step(ctx, "recording", DRY_ESTIMATE if ctx.dry else args.record_min_s, step_recording)
        status = exit_status(report)
        report["exit_status"] = status
        write_report(ctx)
        ctx.say(f"done: exit status {status}")
    print(text_summary(report), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(run())
