"""Named block-scaled kernel models: DeepGEMM's sm_90 FP8 GEMM and the Triton block-FP8 kernels, as frozen records.

A block-scaled FP8 GEMM (DeepSeek-V3 style: activations ``[M, K]`` with fp32 scales per 1 x 128 group, weights
``[N, K]`` with fp32 ``weight_scale_inv`` per 128 x 128 block) runs, in every kernel modelled here, a *fresh*
tensor-core chain per k-tile (the chain result ``d_j``), then combines ``d_j`` with the two scales of that
k-tile into an fp32 accumulator in CUDA cores, in ascending j, from +0. A :class:`BlockKernelModel` names
every choice of that arithmetic, each read from the kernel's source and compiled code (cited in its
``source`` and in the [Note] blocks below):

- the chain: the tensor-core preset, the operands it takes (:class:`Operands`), and its length ``k_block``
  (the kernel's ``BLOCK_K``: a new chain every ``k_block`` elements of K);
- the combination (:class:`Combination`): the two scales multiplied first, or the chain result multiplied
  by one scale (:class:`~mmaemu.kernels._model.ScaleOrder`: ``scale_a`` or ``scale_b`` first) and then by
  the other;
- the fusion (:class:`~mmaemu.kernels._model.Fusion`): the last multiply and the addition into the
  accumulator as one FFMA, or FMUL then FADD;
- the start (:class:`Start`): the accumulator starts at +0 and every step adds, or the first step's product
  is stored (a candidate only).

The fields that are choices are also the *candidates* a recording decides between
(:func:`block_candidates`; the recorder's block probes, :mod:`mmaemu.recording._blockwise`, tell them
apart on a GPU with the kernel installed). :func:`block_model` resolves a model or candidate by name.

Names: ``deepgemm-sm90``, and for the Triton family
``triton-block-<arch>-<path>-bk<BLOCK_K>-<fp fusion>@triton3.3-3.9`` (``<path>``: ``wgmma`` for a tile of
``BLOCK_M >= 64`` on sm_90, ``hmma`` for ``BLOCK_M < 64`` on sm_90, ``mma`` on sm_89; ``<fp fusion>``:
``fpfusion`` or ``nofpfusion``, Triton's ``enable_fp_fusion``). The Triton version range of a name fixes
``max_num_imprecise_acc`` at its default (2**30 on sm_90, no effect on sm_89), which never promotes a
k-tile's chain inside (its ``BLOCK_K`` <= 128 products).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from .._enums import TextEnum
from ..errors import UnknownNameError
from ..presets import ADA, HOPPER, ZOO, Architecture, Maturity, Preset
from ..formats import WideFormat
from ._model import Fusion, KernelArch, ScaleOrder, named_variant

__all__ = [
    "BLOCK_MODELS",
    "DEEPGEMM_SM90",
    "BlockFamily",
    "BlockKernelModel",
    "Combination",
    "Operands",
    "Start",
    "block_candidates",
    "block_model",
    "triton_model",
]

#: The scale granularity of every modelled kernel: 1 x 128 activation groups, 128 x 128 weight blocks.
GROUP = 128


class Combination(TextEnum):
    """How a k-tile's chain result ``d`` meets its two scales."""

    #: ``s = rn(sa * sb)``, then ``s * d`` into the accumulator (DeepGEMM, CUTLASS)
    SCALES_FIRST = "scales-first"
    #: ``t = rn(d * first)``, then ``t * second`` into the accumulator (Triton; the order names ``first``)
    CHAIN_FIRST = "chain-first"


class Start(TextEnum):
    """What the fp32 accumulator starts from."""

    #: +0, and every k-tile's step adds into it (``tl.zeros``; DeepGEMM's ``final_accum = {0}``)
    PLUS_ZERO = "plus-zero"
    #: the first k-tile's product is stored, no addition (a candidate only: differs in the sign of a zero)
    FIRST_STEP = "first-step"


class Operands(TextEnum):
    """What the tensor cores multiply."""

    #: the FP8 codes as they are (wgmma / mma.sync FP8)
    FP8 = "fp8"
    #: the codes converted to fp16 (exact) first, then fp16 ``mma.sync.m16n8k16`` (HMMA.16816.F32)
    FP16 = "fp16"


class BlockFamily(TextEnum):
    """Which kernel's host code decides the accepted shapes, layouts and outputs."""

    DEEPGEMM = "deepgemm"
    TRITON = "triton"


#: The fields that are choices (what a candidate may flip), in the order a variant's name lists them.
_CHOICES = ("combination", "order", "fusion", "start", "k_block")


@dataclass(frozen=True)
class BlockKernelModel:
    """One block-scaled kernel's arithmetic, every choice named.

    Attributes:
        name: registry name (a candidate's name lists the choices it flips after ``/``).
        family: whose host code the model follows (shapes, layouts, outputs).
        arch: the machine code's architecture.
        preset: the tensor-core instruction of the chain.
        operands: FP8 codes, or converted to fp16 first.
        kernel: the kernel as its source names it.
        source: the evidence for the choices (repository, commit, file, lines; compiled code).
        toolchain: the compiler and options the choices were read under (part of the name).
        k_block: elements of K per chain (the kernel's ``BLOCK_K``; 128 or 64).
        combination: scales first, or the chain result first.
        order: which scale multiplies the chain result first (:attr:`Combination.CHAIN_FIRST`; irrelevant
            otherwise: ``sa * sb`` is exact before its one rounding, whatever the order).
        fusion: one rounding for the last multiply and the addition (FFMA), or two.
        start: the accumulator's start.
        out_dtypes: the outputs the kernel writes.
        maturity: experimental until a recording of the kernel decides every choice.
    """

    name: str
    family: BlockFamily
    arch: KernelArch
    preset: Preset
    operands: Operands
    kernel: str
    source: str
    toolchain: str
    k_block: int
    combination: Combination
    order: ScaleOrder
    fusion: Fusion
    start: Start
    out_dtypes: tuple[torch.dtype, ...]
    maturity: Maturity = Maturity.EXPERIMENTAL

    @property
    def base(self) -> str:
        """The name of the model this one is a candidate of (itself for a base model)."""
        return self.name.split("/", 1)[0]

    @property
    def choices(self) -> str:
        """Every choice, as ``field=value`` pairs (explain and the probes' report print them)."""
        return ", ".join(f"{f.replace('_', '-')}={getattr(self, f)}" for f in _CHOICES)

    @property
    def formula(self) -> str:
        """The step of k-tile j, in words (``d``: its chain result; ``sa``, ``sb``: its scales)."""
        first, second = ("sa", "sb") if self.order is ScaleOrder.ROW_FIRST else ("sb", "sa")
        x, y, pre = (("s", "d", "s = rn(sa * sb); ") if self.combination is Combination.SCALES_FIRST
                     else ("t", second, f"t = rn(d * {first}); "))
        step = f"acc = fma({x}, {y}, acc)" if self.fusion is Fusion.FMA else f"acc = rn(acc + rn({x} * {y}))"
        start = "acc = +0; " if self.start is Start.PLUS_ZERO else "first k-tile stored without addition; "
        return start + pre + step

    def variant(self, **changes: object) -> BlockKernelModel:
        """This model with some choices changed, named ``<base>/<field>=<value>/...`` by every choice that
        differs from the base model's (the base's own name when none does)."""
        return named_variant(self, BLOCK_MODELS[self.base], _CHOICES, changes, "block kernel")


# [Note: DeepGEMM's sm_90 FP8 GEMM] deepseek-ai/DeepGEMM, the normal (non-grouped) GEMM with 1 x 128 and
# 128 x 128 fp32 scales. Its numerics are the same in every version: the promotion block is textually
# identical in the first release (a6d97a1c, deep_gemm/include/deep_gemm/fp8_gemm.cuh 283-294), the last
# fp8_gemm.cuh (8dfa3298, 329-345) and the rewrite (HEAD 54e22612, impls/sm90_fp8_gemm_1d2d.cuh 333-347):
#   - BLOCK_K == 128 is a static assert (a6d97a1 fp8_gemm.cuh 45); per k-block the math warpgroup issues
#     ``WGMMA::wgmma(desc_a, desc_b, accum, k)`` for k = 0..3 (268-272) with WGMMA::K = 32 and scale-d = k
#     (mma_utils.cuh 13-35): four wgmma m64nNk32 e4m3, the first without accumulator input, a fresh
#     128-product chain per k-block (the hopper preset's 32-product blocks);
#   - the promotion: ``scale_0_0 = scale_a_0 * scale_b_0`` and ``final_accum[i] += scale_0_0 * accum[i]``
#     (283-294), the accumulators from ``final_accum = {0}`` (230); the straddling of 128-column scale blocks
#     by a BLOCK_N that does not divide 128 (``kMustUseUniformedScaleB``, 58, 211-216) gives every column
#     exactly ``sb[n // 128, j]``, so no tile choice changes a bit;
#   - compiled: DeepGEMM builds with nvcc -O3 or NVRTC and no fast-math flag (a6d97a1 jit/compiler.py
#     99-103; HEAD csrc/jit/compiler.hpp 55-57, 205-208), so --fmad=true; the promotion block compiled with
#     NVRTC 12.8 + ptxas 12.8 (--gpu-architecture=sm_90a, DeepGEMM's flags) is ``mul.f32 s, sa, sb``,
#     ``fma.rn.f32 acc, s, d, acc`` (SASS ``FMUL``, ``FFMA``; 120 FFMA for 120 accumulators, no FADD), and
#     with --fmad=false FMUL + FADD: the FFMA is the compiler's contraction, and DeepGEMM's own
#     ``jit/interleave_ffma.py`` (76-103) rewrites only the control bits of those FFMAs;
#   - output: ``__float22bfloat162_rn`` (cvt.rn.bf16x2.f32, F2FP.BF16.F32.PACK_AB) and bf16 only
#     (``assert out.dtype == torch.bfloat16``, a6d97a1 jit_kernels/gemm.py 139); E4M3 x E4M3 only (137-138);
#     host shape rules ``n % 64 == 0 and k % 128 == 0`` (130-145).
# Not verified: no hardware output of DeepGEMM is recorded; the full kernel's SASS was not compiled (no CUDA
# toolkit here), only its promotion block, verbatim, in a harness kernel (NVRTC and ptxas of PyPI's
# nvidia-cuda-nvrtc-cu12 and nvidia-cuda-nvcc-cu12 12.8).
DEEPGEMM_SM90 = BlockKernelModel(
    name="deepgemm-sm90",
    family=BlockFamily.DEEPGEMM,
    arch=KernelArch.SM90,
    preset=HOPPER,
    operands=Operands.FP8,
    kernel="deep_gemm fp8_gemm_nt / gemm_fp8_fp8_bf16_nt (sm90_fp8_gemm_1d2d, fp8_gemm.cuh)",
    source="deepseek-ai/DeepGEMM a6d97a1c deep_gemm/include/deep_gemm/fp8_gemm.cuh 45, 230, 268-272, 283-294, "
    "308-322; mma_utils.cuh 13-35; jit_kernels/gemm.py 130-145; HEAD 54e22612 impls/sm90_fp8_gemm_1d2d.cuh 333-347; "
    "the promotion block compiled by NVRTC 12.8 + ptxas 12.8 for sm_90a: FMUL + FFMA, no FADD",
    toolchain="nvcc / NVRTC without fast math (--fmad=true: the promotion is an FFMA), every DeepGEMM version",
    k_block=GROUP,
    combination=Combination.SCALES_FIRST,
    order=ScaleOrder.ROW_FIRST,
    fusion=Fusion.FMA,
    start=Start.PLUS_ZERO,
    out_dtypes=(torch.bfloat16,),
)

# [Note: the Triton block-FP8 kernels] vLLM's ``_w8a8_block_fp8_matmul`` (vllm 0.10.0
# vllm/model_executor/layers/quantization/utils/fp8_utils.py 460-546, loop 517-533; the same body in SGLang
# 0.4.10 fp8_kernel.py 497-579), DeepSeek-V3's ``fp8_gemm_kernel`` (inference/kernel.py at 9b4e9788,
# 118-172) and torchao 0.18's ``blockwise_fp8_gemm_kernel`` (torchao/kernel/blockwise_quantization.py
# 63-109, the operator ``ao::blockwise_fp8_gemm``) share one loop:
# ``accumulator = tl.zeros(...)``; per k-tile ``accumulator += tl.dot(a, b) * a_s[:, None] * b_s[None, :]``
# (masked loads ``other=0.0`` for the K tail); ``c = accumulator.to(C.dtype.element_ty)``. Compiled on this
# CPU with Triton 3.3.1, 3.6.0 and 3.9.0 for sm_90 and sm_89 (all three kernels compiled, the same instructions
# in each; tools/evidence/block_fp8_static.py compiles torchao's with 3.6.0 and 3.9.0 and checks the instruction,
# the chain, the first scale and the fusion below, docs/data/block_fp8_static.json):
#   - ``tl.dot`` without an accumulator starts from a zero splat: on sm_90 with BLOCK_M >= 64 TTGIR
#     ``ttng.warp_group_dot ..., %zero, %false {maxNumImpreciseAcc = 1073741824}``, PTX BLOCK_K / 32 chained
#     ``wgmma.mma_async ... m64nNk32.f32.e4m3.e4m3``, the first with scale-d 0 (SASS ``QGMMA ... RZ, !UPT``):
#     the hopper preset's blocks; ``max_num_imprecise_acc`` defaults to 2**30 on capability 90 (Triton's
#     backends/nvidia/compiler.py), far above BLOCK_K, so the chain is never promoted inside;
#   - sm_90 with BLOCK_M < 64: no wgmma; ``F2FP.F16.E4M3.UNPACK_B`` (exact) then BLOCK_K / 16 chained
#     ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`` (HMMA.16816.F32), the first with C = 0: the
#     H100's fp16 instruction of the zoo (``hopper-fp16``, fitted on its WMMA m16n16k16 vectors);
#   - sm_89: every tile runs BLOCK_K / 32 chained ``mma.sync.aligned.m16n8k32 ... e4m3.e4m3.f32``
#     (QMMA.16832, the ada preset), the first with C = RZ, over the k-slices 0, 32, 64, 96 in order (TTGIR
#     ``ttg.memdesc_subslice`` offsets of the chained ``tt.dot``s);
#   - the combination: LLVM IR ``fmul %dot, %a_s`` then ``fmul %t, %b_s`` then ``fadd %acc, %u``; the NVPTX
#     backend contracts the second multiply with the addition when fp fusion is on (the default of every
#     version; Triton 3.9 warns that it becomes off in 3.10): PTX ``mul.f32 t, d, a_s`` and
#     ``fma.rn.f32 acc, t, b_s, acc``, one of each per accumulator and no ``add.f32``; with
#     ``enable_fp_fusion=False`` two ``mul.f32`` and an ``add.f32`` (ptxas --fmad=false). No ``.ftz``.
#   - output: ``arith.truncf`` (``cvt.rn.bf16x2.f32``; fp16 likewise RNE), fp32 stored as is; the host
#     (vLLM 0.10.0 fp8_utils.py 609-620) asserts the scale shapes ``[M, ceil(K/128)]`` and
#     ``[ceil(N/128), ceil(K/128)]`` and takes any M, N, K (masked tails).
# Which tile runs is the caller's: vLLM's default config (no tuned file for the GPU: the H100 PCIe and the
# RTX 4060 have none) is BLOCK_M 64, BLOCK_K 128 (fp8_utils.py 630-640); tuned files may set BLOCK_SIZE_M
# 16/32 (hmma on sm_90) or BLOCK_SIZE_K 64 (two steps per 128-group: ``bk64``); DeepSeek's and torchao's
# kernels are autotuned over BLOCK_M 16..128 on the device, so on sm_90 the path is the timing's winner: the
# model's name must say which. Not verified: no hardware output of these kernels is recorded.
_TRITON_SOURCE = ("vllm 0.10.0 fp8_utils.py 460-546 (_w8a8_block_fp8_matmul); deepseek-ai/DeepSeek-V3 9b4e9788 "
                  "inference/kernel.py 118-172 (fp8_gemm_kernel); torchao 0.18.0 torchao/kernel/"
                  "blockwise_quantization.py 63-109 (blockwise_fp8_gemm_kernel); compiled by Triton 3.3.1, 3.6.0 "
                  "and 3.9.0 for sm_90 and sm_89 (tools/evidence/block_fp8_static.py)")
_TRITON_RANGE = "triton3.3-3.9"
_PATHS = {"wgmma": (KernelArch.SM90, HOPPER, Operands.FP8), "hmma": (KernelArch.SM90, ZOO[(Architecture.HOPPER,
          WideFormat.FP16)], Operands.FP16), "mma": (KernelArch.SM89, ADA, Operands.FP8)}


def _triton(path: str, k_block: int, fused: bool) -> BlockKernelModel:
    arch, preset, operands = _PATHS[path]
    fusion = "fpfusion" if fused else "nofpfusion"
    return BlockKernelModel(
        name=f"triton-block-{arch.value.replace('_', '')}-{path}-bk{k_block}-{fusion}@{_TRITON_RANGE}",
        family=BlockFamily.TRITON,
        arch=arch,
        preset=preset,
        operands=operands,
        kernel="_w8a8_block_fp8_matmul (vLLM, SGLang) / fp8_gemm_kernel (DeepSeek-V3) / blockwise_fp8_gemm_kernel "
        "(torchao ao::blockwise_fp8_gemm)",
        source=_TRITON_SOURCE,
        toolchain=f"Triton 3.3.1 to 3.9.0, enable_fp_fusion={fused}, max_num_imprecise_acc at its default "
        f"({'2**30' if arch is KernelArch.SM90 else '0, no effect on mma.sync'})",
        k_block=k_block,
        combination=Combination.CHAIN_FIRST,
        order=ScaleOrder.ROW_FIRST,
        fusion=Fusion.FMA if fused else Fusion.SEPARATE,
        start=Start.PLUS_ZERO,
        out_dtypes=(torch.bfloat16, torch.float16, torch.float32),
    )


_TRITON_MODELS = tuple(_triton(path, k_block, fused) for path in _PATHS for k_block in (GROUP, 64)
                       for fused in (True, False))

#: Every base model by name: DeepGEMM and the Triton family (every path, BLOCK_K and fp fusion).
BLOCK_MODELS: dict[str, BlockKernelModel] = {m.name: m for m in (DEEPGEMM_SM90, *_TRITON_MODELS)}


def triton_model(arch: str, path: str, k_block: int = GROUP, fp_fusion: bool = True) -> BlockKernelModel:
    """The Triton block kernel's model for a tile: ``arch`` ``"sm90"`` or ``"sm89"``, ``path`` ``"wgmma"`` (sm_90,
    ``BLOCK_M >= 64``), ``"hmma"`` (sm_90, ``BLOCK_M < 64``) or ``"mma"`` (sm_89), ``k_block`` the ``BLOCK_K``.

    Example:
        >>> triton_model("sm90", "wgmma").name
        'triton-block-sm90-wgmma-bk128-fpfusion@triton3.3-3.9'
    """
    name = f"triton-block-{arch}-{path}-bk{k_block}-{'fpfusion' if fp_fusion else 'nofpfusion'}@{_TRITON_RANGE}"
    return block_model(name)


#: The choices a recording decides between, per family (every combination is a candidate). DeepGEMM's
#: order is no choice: its scales are multiplied together first, exactly before one rounding.
_OPTIONS: dict[BlockFamily, dict[str, tuple[object, ...]]] = {
    BlockFamily.DEEPGEMM: {"combination": tuple(Combination), "fusion": tuple(Fusion), "start": tuple(Start),
                           "k_block": (GROUP, 64)},
    BlockFamily.TRITON: {"combination": tuple(Combination), "order": (ScaleOrder.ROW_FIRST, ScaleOrder.COLUMN_FIRST),
                         "fusion": tuple(Fusion), "start": tuple(Start), "k_block": (GROUP, 64)},
}


def block_candidates(base: BlockKernelModel | str) -> tuple[BlockKernelModel, ...]:
    """Every candidate of a base model: each combination of its family's options (the base model first).

    A DeepGEMM-style combination has no order (``sa * sb`` commutes), so the Triton family's candidates that
    differ from another only in the order of a scales-first combination are left out.

    Example:
        >>> len(block_candidates("deepgemm-sm90")), block_candidates("deepgemm-sm90")[0].name
        (16, 'deepgemm-sm90')
    """
    model = block_model(base) if isinstance(base, str) else base
    root = BLOCK_MODELS[model.base]
    options = _OPTIONS[root.family]
    fields = list(options)
    out = []
    for values in itertools.product(*(options[f] for f in fields)):
        chosen = dict(zip(fields, values))
        if chosen.get("combination") is Combination.SCALES_FIRST and chosen.get("order", root.order) != root.order:
            continue
        out.append(root.variant(**chosen))
    out.sort(key=lambda c: c.name != root.name)
    return tuple(out)


_BY_NAME: dict[str, BlockKernelModel] = {}


def block_model(name: str) -> BlockKernelModel:
    """The block kernel model or candidate of that name.

    Raises:
        TypeError: ``name`` is not a string.
        UnknownNameError: a name that is no model and no candidate (the message lists the models).
    """
    if not isinstance(name, str):
        raise TypeError(f"a block kernel model's name is a string, not {type(name).__name__}")
    if name in BLOCK_MODELS:
        return BLOCK_MODELS[name]
    if not _BY_NAME:
        for base in BLOCK_MODELS.values():
            _BY_NAME.update((c.name, c) for c in block_candidates(base))
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownNameError(
            f"{name!r} is not a block-scaled kernel model; the models are {sorted(BLOCK_MODELS)} (a candidate is "
            "'<model>/<choice>=<value>...')") from None
