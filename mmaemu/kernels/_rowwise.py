"""A row-wise ``_scaled_mm`` call run as torch 2.7.1's CUTLASS kernel: plan, refusals, accumulation, epilogue.

:func:`prepare_rowwise` decides everything before the arithmetic (the kernel model of the profile, its
dispatch or stream-K division for the shape, the refusals, the ``splitk`` argument's agreement, the
warning); :func:`run_rowwise` computes: each thread block's accumulator through the dispatcher
(:func:`mmaemu.backends.run`, so every backend gives the same bits), the stream-K peers summed in
fp32 in peer order ([Note: stream-K]), then the kernel's epilogue ([Note: row-wise epilogue]).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..backends import Backend
from ..backends import run as run_backend
from .._checks import CheckedCall
from ..errors import UnrecordedKernelWarning, UnsupportedFeatureError, warn_caller
from ..platforms._gpus import reference_gpus
from ..platforms._profiles import Profile
from .._split import AUTO, Scheme, SplitK, SplitKSpec, parse_splitk
from ._epilogue import rowwise_epilogue
from ._model import Accumulation, Fusion, KernelArch, KernelModel, ScaleOrder, Schedule, ZeroBias, rowwise_model_for
from ._plans import block_plan
from ._sm90 import Sm90Dispatch, dispatch
from ._streamk import TILE, StreamKMapping, mapping

__all__ = ["KernelPlan", "plan_rowwise", "prepare_rowwise", "run_rowwise"]

_ALIGN = 16  # bytes


@dataclass(frozen=True)
class KernelPlan:
    """What a row-wise call runs: the kernel model and its decisions for this shape.

    Attributes:
        model: the kernel model.
        m, n, k: the GEMM shape.
        fast: ``use_fast_accum``.
        sm_count: the SM count the decisions were made for (the profile's).
        transposed: the kernel runs on the transposed problem (``scale_b`` multiplies first).
        sm90: the sm_90 dispatch (None on sm_89).
        streamk: the stream-K division (None unless the model's schedule is stream-K).
        decided: the profile's recording decided this model (no warning).
    """

    model: KernelModel
    m: int
    n: int
    k: int
    fast: bool
    sm_count: int
    transposed: bool
    sm90: Sm90Dispatch | None
    streamk: StreamKMapping | None
    decided: bool = False

    @property
    def splits_k(self) -> bool:
        """Whether some output tile's K is divided between thread blocks."""
        return self.streamk is not None and self.streamk.sk_tiles > 0

    @property
    def formula(self) -> str:
        """The epilogue's order, as computed ([Note: row-wise epilogue])."""
        s1, s2 = ("scale_b[n]", "scale_a[m]") if self.transposed else ("scale_a[m]", "scale_b[n]")
        beta = "bias[n] or +0" if self.model.zero_bias is ZeroBias.PLUS_ZERO else "bias[n] or nothing"
        if self.model.fusion is Fusion.FMA:
            return f"bf16(fma(fp32(acc * {s1}), {s2}, {beta}))"
        return f"bf16(fp32(fp32(fp32(acc * {s1}) * {s2}) + {beta}))"

    @property
    def where(self) -> str:
        """The kernel's own decisions for the shape, in words."""
        order = "transposed" if self.transposed else "not transposed"
        if self.sm90 is None:
            return order
        d = self.sm90
        return f"dispatch rule {d.rule}, {order}, cluster {d.cluster[0]}x{d.cluster[1]}, tile {d.tile[0]}x{d.tile[1]}"

    @property
    def accumulation(self) -> str:
        """How the accumulator is built, in words."""
        if self.fast:
            chains = "one tensor-core chain over each block's K range"
        elif self.model.accumulation is Accumulation.PROMOTED:
            chains = f"a chain per {self.model.promotion} elements of K from +0, the chains added in fp32 from +0"
        else:
            where = "first" if self.model.accumulation is Accumulation.STAGED else "last"
            chains = f"staged: chains of 32, 64, ..., 64, 32 elements from +0 (the partial k-tile {where}), added in fp32"
        if self.streamk is None:
            return f"{self.model.preset.name} preset, no split of K; {chains}"
        sk = self.streamk
        split = (f"{sk.sk_tiles} of {sk.output_tiles} tiles of 64 x 128 divided over {sk.sk_blocks} blocks, the peers' "
                 f"partials added in fp32 in K order ({'separate reduction' if sk.separate_reduction else 'turnstile'})"
                 if sk.sk_tiles else f"all {sk.output_tiles} tiles of 64 x 128 data-parallel")
        return (f"{self.model.preset.name} preset, stream-K on {sk.sms} SMs at occupancy {sk.occupancy} "
                f"(derived): {split}; {chains}")

    def lines(self) -> tuple[str, ...]:
        """explain's lines for the kernel."""
        return (f"{self.model.name} ({self.model.arch}; {self.where})", f"accumulation: {self.accumulation}",
                f"epilogue: {self.formula}")


def plan_rowwise(model: KernelModel, m: int, n: int, k: int, fast: bool, sm_count: int,
                 decided: bool = False) -> KernelPlan:
    """The decisions of ``model`` for an ``M x N x K`` call on a GPU of ``sm_count`` SMs (no arithmetic)."""
    sm90 = dispatch(m, n, sm_count) if model.arch is KernelArch.SM90 else None
    if model.order is ScaleOrder.DISPATCH:
        transposed = sm90 is not None and sm90.transposed
    else:
        transposed = model.order is ScaleOrder.COLUMN_FIRST
    streamk = mapping(m, n, k, sm_count, model.sm_occupancy) if model.schedule is Schedule.STREAM_K else None
    return KernelPlan(model, m, n, k, fast, sm_count, transposed, sm90, streamk, decided)


def _misaligned(named: list[tuple[str, torch.Tensor | None]]) -> list[str]:
    return [name for name, t in named if t is not None and t.storage_offset() * t.element_size() % _ALIGN]


def _refusal(model: KernelModel, mat1: torch.Tensor, mat2: torch.Tensor, scale_a: torch.Tensor,
             scale_b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor | None) -> str | None:
    """Why the kernel's result is not determined for these layouts, or None."""
    m, k, n = int(mat1.shape[0]), int(mat1.shape[1]), int(mat2.shape[1])
    kept = out if out is not None and tuple(out.shape) == (m, n) else None  # else resized: contiguous strides
    # torch's resize keeps out's storage offset, so a resized out is written from the same offset
    odd = _misaligned([("mat1", mat1), ("mat2", mat2), ("scale_a", scale_a), ("scale_b", scale_b), ("bias", bias),
                       ("out", out)])
    if odd:
        return (f"{', '.join(odd)} not 16-byte aligned (storage offset): the kernel's 16-byte loads and stores from "
                "such a pointer are not characterised. Pass tensors whose storage offset is a multiple of 16 bytes")
    out_ld = n if kept is None else int(kept.stride(0))
    if model.arch is KernelArch.SM89:
        padded = [name for name, ld, want, rows in (("mat1", mat1.stride(0), k, m), ("mat2", mat2.stride(1), k, n),
                                                     ("out", out_ld, n, m)) if rows > 1 and ld != want]
        if padded:
            return (f"{', '.join(padded)} with a padded leading dimension: torch 2.7.1's sm_89 launcher passes K as the "
                    "leading dimension of both operands and N as the output's (f8f8bf16_rowwise_impl_sm89), so the GPU "
                    "reads and writes other elements than the tensor's. Pass dense tensors")
        return None
    padded = [name for name, ld in (("mat1", mat1.stride(0)), ("mat2", mat2.stride(1)), ("out", 2 * out_ld))
              if ld % _ALIGN]
    if padded:
        return (f"{', '.join(padded)} with a leading dimension that is not a multiple of 16 bytes: the kernel's TMA "
                "descriptors need one, and what the GPU does without is not characterised. Pass dense tensors")
    return None


def _check_splitk(plan: KernelPlan, splitk: SplitKSpec) -> None:
    """An explicit ``splitk`` must agree with the kernel's own division of K (``"auto"`` takes it)."""
    split = parse_splitk(splitk)
    if split == AUTO or (split == SplitK(1, Scheme.NONE) and not plan.splits_k):
        return
    does = ("divides this shape's K between thread blocks (stream-K)" if plan.splits_k else "does not split K here")
    raise ValueError(
        f"splitk={splitk!r} with row-wise scales: the call runs torch 2.7.1's CUTLASS kernel {plan.model.base}, not "
        f"cuBLASLt, and the kernel {does}; splitk= describes cuBLASLt's split-K. Pass splitk='auto'"
        + ("" if plan.splits_k else " or 1")
    )


def prepare_rowwise(profile: Profile, checked: CheckedCall, mat1: torch.Tensor, mat2: torch.Tensor,
                    scale_a: torch.Tensor, scale_b: torch.Tensor, bias: torch.Tensor | None,
                    out: torch.Tensor | None, splitk: SplitKSpec) -> KernelPlan:
    """Every decision of a row-wise call that passed torch's checks; warns unless the profile's recording decided
    its kernel (:class:`~mmaemu.errors.UnrecordedKernelWarning`). Modifies nothing.

    Raises:
        UnsupportedFeatureError: no kernel model for the profile, or layouts whose result is not determined.
        ValueError: an explicit ``splitk`` that contradicts the kernel's division of K.
    """
    model = rowwise_model_for(profile.preset, profile.rowwise_kernel)
    if model is None:
        modelled = [g for g in reference_gpus() if rowwise_model_for(g.preset, None) is not None]
        raise UnsupportedFeatureError(
            f"profile {profile.name!r}: row-wise scales run torch 2.7.1's CUTLASS kernel for the GPU's architecture, "
            f"and mmaemu models it for {' and '.join(f'the {g.name} ({g.architecture})' for g in modelled)} only, "
            f"not for preset {profile.preset.name!r}; use profile={' or '.join(repr(g.profile) for g in modelled)}"
        )
    refused = _refusal(model, mat1, mat2, scale_a, scale_b, bias, out)
    if refused is not None:
        raise UnsupportedFeatureError(f"row-wise scales on {profile.name!r} ({model.base}): {refused}")
    plan = plan_rowwise(model, checked.m, checked.n, checked.k, checked.fast, profile.sm_count,
                        decided=profile.rowwise_kernel is not None)
    _check_splitk(plan, splitk)
    if not plan.decided:
        warn_caller(
            f"{profile.name}: row-wise scales run torch 2.7.1's CUTLASS kernel {model.name} ({plan.where}), "
            "not cuBLASLt; its dispatch, accumulation and epilogue are read from the source and the wheel's machine "
            f"code, not recorded on a GPU. Computed as {plan.formula}; accumulator: {plan.accumulation}",
            UnrecordedKernelWarning)
    return plan


def _accumulators(plan: KernelPlan, a: torch.Tensor, b: torch.Tensor, backend: Backend) -> torch.Tensor:
    """fp32 ``[M, N]`` of ``a [M, K]`` and ``b [N, K]`` as the kernel's blocks accumulate and combine them."""
    model, k, sk = plan.model, plan.k, plan.streamk
    if sk is None or sk.sk_tiles == 0:
        return run_backend(backend, a, b, model.preset, block_plan(model, k, plan.fast))
    if sk.sk_tiles < sk.output_tiles:  # the data-parallel tiles (the stream-K ones are replaced below)
        acc = run_backend(backend, a, b, model.preset, block_plan(model, k, plan.fast))
    else:
        acc = torch.empty((plan.m, plan.n), dtype=torch.float32, device=a.device)
    for tile, peers in sk.peer_ranges().items():
        r, c = sk.tile_offset(tile)
        rows, cols = slice(r * TILE[0], (r + 1) * TILE[0]), slice(c * TILE[1], (c + 1) * TILE[1])
        total: torch.Tensor | None = None
        for k0, k1 in peers:  # peer order is K order; the sum is serial ([Note: stream-K])
            ops = a[rows, k0:k1].contiguous(), b[cols, k0:k1].contiguous()
            part = run_backend(backend, *ops, model.preset, block_plan(model, k1 - k0, plan.fast))
            total = part if total is None else total + part
        assert total is not None
        acc[rows, cols] = total
    return acc


def run_rowwise(plan: KernelPlan, mat1: torch.Tensor, mat2: torch.Tensor, scale_a: torch.Tensor,
                scale_b: torch.Tensor, bias: torch.Tensor | None, backend: Backend) -> torch.Tensor:
    """The bf16 ``[M, N]`` result of a prepared row-wise call (``mat2`` is ``[K, N]``, as torch takes it)."""
    acc = _accumulators(plan, mat1, mat2.t(), backend)
    row, col = scale_a.reshape(-1, 1).to(acc.device), scale_b.reshape(1, -1).to(acc.device)
    s1, s2 = (col, row) if plan.transposed else (row, col)
    return rowwise_epilogue(acc, s1, s2, None if bias is None else bias.detach(), fusion=plan.model.fusion,
                            zero_bias=plan.model.zero_bias)
