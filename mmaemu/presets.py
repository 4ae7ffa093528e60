"""Tensor-core presets: the arithmetic of one instruction, named.

A :class:`Preset` says how many products one block adds (``block_size``), how many fraction bits
survive the alignment (``frac_bits``), how the incoming accumulator takes part (:class:`CMode`),
how the normalised sum is rounded (:class:`Rounding`), how FP8 operands meet an fp16 accumulator
(:class:`HalfAccumulation`) and which accumulators no recording decides (``unmodelled``: refused).
:mod:`mmaemu.model` computes with them; this module only names them and keeps the registry
(:func:`get_preset`, :func:`presets`).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

import torch

from ._enums import TextEnum
from .errors import ExperimentalPresetWarning, UnknownNameError, UnsupportedFeatureError, warn_caller
from .formats import FP8_DTYPES, WideFormat

__all__ = ["Preset", "Maturity", "HOPPER", "ADA", "HOPPER_MMA_SYNC", "B200_MMA_SYNC", "SM120", "get_preset",
           "instruction_preset", "presets", "zoo_presets"]

class Maturity(TextEnum):
    """How far hardware recordings back a preset or profile (``str()`` gives the value)."""

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


class Accumulator(enum.Enum):
    """The accumulator format of an instruction call: the dtype of ``c`` and of the result."""

    FP32 = "fp32"
    FP16 = "fp16"


class HalfAccumulation(enum.Enum):
    """How FP8 operands meet an fp16 accumulator (``c`` a float16 tensor).

    fp16, bf16 and tf32 operands ignore it: their fp16 accumulator is always the preset's own blocks.
    """

    #: the preset's own blocks (c entering as its c mode says), each block's exact sum rounded once to
    #: nearest even fp16 (ada: the RTX 1000 Ada's mma.sync, 5,000 of 5,000 vectors).
    BLOCKS = "blocks"
    #: the sm_90 / sm_100 rewrite of the 32-product FP8 instruction into two fp16 HMMA steps: the FP8
    #: operands converted exactly to fp16; from +0, a 16-product step over the positions k with
    #: k mod 4 in {0, 1}, then one over k mod 4 in {2, 3}, each aligning its accumulator with its
    #: products (F = ``frac_bits``) and rounding the sum once to nearest even fp16; c added last by
    #: one fp16 round-to-nearest-even addition (hopper_mma_sync, b200_mma_sync: 5,000 of 5,000 vectors
    #: each). Requires ``block_size`` 32.
    HMMA_REWRITE = "hmma-rewrite"


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
        fp16_accumulation: how FP8 operands meet an fp16 accumulator (:class:`HalfAccumulation`).
        unmodelled: the accumulators no recording decides for this instruction: asking for one
            raises :class:`~mmaemu.errors.UnsupportedFeatureError` (nothing is approximated).

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
    fp16_accumulation: HalfAccumulation = HalfAccumulation.BLOCKS
    unmodelled: frozenset[Accumulator] = frozenset()

    def __post_init__(self) -> None:
        if not (_is_int(self.block_size) and 1 <= self.block_size <= 1024):
            raise ValueError(f"block_size must be an int in [1, 1024], got {self.block_size!r}")
        if not (_is_int(self.frac_bits) and 1 <= self.frac_bits <= 40):
            raise ValueError(f"frac_bits must be an int in [1, 40], got {self.frac_bits!r}")
        if not isinstance(self.maturity, Maturity):
            raise TypeError("maturity must be a Maturity")
        if not isinstance(self.c_mode, CMode) or not isinstance(self.rounding, Rounding):
            raise TypeError("c_mode must be a CMode and rounding a Rounding")
        if not isinstance(self.fp16_accumulation, HalfAccumulation):
            raise TypeError("fp16_accumulation must be a HalfAccumulation")
        if not isinstance(self.unmodelled, frozenset) or not all(isinstance(x, Accumulator) for x in self.unmodelled):
            raise TypeError("unmodelled must be a frozenset of Accumulator")
        if self.fp16_accumulation is HalfAccumulation.HMMA_REWRITE and self.block_size != 32:
            raise ValueError("HalfAccumulation.HMMA_REWRITE splits a 32-product FP8 instruction into two 16-product "
                             f"fp16 steps: block_size must be 32, got {self.block_size}")

    @property
    def maturity_reason(self) -> str:
        """Why the preset has its maturity: its evidence when validated, what its warning says when experimental."""
        if self.maturity is Maturity.VALIDATED:
            return f"validated: {self.source}"
        return f"experimental: {_WARNINGS.get(self.name.split('-')[0], 'it is not validated on hardware GEMMs')}"


HOPPER = Preset(
    "hopper",
    block_size=32,
    frac_bits=13,
    maturity=Maturity.VALIDATED,
    source="H100 wgmma vectors (hw-vectors/h100_e4m3.npz, 5,000 of 5,000); specified (H100 PCIe cuBLAS); "
    "fp16 accumulator not recorded for wgmma (the file's fp16 outputs are mma.sync: hopper_mma_sync)",
    unmodelled=frozenset({Accumulator.FP16}),
)
ADA = Preset(
    "ada",
    block_size=16,
    frac_bits=13,
    maturity=Maturity.VALIDATED,
    source="RTX 1000 Ada mma.sync vectors (hw-vectors/ada_e4m3.npz, 5,000 of 5,000, fp32 and fp16 accumulators); "
    "RTX 4060 recordings",
)
# [Note: b200_mma_sync] Fitted to the B200 mma.sync vectors (5,000 of 5,000), following the
# structure of the MATLAB tensor-core toolbox's B200 round-to-nearest model: the products of a
# 32-element instruction are aligned and truncated (25 fraction bits), their sum is rounded to
# nearest even, and c is added last by an fp32 round-to-nearest-even addition. The vectors pin
# down only the last step (682 of them are exact ties; truncation fits 3,151): their products
# never span enough exponents for F or the block grouping to matter, so those are unverified.
# The common B = 32, F = 25, c-aligned truncating model fits 3,207.
# [Note: FP8 mma.sync on sm_90 and sm_100] The seeds say these GPUs run FP8 mma.sync as fp16 HMMA
# instructions. Taken at its word (FP8 converted exactly to fp16, each 32-bit register of four FP8
# codes unpacked into two fp16 pairs, the two m16n8k16 HMMA steps taking the low pairs and then the
# high pairs, c kept out of them and added by a separate addition), it predicts the fp16-accumulator
# outputs of both files, h100_e4m3.npz and b200_e4m3.npz, 5,000 of 5,000 each, with the fp16 HMMA of
# the zoo (B = 16, F = 25, rounded to nearest even fp16); the same steps with the fp32 HMMA, then c
# added in fp32, also give the B200's 5,000 fp32 outputs. The alternatives fail hundreds to
# thousands of vectors each (tools/evidence/zoo_fit.py, docs/data/zoo_fit.json).
B200_MMA_SYNC = Preset(
    "b200_mma_sync",
    block_size=32,
    frac_bits=25,
    c_mode=CMode.ROUNDED_ADD,
    rounding=Rounding.NEAREST_EVEN,
    maturity=Maturity.EXPERIMENTAL,
    source="B200 mma.sync vectors (hw-vectors/b200_e4m3.npz, 5,000 of 5,000, fp32 and fp16 accumulators); MATLAB "
    "tensor-core toolbox B200 model; not B200 cuBLAS, not sm_120",
    fp16_accumulation=HalfAccumulation.HMMA_REWRITE,
)
HOPPER_MMA_SYNC = Preset(
    "hopper_mma_sync",
    block_size=32,
    frac_bits=25,
    maturity=Maturity.VALIDATED,
    source="H100 mma.sync vectors with an fp16 accumulator (hw-vectors/h100_e4m3.npz d_fp16acc_bits, 5,000 of "
    "5,000); fp32 accumulator open: no sm_90 mma.sync fp32 output is recorded, so it raises",
    fp16_accumulation=HalfAccumulation.HMMA_REWRITE,
    unmodelled=frozenset({Accumulator.FP32}),
)
#: Where the sm120 presets come from.
SM120_CITATION = ("Khattak and Mikaitis, arXiv:2512.07004, sec. 4.1.8, Tables 3-4: the RTX PRO 6000's "
                  "tensor-core numerics reported identical to the B200's")
# [Note: sm120] No sm_120 vector is public. The sm120 presets take the B200 models for the formats
# of the paper's tables: for fp16, bf16 and tf32 mmaemu's b200 zoo presets (validated on the B200);
# for FP8 the paper's own B200 model (one 32-product block, F = 25, c aligned, truncated: its
# toolbox's B200TC, which RTXPRO6000TC calls), which is not b200_mma_sync: sm_100 runs FP8 mma.sync
# as fp16 HMMA steps, and that rewrite's vectors fit only 3,207 of 5,000 under the paper's model.
# Experimental until a recording on an sm_120 GPU reproduces them (docs/zoo.md).
SM120 = Preset(
    "sm120",
    block_size=32,
    frac_bits=25,
    maturity=Maturity.EXPERIMENTAL,
    source=f"alias of the B200 FP8 model of {SM120_CITATION}; no sm_120 recording; fp16 accumulator not modelled",
    unmodelled=frozenset({Accumulator.FP16}),
)

_PRESETS = {p.name: p for p in (HOPPER, ADA, B200_MMA_SYNC, HOPPER_MMA_SYNC, SM120)}
_ALIASES = {"blackwell": "b200_mma_sync", "b200": "b200_mma_sync"}
_NOT_MODELLED = {
    "volta": "volta (V100, sm_70) has no FP8 tensor cores: an FP8 GEMM cannot run there. For fp16 operands pass "
    "float16 tensors to mmaemu.model.dot or mmaemu.accumulate with preset='volta'",
    "ampere": "ampere (A100, sm_80; RTX 30-series, sm_86) has no FP8 tensor cores: an FP8 GEMM cannot run there. For "
    "fp16, bf16 or tf32 operands pass float16, bfloat16 or float32 (tf32) tensors to mmaemu.model.dot or "
    "mmaemu.accumulate with preset='ampere'",
    "sm_120": "sm_120 (RTX 50-series, RTX PRO 6000 Blackwell) is not modelled under this name: the experimental "
    "preset 'sm120' takes the B200 models after arXiv:2512.07004 (no sm_120 recording validates it), and "
    "b200_mma_sync is not an sm_120 model",
    "rtx_blackwell": "sm_120 (RTX 50-series Blackwell) is not modelled under this name: the experimental preset "
    "'sm120' takes the B200 models after arXiv:2512.07004 (no sm_120 recording validates it), and b200_mma_sync is "
    "not an sm_120 model",
}
#: What each experimental shipped preset's warning says (the generic text for the others).
_WARNINGS = {
    "b200_mma_sync": "it fits the B200's mma.sync vectors (sm_100 runs them as fp16 HMMA steps), not B200 cuBLAS, "
    "and it is not an sm_120 (RTX 50-series, RTX PRO 6000) model for FP8 GEMMs",
    "sm120": f"no sm_120 recording validates it: it takes the B200 models after {SM120_CITATION}",
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
# c loaded; tools/evidence/zoo_fit.py reruns the fit): the block's E is the largest unnormalised product
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


#: The sm_120 name for fp16, bf16 and tf32 operands: experimental aliases of the B200's zoo presets
#: (see [Note: sm120]), by input format.
SM120_ZOO: dict[WideFormat, Preset] = {
    fmt: dataclasses.replace(p, name=f"sm120-{fmt.short_name}", maturity=Maturity.EXPERIMENTAL,
                             source=f"alias of {p.name} (hw-vectors/zoo/b200_{fmt.short_name}.npz) after "
                             f"{SM120_CITATION}; no sm_120 recording")
    for (arch, fmt), p in ZOO.items() if arch is Architecture.B200
}
#: The name that selects the sm_120 presets, by the operands' dtype (as an architecture name does).
SM120_NAME = "sm120"

_ZOO_BY_NAME: dict[str, tuple[Architecture, WideFormat]] = {p.name: key for key, p in ZOO.items()}
_SM120_BY_NAME: dict[str, WideFormat] = {p.name: fmt for fmt, p in SM120_ZOO.items()}


def _shipped_name(preset: Preset) -> str | None:
    """The registry name of a shipped preset (FP8, zoo or sm_120) equal to ``preset``, else None (a custom one)."""
    for shipped in (*_PRESETS.values(), *ZOO.values(), *SM120_ZOO.values()):
        if preset == shipped:
            return shipped.name
    return None


def zoo_presets() -> dict[tuple[str, str], Preset]:
    """The zoo's instruction presets by (architecture name, format name), e.g. ``("hopper", "bf16")``.

    The experimental sm_120 aliases are apart, in :data:`SM120_ZOO`.
    """
    return {(arch.value, fmt.short_name): p for (arch, fmt), p in ZOO.items()}


def require_accumulator(preset: Preset, accumulator: Accumulator) -> Preset:
    """``preset`` if it models ``accumulator``.

    Raises:
        UnsupportedFeatureError: no recording decides that accumulator for this instruction
            (``preset.unmodelled``): the call is refused, not approximated.
    """
    if accumulator in preset.unmodelled:
        other = {Accumulator.FP16: "a float32 c", Accumulator.FP32: "a float16 c (model.dot)"}[accumulator]
        hint = {"hopper": "; the H100's fp16-accumulator vectors are mma.sync: preset='hopper_mma_sync'"}.get(preset.name, "")
        raise UnsupportedFeatureError(
            f"preset {preset.name!r} does not model the {accumulator.value} accumulator with FP8 operands: no "
            f"recording decides it ({preset.source}); it models {other}{hint}"
        )
    return preset


def instruction_preset(preset: str | Preset, fmt: WideFormat | torch.dtype, *, warn: bool = True,
                       accumulator: Accumulator = Accumulator.FP32) -> Preset:
    """The instruction arithmetic that ``preset`` names for operands of format ``fmt``.

    For FP8 dtypes this is :func:`get_preset` (``"volta"`` and ``"ampere"`` raise: no FP8 tensor cores;
    ``"b200"`` is the experimental ``b200_mma_sync``). For fp16, bf16 and tf32 an architecture name
    (``"volta"``, ``"ampere"``, ``"ada"``, ``"hopper"``, ``"b200"``) or a :data:`ZOO` entry's own name
    (``"hopper-fp16"``) selects that entry; ``"sm120"`` (or ``"sm120-fp16"``, ...) selects the experimental
    :data:`SM120_ZOO` alias, with an :class:`~mmaemu.errors.ExperimentalPresetWarning` when ``warn``. A
    shipped preset object behaves exactly as its name (``HOPPER`` as ``"hopper"``); a custom
    :class:`Preset` applies to any format as it is.

    Args:
        preset: a name or a :class:`Preset`.
        fmt: the operands' format or dtype.
        warn: whether experimental presets warn.
        accumulator: the accumulator the caller computes (FP8 operands: :func:`require_accumulator`).

    Raises:
        UnsupportedFeatureError: the architecture has no tensor-core instruction for the format
            (volta: fp16 only), the name is an FP8-only preset (``b200_mma_sync``, ``blackwell``), a
            zoo preset of another format, or an FP8 preset whose ``accumulator`` no recording decides.
        KeyError: an unknown name; the message lists the known ones.
    """
    if isinstance(fmt, torch.dtype):
        if fmt in FP8_DTYPES:
            return require_accumulator(get_preset(preset, warn=warn), accumulator)
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
    if preset == SM120_NAME or preset in _SM120_BY_NAME:
        found_fmt = _SM120_BY_NAME.get(preset, fmt)
        if found_fmt is not fmt:
            raise UnsupportedFeatureError(f"preset {preset!r} is the instruction for {found_fmt.short_name} operands, "
                                          f"not {fmt.short_name}")
        if warn:
            _warn_experimental(SM120_ZOO[fmt].name, _WARNINGS[SM120_NAME])
        return SM120_ZOO[fmt]
    try:
        arch = Architecture(preset)
    except ValueError:
        archs = ", ".join([*(a.value for a in Architecture), SM120_NAME])
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

    Experimental presets (``b200_mma_sync``, ``sm120``), and the aliases ``blackwell`` and ``b200``, emit
    :class:`ExperimentalPresetWarning` when ``warn`` is true. Which accumulators the preset models is
    the caller's check (:func:`require_accumulator`; :func:`instruction_preset` makes it).

    Raises:
        UnsupportedFeatureError: for ``sm_120`` and ``rtx_blackwell`` (not modelled under these names: see
            ``sm120``), and for the zoo's presets (fp16, bf16 and tf32 instructions, by name or object).
        KeyError: for an unknown name; the message lists the known ones.
    """
    if isinstance(preset, Preset):
        shipped = _shipped_name(preset)
        if shipped is None:
            return preset
        preset = shipped  # a shipped preset object behaves as its name
    if not isinstance(preset, str):
        raise TypeError(f"preset must be a name or a Preset, got {type(preset).__name__}")
    if preset in _ZOO_BY_NAME or preset in _SM120_BY_NAME:
        fmt = _ZOO_BY_NAME[preset][1] if preset in _ZOO_BY_NAME else _SM120_BY_NAME[preset]
        raise UnsupportedFeatureError(
            f"preset {preset!r} is the instruction for {fmt.short_name} operands, not FP8; for FP8 "
            f"operands the presets are: {', '.join(sorted(_PRESETS))}")
    if preset in _NOT_MODELLED:
        raise UnsupportedFeatureError(_NOT_MODELLED[preset])
    if preset in _ALIASES:
        target = _ALIASES[preset]
        if warn:
            warn_caller(
                f"preset {preset!r} is an alias of the experimental {target!r}: {_WARNINGS[target]}",
                ExperimentalPresetWarning)
        return _PRESETS[target]
    try:
        found = _PRESETS[preset]
    except KeyError:
        known = ", ".join(sorted([*_PRESETS, *_ALIASES]))
        raise UnknownNameError(f"unknown preset {preset!r}; known presets: {known}") from None
    if warn and found.maturity is Maturity.EXPERIMENTAL:
        _warn_experimental(found.name, _WARNINGS.get(found.name, "it is not validated on hardware GEMMs"))
    return found


def _warn_experimental(name: str, why: str) -> None:
    warn_caller(f"preset {name!r} is experimental: {why}", ExperimentalPresetWarning)
