"""Bit-for-bit comparison of GEMM outputs, for tests of mmaemu and of your own FP8 kernels.

Values are compared as bit patterns, so +0 and -0 differ, and NaNs differ by payload. Every torch
dtype is accepted: floating-point types of any width (fp64, fp32, bf16, fp16, every float8
variant, ``fnuz`` and ``e8m0fnu`` included), complex types (compared component by component),
signed and unsigned integers of every width, ``bool``, the bit and sub-byte placeholder types
(compared as raw bytes) and quantized tensors (their integer representation, after checking that
their quantization parameters agree).

Only ``torch.Tensor`` arguments are accepted: a NumPy array or a list raises :class:`TypeError`
(convert an array with ``torch.from_numpy(a)``, which keeps its dtype and bits, and a list with
``torch.tensor(values, dtype=...)``, so that its dtype is explicit).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch

__all__ = ["BitwiseDiff", "bitwise_diff", "assert_bitwise_equal"]

_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_INT64_MIN = -(2**63)


@dataclass(frozen=True)
class BitwiseDiff:
    """The differences between two tensors' bit patterns.

    Attributes:
        dtype: the compared dtype.
        shape: the compared shape.
        total: number of elements.
        differing: number of elements whose bits differ.
        zero_sign: differences between +0 and -0 (floating-point types only).
        nan_payload: differences between two NaNs (floating-point types only).
        value: all other differences (different numbers, or a number against a NaN). A complex
            element counts as ``value`` when one of its components differs in value, else as
            ``nan_payload`` when one differs in NaN payload, else as ``zero_sign``.
        max_ulps: the largest distance among ``value`` differences between two non-NaN numbers:
            in units in the last place for floating-point types (+0 and -0 are one apart, the
            largest finite number and infinity too), the difference of the values for integers
            and bool; None when there is none, and for the types compared as raw bytes (bit and
            sub-byte placeholders, packed ``float4_e2m1fn_x2`` and ``quint4x2``/``quint2x4``).
        first: up to ten ``(index, actual_hex, expected_hex)`` of the first differences; a
            complex element is shown as ``"(0xREAL, 0xIMAG)"``.
    """

    dtype: torch.dtype
    shape: tuple[int, ...]
    total: int
    differing: int
    zero_sign: int
    nan_payload: int
    value: int
    max_ulps: int | None
    first: list[tuple[tuple[int, ...], str, str]] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        """True when every bit pattern is equal."""
        return self.differing == 0

    def __str__(self) -> str:
        if self.equal:
            return f"bitwise equal: {self.total} elements of {self.dtype}"
        lines = [
            f"{self.differing} of {self.total} {self.dtype} elements differ in their bits "
            f"(value {self.value}, zero sign {self.zero_sign}, NaN payload {self.nan_payload}; "
            f"largest value difference {self.max_ulps} ulps)",
        ]
        for index, got, want in self.first:
            lines.append(f"  at {index}: actual {got}, expected {want}")
        return "\n".join(lines)


class _Kind(enum.Enum):
    """How the bit patterns of a dtype are ordered and classified."""

    FLOAT = "float"  # sign-magnitude, with NaNs and signed zeros
    EXPONENT = "exponent"  # float8_e8m0fnu: unsigned exponent, NaN 0xFF, no zero
    SIGNED = "signed"  # two's complement integers
    UNSIGNED = "unsigned"  # unsigned integers and bool
    RAW = "raw"  # bytes without an order (placeholders, packed formats)


_E8M0 = getattr(torch, "float8_e8m0fnu", None)
_PACKED = {getattr(torch, n) for n in ("float4_e2m1fn_x2", "quint4x2", "quint2x4") if hasattr(torch, n)}
_SIGNED_INTS = {torch.int8, torch.int16, torch.int32, torch.int64}
_UNSIGNED_INTS = {torch.bool, torch.uint8}
_UNSIGNED_INTS |= {getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n)}


def _kind(dtype: torch.dtype) -> _Kind:
    if dtype in _PACKED:
        return _Kind.RAW
    if dtype == _E8M0:
        return _Kind.EXPONENT
    if dtype.is_floating_point or dtype.is_complex:
        return _Kind.FLOAT
    if dtype in _SIGNED_INTS:
        return _Kind.SIGNED
    if dtype in _UNSIGNED_INTS:
        return _Kind.UNSIGNED
    return _Kind.RAW  # bits8, bits16, int1..int7, uint1..uint7: no arithmetic in torch


def _checked_tensor(x: object, name: str) -> torch.Tensor:
    """``x`` if it is a strided tensor with values, else a TypeError/ValueError saying what to pass."""
    if not isinstance(x, torch.Tensor):
        if type(x).__module__ == "numpy" or type(x).__module__.startswith("numpy."):
            hint = "convert a NumPy array with torch.from_numpy(a), which keeps its dtype and bits"
        else:
            hint = "build one with torch.tensor(values, dtype=...) so that the compared dtype is explicit"
        raise TypeError(f"{name} must be a torch.Tensor (of any dtype), got {type(x).__name__}; {hint}")
    if x.layout != torch.strided:
        raise TypeError(f"{name} has layout {x.layout}: compare dense tensors (x.to_dense())")
    if x.device.type == "meta":
        raise ValueError(f"{name} is a meta tensor: it has no values to compare")
    return x


def _q_params(x: torch.Tensor) -> tuple[object, ...]:
    scheme = x.qscheme()
    if scheme in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        return (scheme, x.q_scale(), x.q_zero_point())
    return (
        scheme,
        x.q_per_channel_axis(),
        x.q_per_channel_scales().tolist(),
        x.q_per_channel_zero_points().tolist(),
    )


def _lanes(x: torch.Tensor) -> torch.Tensor:
    """The logical values of ``x`` on the CPU, as ``[*shape, lanes]``: 2 lanes for complex, else 1."""
    t = x.detach()
    if t.is_quantized:
        t = t.int_repr()
    elif _kind(t.dtype) is _Kind.RAW:
        t = t.view(_INT_OF_SIZE[t.element_size()])  # placeholder dtypes cannot even be copied
    t = t.resolve_conj().resolve_neg().cpu()
    t = torch.view_as_real(t) if t.is_complex() else t.unsqueeze(-1)
    return t.contiguous()


def _bit_patterns(t: torch.Tensor) -> torch.Tensor:
    """Bit patterns as int64: unsigned below 64 bits; the two's-complement view at 64 bits."""
    width = t.element_size()
    bits = t.view(_INT_OF_SIZE[width]).to(torch.int64)
    return bits if width == 8 else bits & ((1 << (8 * width)) - 1)


def _order_keys(t: torch.Tensor, bits: torch.Tensor, kind: _Kind) -> torch.Tensor:
    """int64 keys whose order and differences are those of the numbers (ulps for floats)."""
    width = 8 * t.element_size()
    if kind is _Kind.FLOAT:
        magnitude = bits & ((1 << (width - 1)) - 1)
        negative = ((bits >> (width - 1)) & 1) == 1
        return torch.where(negative, -magnitude, magnitude)
    if kind is _Kind.SIGNED:
        return t.to(torch.int64)
    if width == 64:  # uint64 through its int64 view: flipping the top bit keeps order and differences
        return bits ^ _INT64_MIN
    return bits


def _max_distance(got: torch.Tensor, want: torch.Tensor) -> int:
    """``max |got - want|`` of int64 keys, exactly (the difference may need 65 bits)."""
    low_mask = (1 << 32) - 1
    high = (got >> 32) - (want >> 32)
    low = (got & low_mask) - (want & low_mask)
    negative = (high < 0) | ((high == 0) & (low < 0))
    high = torch.where(negative, -high, high)
    low = torch.where(negative, -low, low)
    borrow = low < 0
    high = torch.where(borrow, high - 1, high)
    low = torch.where(borrow, low + (1 << 32), low)
    top = int(high.max())
    return (top << 32) + int(low[high == top].max())


def _hex(lanes: torch.Tensor, width: int) -> str:
    mask = (1 << width) - 1
    digits = [f"0x{int(v) & mask:0{width // 4}x}" for v in lanes.tolist()]
    return digits[0] if len(digits) == 1 else "(" + ", ".join(digits) + ")"


def bitwise_diff(actual: torch.Tensor, expected: torch.Tensor) -> BitwiseDiff:
    """Compare two tensors of the same dtype and shape bit for bit, without raising on differences.

    Tensors may be on different devices (both are compared on the CPU). Conjugate and negative
    views are compared by their logical values. +0 and -0 differ (``zero_sign``), NaNs with
    different payloads or signs differ (``nan_payload``), and Inf is an ordinary value.

    Raises:
        TypeError: an argument that is not a ``torch.Tensor`` (NumPy arrays and lists included:
            convert them with ``torch.from_numpy`` or ``torch.tensor``), or a sparse tensor.
        ValueError: dtypes or shapes differ, quantized tensors with different quantization
            parameters, or a meta tensor.

    Example:
        >>> import torch
        >>> from mmaemu.testing import bitwise_diff
        >>> d = bitwise_diff(torch.tensor([1.0, 0.0], dtype=torch.float64),
        ...                  torch.tensor([1.0, -0.0], dtype=torch.float64))
        >>> d.differing, d.zero_sign, d.first
        (1, 1, [((1,), '0x0000000000000000', '0x8000000000000000')])
    """
    actual = _checked_tensor(actual, "actual")
    expected = _checked_tensor(expected, "expected")
    if actual.dtype != expected.dtype:
        raise ValueError(f"dtype mismatch: actual {actual.dtype}, expected {expected.dtype}")
    if tuple(actual.shape) != tuple(expected.shape):
        raise ValueError(f"shape mismatch: actual {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    if actual.is_quantized and _q_params(actual) != _q_params(expected):
        raise ValueError(
            f"quantization parameters differ: actual {_q_params(actual)}, expected {_q_params(expected)}"
        )
    dtype, shape, total = actual.dtype, tuple(actual.shape), actual.numel()
    lanes_a, lanes_e = _lanes(actual), _lanes(expected)
    # a quantized tensor's lanes hold its int_repr(); complex dtypes are FLOAT, lane by lane
    kind = _Kind.RAW if dtype in _PACKED else _kind(lanes_a.dtype if actual.is_quantized else dtype)
    width = 8 * lanes_a.element_size()
    got, want = _bit_patterns(lanes_a), _bit_patterns(lanes_e)
    differ_lane = got != want
    differ = differ_lane.any(-1)
    n_diff = int(differ.sum())
    if n_diff == 0:
        return BitwiseDiff(dtype, shape, total, 0, 0, 0, 0, None)
    nan_a = torch.zeros_like(differ_lane)
    nan_e = torch.zeros_like(differ_lane)
    zero_sign_lane = torch.zeros_like(differ_lane)
    if kind is _Kind.FLOAT:
        values_a, values_e = lanes_a.to(torch.float64), lanes_e.to(torch.float64)
        nan_a, nan_e = torch.isnan(values_a), torch.isnan(values_e)
        # zeros by their bits too: under flush-to-zero (DAZ) a subnormal converts to 0
        magnitude = (1 << (width - 1)) - 1
        zero_a, zero_e = (values_a == 0) & ((got & magnitude) == 0), (values_e == 0) & ((want & magnitude) == 0)
        zero_sign_lane = differ_lane & zero_a & zero_e
    elif kind is _Kind.EXPONENT:
        nan_a, nan_e = got == 0xFF, want == 0xFF
    nan_payload_lane = differ_lane & nan_a & nan_e
    value_lane = differ_lane & ~zero_sign_lane & ~nan_payload_lane
    value = value_lane.any(-1)
    nan_payload = nan_payload_lane.any(-1) & ~value
    zero_sign = differ & ~value & ~nan_payload
    numeric = value_lane & ~nan_a & ~nan_e
    max_ulps = None
    if kind is not _Kind.RAW and bool(numeric.any()):
        keys_a = _order_keys(lanes_a, got, kind)
        keys_e = _order_keys(lanes_e, want, kind)
        max_ulps = _max_distance(keys_a[numeric], keys_e[numeric])
    first = []
    for row in differ.nonzero()[:10].tolist():
        index = tuple(int(i) for i in row)
        first.append((index, _hex(got[index], width), _hex(want[index], width)))
    return BitwiseDiff(
        dtype,
        shape,
        total,
        n_diff,
        int(zero_sign.sum()),
        int(nan_payload.sum()),
        int(value.sum()),
        max_ulps,
        first,
    )


def assert_bitwise_equal(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Assert that two tensors have identical bit patterns (+0 != -0; NaN payloads compared).

    Accepts tensors of every torch dtype (see :func:`bitwise_diff`), on any devices.

    Raises:
        AssertionError: with counts by class (value, zero sign, NaN payload), the largest value
            difference in ulps and the first differing indices in hex.
        TypeError: an argument that is not a ``torch.Tensor``: convert a NumPy array with
            ``torch.from_numpy(a)`` and a list with ``torch.tensor(values, dtype=...)``.
        ValueError: dtypes or shapes differ (see :func:`bitwise_diff`).

    Example:
        >>> import torch
        >>> from mmaemu.testing import assert_bitwise_equal
        >>> assert_bitwise_equal(torch.tensor([0.0]), torch.tensor([0.0]))
        >>> try:
        ...     assert_bitwise_equal(torch.tensor([0.0]), torch.tensor([-0.0]))
        ... except AssertionError as e:
        ...     print(str(e).splitlines()[0])
        1 of 1 torch.float32 elements differ in their bits (value 0, zero sign 1, NaN payload 0; largest value difference None ulps)
    """
    report = bitwise_diff(actual, expected)
    if not report.equal:
        raise AssertionError(str(report))
