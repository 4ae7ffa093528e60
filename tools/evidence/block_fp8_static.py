"""The Triton block-FP8 kernel compiled for sm_90 and sm_89 on a CPU: the facts the block kernel models assume.

Usage::

    python tools/evidence/block_fp8_static.py                      # compile, check, print (the installed Triton)
    python tools/evidence/block_fp8_static.py --json F             # also write the analysis, merged with F's other versions
    /other/python tools/evidence/block_fp8_static.py --json F --source PATH   # another Triton (PATH: torchao's file)

The kernel is torchao 0.18's ``blockwise_fp8_gemm_kernel`` (``torchao/kernel/blockwise_quantization.py``, the
``ao::blockwise_fp8_gemm`` operator: DeepSeek-V3's ``fp8_gemm_kernel`` with a bucketed M), read from the
installed torchao's file (or ``--source``) with ``ast`` and compiled by Triton for each variant below, as its
launcher would (pointers 16-byte aligned, N and K constexpr, 8 warps), with ``enable_fp_fusion`` on (every
version's default) or off. The third-party source is read, never copied into this repository. For each
compiled variant the tool records, from the TTIR, the PTX and the SASS (``nvdisasm`` from Triton's wheel):

- the tensor-core instruction and how many chain steps each k-tile has (``wgmma``: instructions per warpgroup
  over those with scale-d 0; ``mma.sync``: instructions over those whose C is ``RZ``), and for ``wgmma`` the
  ``maxNumImpreciseAcc`` of the TTGIR dot (2**30: the chain is never promoted inside);
- on sm_89, the k offset of each chained dot's A slice (``ttg.memdesc_subslice``), in chain order (the first
  dot's operand is the previous iteration's prefetch: no offset to read there). Triton 3.9 splits the dot into
  BLOCK_K / 32 chained dots in the TTGIR; Triton 3.6 keeps one dot (``[None]``) and forms the chain in its LLVM
  lowering, where the order is not read here;
- the combination: which scale multiplies the dot result first (the operand broadcast from ``a_s[:, None]``,
  an ``expand_dims`` on axis 1, is the row scale), and the fp32 instructions per accumulator: ``mul.f32``,
  ``fma.rn.f32``, ``add.f32`` (PTX) and FMUL, FFMA, FADD (SASS).

:func:`check` says whether a version's analysis holds what :mod:`mmaemu.kernels._block_model` assumes
(``tests/tools/test_block_fp8_static.py`` runs it on the committed analysis of Triton 3.6.0 and the newest, and
compiles the installed version afresh).
"""

from __future__ import annotations

import argparse
import ast
import collections
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
JSON = REPO / "docs" / "data" / "block_fp8_static.json"
FUNCTION = "blockwise_fp8_gemm_kernel"


@dataclass(frozen=True)
class Variant:
    """One compiled configuration of the kernel."""

    name: str
    capability: int
    block_m: int
    block_n: int
    block_k: int
    fp_fusion: bool
    path: str  # the model's path: wgmma, hmma (sm_90) or mma (sm_89)

    @property
    def accumulators(self) -> int:
        """fp32 accumulators per thread (8 warps)."""
        return self.block_m * self.block_n // 256


VARIANTS = tuple(
    Variant(f"sm{cap}-{path}-bm{bm}-bk{bk}-{'fpfusion' if fused else 'nofpfusion'}", cap, bm, bn, bk, fused, path)
    for cap, path, bm, bn in ((90, "wgmma", 64, 128), (90, "hmma", 16, 64), (89, "mma", 64, 128))
    for bk in (128, 64) for fused in (True, False)
)


def torchao_source() -> Path:
    """The installed torchao's ``blockwise_quantization.py`` (found without importing torchao)."""
    spec = importlib.util.find_spec("torchao")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("torchao is not installed here: pass --source PATH/torchao/kernel/blockwise_quantization.py")
    return Path(list(spec.submodule_search_locations)[0]) / "kernel" / "blockwise_quantization.py"


def kernel_text(path: Path) -> tuple[str, int, int]:
    """The kernel function's text (dedented, its decorators dropped) and its first and last line in the file."""
    text = path.read_text()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name == FUNCTION:
            lines = text.splitlines()[node.lineno - 1: node.end_lineno]
            return textwrap.dedent("\n".join(lines)), node.lineno, int(node.end_lineno or node.lineno)
    raise KeyError(f"{FUNCTION} not found in {path}")


def _tool(name: str) -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


def compile_variant(body: str, v: Variant, workdir: Path) -> dict[str, str]:
    """TTIR, TTGIR, PTX and SASS of one variant."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module = workdir / f"k_{v.name.replace('-', '_')}.py"
    module.write_text("import triton\nimport triton.language as tl\n\n@triton.jit\n" + body + "\n")
    spec = importlib.util.spec_from_file_location(module.stem, module)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = getattr(mod, FUNCTION)
    signature = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*bf16", "a_s_ptr": "*fp32", "b_s_ptr": "*fp32",
                 "M": "i32", "N": "constexpr", "K": "constexpr", "M_BUCKET": "constexpr", "BLOCK_SIZE_M": "constexpr",
                 "BLOCK_SIZE_N": "constexpr", "BLOCK_SIZE_K": "constexpr"}
    constexprs = {"N": 7168, "K": 2048, "M_BUCKET": 12, "BLOCK_SIZE_M": v.block_m, "BLOCK_SIZE_N": v.block_n,
                  "BLOCK_SIZE_K": v.block_k}
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names) if signature[name].startswith("*")}
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", v.capability, 32),
                              options={"num_warps": 8, "num_stages": 3, "enable_fp_fusion": v.fp_fusion})
    cubin = workdir / f"{v.name}.cubin"
    cubin.write_bytes(bytes(compiled.asm["cubin"]))
    sass = subprocess.run([_tool("nvdisasm"), "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
    return {"ttir": compiled.asm["ttir"], "ttgir": compiled.asm["ttgir"], "ptx": compiled.asm["ptx"], "sass": sass}


_DEF = re.compile(r"^\s*(%[\w.#]+)(?::\d+)? = ([\w.]+) (.*)$")


def _definitions(ir: str) -> dict[str, tuple[str, str]]:
    """SSA name -> (operation, the rest of its line)."""
    out = {}
    for line in ir.splitlines():
        m = _DEF.match(line)
        if m:
            out[m.group(1)] = (m.group(2), m.group(3))
    return out


def _scale_axis(name: str, defs: dict[str, tuple[str, str]]) -> int | None:
    """The ``expand_dims`` axis a broadcast scale operand comes from (1: per row, 0: per column), or None."""
    seen = 0
    while name in defs and seen < 8:
        op, rest = defs[name]
        if op == "tt.expand_dims":
            m = re.search(r"axis = (\d+)", rest)
            return int(m.group(1)) if m else None
        m = re.match(r"(%[\w.#]+)", rest)
        if m is None or op not in ("tt.broadcast", "arith.extf", "tt.splat"):
            return None
        name, seen = m.group(1), seen + 1
    return None


def chain_offsets(ttgir: str) -> list[int | None]:
    """sm_89 (chained ``tt.dot``s over K = 32 slices): each dot's A slice offset in k, in chain order (the dot whose
    accumulator is a zero constant first, then the dot that takes its result, ...); None where the operand comes
    from the previous loop iteration (the pipeline's prefetch)."""
    defs = _definitions(ttgir)
    dots = {n: rest for n, (op, rest) in defs.items() if op == "tt.dot"}
    operands = {n: re.findall(r"%[\w.#]+", rest.split(":")[0])[:3] for n, rest in dots.items()}
    takes = {ops[2]: n for n, ops in operands.items() if len(ops) == 3}
    first = [n for n, ops in operands.items() if len(ops) == 3 and ops[2] not in dots]
    if len(first) != 1:
        return []
    chain, current = [], first[0]
    while current is not None and len(chain) < 16:
        a = operands[current][0]
        offset = None
        if a in defs and defs[a][0] == "ttg.local_load":
            src = re.match(r"(%[\w.#]+)", defs[a][1])
            view = defs.get(src.group(1)) if src else None
            m = re.match(r"%[\w.#]+\[(\d+), (\d+)\]", view[1]) if view and view[0] == "ttg.memdesc_subslice" else None
            offset = int(m.group(2)) if m else None
        chain.append(offset)
        current = takes.get(current)
    return chain


def combination(ttir: str) -> dict[str, Any]:
    """From the TTIR: the dot's result multiplied by which scale first, then which, then added to the accumulator."""
    defs = _definitions(ttir)
    dots = [n for n, (op, _) in defs.items() if op == "tt.dot"]
    if len(dots) != 1:
        return {"dots": len(dots)}
    steps: list[str] = []
    current = dots[0]
    for _ in range(3):
        users = [(n, op, rest) for n, (op, rest) in defs.items() if re.search(re.escape(current) + r"\b", rest)
                 and op in ("arith.mulf", "arith.addf")]
        if len(users) != 1:
            break
        name, op, rest = users[0]
        operands = re.findall(r"%[\w.#]+", rest.split(":")[0])
        other = next((x for x in operands if x != current), "")
        if op == "arith.mulf":
            axis = _scale_axis(other, defs)
            steps.append({1: "mul a_s (per row)", 0: "mul b_s (per column)"}.get(axis, "mul ?") if axis is not None
                         else "mul ?")
        else:
            steps.append("add accumulator")
        current = name
    return {"dots": 1, "steps": steps}


_PTX_FP = re.compile(r"\b(mul(?:\.rn)?\.f32|fma\.rn\.f32|add(?:\.rn)?\.f32|sub(?:\.rn)?\.f32)\b")
_SASS_FP = re.compile(r"\b(FMUL|FFMA|FADD)\b")


def analyse(code: dict[str, str], v: Variant) -> dict[str, Any]:
    """The variant's facts (module docstring)."""
    ptx, sass, ttgir = code["ptx"], code["sass"], code["ttgir"]
    row: dict[str, Any] = {"accumulators_per_thread": v.accumulators}
    wgmma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.f32\.(\w+)\.(\w+)[^;]*?, ([^,]+), 1, 1;", ptx)
    mma = re.findall(r"mma\.sync\.aligned\.(m\d+n\d+k\d+)\.row\.col\.f32\.(\w+)\.(\w+)\.f32", ptx)
    if wgmma:
        shapes = sorted({f"wgmma {s} {a} x {b}" for s, a, b, _ in wgmma})
        fresh = sum(1 for *_, d in wgmma if d.strip() == "0")
        row["instruction"] = shapes
        row["steps_per_chain"] = len(wgmma) / fresh if fresh else None
        m = re.search(r"maxNumImpreciseAcc = (\d+)", ttgir)
        row["max_num_imprecise_acc"] = int(m.group(1)) if m else None
    else:
        row["instruction"] = sorted({f"mma.sync {s} {a} x {b}" for s, a, b in mma})
        sass_mma = [line for line in sass.splitlines() if re.search(r"\b[QH]MMA\.", line)]
        fresh = sum(1 for line in sass_mma if re.search(r",\s*RZ\s*;", line))
        row["steps_per_chain"] = len(sass_mma) / fresh if fresh else None
    row["e4m3_to_f16"] = "cvt.rn.f16x2.e4m3x2" in ptx
    row["chain_k_offsets"] = chain_offsets(ttgir)
    row["combination"] = combination(code["ttir"])
    row["ptx_fp32"] = dict(sorted(collections.Counter(_PTX_FP.findall(ptx)).items()))
    row["sass_fp32"] = dict(sorted(collections.Counter(_SASS_FP.findall(sass)).items()))
    row["ftz"] = ".ftz" in ptx
    return row


def run(source: Path) -> dict[str, Any]:
    """Every variant compiled and analysed with the installed Triton."""
    import triton

    body, first, last = kernel_text(source)
    report: dict[str, Any] = {"triton": triton.__version__, "function": FUNCTION, "lines": [first, last],
                              "variants": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for v in VARIANTS:
            report["variants"][v.name] = analyse(compile_variant(body, v, Path(tmp)), v)
    return report


def check(report: dict[str, Any]) -> list[str]:
    """What in a version's analysis contradicts the block models' assumptions (empty: nothing)."""
    problems = []
    for v in VARIANTS:
        row = report["variants"].get(v.name)
        if row is None:
            problems.append(f"{v.name}: not analysed")
            continue
        n = v.accumulators
        want = {"wgmma": "wgmma m64n", "hmma": "mma.sync m16n8k16 f16 x f16", "mma": "mma.sync m16n8k32 e4m3 x e4m3"}[v.path]
        if len(row["instruction"]) != 1 or not row["instruction"][0].startswith(want):
            problems.append(f"{v.name}: instruction {row['instruction']}, expected {want}")
        per_step = 32 if v.path != "hmma" else 16
        if row["steps_per_chain"] != v.block_k / per_step:
            problems.append(f"{v.name}: {row['steps_per_chain']} steps per chain, expected {v.block_k // per_step}")
        if v.path == "wgmma" and row.get("max_num_imprecise_acc") != 2**30:
            problems.append(f"{v.name}: maxNumImpreciseAcc {row.get('max_num_imprecise_acc')}")
        if row["e4m3_to_f16"] != (v.path == "hmma"):
            problems.append(f"{v.name}: E4M3 -> fp16 conversion {'present' if row['e4m3_to_f16'] else 'absent'}")
        offsets = row["chain_k_offsets"]
        one_dot = offsets == [None]  # one dot over BLOCK_K: its k32 steps are chained in the LLVM lowering
        if v.path == "mma" and not one_dot and (len(offsets) != v.block_k // 32 or sum(o is None for o in offsets) > 1
                                                or any(o not in (None, 32 * i) for i, o in enumerate(offsets))):
            problems.append(f"{v.name}: chained dots over k = {offsets}, not the slices 0, 32, ... in order")
        if row["combination"].get("steps") != ["mul a_s (per row)", "mul b_s (per column)", "add accumulator"]:
            problems.append(f"{v.name}: combination {row['combination']}")
        fp = {k.split(".")[0]: c for k, c in row["ptx_fp32"].items()}
        expected = {"mul": n, "fma": n} if v.fp_fusion else {"mul": 2 * n, "add": n}
        if fp != expected:
            problems.append(f"{v.name}: PTX fp32 {row['ptx_fp32']}, expected {expected} per thread")
        sass_expected = {"FMUL": n, "FFMA": n} if v.fp_fusion else {"FMUL": 2 * n, "FADD": n}
        if row["sass_fp32"] != sass_expected:
            problems.append(f"{v.name}: SASS {row['sass_fp32']}, expected {sass_expected}")
        if row["ftz"]:
            problems.append(f"{v.name}: .ftz in the PTX")
    return problems


def merge(report: dict[str, Any], stored: dict[str, Any] | None) -> dict[str, Any]:
    """The stored analyses with this version's replaced or added; ``triton_version``: the newest."""
    by = dict((stored or {}).get("by_triton", {}))
    by[report["triton"]] = {"function": report["function"], "lines": report["lines"], "variants": report["variants"]}
    versions = sorted(by, key=lambda s: tuple(int(x) for x in s.split(".")[:3]))
    return {"generated_by": "python tools/evidence/block_fp8_static.py --json docs/data/block_fp8_static.json",
            "kernel": "torchao 0.18.0 torchao/kernel/blockwise_quantization.py " + FUNCTION,
            "triton": versions, "triton_version": versions[-1], "by_triton": {k: by[k] for k in versions}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--source", type=Path, default=None, help="torchao's kernel/blockwise_quantization.py")
    parser.add_argument("--json", type=Path, default=None, help="merge this version's analysis into this file")
    args = parser.parse_args(argv)
    report = run(args.source or torchao_source())
    for name, row in report["variants"].items():
        print(f"{name:32s} {', '.join(row['instruction'])}; {row['steps_per_chain']} steps/chain; "
              f"{' -> '.join(row['combination'].get('steps', []))}; PTX {row['ptx_fp32']}; SASS {row['sass_fp32']}")
    problems = check(report)
    for p in problems:
        print("CONTRADICTS THE MODELS:", p)
    if args.json:
        stored = json.loads(args.json.read_text()) if args.json.exists() else None
        args.json.write_text(json.dumps(merge(report, stored), indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.json}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
