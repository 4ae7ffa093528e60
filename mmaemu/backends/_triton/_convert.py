"""The first exactly-defined formulation's launcher: truncation by the fp32 -> int32 conversion.

It runs the presets the backend expresses but :func:`~mmaemu.backends._triton._rz.rz_expresses` does not
(blocks whose sum leaves one binade of the RZ accumulators), and any preset when a caller asks for it
(``formulation=Formulation.CONVERT``). Per call, in torch on the operands' device: the FP8 codes are
decoded once (a 256-entry table) into fp32 values and int8 exponents, gathered in the plan's k order
(split parts are contiguous runs of the permuted k axis) and laid out k-major (``[K, M]`` and ``[K, N]``):
5 bytes per operand element. One program per ``BLOCK_M x BLOCK_N`` output tile walks every part and
chain. Inf codes count as zeros; the dispatcher recomputes the outputs that meet one.
"""

from __future__ import annotations

import torch

from ..._accumulation import AccumulationPlan, FlatPlan
from ...formats import decode_fp8
from ...presets import Preset
from .._protocol import Accumulated
from ._launch import MAX_PROGRAMS, ZERO_EXP, KernelModule, TileConfig, kernels, on_device

__all__ = ["GPU_CONFIG", "accumulate_convert"]

#: Default on GPUs: 16 outputs per thread, no reductions across threads; for sm_90 ptxas reports 149
#: registers and no spills. Its speed is unmeasured.
GPU_CONFIG = TileConfig(64, 64, 8)


def _tables(device: torch.device) -> dict[torch.dtype, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per FP8 dtype, by code: exact value (fp32; 0 for NaN/Inf), exponent (int8), Inf flag."""
    out = {}
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        d = decode_fp8(torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype))
        zero = (d.value == 0) | d.is_nan | d.is_inf
        exponent = torch.where(zero, torch.full_like(d.exponent, ZERO_EXP), d.exponent).to(torch.int8)
        out[dtype] = (d.value.to(device), exponent.to(device), d.is_inf.to(device))
    return out




_TABLE_CACHE: dict[torch.device, dict[torch.dtype, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = {}


def _decode_k_major(x: torch.Tensor, perm: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """``[rows, K]`` FP8 -> fp32 values and int8 exponents ``[K', rows]`` in the plan's k order."""
    tables = _TABLE_CACHE.get(x.device)
    if tables is None:
        tables = _TABLE_CACHE[x.device] = _tables(x.device)
    val_t, exp_t, inf_t = tables[x.dtype]
    codes = x.view(torch.uint8)
    if perm is not None:
        codes = codes.index_select(1, perm)
    idx = codes.t().contiguous().to(torch.int32).flatten()  # index_select takes int32 indices
    shape = (codes.shape[1], codes.shape[0])
    has_inf = bool(inf_t.index_select(0, idx).any())
    return val_t.index_select(0, idx).view(shape), exp_t.index_select(0, idx).view(shape), has_inf



def accumulate_convert(a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan, flat: FlatPlan,
                       config: TileConfig) -> Accumulated:
    """fp32 ``[M, N]`` accumulators with the first formulation, one program per ``config`` tile (Inf codes
    counted as zeros: :attr:`~mmaemu.backends.Accumulated.inf_zeroed`)."""
    m, n = a.shape[0], b.shape[0]
    chain_starts, part_starts, order, role = flat.chain_starts, flat.part_chains, flat.order, flat.role
    perm = None if flat.identity else flat.k_order.to(a.device)
    va, ea, a_inf = _decode_k_major(a, perm)
    vb, eb, b_inf = _decode_k_major(b, perm)
    meta = torch.tensor([*chain_starts, *part_starts, *order, *role], dtype=torch.int32, device=a.device)
    n_chains, n_parts = len(chain_starts) - 1, len(plan.parts)
    chain_t = meta[: n_chains + 1]
    part_t = meta[n_chains + 1 : n_chains + 2 + n_parts]
    order_t = meta[n_chains + 2 + n_parts : n_chains + 2 + 2 * n_parts]
    role_t = meta[n_chains + 2 + 2 * n_parts :]
    out = torch.empty((m, n), dtype=torch.float32, device=a.device)
    tiles_n = (n + config.block_n - 1) // config.block_n
    programs = (m + config.block_m - 1) // config.block_m * tiles_n
    if programs > MAX_PROGRAMS:
        raise ValueError(f"{m} x {n} outputs need {programs} tiles of {config.block_m} x {config.block_n}, more "
                         f"than CUDA's grid holds ({MAX_PROGRAMS}); use a larger TileConfig")
    # one grid axis (CUDA allows 2**31 - 1 programs there, 65,535 on the others), launched on the
    # operands' device, not the current one
    with on_device(a.device):
        kernels(KernelModule.CONVERT).chain_gemm_kernel[(programs,)](
            va, ea, vb, eb, out, chain_t, part_t, order_t, role_t, m, n, n_parts, tiles_n,
            BLOCK=preset.block_size, FRAC=preset.frac_bits, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
            num_warps=config.num_warps, enable_fp_fusion=False,
        )
    return Accumulated(out, bool(a_inf or b_inf))  # Inf codes were zeros in the kernel
