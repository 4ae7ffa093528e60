"""The Triton backend: the reference GPU's bits from exactly-defined GPU arithmetic, on any CUDA GPU.

The arithmetic is the cpu backend's exact fp32/integer formulation (see
:mod:`mmaemu.backends.triton.kernels` for why every operation is exactly defined), run by one
Triton kernel per call: each program owns a ``BLOCK_M x BLOCK_N`` output tile and walks the
accumulation plan (parts in the order they are combined, chains, blocks of B products) with the
accumulator ``c`` in registers. It never uses ``tl.dot``, so the host GPU's own tensor-core
rounding never enters, and the bits do not depend on the GPU model.

Per call, in torch on the operands' device: the FP8 codes are decoded once (a 256-entry table)
into fp32 values and int8 exponents, gathered in the plan's k order (split parts are contiguous
runs of the permuted k axis) and laid out k-major (``[K, M]`` and ``[K, N]``): 5 bytes per
operand element. No ``[M, N, K]`` intermediate.

Special values:

- NaN codes are decoded as zero; :func:`mmaemu.call._run` writes the canonical NaN over every
  output whose row or column holds one, so the value computed here never shows.
- Inf codes (E5M2) are zeros in the kernel; the outputs whose row of ``a`` or of ``b`` holds one
  are then recomputed by the reference backend (on the same device), which implements the IEEE
  rules of :func:`mmaemu.model.block_fma` (:func:`mmaemu.backends.reference.recompute_infinite`).
  Presets this kernel does not express (``b200_mma_sync``: round-to-nearest, accumulator added
  last) go to the reference backend whole.
- Exact zero results are +0 (an integer zero converts to +0). A block result of 2**128 or more
  cannot occur for K < 2**90, so the Inf rule of the model needs no code.

[Note: reachable range] The kernel clamps the block exponent E to [-100, 100] and stores zero
codes' exponent as -100 (int8). Inside a chain that starts from +0, the accumulator is +0 or at
least 2**-41 (a block result is a multiple of 2**(E - F) with E >= -28 once a product is
nonzero) and at most about 2**(31 + log2 K), so neither choice can change a result.

Availability: Triton must import; kernels compiled for the GPU run on CUDA tensors, and under
``TRITON_INTERPRET=1`` (set before the first use in the process) Triton's interpreter runs them
on CPU tensors, bit for bit (that is how CI tests them). Before first use on a device the
self-test of :mod:`mmaemu.backends.triton.selftest` must pass there (the dispatcher,
:mod:`mmaemu.backends`, runs it).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from ...accumulation import AccumulationPlan, flatten_plan
from ...errors import BackendUnavailableError
from ...formats import decode_fp8
from ...model import block_sum_exact_in_fp32
from ...presets import CMode, Preset, Rounding
from .. import reference

__all__ = [
    "NAME",
    "TileConfig",
    "GPU_CONFIG",
    "INTERPRETER_CONFIG",
    "available",
    "interpreting",
    "kernel_name",
    "expresses",
    "accumulate",
]

NAME = "triton"
#: int8 exponent of zero, NaN and Inf codes (must equal triton_kernels.ZERO_EXP).
ZERO_EXP = -100


@dataclass(frozen=True)
class TileConfig:
    """Launch parameters: the output tile of one program and its warps.

    Attributes:
        block_m: rows of the output tile.
        block_n: columns of the output tile.
        num_warps: warps per program (ignored by the interpreter).
    """

    block_m: int
    block_n: int
    num_warps: int

    def __post_init__(self) -> None:
        for field, value, top in (("block_m", self.block_m, MAX_TILE), ("block_n", self.block_n, MAX_TILE),
                                  ("num_warps", self.num_warps, MAX_WARPS)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"TileConfig.{field} must be an int, got {type(value).__name__}")
            if value < 1 or value > top or value & (value - 1):
                raise ValueError(f"TileConfig.{field} must be a power of two from 1 to {top}, got {value} "
                                 "(Triton's tiles are powers of two; CUDA allows 1,024 threads, 32 warps, per block)")


#: Largest tile side: a power of two Triton can hold (registers bound it far earlier).
MAX_TILE = 1024
#: Largest warp count per program: CUDA's 1,024 threads per block.
MAX_WARPS = 32


#: Default on GPUs: 16 outputs per thread, no reductions across threads; for sm_90 ptxas reports 149
#: registers and no spills. Its speed is unmeasured.
GPU_CONFIG = TileConfig(64, 64, 8)
#: Default under the interpreter: large tiles mean few programs and few interpreted operations.
INTERPRETER_CONFIG = TileConfig(64, 64, 1)

_TRITON_ERROR: str | None = None
_KERNELS: ModuleType | None = None


def _import_error() -> str | None:
    """None when ``triton`` imports, else why not (cached)."""
    global _TRITON_ERROR
    if _TRITON_ERROR is None and _KERNELS is None:
        if importlib.util.find_spec("triton") is None:
            _TRITON_ERROR = "triton is not installed (pip install 'mmaemu[triton]')"
        else:
            try:
                importlib.import_module("triton")
            except Exception as exc:  # noqa: BLE001 - any import failure makes the backend unavailable
                _TRITON_ERROR = f"triton is not importable: {exc}"
    return _TRITON_ERROR


def _kernels() -> ModuleType:
    """The kernel module, imported on first use (Triton reads TRITON_INTERPRET then)."""
    global _KERNELS
    if _KERNELS is None:
        error = _import_error()
        if error is not None:
            raise BackendUnavailableError(f"backend 'triton' is unavailable: {error}")
        _KERNELS = importlib.import_module(".kernels", __package__)
    return _KERNELS


def interpreting() -> bool:
    """True when the kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1`` at first use)."""
    if _import_error() is not None:
        return False
    return type(_kernels().chain_gemm_kernel).__name__ == "InterpretedFunction"


def available(device: torch.device | None = None) -> tuple[bool, str]:
    """(usable, reason): whether Triton imports and can run the kernels on ``device``.

    This does not run the self-test (see :func:`mmaemu.backends.triton.selftest.selftest`).
    """
    error = _import_error()
    if error is not None:
        return False, error
    version = str(getattr(importlib.import_module("triton"), "__version__", "?"))
    if interpreting():
        return True, f"triton {version}, interpreter (TRITON_INTERPRET=1)"
    if device is not None and device.type != "cuda":
        return False, (f"triton {version} compiles for CUDA devices, not {device.type!r} tensors "
                       "(TRITON_INTERPRET=1 runs the kernels on CPU tensors)")
    if not torch.cuda.is_available():
        return False, f"triton {version}: no CUDA device"
    return True, f"triton {version}"


def expresses(preset: Preset) -> bool:
    """Whether the kernel computes ``preset`` (others are delegated to the reference backend whole).

    As the cpu kernel (aligned ``c``, truncation, a block sum exact in fp32:
    :func:`mmaemu.model.block_sum_exact_in_fp32`), with blocks of at most 64 products.
    """
    return (preset.c_mode is CMode.ALIGNED and preset.rounding is Rounding.TRUNCATE
            and block_sum_exact_in_fp32(preset, with_c=True) and preset.block_size <= 64)


def kernel_name(preset: Preset) -> str:
    """The name of the kernel specialisation that runs ``preset`` (as the self-test reports it)."""
    return f"chain_gemm[B={preset.block_size},F={preset.frac_bits}]"


def _tables(device: torch.device) -> dict[torch.dtype, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per FP8 dtype, by code: exact value (fp32; 0 for NaN/Inf), exponent (int8), Inf flag."""
    out = {}
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        d = decode_fp8(torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype))
        zero = (d.value == 0) | d.is_nan | d.is_inf
        exponent = torch.where(zero, torch.full_like(d.exponent, ZERO_EXP), d.exponent).to(torch.int8)
        out[dtype] = (d.value.to(device), exponent.to(device), d.is_inf.to(device))
    return out


#: CUDA's limit on the x dimension of a grid.
MAX_PROGRAMS = 2**31 - 1


def _on_device(device: torch.device) -> Any:
    """A context that makes ``device`` current for a launch (CUDA devices; a no-op otherwise)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


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


def accumulate(
    a: torch.Tensor,
    b: torch.Tensor,
    preset: Preset,
    plan: AccumulationPlan,
    config: TileConfig | None = None,
) -> torch.Tensor:
    """fp32 accumulators ``[M, N]`` of FP8 ``a [M, K]`` and ``b [N, K]`` under ``plan``.

    NaN codes are treated as zero here (the caller applies the NaN rule); the outputs that meet an
    Inf code are recomputed by the reference backend; exact zeros are +0. This function does not run
    the self-test: the dispatcher (:func:`mmaemu.backends.require` and
    :func:`mmaemu.backends.resolve_backend`) checks it before a call uses this backend on a device.

    Args:
        a: FP8 ``[M, K]``.
        b: FP8 ``[N, K]`` (same device).
        preset: the arithmetic; presets the kernel does not express go to the reference backend.
        plan: the accumulation plan for K.
        config: launch tile; default :data:`GPU_CONFIG` (or :data:`INTERPRETER_CONFIG`).

    Returns:
        fp32 ``[M, N]`` on the operands' device; see the module docstring for NaN, Inf and -0.

    Raises:
        BackendUnavailableError: Triton is missing, or the tensors are on a device the kernels do not
            run on.
    """
    usable, reason = available(a.device)
    if not usable:
        raise BackendUnavailableError(f"backend 'triton' is unavailable: {reason}")
    m, n = a.shape[0], b.shape[0]
    if not expresses(preset):
        return reference.accumulate(a, b, preset, plan)
    if m == 0 or n == 0 or plan.k == 0:
        return torch.zeros((m, n), dtype=torch.float32, device=a.device)
    flat = flatten_plan(plan)
    chain_starts, part_starts, order, role = flat.chain_starts, flat.part_chains, flat.order, flat.role
    perm = None if flat.identity else flat.k_order.to(a.device)
    va, ea, a_inf = _decode_k_major(a, perm)
    vb, eb, b_inf = _decode_k_major(b, perm)
    kernels = _kernels()
    cfg = config or (INTERPRETER_CONFIG if interpreting() else GPU_CONFIG)
    meta = torch.tensor([*chain_starts, *part_starts, *order, *role], dtype=torch.int32, device=a.device)
    n_chains, n_parts = len(chain_starts) - 1, len(plan.parts)
    chain_t = meta[: n_chains + 1]
    part_t = meta[n_chains + 1 : n_chains + 2 + n_parts]
    order_t = meta[n_chains + 2 + n_parts : n_chains + 2 + 2 * n_parts]
    role_t = meta[n_chains + 2 + 2 * n_parts :]
    out = torch.empty((m, n), dtype=torch.float32, device=a.device)
    tiles_n = (n + cfg.block_n - 1) // cfg.block_n
    programs = (m + cfg.block_m - 1) // cfg.block_m * tiles_n
    if programs > MAX_PROGRAMS:
        raise ValueError(f"{m} x {n} outputs need {programs} tiles of {cfg.block_m} x {cfg.block_n}, more than "
                         f"CUDA's grid holds ({MAX_PROGRAMS}); use a larger TileConfig")
    # one grid axis (CUDA allows 2**31 - 1 programs there, 65,535 on the others), launched on the
    # operands' device, not the current one
    with _on_device(a.device):
        kernels.chain_gemm_kernel[(programs,)](
            va, ea, vb, eb, out, chain_t, part_t, order_t, role_t, m, n, n_parts, tiles_n,
            BLOCK=preset.block_size, FRAC=preset.frac_bits, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
            num_warps=cfg.num_warps, enable_fp_fusion=False,
        )
    if a_inf or b_inf:  # Inf codes were zeros in the kernel: their outputs follow IEEE
        reference.recompute_infinite(out, a, b, preset, plan)
    return out
