"""The reference backend: the instruction model of :mod:`mmaemu.model`, vectorised with torch.

Runs on whatever device the operands are on. All arithmetic is exact by construction (fp32 holds
FP8 products and the truncated block terms exactly; fp64 holds the accumulator terms), so the
result does not depend on the device. Memory is bounded by tiling the output: no ``[M, N, K]``
tensor is formed; each step works on an ``[m_tile, n_tile, block]`` slab of at most
:data:`TILE_ELEMENTS` elements.
"""

from __future__ import annotations

from typing import Any

import torch

from .._accumulation import AccumulationPlan, combine_parts
from ..formats import FP8_DTYPES, WIDE_DTYPES, fp8_inf_rows
from ..model import Preset, chain
from .._operands import BlockOperands
from ..presets import Accumulator, require_accumulator
from ._protocol import Accumulated, Backend, Executor

__all__ = ["EXECUTOR", "NAME", "TILE_ELEMENTS", "accumulate", "available", "expresses", "recompute_infinite"]

NAME = Backend.REFERENCE.value
#: Upper bound on the elements of one [m_tile, n_tile, block] working slab.
TILE_ELEMENTS = 1 << 20


def _tile_sizes(m: int, n: int, block: int) -> tuple[int, int]:
    per_row = max(1, TILE_ELEMENTS // max(block, 1))
    m_tile = max(1, min(m, per_row // max(1, min(n, 256))))
    n_tile = max(1, min(n, per_row // m_tile))
    return m_tile, n_tile


def accumulate(a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan) -> torch.Tensor:
    """fp32 accumulators ``[M, N]`` of ``a [M, K]`` and ``b [N, K]`` under ``plan``.

    The operands are FP8 (any pair) or two matrices of one zoo format (fp16, bf16, tf32). NaN codes
    are treated as zero here; the caller applies the NaN rule. Inf codes follow the
    IEEE rules of :func:`mmaemu.model.block_fma`. The accumulator is fp32: the fp16 accumulator is
    :func:`mmaemu.model.dot`'s (no backend computes GEMMs with it).

    Raises:
        UnsupportedFeatureError: ``preset`` does not model the fp32 accumulator (``hopper_mma_sync``:
            no recording decides it), so nothing is computed.
    """
    require_accumulator(preset, Accumulator.FP32)
    m, n = a.shape[0], b.shape[0]
    a_ops, b_ops = BlockOperands.of(a), BlockOperands.of(b)
    has_inf = bool(a_ops.is_inf.any() or b_ops.is_inf.any())
    out = torch.empty((m, n), dtype=torch.float32, device=a.device)
    m_tile, n_tile = _tile_sizes(m, n, preset.block_size)
    # Gather each part's k sequence once (a copy of at most (M + N) * K operands in all).
    part_ops = [
        (a_ops.k_gather(plan.part_sequence(p)), b_ops.k_gather(plan.part_sequence(p))) if chains else None
        for p, chains in enumerate(plan.parts)
    ]
    for m0 in range(0, m, m_tile):
        m1 = min(m, m0 + m_tile)
        for n0 in range(0, n, n_tile):
            n1 = min(n, n0 + n_tile)
            zero = torch.zeros((m1 - m0, n1 - n0), dtype=torch.float32, device=a.device)
            partials = []
            for chains, ops in zip(plan.parts, part_ops):
                if ops is None:
                    partials.append(zero)  # a part without k-tiles contributes +0
                    continue
                pa, pb = ops[0].rows(m0, m1, 1), ops[1].rows(n0, n1, 0)
                if plan.fast:
                    partials.append(chain(pa, pb, zero, preset, has_inf=has_inf))
                    continue
                total = zero
                offset = 0
                for ranges in chains:
                    length = sum(stop - start for start, stop in ranges)
                    result = chain(
                        pa.k_slice(offset, offset + length),
                        pb.k_slice(offset, offset + length),
                        zero,
                        preset,
                        has_inf=has_inf,
                    )
                    total = total + result  # fp32, round to nearest even, in K order
                    offset += length
                partials.append(total)
            out[m0:m1, n0:n1] = combine_parts(partials, plan.split.scheme) if partials else zero
    return out


def _inf_rows(x: torch.Tensor) -> torch.Tensor:
    """Indices of the rows of an operand matrix that hold an Inf (FP8: E5M2 codes only; fp16, bf16, tf32)."""
    if x.dtype in (torch.float16, torch.bfloat16, torch.float32):
        if x.shape[1] == 0:
            return torch.zeros(0, dtype=torch.int64, device=x.device)
        return torch.nonzero(torch.isinf(x).any(1)).flatten()
    return torch.nonzero(fp8_inf_rows(x)).flatten()


def recompute_infinite(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, preset: Preset,
                       plan: AccumulationPlan) -> torch.Tensor:
    """Overwrite, in ``out`` ``[M, N]``, the outputs whose row of ``a`` or of ``b`` holds an Inf code.

    A fast backend that treats Inf codes as zeros calls this afterwards: the IEEE rules (Inf
    results, Inf - Inf and 0 * Inf giving NaN) come from this backend, on just those rows and
    columns. Each output depends only on its row of ``a`` and its row of ``b``, so the result is
    the whole product as this backend computes it. Returns ``out``.
    """
    rows, cols = _inf_rows(a), _inf_rows(b)
    if rows.numel():
        out[rows] = accumulate(a[rows], b, preset, plan).to(out.device)
    if cols.numel():
        out[:, cols] = accumulate(a, b[cols], preset, plan).to(out.device)
    return out


class _Reference(Executor):
    """The reference backend as the dispatcher uses it."""

    def available(self, device: torch.device) -> tuple[bool, str]:
        """(usable, reason): torch computes on every device but ``meta`` (whose tensors hold no values)."""
        if device.type == "meta":
            return False, "tensors on the 'meta' device hold no values"
        return True, f"torch {torch.__version__}, on {device.type!r} tensors"

    def expresses(self, preset: Preset, dtypes: tuple[torch.dtype, ...] = ()) -> bool:
        """Every preset, every format (the fp32 accumulators a preset models; see :func:`accumulate`)."""
        return True

    def accumulate(self, a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan,
                   **options: Any) -> Accumulated:
        """:func:`accumulate` (the IEEE rules for Inf codes are this backend's own)."""
        return Accumulated(accumulate(a, b, preset, plan), False)

    def selftest_failure(self, device: torch.device, preset: Preset | None = None) -> str | None:
        """None: the model in torch has no kernels of its own to self-test."""
        return None


#: The reference backend as the dispatcher uses it: every device type, every format.
EXECUTOR = _Reference(Backend.REFERENCE, (), frozenset((*FP8_DTYPES, *WIDE_DTYPES)),
                      "torch is a dependency of mmaemu: reinstall mmaemu")
#: (usable, reason): torch computes on every device but ``meta``.
available = EXECUTOR.available
#: Every preset, every format.
expresses = EXECUTOR.expresses
