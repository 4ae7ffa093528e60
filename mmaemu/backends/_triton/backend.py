"""The Triton backend: the reference GPU's bits on any CUDA GPU, one formulation per launcher module.

:func:`accumulate` picks the formulation (:class:`~mmaemu.backends._triton._launch.Formulation`) a call
runs, or takes the caller's:

- :data:`Formulation.NATIVE` (:mod:`~mmaemu.backends._triton._native`): on compute capability 9.0, for the
  hopper arithmetic, the GPU's own FP8 instruction, once the self-test on that device found it equal to
  the reference backend (:func:`native_applies`; switched off there otherwise);
- :data:`Formulation.RZ` (:mod:`~mmaemu.backends._triton._rz`): round-toward-zero fmas into accumulators
  held in one binade, for the presets :func:`rz_expresses` (hopper and ada among them);
- :data:`Formulation.CONVERT` (:mod:`~mmaemu.backends._triton._convert`): the fp32 -> int32 conversion,
  for the other presets the backend :func:`expresses`.

RZ and CONVERT are exactly-defined fp32 and integer arithmetic (no ``tl.dot``), so the host GPU's own
tensor-core rounding never enters and their bits do not depend on the GPU model.

Special values:

- NaN codes count as zero in the exactly-defined formulations; in the sm_90 formulation the outputs they
  reach are unspecified. The dispatcher (:func:`mmaemu.backends._dispatch.run`) writes the canonical NaN over every output whose row or
  column holds one, so neither ever shows.
- Inf codes (E5M2) count as zero in the kernels; the dispatcher then recomputes the outputs whose row of
  ``a`` or of ``b`` holds one with the reference backend (on the same device), which implements the IEEE
  rules of :func:`mmaemu.model.block_fma` (:func:`mmaemu.backends._reference.recompute_infinite`). Presets
  the kernels do not express (``b200_mma_sync``: round-to-nearest, accumulator added last) and the zoo
  formats are sent to the reference backend whole, by the dispatcher too.
- Exact zero results are +0. A block result of 2**128 or more cannot occur for K < 2**90, so the Inf rule
  of the model needs no code.

[Note: reachable range] The exactly-defined kernels clamp the block exponent E to [-100, 100] and store
zero codes' exponent as -100. Inside a chain that starts from +0, the accumulator is +0 or at least
2**-41 (a block result is a multiple of 2**(E - F) with E >= -28 once a product is nonzero) and at most
about 2**(31 + log2 K), so neither choice can change a result.

Availability: Triton must import; kernels compiled for the GPU run on CUDA tensors, and under
``TRITON_INTERPRET=1`` (set before the first use in the process) Triton's interpreter runs them on CPU
tensors, bit for bit (that is how CI tests them). Before first use on a device the self-test of
:mod:`mmaemu.backends._triton._selftest` must pass there (the dispatcher, :mod:`mmaemu.backends`, runs it).
"""

from __future__ import annotations

import torch

from ..._accumulation import AccumulationPlan, flatten_plan
from ...errors import BackendUnavailableError
from ...presets import Preset
from .._protocol import Accumulated, Backend
from ._convert import GPU_CONFIG, accumulate_convert
from ._launch import (
    INTERPRETER_CONFIG,
    Formulation,
    TileConfig,
    available,
    device_str,
    expresses,
    interpreting,
)
from ._native import (
    NATIVE_CAPABILITY,
    NATIVE_ENV,
    NATIVE_GPU_CONFIG,
    NativeCall,
    accumulate_native,
    disable_native,
    native_applies,
    native_arithmetic,
    prepare_native,
)
from ._rz import (
    PARALLEL_WORKSPACE_BYTES,
    PROGRAMS_PER_SM,
    RZ_GENERAL_GPU_CONFIG,
    RZ_GPU_CONFIG,
    SMALL_GRID_TILES,
    Launch,
    accumulate_rz,
    choose_launch,
    rz_expresses,
)

__all__ = [
    "GPU_CONFIG",
    "INTERPRETER_CONFIG",
    "NAME",
    "NATIVE_CAPABILITY",
    "NATIVE_ENV",
    "NATIVE_GPU_CONFIG",
    "PARALLEL_WORKSPACE_BYTES",
    "PROGRAMS_PER_SM",
    "RZ_GENERAL_GPU_CONFIG",
    "RZ_GPU_CONFIG",
    "SMALL_GRID_TILES",
    "Formulation",
    "Launch",
    "TileConfig",
    "accumulate",
    "available",
    "choose_launch",
    "device_str",
    "disable_native",
    "expresses",
    "formulation_for",
    "interpreting",
    "kernel_name",
    "native_applies",
    "prepare_native_call",
    "rz_expresses",
]

NAME = Backend.TRITON.value


def formulation_for(preset: Preset, device: torch.device) -> Formulation:
    """The formulation a call with ``preset`` on ``device`` runs by default: the sm_90 one where
    :func:`native_applies`, else RZ where :func:`rz_expresses`, else CONVERT (the caller checked
    :func:`expresses`)."""
    if native_applies(preset, device):
        return Formulation.NATIVE
    return Formulation.RZ if rz_expresses(preset) else Formulation.CONVERT


def kernel_name(preset: Preset, device: torch.device | None = None,
                formulation: Formulation | None = None) -> str:
    """The name of the kernel specialisation that runs ``preset`` (on ``device``, or with ``formulation``;
    as the self-test reports it)."""
    if formulation is None:
        formulation = (formulation_for(preset, device) if device is not None
                       else Formulation.RZ if rz_expresses(preset) else Formulation.CONVERT)
    kernel = {Formulation.NATIVE: "chain_gemm_native", Formulation.RZ: "chain_gemm_rz",
              Formulation.CONVERT: "chain_gemm"}[formulation]
    return f"{kernel}[B={preset.block_size},F={preset.frac_bits}]"


def _check_formulation(formulation: Formulation, preset: Preset, device: torch.device) -> None:
    """Refuse a formulation the caller asked for that does not compute ``preset`` on ``device``."""
    if not isinstance(formulation, Formulation):
        raise TypeError(f"formulation must be a Formulation or None, got {type(formulation).__name__}")
    if formulation is Formulation.RZ and not rz_expresses(preset):
        raise ValueError(f"the RZ formulation does not express preset {preset.name!r} (its block sum leaves "
                         "one binade): use Formulation.CONVERT")
    if formulation is Formulation.NATIVE and not (native_arithmetic(preset) and interpreting()
                                                  or native_applies(preset, device)):
        raise ValueError(f"the sm_90 formulation does not apply to preset {preset.name!r} on {device_str(device)} "
                         "(compute capability 9.0, the hopper arithmetic, switched on, self-test passed)")


def prepare_native_call(a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan) -> NativeCall:
    """The sm_90 formulation's call with its operands laid out: ``.run()`` launches the kernel alone (for
    timing the kernel apart from the call; the NaN and Inf fix-ups are the caller's).

    Raises:
        ValueError: the formulation does not apply to ``preset`` on the operands' device.
    """
    _check_formulation(Formulation.NATIVE, preset, a.device)
    return prepare_native(a, b, plan)


def accumulate(
    a: torch.Tensor,
    b: torch.Tensor,
    preset: Preset,
    plan: AccumulationPlan,
    config: TileConfig | None = None,
    launch: Launch | None = None,
    formulation: Formulation | None = None,
) -> Accumulated:
    """fp32 accumulators ``[M, N]`` of FP8 ``a [M, K]`` and ``b [N, K]`` under ``plan``, for a preset the
    backend :func:`expresses` (:func:`mmaemu.backends._dispatch.accumulators` sends the rest to the
    reference backend).

    Outputs meeting a NaN code are left to the dispatcher's NaN rule; Inf codes count as zeros (the
    dispatcher recomputes the outputs that meet one); exact zeros are +0. This function does not run the self-test:
    the dispatcher (:func:`mmaemu.backends.require` and :func:`mmaemu.backends.resolve_backend`) checks it
    before a call uses this backend on a device.

    Args:
        a: FP8 ``[M, K]``.
        b: FP8 ``[N, K]`` (same device).
        preset: the arithmetic (one the kernels express).
        plan: the accumulation plan for K.
        config: launch tile of the exactly-defined formulations (one program per tile); default
            :data:`GPU_CONFIG` or :func:`choose_launch`'s (under the interpreter :data:`INTERPRETER_CONFIG`).
            Giving one keeps the sm_90 formulation off.
        launch: the RZ formulation's launch (tile and whether chains run in parallel); default
            :func:`choose_launch` for the device. Overrides ``config``; keeps the sm_90 formulation off.
        formulation: the formulation to run; default :func:`formulation_for` (RZ or CONVERT when
            ``config`` or ``launch`` is given).

    Returns:
        fp32 ``[M, N]`` on the operands' device, and whether an Inf code was counted as zero; see the
        module docstring for NaN, Inf and -0.

    Raises:
        BackendUnavailableError: Triton is missing, or the tensors are on a device the kernels do not
            run on.
        ValueError: ``formulation`` does not compute ``preset`` there, or the kernels do not express it.
    """
    if launch is not None and not isinstance(launch, Launch):
        raise TypeError(f"launch must be a Launch or None, got {type(launch).__name__}")
    usable, reason = available(a.device)
    if not usable:
        raise BackendUnavailableError(f"backend 'triton' is unavailable: {reason}")
    if not expresses(preset, (a.dtype, b.dtype)):
        raise ValueError(f"the Triton kernels do not compute preset {preset.name!r} on {a.dtype} operands: call "
                         "mmaemu.backends.accumulators, which sends such calls to the reference backend")
    if formulation is None:
        formulation = (formulation_for(preset, a.device) if launch is None and config is None
                       else Formulation.RZ if rz_expresses(preset) else Formulation.CONVERT)
    _check_formulation(formulation, preset, a.device)
    m, n = a.shape[0], b.shape[0]
    if m == 0 or n == 0 or plan.k == 0:
        return Accumulated(torch.zeros((m, n), dtype=torch.float32, device=a.device), False)
    if formulation is Formulation.NATIVE:  # its layout cached per plan: no flattening on the hot path
        return accumulate_native(a, b, preset, plan)
    flat = flatten_plan(plan)
    if formulation is Formulation.RZ:
        if launch is None:
            if config is not None:
                launch = Launch(config, False)
            elif interpreting():
                launch = Launch(INTERPRETER_CONFIG, False)
            else:
                sms = torch.cuda.get_device_properties(a.device).multi_processor_count
                launch = choose_launch(m, n, len(flat.chain_starts) - 1, sms)
        return accumulate_rz(a, b, preset, plan, flat, launch)
    return accumulate_convert(a, b, preset, plan, flat, config or (INTERPRETER_CONFIG if interpreting() else GPU_CONFIG))

