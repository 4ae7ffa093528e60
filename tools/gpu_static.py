"""Static analysis of the Triton backend's kernels for NVIDIA GPUs, on a machine without one.

Usage::

    python tools/gpu_static.py                       # every target; writes docs/data/gpu_static.json
    python tools/gpu_static.py --targets sm_90 --no-write   # one target, print only (CI)
    python tools/gpu_static.py --check               # exit 1 if docs/data/gpu_static.json is stale

For every kernel variant (each preset the Triton backend expresses, with the launch tile it uses,
plus a sweep of tiles for hopper) and every target (sm_80, sm_86, sm_89, sm_90, sm_100, sm_120) it

1. compiles the kernel with Triton for that target (no GPU needed: Triton's own ptxas);
2. reads registers and the stack frame (spilled registers: the kernels hold no local arrays) with
   ``cuobjdump -res-usage``, and disassembles the cubin with ``nvdisasm``, both shipped in Triton's
   wheel;
3. finds the loops (backward branches): the innermost loops iterate once per k step, their
   enclosing loop once per block of B products (asserted: one enclosing loop);
4. counts the SASS instructions of one k step of one thread by class (the opcode without its
   modifiers: ``F2I``, ``FMUL``, ``IMAD``, ``IADD3``, ``LDG``, ...), the block loop's own
   instructions divided by B, and divides by the multiply-accumulates one thread does per k step
   (``BLOCK_M * BLOCK_N / (32 * num_warps)``): SASS instructions per multiply-accumulate;
5. estimates an upper bound of the speed per named GPU: each class runs on one pipeline of the
   SM, and a multiply-accumulate costs the largest of its issue time and its pipelines' times
   (below), times the fraction of the last wave the grid fills at M, N, K = 2048, 5760, 1920.

[Note: the rates] Instruction throughput per SM per clock, from the CUDA C++ Programming Guide
(section "Arithmetic Instructions", table "Throughput of Native Arithmetic Instructions"): 32-bit
floating-point add, multiply, multiply-add 64 on compute capability 8.0, 128 on 8.6, 8.9, 9.0, 10.0
and 12.0; 32-bit integer add, logical, shift, compare, min/max and 32-bit integer multiply-add 64;
conversions to and from 32-bit types 16. Pipeline of each instruction, from the Nsight Compute
Kernel Profiling Guide (section "Pipelines"): ``fma`` (FP32 arithmetic and IMAD; IMAD only on its
``fmaheavy`` half, so IMAD gets 64 per clock), ``alu`` (integer and logic, compares, min/max,
moves, select, permute), ``xu`` (conversions, transcendentals), ``lsu`` (loads and stores, 32
threads per clock per SM), and every instruction takes an issue slot (4 schedulers, one warp
instruction each per clock: 128 threads per clock per SM). SM counts and boost clocks: NVIDIA's
product pages and whitepapers (the B200's clock as reported in published reviews). The estimate
ignores memory latency, dependencies and occupancy: it is a ceiling, not a prediction.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
JSON = REPO / "docs" / "data" / "gpu_static.json"

TARGETS = {"sm_80": 80, "sm_86": 86, "sm_89": 89, "sm_90": 90, "sm_100": 100, "sm_120": 120}
#: the shape of the estimate (an Evo 2 1B projection with 2048 tokens), hopper E4M3 fast accumulation.
SHAPE = (2048, 5760, 1920)
REGISTERS_PER_SM = 65536


@dataclass(frozen=True)
class Rates:
    """Threads per clock per SM: issue slots and each pipeline; resident warps per SM."""

    fp32: int
    imad: int = 64
    alu: int = 64
    xu: int = 16
    lsu: int = 32
    issue: int = 128
    max_warps: int = 64
    #: dense FP8 tensor-core multiply-accumulates per clock per SM (0: not used by the kernels there)
    tensor_fp8: int = 0


RATES = {
    80: Rates(fp32=64),
    86: Rates(fp32=128, max_warps=48),
    89: Rates(fp32=128, max_warps=48),
    90: Rates(fp32=128, tensor_fp8=4096),
    100: Rates(fp32=128),
    120: Rates(fp32=128, max_warps=48),
}


@dataclass(frozen=True)
class GPU:
    target: str
    sms: int
    boost_mhz: int
    #: DRAM bandwidth, GB/s (product pages)
    dram_gbs: int


GPUS = {
    "RTX 4060": GPU("sm_89", 24, 2460, 272),
    "A100": GPU("sm_80", 108, 1410, 2039),
    "L40S": GPU("sm_89", 142, 2520, 864),
    "H100 PCIe": GPU("sm_90", 114, 1755, 2000),
    "H100 SXM": GPU("sm_90", 132, 1980, 3350),
    "H200": GPU("sm_90", 132, 1980, 4800),
    "B200": GPU("sm_100", 148, 1965, 8000),
    "RTX 5070 Ti": GPU("sm_120", 70, 2452, 896),
    "RTX 5090": GPU("sm_120", 170, 2407, 1792),
}

#: opcode -> pipeline (anything else: alu; U* uniform-datapath and control instructions take an
#: issue slot only).
FP32 = {"FADD", "FMUL", "FFMA", "FADD32I", "FMUL32I", "FFMA32I", "FSWZADD",
        "FADD2", "FMUL2", "FFMA2", "HADD2", "HMUL2", "HFMA2"}  # sm_100's paired fp32, and fp16x2
IMAD = {"IMAD", "IMAD32I", "IMUL", "IMUL32I"}
XU = {"F2I", "I2F", "F2F", "FRND", "MUFU", "I2I", "F2FP", "I2FP"}
LSU = {"LDG", "LDS", "LD", "LDL", "STG", "STS", "ST", "STL", "LDSM", "LDGSTS", "ATOM", "ATOMS", "RED", "LDC"}
TENSOR = {"QGMMA", "HGMMA", "IGMMA", "HMMA", "IMMA", "QMMA"}
CONTROL = {"BRA", "BRX", "JMP", "EXIT", "RET", "CALL", "BSSY", "BSYNC", "WARPSYNC", "NOP", "BAR", "YIELD",
           "DEPBAR", "MEMBAR", "ERRBAR", "CCTL"}


def pipeline(opcode: str) -> str:
    if opcode in TENSOR:
        return "tensor"
    if opcode in FP32:
        return "fp32"
    if opcode in IMAD:
        return "imad"
    if opcode in XU:
        return "xu"
    if opcode in LSU:
        return "lsu"
    if opcode in CONTROL or opcode.startswith("U") or opcode == "S2UR":
        return "issue"
    return "alu"


# ---- compiling -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One compiled specialisation of the kernel: the preset's block and fraction bits, the tile."""

    preset: str
    block: int
    frac: int
    block_m: int
    block_n: int
    num_warps: int
    kernel: str = "chain_gemm_rz"
    #: the specialisation for one part of one chain (fast accumulation without a split: the shape of
    #: the estimate); the general one carries the split-K combination state.
    one_chain: bool = True
    #: chain_gemm_native: k per tl.dot (one inner-loop iteration)
    dot_k: int = 0

    @property
    def name(self) -> str:
        chain = "" if self.kernel != "chain_gemm_rz" else (" one-chain" if self.one_chain else " general")
        return (f"{self.kernel}{chain} {self.preset}[B={self.block},F={self.frac}] "
                f"{self.block_m}x{self.block_n}/{self.num_warps}w")

    @property
    def macs_per_thread_per_k(self) -> float:
        """Multiply-accumulates of one thread per iteration of the innermost loop."""
        per_k = self.block_m * self.block_n / (32 * self.num_warps)
        return per_k * self.dot_k if self.kernel == "chain_gemm_native" else per_k

    @property
    def inner_per_outer(self) -> int:
        """Iterations of the innermost loop per iteration of its enclosing loop at :data:`SHAPE`: B (a block
        of k steps), or for the native kernel the dots of one chain (K / DOT_K)."""
        return SHAPE[2] // self.dot_k if self.kernel == "chain_gemm_native" else self.block

    @property
    def targets(self) -> tuple[str, ...]:
        """The targets this variant is compiled for: the native kernel runs on sm_90 only."""
        return ("sm_90",) if self.kernel == "chain_gemm_native" else tuple(TARGETS)

    def global_bytes(self, k: int) -> int:
        """Bytes one program reads and writes in DRAM at depth ``k`` (no cache reuse): its rows of a and b
        (fp8 codes for the native kernel; max(v, 0), max(-v, 0) and the exponent, 12 bytes, for RZ; value
        and exponent, 5 bytes, for the first formulation) and its fp32 outputs."""
        per = {"chain_gemm_native": 1, "chain_gemm_rz": 12, "chains_rz": 12}.get(self.kernel, 5)
        return (self.block_m + self.block_n) * k * per + 4 * self.block_m * self.block_n


def variants(tile_sweep: bool = True) -> list[Variant]:
    """The backend's variants (each expressed preset, its default GPU tile), then the tile sweep."""
    from mmaemu.backends.triton.backend import (
        GPU_CONFIG,
        NATIVE_GPU_CONFIG,
        RZ_GENERAL_GPU_CONFIG,
        RZ_GPU_CONFIG,
        SMALL_GRID_TILES,
        expresses,
        rz_expresses,
    )
    from mmaemu.presets import presets

    out = []
    for name, preset in sorted(presets().items()):
        if expresses(preset):
            rz = rz_expresses(preset)
            for one_chain in ((True, False) if rz else (True,)):
                cfg = (RZ_GPU_CONFIG if one_chain else RZ_GENERAL_GPU_CONFIG) if rz else GPU_CONFIG
                out.append(Variant(name, preset.block_size, preset.frac_bits, cfg.block_m, cfg.block_n,
                                   cfg.num_warps, "chain_gemm_rz" if rz else "chain_gemm", one_chain))
    hopper = presets()["hopper"]
    out.append(Variant("hopper", hopper.block_size, hopper.frac_bits, NATIVE_GPU_CONFIG.block_m,
                       NATIVE_GPU_CONFIG.block_n, NATIVE_GPU_CONFIG.num_warps, "chain_gemm_native", True,
                       dot_k=hopper.block_size))
    if tile_sweep:  # the few-outputs launches (backend.choose_launch): one chain, and a chain per program
        for name in ("hopper", "ada"):
            preset = presets()[name]
            for t in SMALL_GRID_TILES:
                for kernel in ("chain_gemm_rz", "chains_rz"):
                    v = Variant(name, preset.block_size, preset.frac_bits, t.block_m, t.block_n, t.num_warps, kernel)
                    if v not in out:
                        out.append(v)
    if tile_sweep:
        hopper = presets()["hopper"]
        for kernel in ("chain_gemm_rz", "chain_gemm"):
            for bm, bn, w in ((64, 64, 8), (32, 64, 4), (64, 64, 4), (128, 32, 4), (64, 128, 8), (128, 64, 4),
                              (128, 64, 8), (128, 128, 8)):
                v = Variant("hopper", hopper.block_size, hopper.frac_bits, bm, bn, w, kernel)
                if v not in out:
                    out.append(v)
    return out


def _tool(name: str) -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


SIGNATURE = {"va_ptr": "*fp32", "ea_ptr": "*i8", "vb_ptr": "*fp32", "eb_ptr": "*i8", "out_ptr": "*fp32",
             "chain_ptr": "*i32", "part_ptr": "*i32", "order_ptr": "*i32", "role_ptr": "*i32",
             "M": "i32", "N": "i32", "n_parts": "i32", "tiles_n": "i32", "BLOCK": "constexpr", "FRAC": "constexpr",
             "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}


SIGNATURE_RZ = {"ap_ptr": "*fp32", "an_ptr": "*fp32", "ea_ptr": "*i32", "bp_ptr": "*fp32", "bn_ptr": "*fp32",
                "eb_ptr": "*i32", "out_ptr": "*fp32", "chain_ptr": "*i32", "part_ptr": "*i32", "order_ptr": "*i32",
                "role_ptr": "*i32", "M": "i32", "N": "i32", "MP": "i32", "NP": "i32", "n_parts": "i32",
                "tiles_n": "i32", "BLOCK": "constexpr", "FRAC": "constexpr", "BLOCK_M": "constexpr",
                "BLOCK_N": "constexpr", "NATIVE_RZ": "constexpr",
                "ONE_CHAIN": "constexpr"}


SIGNATURE_CHAINS = {"ap_ptr": "*fp32", "an_ptr": "*fp32", "ea_ptr": "*i32", "bp_ptr": "*fp32", "bn_ptr": "*fp32",
                    "eb_ptr": "*i32", "out_ptr": "*fp32", "chain_ptr": "*i32", "MP": "i32", "NP": "i32", "tiles": "i32",
                    "tiles_n": "i32", "BLOCK": "constexpr", "FRAC": "constexpr", "BLOCK_M": "constexpr",
                    "BLOCK_N": "constexpr", "NATIVE_RZ": "constexpr"}


SIGNATURE_NATIVE = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "out_ptr": "*fp32", "chain_ptr": "*i32",
                    "chain0": "i32", "M": "i32", "N": "i32", "KP": "i32", "tiles": "i32", "tiles_n": "i32",
                    "DOT_K": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}


def compile_variant(v: Variant, capability: int) -> bytes:
    """The cubin of ``v`` for compute capability ``capability`` (as the backend launches it)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from mmaemu.backends.triton import kernels

    constexprs: dict[str, Any] = {"BLOCK": v.block, "FRAC": v.frac, "BLOCK_M": v.block_m, "BLOCK_N": v.block_n}
    if v.kernel == "chain_gemm_rz":
        src = ASTSource(fn=kernels.chain_gemm_rz_kernel, signature=SIGNATURE_RZ,
                        constexprs={**constexprs, "NATIVE_RZ": True, "ONE_CHAIN": v.one_chain})
    elif v.kernel == "chains_rz":
        src = ASTSource(fn=kernels.chains_rz_kernel, signature=SIGNATURE_CHAINS, constexprs={**constexprs, "NATIVE_RZ": True})
    elif v.kernel == "chain_gemm_native":
        src = ASTSource(fn=kernels.chain_gemm_native_kernel, signature=SIGNATURE_NATIVE,
                        constexprs={"DOT_K": v.dot_k, "BLOCK_M": v.block_m, "BLOCK_N": v.block_n})
    else:
        src = ASTSource(fn=kernels.chain_gemm_kernel, signature=SIGNATURE, constexprs=constexprs)
    compiled = triton.compile(src, target=GPUTarget("cuda", capability, 32),
                              options={"num_warps": v.num_warps, "enable_fp_fusion": False})
    return bytes(compiled.asm["cubin"])


# ---- reading the SASS ------------------------------------------------------------------------

_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)([.A-Z0-9_]*)\s*([^;]*);")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")


@dataclass(frozen=True)
class Instr:
    address: int
    opcode: str
    text: str


def parse_sass(sass: str) -> tuple[list[Instr], dict[str, int]]:
    """The instructions (address, opcode) and the address of each label."""
    instrs: list[Instr] = []
    labels: dict[str, int] = {}
    pending: list[str] = []
    for line in sass.splitlines():
        m = _LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = _INSTR.search(line)
        if m:
            address = int(m.group(1), 16)
            for label in pending:
                labels[label] = address
            pending = []
            instrs.append(Instr(address, m.group(3), line.strip()))
    return instrs, labels


@dataclass(frozen=True)
class Loop:
    start: int
    end: int  # address of the backward branch (inclusive)

    def contains(self, other: Loop) -> bool:
        return self.start <= other.start and other.end <= self.end and self != other


def loops(instrs: list[Instr], labels: dict[str, int]) -> list[Loop]:
    """Loops: a branch to a label at or before it (a branch to itself, the end padding, excluded)."""
    found = []
    for ins in instrs:
        if ins.opcode != "BRA":
            continue
        m = _TARGET.search(ins.text)
        if m and m.group(1) in labels and labels[m.group(1)] < ins.address:
            found.append(Loop(labels[m.group(1)], ins.address))
    return sorted(set(found), key=lambda lp: (lp.start, lp.end))


def count(instrs: list[Instr], start: int, end: int, exclude: list[Loop] = ()) -> dict[str, int]:
    """Opcode counts of the instructions in [start, end], outside the ``exclude`` loops."""
    out: dict[str, int] = {}
    for ins in instrs:
        if start <= ins.address <= end and not any(lp.start <= ins.address <= lp.end for lp in exclude):
            out[ins.opcode] = out.get(ins.opcode, 0) + 1
    return out


def per_mac(sass: str, v: Variant) -> tuple[dict[str, float], dict[str, Any]]:
    """SASS instructions per multiply-accumulate by opcode, and how the loops were read."""
    instrs, labels = parse_sass(sass)
    all_loops = loops(instrs, labels)
    inner = [lp for lp in all_loops if not any(lp.contains(o) for o in all_loops)]
    parents = {min((o for o in all_loops if o.contains(lp)), key=lambda o: o.end - o.start, default=None)
               for lp in inner}
    if v.kernel == "chain_gemm_native" and parents == {None} and len(inner) == 1:
        parents = set()  # one chain per program: the dot loop is the only loop
    elif len(parents) != 1 or None in parents:
        raise RuntimeError(f"{v.name}: expected the per-k loops inside one block loop, found {all_loops}")
    block_loop = parents.pop() if parents else None
    per_k: dict[str, float] = {}
    for lp in inner:
        for op, n in count(instrs, lp.start, lp.end).items():
            per_k[op] = per_k.get(op, 0.0) + n
    if block_loop is not None:
        for op, n in count(instrs, block_loop.start, block_loop.end, exclude=inner).items():
            per_k[op] = per_k.get(op, 0.0) + n / v.inner_per_outer
    macs = v.macs_per_thread_per_k
    result = {op: round(n / macs, 4) for op, n in sorted(per_k.items(), key=lambda kv: (-kv[1], kv[0]))}
    shape = {"loops": len(all_loops), "per_k_loops": [lp.end - lp.start for lp in inner],
             "macs_per_thread_per_k": macs}
    return result, shape


def resources(cubin: Path) -> dict[str, int]:
    out = subprocess.run([_tool("cuobjdump"), "-res-usage", str(cubin)], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", out)
    if m is None:
        raise RuntimeError(f"cuobjdump -res-usage gave no resource line: {out!r}")
    reg, stack, shared, local = (int(x) for x in m.groups())
    # the kernels hold no local arrays and make no calls: their stack frame is spilled registers
    return {"registers": reg, "spill_bytes": stack + local, "shared_bytes": shared}


# ---- estimates -------------------------------------------------------------------------------


def pipes(counts: dict[str, float]) -> dict[str, float]:
    """Threads' instructions per multiply-accumulate on each pipeline (and in all: issue)."""
    out = {"issue": 0.0, "fp32": 0.0, "imad": 0.0, "alu": 0.0, "xu": 0.0, "lsu": 0.0, "tensor": 0.0}
    for op, n in counts.items():
        out["issue"] += n
        p = pipeline(op)
        if p != "issue":
            out[p] += n
    return {k: round(v, 4) for k, v in out.items()}


def macs_per_clock(p: dict[str, float], rates: Rates) -> tuple[float, str]:
    """Multiply-accumulates per clock per SM, and the bound that sets it."""
    times = {
        "issue": p["issue"] / rates.issue,
        "fma pipe": (p["fp32"] + p["imad"]) / rates.fp32 if rates.fp32 > 64 else (p["fp32"] + p["imad"]) / 64,
        "imad": p["imad"] / rates.imad,
        "alu": p["alu"] / rates.alu,
        "xu": p["xu"] / rates.xu,
        "lsu": p["lsu"] / rates.lsu,
    }
    if p.get("tensor", 0.0) > 0:  # the instruction's own multiply-accumulates, at the tensor cores' rate
        times["tensor"] = 1.0 / rates.tensor_fp8 if rates.tensor_fp8 else math.inf
    bound = max(times, key=lambda k: times[k])
    return 1.0 / times[bound], bound


def wave_fraction(v: Variant, registers: int, gpu: GPU, rates: Rates) -> float:
    """The fraction of the launched waves' program slots that the grid fills at :data:`SHAPE`."""
    m, n, _ = SHAPE
    programs = math.ceil(m / v.block_m) * math.ceil(n / v.block_n)
    threads = 32 * v.num_warps
    per_sm = min(REGISTERS_PER_SM // max(registers * threads, 1), rates.max_warps // v.num_warps)
    slots = max(per_sm, 1) * gpu.sms
    return programs / (math.ceil(programs / slots) * slots)


def analyse(targets: list[str], tile_sweep: bool = True) -> dict[str, Any]:
    import triton

    report: dict[str, Any] = {
        "generated_by": "python tools/gpu_static.py",
        "triton": triton.__version__,
        "shape": list(SHAPE),
        "targets": {},
        "variants": {},
        "estimates": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for variant in variants(tile_sweep):
            rows: dict[str, Any] = {}
            for target in targets:
                if target not in variant.targets:
                    continue
                cubin = Path(tmp) / f"k_{target}.cubin"
                cubin.write_bytes(compile_variant(variant, TARGETS[target]))
                sass = subprocess.run([_tool("nvdisasm"), "-c", str(cubin)], capture_output=True, text=True,
                                      check=True).stdout
                counts, shape = per_mac(sass, variant)
                p = pipes(counts)
                mpc, bound = macs_per_clock(p, RATES[TARGETS[target]])
                rows[target] = {**resources(cubin), "per_mac": counts, "pipes_per_mac": p,
                                "macs_per_clock_per_sm": round(mpc, 2), "bound": bound, "loops": shape}
            report["variants"][variant.name] = rows
    default = variants(tile_sweep=False)
    # what the backend launches for hopper E4M3 fast accumulation without a split: the exactly-defined
    # formulation on every target, and on sm_90 the GPU's own instruction (after its self-test)
    hopper = next(v for v in default if v.preset == "hopper" and v.one_chain and v.kernel != "chain_gemm_native")
    native = next(v for v in default if v.kernel == "chain_gemm_native")
    for target in targets:
        report["targets"][target] = report["variants"][hopper.name][target]
    report["targets_variant"] = hopper.name
    report["targets_native"] = {t: r for t, r in report["variants"].get(native.name, {}).items()}
    report["targets_native_variant"] = native.name
    from mmaemu.backends.triton.backend import GPU_CONFIG

    first = Variant("hopper", hopper.block, hopper.frac, GPU_CONFIG.block_m, GPU_CONFIG.block_n,
                    GPU_CONFIG.num_warps, "chain_gemm")
    report["estimates_convert"] = {}
    report["estimates_rz"] = {}
    for key, choices in (("estimates", (native, hopper)), ("estimates_rz", (hopper,)),
                         ("estimates_convert", (first,))):
        for name, gpu in GPUS.items():
            if gpu.target not in targets:
                continue
            variant = next((v for v in choices if v.name in report["variants"]
                            and gpu.target in report["variants"][v.name]), None)
            if variant is None:
                continue
            report[key][name] = estimate(variant, report["variants"][variant.name][gpu.target], gpu)
    return report


def estimate(variant: Variant, row: dict[str, Any], gpu: GPU) -> dict[str, Any]:
    """The ceiling of ``variant`` on ``gpu`` at :data:`SHAPE`: the SM-side bound (instruction issue, a
    pipeline or the tensor cores) times the fraction of the last wave the grid fills, and the DRAM bound
    (every program reads its rows of a and b and writes its outputs, no cache reuse): the smaller."""
    rates = RATES[TARGETS[gpu.target]]
    fill = wave_fraction(variant, row["registers"], gpu, rates)
    sm_tmacs = row["macs_per_clock_per_sm"] * gpu.sms * gpu.boost_mhz * 1e6 * fill / 1e12
    m, n, k = SHAPE
    programs = math.ceil(m / variant.block_m) * math.ceil(n / variant.block_n)
    seconds = programs * variant.global_bytes(k) / (gpu.dram_gbs * 1e9)
    dram_tmacs = m * n * k / seconds / 1e12
    bound = row["bound"] if sm_tmacs <= dram_tmacs else "dram"
    return {"tmacs": round(min(sm_tmacs, dram_tmacs), 2), "target": gpu.target, "sms": gpu.sms,
            "boost_mhz": gpu.boost_mhz, "dram_gbs": gpu.dram_gbs, "wave_fill": round(fill, 3), "bound": bound,
            "sm_tmacs": round(sm_tmacs, 2), "dram_tmacs": round(dram_tmacs, 2), "variant": variant.name}


def summary(report: dict[str, Any]) -> str:
    lines = [f"triton {report['triton']}; per multiply-accumulate, one thread, {report['targets_variant']}:"]
    classes = ("F2I", "I2F", "FMUL", "FADD", "FFMA", "IMAD", "IADD3", "VIADDMNMX", "IMNMX", "VIMNMX", "SHF",
               "LOP3", "PRMT", "ISETP", "LDG", "LDS")
    lines.append("target  regs spill  issue " + " ".join(f"{c:>6}" for c in classes) + "  MAC/clk/SM bound")
    for target, row in report["targets"].items():
        pm = row["per_mac"]
        lines.append(f"{target:7} {row['registers']:4} {row['spill_bytes']:5} {row['pipes_per_mac']['issue']:6.2f} "
                     + " ".join(f"{pm.get(c, 0.0):6.2f}" for c in classes)
                     + f"  {row['macs_per_clock_per_sm']:9.2f} {row['bound']}")
    for key, what in (("estimates", "what the backend launches"), ("estimates_rz", "the exactly-defined formulation")):
        lines.append(f"{key} ({what}) at M, N, K = {tuple(report['shape'])} (a ceiling):")
        for name, e in report[key].items():
            lines.append(f"  {name:12} {e['tmacs']:8.2f} TMAC/s  ({e['sms']} SMs, {e['boost_mhz']} MHz, "
                         f"wave fill {e['wave_fill']:.2f}, bound {e['bound']}; {e['variant']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    parser.add_argument("--no-sweep", action="store_true", help="only the backend's own variants")
    parser.add_argument("--no-write", action="store_true", help="print, do not write the JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 if the JSON differs from a fresh run")
    parser.add_argument("--json", type=Path, default=JSON)
    args = parser.parse_args(argv)
    report = analyse(args.targets, tile_sweep=not args.no_sweep)
    print(summary(report))
    text = json.dumps(report, indent=1, sort_keys=True) + "\n"
    if args.check:
        stored = json.loads(args.json.read_text()) if args.json.exists() else None
        if stored != json.loads(text):
            print(f"{args.json} is stale: run python tools/gpu_static.py", file=sys.stderr)
            return 1
        return 0
    if not args.no_write:
        args.json.write_text(text)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
