"""The public GEMM entry points: :func:`scaled_mm` and :func:`accumulate` (:func:`mmaemu.explain` reports
a call's plan without computing it).

The contract (arguments, defaults, what raises) is torch 2.7.1's ``torch._scaled_mm``
(:mod:`mmaemu._checks`); the arithmetic is :mod:`mmaemu.model`, scheduled by
:mod:`mmaemu._accumulation`, run by a backend, then :func:`mmaemu.epilogue`.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import torch

from ._accumulation import plan_accumulation
from .backends import Backend, parse_backend, require, resolve_backend
from .backends import run as run_backend
from ._one_chain import accumulate_half, zoo_preset
from ._bias import cublaslt_bias
from ._checks import CheckedCall, ScalingType, check_call, has_algorithm
from ._epilogue import BiasOrder, scratch_epilogue
from .errors import (
    warn_caller,
    ExperimentalPresetWarning,
    UnsupportedFeatureError,
    UnverifiedEpilogueWarning,
    UnverifiedSplitWarning,
)
from .formats import FP8_DTYPES, WIDE_DTYPES, OutFormat, fp8_format_of
from ._host import check_cpu_subnormals, refuse_autograd
from .kernels._rowwise import KernelPlan, prepare_rowwise, run_rowwise
from ._options import Options
from ._out import out_resize_warning, resize_out_like_torch
from .platforms._profiles import Profile, get_profile
from .platforms._splitk import (
    Problem,
    SplitDecision,
    SplitSource,
    combo_verified,
    decide_quietly,
    resolve_splitk,
    split_warnings,
)
from .presets import CMode, Preset, instruction_preset
from ._split import AUTO, Scheme, SplitK, SplitKArg, SplitKSpec, parse_splitk

__all__ = ["scaled_mm", "accumulate", "decide_split", "prepare_call", "PreparedCall"]


def decide_split(profile: Profile, problem: Problem, splitk: SplitKSpec) -> SplitDecision:
    """The split-K decision for a call: explicit, or resolved from the profile's evidence.

    Raises:
        SplitKUnknownError: ``splitk="auto"`` and no evidence decides the shape.
        ValueError: an invalid ``splitk`` value.
    """
    split = parse_splitk(splitk)
    if split == AUTO:
        return resolve_splitk(profile, problem)
    assert isinstance(split, SplitK)
    decision = SplitDecision(
        split.parts, split.scheme, SplitSource.EXPLICIT,
        combo_verified(profile, problem, split.parts, split.scheme), None, "passed as splitk=",
    )
    split_warnings(profile, problem, decision)
    return decision


def _run(a: torch.Tensor, b: torch.Tensor, preset: Preset, fast: bool, split: SplitK, backend: Backend) -> torch.Tensor:
    """Accumulators ``[M, N]`` of ``a [M, K]`` and ``b [N, K]``, with the Inf and NaN rules applied (the
    dispatcher's, :func:`mmaemu.backends.run`)."""
    return run_backend(backend, a, b, preset, plan_accumulation(a.shape[1], fast=fast, split=split))


def _check_preset_supports(preset: Preset, fast: bool, split: SplitK) -> None:
    if preset.c_mode is CMode.ROUNDED_ADD and (not fast or split.parts > 1):
        raise UnsupportedFeatureError(
            f"preset {preset.name!r}: slow accumulation and split-K are not characterised for it"
        )


def _check_fast_accum(use_fast_accum: object, where: str) -> bool:
    """``use_fast_accum`` must be a bool (as torch's parser requires): ``"False"`` is not False."""
    if not isinstance(use_fast_accum, bool):
        raise TypeError(
            f"{where}: argument 'use_fast_accum' must be bool, not {type(use_fast_accum).__name__}: "
            "pass True or False"
        )
    return use_fast_accum




def _explicit_split(splitk: SplitKArg | SplitDecision) -> SplitK:
    """:func:`accumulate`'s ``splitk`` when given: an explicit split or a decision (``"auto"`` decides a whole
    call, output dtype included)."""
    if isinstance(splitk, SplitDecision):
        return splitk.split
    parsed = parse_splitk(splitk)
    if not isinstance(parsed, SplitK):
        raise ValueError(
            "accumulate() takes an explicit split (1 or (S, scheme)) or explain(...).split: splitk='auto' is the "
            "reference GPU's decision for a whole call (its output dtype too); use scaled_mm or explain for it"
        )
    return parsed


def _default_split(a: torch.Tensor, b: torch.Tensor, fast: bool, profile: str | Profile | None) -> SplitK:
    """:func:`accumulate`'s split for FP8 operands when ``splitk`` is not given.

    [Note: accumulate's default split] ``scaled_mm`` decides the split from the whole call
    (``splitk="auto"``), and the reference GPU's cuBLASLt decision depends on the output dtype as well as
    the shape, which ``accumulate`` does not see. So the default is the split ``scaled_mm`` takes for this
    shape and accumulation mode with every output dtype it can run (those the evidence decides): where
    they agree, ``epilogue(accumulate(...))`` equals ``scaled_mm`` whatever the output. Where they differ, or
    no evidence decides any, it computes the unsplit sum and warns (``UnverifiedSplitWarning``), naming what
    to pass. The decision's own warnings (inferred, unverified) are emitted as ``scaled_mm`` emits them.
    """
    prof = get_profile(profile)
    fmt_a, fmt_b = fp8_format_of(a.dtype), fp8_format_of(b.dtype)
    m, n, k = a.shape[0], b.shape[0], a.shape[1]
    decided: dict[OutFormat, tuple[Problem, SplitDecision]] = {}
    for out in OutFormat:
        if not has_algorithm(a.dtype, b.dtype, out.dtype):
            continue  # a call the reference cuBLASLt rejects: scaled_mm never runs it
        problem = Problem(m, n, k, fmt_a, fmt_b, out, fast)
        decision = decide_quietly(prof, problem)
        if decision is not None:
            decided[out] = (problem, decision)
    splits = {d.split for _, d in decided.values()}
    if len(splits) == 1:
        problem, decision = decided.get(OutFormat.BFLOAT16) or next(iter(decided.values()))
        split_warnings(prof, problem, decision)
        return decision.split
    why = ("no evidence decides it for any output dtype" if not decided else "it depends on the output dtype (" +
           ", ".join(f"{str(out.dtype).removeprefix('torch.')}: S = {d.parts}" for out, (_, d) in decided.items()) + ")")
    warn_caller(
        f"accumulate() without splitk= on profile {prof.name!r}: the reference GPU's split of {m} x {n} x {k} is "
        f"not known here, because {why}; computed unsplit. Pass splitk=mmaemu.explain(<the scaled_mm "
        f"arguments>).split for the split scaled_mm uses, or splitk=1 to say the call is not split",
        UnverifiedSplitWarning)
    return SplitK(1, Scheme.NONE)


def _accumulate_operands(a: torch.Tensor, b: torch.Tensor) -> bool:
    """:func:`accumulate`'s operand checks; whether the operands are of a zoo format (fp16, bf16, tf32)."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a 2-D tensor (FP8, float16, bfloat16 or tf32 float32), not {type(t).__name__}")
        if t.dim() != 2:
            raise ValueError(f"{name} must be a 2-D matrix, got {t.dim()} dimensions")
        if t.dtype not in FP8_DTYPES and t.dtype not in WIDE_DTYPES:
            raise ValueError(
                f"{name} must be float8_e4m3fn or float8_e5m2, or float16, bfloat16 or float32 holding tf32 values, "
                f"got {t.dtype}"
            )
    wide = a.dtype in WIDE_DTYPES
    if wide != (b.dtype in WIDE_DTYPES) or (wide and a.dtype != b.dtype):
        raise ValueError(f"a is {a.dtype} and b is {b.dtype}: pass two FP8 matrices, or two of one of fp16, bf16, tf32")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"a [M, K] and b [N, K] must share K, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.device != b.device:
        raise ValueError(f"a and b must be on the same device, got {a.device} and {b.device}")
    if a.device.type == "meta":
        raise ValueError(
            "mmaemu computes values; tensors on the 'meta' device have none. Pass CPU or CUDA tensors"
        )
    return wide


def _accumulate_backend(requested: Backend, device: torch.device, preset: Preset | None) -> Backend:
    """The backend of an :func:`accumulate` call (``preset`` None: a zoo format, which the Triton kernels do
    not decode: Triton hands them to the reference backend). Raises BackendUnavailableError."""
    chosen = resolve_backend(requested, device, preset)
    require(chosen, device, preset)
    return Backend.REFERENCE if preset is None and chosen is Backend.TRITON else chosen


def accumulate(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    use_fast_accum: bool,
    splitk: SplitKArg | SplitDecision | None = None,
    profile: str | Profile | None = None,
    preset: str | Preset | None = None,
    backend: str | Backend = "auto",
    accumulator: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The accumulator of a GEMM, before any scaling: ``a @ b.T`` as the tensor cores add it.

    FP8 operands (any pair) give what the reference platform's cuBLASLt accumulates. Two operands of one
    zoo format (``float16``, ``bfloat16``, or ``float32`` holding tf32 values) give one chain of the
    instruction over K in order from +0, as a kernel chaining it computes, not cuBLAS (no GEMM-level
    recording exists for them: it warns once per preset, ``ExperimentalPresetWarning``).

    Args:
        a: ``[M, K]`` operand (row-major, like an activation).
        b: ``[N, K]`` operand (row-major, like a Linear weight), of ``a``'s format.
        use_fast_accum: FP8: one tensor-core chain over K (True), or a new chain every 128 elements
            with the chain results added in fp32 (False). No default, on purpose. The zoo formats
            take True only (one chain).
        splitk: ``1``, an explicit split ``(S, "contiguous" | "serial" | "pairwise")`` (FP8 only), or a
            :class:`~mmaemu.SplitDecision` (``mmaemu.explain(...).split``: the split ``scaled_mm`` uses for
            that call). ``None`` (the default): for FP8 operands with a profile, the split ``scaled_mm``
            takes for this shape with every output dtype it runs, where those agree, else no split and an
            ``UnverifiedSplitWarning`` ([Note: accumulate's default split]); otherwise ``1``.
        profile: reference platform whose preset is used (:meth:`~mmaemu._options.Options.parse`); for the
            zoo formats its architecture (``hopper`` or ``ada``) is the default preset.
        preset: the instruction instead of the profile's: for the zoo formats ``"volta"``,
            ``"ampere"``, ``"ada"``, ``"hopper"`` or ``"b200"`` (or a custom :class:`Preset`), for FP8 a
            preset name. Not together with ``profile``.
        backend: as :func:`scaled_mm` (Triton hands the zoo formats to the reference backend).
        accumulator: ``torch.float32`` or ``torch.float16`` (FP8 or fp16 operands, one chain: [Note: fp16 accumulator]).

    Returns:
        ``[M, N]`` of ``accumulator``'s dtype on ``a``'s device. Any M, N, K (K = 0 gives +0). A NaN (code) in
        row m of ``a`` or row n of ``b`` gives the canonical NaN at (m, n); Inf operands follow IEEE, and a NaN
        they make (in a block, a chain addition or a split combination) is the canonical NaN too (fp32
        0x7FFFFFFF, whatever the host's own NaN).

    Raises:
        TypeError: ``use_fast_accum`` not a bool, ``a`` or ``b`` not a tensor, a platform argument's type.
        ValueError: operands not 2-D matrices of one accepted format sharing K and a device (a float32
            operand holds tf32 values), ``meta`` tensors, an invalid platform argument (an unknown name
            is an ``UnknownNameError``), or both ``profile`` and ``preset``.
        BackendUnavailableError: the requested backend cannot run on the operands' device.
        UnsupportedFeatureError: a preset that does not model the requested accumulation (for the
            zoo formats: ``use_fast_accum=False``, split-K, or an architecture without the format);
            ``a`` or ``b`` requires grad with grad mode on (inference only).
        MmaemuError: the CPU flushes subnormals (CPU tensors).

    Example:
        >>> import torch, mmaemu
        >>> a = torch.ones(2, 40).to(torch.float8_e4m3fn)
        >>> mmaemu.accumulate(a, a, use_fast_accum=True, splitk=1)
        tensor([[40., 40.],
                [40., 40.]])
        >>> import warnings
        >>> h = torch.full((1, 8), 2.0**-12, dtype=torch.float16)
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", mmaemu.ExperimentalPresetWarning)
        ...     mmaemu.accumulate(h, h, use_fast_accum=True, preset="volta").item() == 8 * 2.0**-24
        True
    """
    fast = _check_fast_accum(use_fast_accum, "accumulate()")
    zoo = _accumulate_operands(a, b)
    if profile is not None and preset is not None:
        raise ValueError("pass profile= or preset=, not both: preset= names the instruction a profile would choose")
    refuse_autograd(("a", a), ("b", b))
    if splitk is not None:
        split = _explicit_split(splitk)
    elif zoo or accumulator is not torch.float32 or preset is not None:
        split = SplitK(1, Scheme.NONE)  # one chain of the instruction: no platform decides a split
    else:
        split = _default_split(a, b, bool(use_fast_accum), profile)
    if accumulator is not torch.float32:
        _accumulate_backend(parse_backend(backend), a.device, None)
        return accumulate_half(a, b, accumulator, preset, profile, fast, split)
    chosen_preset = (zoo_preset(a, b, preset, profile, fast, split) if zoo
                     else get_profile(profile).preset if preset is None else instruction_preset(preset, a.dtype))
    _check_preset_supports(chosen_preset, fast, split)
    chosen = _accumulate_backend(parse_backend(backend), a.device, None if zoo else chosen_preset)
    if a.device.type == "cpu":
        check_cpu_subnormals()
    plan = plan_accumulation(a.shape[1], fast=fast, split=split)
    if plan.unverified_empty_parts:
        warn_caller(_empty_parts_message(split, plan.k, plan.unverified_empty_parts), UnverifiedSplitWarning)
    return _run(a, b, chosen_preset, fast, split, chosen)


class PreparedCall(NamedTuple):
    """Every decision of a call before its arithmetic (:func:`prepare_call`).

    Attributes:
        profile: the reference platform.
        checked: the call as torch's checks saw it.
        decision: cuBLASLt's split-K decision (None for an empty or row-wise call).
        backend: the backend that computes.
        kernel: for row-wise scales, the CUTLASS kernel's plan (:mod:`mmaemu.kernels`); else None.
    """

    profile: Profile
    checked: CheckedCall
    decision: SplitDecision | None
    backend: Backend
    kernel: KernelPlan | None


def prepare_call(
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: torch.Tensor | None,
    scale_result: torch.Tensor | None,
    out_dtype: torch.dtype | None,
    use_fast_accum: bool,
    out: torch.Tensor | None,
    profile: str | Profile | None,
    splitk: SplitKSpec,
    backend: str | Backend,
) -> PreparedCall:
    """The checks and decisions shared by :func:`scaled_mm` and :func:`explain` (raises on refusal).

    Modifies nothing: ``out`` is resized and written by :func:`scaled_mm` only after this returned
    and the result was computed. Emits torch's resize warning when ``out`` will be resized.
    """
    options = Options.parse(profile, splitk, backend)
    prof = options.profile
    device = mat1.device if isinstance(mat1, torch.Tensor) else torch.device("cpu")
    chosen = resolve_backend(options.backend, device, prof.preset)
    checked = check_call(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum, out,
                         resize_out=False)
    require(chosen, device, prof.preset)
    decision = None
    kernel = None
    if checked.scaling is ScalingType.ROW_WISE:
        kernel = prepare_rowwise(prof, checked, mat1, mat2, scale_a, scale_b, bias, out, options.splitk)
    elif not checked.empty:
        assert checked.out_format is not None
        problem = Problem(checked.m, checked.n, checked.k, checked.fmt_a, checked.fmt_b, checked.out_format, checked.fast)
        decision = decide_split(prof, problem, options.splitk)
        split = decision.split
        _check_preset_supports(prof.preset, checked.fast, split)
        plan = plan_accumulation(checked.k, fast=checked.fast, split=split)
        if plan.unverified_empty_parts:
            warn_caller(_empty_parts_message(split, plan.k, plan.unverified_empty_parts), UnverifiedSplitWarning)
    if bias is not None and prof.bias_order is None and not checked.empty and kernel is None:
        warn_caller(
            f"{prof.name}: bias= is experimental: no recording of the {prof.gpu}'s biased output decides where its "
            f"epilogue adds the bias; computed as {BiasOrder.AFTER_SCALE.value!r} (mmaemu._epilogue.BiasOrder: scaled "
            "and rounded to fp32, then the bias added and rounded again)", UnverifiedEpilogueWarning)
    resize_message = out_resize_warning(out, checked.m, checked.n)
    if resize_message is not None:
        warn_caller(resize_message, UserWarning)
    return PreparedCall(prof, checked, decision, chosen, kernel)


def _empty_parts_message(split: SplitK, k: int, empty: tuple[int, ...]) -> str:
    return (
        f"split-K {split!r} over K = {k}: parts {list(empty)} own no k-tile; they are modelled as +0, which no "
        f"recording of the {split.scheme.family} split family has shown"
    )


def scaled_mm(
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: torch.Tensor | None = None,
    scale_result: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    use_fast_accum: bool = False,
    *,
    profile: str | Profile | None = None,
    splitk: SplitKSpec = "auto",
    backend: str | Backend = "auto",
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``torch._scaled_mm`` with the bits of the profile's reference GPU; a refused call modifies nothing.

    Args:
        mat1: ``[M, K]`` FP8 (``float8_e4m3fn`` or ``float8_e5m2``), row-major.
        mat2: ``[K, N]`` FP8, column-major as torch requires (``w.t()`` of a ``[N, K]`` weight).
        scale_a: fp32 tensor-wise scale of ``mat1`` (one element, any shape), or row-wise ones (``[M, 1]``,
            contiguous, with ``[1, N]`` for ``scale_b`` and a bf16 output): experimental, computed as torch
            2.7.1's CUTLASS kernel for the profile's GPU (:mod:`mmaemu.kernels`), with an
            ``UnrecordedKernelWarning`` on every call; ``explain`` shows the kernel and its order.
        scale_b: fp32 tensor-wise scale of ``mat2`` (one element, any shape), or row-wise ones (``[1, N]``).
        bias: experimental: N elements of the output's dtype, bf16 or fp16, of any shape (torch 2.7.1's
            rules), added in the epilogue (:mod:`mmaemu._epilogue`, [Note: bias]); warns
            (``UnverifiedEpilogueWarning``) unless the profile's recording decided the bias order. The N
            elements added are those cuBLASLt reads: densely from the bias's data pointer, whatever its
            strides (:func:`mmaemu._bias.cublaslt_bias`). Not with an FP8 output, nor one whose N elements
            would leave its storage or whose data pointer is not 16-byte aligned (``UnsupportedFeatureError``);
            M, N or K = 0 returns torch's early result, no bias added. With row-wise scales the bias is a
            bf16 vector (torch's row-wise checks) added by the kernel's fused epilogue.
        scale_result: fp32 scalar multiplying the result before an FP8 output's conversion.
        out_dtype: output dtype; default ``mat1.dtype`` (as torch).
        use_fast_accum: as torch; default False (slow accumulation).
        profile: the reference platform, a name or a ``Profile`` (default ``MMAEMU_PROFILE``, else
            ``"hopper"``); one of the platform arguments (:meth:`mmaemu._options.Options.parse`).
        splitk: ``"auto"`` (cuBLAS's decision where evidence decides it, else
            :class:`SplitKUnknownError`), ``1`` or an explicit split ``(S, scheme)``.
        backend: ``"auto"``, ``"reference"``, ``"cpu"`` or ``"triton"``; every backend returns the same bits.
        out: optional output, resized as torch resizes it and returned (:mod:`mmaemu._out`); its prior
            contents never affect the result, and a refused call leaves it as it was.

    Returns:
        ``[M, N]`` tensor of ``out_dtype`` on the inputs' device. NaN codes in row m of ``mat1`` or
        column n of ``mat2`` give the output type's canonical NaN at (m, n); exact zeros are +0.
        M or N = 0 gives an empty result, K = 0 zeros (torch's early return).

    Raises:
        ReferenceRejectsError: every call torch 2.7.1 or the reference cuBLASLt rejects, with
            torch's message (a ``RuntimeError``).
        UnsupportedFeatureError: block-wise scales, row-wise scales on a profile without a kernel model
            or with layouts whose result the kernel leaves undetermined, a bias with an FP8 output, a bias
            cuBLASLt would read beyond its storage or from a pointer not 16-byte aligned, inputs
            requiring grad in grad mode (any of them, ``bias`` included), an ``out=`` layout torch would
            not write.
        SplitKUnknownError, BackendUnavailableError: no evidence decides ``splitk="auto"``; the
            requested backend cannot run on the tensors' device (raised before anything runs).
        ValueError, TypeError, UnknownNameError: invalid platform arguments (as
            :meth:`~mmaemu._options.Options.parse`), a bad ``MMAEMU_PROFILE`` or
            ``MMAEMU_SPLITK_STRICT``, ``meta`` tensors, a non-bool ``use_fast_accum`` (TypeError).
        RuntimeError: an ``out`` sharing memory with what the call reads (an ``out`` made under
            ``torch.inference_mode()`` raises torch's error, a ``ReferenceRejectsError``).
        MmaemuError: the CPU flushes subnormals.

    Example:
        >>> import torch, mmaemu
        >>> x = torch.full((64, 1920), 2.0).to(torch.float8_e4m3fn)
        >>> w = torch.full((5760, 1920), 0.5).to(torch.float8_e4m3fn)
        >>> one = torch.tensor(1.0)
        >>> y = mmaemu.scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True)
        >>> y[0, :3]
        tensor([1920., 1920., 1920.], dtype=torch.bfloat16)
    """
    prof, checked, decision, chosen, kernel = prepare_call(
        mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum, out,
        profile, splitk, backend,
    )
    if kernel is not None:
        result = run_rowwise(kernel, mat1, mat2, scale_a, scale_b, bias, chosen)
    elif checked.empty or decision is None:
        result = torch.zeros((checked.m, checked.n), dtype=checked.out_dtype, device=mat1.device)
    else:
        assert checked.out_format is not None
        acc = _run(mat1, mat2.t(), prof.preset, checked.fast, decision.split, chosen)
        read_bias = None if bias is None else cublaslt_bias(bias, checked.n)  # what the GPU reads: any shape, strides
        result = scratch_epilogue(acc, scale_a, scale_b, out_dtype=checked.out_format.dtype, scale_result=scale_result,
                                  bias=read_bias, bias_order=prof.bias_order or BiasOrder.AFTER_SCALE)
    if out is not None:
        # only now, with the call decided and the result computed, is out touched (see checks [Note: out])
        resize_out_like_torch(out, checked.m, checked.n, warn=False)
        with torch.no_grad():
            out.copy_(result)
        return out
    return result
