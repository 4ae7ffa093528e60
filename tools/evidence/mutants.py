"""The mutation tier: deliberate, realistic breakages of the arithmetic that the tests must catch.

Each mutant replaces one exact piece of source text (which must occur exactly once) in a copy
of the working tree, then runs the tests chosen for it (``pytest -x``). The mutant is *killed* when
the tests fail, *survives* when they pass, and is *malformed* when pytest cannot even collect
(exit status 2, 3, 4) or the text is not found. An equivalent mutant (one that cannot change any
output) is listed with the reason and is not run.

Usage::

    python tools/evidence/mutants.py              # the CI sample (every third mutant; under 10 minutes)
    python tools/evidence/mutants.py --all        # every mutant
    python tools/evidence/mutants.py --list       # the catalogue
    python tools/evidence/mutants.py --only ID... # chosen mutants
    python tools/evidence/mutants.py --json F     # also write the results (with --only: update them in F)
    python tools/evidence/mutants.py --jobs N     # N mutants at a time, each in its own copy (default: 2, or 1 on one core)

Exit status 0 only when every non-equivalent mutant that ran was killed (and none is malformed).
The copies live in a temporary directory (one per job): the working tree is never modified.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from evidence import evidence_root  # noqa: E402

SHARED = evidence_root()

# Test selections (pytest arguments), fastest first so that a killed mutant stops early.
MODEL = ("tests/evidence/test_hw_vectors.py", "tests/unit/test_model.py", "tests/unit/test_formats.py",
         "tests/evidence/test_against_slowmodel.py", "-k", "not cpu and not triton")
SPLIT = ("tests/unit/test_accumulation.py", "tests/evidence/test_against_slowmodel.py", "tests/evidence/test_rtx4060_recordings.py",
         "-k", "not cpu and not triton")
EPILOGUE = ("tests/unit/test_epilogue.py", "tests/evidence/test_against_slowmodel.py", "tests/unit/test_checks.py",
            "tests/evidence/test_call_records.py", "tests/evidence/test_rtx4060_recordings.py", "-k", "not cpu and not triton")
CPU = ("tests/unit/test_cpu_backend.py", "tests/unit/test_differential.py", "tests/evidence/test_against_slowmodel.py",
       "tests/evidence/test_rtx4060_recordings.py", "-k", "cpu or differential")
ZOO = ("tests/evidence/test_zoo_slowmodel.py", "tests/unit/test_zoo_accumulate.py", "tests/unit/test_differential.py",
       "tests/evidence/test_zoo_vectors.py", "-k", "not triton and not fit_tool and (zoo or accumulate or chain or recomputes "
       "or replay or discriminates)")
ROWWISE = ("tests/unit/test_kernels.py", "tests/evidence/test_rowwise_slowmodel.py")
BLOCK = ("tests/evidence/test_block_slowmodel.py",)
CALL = ("tests/unit/test_checks.py", "tests/evidence/test_call_records.py", "tests/evidence/test_platform.py",
        "-k", "not cpu and not triton")


def first(path: str, tests: tuple[str, ...]) -> tuple[str, ...]:
    """``tests`` with the file ``path`` run first (pytest runs a file named twice once, where it is first named):
    the test aimed at a mutant ends the run early; the rest of the selection still runs if it passes."""
    return (path, *tests)


@dataclass(frozen=True)
class Mutant:
    """One deliberate breakage: ``old`` becomes ``new`` in ``path``; ``tests`` must then fail."""

    id: str
    path: str
    old: str
    new: str
    what: str
    tests: tuple[str, ...]
    equivalent: str | None = None
    #: killed only when a test of each of these backends fails (the tests run to the end, not -x)
    every_backend: tuple[str, ...] = ()
    #: environment variables the tests run with (the portable cpu kernel: ``PORTABLE``)
    env: tuple[tuple[str, str], ...] = ()
    #: a CPU feature without which the mutated code never runs (``"avx512"``: the fused kernels of
    #: mmaemu/backends/_cpu_block.py); on a CPU without it the mutant is reported ``not-run``, not ``survived``
    needs: str | None = None


#: The cpu backend's portable kernels run even where the AVX-512 FP8 kernel would (mmaemu/backends/_cpu.py).
PORTABLE = (("MMAEMU_CPU_PORTABLE", "1"),)


MUTANTS: tuple[Mutant, ...] = (
    # --- the instruction model (mmaemu/presets.py, mmaemu/model.py, mmaemu/formats.py)
    Mutant("hopper-frac-12", "mmaemu/presets.py", '"hopper",\n    block_size=32,\n    frac_bits=13,',
           '"hopper",\n    block_size=32,\n    frac_bits=12,', "hopper keeps 12 fraction bits, not 13", MODEL),
    Mutant("hopper-frac-14", "mmaemu/presets.py", '"hopper",\n    block_size=32,\n    frac_bits=13,',
           '"hopper",\n    block_size=32,\n    frac_bits=14,', "hopper keeps 14 fraction bits, not 13", MODEL),
    Mutant("hopper-block-16", "mmaemu/presets.py", '"hopper",\n    block_size=32,',
           '"hopper",\n    block_size=16,', "hopper aligns blocks of 16 products, not 32", MODEL),
    Mutant("ada-block-32", "mmaemu/presets.py", '"ada",\n    block_size=16,',
           '"ada",\n    block_size=32,', "ada aligns blocks of 32 products, not 16", MODEL),
    Mutant("ada-frac-12", "mmaemu/presets.py", '"ada",\n    block_size=16,\n    frac_bits=13,',
           '"ada",\n    block_size=16,\n    frac_bits=12,', "ada keeps 12 fraction bits", MODEL),
    Mutant("floor-not-trunc", "mmaemu/model.py", "terms = torch.trunc(products * pow2(",
           "terms = torch.floor(products * pow2(", "product terms rounded toward -inf, not toward zero", MODEL),
    Mutant("round-not-trunc", "mmaemu/model.py", "terms = torch.trunc(products * pow2(",
           "terms = torch.round(products * pow2(", "product terms rounded to nearest, not truncated", MODEL),
    Mutant("c-not-aligned", "mmaemu/model.py", "e_max = torch.maximum(e_products, e_c)",
           "e_max = torch.where(e_products > EXPONENT_OF_ZERO // 2, e_products, e_c)",
           "c left out of the block maximum (unless the block has no product)", MODEL),
    Mutant("c-not-truncated", "mmaemu/model.py", "total = total + torch.trunc(c_safe * pow2(-e_unit, torch.float64))",
           "total = total + c_safe * pow2(-e_unit, torch.float64)", "c added without truncation to the grid", MODEL),
    Mutant("normalise-nearest", "mmaemu/model.py", "kept = torch.trunc(mant * 2.0**keep)",
           "kept = torch.round(mant * 2.0**keep)", "the block sum rounded to nearest, not truncated", MODEL),
    Mutant("normalise-one-bit-more", "mmaemu/model.py", "keep = min(frac, 23) + 1",
           "keep = min(frac, 23) + 2", "the block sum keeps F + 2 significant bits", MODEL),
    Mutant("zero-products-in-max", "mmaemu/formats.py",
           "exponent = torch.where(significand != 0, exponent, torch.full_like(exponent, EXPONENT_OF_ZERO))",
           "exponent = torch.where(significand != 0, exponent, torch.full_like(exponent, fmt.emin))",
           "zero operands take part in the block maximum (with the format's emin)", MODEL),
    Mutant("subnormal-exponent-not-floored", "mmaemu/formats.py",
           "exponent = torch.clamp(field - fmt.bias, min=fmt.emin)", "exponent = field - fmt.bias",
           "subnormal operands get exponent -bias, not emin", MODEL),
    Mutant("minus-zero-kept", "mmaemu/model.py", "result = result + 0.0  # an exact zero is +0",
           "result = result", "an exact zero block result keeps a negative sign", MODEL,
           equivalent="the exact sum is never -0 here: torch's sum starts from +0, x + (-x) is +0 under round to "
                      "nearest even, and a zero c enters as +0; the line is a guard for other implementations"),
    Mutant("inf-minus-inf-not-nan", "mmaemu/model.py", "nan = nan | (pos_inf & neg_inf)", "nan = nan",
           "+Inf and -Inf products in one block do not give NaN", MODEL),
    Mutant("zero-times-inf-not-nan", "mmaemu/model.py", "nan = nan | zero_times_inf.any(-1)", "nan = nan",
           "0 * Inf does not give NaN", MODEL),
    Mutant("b200-truncates", "mmaemu/presets.py",
           "frac_bits=25,\n    c_mode=CMode.ROUNDED_ADD,\n    rounding=Rounding.NEAREST_EVEN,",
           "frac_bits=25,\n    c_mode=CMode.ROUNDED_ADD,\n    rounding=Rounding.TRUNCATE,",
           "the B200 preset truncates its block sum instead of rounding to nearest even", MODEL),
    Mutant("sum-dtype-float64", "mmaemu/model.py",
           "return torch.float32 if block_sum_exact_in_fp32(preset, with_c=False) else torch.float64",
           "return torch.float64", "block terms summed in float64 instead of float32", MODEL,
           equivalent="the terms are integers below 2**(F + 2 + log2 B) <= 2**24, so the float32 sum is exact "
                      "and equal to the float64 sum"),
    # --- accumulation: chains and split-K (mmaemu/_accumulation.py)
    Mutant("slow-chunk-64", "mmaemu/_accumulation.py", "SLOW_CHUNK = 128", "SLOW_CHUNK = 64",
           "slow accumulation restarts its chain every 64 elements", SPLIT),
    Mutant("slow-chunk-256", "mmaemu/_accumulation.py", "SLOW_CHUNK = 128", "SLOW_CHUNK = 256",
           "slow accumulation restarts its chain every 256 elements", SPLIT),
    Mutant("contiguous-tile-64", "mmaemu/_split.py", "Dealing.CONTIGUOUS, 128,", "Dealing.CONTIGUOUS, 64,",
           "the contiguous split deals k-tiles of 64", SPLIT),
    Mutant("round-robin-tile-128", "mmaemu/_split.py", "Dealing.ROUND_ROBIN, 64,", "Dealing.ROUND_ROBIN, 128,",
           "the round-robin split deals k-tiles of 128", SPLIT),
    Mutant("pairwise-as-serial", "mmaemu/_accumulation.py",
           "    if scheme.combination is Combination.PAIRWISE:\n        return pairwise_steps(parts)\n",
           "", "pairwise parts added serially in part order", SPLIT),
    Mutant("pairwise-pairs-one-by-one", "mmaemu/_accumulation.py",
           "steps += [(j, j + h) for j in range(1, last)]",
           "steps += [(x,) for j in range(1, last) for x in (j, j + h)]",
           "pairwise pairs added to the total one part at a time (the order fitted on S <= 8)", SPLIT),
    Mutant("pairwise-last-pair-summed", "mmaemu/_accumulation.py", "steps += [(last + h,), (last,)]",
           "steps += [(last, last + h)]", "pairwise: the last pair summed before it joins the total", SPLIT),
    Mutant("pairwise-pairs-descending", "mmaemu/_accumulation.py", "for j in range(1, last)]",
           "for j in reversed(range(1, last))]", "pairwise: the remaining pairs in decreasing j", SPLIT),
    Mutant("pairwise-halving", "mmaemu/_accumulation.py", "h = (parts + 1) // 2", "h = parts // 2",
           "pairwise pairs part j with j + floor(S/2)", SPLIT),
    Mutant("combination-pairwise-as-serial-every-backend", "mmaemu/_accumulation.py",
           "    if scheme.combination is Combination.PAIRWISE:\n        return pairwise_steps(parts)\n",
           "", "the one combination definition broken: every backend's recorded pairwise outputs must fail",
           ("tests/evidence/test_against_slowmodel.py", "-k", "pairwise_order_on_every_backend", "-rf"),
           every_backend=("reference", "cpu", "triton")),
    Mutant("serial-reversed", "mmaemu/_accumulation.py",
           "return tuple((j,) for j in range(parts))",
           "return tuple((j,) for j in reversed(range(parts)))",
           "serial and contiguous parts added last to first", SPLIT),
    Mutant("round-robin-custom-2-pairwise", "mmaemu/_split.py", "((1, Scheme.PAIRWISE),),",
           "((1, Scheme.PAIRWISE), (2, Scheme.PAIRWISE)),",
           "the round-robin family's customOption rule: customOption 2 combines pairwise, not serially",
           ("tests/evidence/test_platform.py", "-k", "customoption")),
    Mutant("contiguous-custom-4-replayed", "mmaemu/_split.py", "frozenset(range(4)), False,",
           "frozenset(range(8)), False,",
           "the contiguous family's split rows with customOption 4 to 7 taken for replayed (verified)",
           ("tests/unit/test_splitk.py", "-k", "customoption")),
    # --- epilogue and NaN rule (mmaemu/_epilogue.py, mmaemu/_call.py, mmaemu/formats.py)
    Mutant("single-rounding", "mmaemu/_epilogue.py",
           "    return _round_to_output(_scaled_fp32(acc, alpha, b32, bias_order, scratch), fmt, sr)\n",
           "    return _round_to_output(acc.to(torch.float64) * alpha.to(torch.float64) if b32 is None and fmt.fp8 is None "
           "else _scaled_fp32(acc, alpha, b32, bias_order, scratch), fmt, sr)\n",
           "bf16/fp16 rounded once from the exact product instead of twice (via fp32)", EPILOGUE),
    Mutant("alpha-not-rounded", "mmaemu/_epilogue.py", "alpha = (sa * sb).to(torch.float32)",
           "alpha = sa * sb", "scale_a * scale_b kept exact instead of rounded to fp32", EPILOGUE),
    Mutant("multiply-then-add", "mmaemu/_epilogue.py",
           "        y = acc.mul_(torch.sign(alpha)) if scratch else acc * torch.sign(alpha)\n"
           "        return y.add_(0.0).mul_(torch.abs(alpha))\n",
           "        return acc * alpha + 0.0\n", "fma(acc, alpha, +0) replaced by an fp32 multiply then + 0", EPILOGUE),
    Mutant("inference-k-floor-too-high", "mmaemu/platforms/_inference.py",
           "_SWEEP_K[0], 5135, _SWEEP_M, _SWEEP_N),\n    \"cuBLASLt splits only long K: the H100 sweep's dense K part "
           "first splits at K = 5,136 at 1 MiB \"\n    \"(specified), and every 1 MiB table row with K <= 5,120 is "
           "unsplit\",\n    k_floor=5136,",
           "_SWEEP_K[0], 6143, _SWEEP_M, _SWEEP_N),\n    \"cuBLASLt splits only long K\",\n    k_floor=6144,",
           "the H100 K-floor inference's domain reaches K = 6,143 (recorded 1 MiB rows split there)",
           ("tests/unit/test_inference.py",)),
    Mutant("hmma-rewrite-steps-swapped", "mmaemu/model.py",
           "    return k[k % 4 < 2], k[k % 4 >= 2]", "    return k[k % 4 >= 2], k[k % 4 < 2]",
           "the FP8-to-fp16 HMMA rewrite adds the high pairs (k mod 4 in {2, 3}) first",
           ("tests/evidence/test_hw_vectors.py", "-k", "fp16_accumulator")),
    Mutant("hmma-rewrite-c-in-first-step", "mmaemu/model.py",
           "        d = torch.zeros_like(c)\n        for positions in _rewrite_positions(",
           "        d = c.clone()\n        c = torch.zeros_like(c)\n        for positions in _rewrite_positions(",
           "the HMMA rewrite starts its first step from c instead of adding c last",
           ("tests/evidence/test_hw_vectors.py", "-k", "fp16_accumulator")),
    Mutant("bias-fused-rounded-twice", "mmaemu/_epilogue.py",
           "    odd = torch.where(inexact, torch.nextafter(s, toward), s)\n", "    odd = s\n",
           "the fused bias order's sum rounded to float64, then to fp32 (no round-to-odd)", ("tests/unit/test_epilogue.py",)),
    Mutant("bias-after-scale-fused", "mmaemu/_epilogue.py",
           "        return ((product + 0.0).to(torch.float32).to(torch.float64) + b32.to(torch.float64)).to(torch.float32)\n",
           "        return (product + b32.to(torch.float64)).to(torch.float32)\n",
           "the after-scale bias order without its first rounding to fp32", ("tests/unit/test_epilogue.py",)),
    Mutant("saturation-off", "mmaemu/_epilogue.py", "out = torch.clamp(y, -limit, limit).to(fmt.dtype)",
           "out = y.to(fmt.dtype)", "FP8 outputs not saturated to the largest finite value", EPILOGUE),
    Mutant("scale-result-single-rounding", "mmaemu/_epilogue.py",
           "y = (y.to(torch.float64) * sr).to(torch.float32)", "y = y.to(torch.float64) * sr",
           "y * scale_result not rounded to fp32 before the FP8 conversion", EPILOGUE,
           equivalent="torch converts float64 to float8 through float32 (torch.tensor(1.0625 + 2**-27, "
                      "dtype=torch.float64).to(torch.float8_e4m3fn) is 1.0), so the removed rounding happens "
                      "anyway; tests/evidence/test_against_slowmodel.py::test_epilogue_rounds_twice pins the double rounding"),
    Mutant("fp32-nan-payload", "mmaemu/formats.py", "FP32_CANONICAL_NAN = 0x7FFFFFFF",
           "FP32_CANONICAL_NAN = 0x7FC00000", "fp32 NaN written with the x86 payload 0x7FC00000", EPILOGUE),
    Mutant("bf16-nan-payload", "mmaemu/formats.py", "BFLOAT16 = _OutSpec(torch.bfloat16, 16, 0x7FFF)",
           "BFLOAT16 = _OutSpec(torch.bfloat16, 16, 0x7FC0)", "bf16 NaN written as 0x7FC0", EPILOGUE),
    Mutant("nan-rule-ignores-b", "mmaemu/backends/_dispatch.py",
           "nan = torch.isnan(acc) | nan_rows(a)[:, None] | nan_rows(b)[None, :]",
           "nan = torch.isnan(acc) | nan_rows(a)[:, None]",
           "a NaN code in mat2 does not make its column NaN", EPILOGUE),
    Mutant("nan-rule-keeps-host-nan", "mmaemu/backends/_dispatch.py",
           "nan = torch.isnan(acc) | nan_rows(a)[:, None] | nan_rows(b)[None, :]",
           "nan = nan_rows(a)[:, None] | nan_rows(b)[None, :]",
           "a NaN made by the accumulation (Inf - Inf across chains or parts) keeps the host's payload",
           ("tests/hostile/test_hostile_numerics.py", "-k", "opposite_infinities")),
    Mutant("e5m2-inf-is-nan", "mmaemu/formats.py", "smallest_nan = 0x7F if fmt is Fp8Format.E4M3 else 0x7D",
           "smallest_nan = 0x7F if fmt is Fp8Format.E4M3 else 0x7C", "E5M2 infinities taken for NaN codes",
           EPILOGUE),
    # --- the call contract (mmaemu/_checks.py, mmaemu/platform.py)
    Mutant("divisible-by-8", "mmaemu/_checks.py", "if k % 16 != 0 or n % 16 != 0:",
           "if k % 8 != 0 or n % 8 != 0:", "mat2 accepted when divisible by 8 only", CALL),
    Mutant("workspace0-splits", "mmaemu/platforms/_splitk.py", "    if profile.workspace_bytes == 0:\n",
           "    if profile.workspace_bytes < 0:\n", "no rule that a zero workspace never splits", CALL),
    # --- the row-wise CUTLASS kernel models (mmaemu/kernels/): each choice read from the source, flipped
    Mutant("rowwise-rule5-not-transposed", "mmaemu/kernels/_sm90.py", "return 5, True, (2, 1), 1",
           "return 5, False, (2, 1), 1", "sm_90 dispatch rule 5 (M' % 256 > 0, N' % 256 == 0) runs untransposed",
           ROWWISE),
    Mutant("rowwise-scale-order-swapped", "mmaemu/kernels/_rowwise.py",
           "s1, s2 = (col, row) if plan.transposed else (row, col)",
           "s1, s2 = (row, col) if plan.transposed else (col, row)",
           "the epilogue multiplies by the other scale first (scale_b untransposed, scale_a transposed)", ROWWISE),
    Mutant("rowwise-zero-bias-absent", "mmaemu/kernels/_epilogue.py",
           "if bias is None and zero_bias is ZeroBias.ABSENT:", "if bias is None:",
           "without a bias nothing is added (an exact zero product keeps its sign)", ROWWISE),
    Mutant("rowwise-promotion-256", "mmaemu/kernels/_model.py", "    promotion=128,\n    order=ScaleOrder.DISPATCH,",
           "    promotion=256,\n    order=ScaleOrder.DISPATCH,",
           "the sm_90 FP8 main loop promotes every 256 elements of K (8 wgmma), not 128", ROWWISE),
    Mutant("rowwise-multiply-then-add", "mmaemu/kernels/_model.py",
           "    fusion=Fusion.FMA,\n    zero_bias=ZeroBias.PLUS_ZERO,\n)",
           "    fusion=Fusion.SEPARATE,\n    zero_bias=ZeroBias.PLUS_ZERO,\n)",
           "sm_90: the second scale multiply and the bias addition rounded separately (no FFMA)", ROWWISE),
    Mutant("rowwise-fma-double-rounding", "mmaemu/kernels/_epilogue.py",
           "y = _round_sum_to_fp32(product, beta.expand_as(product))", "y = (product + beta).to(torch.float32)",
           "the fused multiply-add's sum rounded to float64, then to fp32", ROWWISE),
    Mutant("rowwise-sm89-residue-last", "mmaemu/kernels/_plans.py",
           "residue_first=model.accumulation is Accumulation.STAGED)", "residue_first=False)",
           "sm_89 staged accumulation takes the partial k-tile last", ROWWISE),
    Mutant("rowwise-sm89-not-staged", "mmaemu/kernels/_plans.py",
           "groups = [halves[:1]] + [halves[i:i + 2] for i in range(1, len(halves) - 1, 2)] + [halves[-1:]]",
           "groups = [halves[i:i + 2] for i in range(0, len(halves), 2)]",
           "sm_89: a chain per 64-wide k-tile, not the staged groups", ROWWISE),
    Mutant("rowwise-sm89-no-stream-k", "mmaemu/kernels/_model.py", "    schedule=Schedule.STREAM_K,",
           "    schedule=Schedule.NO_SPLIT,", "sm_89: every tile accumulates all of K in one block (no stream-K)", ROWWISE),
    Mutant("rowwise-sm89-occupancy-1", "mmaemu/kernels/_model.py", "    sm_occupancy=2,", "    sm_occupancy=1,",
           "sm_89 stream-K assumes one block per SM", ROWWISE),
    Mutant("rowwise-check-bias-dim-skipped", "mmaemu/_rowwise_checks.py",
           'lambda a, b, sa, sb, bias, o: bias is None or bias.dim() == 1),',
           'lambda a, b, sa, sb, bias, o: True),', "a [1, N] bias accepted on the row-wise path",
           ("tests/unit/test_checks.py", "-k", "rowwise")),
    # --- the block-scaled kernel models (mmaemu/kernels/block_*.py): each choice read from the source, flipped
    Mutant("block-deepgemm-chain-64", "mmaemu/kernels/_block_model.py",
           "    k_block=GROUP,\n    combination=Combination.SCALES_FIRST,",
           "    k_block=64,\n    combination=Combination.SCALES_FIRST,",
           "DeepGEMM starts a fresh chain every 64 elements of K (2 wgmma), not 128", BLOCK),
    Mutant("block-deepgemm-chain-first", "mmaemu/kernels/_block_model.py",
           "    combination=Combination.SCALES_FIRST,\n    order=ScaleOrder.ROW_FIRST,",
           "    combination=Combination.CHAIN_FIRST,\n    order=ScaleOrder.ROW_FIRST,",
           "DeepGEMM multiplies the chain result by sa first, not the two scales together", BLOCK),
    Mutant("block-deepgemm-no-ffma", "mmaemu/kernels/_block_model.py",
           "    fusion=Fusion.FMA,\n    start=Start.PLUS_ZERO,\n    out_dtypes=(torch.bfloat16,),",
           "    fusion=Fusion.SEPARATE,\n    start=Start.PLUS_ZERO,\n    out_dtypes=(torch.bfloat16,),",
           "DeepGEMM's promotion rounded twice (FMUL, FADD: --fmad=false)", BLOCK),
    Mutant("block-deepgemm-first-stored", "mmaemu/kernels/_block_model.py",
           "    start=Start.PLUS_ZERO,\n    out_dtypes=(torch.bfloat16,),",
           "    start=Start.FIRST_STEP,\n    out_dtypes=(torch.bfloat16,),",
           "DeepGEMM's accumulator takes the first k-block's product without adding it to +0", BLOCK),
    Mutant("block-triton-scale-b-first", "mmaemu/kernels/_block_model.py",
           "        order=ScaleOrder.ROW_FIRST,\n        fusion=Fusion.FMA if fused",
           "        order=ScaleOrder.COLUMN_FIRST,\n        fusion=Fusion.FMA if fused",
           "the Triton kernels multiply the chain result by b_s first (SGLang's SWAP_AB order)", BLOCK),
    Mutant("block-triton-scales-first", "mmaemu/kernels/_block_model.py",
           "        combination=Combination.CHAIN_FIRST,", "        combination=Combination.SCALES_FIRST,",
           "the Triton kernels multiply a_s by b_s first (DeepGEMM's combination)", BLOCK),
    Mutant("block-triton-fusion-inverted", "mmaemu/kernels/_block_model.py",
           "fusion=Fusion.FMA if fused else Fusion.SEPARATE,", "fusion=Fusion.SEPARATE if fused else Fusion.FMA,",
           "Triton's fp fusion read the wrong way round (FFMA with enable_fp_fusion=False)", BLOCK),
    Mutant("block-triton-bk64-ignored", "mmaemu/kernels/_block_model.py", "        k_block=k_block,",
           "        k_block=GROUP,", "a BLOCK_K = 64 config chains 128 elements", BLOCK),
    Mutant("block-hmma-as-wgmma", "mmaemu/kernels/_block_model.py",
           '"hmma": (KernelArch.SM90, ZOO[(Architecture.HOPPER,\n          WideFormat.FP16)], Operands.FP16)',
           '"hmma": (KernelArch.SM90, HOPPER, Operands.FP8)',
           "sm_90 with BLOCK_M < 64 modelled as wgmma FP8 chains (not the fp16 HMMA the compiled code runs)", BLOCK),
    Mutant("block-step-order-swapped", "mmaemu/kernels/_block_arith.py",
           "first, second = (sa, sb) if model.order is ScaleOrder.ROW_FIRST else (sb, sa)",
           "first, second = (sb, sa) if model.order is ScaleOrder.ROW_FIRST else (sa, sb)",
           "the per-k-tile path multiplies by the other scale first", BLOCK),
    Mutant("block-step-fma-double-rounding", "mmaemu/kernels/_block_arith.py",
           "return _round_sum_to_fp32(x.to(torch.float64) * y.to(torch.float64), acc.to(torch.float64))",
           "return (x.to(torch.float64) * y.to(torch.float64) + acc.to(torch.float64)).to(torch.float32)",
           "the per-k-tile path's FFMA rounded to float64, then to fp32", BLOCK),
    Mutant("block-fused-order-swapped", "mmaemu/backends/_cpu_block.py", "a_first != lanes_over_a,",
           "a_first == lanes_over_a,", "the fused cpu kernel multiplies by the other scale first", BLOCK,
           needs="avx512"),
    Mutant("block-fused-no-fma", "mmaemu/backends/_cpu_block.py", "            return fma(x, y, acc)",
           "            return acc + x * y", "the fused cpu kernel rounds the product before the addition", BLOCK,
           needs="avx512"),
    Mutant("block-fused-nan-rule", "mmaemu/kernels/_block_arith.py",
           "nan = nan_rows(a)[:, None] | nan_rows(b)[None, :]", "nan = nan_rows(a)[:, None] & nan_rows(b)[None, :]",
           "the fused path's output is NaN only where both rows hold a NaN code", BLOCK,
           needs="avx512"),
    Mutant("block-quant-scale-by-reciprocal", "mmaemu/_block_quant.py",
           "scales = absmax / torch.tensor(_E4M3.max_finite, dtype=torch.float32)",
           "scales = absmax * torch.tensor(1 / _E4M3.max_finite, dtype=torch.float32)",
           "the activation scale as amax * rn(1/448) (what Triton folds), not vLLM CUDA's IEEE division",
           ("tests/unit/test_block_quantization.py",)),
    Mutant("block-quant-nan-kept", "mmaemu/_block_quant.py",
           "q = torch.where(torch.isnan(q), -_E4M3.max_finite, q).clamp(", "q = q.clamp(",
           "a NaN activation stays NaN (vLLM's fmaxf makes it -448)", ("tests/unit/test_block_quantization.py",)),
    Mutant("block-quant-ieee-division", "mmaemu/_block_quant.py", "_E4M3.max_finite / safe,",
           "torch.tensor(_E4M3.max_finite) / safe,",
           "transformers' 448 / max_abs as an IEEE division (torch computes reciprocal() * 448)",
           ("tests/unit/test_block_quantization.py",)),
    # --- the compiled CPU backend (mmaemu/backends/_cpu.py)
    Mutant("table-setting-formats-swapped", "mmaemu/platforms/_table.py",
           "setting_code(FP8_FORMATS.index(self.fmt_a), FP8_FORMATS.index(self.fmt_b),",
           "setting_code(FP8_FORMATS.index(self.fmt_b), FP8_FORMATS.index(self.fmt_a),",
           "the split-K table's setting byte built with the two formats swapped",
           first("tests/evidence/test_platform.py", CALL)),
    Mutant("cpu-floor-not-trunc", "mmaemu/backends/_cpu_steps.py", "(term((v2 * q2[j]) * s)",
           "(np.floor((v2 * q2[j]) * s)", "cpu: one of four product terms rounded toward -inf", CPU, env=PORTABLE),
    Mutant("cpu-mask-one-bit-short", "mmaemu/backends/_cpu.py", "keep_mask = np.int32(~((1 << (23 - frac)) - 1))",
           "keep_mask = np.int32(~((1 << (24 - frac)) - 1))", "cpu: the block sum keeps F - 1 fraction bits", CPU, env=PORTABLE),
    Mutant("cpu-small-products-dropped", "mmaemu/backends/_cpu.py", "_NO_PRODUCT_BELOW = -40",
           "_NO_PRODUCT_BELOW = -20", "cpu: blocks whose products are all below 2**-20 treated as empty", CPU, env=PORTABLE),
    Mutant("cpu-c-not-aligned", "mmaemu/backends/_cpu.py",
           "_NO_PRODUCT_BELOW, -100, bits & 0x7FFFFFFF,",
           "_NO_PRODUCT_BELOW, -100, 0,",
           "cpu: c left out of the block maximum", CPU, env=PORTABLE),
    Mutant("cpu-subnormal-decode", "mmaemu/backends/_cpu_fp8.py",
           "lead = np.int32(frac >= 2) + np.int32(frac >= 4)", "lead = np.int32(frac >= 2)",
           "cpu: subnormal FP8 values 4..7 decoded with the wrong leading bit", CPU, env=PORTABLE),
    Mutant("inf-columns-not-recomputed", "mmaemu/backends/_reference.py",
           "        out[:, cols] = accumulate(a, b[cols], preset, plan).to(out.device)",
           "        pass", "fast backends: outputs whose row of b holds an Inf code keep the kernel's finite value", CPU, env=PORTABLE),
    Mutant("dispatch-no-inf-rule", "mmaemu/backends/_dispatch.py", "    if result.inf_zeroed:",
           "    if False:", "the dispatcher keeps a backend's zeros for Inf codes (the IEEE rules lost)", CPU,
           env=PORTABLE),
    Mutant("dispatch-no-delegation", "mmaemu/backends/_dispatch.py",
           "    if not (all(d in executor.formats for d in dtypes) and executor.expresses(preset, dtypes)):",
           "    if False:", "the dispatcher runs a backend's kernels on presets they do not express",
           ("tests/unit/test_differential.py", "tests/unit/test_triton_backend.py", "-k", "differential or delegated")),
    Mutant("cpu-pairwise-pairs-one-by-one", "mmaemu/backends/_cpu_scratch.py",
           "np.asarray(flat.role, np.int64), block)", "np.zeros(len(flat.role), np.int64), block)",
           "cpu: pairwise pairs added to the total one part at a time",
           first("tests/evidence/test_against_slowmodel.py", CPU), env=PORTABLE),
    Mutant("zoo-subnormal-exponent-not-floored", "mmaemu/formats.py",
           "exponent = torch.clamp(field - bias, min=fmt.emin)", "exponent = field - bias",
           "fp16, bf16 and tf32 subnormal operands get exponent -bias, not emin", ZOO),
    Mutant("zoo-fp16-c-exponent-floor", "mmaemu/model.py",
           "torch.clamp(fp32_exponent(c), min=-14)", "fp32_exponent(c)",
           "an fp16 accumulator's exponent is floored at fp32's -126, not fp16's -14", ZOO),
    Mutant("zoo-cpu-shared-block-max-drops-a-k", "mmaemu/backends/_cpu_steps.py",
           "max(narrow(e2 + r2[j]), narrow(e3 + r3[j]))", "narrow(e2 + r2[j])",
           "the cpu kernels' shared block maximum skips every fourth k (the zoo kernels' tests)",
           first("tests/unit/test_zoo_accumulate.py", ZOO)),
    Mutant("zoo-cpu-fast-range", "mmaemu/backends/_cpu_zoo.py",
           "_FAST_EMIN, _FAST_EMAX = -50, 60", "_FAST_EMIN, _FAST_EMAX = -130, 130",
           "the cpu backend's fp32 zoo kernel runs rows whose products leave fp32's range", ZOO),
)


@dataclass
class Outcome:
    """The result of one mutant."""

    id: str
    status: str  # killed, survived, malformed, equivalent, not-run (a CPU feature it needs is missing: ``needs``)
    seconds: float
    detail: str = ""


def _copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns(".git", "__pycache__", "*.nbi", "*.nbc", ".hypothesis", "*.egg-info", "site")
    for name in ("mmaemu", "tests", "tools", "docs", "examples"):
        if (ROOT / name).exists():
            shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)


@functools.lru_cache(maxsize=None)
def _host_has(feature: str) -> bool:
    """Whether the cpu backend's kernels that need ``feature`` run here (asked in a process with the tests' environment,
    so that ``NUMBA_CPU_NAME`` counts as it does for them)."""
    assert feature == "avx512", feature
    probe = "from mmaemu.backends import _cpu_simd; print(_cpu_simd.available())"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() == "True"


def _run_one(mutant: Mutant, work: Path) -> Outcome:
    if mutant.equivalent:
        return Outcome(mutant.id, "equivalent", 0.0, mutant.equivalent)
    if mutant.needs and not _host_has(mutant.needs):
        return Outcome(mutant.id, "not-run", 0.0, f"needs {mutant.needs}: the mutated code does not run on this CPU")
    target = work / mutant.path
    original = target.read_text()
    if original.count(mutant.old) != 1:
        return Outcome(mutant.id, "malformed", 0.0, f"text found {original.count(mutant.old)} times in {mutant.path}")
    target.write_text(original.replace(mutant.old, mutant.new))
    env = dict(os.environ, PYTHONPATH=str(work), MMAEMU_SHARED=str(SHARED), PYTHONDONTWRITEBYTECODE="1",
               HYPOTHESIS_PROFILE="mutants", **dict(mutant.env))
    start = time.perf_counter()
    stop = [] if mutant.every_backend else ["-x"]
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", *stop, "-q", "-p", "no:randomly", *mutant.tests],
                              cwd=work, env=env, capture_output=True, text=True, check=False)
    finally:
        target.write_text(original)
    seconds = time.perf_counter() - start
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    if proc.returncode == 1 and mutant.every_backend:
        failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED ")]
        spared = [b for b in mutant.every_backend if not any(f"[{b}-" in line or f"[{b}]" in line for line in failed)]
        if spared:
            return Outcome(mutant.id, "survived", seconds, f"no test of backend(s) {spared} failed: {last}")
        return Outcome(mutant.id, "killed", seconds, f"failed on every backend ({', '.join(mutant.every_backend)}): {last}")
    if proc.returncode == 1:
        return Outcome(mutant.id, "killed", seconds, last)
    if proc.returncode == 0:
        return Outcome(mutant.id, "survived", seconds, last)
    return Outcome(mutant.id, "malformed", seconds, f"pytest exit {proc.returncode}: {last}")


def _run_all(chosen: list[Mutant], jobs: int) -> list[Outcome]:
    """Run ``chosen``, ``jobs`` at a time (each job in its own copy of the tree); outcomes in ``chosen``'s order,
    a line printed as each one ends."""
    jobs = max(1, min(jobs, len(chosen)))
    outcomes: dict[str, Outcome] = {}
    with tempfile.TemporaryDirectory(prefix="mmaemu-mutants-") as tmp:
        trees: queue.Queue[Path] = queue.Queue()
        for j in range(jobs):
            work = Path(tmp) / f"tree{j}"
            work.mkdir()
            _copy_tree(work)
            trees.put(work)

        def run(mutant: Mutant) -> Outcome:
            work = trees.get()
            try:
                return _run_one(mutant, work)
            finally:
                trees.put(work)

        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(run, m): m for m in chosen}
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                mutant, outcome = futures[future], future.result()
                outcomes[mutant.id] = outcome
                print(f"[{done:2d}/{len(chosen)}] {outcome.status:10s} {mutant.id:32s} {outcome.seconds:6.1f} s  "
                      f"{outcome.detail[:90]}", flush=True)
    return [outcomes[m.id] for m in chosen]


def sample(mutants: tuple[Mutant, ...]) -> list[Mutant]:
    """The CI sample: every third mutant, so each area of the model is represented."""
    return [m for i, m in enumerate(mutants) if i % 3 == 0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="run every mutant (default: the CI sample)")
    parser.add_argument("--only", nargs="+", default=None, help="run these mutant ids")
    parser.add_argument("--list", action="store_true", help="print the catalogue and exit")
    parser.add_argument("--json", default=None, help="write the outcomes to this file")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="mutants run at a time, each in its own copy of the tree (default: 2, or 1 on one core)")
    args = parser.parse_args(argv)
    if args.list:
        for m in MUTANTS:
            print(f"{m.id:32s} {m.path:28s} {m.what}{'  [equivalent]' if m.equivalent else ''}")
        return 0
    if not (SHARED / "hw-vectors").exists():
        print(f"the mutation tier needs the hardware evidence at {SHARED}", file=sys.stderr)
        return 1
    if args.only:
        unknown = set(args.only) - {m.id for m in MUTANTS}
        if unknown:
            parser.error(f"unknown mutant ids: {sorted(unknown)}")
        chosen = [m for m in MUTANTS if m.id in args.only]
    else:
        chosen = list(MUTANTS) if args.all else sample(MUTANTS)
    outcomes = _run_all(chosen, args.jobs)
    counts = {s: sum(o.status == s for o in outcomes) for s in ("killed", "survived", "malformed", "equivalent", "not-run")}
    print(f"\n{len(outcomes)} mutants: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    if args.json:
        recorded = [asdict(o) for o in outcomes]
        if args.only and Path(args.json).exists():  # update those mutants in an earlier full run
            earlier = json.loads(Path(args.json).read_text())["outcomes"]
            fresh = {o["id"] for o in recorded}
            recorded = [o for o in earlier if o["id"] not in fresh] + recorded
            order = {m.id: i for i, m in enumerate(MUTANTS)}
            recorded.sort(key=lambda o: order.get(o["id"], len(order)))
        Path(args.json).write_text(json.dumps({"mutants": [asdict(m) for m in MUTANTS], "outcomes": recorded},
                                              indent=1) + "\n")
    return 0 if counts["survived"] == 0 and counts["malformed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
