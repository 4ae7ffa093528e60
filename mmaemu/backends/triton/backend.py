"""The Triton backend: the reference GPU's bits from exactly-defined GPU arithmetic, on any CUDA GPU.

The arithmetic is the model's, in one of two exactly-defined formulations (see
:mod:`mmaemu.backends.triton.kernels`): round-toward-zero fmas into accumulators held in one binade
(:data:`Formulation.RZ`, the default for presets :func:`rz_expresses`), or the cpu backend's
fp32/integer formulation with the fp32 -> int32 conversion. One Triton kernel per call: each program owns a ``BLOCK_M x BLOCK_N`` output tile and walks the
accumulation plan (parts in the order they are combined, chains, blocks of B products) with the
accumulator ``c`` in registers; with few outputs and several chains, each (chain, tile) is a program
and the launcher combines the chain results in the plan's order (:func:`choose_launch`). These never
use ``tl.dot``, so the host GPU's own tensor-core rounding never enters, and the bits do not depend
on the GPU model.

The exception is the sm_90 formulation (:func:`native_applies`): on compute capability 9.0, for the
hopper arithmetic, the GPU's own FP8 instruction is the preset's, and
:func:`~mmaemu.backends.triton.kernels.chain_gemm_native_kernel` runs it, once the self-test on that
device has found it equal to the reference backend (else it is switched off there).

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
import enum
import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from ...accumulation import AccumulationPlan, combine_parts, flatten_plan
from ...errors import BackendUnavailableError
from ...formats import FP8_DTYPES, decode_fp8
from ...host import env_flag
from ...model import block_sum_exact_in_fp32
from ...presets import CMode, Preset, Rounding
from .. import reference

__all__ = [
    "NAME",
    "TileConfig",
    "GPU_CONFIG",
    "RZ_GPU_CONFIG",
    "RZ_GENERAL_GPU_CONFIG",
    "INTERPRETER_CONFIG",
    "SMALL_GRID_TILES",
    "PROGRAMS_PER_SM",
    "PARALLEL_WORKSPACE_BYTES",
    "Launch",
    "choose_launch",
    "Formulation",
    "FORMULATION",
    "NATIVE_GPU_CONFIG",
    "NATIVE_CAPABILITY",
    "NATIVE_ENV",
    "native_applies",
    "disable_native",
    "device_str",
    "rz_expresses",
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


class Formulation(enum.Enum):
    """Which kernel computes an expressed preset."""

    #: fp32 products scaled to the block's grid and truncated by the fp32 -> int32 conversion.
    CONVERT = "convert"
    #: round-toward-zero fma into accumulators held in one binade (no conversion; see
    #: :func:`rz_expresses`); under the interpreter, an exact twin of the fma.
    RZ = "rz"


#: The formulation :func:`accumulate` uses (tests switch it to run both).
FORMULATION = Formulation.RZ

#: Default on GPUs: 16 outputs per thread, no reductions across threads; for sm_90 ptxas reports 149
#: registers and no spills. Its speed is unmeasured.
GPU_CONFIG = TileConfig(64, 64, 8)
#: Default on GPUs for the second formulation: 64 outputs per thread, two accumulators each; chosen
#: with tools/gpu_static.py (the fewest SASS instructions per multiply-accumulate without spills on
#: sm_90, docs/data/gpu_static.json). Its speed is unmeasured.
RZ_GPU_CONFIG = TileConfig(128, 64, 4)
#: The same for the general specialisation (several chains or parts: slow accumulation, split-K),
#: which also holds the combination state: the largest tile without spills.
RZ_GENERAL_GPU_CONFIG = TileConfig(128, 32, 4)
#: Default under the interpreter: large tiles mean few programs and few interpreted operations.
INTERPRETER_CONFIG = TileConfig(64, 64, 1)
#: Tiles :func:`choose_launch` picks from when the default tile leaves SMs idle (few outputs), largest
#: first: 32 rows and 64 columns per warp, the layout in which each issues about 7 SASS instructions per
#: multiply-accumulate without spills on every target (tools/gpu_static.py; 16 x 16 on one warp or
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
            plan's order (:func:`mmaemu.accumulation.combine_parts`); else one program per tile walks
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


#: The sm_90 formulation's tile (:func:`native_applies`): two warpgroups, one FP8 wgmma of 64 x 128 x 32
#: each per block, one chain per program; ptxas (Triton 3.9) reports no spills on sm_90
#: (tools/gpu_static.py).
NATIVE_GPU_CONFIG = TileConfig(128, 128, 8)
#: The compute capability whose FP8 tensor-core instruction is the hopper preset's.
NATIVE_CAPABILITY = (9, 0)
#: Environment variable (a boolean, :func:`mmaemu.host.env_flag`; default on): 0, false, no or off keep the
#: sm_90 formulation off (the exactly-defined one runs); any other value than those and 1, true, yes, on raises.
NATIVE_ENV = "MMAEMU_TRITON_NATIVE"
#: Devices (``str(torch.device)``) where the sm_90 formulation failed its self-test or was switched off.
_NATIVE_OFF: set[str] = set()

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


def rz_expresses(preset: Preset) -> bool:
    """Whether the second formulation (:func:`~mmaemu.backends.triton.kernels.chain_gemm_rz_kernel`,
    no fp32 -> int32 conversion) computes ``preset``: as :func:`expresses`, and a block's terms and
    ``c`` (each below 2**(F + 2) units of the block's grid) must sum below 2**22 units, so that its
    accumulators stay in one binade."""
    return expresses(preset) and (preset.block_size + 1) << (preset.frac_bits + 2) <= 1 << 22


def device_str(device: torch.device) -> str:
    """``str(device)``, with a bare ``cuda`` resolved to the current CUDA device (the key of per-device state)."""
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    return str(device)


def native_applies(preset: Preset, device: torch.device) -> bool:
    """Whether a call runs the sm_90 formulation (:func:`~mmaemu.backends.triton.kernels.chain_gemm_native_kernel`):
    the GPU's own FP8 tensor-core instruction, whose bits are the hardware's rather than exactly-defined
    IEEE steps.

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
    if device_str(device) in _NATIVE_OFF:
        return False
    if (preset.block_size, preset.frac_bits, preset.c_mode, preset.rounding) != (32, 13, CMode.ALIGNED,
                                                                                  Rounding.TRUNCATE):
        return False
    return torch.cuda.is_available() and torch.cuda.get_device_capability(device) == NATIVE_CAPABILITY


def disable_native(device: torch.device) -> None:
    """Keep the sm_90 formulation off on ``device`` for this process (its self-test failed there)."""
    _NATIVE_OFF.add(device_str(device))


def kernel_name(preset: Preset, device: torch.device | None = None) -> str:
    """The name of the kernel specialisation that runs ``preset`` (on ``device``; as the self-test reports it)."""
    if device is not None and native_applies(preset, device):
        kernel = "chain_gemm_native"
    else:
        kernel = "chain_gemm_rz" if FORMULATION is Formulation.RZ and rz_expresses(preset) else "chain_gemm"
    return f"{kernel}[B={preset.block_size},F={preset.frac_bits}]"


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
    launch: Launch | None = None,
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
        launch: the second formulation's launch (tile and whether chains run in parallel); default
            :func:`choose_launch` for the device (under the interpreter: :data:`INTERPRETER_CONFIG`,
            one program per tile). Overrides ``config``.

    Returns:
        fp32 ``[M, N]`` on the operands' device; see the module docstring for NaN, Inf and -0.

    Raises:
        BackendUnavailableError: Triton is missing, or the tensors are on a device the kernels do not
            run on.
    """
    if launch is not None and not isinstance(launch, Launch):
        raise TypeError(f"launch must be a Launch or None, got {type(launch).__name__}")
    usable, reason = available(a.device)
    if not usable:
        raise BackendUnavailableError(f"backend 'triton' is unavailable: {reason}")
    if a.dtype not in FP8_DTYPES:  # the kernels decode FP8: the zoo formats run on the reference backend
        return reference.accumulate(a, b, preset, plan)
    m, n = a.shape[0], b.shape[0]
    if not expresses(preset):
        return reference.accumulate(a, b, preset, plan)
    if m == 0 or n == 0 or plan.k == 0:
        return torch.zeros((m, n), dtype=torch.float32, device=a.device)
    flat = flatten_plan(plan)
    if launch is None and config is None and native_applies(preset, a.device):
        return _accumulate_native(a, b, preset, plan, flat)
    if FORMULATION is Formulation.RZ and rz_expresses(preset):
        if launch is None:
            if config is not None:
                launch = Launch(config, False)
            elif interpreting():
                launch = Launch(INTERPRETER_CONFIG, False)
            else:
                sms = torch.cuda.get_device_properties(a.device).multi_processor_count
                launch = choose_launch(m, n, len(flat.chain_starts) - 1, sms)
        return _accumulate_rz(a, b, preset, plan, flat, launch)
    cfg = config or (INTERPRETER_CONFIG if interpreting() else GPU_CONFIG)
    chain_starts, part_starts, order, role = flat.chain_starts, flat.part_chains, flat.order, flat.role
    perm = None if flat.identity else flat.k_order.to(a.device)
    va, ea, a_inf = _decode_k_major(a, perm)
    vb, eb, b_inf = _decode_k_major(b, perm)
    kernels = _kernels()
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


def _padded_layout(chain_starts: list[int], block: int) -> tuple[list[int], torch.Tensor]:
    """Each chain padded to a multiple of ``block``: the new chain starts, and for every padded position
    the position in the plan's k order it holds (-1 for padding), int64."""
    starts, pieces = [0], []
    for lo, hi in zip(chain_starts[:-1], chain_starts[1:]):
        padded = -(-(hi - lo) // block) * block
        pieces.append(torch.arange(lo, hi, dtype=torch.int64))
        pieces.append(torch.full((padded - (hi - lo),), -1, dtype=torch.int64))
        starts.append(starts[-1] + padded)
    return starts, torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.int64)


def _padded_codes(x: torch.Tensor, k_index: torch.Tensor, rows: int) -> torch.Tensor:
    """``[r, K]`` FP8 -> int32 codes ``[rows, KP]`` in the padded plan order (``k_index``, -1 for padding);
    padding and the rows past ``r`` hold 256, the tables' padding entry."""
    codes = x.view(torch.uint8).to(torch.int32)
    idx = torch.full((rows, k_index.numel()), 256, dtype=torch.int32, device=x.device)
    if codes.shape[0]:
        gathered = codes.index_select(1, k_index.clamp(min=0))
        idx[: codes.shape[0]] = torch.where((k_index >= 0)[None, :], gathered, torch.full_like(gathered, 256))
    return idx


def _padded_k_index(flat: Any, block: int, device: torch.device) -> tuple[list[int], torch.Tensor]:
    """The padded layout of :func:`_padded_layout` in k indices of the operands (-1: padding), on ``device``."""
    starts, index = _padded_layout(list(flat.chain_starts), block)
    if not flat.identity:
        k_order = flat.k_order.to(torch.int64)
        index = torch.where(index >= 0, k_order[index.clamp(min=0)], index)
    return starts, index.to(device)


def _decode_rz(x: torch.Tensor, k_index: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """``[r, K]`` FP8 -> k-major ``[KP, rows]`` arrays (positive part, negative part, exponent) in the
    padded plan order, rows padded to ``rows`` with zeros; and whether an Inf code occurs."""
    pos_t, neg_t, exp_t, inf_t = _rz_tables(x.device)[x.dtype]
    idx = _padded_codes(x, k_index, rows).t().contiguous().flatten()
    shape = (k_index.numel(), rows)
    has_inf = bool(inf_t.index_select(0, idx).any())
    return (pos_t.index_select(0, idx).view(shape), neg_t.index_select(0, idx).view(shape),
            exp_t.index_select(0, idx).view(shape), has_inf)


def _accumulate_rz(a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan, flat: Any,
                   launch: Launch) -> torch.Tensor:
    """:func:`accumulate` with the second formulation (the caller checked :func:`rz_expresses`)."""
    cfg = launch.tile
    m, n = a.shape[0], b.shape[0]
    n_parts = len(plan.parts)
    starts, k_index = _padded_k_index(flat, preset.block_size, a.device)
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
        if a_inf or b_inf:
            reference.recompute_infinite(out, a, b, preset, plan)
        return out
    out = torch.empty((m, n), dtype=torch.float32, device=a.device)
    if programs > MAX_PROGRAMS:
        raise ValueError(f"{m} x {n} outputs need {programs} tiles of {cfg.block_m} x {cfg.block_n}, more than "
                         f"CUDA's grid holds ({MAX_PROGRAMS}); use a larger TileConfig")
    with _on_device(a.device):
        _kernels().chain_gemm_rz_kernel[(programs,)](
            ap, an, ea, bp, bn, eb, out, chain_t, part_t, order_d, role_t, m, n, mp, np_, n_parts, tiles_n,
            BLOCK=preset.block_size, FRAC=preset.frac_bits, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
            NATIVE_RZ=not interpreting(), ONE_CHAIN=n_parts == 1 and n_chains == 1, num_warps=cfg.num_warps,
            enable_fp_fusion=False,
        )
    if a_inf or b_inf:  # Inf codes were zeros in the kernel: their outputs follow IEEE
        reference.recompute_infinite(out, a, b, preset, plan)
    return out


def _parallel_chains(ap: torch.Tensor, an: torch.Tensor, ea: torch.Tensor, bp: torch.Tensor, bn: torch.Tensor,
                     eb: torch.Tensor, chain_t: torch.Tensor, programs: int, preset: Preset, plan: AccumulationPlan,
                     flat: Any, launch: Launch, mp: int, np_: int) -> torch.Tensor:
    """Every chain of every tile as a program of its own, then the kernel's additions in torch: per part
    its chains' results from +0 in K order, then the parts in the plan's order (fp32, round to nearest
    even, on the operands' device). Returns ``[MP, NP]``."""
    cfg = launch.tile
    n_chains = len(flat.chain_starts) - 1
    if programs > MAX_PROGRAMS:
        raise ValueError(f"{n_chains} chains of {mp} x {np_} outputs need {programs} programs, more than CUDA's "
                         f"grid holds ({MAX_PROGRAMS}); launch with parallel_chains=False")
    chains = torch.empty((n_chains, mp, np_), dtype=torch.float32, device=ap.device)
    tiles_n = np_ // cfg.block_n
    with _on_device(ap.device):
        _kernels().chains_rz_kernel[(programs,)](
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


_NATIVE_TABLE_CACHE: dict[torch.device, dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]]] = {}


def _native_codes(x: torch.Tensor, k_index: torch.Tensor, rows: int) -> tuple[torch.Tensor, bool]:
    """``[r, K]`` FP8 -> ``[rows, KP]`` FP8 codes in the padded plan order (padding, NaN and Inf codes as
    +0, rows padded with +0); and whether an Inf code occurs."""
    tables = _NATIVE_TABLE_CACHE.get(x.device)
    if tables is None:
        tables = {}
        for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            d = decode_fp8(torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype))
            special = d.is_nan | d.is_inf
            code = torch.where(special, torch.zeros(256, dtype=torch.int32), torch.arange(256, dtype=torch.int32))
            tables[dtype] = (torch.cat([code, torch.zeros(1, dtype=torch.int32)]).to(torch.uint8).to(x.device),
                             torch.cat([d.is_inf, torch.tensor([False])]).to(x.device))
        _NATIVE_TABLE_CACHE[x.device] = tables
    code_t, inf_t = tables[x.dtype]
    idx = _padded_codes(x, k_index, rows)
    flat_idx = idx.flatten()
    has_inf = bool(inf_t.index_select(0, flat_idx).any())
    return code_t.index_select(0, flat_idx).view(idx.shape).view(x.dtype), has_inf


def _accumulate_native(a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan,
                       flat: Any) -> torch.Tensor:
    """:func:`accumulate` with the sm_90 formulation (the caller checked :func:`native_applies`)."""
    cfg = NATIVE_GPU_CONFIG
    m, n = a.shape[0], b.shape[0]
    n_parts = len(plan.parts)
    starts, k_index = _padded_k_index(flat, preset.block_size, a.device)
    kp = k_index.numel()
    if cfg.block_m * kp >= 2**31 or cfg.block_n * kp >= 2**31:
        raise ValueError(f"K = {plan.k} is too long for the sm_90 formulation's 32-bit offsets inside a tile; "
                         f"set {NATIVE_ENV}=0")
    mp = -(-m // cfg.block_m) * cfg.block_m
    np_ = -(-n // cfg.block_n) * cfg.block_n
    a_codes, a_inf = _native_codes(a, k_index, mp)
    b_codes, b_inf = _native_codes(b, k_index, np_)
    chain_t = torch.tensor(starts, dtype=torch.int32, device=a.device)
    n_chains = len(starts) - 1
    tiles_n = np_ // cfg.block_n
    tiles = mp // cfg.block_m * tiles_n
    kernel = _kernels().chain_gemm_native_kernel

    def run(first: int, count: int) -> torch.Tensor:
        """The results of chains first .. first + count - 1, ``[count, M, N]``."""
        res = torch.empty((count, m, n), dtype=torch.float32, device=a.device)
        if tiles * count > MAX_PROGRAMS:
            raise ValueError(f"{m} x {n} outputs need {tiles * count} programs, more than CUDA's grid holds "
                             f"({MAX_PROGRAMS}); set {NATIVE_ENV}=0")
        with _on_device(a.device):
            kernel[(tiles * count,)](a_codes, b_codes, res, chain_t, first, m, n, kp, tiles, tiles_n,
                                     DOT_K=preset.block_size, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                                     num_warps=cfg.num_warps, enable_fp_fusion=False)
        return res

    if n_parts == 1 and n_chains == 1:
        out = run(0, 1)[0]
    else:  # chains in groups that fit the workspace; per part its chains from +0 in K order; then the parts
        group = max(1, PARALLEL_WORKSPACE_BYTES // max(1, 4 * m * n))
        partials = []
        for p in range(n_parts):
            total = torch.zeros((m, n), dtype=torch.float32, device=a.device)
            lo, hi = flat.part_chains[p], flat.part_chains[p + 1]
            for first in range(lo, hi, group):
                res = run(first, min(group, hi - first))
                for r in res:
                    total = total + r
            partials.append(total)
        out = combine_parts(partials, plan.split.scheme)
    if a_inf or b_inf:  # Inf codes were zeros in the kernel: their outputs follow IEEE
        reference.recompute_infinite(out, a, b, preset, plan)
    return out
