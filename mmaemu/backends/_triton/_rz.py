"""The second exactly-defined formulation's launcher: round-toward-zero fmas, no conversion, no masks.

For presets :func:`rz_expresses` (hopper and ada among them), the default on every GPU but where the sm_90
formulation runs. Per call, in torch on the operands' device: the FP8 codes are decoded once (a
257-entry table: 256 codes and the padding) into max(v, 0), max(-v, 0) and the exponent, gathered in the
plan's k order with every chain padded to a multiple of B, and laid out k-major (``[KP, MP]`` and
``[KP, NP]``, rows padded to the tile): 12 bytes per operand element. Each program owns a ``BLOCK_M x
BLOCK_N`` output tile and walks the plan (parts in the order they are combined, chains, blocks) with
``c`` in registers; with few outputs and several chains, each (chain, tile) is a program and the
launcher combines the chain results in the plan's order (:func:`choose_launch`). Inf codes count as
zeros; the dispatcher (:mod:`mmaemu.backends._dispatch`) recomputes the outputs that meet one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..._accumulation import AccumulationPlan, FlatPlan, combine_parts
from ...formats import decode_fp8
from ...presets import Preset
from .._protocol import Accumulated
from ._launch import (
    MAX_PROGRAMS,
    ZERO_EXP,
    KernelModule,
    TileConfig,
    expresses,
    interpreting,
    kernels,
    on_device,
    padded_codes,
    padded_k_index,
)

__all__ = [
    "PARALLEL_WORKSPACE_BYTES",
    "PROGRAMS_PER_SM",
    "RZ_GENERAL_GPU_CONFIG",
    "RZ_GPU_CONFIG",
    "SMALL_GRID_TILES",
    "Launch",
    "accumulate_rz",
    "choose_launch",
    "rz_expresses",
]

#: Default on GPUs for the second formulation: 64 outputs per thread, two accumulators each; chosen
#: with tools/evidence/gpu_static.py (the fewest SASS instructions per multiply-accumulate without spills on
#: sm_90, docs/data/gpu_static.json). Its speed is unmeasured.
RZ_GPU_CONFIG = TileConfig(128, 64, 4)
#: The same for the general specialisation (several chains or parts: slow accumulation, split-K),
#: which also holds the combination state: the largest tile without spills.
RZ_GENERAL_GPU_CONFIG = TileConfig(128, 32, 4)
#: Tiles :func:`choose_launch` picks from when the default tile leaves SMs idle (few outputs), largest
#: first: 32 rows and 64 columns per warp, the layout in which each issues about 7 SASS instructions per
#: multiply-accumulate without spills on every target (tools/evidence/gpu_static.py; 16 x 16 on one warp or
#: 32 x 32 on four issue about 70, and 32 x 32 on one warp spills on sm_80, sm_86 and sm_100).
SMALL_GRID_TILES: tuple[TileConfig, ...] = (TileConfig(128, 64, 4), TileConfig(64, 64, 2), TileConfig(32, 64, 1))
#: Programs one SM runs at once in :func:`choose_launch`'s cost model (the one-chain kernel uses about 176
#: registers a thread at 128 threads: two programs fit the 65,536 registers of an SM).
PROGRAMS_PER_SM = 2
#: Largest workspace (every chain's result for every output) the parallel-chains launch may allocate.
PARALLEL_WORKSPACE_BYTES = 1 << 28


@dataclass(frozen=True)
class Launch:
    """How a call with the second formulation is launched.

    Attributes:
        tile: the output tile of one program.
        parallel_chains: one program per (chain, tile), the chain results combined afterwards in the
            plan's order (:func:`mmaemu._accumulation.combine_parts`); else one program per tile walks
            every chain and part itself. Both give the same bits.
    """

    tile: TileConfig
    parallel_chains: bool


def _programs(m: int, n: int, tile: TileConfig) -> int:
    return -(-m // tile.block_m) * -(-n // tile.block_n)


def _modelled_time(m: int, n: int, items_per_tile: int, tile: TileConfig, sms: int) -> float:
    """Relative time of a launch: the busiest SM runs q = ceil(programs / sms) programs of the tile's
    outputs each, at a rate proportional to its resident warps up to 4 (one per scheduler); a thread
    holding o outputs issues about 5 o + 6 sqrt(o) instructions per k step (three fmas and the
    exponent pass per output, three loads per row and per column it holds)."""
    q = -(-_programs(m, n, tile) * items_per_tile // sms)
    outputs = tile.block_m * tile.block_n
    per_thread = max(1.0, outputs / (32 * tile.num_warps))
    return q * outputs * (5 + 6 / per_thread**0.5) / min(4, q * tile.num_warps)


def choose_launch(m: int, n: int, n_chains: int, sms: int) -> Launch:
    """The launch for ``m x n`` outputs of a plan with ``n_chains`` chains on a GPU with ``sms`` SMs.

    When the default tile (:data:`RZ_GPU_CONFIG` for one chain, :data:`RZ_GENERAL_GPU_CONFIG` else) gives
    at least ``PROGRAMS_PER_SM * sms`` programs, it is used as is. Otherwise (few outputs: the seeds'
    quickstart launches 90 programs on 132 SMs) the work is cut finer: with several chains (slow
    accumulation, split-K) each (chain, tile) becomes a program of its own (when every chain's result
    fits :data:`PARALLEL_WORKSPACE_BYTES`), and the tile is the one of :data:`SMALL_GRID_TILES` with the
    least modelled time (the busiest SM's programs times their outputs and the instructions an output
    costs, divided by its resident warps up to 4; ties: the larger tile). A chain itself is sequential (each block's ``c`` enters the next), so
    one chain over few outputs stays one program per tile. The model ignores memory and latency: it
    only ranks launches, and no GPU has timed them.

    Example:
        >>> choose_launch(2048, 5760, 1, 132)
        Launch(tile=TileConfig(block_m=128, block_n=64, num_warps=4), parallel_chains=False)
        >>> choose_launch(16, 64, 15, 132).parallel_chains
        True
    """
    base = RZ_GPU_CONFIG if n_chains == 1 else RZ_GENERAL_GPU_CONFIG
    if sms < 1:
        raise ValueError(f"sms must be at least 1, got {sms}")
    if _programs(m, n, base) >= PROGRAMS_PER_SM * sms:
        return Launch(base, False)
    parallel = n_chains > 1
    if parallel:
        padded = max(-(-m // t.block_m) * t.block_m * -(-n // t.block_n) * t.block_n for t in SMALL_GRID_TILES)
        if n_chains * padded * 4 > PARALLEL_WORKSPACE_BYTES:
            return Launch(base, False)
    items = n_chains if parallel else 1
    tiles = SMALL_GRID_TILES if parallel or n_chains == 1 else (base,)
    best = min(tiles, key=lambda t: _modelled_time(m, n, items, t, sms))
    return Launch(best, parallel)


def rz_expresses(preset: Preset) -> bool:
    """Whether the second formulation (:func:`~mmaemu.backends._triton._kernels_rz.chain_gemm_rz_kernel`,
    no fp32 -> int32 conversion) computes ``preset``: as :func:`expresses`, and a block's terms and
    ``c`` (each below 2**(F + 2) units of the block's grid) must sum below 2**22 units, so that its
    accumulators stay in one binade."""
    return expresses(preset) and (preset.block_size + 1) << (preset.frac_bits + 2) <= 1 << 22


_RZ_TABLE_CACHE: dict[torch.device, dict[torch.dtype, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]] = {}


def _rz_tables(device: torch.device) -> dict[torch.dtype, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per FP8 dtype, by code (index 256: padding): max(v, 0), max(-v, 0) (fp32; 0 for NaN/Inf),
    exponent (int32, ZERO_EXP for zeros, NaN, Inf and padding), Inf flag."""
    tables = _RZ_TABLE_CACHE.get(device)
    if tables is None:
        tables = {}
        for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            d = decode_fp8(torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype))
            zero = (d.value == 0) | d.is_nan | d.is_inf
            exponent = torch.where(zero, torch.full_like(d.exponent, ZERO_EXP), d.exponent).to(torch.int32)
            value = torch.where(zero, torch.zeros_like(d.value), d.value)
            pad_f = torch.zeros(1, dtype=torch.float32)
            tables[dtype] = (
                torch.cat([value.clamp(min=0), pad_f]).to(device),
                torch.cat([(-value).clamp(min=0), pad_f]).to(device),
                torch.cat([exponent, torch.tensor([ZERO_EXP], dtype=torch.int32)]).to(device),
                torch.cat([d.is_inf, torch.tensor([False])]).to(device),
            )
        _RZ_TABLE_CACHE[device] = tables
    return tables



def _decode_rz(x: torch.Tensor, k_index: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """``[r, K]`` FP8 -> k-major ``[KP, rows]`` arrays (positive part, negative part, exponent) in the
    padded plan order, rows padded to ``rows`` with zeros; and whether an Inf code occurs."""
    pos_t, neg_t, exp_t, inf_t = _rz_tables(x.device)[x.dtype]
    idx = padded_codes(x, k_index, rows).t().contiguous().flatten()
    shape = (k_index.numel(), rows)
    has_inf = bool(inf_t.index_select(0, idx).any())
    return (pos_t.index_select(0, idx).view(shape), neg_t.index_select(0, idx).view(shape),
            exp_t.index_select(0, idx).view(shape), has_inf)


def accumulate_rz(a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan, flat: FlatPlan,
                   launch: Launch) -> Accumulated:
    """:func:`accumulate` with the second formulation (the caller checked :func:`rz_expresses`)."""
    cfg = launch.tile
    m, n = a.shape[0], b.shape[0]
    n_parts = len(plan.parts)
    starts, k_index = padded_k_index(flat, preset.block_size, a.device)
    mp = -(-m // cfg.block_m) * cfg.block_m
    np_ = -(-n // cfg.block_n) * cfg.block_n
    ap, an, ea, a_inf = _decode_rz(a, k_index, mp)
    bp, bn, eb, b_inf = _decode_rz(b, k_index, np_)
    part_starts, order_t, role = flat.part_chains, flat.order, flat.role
    meta = torch.tensor([*starts, *part_starts, *order_t, *role], dtype=torch.int32, device=a.device)
    n_chains = len(starts) - 1
    chain_t = meta[: n_chains + 1]
    part_t = meta[n_chains + 1 : n_chains + 2 + n_parts]
    order_d = meta[n_chains + 2 + n_parts : n_chains + 2 + 2 * n_parts]
    role_t = meta[n_chains + 2 + 2 * n_parts :]
    tiles_n = np_ // cfg.block_n
    programs = mp // cfg.block_m * tiles_n
    if launch.parallel_chains and n_chains > 1:
        out = _parallel_chains(ap, an, ea, bp, bn, eb, chain_t, programs * n_chains, preset, plan, flat, launch,
                               mp, np_)[:m, :n]
        return Accumulated(out, bool(a_inf or b_inf))
    out = torch.empty((m, n), dtype=torch.float32, device=a.device)
    if programs > MAX_PROGRAMS:
        raise ValueError(f"{m} x {n} outputs need {programs} tiles of {cfg.block_m} x {cfg.block_n}, more than "
                         f"CUDA's grid holds ({MAX_PROGRAMS}); use a larger TileConfig")
    with on_device(a.device):
        kernels(KernelModule.RZ).chain_gemm_rz_kernel[(programs,)](
            ap, an, ea, bp, bn, eb, out, chain_t, part_t, order_d, role_t, m, n, mp, np_, n_parts, tiles_n,
            BLOCK=preset.block_size, FRAC=preset.frac_bits, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
            NATIVE_RZ=not interpreting(), ONE_CHAIN=n_parts == 1 and n_chains == 1, num_warps=cfg.num_warps,
            enable_fp_fusion=False,
        )
    return Accumulated(out, bool(a_inf or b_inf))  # Inf codes were zeros in the kernel


def _parallel_chains(ap: torch.Tensor, an: torch.Tensor, ea: torch.Tensor, bp: torch.Tensor, bn: torch.Tensor,
                     eb: torch.Tensor, chain_t: torch.Tensor, programs: int, preset: Preset, plan: AccumulationPlan,
                     flat: FlatPlan, launch: Launch, mp: int, np_: int) -> torch.Tensor:
    """Every chain of every tile as a program of its own, then the kernel's additions in torch: per part
    its chains' results from +0 in K order, then the parts in the plan's order (fp32, round to nearest
    even, on the operands' device). Returns ``[MP, NP]``."""
    cfg = launch.tile
    n_chains = len(flat.chain_starts) - 1
    if programs > MAX_PROGRAMS:
        raise ValueError(f"{n_chains} chains of {mp} x {np_} outputs need {programs} programs, more than CUDA's "
                         f"grid holds ({MAX_PROGRAMS}); launch with parallel_chains=False")
    if cfg.block_m * np_ >= 2**31:  # the kernel's 32-bit offsets inside a tile
        raise ValueError(f"N = {np_} is too wide for the parallel-chains launch's 32-bit offsets inside a tile; "
                         "launch with parallel_chains=False")
    chains = torch.empty((n_chains, mp, np_), dtype=torch.float32, device=ap.device)
    tiles_n = np_ // cfg.block_n
    with on_device(ap.device):
        kernels(KernelModule.RZ).chains_rz_kernel[(programs,)](
            ap, an, ea, bp, bn, eb, chains, chain_t, mp, np_, programs // n_chains, tiles_n,
            BLOCK=preset.block_size, FRAC=preset.frac_bits, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
            NATIVE_RZ=not interpreting(), num_warps=cfg.num_warps, enable_fp_fusion=False,
        )
    partials = []
    for p in range(len(plan.parts)):
        total = torch.zeros((mp, np_), dtype=torch.float32, device=ap.device)
        for ch in range(flat.part_chains[p], flat.part_chains[p + 1]):
            total = total + chains[ch]
        partials.append(total)
    return combine_parts(partials, plan.split.scheme)

