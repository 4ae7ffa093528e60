"""Tensor-core presets: the arithmetic of one instruction, named.

A :class:`Preset` says how many products one block adds (``block_size``), how many fraction bits
survive the alignment (``frac_bits``), how the incoming accumulator takes part (:class:`CMode`) and
how the normalised sum is rounded (:class:`Rounding`). :mod:`mmaemu.model` computes with them; this
module only names them and keeps the registry (:func:`get_preset`, :func:`presets`).
"""

from __future__ import annotations

import enum
import warnings
from dataclasses import dataclass

import torch

from .errors import ExperimentalPresetWarning, UnknownNameError, UnsupportedFeatureError
from .formats import FP8_DTYPES, WideFormat

__all__ = [
    "Maturity",
    "CMode",
    "Rounding",
    "Preset",
    "HOPPER",
    "ADA",
    "B200_MMA_SYNC",
    "presets",
    "get_preset",
    "Architecture",
    "ZOO",
    "zoo_presets",
    "instruction_preset",
]

class Maturity(enum.Enum):
    """How far hardware recordings back a preset or profile (``str()`` gives the value)."""

    def __str__(self) -> str:
        return str(self.value)

    VALIDATED = "validated"
    EXPERIMENTAL = "experimental"


class CMode(enum.Enum):
    """How the incoming accumulator ``c`` enters a block."""

    #: c's exponent enters the block maximum and c is truncated with the products (hopper, ada).
    ALIGNED = "aligned"
    #: the products are summed from zero, then c is added by one fp32 round-to-nearest-even
    #: addition (b200_mma_sync; the toolbox's B200 round-to-nearest model).
    ROUNDED_ADD = "rounded-add"


class Rounding(enum.Enum):
    """How a block's exact sum is normalised to fp32."""

    #: toward zero, to ``frac_bits`` fraction bits (hopper, ada).
    TRUNCATE = "truncate"
    #: to nearest even, to fp32's 23 fraction bits (b200_mma_sync).
    NEAREST_EVEN = "nearest-even"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Preset:
    """The arithmetic of one tensor-core block FMA.

    Attributes:
        name: registry name.
        block_size: products added per block (B).
        frac_bits: fraction bits kept relative to the block's largest exponent (F).
        c_mode: how the accumulator enters a block (:class:`CMode`).
        rounding: how the block sum is normalised (:class:`Rounding`).
        maturity: validated on hardware GEMMs, or experimental (warns when used).
        source: the evidence behind the numbers.

    Example:
        >>> from mmaemu.model import Preset
        >>> Preset("wide", block_size=64, frac_bits=20)  # doctest: +ELLIPSIS
        Preset(name='wide', block_size=64, frac_bits=20, ...)
    """

    name: str
    block_size: int
    frac_bits: int
    c_mode: CMode = CMode.ALIGNED
    rounding: Rounding = Rounding.TRUNCATE
    maturity: Maturity = Maturity.EXPERIMENTAL
    source: str = "user-defined"

    def __post_init__(self) -> None:
        if not (_is_int(self.block_size) and 1 <= self.block_size <= 1024):
            raise ValueError(f"block_size must be an int in [1, 1024], got {self.block_size!r}")
        if not (_is_int(self.frac_bits) and 1 <= self.frac_bits <= 40):
            raise ValueError(f"frac_bits must be an int in [1, 40], got {self.frac_bits!r}")
        if not isinstance(self.maturity, Maturity):
            raise TypeError("maturity must be a Maturity")
        if not isinstance(self.c_mode, CMode) or not isinstance(self.rounding, Rounding):
            raise TypeError("c_mode must be a CMode and rounding a Rounding")


HOPPER = Preset(
    "hopper",
    block_size=32,
    frac_bits=13,
    maturity=Maturity.VALIDATED,
    source="H100 wgmma vectors (hw-vectors/h100_e4m3.npz, 5,000 of 5,000); seeds 002 (H100 PCIe cuBLAS)",
)
ADA = Preset(
    "ada",
    block_size=16,
    frac_bits=13,
    maturity=Maturity.VALIDATED,
    source="RTX 1000 Ada mma.sync vectors (hw-vectors/ada_e4m3.npz, 5,000 of 5,000); RTX 4060 recordings",
)
# [Note: b200_mma_sync] Fitted to the B200 mma.sync vectors (5,000 of 5,000), following the
# structure of the MATLAB tensor-core toolbox's B200 round-to-nearest model: the products of a
# 32-element instruction are aligned and truncated (25 fraction bits), their sum is rounded to
# nearest even, and c is added last by an fp32 round-to-nearest-even addition. The vectors pin
# down only the last step (682 of them are exact ties; truncation fits 3,151): their products
# never span enough exponents for F or the block grouping to matter, so those are unverified.
# The common B = 32, F = 25, c-aligned truncating model fits 3,207.
B200_MMA_SYNC = Preset(
    "b200_mma_sync",
    block_size=32,
    frac_bits=25,
    c_mode=CMode.ROUNDED_ADD,
    rounding=Rounding.NEAREST_EVEN,
    maturity=Maturity.EXPERIMENTAL,
    source="B200 mma.sync vectors (hw-vectors/b200_e4m3.npz, 5,000 of 5,000); MATLAB tensor-core "
    "toolbox B200 model; not B200 cuBLAS, not sm_120",
)

_PRESETS = {p.name: p for p in (HOPPER, ADA, B200_MMA_SYNC)}
_ALIASES = {"blackwell": "b200_mma_sync", "b200": "b200_mma_sync"}
_NOT_MODELLED = {
    "volta": "volta (V100, sm_70) has no FP8 tensor cores: an FP8 GEMM cannot run there. For fp16 operands pass "
    "float16 tensors to mmaemu.model.dot or mmaemu.accumulate with preset='volta'",
    "ampere": "ampere (A100, sm_80; RTX 30-series, sm_86) has no FP8 tensor cores: an FP8 GEMM cannot run there. For "
    "fp16, bf16 or tf32 operands pass float16, bfloat16 or float32 (tf32) tensors to mmaemu.model.dot or "
    "mmaemu.accumulate with preset='ampere'",
    "sm_120": "sm_120 (RTX 50-series, RTX PRO 6000 Blackwell) is not modelled: mmaemu ships no "
    "preset for it, and b200_mma_sync is not such a model",
    "rtx_blackwell": "sm_120 (RTX 50-series Blackwell) is not modelled: mmaemu ships no preset "
    "for it, and b200_mma_sync is not such a model",
}


def presets() -> dict[str, Preset]:
    """The shipped FP8 presets by name (aliases excluded); :func:`zoo_presets` has the other formats."""
    return dict(_PRESETS)


class Architecture(enum.Enum):
    """The NVIDIA tensor-core generations of the zoo, by the preset name that selects them."""

    VOLTA = "volta"
    AMPERE = "ampere"
    ADA = "ada"
    HOPPER = "hopper"
    B200 = "b200"


def _zoo(arch: Architecture, fmt: WideFormat, block: int, frac: int, evidence: str) -> Preset:
    return Preset(f"{arch.value}-{fmt.short_name}", block_size=block, frac_bits=frac,
                  maturity=Maturity.VALIDATED, source=evidence)


# [Note: zoo presets] One structure fits all 65,000 recorded dot products (hw-vectors/zoo/, WMMA with
# c loaded; tools/zoo_fit.py reruns the fit): the block's E is the largest unnormalised product
# exponent e(a) + e(b) (and c's, floored at -126), every term (c included) is truncated toward zero to
# a multiple of 2**(E - F), and the exact sum is truncated to fp32 (or rounded to nearest even for
# an fp16 accumulator). F = 23 + the extra alignment bits: V100 23, A100 and Ada 24, H100 and B200
# 25; each neighbouring F fails 158 to 2,471 vectors of each file. The block sizes are the
# published ones (Khattak and Mikaitis, arXiv:2512.07004); the vectors pin only B >= K of the file
# (K = 4, 8 or 16), so B = 16 for ampere/ada fp16 and bf16, or B = 4 for hopper/b200 tf32, would fit
# them too; a smaller B than K fails hundreds of vectors.
_ZOO_F = {Architecture.VOLTA: 23, Architecture.AMPERE: 24, Architecture.ADA: 24, Architecture.HOPPER: 25,
          Architecture.B200: 25}
_ZOO_B = {
    Architecture.VOLTA: {WideFormat.FP16: 4},
    Architecture.AMPERE: {WideFormat.FP16: 8, WideFormat.BF16: 8, WideFormat.TF32: 4},
    Architecture.ADA: {WideFormat.FP16: 8, WideFormat.BF16: 8, WideFormat.TF32: 4},
    Architecture.HOPPER: {WideFormat.FP16: 16, WideFormat.BF16: 16, WideFormat.TF32: 8},
    Architecture.B200: {WideFormat.FP16: 16, WideFormat.BF16: 16, WideFormat.TF32: 8},
}
_ZOO_GPU = {Architecture.VOLTA: "v100", Architecture.AMPERE: "a100", Architecture.ADA: "ada",
            Architecture.HOPPER: "h100", Architecture.B200: "b200"}
#: The instruction presets of the zoo, by (architecture, input format).
ZOO: dict[tuple[Architecture, WideFormat], Preset] = {
    (arch, fmt): _zoo(arch, fmt, block, _ZOO_F[arch],
                      f"hw-vectors/zoo/{_ZOO_GPU[arch]}_{fmt.short_name}.npz (5,000 of 5,000); block size "
                      "published (arXiv:2512.07004), pinned by the vectors only up to the recorded K")
    for arch, blocks in _ZOO_B.items() for fmt, block in blocks.items()
}


_ZOO_BY_NAME: dict[str, tuple[Architecture, WideFormat]] = {p.name: key for key, p in ZOO.items()}


def _shipped_name(preset: Preset) -> str | None:
    """The registry name of a shipped preset (FP8 or zoo) equal to ``preset``, else None (a custom one)."""
    for shipped in (*_PRESETS.values(), *ZOO.values()):
        if preset == shipped:
            return shipped.name
    return None


def zoo_presets() -> dict[tuple[str, str], Preset]:
    """The zoo's instruction presets by (architecture name, format name), e.g. ``("hopper", "bf16")``."""
    return {(arch.value, fmt.short_name): p for (arch, fmt), p in ZOO.items()}


def instruction_preset(preset: str | Preset, fmt: WideFormat | torch.dtype, *, warn: bool = True) -> Preset:
    """The instruction arithmetic that ``preset`` names for operands of format ``fmt``.

    For FP8 dtypes this is :func:`get_preset` (``"volta"`` and ``"ampere"`` raise: no FP8 tensor cores;
    ``"b200"`` is the experimental ``b200_mma_sync``). For fp16, bf16 and tf32 an architecture name
    (``"volta"``, ``"ampere"``, ``"ada"``, ``"hopper"``, ``"b200"``) or a :data:`ZOO` entry's own name
    (``"hopper-fp16"``) selects that entry. A shipped preset object behaves exactly as its name
    (``HOPPER`` as ``"hopper"``); a custom :class:`Preset` applies to any format as it is.

    Raises:
        UnsupportedFeatureError: the architecture has no tensor-core instruction for the format
            (volta: fp16 only), the name is an FP8-only preset (``b200_mma_sync``, ``blackwell``), or a
            zoo preset of another format.
        KeyError: an unknown name; the message lists the known ones.
    """
    if isinstance(fmt, torch.dtype):
        if fmt in FP8_DTYPES:
            return get_preset(preset, warn=warn)
        matches = [f for f in WideFormat if f.dtype == fmt]
        if not matches:
            raise ValueError(f"no tensor-core input format is held in {fmt}")
        fmt = matches[0]
    if isinstance(preset, Preset):
        shipped = _shipped_name(preset)
        if shipped is None:
            return preset  # a custom preset applies to any format as it is
        preset = shipped  # a shipped preset object behaves as its name
    if not isinstance(preset, str):
        raise TypeError(f"preset must be a name or a Preset, got {type(preset).__name__}")
    if preset in _ZOO_BY_NAME:
        zoo_fmt = _ZOO_BY_NAME[preset][1]
        if zoo_fmt is not fmt:
            raise UnsupportedFeatureError(f"preset {preset!r} is the instruction for {zoo_fmt.short_name} operands, "
                                          f"not {fmt.short_name}")
        return ZOO[_ZOO_BY_NAME[preset]]
    try:
        arch = Architecture(preset)
    except ValueError:
        archs = ", ".join(a.value for a in Architecture)
        if preset in _PRESETS or preset in _ALIASES or preset in _NOT_MODELLED:
            raise UnsupportedFeatureError(
                f"preset {preset!r} describes FP8 inputs only; for {fmt.short_name} operands name an architecture: "
                f"{archs}"
            ) from None
        raise UnknownNameError(f"unknown preset {preset!r}; for {fmt.short_name} operands the presets are: {archs}") from None
    found = ZOO.get((arch, fmt))
    if found is None:
        has = ", ".join(f.short_name for (a, f) in ZOO if a is arch)
        raise UnsupportedFeatureError(
            f"{arch.value} tensor cores take {has} inputs, not {fmt.short_name} (no such instruction to model)"
        )
    return found


def get_preset(preset: str | Preset, *, warn: bool = True) -> Preset:
    """Resolve an FP8 preset name (or a :class:`Preset`: a shipped one behaves as its name, a custom one
    passes through).

    Experimental presets, and the alias ``blackwell``, emit :class:`ExperimentalPresetWarning`
    when ``warn`` is true.

    Raises:
        UnsupportedFeatureError: for ``sm_120`` and ``rtx_blackwell`` (not modelled), and for the zoo's
            presets (fp16, bf16 and tf32 instructions, by name or object).
        KeyError: for an unknown name; the message lists the known ones.
    """
    if isinstance(preset, Preset):
        shipped = _shipped_name(preset)
        if shipped is None:
            return preset
        preset = shipped  # a shipped preset object behaves as its name
    if not isinstance(preset, str):
        raise TypeError(f"preset must be a name or a Preset, got {type(preset).__name__}")
    if preset in _ZOO_BY_NAME:
        raise UnsupportedFeatureError(
            f"preset {preset!r} is the instruction for {_ZOO_BY_NAME[preset][1].short_name} operands, not FP8; for FP8 "
            f"operands the presets are: {', '.join(sorted(_PRESETS))}")
    if preset in _NOT_MODELLED:
        raise UnsupportedFeatureError(_NOT_MODELLED[preset])
    if preset in _ALIASES:
        target = _ALIASES[preset]
        if warn:
            warnings.warn(
                f"preset {preset!r} is an alias of the experimental {target!r}: it fits the B200 "
                "mma.sync vectors only, not B200 cuBLAS and not RTX 50-series GPUs",
                ExperimentalPresetWarning,
                stacklevel=3,
            )
        return _PRESETS[target]
    try:
        found = _PRESETS[preset]
    except KeyError:
        known = ", ".join(sorted([*_PRESETS, *_ALIASES]))
        raise UnknownNameError(f"unknown preset {preset!r}; known presets: {known}") from None
    if warn and found.maturity is Maturity.EXPERIMENTAL:
        _warn_experimental(found.name)
    return found


def _warn_experimental(name: str) -> None:
    warnings.warn(
        f"preset {name!r} is experimental: it is not validated on hardware GEMMs",
        ExperimentalPresetWarning,
        stacklevel=4,
    )
