"""``python -m mmaemu bench``: the backends' speed against torch's native kernels, bits checked first.

For each shape ``M x N x K`` (``--shape MxNxK``, the order of ``explain M N K``; E4M3 operands drawn from a
seeded generator, bf16 output, scales 1), printed and written in that order:

1. the cpu and reference backends' outputs are compared bit for bit (nothing is timed before); above
   :data:`FULL_CHECK_MACS` on the first and last :data:`CHECK_ROWS` rows of ``a`` (every column);
2. median times of the reference backend (above that size on those rows, scaled to all rows), the
   cpu backend and torch's fp32 matmul of the same operands (``x.float() @ w.float().t()``), the
   last two interleaved and also as process CPU time (robust to other processes' load on a shared
   machine), and torch's native CPU ``torch._scaled_mm`` where it exists;
3. with ``--configs``, the cpu backend's time for the other configurations of the bars (ada, slow
   accumulation, E5M2 x E4M3; a split call with S = 4), each checked against the reference first, as
   a ratio to the first configuration;
4. with ``--zoo``, at the last shape only, the cpu backend's ``accumulate`` time per
   multiply-accumulate for the zoo formats (fp16, bf16, tf32 on every architecture that has them) as
   a ratio to its E4M3 ``accumulate`` time (hopper, fast) at the same shape, each checked against
   the reference backend on :data:`ZOO_CHECK_ROWS` rows first (so one run gives both bars: list
   the zoo's shape last);
5. with ``--first-call``, the latency of the first cpu-backend call in a fresh process, with an
   empty numba cache (compilation) and with the on-disk cache of the previous run;
6. with ``--block-scaled [KERNEL]``, the cpu backend's :func:`mmaemu.block_scaled_mm` (the kernel model, default
   ``deepgemm-sm90``; 1 x 128 and 128 x 128 fp32 scales drawn from a seeded generator) at each shape, its bits
   checked against the reference backend first (on the rows step 1 checks), timed interleaved with the base
   configuration's ``mmaemu.scaled_mm`` on the same operands: the ratio of the two, measured in one run.

The figures are ratios measured in one run on one machine; ``--json`` writes them all.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import TextIO

import torch

from ._shape_only import shape_only_operands
from ._call import scaled_mm
from ._plan import explain
from .testing import assert_bitwise_equal
from ._version import __version__

__all__ = ["CONFIGS", "Config", "bench_bytes", "block_row", "cpu_name", "first_call_latency", "main_bench", "median_time",
           "refusal", "run", "zoo_rows"]


@dataclass(frozen=True)
class Config:
    """One benchmarked call configuration (a row of the issue's bars)."""

    label: str
    profile: str
    fast: bool
    fmt_a: torch.dtype
    fmt_b: torch.dtype
    splitk: int | tuple[int, str]


#: The first configuration is the base of the ratios; the others are timed with ``--configs``.
CONFIGS = (
    Config("hopper, E4M3 x E4M3, fast", "hopper", True, torch.float8_e4m3fn, torch.float8_e4m3fn, 1),
    Config("ada, E5M2 x E4M3, slow", "ada", False, torch.float8_e5m2, torch.float8_e4m3fn, 1),
    Config("hopper, E4M3 x E4M3, fast, split S = 4 (contiguous)", "hopper", True, torch.float8_e4m3fn,
           torch.float8_e4m3fn, (4, "contiguous")),
)


def median_time(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``repeat`` calls of ``fn``, in seconds."""
    times = []
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved_times(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, tuple[float, float]]:
    """(median wall time, median process CPU time) of each of ``fns``, their calls interleaved.

    The calls alternate (a, b, a, b, ...), so a change in the machine's load between them touches
    every function alike; the process CPU time (all threads) counts what the computation itself
    used, which another process's load on a shared machine inflates less than the wall time.
    """
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(max(1, repeat)):
        for name, fn in fns.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return {name: (statistics.median(wall[name]), statistics.median(cpu[name])) for name in fns}


#: Above this many multiply-accumulates the reference backend (about 0.5 GMAC/s on two cores) is
#: run on :data:`CHECK_ROWS` rows at each end of ``a`` only, for the bit check and for its time
#: (scaled to all rows: its cost is linear in M).
FULL_CHECK_MACS = 4e9
CHECK_ROWS = 64


def _checked_rows(m: int, macs: int) -> torch.Tensor | None:
    """The rows of ``a`` the reference backend computes (None: all of them)."""
    if macs <= FULL_CHECK_MACS or m <= 2 * CHECK_ROWS:
        return None
    return torch.cat([torch.arange(CHECK_ROWS), torch.arange(m - CHECK_ROWS, m)])


def bench_bytes(m: int, n: int, k: int) -> int:
    """A lower bound of the bytes the bench of ``M x N x K`` holds at once: while the cpu backend and the fp32
    matmul are timed, the FP8 operands (1 byte an element), their fp32 copies (4) and the matmul's fp32
    output (4 bytes an output). A shape above the machine's memory cannot be benched there."""
    return 5 * (m + n) * k + 4 * m * n


def _operands(m: int, n: int, k: int, config: Config) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(m, k, generator=gen) * 40).clamp(-448, 448).to(config.fmt_a)
    w = (torch.randn(n, k, generator=gen) * 40).clamp(-448, 448).to(config.fmt_b)
    return x, w


def refusal(m: int, n: int, k: int, config: Config) -> str | None:
    """Why ``scaled_mm`` would refuse ``config`` at shape ``M x N x K`` (``"Class: message"``), or None.

    Planned from the shape alone (:func:`mmaemu._shape_only.shape_only_operands`): nothing is allocated.
    """
    x, wt = shape_only_operands(m, n, k, config.fmt_a, config.fmt_b)
    one = torch.tensor(1.0)
    plan = explain(x, wt, one, one, out_dtype=torch.bfloat16, use_fast_accum=config.fast, profile=config.profile,
                   splitk=config.splitk, backend="cpu")
    if plan.ok:
        return None
    return ": ".join(plan.validation) if isinstance(plan.validation, tuple) else str(plan.validation)


def _caller(x: torch.Tensor, w: torch.Tensor, config: Config) -> Callable[..., torch.Tensor]:
    one = torch.tensor(1.0)

    def call(backend: str, rows: torch.Tensor | None = None) -> torch.Tensor:
        xr = x if rows is None else x[rows]
        return scaled_mm(xr, w.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=config.fast,
                         profile=config.profile, splitk=config.splitk, backend=backend)

    return call


def _check_bits(call: Callable[..., torch.Tensor], rows: torch.Tensor | None) -> None:
    """The cpu backend's output equals the reference backend's, bit for bit (on ``rows`` of ``a``, or all)."""
    got = call("cpu")
    assert_bitwise_equal(got if rows is None else got[rows], call("reference", rows))


_FIRST_CALL = """
import time, torch
import mmaemu
a = torch.ones(4, 64).to(torch.float8_e4m3fn)
start = time.perf_counter()
mmaemu.accumulate(a, a, use_fast_accum=True, splitk=1, backend="cpu")
print(time.perf_counter() - start)
"""


#: Rows of ``a`` on which each zoo configuration is checked against the reference backend (whose
#: float64 arithmetic takes tens of seconds for 8 rows of 4096 x 4096 on a loaded 2-core machine;
#: ``tests/unit/test_differential.py`` checks the zoo kernels bit for bit on every path).
ZOO_CHECK_ROWS = 8


def zoo_rows(m: int, n: int, k: int, repeat: int) -> list[dict[str, object]]:
    """The cpu backend's ``accumulate`` time for each zoo (architecture, format) over its E4M3 time, at
    ``M x N x K``.

    The operands are drawn once (normal values, seeded) and converted to each format; each
    configuration's bits are checked against the reference backend on the first
    :data:`ZOO_CHECK_ROWS` rows of ``a`` before it is timed.
    """
    import warnings

    from ._call import accumulate
    from .errors import ExperimentalPresetWarning
    from .presets import ZOO
    from .quantization import round_to_tf32

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(m, k, generator=gen)
    w = torch.randn(n, k, generator=gen)
    rows: list[dict[str, object]] = []

    def timed(a: torch.Tensor, b: torch.Tensor, preset: str | None) -> tuple[float, float]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalPresetWarning)
            assert_bitwise_equal(accumulate(a[:ZOO_CHECK_ROWS], b, use_fast_accum=True, backend="cpu", preset=preset),
                                 accumulate(a[:ZOO_CHECK_ROWS], b, use_fast_accum=True, backend="reference",
                                            preset=preset))
            run = partial(accumulate, a, b, use_fast_accum=True, backend="cpu", preset=preset)
            return interleaved_times({"run": run}, repeat)["run"]

    base, base_process = timed(x.clamp(-448, 448).to(torch.float8_e4m3fn), w.clamp(-448, 448).to(torch.float8_e4m3fn),
                               None)
    macs = m * n * k
    print(f"\nzoo: cpu accumulate at M, N, K = {m}, {n}, {k}, time per multiply-accumulate over E4M3's "
          f"(hopper, fast: {base * 1e3:.1f} ms, {macs / base / 1e9:.2f} GMAC/s):")
    for (arch, fmt), preset in ZOO.items():
        if fmt.short_name == "tf32":
            a, b = round_to_tf32(x), round_to_tf32(w)
        else:
            a, b = x.to(fmt.dtype), w.to(fmt.dtype)
        t, t_process = timed(a, b, arch.value)
        rows.append({"preset": arch.value, "format": fmt.short_name, "block_size": preset.block_size,
                     "cpu_s": t, "e4m3_cpu_s": base, "over_e4m3": t / base, "cpu_process_s": t_process,
                     "e4m3_cpu_process_s": base_process, "over_e4m3_process": t_process / base_process})
        print(f"  {arch.value:7s} {fmt.short_name}  B = {preset.block_size:2d}  {t * 1e3:9.1f} ms  "
              f"{macs / t / 1e9:6.2f} GMAC/s  {t / base:5.2f}x E4M3 (wall), {t_process / base_process:5.2f}x (CPU time)")
    return rows


def block_row(m: int, n: int, k: int, kernel: str, base: Config, repeat: int,
              rows: torch.Tensor | None) -> dict[str, object]:
    """The cpu backend's block-scaled GEMM as ``kernel`` against ``scaled_mm`` of ``base`` on the same operands."""
    import warnings

    from ._blockwise import block_scaled_mm
    from .errors import UnrecordedKernelWarning

    x, w = _operands(m, n, k, replace(base, fmt_a=torch.float8_e4m3fn, fmt_b=torch.float8_e4m3fn))
    gen = torch.Generator().manual_seed(1)
    sa = torch.rand(m, -(-k // 128), generator=gen) * 2.0**-6 + 2.0**-8
    sw = torch.rand(-(-n // 128), -(-k // 128), generator=gen) * 2.0**-6 + 2.0**-8
    block = partial(block_scaled_mm, x, sa, w, sw, kernel=kernel, backend="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnrecordedKernelWarning)
        got, xr = block(), x if rows is None else x[rows]
        want = block_scaled_mm(xr, sa if rows is None else sa[rows], w, sw, kernel=kernel, backend="reference")
        assert_bitwise_equal(got if rows is None else got[rows], want)
        timed = interleaved_times({"block": block, "scaled_mm": partial(_caller(x, w, base), "cpu")}, repeat)
    (t, t_process), (t_base, t_base_process) = timed["block"], timed["scaled_mm"]
    print(f"  cpu, block-scaled as {kernel} (1x128 x 128x128 fp32 scales) {t * 1e3:8.1f} ms = {t / t_base:.2f}x "
          f"mmaemu.scaled_mm ({base.label}) in this run (wall; {t_process / t_base_process:.2f}x CPU time)")
    return {"kernel": kernel, "cpu_s": t, "scaled_mm_cpu_s": t_base, "over_scaled_mm": t / t_base,
            "cpu_process_s": t_process, "scaled_mm_cpu_process_s": t_base_process,
            "over_scaled_mm_process": t_process / t_base_process}


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``; ``platform.processor()`` elsewhere)."""
    import platform

    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def first_call_latency() -> dict[str, float]:
    """Seconds of the first cpu-backend call in a fresh process: compiling, and from the disk cache.

    ``cold_s`` runs with an empty ``NUMBA_CACHE_DIR`` (numba compiles every kernel); ``warm_s`` runs
    twice with the same cache directory and reports the second process (kernels loaded from disk).
    Interpreter start-up and ``import mmaemu`` are not included.
    """
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for key in ("cold_s", "warm_s"):
            proc = subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env, capture_output=True, text=True,
                                  check=True)
            out[key] = float(proc.stdout.strip().splitlines()[-1])
    return out


def _progress(text: str) -> None:
    """One line on stderr while a step runs (the table itself goes to stdout)."""
    print(f"bench: {text} ...", file=sys.stderr, flush=True)


def _native_time(x: torch.Tensor, w: torch.Tensor, repeat: int, row: dict[str, object]) -> None:
    """torch's own ``_scaled_mm`` on this machine, timed into ``row`` (None and torch's reason where it refuses)."""
    one = torch.tensor(1.0)
    try:
        native = partial(torch._scaled_mm, x, w.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True)

        native()
        row["torch_native_scaled_mm_s"] = median_time(native, repeat)
    except (RuntimeError, NotImplementedError) as exc:
        row["torch_native_scaled_mm_s"] = None
        row["torch_native_scaled_mm_note"] = str(exc).splitlines()[0]


def _print_row(row: dict[str, object], label: str, rows: torch.Tensor | None) -> None:
    """One shape's table (and its TMAC/s figures added to ``row``)."""
    shape = row["shape"]
    assert isinstance(shape, list)
    m, n, k = (int(v) for v in shape)
    macs = m * n * k
    print(f"\nM, N, K = {m}, {n}, {k} ({macs / 1e9:.2f} GMAC), {label}, bf16 output, median times:")
    for key, name in (("reference_s", "reference backend"), ("cpu_s", "cpu backend"),
                      ("torch_fp32_matmul_s", "torch fp32 matmul"), ("torch_native_scaled_mm_s", "torch native _scaled_mm")):
        t = row.get(key)
        if isinstance(t, float):
            row[key[:-2] + "_tmacs"] = macs / t / 1e12
            print(f"  {name:26s} {t * 1e3:10.1f} ms  {macs / t / 1e12:8.4f} TMAC/s")
        else:
            print(f"  {name:26s} unavailable ({row.get('torch_native_scaled_mm_note')})")
    scaled = "" if rows is None else f" (the reference backend on {rows.numel()} rows, its time scaled to {m})"
    print(f"  reference / cpu = {row['reference_over_cpu']:.1f}x{scaled}; "
          f"cpu / fp32 matmul = {row['cpu_over_fp32_matmul']:.2f}x (wall), "
          f"{row['cpu_over_fp32_matmul_process']:.2f}x (process CPU time)")


def _config_rows(m: int, n: int, k: int, rows: torch.Tensor | None, repeat: int, base_s: float) -> list[dict[str, object]]:
    """The cpu backend under every other configuration, bits checked first, against the base's time."""
    others: list[dict[str, object]] = []
    for config in CONFIGS[1:]:
        refused = refusal(m, n, k, config)
        if refused is not None:  # e.g. S = 4 parts for a K of fewer k-tiles: not a call a GPU makes
            others.append({"config": config.label, "cpu_s": None, "refused": refused})
            print(f"  cpu, {config.label:44s} not timed: the call is refused ({refused.splitlines()[0]})")
            continue
        xc, wc = _operands(m, n, k, config)
        other = _caller(xc, wc, config)
        _check_bits(other, rows)
        t = median_time(partial(other, "cpu"), repeat)
        others.append({"config": config.label, "cpu_s": t, "over_base": t / base_s})
        print(f"  cpu, {config.label:44s} {t * 1e3:8.1f} ms = {t / base_s:.2f}x the base")
    return others


def _shape_row(m: int, n: int, k: int, base: Config, repeat: int,
               native: bool = True) -> tuple[dict[str, object], torch.Tensor | None]:
    """One shape under the base configuration: bits checked, then the reference backend, the cpu backend,
    torch's fp32 matmul and (with ``native``) torch's native ``_scaled_mm`` timed. Returns the row and the
    reference's rows."""
    macs = m * n * k
    x, w = _operands(m, n, k, base)
    call = _caller(x, w, base)
    rows = _checked_rows(m, macs)
    _progress(f"M, N, K = {m}, {n}, {k}: checking that the cpu and reference backends agree bit for bit")
    _check_bits(call, rows)  # bits first (this also compiles the kernels)
    row: dict[str, object] = {"shape": [m, n, k], "macs": macs, "config": base.label,
                              "reference_rows": m if rows is None else int(rows.numel())}
    _progress(f"M, N, K = {m}, {n}, {k}: timing the reference backend")
    ref_s = median_time(partial(call, "reference", rows), 1 if macs > 2e9 else 3)
    row["reference_s"] = ref_s if rows is None else ref_s * m / rows.numel()
    xf, wf = x.float(), w.float()
    _progress(f"M, N, K = {m}, {n}, {k}: timing the cpu backend and torch's fp32 matmul, {repeat} runs each")
    timed = interleaved_times({"cpu": partial(call, "cpu"), "mm": partial(torch.matmul, xf, wf.t())}, repeat)
    row["cpu_s"], row["cpu_process_s"] = timed["cpu"]
    row["torch_fp32_matmul_s"], row["torch_fp32_matmul_process_s"] = timed["mm"]
    row["cpu_over_fp32_matmul_process"] = timed["cpu"][1] / timed["mm"][1]
    if native:
        _native_time(x, w, repeat, row)
    else:
        row["torch_native_scaled_mm_s"] = None
        row["torch_native_scaled_mm_note"] = "not timed (--no-native)"
    row["reference_over_cpu"] = float(row["reference_s"]) / float(row["cpu_s"])  # type: ignore[arg-type]
    row["cpu_over_fp32_matmul"] = float(row["cpu_s"]) / float(row["torch_fp32_matmul_s"])  # type: ignore[arg-type]
    return row, rows


def run(shapes: list[tuple[int, int, int]], *, repeat: int, configs: bool, first_call: bool,
        json_path: str | None, profile: str = "hopper", zoo: bool = False, native: bool = True,
        block_kernel: str | None = None) -> dict[str, object]:
    """Run the benchmark on ``shapes`` (each ``(M, N, K)``), print its table, and return (and optionally
    write) the figures (each row's ``shape`` is ``[M, N, K]``)."""
    base = replace(CONFIGS[0], label=CONFIGS[0].label.replace("hopper", profile, 1), profile=profile)
    from .backends import _cpu_fp8

    kernel = "avx512 (mmaemu.backends._cpu_fp8)" if _cpu_fp8.available() else "portable"
    results: list[dict[str, object]] = []
    report: dict[str, object] = {"version": __version__, "torch": torch.__version__,
                                 "threads": torch.get_num_threads(), "cpu": cpu_name(), "cpu_fp8_kernel": kernel,
                                 "results": results}
    print(f"mmaemu {__version__} bench: torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{report['cpu']}, FP8 kernel: {kernel}")
    for m, n, k in shapes:
        row, rows = _shape_row(m, n, k, base, repeat, native)
        _print_row(row, base.label, rows)
        if configs:
            row["configs"] = _config_rows(m, n, k, rows, repeat, float(row["cpu_s"]))  # type: ignore[arg-type]
        if block_kernel is not None:
            _progress(f"M, N, K = {m}, {n}, {k}: the block-scaled GEMM as {block_kernel}")
            row["block_scaled"] = block_row(m, n, k, block_kernel, base, repeat, rows)
        if zoo and (m, n, k) == tuple(shapes[-1]):
            row["zoo"] = zoo_rows(m, n, k, repeat)
        results.append(row)
    if first_call:
        _progress("the first call in two fresh processes (compiling, then from the cache)")
        latency = first_call_latency()
        report["first_call"] = latency
        print(f"\nfirst cpu-backend call in a fresh process: {latency['cold_s']:.1f} s compiling (empty numba cache), "
              f"{latency['warm_s']:.2f} s with the on-disk cache")
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(report, fh, indent=1)
    return report


def command_line(shapes: list[tuple[int, int, int]], *, repeat: int, configs: bool, first_call: bool,
                 json_path: str | None, profile: str = "hopper", zoo: bool = False, native: bool = True,
                 block_kernel: str | None = None) -> str:
    """The ``python -m mmaemu bench`` command that runs this benchmark (written into its JSON, so that a page
    quoting the figures quotes the command that measured them)."""
    words = ["python", "-m", "mmaemu", "bench"]
    for m, n, k in shapes:
        words += ["--shape", f"{m}x{n}x{k}"]
    if profile != "hopper":
        words += ["--profile", profile]
    words += ["--repeat", str(repeat)]
    words += [flag for flag, on in (("--configs", configs), ("--zoo", zoo), ("--first-call", first_call),
                                    ("--no-native", not native)) if on]
    if block_kernel is not None:
        words += ["--block-scaled", block_kernel]
    if json_path:
        words += ["--json", json_path]
    return shlex.join(words)


def main_bench(shapes: list[tuple[int, int, int]], *, repeat: int, configs: bool, first_call: bool,
               json_path: str | None, profile: str = "hopper", stream: TextIO | None = None,
               zoo: bool = False, native: bool = True, block_kernel: str | None = None) -> int:
    """The ``bench`` command on ``shapes`` (each ``(M, N, K)``): 0 when everything was timed; 1 when bits differ (nothing more is timed);
    2 when the benchmark cannot run here (no cpu backend, a refused base call, an unwritable ``--json``).

    Every shape's base call is checked before anything is timed.
    """
    from .backends import _cpu as cpu

    err = stream or sys.stderr
    usable, why = cpu.available()
    if not usable:
        err.write(f"mmaemu bench: the cpu backend cannot run here ({why}); bench times it against the reference "
                  "backend, so it needs it: pip install numba\n")
        return 2
    base = replace(CONFIGS[0], profile=profile)
    for m, n, k in shapes:
        refused = refusal(m, n, k, base)
        if refused is not None:
            err.write(f"mmaemu bench: the call of shape {m}x{n}x{k} under profile {profile!r} is refused: {refused}\n")
            return 2
    try:
        report = run(shapes, repeat=repeat, configs=configs, first_call=first_call, json_path=None, profile=profile,
                     zoo=zoo, native=native, block_kernel=block_kernel)
    except AssertionError as exc:
        err.write(f"mmaemu bench: the cpu backend's bits differ from the reference backend's; nothing more was "
                  f"timed:\n{exc}\n")
        return 1
    except subprocess.CalledProcessError as exc:
        err.write(f"mmaemu bench: the first-call measurement's process failed (exit {exc.returncode}):\n"
                  f"{exc.stderr}\n")
        return 2
    if json_path:
        report["command"] = command_line(shapes, repeat=repeat, configs=configs, first_call=first_call,
                                         json_path=json_path, profile=profile, zoo=zoo, native=native,
                                         block_kernel=block_kernel)
        report["numba"] = importlib.metadata.version("numba")  # importable: the cpu backend ran
        try:
            with open(json_path, "w") as fh:
                json.dump(report, fh, indent=1)
        except OSError as exc:
            err.write(f"mmaemu bench: cannot write {json_path}: {exc.strerror or exc}\n")
            return 2
    return 0
