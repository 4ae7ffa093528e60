"""``explain``: what :func:`mmaemu.scaled_mm` would do with these arguments, as a :class:`CallPlan`, without computing.

The plan runs the same checks and decisions as the call (:func:`mmaemu._call.prepare_call`), so a refusal
it reports is exactly the exception ``scaled_mm`` would raise, and the warnings it lists are the ones the
call would emit; nothing is modified, ``out`` included. For a call no split-K source decides, the plan
also says what each source found (:func:`mmaemu.platforms._splitk.trace_splitk`) and what to do.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from .backends import Backend, auto_fallback
from ._blockwise import resolve_kernel
from ._call import prepare_call
from ._checks import CheckedCall, check_call
from .errors import (
    ExperimentalPresetWarning,
    InferredSplitWarning,
    MmaemuError,
    SplitKUnknownError,
    UnrecordedKernelWarning,
    UnvalidatedEnvelopeWarning,
    UnverifiedEpilogueWarning,
    UnverifiedSplitWarning,
)
from .kernels._block_call import BlockPlan, prepare_block
from .kernels._block_model import BlockKernelModel
from .kernels._rowwise import KernelPlan
from .platforms._profiles import Profile, get_profile
from .platforms._splitk import (
    Problem,
    SplitDecision,
    SplitStep,
    splitk_advice,
    trace_splitk,
)
from .presets import Maturity
from ._split import SplitKSpec

__all__ = ["BlockCallPlan", "CallPlan", "explain", "explain_block_scaled"]


@dataclass(frozen=True)
class CallPlan:
    """What :func:`scaled_mm` would do with these arguments, decided without computing the GEMM.

    Attributes:
        validation: ``"ok"``, or ``(exception class name, message)`` of what ``scaled_mm`` would raise.
        profile: the reference platform's name.
        preset: the tensor-core preset's name.
        preset_maturity: ``"validated"`` or ``"experimental"``.
        split: the split-K decision, or None where undecided (a refused or empty call).
        backend: the backend that would run, or None.
        fallback: why ``backend="auto"`` did not take a faster backend, or None.
        out_dtype: the output dtype's name.
        shape: ``(M, N, K)``, or None when the arguments are not matrices.
        use_fast_accum: the accumulation mode.
        warnings: ``(warning class name, message)`` of every warning the call would emit.
        validated: whether the result would be validated on hardware: the call runs, its profile
            and preset are validated, its split-K decision is verified, and nothing it does warns
            as unverified or experimental.
        reason: why ``validated`` is False (None when it is True).
        split_steps: for a call no split-K source decides (``SplitKUnknownError``), what each source of
            ``splitk="auto"`` found, in order; empty otherwise.
        advice: for such a call, what is known nearby and what to do, one sentence each.
        kernel: for row-wise scales, the CUTLASS kernel that computes the call and the order it assumes
            (:class:`~mmaemu.kernels._rowwise.KernelPlan`); None otherwise.
    """

    validation: str | tuple[str, str]
    profile: str
    preset: str
    preset_maturity: str
    split: SplitDecision | None
    backend: str | None
    fallback: str | None
    out_dtype: str | None
    shape: tuple[int, int, int] | None
    use_fast_accum: bool
    warnings: tuple[tuple[str, str], ...] = ()
    validated: bool = False
    reason: str | None = None
    split_steps: tuple[SplitStep, ...] = ()
    advice: tuple[str, ...] = ()
    kernel: KernelPlan | None = None

    @property
    def ok(self) -> bool:
        """True when the call would run."""
        return self.validation == "ok"

    def __str__(self) -> str:
        """The plan as a few labelled lines (``repr`` gives every field)."""
        shape = "?" if self.shape is None else " x ".join(str(d) for d in self.shape)
        lines = [f"mmaemu plan for M x N x K = {shape} -> {self.out_dtype}, use_fast_accum={self.use_fast_accum}, "
                 f"profile {self.profile!r}"]
        if self.ok:
            lines.append("  runs:       yes")
        elif self.split_steps:  # the steps and the advice below say the rest of the message
            lines.append(f"  runs:       no, {self.validation[0]}: {_first_sentence(self.validation[1])}")
        else:
            lines.append(f"  runs:       no, {self.validation[0]}: {self.validation[1]}")
        lines.append("  validated:  yes, on recorded hardware output" if self.validated else f"  validated:  no: {self.reason}")
        lines.append(f"  preset:     {self.preset} ({self.preset_maturity})")
        if self.split is not None:
            d = self.split
            lines.append(f"  split-K:    S = {d.parts}, {d.scheme.value}, from {d.source.value} "
                         f"({'verified' if d.verified else 'not verified'}{', extrapolated' if d.extrapolated else ''}): "
                         f"{d.note}")
        if self.split_steps:
            lines.append("  split-K:    undecided; each source of splitk=\"auto\", in order:")
            width = max(len(step.source.value) for step in self.split_steps) + 1
            lines.extend(f"    {step.source.value + ':':{width}} {step.why}" for step in self.split_steps)
            lines.extend(f"  {'to decide:' if i == 0 else '':11} {line}" for i, line in enumerate(self.advice))
        if self.kernel is not None:
            first, *rest = self.kernel.lines()
            lines.append(f"  kernel:     {first}")
            lines.extend(f"              {line}" for line in rest)
        if self.backend is not None:
            lines.append(f"  backend:    {self.backend}" + (f" (fallback: {self.fallback})" if self.fallback else ""))
        for cls, message in self.warnings:
            lines.append(f"  warns:      {cls}: {message}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        fields = [
            f"validation={self.validation!r}",
            f"profile={self.profile!r}",
            f"preset={self.preset!r}",
            f"preset_maturity={self.preset_maturity!r}",
            f"split={self.split!r}",
            f"backend={self.backend!r}",
            f"fallback={self.fallback!r}",
            f"out_dtype={self.out_dtype!r}",
            f"shape={self.shape!r}",
            f"use_fast_accum={self.use_fast_accum!r}",
            f"warnings={self.warnings!r}",
            f"validated={self.validated!r}",
            f"reason={self.reason!r}",
            f"split_steps={self.split_steps!r}",
            f"advice={self.advice!r}",
            f"kernel={self.kernel!r}",
        ]
        return "CallPlan(" + ",\n         ".join(fields) + ")"


_RECORDING = threading.Lock()


@contextlib.contextmanager
def _record_warnings() -> Iterator[list[tuple[str, str]]]:
    """``(class name, message)`` of every warning this thread emits in the block, none of them shown.

    ``warnings.catch_warnings`` changes process-wide state: explains in other threads take turns
    (so the filters are restored exactly), and other threads' warnings go on to the display they
    had, rather than into this thread's plan.
    """
    caught: list[tuple[str, str]] = []
    me = threading.get_ident()
    with _RECORDING, warnings.catch_warnings():
        warnings.simplefilter("always")
        shown = warnings.showwarning

        def route(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
            if threading.get_ident() == me:
                caught.append((category.__name__, str(message)))
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = route
        yield caught


def _shape_and_dtype(mat1: object, mat2: object, checked: CheckedCall | None,
                     out_dtype: object) -> tuple[tuple[int, int, int] | None, str | None]:
    """(M, N, K) when both operands are matrices, and the output dtype's name: the checked call's, else
    ``out_dtype``, else ``mat1``'s (None when nothing says)."""
    shape = None
    if isinstance(mat1, torch.Tensor) and isinstance(mat2, torch.Tensor) and mat1.dim() == 2 and mat2.dim() == 2:
        shape = (int(mat1.shape[0]), int(mat2.shape[1]), int(mat1.shape[1]))
    if checked is not None:
        dtype_name: str | None = str(checked.out_dtype).replace("torch.", "")
    elif isinstance(out_dtype, torch.dtype):
        dtype_name = str(out_dtype).replace("torch.", "")
    else:
        dtype_name = str(mat1.dtype).replace("torch.", "") if isinstance(mat1, torch.Tensor) else None
    return shape, dtype_name


def explain(
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
) -> CallPlan:
    """What :func:`scaled_mm` would do with the same arguments, without computing the GEMM.

    A refusal is reported in ``validation``, not raised: the class name and message of exactly the
    exception :func:`scaled_mm` would raise (torch's rejections, unsupported features, split-K,
    unusable backends, meta tensors, argument types and environment variables). Nothing is
    modified, ``out`` included; the warnings ``scaled_mm`` would emit are in ``warnings``.

    Example:
        >>> import torch, mmaemu
        >>> x = torch.zeros(64, 1920).to(torch.float8_e4m3fn)
        >>> w = torch.zeros(5760, 1920).to(torch.float8_e4m3fn)
        >>> one = torch.tensor(1.0)
        >>> plan = mmaemu.explain(x, w.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True)
        >>> plan.validation, plan.split.parts, plan.split.source.value, plan.backend
        ('ok', 1, 'table', 'cpu')
        >>> mmaemu.explain(x, w, one, one).validation[0]
        'ReferenceRejectsError'
    """
    prof: Profile | None = None
    decision: SplitDecision | None = None
    chosen: Backend | None = None
    kernel: KernelPlan | None = None
    checked: CheckedCall | None = None
    validation: str | tuple[str, str] = "ok"
    steps: tuple[SplitStep, ...] = ()
    advice: tuple[str, ...] = ()
    with _record_warnings() as caught:
        try:
            prof, checked, decision, chosen, kernel = prepare_call(
                mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum, out,
                profile, splitk, backend,
            )
        except (MmaemuError, RuntimeError, TypeError, ValueError, KeyError) as exc:
            validation = (type(exc).__name__, str(exc))
            if isinstance(exc, SplitKUnknownError):
                shown = len(caught)
                steps, advice = _undecided(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum,
                                           out, profile)
                del caught[shown:]  # the same checks again: their warnings are already listed
    try:
        prof = prof or get_profile(profile, warn=False)
    except (KeyError, TypeError, ValueError):
        prof = None
    shape, dtype_name = _shape_and_dtype(mat1, mat2, checked, out_dtype)
    validated, reason = _validated(validation, prof, decision, tuple(caught))
    return CallPlan(
        validation=validation,
        profile=prof.name if prof else str(profile),
        preset=prof.preset.name if prof else "?",
        preset_maturity=prof.preset.maturity.value if prof else "?",
        split=decision,
        backend=chosen.value if chosen is not None and validation == "ok" else None,
        fallback=(auto_fallback(mat1.device) if backend in ("auto", Backend.AUTO) and chosen is Backend.REFERENCE
                  and isinstance(mat1, torch.Tensor) else None),
        out_dtype=dtype_name,
        shape=shape,
        use_fast_accum=bool(use_fast_accum),
        warnings=tuple(caught),
        validated=validated,
        reason=reason,
        split_steps=steps,
        advice=advice,
        kernel=kernel if validation == "ok" else None,
    )


def _undecided(mat1: torch.Tensor, mat2: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
               bias: torch.Tensor | None, scale_result: torch.Tensor | None, out_dtype: torch.dtype | None,
               use_fast_accum: bool, out: torch.Tensor | None,
               profile: str | Profile | None) -> tuple[tuple[SplitStep, ...], tuple[str, ...]]:
    """For a call refused with ``SplitKUnknownError``: each split-K source's finding, and the advice.

    The call passed its checks (the split decision comes after them), so they pass again here.
    """
    prof = get_profile(profile)
    checked = check_call(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum, out,
                         resize_out=False)
    assert checked.out_format is not None
    problem = Problem(checked.m, checked.n, checked.k, checked.fmt_a, checked.fmt_b, checked.out_format, checked.fast)
    return trace_splitk(prof, problem), splitk_advice(prof, problem)


def _first_sentence(message: str) -> str:
    """The first sentence of a message (up to its first ". ")."""
    head, dot, _ = message.partition(". ")
    return head + ("." if dot else "")


def _validated(validation: str | tuple[str, str], prof: Profile | None, decision: SplitDecision | None,
               caught: tuple[tuple[str, str], ...]) -> tuple[bool, str | None]:
    """Whether a plan's result is validated on hardware, and why not."""
    if validation != "ok" and validation[0] == SplitKUnknownError.__name__:
        return False, "the call is refused (SplitKUnknownError): no source of splitk=\"auto\" decides its split-K"
    if validation != "ok":
        return False, f"the call is refused ({validation[0]})"
    assert prof is not None
    if prof.maturity is not Maturity.VALIDATED:
        return False, f"profile {prof.name!r} is experimental"
    if prof.preset.maturity is not Maturity.VALIDATED:
        return False, f"preset {prof.preset.name!r} is experimental"
    if decision is not None and decision.extrapolated:
        return False, (f"the split-K decision (S = {decision.parts}, from {decision.source.value}) is extrapolated "
                       "beyond the shapes its envelope was fitted and tested on")
    if decision is not None and not decision.verified:
        return False, f"the split-K decision (S = {decision.parts}, from {decision.source.value}) is not verified"
    for cls, message in caught:
        if cls in _UNVERIFIED_WARNINGS:
            return False, f"{cls}: {message}"
    return True, None


#: The warnings that mean a result is not validated on hardware.
_UNVERIFIED_WARNINGS = frozenset(w.__name__ for w in (ExperimentalPresetWarning, UnverifiedEpilogueWarning,
                                                      UnverifiedSplitWarning, UnvalidatedEnvelopeWarning,
                                                      InferredSplitWarning, UnrecordedKernelWarning))


@dataclass(frozen=True)
class BlockCallPlan:
    """What :func:`block_scaled_mm` would do with these arguments, decided without computing.

    Attributes:
        validation: ``"ok"``, or ``(exception class name, message)`` of what the call would raise.
        kernel: the model's name, or None where ``kernel`` names none.
        shape: ``(M, N, K)``, or None when the operands are not matrices.
        out_dtype: the output dtype's name.
        backend: the backend that would compute, or None.
        fused: whether the cpu backend's fused kernel would run.
        lines: the kernel's chains, combination and maturity, one line each (empty when refused).
        warnings: ``(warning class name, message)`` of every warning the call would emit.
        validated: always False: no hardware output of these kernels is recorded.
        reason: why ``validated`` is False.
    """

    validation: str | tuple[str, str]
    kernel: str | None
    shape: tuple[int, int, int] | None
    out_dtype: str | None
    backend: str | None
    fused: bool
    lines: tuple[str, ...]
    warnings: tuple[tuple[str, str], ...]
    validated: bool = False
    reason: str = "no hardware output of the block-scaled kernels is recorded (the model is read from source)"

    @property
    def ok(self) -> bool:
        """True when the call would run."""
        return self.validation == "ok"

    def __str__(self) -> str:
        shape = "?" if self.shape is None else " x ".join(str(d) for d in self.shape)
        out = [f"mmaemu block-scaled plan for M x N x K = {shape} -> {self.out_dtype}, kernel {self.kernel!r}"]
        out.append("  runs:       yes" if self.ok else f"  runs:       no, {self.validation[0]}: {self.validation[1]}")
        out.append(f"  validated:  no: {self.reason}")
        out.extend(f"  {'kernel:' if i == 0 else '':11} {line}" for i, line in enumerate(self.lines))
        if self.backend is not None:
            out.append(f"  backend:    {self.backend}" + (" (fused block kernel)" if self.fused else ""))
        out.extend(f"  warns:      {cls}: {message}" for cls, message in self.warnings)
        return "\n".join(out)


def explain_block_scaled(
    a: torch.Tensor,
    a_scales: torch.Tensor,
    w: torch.Tensor,
    w_scale_inv: torch.Tensor,
    *,
    kernel: str | BlockKernelModel | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    backend: str | Backend = "auto",
) -> BlockCallPlan:
    """What :func:`block_scaled_mm` would do with the same arguments, without computing.

    A refusal is reported in ``validation`` (the class name and message of exactly what the call would raise),
    not raised; the warning the call emits is in ``warnings``. Nothing is modified.

    Example:
        >>> import torch, mmaemu
        >>> a = torch.zeros(4, 256).to(torch.float8_e4m3fn)
        >>> w = torch.zeros(128, 256).to(torch.float8_e4m3fn)
        >>> plan = mmaemu.explain_block_scaled(a, torch.ones(4, 2), w, torch.ones(1, 2), kernel="deepgemm-sm90")
        >>> step = plan.lines[2].split(": ", 1)[1]
        >>> plan.ok, plan.validated, step[:38]
        (True, False, 'acc = +0; s = rn(sa * sb); acc = fma(s')
    """
    plan: BlockPlan | None = None
    name: str | None = None
    validation: str | tuple[str, str] = "ok"
    with _record_warnings() as caught:
        try:
            model = resolve_kernel(kernel, "explain_block_scaled")
            name = model.name
            plan = prepare_block(model, a, a_scales, w, w_scale_inv, out_dtype, backend)
        except (MmaemuError, RuntimeError, TypeError, ValueError, KeyError) as exc:
            validation = (type(exc).__name__, str(exc))
    shape = None
    if isinstance(a, torch.Tensor) and isinstance(w, torch.Tensor) and a.dim() == 2 and w.dim() == 2:
        shape = (int(a.shape[0]), int(w.shape[0]), int(a.shape[1]))
    dtype = str(out_dtype).replace("torch.", "") if isinstance(out_dtype, torch.dtype) else None
    return BlockCallPlan(validation, name, shape, dtype, None if plan is None else plan.backend.value,
                         plan is not None and plan.fused, () if plan is None else plan.lines(), tuple(caught))
