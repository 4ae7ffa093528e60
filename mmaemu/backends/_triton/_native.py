"""The sm_90 formulation's launcher: the GPU's own FP8 tensor-core instruction, where it is the preset's.

On compute capability 9.0 (H100, H200, GH200) the FP8 ``wgmma`` instruction computes the hopper preset's
arithmetic (B = 32, F = 13, aligned ``c``, truncation), so
:func:`~mmaemu.backends._triton._kernels_native.chain_gemm_native_kernel` runs it directly on the operands:
its bits are the hardware's, not exactly-defined IEEE steps, and the backend uses it only after the
self-test on that device found it equal to the reference backend (:func:`disable_native` otherwise).

The hot path (hopper's plans: chains and parts on 128-aligned k, ``K % 16 == 0``) hands the FP8 tensors
to the kernel as they are, with no copy, no decoding and no host synchronisation (the part bounds live on
the device, cached per plan); other plans (round-robin splits, K not a multiple of 16) first gather the
codes into the plan's order with every chain padded to 128 (:class:`NativeLayout`).

Special values: outputs whose row of ``a`` or of ``b`` holds a NaN code are unspecified here (the dispatcher,
:func:`mmaemu.backends._dispatch.run`, writes the canonical NaN over every one of them); outputs that meet an Inf code
(E5M2 only) are recomputed by the dispatcher, so only E5M2 operands are scanned (a host
synchronisation), never E4M3 ones, which have no Inf code.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..._accumulation import AccumulationPlan, FlatPlan, combine_parts, flatten_plan
from ..._host import env_flag
from ...presets import CMode, Preset, Rounding
from .._protocol import Accumulated
from ._launch import (
    MAX_PROGRAMS,
    KernelModule,
    TileConfig,
    device_str,
    interpreting,
    kernels,
    on_device,
    padded_k_index,
)

__all__ = [
    "DOT_K",
    "NATIVE_CAPABILITY",
    "NATIVE_ENV",
    "NATIVE_GPU_CONFIG",
    "NativeCall",
    "NativeLayout",
    "accumulate_native",
    "disable_native",
    "native_applies",
    "native_arithmetic",
    "native_layout",
    "plan_layout",
    "prepare_native",
]

#: The tile: two warpgroups, one FP8 wgmma of 64 x 128 per warpgroup and k step; ptxas reports no spills on
#: sm_90 with Triton 3.6 and 3.9 (tools/evidence/gpu_static.py, docs/data/gpu_static.json).
NATIVE_GPU_CONFIG = TileConfig(128, 128, 8)
#: k per ``tl.dot``: four of the instruction's K = 32 blocks chained on the accumulator (no FADD between
#: them: the same arithmetic as four dots of 32), and one slow-accumulation chain.
DOT_K = 128
#: The compute capability whose FP8 tensor-core instruction is the hopper preset's.
NATIVE_CAPABILITY = (9, 0)
#: Environment variable (a boolean, :func:`mmaemu._host.env_flag`; default on): 0, false, no or off keep the
#: sm_90 formulation off (the exactly-defined one runs); any other value than those and 1, true, yes, on raises.
NATIVE_ENV = "MMAEMU_TRITON_NATIVE"
#: Devices (``str(torch.device)``) where the sm_90 formulation failed its self-test or was switched off.
_NATIVE_OFF: set[str] = set()
#: Slow accumulation's chain length, the one the kernel's SLOW mode expresses (one chain per k step).
_SLOW_CHAIN = 128


def native_applies(preset: Preset, device: torch.device) -> bool:
    """Whether a call runs the sm_90 formulation: the GPU's own FP8 tensor-core instruction, whose bits are
    the hardware's rather than exactly-defined IEEE steps.

    True only when all hold: the kernels are compiled (not the interpreter); ``device`` is a CUDA device of
    compute capability 9.0 (H100, H200, GH200: the instruction the hopper preset describes); the preset's
    arithmetic is the hopper preset's (B = 32, F = 13, aligned ``c``, truncation); the environment variable
    ``MMAEMU_TRITON_NATIVE`` does not turn it off (``0``, ``false``, ``no``, ``off``; any value that is not a
    boolean raises :class:`ValueError`); and the formulation has not failed its self-test on the device
    (:func:`disable_native`). The self-test (run before first use, as for every variant) compares it with
    the reference backend; if it fails, the exactly-defined formulation runs instead.
    """
    if not env_flag(NATIVE_ENV, default=True) or device.type != "cuda" or interpreting():
        return False
    if device_str(device) in _NATIVE_OFF or not native_arithmetic(preset):
        return False
    return torch.cuda.is_available() and torch.cuda.get_device_capability(device) == NATIVE_CAPABILITY


def native_arithmetic(preset: Preset) -> bool:
    """Whether ``preset``'s arithmetic is the sm_90 FP8 instruction's: B = 32, F = 13, aligned ``c``,
    truncation (the hopper preset's)."""
    return (preset.block_size, preset.frac_bits, preset.c_mode, preset.rounding) == (32, 13, CMode.ALIGNED,
                                                                                     Rounding.TRUNCATE)


def disable_native(device: torch.device) -> None:
    """Keep the sm_90 formulation off on ``device`` for this process (its self-test failed there)."""
    _NATIVE_OFF.add(device_str(device))


@dataclass(frozen=True)
class NativeLayout:
    """How a plan's k axis reaches the kernel.

    Attributes:
        bounds: part p covers ``[bounds[2 p], bounds[2 p + 1])`` of the laid-out k axis: starts are multiples
            of :data:`DOT_K`, stops of 16 (an empty part is ``(0, 0)``).
        slow: every :data:`DOT_K` step is a chain of its own (slow accumulation); else one chain per part.
        k_index: None when the operands are used as they are; else, for every laid-out position, the
            operands' k it holds (-1: padding, read as +0), int64.
    """

    bounds: tuple[int, ...]
    slow: bool
    k_index: torch.Tensor | None

    @property
    def direct(self) -> bool:
        """The operands go to the kernel as they are (no gather)."""
        return self.k_index is None


def native_layout(flat: FlatPlan, k: int) -> NativeLayout:
    """The layout of ``flat`` (a plan of ``k``) for the kernel: direct when the chains start on multiples of
    :data:`DOT_K` in the operands' own k order and ``k % 16 == 0`` (16-byte aligned rows); else every chain
    gathered and padded to a multiple of :data:`DOT_K`.

    Raises:
        ValueError: a plan with several chains in a part and a chain longer than 128 (no slow accumulation
            the hopper arithmetic has; the kernel's slow mode is one chain per step of 128).
    """
    cs, pc = list(flat.chain_starts), list(flat.part_chains)
    n_parts, n_chains = len(pc) - 1, len(cs) - 1
    slow = any(pc[p + 1] - pc[p] > 1 for p in range(n_parts))
    lengths = [cs[c + 1] - cs[c] for c in range(n_chains)]
    if slow and max(lengths, default=0) > _SLOW_CHAIN:
        raise ValueError(f"the sm_90 formulation's slow mode takes chains of at most {_SLOW_CHAIN}, got "
                         f"{max(lengths)}")
    aligned = all(s % DOT_K == 0 for s in cs[:-1])
    whole = not slow or all(length == DOT_K or cs[c + 1] == k for c, length in enumerate(lengths))
    if flat.identity and k % 16 == 0 and aligned and whole:
        return NativeLayout(_part_bounds(cs, pc), slow, None)
    starts, index = padded_k_index(flat, DOT_K, torch.device("cpu"))
    return NativeLayout(_part_bounds(starts, pc), slow, index)


def _part_bounds(chain_starts: list[int], part_chains: list[int]) -> tuple[int, ...]:
    """(start, stop) of every part's k range, flattened; ``(0, 0)`` for a part without chains."""
    out: list[int] = []
    for p in range(len(part_chains) - 1):
        lo, hi = chain_starts[part_chains[p]], chain_starts[part_chains[p + 1]]
        out += [lo, hi] if hi > lo else [0, 0]
    return tuple(out)


_BOUNDS: dict[tuple[str, tuple[int, ...]], torch.Tensor] = {}
_BOUNDS_LIMIT = 1024
_LAYOUTS: dict[AccumulationPlan, NativeLayout] = {}


def plan_layout(plan: AccumulationPlan) -> NativeLayout:
    """:func:`native_layout` of ``plan``, cached per plan (flattening a plan costs tens of microseconds, a
    repeated call shape pays it once)."""
    layout = _LAYOUTS.get(plan)
    if layout is None:
        if len(_LAYOUTS) >= _BOUNDS_LIMIT:
            _LAYOUTS.clear()
        layout = _LAYOUTS[plan] = native_layout(flatten_plan(plan), plan.k)
    return layout


def _bounds(bounds: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """The part bounds as an int32 tensor on ``device``, cached: a host-to-device copy synchronises, so a
    repeated call shape pays it once."""
    key = (device_str(device), bounds)
    tensor = _BOUNDS.get(key)
    if tensor is None:
        if len(_BOUNDS) >= _BOUNDS_LIMIT:
            _BOUNDS.clear()
        tensor = _BOUNDS[key] = torch.tensor(bounds, dtype=torch.int32, device=device)
    return tensor


def _laid_out(x: torch.Tensor, layout: NativeLayout) -> torch.Tensor:
    """``x [r, K]`` as the kernel reads it: itself when direct (made contiguous if its rows are not 16-byte
    aligned), else its codes gathered into the layout (padding +0)."""
    if layout.k_index is None:
        aligned = x.stride(1) == 1 and x.stride(0) % 16 == 0 and x.data_ptr() % 16 == 0
        return x if aligned else x.contiguous()
    index = layout.k_index.to(x.device)
    codes = x.view(torch.uint8)
    out = torch.zeros((x.shape[0], index.numel()), dtype=torch.uint8, device=x.device)
    valid = index >= 0
    out[:, valid] = codes.index_select(1, index[valid])
    return out.view(x.dtype)


def _has_inf(x: torch.Tensor) -> bool:
    """Whether ``x`` holds an Inf code (E5M2 only: E4M3 has none, so no scan and no synchronisation)."""
    if x.dtype != torch.float8_e5m2:
        return False
    return bool(((x.view(torch.uint8) & 0x7F) == 0x7C).any())


@dataclass(frozen=True)
class NativeCall:
    """A call with its operands laid out for the kernel: :meth:`run` launches the kernel (and adds the
    parts on the device), nothing else.

    Attributes:
        a: FP8 ``[M, KP]`` as the kernel reads it.
        b: FP8 ``[N, KP]``.
        layout: the plan's layout.
        plan: the accumulation plan (its split scheme combines the parts).
        bounds: ``layout.bounds`` on the operands' device.
    """

    a: torch.Tensor
    b: torch.Tensor
    layout: NativeLayout
    plan: AccumulationPlan
    bounds: torch.Tensor

    def run(self) -> torch.Tensor:
        """The fp32 ``[M, N]`` accumulators (outputs meeting NaN or Inf codes not yet fixed)."""
        cfg = NATIVE_GPU_CONFIG
        m, n = self.a.shape[0], self.b.shape[0]
        parts = len(self.layout.bounds) // 2
        tiles_n = -(-n // cfg.block_n)
        tiles = -(-m // cfg.block_m) * tiles_n
        if tiles * parts > MAX_PROGRAMS:
            raise ValueError(f"{m} x {n} outputs in {parts} parts need {tiles * parts} programs, more than CUDA's "
                             f"grid holds ({MAX_PROGRAMS}); set {NATIVE_ENV}=0")
        res = torch.empty((parts, m, n), dtype=torch.float32, device=self.a.device)
        with on_device(self.a.device):
            kernels(KernelModule.NATIVE).chain_gemm_native_kernel[(tiles * parts,)](
                self.a, self.b, res, self.bounds, m, n, self.a.stride(0), self.b.stride(0), tiles, tiles_n,
                SLOW=self.layout.slow, DOT_K=DOT_K, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                num_warps=cfg.num_warps, enable_fp_fusion=False,
            )
        if parts == 1:
            return res[0]
        return combine_parts(list(res.unbind(0)), self.plan.split.scheme)


def prepare_native(a: torch.Tensor, b: torch.Tensor, plan: AccumulationPlan, flat: FlatPlan | None = None) -> NativeCall:
    """``a [M, K]`` and ``b [N, K]`` laid out for the kernel under ``plan`` (``flat``: its flattening, else
    the cached :func:`plan_layout`); no synchronisation on the hot path once the plan's bounds are cached.

    Raises:
        ValueError: rows too long for the kernel's 32-bit offsets inside a tile.
    """
    layout = plan_layout(plan) if flat is None else native_layout(flat, plan.k)
    a_k, b_k = _laid_out(a, layout), _laid_out(b, layout)
    cfg = NATIVE_GPU_CONFIG
    if cfg.block_m * a_k.stride(0) >= 2**31 or cfg.block_n * b_k.stride(0) >= 2**31 or cfg.block_m * b.shape[0] >= 2**31:
        raise ValueError(f"K = {plan.k} or N = {b.shape[0]} is too long for the sm_90 formulation's 32-bit offsets "
                         f"inside a tile; set {NATIVE_ENV}=0")
    return NativeCall(a_k, b_k, layout, plan, _bounds(layout.bounds, a.device))


def accumulate_native(a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan,
                      flat: FlatPlan | None = None) -> Accumulated:
    """fp32 ``[M, N]`` accumulators with the sm_90 formulation (the caller checked :func:`native_applies`,
    or runs the kernel in the interpreter on data where every sum is exact, to check its layout)."""
    out = prepare_native(a, b, plan, flat).run()
    return Accumulated(out, _has_inf(a) or _has_inf(b))  # the dispatcher recomputes outputs meeting an Inf code
