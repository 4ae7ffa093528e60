"""Static analysis of the Triton backend's kernels for NVIDIA GPUs, on a machine without one.

Usage::

    python tools/evidence/gpu_static.py                       # every target; writes docs/data/gpu_static.json
    python tools/evidence/gpu_static.py --targets sm_90 --no-sweep --no-write   # one target, print only (CI)
    python tools/evidence/gpu_static.py --check               # exit 1 if docs/data/gpu_static.json is stale
    /other/python tools/evidence/gpu_static.py --json /tmp/old.json             # another Triton's analysis, then
    python tools/evidence/gpu_static.py --also /tmp/old.json  # the newest's, with the other's beside it
    python tools/evidence/gpu_static.py --merge new.json old.json   # or merge two finished analyses

For every kernel variant (each preset the Triton backend expresses, with the launch tiles it uses, the
sm_90 formulation for every FP8 format pair and both accumulation modes, and a few more tiles for
hopper) and every target (sm_80, sm_86, sm_89, sm_90, sm_100, sm_120) it

1. compiles the kernel with Triton for that target (no GPU needed: Triton's own ptxas), with the JIT's
   specialisation at the estimate's shape: every pointer 16-byte aligned and every integer argument the
   kernel does not exclude from specialisation marked divisible by 16 when it is (``tt.divisibility``),
   as Triton's launcher marks them;
2. reads registers and the stack frame (spilled registers: the kernels hold no local arrays) with
   ``cuobjdump -res-usage``, the shared memory from the compiled kernel's metadata, and disassembles
   the cubin with ``nvdisasm``, both shipped in Triton's wheel;
3. finds the loops (backward branches): the innermost loops iterate once per k step, their enclosing
   loop once per block of B products (asserted: one enclosing loop); the sm_90 kernel has one loop,
   once per ``tl.dot``;
4. counts the SASS instructions of one k step of one thread by class (the opcode without its
   modifiers), the block loop's own instructions divided by B, and divides by the multiply-accumulates
   one thread does per k step: SASS instructions per multiply-accumulate;
5. estimates per named GPU at M, N, K = 2048, 5760, 1920 two figures (``docs/backends.md`` says
   which is which):

   - the **ceiling** (``estimates``): each class runs on one pipeline of the SM, and a
     multiply-accumulate costs the largest of its issue time and its pipelines' times, times the
     fraction of the last wave the grid fills; and DRAM, every program reading its rows with no cache
     reuse: the smaller. Nothing real runs faster.
   - the **realistic** estimate (``realistic``): the ceiling's rates, with the occupancy the registers
     and shared memory allow, and the latency one program's loop iteration cannot hide: a loop whose
     loads are synchronous (``LDG``, then the shared-memory stores, the barrier and the dot, in
     sequence) pays the global-memory latency, the store and the barrier every iteration, overlapped
     only with the other programs resident on the SM (Little's law: per SM, ``resident programs x work
     per iteration / serial time per iteration``); a loop fed by asynchronous copies (``LDGSTS`` or
     ``UTMALDG``, several stages) hides it behind the stages in flight. The smaller of that and the
     ceiling.

[Note: the rates] Instruction throughput per SM per clock, from the CUDA C++ Programming Guide
(section "Arithmetic Instructions", table "Throughput of Native Arithmetic Instructions"): 32-bit
floating-point add, multiply, multiply-add 64 on compute capability 8.0, 128 on 8.6, 8.9, 9.0, 10.0
and 12.0; 32-bit integer add, logical, shift, compare, min/max and 32-bit integer multiply-add 64;
conversions to and from 32-bit types 16. Pipeline of each instruction, from the Nsight Compute
Kernel Profiling Guide (section "Pipelines"): ``fma`` (FP32 arithmetic and IMAD; IMAD only on its
``fmaheavy`` half, so IMAD gets 64 per clock), ``alu`` (integer and logic, compares, min/max,
moves, select, permute), ``xu`` (conversions, transcendentals), ``lsu`` (loads and stores, 32
threads per clock per SM), and every instruction takes an issue slot (4 schedulers, one warp
instruction each per clock: 128 threads per clock per SM). Registers (65,536 per SM, allocated per
warp in units of 256), resident warps and shared memory per SM by compute capability: the CUDA C++
Programming Guide, table "Technical Specifications per Compute Capability". SM counts and boost
clocks: NVIDIA's product pages and whitepapers (the B200's clock as reported in published reviews).

[Note: the latencies] The realistic estimate's latencies are assumptions of the order published
microbenchmarks report for Ampere and Hopper (global memory through L2 several hundred cycles, a block
barrier tens): :data:`GLOBAL_LATENCY` and :data:`BARRIER_LATENCY`. No GPU has checked them here; the
estimate is a prediction to compare with the first device run, not a measurement.
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

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
JSON = REPO / "docs" / "data" / "gpu_static.json"

TARGETS = {"sm_80": 80, "sm_86": 86, "sm_89": 89, "sm_90": 90, "sm_100": 100, "sm_120": 120}
#: the shape of the estimate (an Evo 2 1B projection with 2048 tokens), hopper E4M3 fast accumulation.
SHAPE = (2048, 5760, 1920)
REGISTERS_PER_SM = 65536
#: Cycles a synchronous global load takes to return (an assumption; see the module's note).
GLOBAL_LATENCY = 600
#: Cycles of a block barrier once every warp arrived (an assumption).
BARRIER_LATENCY = 30


@dataclass(frozen=True)
class Rates:
    """Threads per clock per SM: issue slots and each pipeline; resident warps and shared memory per SM."""

    fp32: int
    imad: int = 64
    alu: int = 64
    xu: int = 16
    lsu: int = 32
    issue: int = 128
    max_warps: int = 64
    #: shared memory one SM holds for resident blocks (bytes)
    shared_per_sm: int = 228 * 1024
    #: dense FP8 tensor-core multiply-accumulates per clock per SM (0: not used by the kernels there)
    tensor_fp8: int = 0


RATES = {
    80: Rates(fp32=64, shared_per_sm=164 * 1024),
    86: Rates(fp32=128, max_warps=48, shared_per_sm=100 * 1024),
    89: Rates(fp32=128, max_warps=48, shared_per_sm=100 * 1024),
    90: Rates(fp32=128, tensor_fp8=4096),
    100: Rates(fp32=128),
    120: Rates(fp32=128, max_warps=48, shared_per_sm=100 * 1024),
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
           "DEPBAR", "MEMBAR", "ERRBAR", "CCTL", "LDGDEPBAR", "WARPGROUP", "SYNCS", "UTMALDG", "UTMACMDFLUSH",
           "FENCE", "ARRIVES"}
#: Opcodes of asynchronous global-to-shared copies: a loop holding one is fed by stages in flight.
ASYNC_COPY = {"LDGSTS", "UTMALDG"}


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

#: The kernel of each variant kind: (module, function).
KERNELS = {"chain_gemm": ("_kernels_convert", "chain_gemm_kernel"), "chain_gemm_rz": ("_kernels_rz", "chain_gemm_rz_kernel"),
           "chains_rz": ("_kernels_rz", "chains_rz_kernel"), "chain_gemm_native": ("_kernels_native", "chain_gemm_native_kernel")}
_FP8_TYPES = {"e4m3": "*fp8e4nv", "e5m2": "*fp8e5"}


@dataclass(frozen=True)
class Variant:
    """One compiled specialisation of a kernel: the preset's block and fraction bits, the tile."""

    preset: str
    block: int
    frac: int
    block_m: int
    block_n: int
    num_warps: int
    kernel: str = "chain_gemm_rz"
    #: the specialisation for one part of one chain (fast accumulation without a split: the shape of
    #: the estimate); the general one carries the split-K combination state. For the sm_90 kernel: fast
    #: accumulation (one chain per part), else its slow mode.
    one_chain: bool = True
    #: chain_gemm_native: k per tl.dot (one loop iteration)
    dot_k: int = 0
    #: chain_gemm_native: the operands' formats
    formats: tuple[str, str] = ("e4m3", "e4m3")

    @property
    def name(self) -> str:
        if self.kernel == "chain_gemm_native":
            pair = "" if self.formats == ("e4m3", "e4m3") else f" {self.formats[0]}x{self.formats[1]}"
            mode = "" if self.one_chain else " slow"
            return (f"chain_gemm_native{mode}{pair} {self.preset}[B={self.block},F={self.frac}] "
                    f"{self.block_m}x{self.block_n}/{self.num_warps}w")
        chain = "" if self.kernel != "chain_gemm_rz" else (" one-chain" if self.one_chain else " general")
        return (f"{self.kernel}{chain} {self.preset}[B={self.block},F={self.frac}] "
                f"{self.block_m}x{self.block_n}/{self.num_warps}w")

    @property
    def macs_per_thread_per_k(self) -> float:
        """Multiply-accumulates of one thread per iteration of the innermost loop."""
        per_k = self.block_m * self.block_n / (32 * self.num_warps)
        return per_k * self.dot_k if self.kernel == "chain_gemm_native" else per_k

    @property
    def macs_per_program_iteration(self) -> int:
        """Multiply-accumulates of one program per iteration of the innermost loop."""
        return self.block_m * self.block_n * (self.dot_k if self.kernel == "chain_gemm_native" else 1)

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

    def launch_args(self) -> tuple[dict[str, str], dict[str, Any], dict[str, int]]:
        """(signature, constexprs, example integer arguments at :data:`SHAPE`) as the backend launches it."""
        m, n, k = SHAPE
        if self.kernel == "chain_gemm_native":
            sig = {"a_ptr": _FP8_TYPES[self.formats[0]], "b_ptr": _FP8_TYPES[self.formats[1]], "out_ptr": "*fp32",
                   "bounds_ptr": "*i32", "M": "i32", "N": "i32", "stride_a": "i32", "stride_b": "i32", "tiles": "i32",
                   "tiles_n": "i32", "SLOW": "constexpr", "DOT_K": "constexpr", "BLOCK_M": "constexpr",
                   "BLOCK_N": "constexpr"}
            tiles_n = -(-n // self.block_n)
            ints = {"M": m, "N": n, "stride_a": k, "stride_b": k, "tiles": -(-m // self.block_m) * tiles_n,
                    "tiles_n": tiles_n}
            return sig, {"SLOW": not self.one_chain, "DOT_K": self.dot_k, "BLOCK_M": self.block_m,
                         "BLOCK_N": self.block_n}, ints
        constexprs: dict[str, Any] = {"BLOCK": self.block, "FRAC": self.frac, "BLOCK_M": self.block_m,
                                      "BLOCK_N": self.block_n}
        mp, np_ = -(-m // self.block_m) * self.block_m, -(-n // self.block_n) * self.block_n
        tiles_n = np_ // self.block_n
        if self.kernel == "chain_gemm":
            sig = {"va_ptr": "*fp32", "ea_ptr": "*i8", "vb_ptr": "*fp32", "eb_ptr": "*i8", "out_ptr": "*fp32",
                   "chain_ptr": "*i32", "part_ptr": "*i32", "order_ptr": "*i32", "role_ptr": "*i32",
                   "M": "i32", "N": "i32", "n_parts": "i32", "tiles_n": "i32"}
            ints = {"M": m, "N": n, "n_parts": 1, "tiles_n": tiles_n}
        else:
            sig = {"ap_ptr": "*fp32", "an_ptr": "*fp32", "ea_ptr": "*i32", "bp_ptr": "*fp32", "bn_ptr": "*fp32",
                   "eb_ptr": "*i32", "out_ptr": "*fp32", "chain_ptr": "*i32"}
            if self.kernel == "chain_gemm_rz":
                sig.update({"part_ptr": "*i32", "order_ptr": "*i32", "role_ptr": "*i32", "M": "i32", "N": "i32",
                            "MP": "i32", "NP": "i32", "n_parts": "i32", "tiles_n": "i32"})
                ints = {"M": m, "N": n, "MP": mp, "NP": np_, "n_parts": 1, "tiles_n": tiles_n}
                constexprs.update(NATIVE_RZ=True, ONE_CHAIN=self.one_chain)
            else:
                sig.update({"MP": "i32", "NP": "i32", "tiles": "i32", "tiles_n": "i32"})
                ints = {"MP": mp, "NP": np_, "tiles": mp // self.block_m * tiles_n, "tiles_n": tiles_n}
                constexprs.update(NATIVE_RZ=True)
        sig.update({name: "constexpr" for name in constexprs})
        return sig, constexprs, ints


def variants(tile_sweep: bool = True) -> list[Variant]:
    """The backend's variants (each expressed preset with its default GPU tile, the sm_90 formulation),
    then the few-outputs launches and the tile sweep."""
    from mmaemu.backends._triton.backend import (
        GPU_CONFIG,
        NATIVE_GPU_CONFIG,
        RZ_GENERAL_GPU_CONFIG,
        RZ_GPU_CONFIG,
        SMALL_GRID_TILES,
        expresses,
        rz_expresses,
    )
    from mmaemu.backends._triton._native import DOT_K
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
    cfg = NATIVE_GPU_CONFIG
    pairs = [("e4m3", "e4m3")] + ([("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2")] if tile_sweep else [])
    for pair in pairs:
        for fast in (True, False):
            out.append(Variant("hopper", hopper.block_size, hopper.frac_bits, cfg.block_m, cfg.block_n, cfg.num_warps,
                               "chain_gemm_native", fast, dot_k=DOT_K, formats=pair))
    if tile_sweep:  # the few-outputs launches (_rz.choose_launch): one chain, and a chain per program
        for name in ("hopper", "ada"):
            preset = presets()[name]
            for t in SMALL_GRID_TILES:
                for kernel in ("chain_gemm_rz", "chains_rz"):
                    v = Variant(name, preset.block_size, preset.frac_bits, t.block_m, t.block_n, t.num_warps, kernel)
                    if v not in out:
                        out.append(v)
        for bm, bn, w in ((64, 64, 8), (64, 64, 4), (128, 32, 4), (128, 64, 8), (128, 128, 8)):
            v = Variant("hopper", hopper.block_size, hopper.frac_bits, bm, bn, w, "chain_gemm_rz")
            if v not in out:
                out.append(v)
    return out


def _tool(name: str) -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


def kernel_function(v: Variant) -> Any:
    """The Triton kernel (a ``JITFunction``) that ``v`` compiles."""
    import importlib

    module, function = KERNELS[v.kernel]
    return getattr(importlib.import_module(f"mmaemu.backends._triton.{module}"), function)


def jit_attrs(v: Variant) -> dict[tuple[int, ...], list[list[Any]]]:
    """The attributes Triton's launcher gives ``v``'s arguments at :data:`SHAPE`: every pointer 16-byte
    aligned (torch's allocations are), every integer argument the kernel does not exclude from
    specialisation (``do_not_specialize``) divisible by 16 when its value is."""
    fn = kernel_function(v)
    signature, _, ints = v.launch_args()
    free = {p.name for p in fn.params if p.do_not_specialize}
    attrs = {}
    for i, name in enumerate(fn.arg_names):
        kind = signature[name]
        divisible = kind.startswith("*") or (name in ints and name not in free and ints[name] % 16 == 0)
        if divisible and kind != "constexpr":
            attrs[(i,)] = [["tt.divisibility", 16]]
    return attrs


def compile_variant(v: Variant, capability: int) -> Any:
    """``v`` compiled for compute capability ``capability`` with the launcher's specialisation
    (:func:`jit_attrs`)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature, constexprs, _ = v.launch_args()
    src = ASTSource(fn=kernel_function(v), signature=signature, constexprs=constexprs, attrs=jit_attrs(v))
    return triton.compile(src, target=GPUTarget("cuda", capability, 32),
                          options={"num_warps": v.num_warps, "enable_fp_fusion": False})


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
    if v.kernel == "chain_gemm_native" and parents == {None}:
        inner = [max(inner, key=lambda lp: lp.end - lp.start)]  # the dot loop (a tail or epilogue loop aside)
        parents = set()
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


def resources(cubin: Path, compiled: Any) -> dict[str, int]:
    out = subprocess.run([_tool("cuobjdump"), "-res-usage", str(cubin)], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", out)
    if m is None:
        raise RuntimeError(f"cuobjdump -res-usage gave no resource line: {out!r}")
    reg, stack, shared, local = (int(x) for x in m.groups())
    # the kernels hold no local arrays and make no calls: their stack frame is spilled registers
    dynamic = int(getattr(compiled.metadata, "shared", 0) or 0)  # Triton's shared memory is dynamic
    return {"registers": reg, "spill_bytes": stack + local, "shared_bytes": shared + dynamic}


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


def _pipe_times(p: dict[str, float], rates: Rates) -> dict[str, float]:
    """Clocks of one SM per multiply-accumulate of one thread on each bound."""
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
    return times


def macs_per_clock(p: dict[str, float], rates: Rates) -> tuple[float, str]:
    """Multiply-accumulates per clock per SM, and the bound that sets it."""
    times = _pipe_times(p, rates)
    bound = max(times, key=lambda k: times[k])
    return 1.0 / times[bound], bound


def occupancy(v: Variant, registers: int, shared_bytes: int, rates: Rates) -> tuple[int, str]:
    """Programs one SM holds at once, and what limits them (registers, allocated per warp in units of 256;
    shared memory; resident warps)."""
    per_warp = -(-registers * 32 // 256) * 256
    limits = {"registers": REGISTERS_PER_SM // max(per_warp * v.num_warps, 1),
              "warps": rates.max_warps // v.num_warps,
              "shared memory": rates.shared_per_sm // shared_bytes if shared_bytes else 32}
    limiter = min(limits, key=lambda k: limits[k])
    return max(limits[limiter], 0), limiter


def wave_fraction(v: Variant, per_sm: int, gpu: GPU) -> float:
    """The fraction of the launched waves' program slots that the grid fills at :data:`SHAPE`."""
    m, n, _ = SHAPE
    programs = math.ceil(m / v.block_m) * math.ceil(n / v.block_n)
    slots = max(per_sm, 1) * gpu.sms
    return programs / (math.ceil(programs / slots) * slots)


def _dram_tmacs(variant: Variant, gpu: GPU) -> float:
    m, n, k = SHAPE
    programs = math.ceil(m / variant.block_m) * math.ceil(n / variant.block_n)
    seconds = programs * variant.global_bytes(k) / (gpu.dram_gbs * 1e9)
    return m * n * k / seconds / 1e12


def estimate(variant: Variant, row: dict[str, Any], gpu: GPU) -> dict[str, Any]:
    """The ceiling of ``variant`` on ``gpu`` at :data:`SHAPE`: the SM-side bound (instruction issue, a
    pipeline or the tensor cores) times the fraction of the last wave the grid fills, and the DRAM bound
    (every program reads its rows of a and b and writes its outputs, no cache reuse): the smaller."""
    rates = RATES[TARGETS[gpu.target]]
    per_sm, _ = occupancy(variant, row["registers"], row.get("shared_bytes", 0), rates)
    fill = wave_fraction(variant, per_sm, gpu)
    sm_tmacs = row["macs_per_clock_per_sm"] * gpu.sms * gpu.boost_mhz * 1e6 * fill / 1e12
    dram_tmacs = _dram_tmacs(variant, gpu)
    bound = row["bound"] if sm_tmacs <= dram_tmacs else "dram"
    return {"tmacs": round(min(sm_tmacs, dram_tmacs), 2), "target": gpu.target, "sms": gpu.sms,
            "boost_mhz": gpu.boost_mhz, "dram_gbs": gpu.dram_gbs, "wave_fill": round(fill, 3), "bound": bound,
            "sm_tmacs": round(sm_tmacs, 2), "dram_tmacs": round(dram_tmacs, 2), "variant": variant.name}


def _lockstep(variant: Variant) -> bool:
    """Whether a program's warps wait for each other every iteration (the sm_90 kernel: shared-memory
    tiles and a barrier), or run independent chains (the exactly-defined kernels: no barrier in the loop)."""
    return variant.kernel == "chain_gemm_native"


def serial_clocks(variant: Variant, row: dict[str, Any], rates: Rates) -> tuple[float, str]:
    """Clocks one worker's loop iteration takes on its own, its dependencies in sequence (a worker: a
    program whose warps run in lockstep, else one warp), and how its loads arrive: asynchronous copies in
    flight (the latency hidden behind the stages) or synchronous loads (the global latency, the shared
    stores and the barrier in every iteration)."""
    per_iter = {op: n * variant.macs_per_thread_per_k for op, n in row["per_mac"].items()}
    warps = variant.num_warps if _lockstep(variant) else 1
    # one worker alone on the SM: its warps' instructions over the 4 schedulers (a warp issues one a clock),
    # its loads and stores over the load/store pipe (32 threads a clock), its dots at the tensor cores' rate
    issue = sum(per_iter.values()) * max(warps / 4, 1.0)
    lsu = sum(n for op, n in per_iter.items() if pipeline(op) == "lsu") * 32 * warps / rates.lsu
    tensor = variant.macs_per_program_iteration / rates.tensor_fp8 if per_iter.get("QGMMA") else 0.0
    if any(per_iter.get(op) for op in ASYNC_COPY):
        return max(issue, lsu, tensor), "asynchronous copies"
    serial = issue + (GLOBAL_LATENCY if per_iter.get("LDG") else 0.0) + lsu + tensor
    serial += BARRIER_LATENCY * per_iter.get("BAR", 0.0)
    return serial, "synchronous loads"


def realistic(variant: Variant, row: dict[str, Any], gpu: GPU) -> dict[str, Any]:
    """The realistic estimate of ``variant`` on ``gpu`` at :data:`SHAPE` (see the module docstring): per SM
    the smaller of the ceiling's rate and ``resident workers x work per iteration / serial clocks per
    iteration`` (Little's law), times the wave fill; and the DRAM bound."""
    rates = RATES[TARGETS[gpu.target]]
    per_sm, limiter = occupancy(variant, row["registers"], row.get("shared_bytes", 0), rates)
    fill = wave_fraction(variant, per_sm, gpu)
    serial, feed = serial_clocks(variant, row, rates)
    workers = per_sm if _lockstep(variant) else per_sm * variant.num_warps
    work = variant.macs_per_program_iteration / (1 if _lockstep(variant) else variant.num_warps)
    latency_mpc = workers * work / serial
    mpc = min(row["macs_per_clock_per_sm"], latency_mpc)
    sm_tmacs = mpc * gpu.sms * gpu.boost_mhz * 1e6 * fill / 1e12
    dram_tmacs = _dram_tmacs(variant, gpu)
    if sm_tmacs > dram_tmacs:
        bound = "dram"
    else:
        bound = row["bound"] if row["macs_per_clock_per_sm"] <= latency_mpc else f"latency ({feed})"
    return {"tmacs": round(min(sm_tmacs, dram_tmacs), 2), "target": gpu.target, "programs_per_sm": per_sm,
            "occupancy_limit": limiter, "wave_fill": round(fill, 3), "serial_clocks_per_iteration": round(serial, 1),
            "loads": feed, "bound": bound, "variant": variant.name}


# ---- the analysis ----------------------------------------------------------------------------


def analyse(targets: list[str], tile_sweep: bool = True) -> dict[str, Any]:
    import triton

    report: dict[str, Any] = {
        "generated_by": "python tools/evidence/gpu_static.py",
        "triton": [triton.__version__],
        "triton_version": triton.__version__,
        "shape": list(SHAPE),
        "latencies": {"global": GLOBAL_LATENCY, "barrier": BARRIER_LATENCY},
        "targets": {},
        "variants": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for variant in variants(tile_sweep):
            rows: dict[str, Any] = {}
            for target in targets:
                if target not in variant.targets:
                    continue
                compiled = compile_variant(variant, TARGETS[target])
                cubin = Path(tmp) / f"k_{target}.cubin"
                cubin.write_bytes(bytes(compiled.asm["cubin"]))
                sass = subprocess.run([_tool("nvdisasm"), "-c", str(cubin)], capture_output=True, text=True,
                                      check=True).stdout
                counts, shape = per_mac(sass, variant)
                p = pipes(counts)
                mpc, bound = macs_per_clock(p, RATES[TARGETS[target]])
                res = resources(cubin, compiled)
                per_sm, limiter = occupancy(variant, res["registers"], res["shared_bytes"], RATES[TARGETS[target]])
                rows[target] = {**res, "per_mac": counts, "pipes_per_mac": p, "macs_per_clock_per_sm": round(mpc, 2),
                                "bound": bound, "loops": shape, "programs_per_sm": per_sm, "occupancy_limit": limiter}
            report["variants"][variant.name] = rows
    default = variants(tile_sweep=False)
    # what the backend launches for hopper E4M3 fast accumulation without a split: the exactly-defined
    # formulation on every target, and on sm_90 the GPU's own instruction (after its self-test)
    hopper = next(v for v in default if v.preset == "hopper" and v.one_chain and v.kernel == "chain_gemm_rz")
    native = next(v for v in default if v.kernel == "chain_gemm_native" and v.one_chain)
    for target in targets:
        report["targets"][target] = report["variants"][hopper.name][target]
    report["targets_variant"] = hopper.name
    report["targets_native"] = dict(report["variants"].get(native.name, {}))
    report["targets_native_variant"] = native.name
    for key, choices in (("estimates", (native, hopper)), ("estimates_rz", (hopper,))):
        report[key], report[key.replace("estimates", "realistic")] = {}, {}
        for name, gpu in GPUS.items():
            variant = next((v for v in choices if gpu.target in report["variants"].get(v.name, {})), None)
            if variant is None:
                continue
            row = report["variants"][variant.name][gpu.target]
            report[key][name] = estimate(variant, row, gpu)
            report[key.replace("estimates", "realistic")][name] = realistic(variant, row, gpu)
    return report


def version_summary(report: dict[str, Any]) -> dict[str, Any]:
    """What one Triton version's analysis keeps beside the newest's: every variant's registers, spills,
    shared memory and occupancy, and the estimates."""
    keep = ("registers", "spill_bytes", "shared_bytes", "programs_per_sm", "macs_per_clock_per_sm", "bound")
    return {"variants": {name: {t: {k: row[k] for k in keep if k in row} for t, row in rows.items()}
                         for name, rows in report["variants"].items()},
            **{key: report[key] for key in ("estimates", "realistic", "estimates_rz", "realistic_rz",
                                            "targets_variant", "targets_native_variant")}}


def merge(report: dict[str, Any], others: list[dict[str, Any]]) -> dict[str, Any]:
    """The newest version's report, with every version's summary under ``by_triton`` and the versions
    analysed under ``triton``."""
    by = {report["triton_version"]: version_summary(report)}
    for other in others:
        by[other["triton_version"]] = other.get("by_triton", {}).get(other["triton_version"]) or version_summary(other)
    report["by_triton"] = dict(sorted(by.items()))
    report["triton"] = sorted(by)
    return report


def summary(report: dict[str, Any]) -> str:
    lines = [f"triton {report['triton_version']}; per multiply-accumulate, one thread, {report['targets_variant']}:"]
    classes = ("F2I", "FMUL", "FADD", "FFMA", "IMAD", "IADD3", "VIADDMNMX", "VIMNMX", "LOP3", "ISETP", "LDG", "LDS")
    lines.append("target  regs spill  issue " + " ".join(f"{c:>6}" for c in classes) + "  MAC/clk/SM bound")
    for target, row in report["targets"].items():
        pm = row["per_mac"]
        lines.append(f"{target:7} {row['registers']:4} {row['spill_bytes']:5} {row['pipes_per_mac']['issue']:6.2f} "
                     + " ".join(f"{pm.get(c, 0.0):6.2f}" for c in classes)
                     + f"  {row['macs_per_clock_per_sm']:9.2f} {row['bound']}")
    for name, rows in report["variants"].items():
        for target, row in rows.items():
            if row["spill_bytes"]:
                lines.append(f"SPILLS: {name} on {target}: {row['spill_bytes']} bytes, {row['registers']} registers")
    for name, row in report["targets_native"].items():
        lines.append(f"sm_90 formulation on {name}: {row['registers']} registers, {row['spill_bytes']} spilled, "
                     f"{row['shared_bytes']} B shared, {row['programs_per_sm']} programs per SM; per MAC: "
                     + ", ".join(f"{k} {v}" for k, v in list(row["per_mac"].items())[:10]))
    for key, what in (("estimates", "ceiling, what the backend launches"),
                      ("realistic", "realistic, what the backend launches"),
                      ("estimates_rz", "ceiling, the exactly-defined formulation"),
                      ("realistic_rz", "realistic, the exactly-defined formulation")):
        lines.append(f"{key} ({what}) at M, N, K = {tuple(report['shape'])}:")
        for name, e in report[key].items():
            lines.append(f"  {name:12} {e['tmacs']:8.2f} TMAC/s  (wave fill {e['wave_fill']:.2f}, bound {e['bound']}; "
                         f"{e['variant']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    parser.add_argument("--no-sweep", action="store_true", help="only the backend's own variants")
    parser.add_argument("--no-write", action="store_true", help="print, do not write the JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 if the JSON differs from a fresh run")
    parser.add_argument("--also", type=Path, nargs="*", default=[],
                        help="reports of other Triton versions (this tool's --json under them) to keep beside")
    parser.add_argument("--merge", type=Path, nargs="+", default=None,
                        help="no compiling: merge these reports (the newest Triton's first) into --json")
    parser.add_argument("--json", type=Path, default=JSON)
    args = parser.parse_args(argv)
    if args.merge:
        reports = [json.loads(p.read_text()) for p in args.merge]
        report = merge(reports[0], reports[1:])
    else:
        report = merge(analyse(args.targets, tile_sweep=not args.no_sweep),
                       [json.loads(p.read_text()) for p in args.also])
    print(summary(report))
    text = json.dumps(report, indent=1, sort_keys=True) + "\n"
    if args.check:
        stored = json.loads(args.json.read_text()) if args.json.exists() else None
        if stored != json.loads(text):
            print(f"{args.json} is stale: run python tools/evidence/gpu_static.py", file=sys.stderr)
            return 1
        return 0
    if not args.no_write:
        args.json.write_text(text)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
