"""What every Triton formulation's launcher shares: tiles, the lazy import of the kernels, the device.

The kernel modules (``_kernels_convert``, ``_kernels_rz``, ``_kernels_native``) are imported on first use
(:func:`kernels`): Triton decides at decoration time whether a kernel is compiled for the GPU or run by
its CPU interpreter, so ``TRITON_INTERPRET=1`` must be set before the first use in a process, and a
machine without Triton imports mmaemu without them.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import importlib.util
import itertools
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from ..._accumulation import FlatPlan
from ...errors import BackendUnavailableError
from ...formats import FP8_DTYPES
from ...model import block_sum_exact_in_fp32
from ...presets import CMode, Preset, Rounding
from .._protocol import device_key as device_str  # the key of per-device state, the dispatcher's too

__all__ = [
    "INTERPRETER_CONFIG",
    "MAX_PROGRAMS",
    "MAX_TILE",
    "MAX_WARPS",
    "ZERO_EXP",
    "Formulation",
    "KernelModule",
    "TileConfig",
    "available",
    "device_str",
    "expresses",
    "import_error",
    "interpreting",
    "kernels",
    "on_device",
    "padded_codes",
    "padded_k_index",
]

#: Largest tile side: a power of two Triton can hold (registers bound it far earlier).
MAX_TILE = 1024
#: Largest warp count per program: CUDA's 1,024 threads per block.
MAX_WARPS = 32
#: CUDA's limit on the x dimension of a grid.
MAX_PROGRAMS = 2**31 - 1
#: Exponent of zero, NaN and Inf codes and of padding (must equal _kernels_common.ZERO_EXP).
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

    @property
    def text(self) -> str:
        """``128x64/4w``: the tile and its warps, as the self-test and the static analysis name it."""
        return f"{self.block_m}x{self.block_n}/{self.num_warps}w"


class Formulation(enum.Enum):
    """Which kernel computes an expressed preset (one launcher module each)."""

    #: fp32 products scaled to the block's grid and truncated by the fp32 -> int32 conversion
    #: (:mod:`~mmaemu.backends._triton._convert`).
    CONVERT = "convert"
    #: round-toward-zero fma into accumulators held in one binade, no conversion
    #: (:mod:`~mmaemu.backends._triton._rz`); under the interpreter, an exact twin of the fma.
    RZ = "rz"
    #: the sm_90 GPU's own FP8 tensor-core instruction (:mod:`~mmaemu.backends._triton._native`).
    NATIVE = "native"


class KernelModule(enum.Enum):
    """The lazily imported kernel modules."""

    COMMON = "_kernels_common"
    CONVERT = "_kernels_convert"
    RZ = "_kernels_rz"
    NATIVE = "_kernels_native"


_TRITON_ERROR: str | None = None
_LOADED: dict[KernelModule, ModuleType] = {}


def import_error() -> str | None:
    """None when ``triton`` imports, else why not (cached)."""
    global _TRITON_ERROR
    if _TRITON_ERROR is None and not _LOADED:
        if importlib.util.find_spec("triton") is None:
            _TRITON_ERROR = "triton is not installed (pip install triton)"
        else:
            try:
                importlib.import_module("triton")
            except Exception as exc:  # noqa: BLE001 - any import failure makes the backend unavailable
                _TRITON_ERROR = f"triton is not importable: {exc}"
    return _TRITON_ERROR


def kernels(module: KernelModule) -> ModuleType:
    """A kernel module, imported on first use (Triton reads TRITON_INTERPRET then)."""
    loaded = _LOADED.get(module)
    if loaded is None:
        error = import_error()
        if error is not None:
            raise BackendUnavailableError(f"backend 'triton' is unavailable: {error}")
        loaded = _LOADED[module] = importlib.import_module(f".{module.value}", __package__)
    return loaded


def interpreting() -> bool:
    """True when the kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1`` at first use)."""
    if import_error() is not None:
        return False
    return type(kernels(KernelModule.COMMON).exponent_of).__name__ == "InterpretedFunction"


def available(device: torch.device | None = None) -> tuple[bool, str]:
    """(usable, reason): whether Triton imports and can run the kernels on ``device``.

    This does not run the self-test (see :func:`mmaemu.backends._triton._selftest.selftest`).
    """
    error = import_error()
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


def on_device(device: torch.device) -> Any:
    """A context that makes ``device`` current for a launch (CUDA devices; a no-op otherwise)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _padded_layout(chain_starts: list[int], block: int) -> tuple[list[int], torch.Tensor]:
    """Each chain padded to a multiple of ``block``: the new chain starts, and for every padded position
    the position in the plan's k order it holds (-1 for padding), int64."""
    starts, pieces = [0], []
    for lo, hi in itertools.pairwise(chain_starts):
        padded = -(-(hi - lo) // block) * block
        pieces.append(torch.arange(lo, hi, dtype=torch.int64))
        pieces.append(torch.full((padded - (hi - lo),), -1, dtype=torch.int64))
        starts.append(starts[-1] + padded)
    return starts, torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.int64)


def padded_k_index(flat: FlatPlan, block: int, device: torch.device) -> tuple[list[int], torch.Tensor]:
    """Every chain of ``flat`` padded to a multiple of ``block``: the padded chain starts, and for every
    padded position the k index of the operands it holds (-1: padding), on ``device``."""
    starts, index = _padded_layout(list(flat.chain_starts), block)
    if not flat.identity:
        k_order = flat.k_order.to(torch.int64)
        index = torch.where(index >= 0, k_order[index.clamp(min=0)], index)
    return starts, index.to(device)


def padded_codes(x: torch.Tensor, k_index: torch.Tensor, rows: int) -> torch.Tensor:
    """``[r, K]`` FP8 -> int32 codes ``[rows, KP]`` in the padded plan order (``k_index``, -1 for padding);
    padding and the rows past ``r`` hold 256, the decoding tables' padding entry."""
    codes = x.view(torch.uint8).to(torch.int32)
    idx = torch.full((rows, k_index.numel()), 256, dtype=torch.int32, device=x.device)
    if codes.shape[0]:
        gathered = codes.index_select(1, k_index.clamp(min=0))
        idx[: codes.shape[0]] = torch.where((k_index >= 0)[None, :], gathered, torch.full_like(gathered, 256))
    return idx


#: The tile under the interpreter (every formulation): large tiles mean few programs and few interpreted
#: operations.
INTERPRETER_CONFIG = TileConfig(64, 64, 1)


def expresses(preset: Preset, dtypes: tuple[torch.dtype, ...] = ()) -> bool:
    """Whether the kernels compute ``preset`` for operands of ``dtypes`` (empty: FP8); the dispatcher
    sends the others to the reference backend whole.

    FP8 operands only (the kernels decode FP8 codes; the zoo formats are the reference backend's). As
    the cpu kernel (aligned ``c``, truncation, a block sum exact in fp32:
    :func:`mmaemu.model.block_sum_exact_in_fp32`), with blocks of at most 64 products.
    """
    return (all(d in FP8_DTYPES for d in dtypes) and preset.c_mode is CMode.ALIGNED and preset.rounding is Rounding.TRUNCATE
            and block_sum_exact_in_fp32(preset, with_c=True) and preset.block_size <= 64)
