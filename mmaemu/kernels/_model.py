"""Named kernel models: the arithmetic of a GPU kernel that is not cuBLASLt, as a frozen record.

A :class:`KernelModel` says, for one kernel of the reference platform's torch, which tensor-core preset
its main loop runs, how it accumulates over K (:class:`Accumulation`, :class:`Schedule`), and how its
epilogue scales, adds the bias and rounds (:class:`ScaleOrder`, :class:`Fusion`, :class:`ZeroBias`).
Each field is a choice read from the kernel's source and machine code, cited in the model's
``source`` and in the [Note] blocks of the modules that compute it. The fields other than the
citation are also the *candidates* a recording decides between: :func:`candidates` lists, for a
base model, every variant that flips one or more of its choices, and the recorder's row-wise probes
(:mod:`mmaemu.recording._rowwise`) tell them apart on a GPU.

The shipped models are torch 2.7.1's row-wise CUTLASS kernels (``aten/src/ATen/native/cuda/
RowwiseScaledMM.cu``): :data:`ROWWISE_SM90` (H100) and :data:`ROWWISE_SM89` (RTX 4060).
:func:`kernel_model` resolves a model or candidate by name (the one home of the names a recording or a
profile carries).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import TypeVar

from .._enums import TextEnum
from ..errors import UnknownNameError
from ..presets import ADA, HOPPER, Maturity, Preset

__all__ = [
    "Accumulation",
    "Fusion",
    "KernelArch",
    "KernelModel",
    "ROWWISE_SM89",
    "ROWWISE_SM90",
    "ScaleOrder",
    "Schedule",
    "ZeroBias",
    "candidates",
    "kernel_model",
    "rowwise_model_for",
]


class KernelArch(TextEnum):
    """The GPU architecture a kernel's machine code is compiled for."""

    SM90 = "sm_90"
    SM89 = "sm_89"


class ScaleOrder(TextEnum):
    """Which scale multiplies the accumulator first (the second is the fused multiply-add's multiplier)."""

    #: the kernel's own choice per shape: sm_90's transposed dispatch (:mod:`mmaemu.kernels._sm90`), never on sm_89
    DISPATCH = "dispatch"
    #: always ``scale_a`` (the row scale) first: never transposed
    ROW_FIRST = "row-first"
    #: always ``scale_b`` (the column scale) first: always transposed
    COLUMN_FIRST = "column-first"


class Fusion(TextEnum):
    """How the second scale multiply and the bias addition are rounded."""

    #: one fused multiply-add, one rounding (FFMA)
    FMA = "fma"
    #: a multiply rounded to fp32, then an addition rounded to fp32 (FMUL, FADD)
    SEPARATE = "separate"


class ZeroBias(TextEnum):
    """What the epilogue adds when the call has no bias."""

    #: the bias broadcast's null default, +0, is still added (an exact zero product becomes +0)
    PLUS_ZERO = "plus-zero"
    #: nothing is added (a zero product keeps its sign)
    ABSENT = "absent"


class Accumulation(TextEnum):
    """How a thread block's main loop adds the tensor-core chains of its K range (``use_fast_accum=False``;
    with fast accumulation every model runs one chain over the range)."""

    #: a new chain from +0 every ``promotion`` elements from the range's start, the chain results added in
    #: fp32 from +0 (sm_90's FP8 main loop)
    PROMOTED = "promoted"
    #: CUTLASS 2.x's staged accumulation (sm_89), the partial k-tile first: see :mod:`mmaemu.kernels._plans`
    STAGED = "staged"
    #: staged accumulation with the partial k-tile last (a candidate only)
    STAGED_RESIDUE_LAST = "staged-residue-last"


class Schedule(TextEnum):
    """How K is divided between thread blocks."""

    #: every output tile accumulates all of K in one block
    NO_SPLIT = "no-split"
    #: CUTLASS 2.x stream-K: :mod:`mmaemu.kernels._streamk`
    STREAM_K = "stream-k"


#: The fields that are choices (what a candidate may flip), in the order a variant's name lists them.
_CHOICES = ("order", "fusion", "zero_bias", "accumulation", "promotion", "schedule")


_Model = TypeVar("_Model")


def named_variant(model: _Model, base: _Model, choices: tuple[str, ...], changes: dict[str, object], what: str) -> _Model:
    """``model`` (a frozen dataclass with a ``name``) with some ``choices`` changed, named
    ``<base>/<field>=<value>/...`` by every choice that differs from ``base``'s (``base``'s own name when none does).

    Raises:
        TypeError: a change that is not one of ``choices`` (``what`` names the kind of model).
    """
    unknown = set(changes) - set(choices)
    if unknown:
        raise TypeError(f"not a {what} choice: {sorted(unknown)}")
    changed = dataclasses.replace(model, **changes)  # type: ignore[type-var]
    flips = [f for f in choices if getattr(changed, f) != getattr(base, f)]
    name = "/".join([getattr(base, "name"), *(f"{f.replace('_', '-')}={getattr(changed, f)}" for f in flips)])
    return dataclasses.replace(changed, name=name)  # type: ignore[type-var]


@dataclass(frozen=True)
class KernelModel:
    """One kernel's arithmetic, every choice named.

    Attributes:
        name: registry name (a variant's name lists the choices it flips).
        arch: the machine code's architecture.
        preset: the tensor-core instruction the main loop runs.
        kernel: the kernel as the binary names it.
        source: the evidence for the choices (file, function, lines; machine code).
        schedule: how K is divided between blocks.
        accumulation: how a block adds its chains (slow accumulation).
        promotion: elements of K per chain for :attr:`Accumulation.PROMOTED`.
        order: which scale multiplies first.
        fusion: one rounding or two for the second multiply and the bias.
        zero_bias: what is added without a bias.
        sm_occupancy: stream-K only: thread blocks per SM the heuristic assumes (derived, see
            :data:`ROWWISE_SM89`); 0 otherwise.
        maturity: experimental until a recording of the GPU decides every choice.
    """

    name: str
    arch: KernelArch
    preset: Preset
    kernel: str
    source: str
    schedule: Schedule
    accumulation: Accumulation
    promotion: int
    order: ScaleOrder
    fusion: Fusion
    zero_bias: ZeroBias
    sm_occupancy: int = 0
    maturity: Maturity = Maturity.EXPERIMENTAL

    @property
    def base(self) -> str:
        """The name of the model this one is a variant of (itself for a base model)."""
        return self.name.split("/", 1)[0]

    @property
    def choices(self) -> str:
        """Every choice, as ``field=value`` pairs (what explain and the probes' report print)."""
        return ", ".join(f"{field.replace('_', '-')}={getattr(self, field)}" for field in _CHOICES)

    def variant(self, **changes: object) -> KernelModel:
        """This model with some choices changed, named ``<base>/<field>=<value>/...`` by every choice that differs
        from the base model's (the base's own name when none does)."""
        return named_variant(self, _BASES[self.base], _CHOICES, changes, "kernel")


# [Note: the sm_90 row-wise kernel] torch 2.7.1's ``_scaled_mm`` sends row-wise scales (scale_a [M, 1],
# scale_b [1, N], fp32) with a bf16 output to ``at::cuda::detail::f8f8bf16_rowwise``
# (aten/src/ATen/native/cuda/Blas.cpp, ``_scaled_mm_out_cuda``: the ``ScalingType::RowWise`` branch
# after the zero-size return; the host code of the PyPI torch-2.7.1+cu126 libtorch_cuda.so tests
# nothing else there: no cuBLASLt call, no version test). RowwiseScaledMM.cu dispatches sm 9.x to
# ``dispatch_fp8_rowwise_kernel_on_cluster_size_and_transpose`` (:mod:`mmaemu.kernels._sm90`) and runs a
# CUTLASS 3 ``GemmUniversal`` with the wgmma atom ``MMA_64x128x32_F32E4M3E4M3_SS_TN`` (the hopper
# preset's 32-product block), tile 64x128x128 or 128x128x128, scheduler ``void`` (persistent, no K split:
# CUTLASS v3.8.0 ``static_tile_scheduler.hpp`` 437-441; the 64x128 kernels are one CTA per tile,
# ``sm90_gemm_tma_warpspecialized.hpp`` 111-115). Slow accumulation is ``GmmaFP8Accumulation``
# (``fp8_accumulation.hpp`` 67-75: ``accum_(i) += accum_temp_(i)``) with the default
# ``mma_promotion_interval = 4`` wgmma of k = 32 (``sm90_mma_tma_gmma_ss_warpspecialized_fp8.hpp``
# 168), so a chain per 128-wide k-tile from scale-d = 0, added by FADD RN into a main accumulator
# that starts as ``FADD R, RZ, R`` (+0): the SASS of every slow sm_90a kernel of the wheel. Fast
# accumulation is one wgmma chain over K (no FADD in any fast kernel's SASS). The epilogue EVT is
# ``Cast(Add(Bias, Mul(WScale, Mul(XScale, Acc))))`` and nvcc contracts the outer multiply and the add
# into one FFMA (SASS of all 64 kernels: ``FMUL t, x_scale, acc``; ``FFMA y, t, w_scale, bias``;
# ``F2FP.BF16.F32.PACK_AB``; no ``.FTZ``); without a bias the broadcast's null default is +0
# (``sm90_visitor_load_tma_warpspecialized.hpp`` 1001, 1106-1120, 1266, 1345-1346) and the FFMA still
# adds it. Not verified: the reference platform runs torch 2.7.1+cu128 (nvcc 12.8), whose SASS was
# not read (the same source); no hardware output of a row-wise call exists.
ROWWISE_SM90 = KernelModel(
    name="cutlass-rowwise-sm90",
    arch=KernelArch.SM90,
    preset=HOPPER,
    kernel="cutlass::device_kernel<GemmUniversal<...MainloopSm90TmaGmmaWarpSpecialized[FP8]...>> "
    "(torch 2.7.1 f8f8bf16_rowwise_impl)",
    source="torch 2.7.1 aten/src/ATen/native/cuda/RowwiseScaledMM.cu (f8f8bf16_rowwise_impl, "
    "dispatch_fp8_rowwise_kernel_on_cluster_size_and_transpose); CUTLASS v3.8.0 fp8_accumulation.hpp 67-75, "
    "sm90_mma_tma_gmma_ss_warpspecialized_fp8.hpp 168; SASS of torch-2.7.1+cu126 libtorch_cuda.so (cubin 983)",
    schedule=Schedule.NO_SPLIT,
    accumulation=Accumulation.PROMOTED,
    promotion=128,
    order=ScaleOrder.DISPATCH,
    fusion=Fusion.FMA,
    zero_bias=ZeroBias.PLUS_ZERO,
)

# [Note: the sm_89 row-wise kernel] On compute capability 8.9 RowwiseScaledMM.cu runs
# ``f8f8bf16_rowwise_impl_sm89``: one CUTLASS 2.x ``DefaultGemmWithVisitor`` for every shape,
# threadblock 64x128x64, warp 32x64x64, instruction 16x8x32 (QMMA.16832: two chained ada 16-blocks),
# 4 stages, ``ThreadblockSwizzleStreamK``, ``OpMultiplyAdd`` (slow) or ``OpMultiplyAddFastAccum``, the
# same EVT epilogue with the bias a row broadcast (null default ``DtypeBias(0)``), output row-major,
# never transposed. The slow kernel is CUTLASS's staged accumulation (``arch/mma_sm89.h`` 74-97,
# ``mma_multistage.h`` ``mac_loop_iter``/``gemm_iters``: :mod:`mmaemu.kernels._plans`); K is divided by
# stream-K (:mod:`mmaemu.kernels._streamk`) from the device's SM count (the profile's, from its GPU's record)
# and the occupancy the CUDA occupancy API reports for the kernel (``gemm_universal_base.h``
# ``init_device_props``). That occupancy is derived, not measured: 49,152 bytes of dynamic shared memory
# (the immediate passed to ``cudaFuncSetAttribute`` and the occupancy query in the wheel's host code) plus
# the 1 KiB the runtime reserves per block, against the 100 KiB of shared memory an SM of compute
# capability 8.9 has, admit 2 blocks; 128 threads of 226 (slow) or 162 (fast) registers admit 2 or 3;
# any register count up to 255 admits at least 2, so 2 for both kernels, whatever nvcc 12.8 allocated.
# The RTX 4060 ran a row-wise call of 16 x 16 x 32 with a bias (recordings/rtx4060
# ``c4.v5_rerec/call34/out``: the output was not recorded), so the cu128 build has this kernel for sm_89.
ROWWISE_SM89 = KernelModel(
    name="cutlass-rowwise-sm89",
    arch=KernelArch.SM89,
    preset=ADA,
    kernel="cutlass::Kernel2<DefaultGemmWithVisitor<...GemmShape<64, 128, 64>, GemmShape<32, 64, 64>, "
    "GemmShape<16, 8, 32>...ThreadblockSwizzleStreamK, 4...>> (torch 2.7.1 f8f8bf16_rowwise_impl_sm89)",
    source="torch 2.7.1 aten/src/ATen/native/cuda/RowwiseScaledMM.cu (f8f8bf16_rowwise_impl_sm89); CUTLASS v3.8.0 "
    "threadblock_swizzle_streamk.h, gemm_universal_with_visitor_streamk.h, mma_multistage.h, "
    "predicated_tile_access_iterator.h; SASS of torch-2.7.1+cu126 libtorch_cuda.so (cubin 982)",
    schedule=Schedule.STREAM_K,
    accumulation=Accumulation.STAGED,
    promotion=0,
    order=ScaleOrder.DISPATCH,
    fusion=Fusion.FMA,
    zero_bias=ZeroBias.PLUS_ZERO,
    sm_occupancy=2,
)

_BASES = {m.name: m for m in (ROWWISE_SM90, ROWWISE_SM89)}

#: The choices a recording decides between, per base model (every combination is a candidate).
_OPTIONS: dict[str, dict[str, tuple[object, ...]]] = {
    ROWWISE_SM90.name: {
        "order": (ScaleOrder.DISPATCH, ScaleOrder.ROW_FIRST, ScaleOrder.COLUMN_FIRST),
        "fusion": (Fusion.FMA, Fusion.SEPARATE),
        "zero_bias": (ZeroBias.PLUS_ZERO, ZeroBias.ABSENT),
        "promotion": (64, 128, 256, 512),
    },
    ROWWISE_SM89.name: {
        # on sm_89 the dispatch never transposes: ROW_FIRST is DISPATCH
        "order": (ScaleOrder.DISPATCH, ScaleOrder.COLUMN_FIRST),
        "fusion": (Fusion.FMA, Fusion.SEPARATE),
        "zero_bias": (ZeroBias.PLUS_ZERO, ZeroBias.ABSENT),
        "accumulation": (Accumulation.STAGED, Accumulation.STAGED_RESIDUE_LAST, Accumulation.PROMOTED),
        "schedule": (Schedule.STREAM_K, Schedule.NO_SPLIT),
    },
}


def _promoted(model: KernelModel) -> KernelModel:
    """An sm_89 candidate with promoted accumulation takes cuBLAS's interval (128); others keep theirs."""
    if model.accumulation is Accumulation.PROMOTED and model.promotion == 0:
        return model.variant(promotion=128)
    return model


def candidates(base: KernelModel | str) -> tuple[KernelModel, ...]:
    """Every candidate of a base model: each combination of its choices' options (the base model first).

    Example:
        >>> len(candidates("cutlass-rowwise-sm90")), candidates("cutlass-rowwise-sm90")[0].name
        (48, 'cutlass-rowwise-sm90')
    """
    model = kernel_model(base) if isinstance(base, str) else base
    options = _OPTIONS[model.base]
    fields = list(options)
    out = []
    for values in itertools.product(*(options[f] for f in fields)):
        out.append(_promoted(_BASES[model.base].variant(**dict(zip(fields, values)))))
    out.sort(key=lambda c: c.name != model.base)  # the base model first, otherwise the product's order
    return tuple(out)


_BY_NAME: dict[str, KernelModel] = {}


def kernel_model(name: str) -> KernelModel:
    """The kernel model or candidate of that name.

    Raises:
        UnknownNameError: a name that is no model and no candidate (the message lists the base models).
    """
    if not isinstance(name, str):
        raise TypeError(f"a kernel model's name is a string, not {type(name).__name__}")
    if name in _BASES:
        return _BASES[name]
    if not _BY_NAME:
        for base in _BASES.values():
            _BY_NAME.update((c.name, c) for c in candidates(base))
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownNameError(
            f"{name!r} is not a kernel model; the models are {sorted(_BASES)} (a candidate is '<model>/<choice>=<value>...')"
        ) from None


def rowwise_model_for(preset: Preset, decided: str | None) -> KernelModel | None:
    """The row-wise kernel model of a platform: the candidate its recording decided (``decided``), else its
    architecture's model from the source (the hopper preset: sm_90; ada: sm_89), else None (not modelled)."""
    if decided is not None:
        return kernel_model(decided)
    if preset.name == HOPPER.name:
        return ROWWISE_SM90
    if preset.name == ADA.name:
        return ROWWISE_SM89
    return None
