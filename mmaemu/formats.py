"""Bit-level facts about the number formats mmaemu reads and writes.

FP8 inputs (``torch.float8_e4m3fn``, ``torch.float8_e5m2``) and the wider tensor-core inputs of the
zoo (:class:`WideFormat`: fp16, bf16, tf32) are decoded into sign, exponent
(floored at the format's ``emin``, so subnormals keep ``emin``), integer significand and class
(zero, finite, inf, NaN). Outputs (fp32, bf16, fp16, E4M3, E5M2) are described by
:class:`OutFormat`, with the canonical NaN bit pattern an NVIDIA GPU writes for each.

Every constant is an exact bit pattern or an exact power of two.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch

__all__ = ["Fp8Format", "OutFormat", "DecodedFp8", "decode_fp8", "fp8_format_of", "out_format_of",
           "dtype_from_name", "bits_of", "from_bits"]

#: fp32 canonical NaN written by NVIDIA GPUs (all mantissa bits set).
FP32_CANONICAL_NAN = 0x7FFFFFFF

#: Exponent given to zero (and non-finite) operands so that they never win a block maximum.
#: Any real product exponent is >= -28 and any fp32 exponent >= -126; the sum of two
#: sentinels still fits in int16.
EXPONENT_OF_ZERO = -4096


@dataclass(frozen=True)
class _Fp8Spec:
    dtype: torch.dtype
    exponent_bits: int
    mantissa_bits: int
    bias: int
    max_finite: float
    has_inf: bool


class Fp8Format(enum.Enum):
    """The two FP8 input formats of ``torch._scaled_mm``.

    E4M3 (``float8_e4m3fn``): bias 7, 3 fraction bits, no infinities, NaN codes 0x7F and 0xFF,
    largest finite 448. E5M2 (``float8_e5m2``): bias 15, 2 fraction bits, IEEE-style
    infinities (0x7C, 0xFC) and NaNs, largest finite 57344.
    """

    E4M3 = _Fp8Spec(torch.float8_e4m3fn, 4, 3, 7, 448.0, False)
    E5M2 = _Fp8Spec(torch.float8_e5m2, 5, 2, 15, 57344.0, True)

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype of this format."""
        return self.value.dtype

    @property
    def mantissa_bits(self) -> int:
        """Number of stored fraction bits (3 or 2)."""
        return self.value.mantissa_bits

    @property
    def bias(self) -> int:
        """Exponent bias."""
        return self.value.bias

    @property
    def emin(self) -> int:
        """Smallest normal exponent; subnormals share it (E4M3: -6, E5M2: -14)."""
        return 1 - self.value.bias

    @property
    def max_finite(self) -> float:
        """Largest finite magnitude (E4M3: 448, E5M2: 57344)."""
        return self.value.max_finite

    @property
    def short_name(self) -> str:
        """``"e4m3"`` or ``"e5m2"``."""
        return self.name.lower()


_FP8_BY_DTYPE = {f.dtype: f for f in Fp8Format}


def fp8_format_of(dtype: torch.dtype) -> Fp8Format:
    """The :class:`Fp8Format` of a torch dtype.

    Raises:
        ValueError: if ``dtype`` is not ``float8_e4m3fn`` or ``float8_e5m2``.
    """
    try:
        return _FP8_BY_DTYPE[dtype]
    except KeyError:
        raise ValueError(f"not an FP8 input dtype mmaemu models: {dtype}") from None


@dataclass(frozen=True)
class _OutSpec:
    dtype: torch.dtype
    bits: int
    canonical_nan: int


class OutFormat(enum.Enum):
    """Output dtypes of an FP8 GEMM, with the canonical NaN each one gets on NVIDIA GPUs.

    Canonical NaN bit patterns: fp32 0x7FFFFFFF, bf16 0x7FFF, fp16 0x7FFF, E4M3 0x7F,
    E5M2 0x7F (all recorded on the RTX 4060; no recorded FP8 NaN output has the sign bit set).
    """

    FLOAT32 = _OutSpec(torch.float32, 32, FP32_CANONICAL_NAN)
    BFLOAT16 = _OutSpec(torch.bfloat16, 16, 0x7FFF)
    FLOAT16 = _OutSpec(torch.float16, 16, 0x7FFF)
    E4M3 = _OutSpec(torch.float8_e4m3fn, 8, 0x7F)
    E5M2 = _OutSpec(torch.float8_e5m2, 8, 0x7F)

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype."""
        return self.value.dtype

    @property
    def bits(self) -> int:
        """Width in bits."""
        return self.value.bits

    @property
    def canonical_nan(self) -> int:
        """Bit pattern of the NaN an NVIDIA GPU writes."""
        return self.value.canonical_nan

    def nan_tensor(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """A 0-dim tensor of this format holding the NaN an NVIDIA GPU writes (the one canonical-NaN writer)."""
        bits = torch.tensor(self.canonical_nan, dtype=torch.int64, device=device).to(_INT_VIEW[self.bits])
        return bits.view(self.dtype)

    def write_nan(self, out: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Write the canonical NaN into ``out`` (of this format) wherever ``mask`` holds; in place, returns ``out``."""
        if bool(mask.any()):
            out.view(_INT_VIEW[self.bits])[mask] = self.nan_tensor(out.device).view(_INT_VIEW[self.bits])
        return out

    @property
    def dtype_name(self) -> str:
        """torch's name of the dtype without ``torch.`` (``"float32"``, ``"float8_e4m3fn"``, ...)."""
        return str(self.dtype).removeprefix("torch.")

    @property
    def fp8(self) -> Fp8Format | None:
        """The FP8 format for FP8 outputs, else None."""
        return _FP8_BY_DTYPE.get(self.dtype)


_OUT_BY_DTYPE = {f.dtype: f for f in OutFormat}
#: The FP8 input dtypes and the output dtypes, in their enums' order.
FP8_DTYPES: tuple[torch.dtype, ...] = tuple(f.dtype for f in Fp8Format)
OUT_DTYPES: tuple[torch.dtype, ...] = tuple(f.dtype for f in OutFormat)
_INT_VIEW = {8: torch.uint8, 16: torch.int16, 32: torch.int32}


def out_format_of(dtype: torch.dtype) -> OutFormat:
    """The :class:`OutFormat` of a torch dtype.

    Raises:
        ValueError: for a dtype that is not an FP8 GEMM output type.
    """
    try:
        return _OUT_BY_DTYPE[dtype]
    except KeyError:
        raise ValueError(f"not an output dtype of an FP8 GEMM: {dtype}") from None



def out_format_or_none(dtype: object) -> OutFormat | None:
    """The :class:`OutFormat` of ``dtype``, or None when no FP8 GEMM writes it (no exception)."""
    return _OUT_BY_DTYPE.get(dtype)  # type: ignore[call-overload]

def bits_of(x: torch.Tensor) -> torch.Tensor:
    """Bit patterns of ``x`` as an integer tensor of the same width (no copy).

    fp32 -> int32, bf16/fp16 -> int16, FP8 -> uint8. Use ``.to(torch.int64) & mask`` for
    unsigned values of the 16- and 32-bit views.
    """
    width = x.element_size() * 8
    return x.view(_INT_VIEW[width])


def from_bits(bits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Reinterpret an integer tensor of bit patterns as ``dtype`` (the inverse of :func:`bits_of`)."""
    width = dtype.itemsize * 8
    return bits.to(_INT_VIEW[width]).view(dtype)


def fp32_exponent(x: torch.Tensor) -> torch.Tensor:
    """Unbiased exponent of fp32 values, floored at -126 (subnormals keep -126), as int32.

    Zero, Inf and NaN inputs give meaningless values; callers mask them.
    """
    field = (bits_of(x.to(torch.float32)) >> 23) & 0xFF
    return torch.clamp(field - 127, min=-126)


@dataclass(frozen=True)
class DecodedFp8:
    """FP8 codes decoded for the integer tensor-core model.

    Attributes:
        value: the exact value as fp32, with non-finite codes replaced by 0.
        exponent: ``e(x)`` (unbiased, floored at emin) as int16, or
            :data:`EXPONENT_OF_ZERO` for zeros and non-finite codes.
        significand: the integer significand (hidden bit included), so that
            ``|value| = significand * 2**(exponent - mantissa_bits)``; 0 for zero/non-finite.
        negative: sign bit set (also for -0 and negative NaN/Inf codes).
        is_nan: NaN codes.
        is_inf: infinite codes (E5M2 only).
    """

    value: torch.Tensor
    exponent: torch.Tensor
    significand: torch.Tensor
    negative: torch.Tensor
    is_nan: torch.Tensor
    is_inf: torch.Tensor


def fp8_nan_mask(x: torch.Tensor) -> torch.Tensor:
    """Where an FP8 tensor holds a NaN code (E4M3: 0x7F, 0xFF; E5M2: exponent all ones, fraction != 0)."""
    fmt = fp8_format_of(x.dtype)
    magnitude = x.view(torch.uint8) & 0x7F
    return magnitude == 0x7F if fmt is Fp8Format.E4M3 else magnitude > 0x7C


def fp8_nan_rows(x: torch.Tensor) -> torch.Tensor:
    """Whether each row (last dimension) of an FP8 tensor holds a NaN code; False for empty rows.

    A code is NaN exactly when its 7 magnitude bits are at least the format's smallest NaN
    magnitude (E4M3: 0x7F; E5M2: 0x7D), so a row's largest magnitude code decides: one
    reduction, no per-element mask.
    """
    fmt = fp8_format_of(x.dtype)
    if x.shape[-1] == 0:
        return torch.zeros(x.shape[:-1], dtype=torch.bool, device=x.device)
    smallest_nan = 0x7F if fmt is Fp8Format.E4M3 else 0x7D
    return (x.view(torch.uint8) & 0x7F).amax(-1) >= smallest_nan


def decode_fp8(x: torch.Tensor) -> DecodedFp8:
    """Decode an FP8 tensor (``float8_e4m3fn`` or ``float8_e5m2``) bit by bit.

    Zeros (both signs) get exponent :data:`EXPONENT_OF_ZERO` and value +-0; NaN and Inf codes get
    value 0 and are flagged in ``is_nan``/``is_inf`` (the callers apply the NaN and Inf rules).
    """
    fmt = fp8_format_of(x.dtype)
    code = x.view(torch.uint8).to(torch.int32)
    m_bits = fmt.mantissa_bits
    field = (code >> m_bits) & ((1 << fmt.value.exponent_bits) - 1)
    frac = code & ((1 << m_bits) - 1)
    top = (1 << fmt.value.exponent_bits) - 1
    if fmt is Fp8Format.E4M3:
        is_nan = (field == top) & (frac == (1 << m_bits) - 1)
        is_inf = torch.zeros_like(is_nan)
    else:
        is_nan = (field == top) & (frac != 0)
        is_inf = (field == top) & (frac == 0)
    finite = ~(is_nan | is_inf)
    significand = torch.where(field != 0, frac + (1 << m_bits), frac)
    significand = torch.where(finite, significand, torch.zeros_like(significand))
    exponent = torch.clamp(field - fmt.bias, min=fmt.emin)
    exponent = torch.where(significand != 0, exponent, torch.full_like(exponent, EXPONENT_OF_ZERO))
    negative = (code >> 7) == 1
    value = torch.where(finite, x.to(torch.float32), torch.zeros((), dtype=torch.float32, device=x.device))
    return DecodedFp8(
        value=value,
        exponent=exponent.to(torch.int16),
        significand=significand,
        negative=negative,
        is_nan=is_nan,
        is_inf=is_inf,
    )


#: Every name :func:`dtype_from_name` accepts: torch's dtype names and the short forms users write.
FORMAT_NAMES: dict[str, torch.dtype] = {
    **{f.dtype_name: f.dtype for f in OutFormat},
    "bf16": torch.bfloat16, "fp16": torch.float16, "f16": torch.float16, "fp32": torch.float32, "f32": torch.float32,
    **{f.short_name: f.dtype for f in Fp8Format},
}


def dtype_from_name(name: str) -> torch.dtype:
    """The dtype a format name stands for (case-insensitive): ``"bf16"``, ``"float32"``, ``"e4m3"``, ...

    Raises:
        ValueError: an unknown name; the message lists the accepted ones.
    """
    try:
        return FORMAT_NAMES[name.strip().lower()]
    except KeyError:
        raise ValueError(f"{name!r} is not a format; accepted: {', '.join(sorted(FORMAT_NAMES))}") from None


class WideFormat(enum.Enum):
    """The non-FP8 tensor-core input formats of the zoo (fp32 accumulation; fp16 also with fp16 accumulation).

    The operands' dtype selects the format: ``torch.float16`` is fp16 (5 exponent bits, 10 fraction
    bits, emin -14), ``torch.bfloat16`` is bf16 (8, 7, emin -126), and ``torch.float32`` holds tf32
    values (8, 10, emin -126: an fp32 whose 13 low fraction bits are zero). All three have IEEE
    infinities and NaNs and keep subnormals (exponent floored at emin).
    """

    FP16 = "fp16"
    BF16 = "bf16"
    TF32 = "tf32"

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype holding the format (tf32 lives in ``torch.float32``)."""
        return _WIDE_SPECS[self][0]

    @property
    def mantissa_bits(self) -> int:
        """Stored fraction bits (fp16 10, bf16 7, tf32 10)."""
        return _WIDE_SPECS[self][1]

    @property
    def emin(self) -> int:
        """Smallest normal exponent; subnormals share it (fp16 -14, bf16 and tf32 -126)."""
        return _WIDE_SPECS[self][2]

    @property
    def short_name(self) -> str:
        """``"fp16"``, ``"bf16"`` or ``"tf32"``."""
        return self.value


_WIDE_SPECS: dict[WideFormat, tuple[torch.dtype, int, int]] = {
    WideFormat.FP16: (torch.float16, 10, -14),
    WideFormat.BF16: (torch.bfloat16, 7, -126),
    WideFormat.TF32: (torch.float32, 10, -126),
}
#: The dtypes of the zoo's input formats, in :class:`WideFormat` order.
WIDE_DTYPES: tuple[torch.dtype, ...] = tuple(f.dtype for f in WideFormat)
_WIDE_BY_DTYPE = {f.dtype: f for f in WideFormat}
#: The fp32 fraction bits that a tf32 value leaves zero.
_TF32_LOW_BITS = (1 << 13) - 1


def wide_format_of(x: torch.Tensor, name: str = "operand") -> WideFormat:
    """The :class:`WideFormat` of a tensor, checking that a float32 tensor holds tf32 values.

    Raises:
        ValueError: the dtype is not float16, bfloat16 or float32, or a float32 tensor holds a value
            that is not a tf32 value (one of its 13 low fraction bits set, NaN payloads included):
            how the tensor cores treat those bits is not recorded. Round first, for example with
            :func:`mmaemu.quantization.round_to_tf32`.
    """
    fmt = _WIDE_BY_DTYPE.get(x.dtype)
    if fmt is None:
        raise ValueError(f"{name} must be float16, bfloat16 or float32 holding tf32 values, got {x.dtype}")
    if fmt is WideFormat.TF32 and x.numel():
        low = (x.detach().view(torch.int32) & _TF32_LOW_BITS) != 0
        if bool(low.any()):
            count = int(low.sum())
            raise ValueError(
                f"{name} is float32, which mmaemu reads as tf32, but {count} of its values are not tf32 values "
                "(their 13 low fraction bits are not zero; how the tensor cores treat those bits is not recorded). "
                "Round them first: mmaemu.quantization.round_to_tf32(x)"
            )
    return fmt


def decode_wide(x: torch.Tensor, fmt: WideFormat) -> DecodedFp8:
    """Decode an fp16, bf16 or tf32 tensor like :func:`decode_fp8`, with values as float64.

    float64 holds every value and every product of two values exactly (at most 22 significant
    bits; bf16 and tf32 products reach 2**-266 and 2**256, outside fp32's range). Zeros get
    :data:`EXPONENT_OF_ZERO`; NaN and Inf get value 0 and are flagged. ``significand`` is the
    integer significand with the hidden bit, so ``|value| = significand * 2**(exponent - mantissa_bits)``.
    """
    x = x.detach()
    if fmt is WideFormat.TF32:
        bits = x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
        field = (bits >> 23) & 0xFF
        frac = (bits >> 13) & 0x3FF
        top, bias, sign_shift = 0xFF, 127, 31
    elif fmt is WideFormat.BF16:
        bits = x.view(torch.int16).to(torch.int64) & 0xFFFF
        field = (bits >> 7) & 0xFF
        frac = bits & 0x7F
        top, bias, sign_shift = 0xFF, 127, 15
    else:
        bits = x.view(torch.int16).to(torch.int64) & 0xFFFF
        field = (bits >> 10) & 0x1F
        frac = bits & 0x3FF
        top, bias, sign_shift = 0x1F, 15, 15
    m = fmt.mantissa_bits
    is_nan = (field == top) & (frac != 0)
    is_inf = (field == top) & (frac == 0)
    finite = ~(is_nan | is_inf)
    significand = torch.where(field != 0, frac + (1 << m), frac)
    significand = torch.where(finite, significand, torch.zeros_like(significand))
    exponent = torch.clamp(field - bias, min=fmt.emin)
    exponent = torch.where(significand == 0, torch.full_like(exponent, EXPONENT_OF_ZERO), exponent)
    negative = ((bits >> sign_shift) & 1) == 1
    value = torch.where(finite, x.to(torch.float64), torch.zeros((), dtype=torch.float64, device=x.device))
    return DecodedFp8(
        value=value,
        exponent=exponent.to(torch.int16),
        significand=significand.to(torch.int32),
        negative=negative,
        is_nan=is_nan,
        is_inf=is_inf,
    )


def fp8_inf_rows(x: torch.Tensor) -> torch.Tensor:
    """Whether each row (last dimension) of an FP8 tensor holds an Inf code (E5M2's 0x7C and 0xFC; E4M3 has
    none); False for empty rows."""
    if fp8_format_of(x.dtype) is not Fp8Format.E5M2 or x.shape[-1] == 0:
        return torch.zeros(x.shape[:-1], dtype=torch.bool, device=x.device)
    return ((x.view(torch.uint8) & 0x7F) == 0x7C).any(-1)


def nan_rows(x: torch.Tensor) -> torch.Tensor:
    """Whether each row (last dimension) of an FP8, fp16, bf16 or fp32 (tf32) tensor holds a NaN; False for empty rows."""
    if x.dtype in FP8_DTYPES:
        return fp8_nan_rows(x)
    if x.shape[-1] == 0:
        return torch.zeros(x.shape[:-1], dtype=torch.bool, device=x.device)
    return torch.isnan(x).any(-1)
