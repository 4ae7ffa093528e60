"""The public GEMM entry points: :func:`scaled_mm` and :func:`accumulate`.

The contract (arguments, defaults, what raises) is torch 2.7.1's ``torch._scaled_mm``; the
arithmetic is :mod:`mmaemu.model`, scheduled by :mod:`mmaemu.accumulation`, run by a backend,
then :func:`mmaemu.epilogue.epilogue`.
"""

from __future__ import annotations

import warnings

import torch

from .accumulation import SplitK, SplitKArg, plan_accumulation
from .backends import accumulator_function, resolve_backend
from .epilogue import epilogue
from .errors import ReferenceRejectsError, UnsupportedFeatureError, UnverifiedSplitWarning
from .formats import FP32_CANONICAL_NAN, Fp8Format, OutFormat, decode_fp8, fp8_format_of, from_bits, out_format_of
from .model import CMode, Preset
from .platform import Problem, Profile, SplitDecision, SplitSource, get_profile, resolve_splitk

__all__ = ["scaled_mm", "accumulate", "decide_split"]


def _fp8_operand(x: torch.Tensor, name: str) -> Fp8Format:
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"{name} must be a 2-D FP8 tensor")
    try:
        return fp8_format_of(x.dtype)
    except ValueError:
        raise ValueError(f"{name} must be float8_e4m3fn or float8_e5m2, got {x.dtype}") from None


def decide_split(profile: Profile, problem: Problem, splitk: SplitKArg | str) -> SplitDecision:
    """The split-K decision for a call: explicit, or resolved from the profile's evidence.

    Raises:
        SplitKUnknownError: ``splitk="auto"`` and no evidence decides the shape.
        ValueError: an invalid ``splitk`` value.
    """
    if isinstance(splitk, str):
        if splitk != "auto":
            raise ValueError(
                f"splitk={splitk!r}: accepted values are 'auto', 1, (S, 'contiguous'), (S, 'serial') "
                "or (S, 'pairwise')"
            )
        return resolve_splitk(profile, problem)
    split = SplitK.parse(splitk)
    return SplitDecision(
        split.parts, split.scheme.value, SplitSource.EXPLICIT.value, True, None, "passed as splitk="
    )


def _accumulate(
    a: torch.Tensor, b: torch.Tensor, preset: Preset, fast: bool, split: SplitK, backend: str
) -> torch.Tensor:
    """Accumulators ``[M, N]`` with the NaN rule applied (shared by scaled_mm and accumulate)."""
    if preset.c_mode is CMode.ROUNDED_ADD and (not fast or split.parts > 1):
        raise UnsupportedFeatureError(
            f"preset {preset.name!r}: slow accumulation and split-K are not characterised for it"
        )
    plan = plan_accumulation(a.shape[1], fast=fast, split=split)
    if plan.empty_parts:
        warnings.warn(
            f"split-K {split!r} over K = {plan.k}: parts {list(plan.empty_parts)} own no k-tile; they are "
            "modelled as +0, which no hardware recording has shown",
            UnverifiedSplitWarning,
            stacklevel=3,
        )
    run = accumulator_function(resolve_backend(backend, a.device))
    acc = run(a, b, preset, plan)
    # NaN rule: a NaN code anywhere in row m of a or row n of b makes output (m, n) NaN.
    nan_rows = decode_fp8(a).is_nan.any(1)
    nan_cols = decode_fp8(b).is_nan.any(1)
    if bool(nan_rows.any() or nan_cols.any()):
        canonical = from_bits(torch.tensor(FP32_CANONICAL_NAN, dtype=torch.int32), torch.float32).to(acc.device)
        acc = torch.where(nan_rows[:, None] | nan_cols[None, :], canonical, acc)
    return acc


def accumulate(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    use_fast_accum: bool,
    splitk: SplitKArg = 1,
    profile: str | Profile | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """The fp32 accumulator of an FP8 GEMM, before any scaling: ``a @ b.T`` as the tensor cores add it.

    Args:
        a: ``[M, K]`` FP8 tensor (row-major, like an activation).
        b: ``[N, K]`` FP8 tensor (row-major, like a Linear weight).
        use_fast_accum: one tensor-core chain over K (True), or a new chain every 128 elements
            with the chain results added in fp32 (False). No default, on purpose.
        splitk: ``1`` or an explicit split ``(S, "contiguous" | "serial" | "pairwise")``.
        profile: reference platform whose preset is used (default: ``MMAEMU_PROFILE`` or ``"hopper"``).
        backend: ``"auto"`` or ``"reference"``.

    Returns:
        fp32 ``[M, N]`` on ``a``'s device. Any M, N, K (K = 0 gives +0). A NaN code in row m of
        ``a`` or row n of ``b`` gives the canonical NaN at (m, n); Inf codes (E5M2) follow IEEE.

    Example:
        >>> import torch, mmaemu
        >>> a = torch.ones(2, 40).to(torch.float8_e4m3fn)
        >>> mmaemu.accumulate(a, a, use_fast_accum=True)
        tensor([[40., 40.],
                [40., 40.]])
    """
    fmt_a, fmt_b = _fp8_operand(a, "a"), _fp8_operand(b, "b")
    del fmt_a, fmt_b
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"a [M, K] and b [N, K] must share K, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.device != b.device:
        raise ValueError(f"a and b must be on the same device, got {a.device} and {b.device}")
    prof = get_profile(profile)
    split = SplitK.parse(splitk)
    return _accumulate(a, b, prof.preset, bool(use_fast_accum), split, backend)


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
    splitk: SplitKArg | str = "auto",
    backend: str = "auto",
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``torch._scaled_mm`` with the bits of the profile's reference GPU.

    Args:
        mat1: ``[M, K]`` FP8 (``float8_e4m3fn`` or ``float8_e5m2``).
        mat2: ``[K, N]`` FP8, column-major as torch expects (``w.t()`` of a ``[N, K]`` weight).
        scale_a: fp32 tensor-wise scale of ``mat1`` (one element).
        scale_b: fp32 tensor-wise scale of ``mat2`` (one element).
        bias: not modelled; anything but None raises :class:`UnsupportedFeatureError`.
        scale_result: fp32 scalar multiplying the result before an FP8 output's conversion.
        out_dtype: output dtype; default ``mat1.dtype`` (as torch).
        use_fast_accum: as torch; default False (slow accumulation).
        profile: reference platform (default ``MMAEMU_PROFILE`` or ``"hopper"``).
        splitk: ``"auto"`` (the reference GPU's decision, from evidence; raises
            :class:`SplitKUnknownError` when none decides), ``1``, or ``(S, scheme)``.
        backend: ``"auto"`` or ``"reference"``.
        out: optional output tensor; its prior contents never affect the result.

    Returns:
        ``[M, N]`` tensor of ``out_dtype``. NaN codes in row m of ``mat1`` or column n of
        ``mat2`` give the output type's canonical NaN at (m, n); exact zeros are +0.

    Raises:
        ReferenceRejectsError: calls the reference platform rejects (E4M3 x E4M3 -> E5M2).
        UnsupportedFeatureError: bias.
        SplitKUnknownError: see ``splitk``.

    Example:
        >>> import torch, mmaemu
        >>> x = torch.full((64, 1920), 2.0).to(torch.float8_e4m3fn)
        >>> w = torch.full((5760, 1920), 0.5).to(torch.float8_e4m3fn)
        >>> one = torch.tensor(1.0)
        >>> y = mmaemu.scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True)
        >>> y[0, :3]
        tensor([1920., 1920., 1920.], dtype=torch.bfloat16)
    """
    fmt_a, fmt_b = _fp8_operand(mat1, "mat1"), _fp8_operand(mat2, "mat2")
    if mat1.shape[1] != mat2.shape[0]:
        raise ReferenceRejectsError(
            f"mat1 and mat2 shapes cannot be multiplied ({mat1.shape[0]}x{mat1.shape[1]} and "
            f"{mat2.shape[0]}x{mat2.shape[1]})"
        )
    out_fmt = out_format_of(mat1.dtype if out_dtype is None else out_dtype)
    if bias is not None:
        raise UnsupportedFeatureError("bias is not modelled by mmaemu (the fused-bias epilogue is unrecorded)")
    if fmt_a is Fp8Format.E4M3 and fmt_b is Fp8Format.E4M3 and out_fmt is OutFormat.E5M2:
        raise ReferenceRejectsError(
            "CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmul: the reference platform's cuBLASLt "
            "rejects float8_e4m3fn x float8_e4m3fn -> float8_e5m2"
        )
    prof = get_profile(profile)
    m, k = mat1.shape
    n = mat2.shape[1]
    problem = Problem(m, n, k, fmt_a, fmt_b, out_fmt, bool(use_fast_accum))
    decision = decide_split(prof, problem, splitk)
    acc = _accumulate(mat1, mat2.t(), prof.preset, bool(use_fast_accum), decision.split, backend)
    result = epilogue(acc, scale_a, scale_b, out_dtype=out_fmt.dtype, scale_result=scale_result)
    if out is not None:
        out.copy_(result)
        return out
    return result
