"""Slow, exact, independent reference model of the FP8 GEMM numerics (test-suite only).

Written only from ``shared/NUMERICS.md`` (sections 1-3) and, for the zoo and the fp16 accumulator of FP8
operands, from docs/zoo.md's wording; it shares no code with ``mmaemu``.
Every value is handled exactly with Python ints and :class:`fractions.Fraction`, one output at a
time: no torch, no numpy.  Floating-point bit patterns go in and out as Python ints.

Section references below ("N1.3" = NUMERICS.md section 1, step 3; "N2" = section 2; "N3" = section 3).
Choices NUMERICS.md leaves open are marked ``[open]``.

Internal representation of a floating-point datum: a tuple ``(kind, sign, mag)`` with
``kind`` in {'fin', 'inf', 'nan'}, ``sign`` in {0, 1} (1 = negative, kept for zeros too) and
``mag`` a non-negative Fraction (meaningful only for 'fin').
"""

from __future__ import annotations

from fractions import Fraction

__all__ = [
    "block_scaled_output",
    "fp8_decode",
    "fp8_decode_signed",
    "block",
    "dot",
    "accumulate",
    "combine_serial",
    "combine_pairwise",
    "fp32_add_bits",
    "fp32_mul_bits",
    "epilogue",
    "gemm_output",
    "decode",
    "encode_rne",
    "encode_exact",
    "round_magnitude",
    "f32_value",
    "f32_bits_from_value",
    "FORMATS",
    "CANONICAL_NAN",
    "zoo_block",
    "zoo_dot",
    "fp8_block_fp16acc",
    "fp8_dot_fp16acc_blocks",
    "fp8_dot_fp16acc_rewrite",
    "fp8_to_fp16_bits",
    "fp16_add_bits",
    "chains_sum",
    "epilogue_rowwise",
]


# ---------------------------------------------------------------------------------------------
# Binary formats (from first principles)
# ---------------------------------------------------------------------------------------------


class Fmt:
    """A binary floating-point format: 1 sign bit, ``ebits`` exponent bits, ``mbits`` fraction bits.

    ``ieee_specials``: the all-ones exponent field encodes inf (fraction 0) and NaN (else), as in
    IEEE 754 (fp32, bf16, fp16, E5M2).  Otherwise the format is E4M3 "fn" style (torch.float8_e4m3fn):
    no infinities, only S.1111.111 is NaN, so the top binade holds finite values up to 448.
    """

    def __init__(self, name, ebits, mbits, bias, ieee_specials):
        self.name = name
        self.ebits = ebits
        self.mbits = mbits
        self.bias = bias
        self.ieee_specials = ieee_specials
        self.nbits = 1 + ebits + mbits
        self.emin = 1 - bias  # exponent of the smallest normal binade (subnormals keep it)
        emask = (1 << ebits) - 1
        if ieee_specials:
            self.emax = emask - 1 - bias
            self.max_finite = Fraction((2 << mbits) - 1, 1 << mbits) * _pow2(self.emax)
        else:
            # all-ones exponent is a finite binade, except its all-ones fraction (NaN)
            self.emax = emask - bias
            self.max_finite = Fraction((2 << mbits) - 2, 1 << mbits) * _pow2(self.emax)

    def __repr__(self):
        return f"Fmt({self.name})"


def _pow2(k: int) -> Fraction:
    return Fraction(1 << k) if k >= 0 else Fraction(1, 1 << -k)


FORMATS = {
    "float32": Fmt("float32", 8, 23, 127, True),
    "bfloat16": Fmt("bfloat16", 8, 7, 127, True),
    "float16": Fmt("float16", 5, 10, 15, True),
    "e4m3": Fmt("e4m3", 4, 3, 7, False),   # torch.float8_e4m3fn: max 448, NaN 0x7F/0xFF, no inf
    "e5m2": Fmt("e5m2", 5, 2, 15, True),   # torch.float8_e5m2: max 57344, inf 0x7C/0xFC
}
F32 = FORMATS["float32"]

# N3: canonical NaN bit patterns on NVIDIA GPUs (sign of the E4M3 NaN is [open]; E5M2 0x7F chosen
# by the brief, which is also a NaN in E5M2).
CANONICAL_NAN = {
    "float32": 0x7FFFFFFF,
    "bfloat16": 0x7FFF,
    "float16": 0x7FFF,
    "e4m3": 0x7F,
    "e5m2": 0x7F,
}


def _fmt(f) -> Fmt:
    if isinstance(f, Fmt):
        return f
    try:
        return FORMATS[f]
    except KeyError:
        raise ValueError(f"unknown format {f!r}") from None


def floor_log2(x: Fraction) -> int:
    """k with 2^k <= x < 2^(k+1), for a positive Fraction x (exact)."""
    if x <= 0:
        raise ValueError("floor_log2 needs x > 0")
    n, d = x.numerator, x.denominator
    k = n.bit_length() - d.bit_length()  # x in (2^(k-1), 2^(k+1))
    if k >= 0:
        ge = n >= (d << k)
    else:
        ge = (n << -k) >= d
    return k if ge else k - 1


def decode(bits: int, fmt) -> tuple:
    """Exact decode of a bit pattern into ``(kind, sign, mag)``."""
    f = _fmt(fmt)
    if not 0 <= bits < (1 << f.nbits):
        raise ValueError(f"{bits:#x} is not a {f.name} bit pattern")
    sign = bits >> (f.nbits - 1)
    ef = (bits >> f.mbits) & ((1 << f.ebits) - 1)
    mf = bits & ((1 << f.mbits) - 1)
    eall = (1 << f.ebits) - 1
    mall = (1 << f.mbits) - 1
    if f.ieee_specials and ef == eall:
        return ("inf", sign, Fraction(0)) if mf == 0 else ("nan", sign, Fraction(0))
    if not f.ieee_specials and ef == eall and mf == mall:
        return ("nan", sign, Fraction(0))
    if ef == 0:
        mag = mf * _pow2(f.emin - f.mbits)
    else:
        mag = ((1 << f.mbits) | mf) * _pow2(ef - f.bias - f.mbits)
    return ("fin", sign, mag)


def round_magnitude(mag: Fraction, fmt, mode: str = "rne") -> Fraction:
    """Round a magnitude >= 0 to the format's grid, ignoring the top of the range.

    The grid in binade [2^k, 2^(k+1)) is 2^(max(k, emin) - mbits) (subnormals share the emin
    quantum).  ``mode``: 'rne' = round to nearest, ties to even; 'trunc' = toward zero.  The result
    may exceed the format's largest finite value; the caller decides overflow.
    """
    f = _fmt(fmt)
    if mag < 0:
        raise ValueError("magnitude must be >= 0")
    if mag == 0:
        return Fraction(0)
    e = max(floor_log2(mag), f.emin)
    q = _pow2(e - f.mbits)
    n, rem = divmod(mag, q)  # n: int, rem: Fraction in [0, q)
    n = int(n)
    if mode == "rne":
        half = q / 2
        if rem > half or (rem == half and n % 2 == 1):
            n += 1
    elif mode != "trunc":
        raise ValueError(f"unknown rounding mode {mode!r}")
    return n * q


def encode_exact(sign: int, mag: Fraction, fmt) -> int:
    """Bit pattern of ``(-1)^sign * mag``; mag must be exactly representable and finite."""
    f = _fmt(fmt)
    sbit = sign << (f.nbits - 1)
    if mag == 0:
        return sbit
    if mag > f.max_finite:
        raise ValueError(f"{mag} exceeds the largest finite {f.name}")
    k = floor_log2(mag)
    if k < f.emin:
        m = mag / _pow2(f.emin - f.mbits)
        ef = 0
    else:
        m = mag / _pow2(k - f.mbits) - (1 << f.mbits)
        ef = k + f.bias
    if m.denominator != 1:
        raise ValueError(f"{mag} is not representable in {f.name}")
    return sbit | (ef << f.mbits) | int(m)


def _inf_bits(sign: int, f: Fmt) -> int:
    assert f.ieee_specials
    return (sign << (f.nbits - 1)) | (((1 << f.ebits) - 1) << f.mbits)


def encode_rne(val: tuple, fmt, overflow: str = "inf", nan_bits: int | None = None) -> int:
    """IEEE round-to-nearest-even conversion of an exact ``(kind, sign, mag)`` into ``fmt``.

    ``overflow='inf'``: IEEE overflow (the value rounded with unbounded exponent exceeds the largest
    finite value -> signed inf).  ``overflow='saturate'``: clamp to +-max finite, infinities too
    (satfinite conversion, N3; inf -> max is [open]).  A nonzero value that rounds to zero keeps
    its sign.  NaN -> ``nan_bits`` (default: the canonical NaN of the format).
    """
    f = _fmt(fmt)
    kind, sign, mag = val
    if kind == "nan":
        return CANONICAL_NAN[f.name] if nan_bits is None else nan_bits
    if kind == "inf":
        if overflow == "saturate":
            return encode_exact(sign, f.max_finite, f)
        return _inf_bits(sign, f)
    r = round_magnitude(mag, f, "rne")
    if r > f.max_finite:
        if overflow == "saturate":
            return encode_exact(sign, f.max_finite, f)
        return _inf_bits(sign, f)
    return encode_exact(sign, r, f)


def f32_value(bits: int) -> tuple:
    return decode(bits, F32)


def f32_bits_from_value(val: tuple) -> int:
    """fp32 RNE of an exact value, IEEE overflow to inf, NaN -> 0x7FFFFFFF."""
    return encode_rne(val, F32, overflow="inf")


def _signed(val: tuple) -> Fraction:
    kind, sign, mag = val
    assert kind == "fin"
    return -mag if sign else mag


# ---------------------------------------------------------------------------------------------
# FP8 operands (NUMERICS "Notation")
# ---------------------------------------------------------------------------------------------


def fp8_decode(code: int, fmt: str):
    """Exact value of an FP8 code: a Fraction, or 'nan', '+inf', '-inf'.

    The sign of zero is lost in the Fraction (0x80 decodes to Fraction(0)); use
    :func:`fp8_decode_signed` when it matters.
    """
    kind, sign, mag = decode(code, _fp8fmt(fmt))
    if kind == "nan":
        return "nan"
    if kind == "inf":
        return "-inf" if sign else "+inf"
    return -mag if sign else mag


def fp8_decode_signed(code: int, fmt: str) -> tuple:
    """``(kind, sign, mag)`` of an FP8 code, keeping the sign of zero."""
    return decode(code, _fp8fmt(fmt))


def _fp8fmt(fmt: str) -> Fmt:
    if fmt not in ("e4m3", "e5m2"):
        raise ValueError(f"fp8 format must be 'e4m3' or 'e5m2', got {fmt!r}")
    return FORMATS[fmt]


def _fp8_exp_sig(code: int, f: Fmt):
    """NUMERICS Notation: e(x) = unbiased exponent floored at emin (subnormals keep emin) and
    significand m(x) with mbits fraction bits (m < 1 for subnormals)."""
    ef = (code >> f.mbits) & ((1 << f.ebits) - 1)
    mf = code & ((1 << f.mbits) - 1)
    if ef == 0:
        return f.emin, Fraction(mf, 1 << f.mbits)
    return ef - f.bias, Fraction((1 << f.mbits) | mf, 1 << f.mbits)


# ---------------------------------------------------------------------------------------------
# N1: one tensor-core block
# ---------------------------------------------------------------------------------------------

_F32_NAN = 0x7FFFFFFF
_F32_EMIN = -126


def _trunc_to(x: Fraction, q: Fraction) -> Fraction:
    """Truncate toward zero (sign-magnitude) to a multiple of q > 0 (N1.3)."""
    n = abs(x) // q  # floor of the magnitude
    return n * q if x >= 0 else -(n * q)


def block(c_bits: int, a_codes, b_codes, fmt_a: str, fmt_b: str, frac_bits: int) -> int:
    """One tensor-core block (N1 steps 1-5) from fp32 accumulator bits c; returns fp32 bits.

    The caller passes exactly the B products of the block (padding = zero codes).

    Non-finite handling (N3 "Inf inputs follow IEEE"; the block-level form is the brief's):
    any NaN operand code (even one multiplied by zero), an inf*0 product, +inf and -inf products
    in one block, a NaN c, or c = +-inf meeting an opposite-sign inf product -> 0x7FFFFFFF;
    otherwise an inf product, or an inf c, gives that signed inf.

    Finite path:
      1. p_i = a_i * b_i exact, exponent e_i = e(a_i) + e(b_i) (operand exponents floored at emin),
         significand m(a_i) * m(b_i) in [0, 4), not renormalised.
      2. Zero products are excluded.  E = max(e_i over nonzero products, and exponent of c if
         c != 0, fp32 exponent floored at -126).  c = -0 counts as zero.
      3. Every term, c included, is truncated toward zero to a multiple of 2^(E - F).  (An
         all-zero block with c != 0 therefore still truncates c at its own exponent, seeds 002.)
      4. Exact sum.
      5. Normalise and truncate toward zero to F fraction bits: with 2^k <= |S| < 2^(k+1) the
         result is |S| truncated to a multiple of 2^(max(k, -126) - F).  The floor at -126 (a
         subnormal result on the grid 2^(-126-F)) is [open].  An exactly zero result (also an
         all-zero block with c = +-0, or anything truncating to zero) is +0.
         |result| >= 2^128 -> signed inf [open].
    """
    F = int(frac_bits)
    if not 0 <= F <= 23:
        # With F > 23 the normalised block result would not fit fp32; NUMERICS gives no rule for
        # the conversion (the experimental B200 preset is [open]), so the model refuses it.
        raise ValueError("frac_bits must be in [0, 23] for this model")
    if len(a_codes) != len(b_codes):
        raise ValueError("a_codes and b_codes differ in length")
    fa, fb = _fp8fmt(fmt_a), _fp8fmt(fmt_b)
    c = f32_value(c_bits)

    # ---- non-finite operands
    nan = c[0] == "nan"
    pos_inf = neg_inf = False
    ops = []
    for ac, bc in zip(a_codes, b_codes):
        av, bv = decode(ac, fa), decode(bc, fb)
        ops.append((ac, bc, av, bv))
        if av[0] == "nan" or bv[0] == "nan":
            nan = True
            continue
        if av[0] == "inf" or bv[0] == "inf":
            other = bv if av[0] == "inf" else av
            if other[0] == "fin" and other[2] == 0:
                nan = True  # inf * 0
                continue
            if av[1] ^ bv[1]:
                neg_inf = True
            else:
                pos_inf = True
    if pos_inf and neg_inf:
        nan = True
    if c[0] == "inf" and ((c[1] == 0 and neg_inf) or (c[1] == 1 and pos_inf)):
        nan = True
    if nan:
        return _F32_NAN
    if pos_inf or neg_inf:
        return _inf_bits(1 if neg_inf else 0, F32)
    if c[0] == "inf":
        return c_bits

    # ---- step 1: exact products with their nominal exponents
    terms = []  # (exponent, signed exact value)
    for ac, bc, av, bv in ops:
        if av[2] == 0 or bv[2] == 0:
            continue  # step 2: zero products excluded
        ea, ma = _fp8_exp_sig(ac, fa)
        eb, mb = _fp8_exp_sig(bc, fb)
        val = ma * mb * _pow2(ea + eb)
        assert val == av[2] * bv[2]
        terms.append((ea + eb, -val if (av[1] ^ bv[1]) else val))

    # ---- step 2: E
    exps = [e for e, _ in terms]
    cval = _signed(c)
    if cval != 0:
        exps.append(max(floor_log2(abs(cval)), _F32_EMIN))
        terms.append((None, cval))
    if not exps:
        return 0x00000000  # all-zero block, c = +-0: exact zero -> +0
    E = max(exps)

    # ---- steps 3-4: truncate every term to the 2^(E-F) grid, sum exactly
    q = _pow2(E - F)
    S = sum((_trunc_to(v, q) for _, v in terms), Fraction(0))
    if S == 0:
        return 0x00000000

    # ---- step 5: normalise, truncate to F fraction bits (exponent floored at -126 [open])
    k = max(floor_log2(abs(S)), _F32_EMIN)
    R = _trunc_to(S, _pow2(k - F))
    if R == 0:
        return 0x00000000
    sign = 1 if R < 0 else 0
    if abs(R) >= _pow2(128):
        return _inf_bits(sign, F32)  # [open]: overflow of a block result -> signed inf
    return encode_exact(sign, abs(R), F32)


def _padded(codes, start, stop, size):
    chunk = list(codes[start:stop])
    return chunk + [0] * (size - len(chunk))


def dot(a_codes, b_codes, c_bits, fmt_a, fmt_b, block_size, frac_bits) -> int:
    """A chain of blocks (N1.6, N2): c = block(c, next B products) over the vectors in order,
    the last block zero-padded, starting from ``c_bits``.  Empty vectors return ``c_bits``."""
    a_codes, b_codes = list(a_codes), list(b_codes)
    if len(a_codes) != len(b_codes):
        raise ValueError("a_codes and b_codes differ in length")
    B = int(block_size)
    if B < 1:
        raise ValueError("block_size must be >= 1")
    c = int(c_bits)
    for i in range(0, len(a_codes), B):
        c = block(c, _padded(a_codes, i, i + B, B), _padded(b_codes, i, i + B, B),
                  fmt_a, fmt_b, frac_bits)
    return c


# ---------------------------------------------------------------------------------------------
# IEEE binary32 arithmetic (exact, then one rounding)
# ---------------------------------------------------------------------------------------------


def fp32_add_bits(x_bits: int, y_bits: int) -> int:
    """IEEE binary32 x + y, round to nearest even, no flushing of subnormals.

    NaN -> 0x7FFFFFFF; +inf + -inf -> NaN; inf + finite -> that inf; exact zero sum of nonzero
    or mixed-sign operands -> +0; (-0) + (-0) -> -0; overflow -> signed inf.
    """
    x, y = f32_value(x_bits), f32_value(y_bits)
    if x[0] == "nan" or y[0] == "nan":
        return _F32_NAN
    if x[0] == "inf" and y[0] == "inf":
        return _F32_NAN if x[1] != y[1] else _inf_bits(x[1], F32)
    if x[0] == "inf":
        return _inf_bits(x[1], F32)
    if y[0] == "inf":
        return _inf_bits(y[1], F32)
    s = _signed(x) + _signed(y)
    if s == 0:
        if x[2] == 0 and y[2] == 0 and x[1] == 1 and y[1] == 1:
            return 0x80000000
        return 0x00000000
    return f32_bits_from_value(("fin", 1 if s < 0 else 0, abs(s)))


def _mul_exact(x: tuple, y: tuple) -> tuple:
    """Exact IEEE product value (before rounding) of two decoded values."""
    if x[0] == "nan" or y[0] == "nan":
        return ("nan", 0, Fraction(0))
    sign = x[1] ^ y[1]
    if x[0] == "inf" or y[0] == "inf":
        other = y if x[0] == "inf" else x
        if other[0] == "fin" and other[2] == 0:
            return ("nan", 0, Fraction(0))
        return ("inf", sign, Fraction(0))
    return ("fin", sign, x[2] * y[2])


def fp32_mul_bits(x_bits: int, y_bits: int) -> int:
    """IEEE binary32 x * y, RNE (sign of a zero result = XOR of signs)."""
    return f32_bits_from_value(_mul_exact(f32_value(x_bits), f32_value(y_bits)))


def _fma_plus_zero(x: tuple, y: tuple) -> tuple:
    """Exact value of fma(x, y, +0) before its single rounding: an exactly zero product gives +0
    (IEEE: (+-0) + (+0) = +0 in round-to-nearest); a nonzero product keeps its sign, so a result
    that then rounds to zero is a signed zero."""
    p = _mul_exact(x, y)
    if p[0] == "fin" and p[2] == 0:
        return ("fin", 0, Fraction(0))
    return p


# ---------------------------------------------------------------------------------------------
# N2: one GEMM output
# ---------------------------------------------------------------------------------------------

_CHAIN_LEN = 128  # slow accumulation: a new chain every 128 elements
_SERIAL_TILE = 64  # round-robin (RTX 4060) k-tile width
_CONTIG_TILE = 128  # contiguous (H100) k-tile width


def _part_result(a_codes, b_codes, ks, fmt_a, fmt_b, block_size, frac_bits, fast) -> int:
    """One part's value over its k sequence ``ks`` (N2).

    fast: one chain from +0 over the whole sequence.  slow: a new chain from +0 every 128 elements
    of the sequence, the chain results added in order into an fp32 accumulator starting at +0 with
    RNE.  An empty sequence gives +0.
    """
    a = [a_codes[k] for k in ks]
    b = [b_codes[k] for k in ks]
    if fast:
        return dot(a, b, 0, fmt_a, fmt_b, block_size, frac_bits)
    acc = 0x00000000
    for i in range(0, len(a), _CHAIN_LEN):
        chain = dot(a[i:i + _CHAIN_LEN], b[i:i + _CHAIN_LEN], 0, fmt_a, fmt_b, block_size, frac_bits)
        acc = fp32_add_bits(acc, chain)
    return acc


def combine_serial(parts) -> int:
    """((p0 + p1) + p2) + ... in fp32 RNE (N2, H100 contiguous and RTX 4060 customOption 0/2)."""
    parts = list(parts)
    if not parts:
        return 0x00000000
    acc = parts[0]
    for p in parts[1:]:
        acc = fp32_add_bits(acc, p)
    return acc


def combine_pairwise(parts) -> int:
    """RTX 4060 customOption 1 ('pairwise'), from the wording of docs/semantics.md, section 2.

    h = ceil(S/2), P = floor(S/2). The total starts as p0, then receives p_h; then p_(S-1) and
    p_(P-1), one at a time; then for j = 1 .. P-2 the sum (p_j + p_(j+h)), computed first; last,
    for odd S, p_(h-1). Every addition is fp32 round-to-nearest-even.
    """
    p = list(parts)
    if not p:
        return 0x00000000
    S = len(p)
    h = -(-S // 2)
    P = S // 2
    acc = p[0]
    used = [0]
    if P >= 1:
        acc = fp32_add_bits(acc, p[h])
        used.append(h)
    if P >= 2:
        acc = fp32_add_bits(acc, p[S - 1])
        acc = fp32_add_bits(acc, p[P - 1])
        used += [S - 1, P - 1]
        for j in range(1, P - 1):
            acc = fp32_add_bits(acc, fp32_add_bits(p[j], p[j + h]))
            used += [j, j + h]
    if S % 2 == 1 and S > 1:
        acc = fp32_add_bits(acc, p[h - 1])
        used.append(h - 1)
    assert sorted(used) == list(range(S)), "every part is added exactly once"
    return acc


def _contiguous_parts(K: int, S: int):
    """N2 H100: C = ceil(ceil(K/128)/S)*128; part j owns k in [j*C, min((j+1)*C, K)) (possibly
    empty, contributing +0; a warning case for the package, not for this model)."""
    tiles = -(-K // _CONTIG_TILE)
    C = -(-tiles // S) * _CONTIG_TILE
    return [list(range(min(j * C, K), min((j + 1) * C, K))) for j in range(S)]


def _round_robin_parts(K: int, S: int):
    """N2 RTX 4060: 64-wide k-tiles, tile t to part t mod S; a part's sequence is its tiles in
    increasing order (the last tile may be short; it is always the last of its part)."""
    parts = [[] for _ in range(S)]
    for t, start in enumerate(range(0, K, _SERIAL_TILE)):
        parts[t % S].extend(range(start, min(start + _SERIAL_TILE, K)))
    return parts


def accumulate(a_codes, b_codes, fmt_a, fmt_b, block_size, frac_bits, fast: bool,
               splits: int = 1, scheme: str = "none") -> int:
    """One GEMM accumulator (N2) for a row of A and a row of B^T of length K >= 0; fp32 bits.

    scheme 'none' (splits must be 1): fast = one chain from +0 over all K; slow = a new chain every
    128 elements, results added into an fp32 accumulator from +0 (RNE, in K order).
    'contiguous': H100 dealing, parts combined serially.  'serial': 64-wide round-robin dealing,
    parts combined serially.  'pairwise': round-robin dealing, combine_pairwise's order.
    """
    a_codes, b_codes = list(a_codes), list(b_codes)
    K = len(a_codes)
    if len(b_codes) != K:
        raise ValueError("a_codes and b_codes differ in length")
    S = int(splits)
    if S < 1:
        raise ValueError("splits must be >= 1")
    if scheme == "none":
        if S != 1:
            raise ValueError("scheme 'none' requires splits == 1")
        return _part_result(a_codes, b_codes, range(K), fmt_a, fmt_b, block_size, frac_bits, fast)
    if scheme == "contiguous":
        seqs, combine = _contiguous_parts(K, S), combine_serial
    elif scheme == "serial":
        seqs, combine = _round_robin_parts(K, S), combine_serial
    elif scheme == "pairwise":
        seqs, combine = _round_robin_parts(K, S), combine_pairwise
    else:
        raise ValueError(f"unknown split scheme {scheme!r}")
    parts = [_part_result(a_codes, b_codes, ks, fmt_a, fmt_b, block_size, frac_bits, fast)
             for ks in seqs]
    return combine(parts)


# ---------------------------------------------------------------------------------------------
# N3: the epilogue
# ---------------------------------------------------------------------------------------------

_OUT_DTYPES = ("float32", "bfloat16", "float16", "e4m3", "e5m2")


def epilogue(acc_bits: int, scale_a_bits: int, scale_b_bits: int, out_dtype: str,
             scale_result_bits: int | None = None) -> int:
    """N3: alpha = RN32(scale_a * scale_b); y = fma(acc, alpha, +0) rounded once to fp32.

    float32: y.  bfloat16 / float16: RNE from the fp32 y (double rounding), IEEE overflow to inf,
    subnormals rounded exactly.  e4m3 / e5m2: z = RN32(y * scale_result) when scale_result is given
    (else z = y), then RNE with saturation to +-max finite (inf saturates too [open]).
    scale_result is ignored for non-fp8 outputs ([open]; cuBLASLt's D scale is an fp8 feature).
    NaN anywhere (acc, scales, inf*0) -> the canonical NaN of the output dtype.
    Returns the output's bit pattern (32, 16 or 8 bits).
    """
    if out_dtype not in _OUT_DTYPES:
        raise ValueError(f"unknown out_dtype {out_dtype!r}")
    acc = f32_value(acc_bits)
    alpha = f32_value(fp32_mul_bits(scale_a_bits, scale_b_bits))
    y_bits = f32_bits_from_value(_fma_plus_zero(acc, alpha))
    y = f32_value(y_bits)
    if y[0] == "nan":
        return CANONICAL_NAN[out_dtype]
    if out_dtype == "float32":
        return y_bits
    if out_dtype in ("bfloat16", "float16"):
        return encode_rne(y, out_dtype, overflow="inf")
    z = y
    if scale_result_bits is not None:
        z = f32_value(fp32_mul_bits(y_bits, scale_result_bits))
        if z[0] == "nan":
            return CANONICAL_NAN[out_dtype]
    return encode_rne(z, out_dtype, overflow="saturate")


def _fma_exact(x: tuple, y: tuple, z: tuple) -> tuple:
    """Exact value of fma(x, y, z) before its one rounding (IEEE, round to nearest): NaN operands, inf * 0
    and inf - inf give NaN; an exactly zero sum is -0 only when the product and z are both -0."""
    p = _mul_exact(x, y)
    if p[0] == "nan" or z[0] == "nan":
        return ("nan", 0, Fraction(0))
    if p[0] == "inf" and z[0] == "inf":
        return ("nan", 0, Fraction(0)) if p[1] != z[1] else p
    if p[0] == "inf" or z[0] == "inf":
        return p if p[0] == "inf" else z
    s = _signed(p) + _signed(z)
    if s == 0:
        both_minus_zero = p[2] == 0 and z[2] == 0 and p[1] == 1 and z[1] == 1
        return ("fin", 1 if both_minus_zero else 0, Fraction(0))
    return ("fin", 1 if s < 0 else 0, abs(s))


def epilogue_bias(acc_bits: int, scale_a_bits: int, scale_b_bits: int, out_dtype: str, bias_bits: int,
                  order: str) -> int:
    """The two candidate epilogues with a bias (docs: mmaemu.epilogue, [Note: bias]); bf16/fp16 outputs only.

    The bias is a bf16 or fp16 bit pattern of ``out_dtype``'s format (exactly an fp32 value).
    ``order='after-scale'``: y = RN32(RN32(fma(acc, alpha, +0)) + bias), an fp32 addition.
    ``order='fused'``: y = RN32(acc * alpha + bias), one rounding of the exact fma.
    Then RNE to the output from the fp32 y; NaN -> the output's canonical NaN.
    """
    if out_dtype not in ("bfloat16", "float16"):
        raise ValueError("a bias takes a bf16 or fp16 output")
    acc = f32_value(acc_bits)
    alpha = f32_value(fp32_mul_bits(scale_a_bits, scale_b_bits))
    bias = decode(bias_bits, _fmt(out_dtype))
    bias32 = f32_bits_from_value(bias)
    if order == "after-scale":
        y_bits = fp32_add_bits(f32_bits_from_value(_fma_plus_zero(acc, alpha)), bias32)
    elif order == "fused":
        y_bits = f32_bits_from_value(_fma_exact(acc, alpha, f32_value(bias32)))
    else:
        raise ValueError(f"unknown order {order!r}")
    y = f32_value(y_bits)
    if y[0] == "nan":
        return CANONICAL_NAN[out_dtype]
    return encode_rne(y, out_dtype, overflow="inf")


def chains_sum(a_codes, b_codes, chains, fmt_a, fmt_b, block_size, frac_bits) -> int:
    """A thread block's accumulator as chains of blocks (docs: mmaemu.kernels._plans, written from CUTLASS's
    main loops, not from the package): each chain is a list of k indices, ``None`` standing for a padding
    position (a zero product in both operands); each chain is :func:`dot` from +0 over its positions in
    blocks of ``block_size``; the chain results are added in order into an fp32 accumulator from +0 (RNE)."""
    acc = 0x00000000
    for chain in chains:
        a = [0 if k is None else a_codes[k] for k in chain]
        b = [0 if k is None else b_codes[k] for k in chain]
        acc = fp32_add_bits(acc, dot(a, b, 0, fmt_a, fmt_b, block_size, frac_bits))
    return acc


def epilogue_rowwise(acc_bits: int, s1_bits: int, s2_bits: int, bias_bits: int | None, fused: bool = True,
                     plus_zero: bool = True) -> int:
    """The row-wise CUTLASS epilogue (written from torch 2.7.1's RowwiseScaledMM.cu EVT and the SASS the
    research quotes): t = RN32(acc * s1); y = RN32(t * s2 + beta) in one rounding (``fused``) or
    RN32(RN32(t * s2) + beta); beta = the bf16 bias widened exactly, or +0 without a bias (``plus_zero``;
    otherwise nothing is added); then bf16 RNE from y (overflow to inf); NaN -> bf16 0x7FFF."""
    t = fp32_mul_bits(acc_bits, s1_bits)
    if bias_bits is None and not plus_zero:
        y_bits = fp32_mul_bits(t, s2_bits)
    else:
        beta = f32_value(0) if bias_bits is None else decode(bias_bits, _fmt("bfloat16"))
        if fused:
            y_bits = f32_bits_from_value(_fma_exact(f32_value(t), f32_value(s2_bits), beta))
        else:
            y_bits = fp32_add_bits(fp32_mul_bits(t, s2_bits), f32_bits_from_value(beta))
    y = f32_value(y_bits)
    if y[0] == "nan":
        return CANONICAL_NAN["bfloat16"]
    return encode_rne(y, "bfloat16", overflow="inf")


def gemm_output(a_row_codes, b_row_codes, fmt_a, fmt_b, block_size, frac_bits, fast, splits,
                scheme, scale_a_bits, scale_b_bits, out_dtype, scale_result_bits=None) -> int:
    """One output element: N3's NaN rule first (any NaN code in the A row or the B row -> the
    canonical NaN of out_dtype, whatever it is multiplied by), else epilogue(accumulate(...))."""
    fa, fb = _fp8fmt(fmt_a), _fp8fmt(fmt_b)
    if any(decode(c, fa)[0] == "nan" for c in a_row_codes) or \
            any(decode(c, fb)[0] == "nan" for c in b_row_codes):
        if out_dtype not in _OUT_DTYPES:
            raise ValueError(f"unknown out_dtype {out_dtype!r}")
        return CANONICAL_NAN[out_dtype]
    acc = accumulate(a_row_codes, b_row_codes, fmt_a, fmt_b, block_size, frac_bits, fast,
                     splits, scheme)
    return epilogue(acc, scale_a_bits, scale_b_bits, out_dtype, scale_result_bits)


# ---------------------------------------------------------------------------------------------
# The zoo: fp16, bf16 and tf32 operands (written from docs/zoo.md, "One block, exactly")
# ---------------------------------------------------------------------------------------------

# operand formats: (decode format, emin); tf32 operands are fp32 bit patterns whose 13 low
# fraction bits are zero.
_ZOO_IN = {"fp16": ("float16", -14), "bf16": ("bfloat16", -126), "tf32": ("float32", -126)}


def _zoo_operand(bits: int, fmt: str):
    """(decoded value, e(x)) of one zoo operand: e(x) is the unbiased exponent floored at emin."""
    name, emin = _ZOO_IN[fmt]
    if fmt == "tf32" and bits & 0x1FFF:
        raise ValueError(f"{bits:#x} is not a tf32 value")
    val = decode(bits, name)
    if val[0] != "fin" or val[2] == 0:
        return val, None
    return val, max(floor_log2(val[2]), emin)


def zoo_block(c_bits: int, a_bits, b_bits, fmt: str, frac_bits: int, acc: str = "fp32") -> int:
    """One zoo block: B products of fp16/bf16/tf32 operands added to an fp32 (or fp16) accumulator.

    ``acc='fp32'``: c and the result are fp32 bit patterns; ``acc='fp16'``: fp16 bit patterns.

    Steps (docs/zoo.md):
      1. each product exact, exponent e(a) + e(b) (e floored at the format's emin; the significand
         product is not renormalised);
      2. zero products left out; E = max(product exponents, exponent of c when c != 0, floored at
         -126 for an fp32 c and -14 for an fp16 c);
      3. every term, c included, truncated toward zero to a multiple of 2^(E - F);
      4. exact sum; fp32: normalised and truncated toward zero to 24 significant bits (grid
         2^-149 below 2^-126), 2^128 or more -> signed inf; fp16: rounded to nearest even fp16
         once (grid 2^-24 below 2^-14), beyond the largest finite -> signed inf;
      5. a zero result (an exact zero sum, or one that rounds or truncates to zero) is +0;
      non-finite: the IEEE rules of the FP8 block (NaN operand, inf * 0, opposite infinities, NaN
      c -> canonical NaN; else an inf product, then an inf c, gives that inf).
    """
    F = int(frac_bits)
    out = FORMATS["float32"] if acc == "fp32" else FORMATS["float16"]
    c_floor = -126 if acc == "fp32" else -14
    c = decode(c_bits, out)
    nan = c[0] == "nan"
    pos_inf = neg_inf = False
    terms = []
    for ab, bb in zip(a_bits, b_bits):
        (av, ea), (bv, eb) = _zoo_operand(ab, fmt), _zoo_operand(bb, fmt)
        if av[0] == "nan" or bv[0] == "nan":
            nan = True
            continue
        if av[0] == "inf" or bv[0] == "inf":
            other = bv if av[0] == "inf" else av
            if other[0] == "fin" and other[2] == 0:
                nan = True
            elif av[1] ^ bv[1]:
                neg_inf = True
            else:
                pos_inf = True
            continue
        if ea is None or eb is None:
            continue  # a zero product
        val = av[2] * bv[2]
        terms.append((ea + eb, -val if av[1] ^ bv[1] else val))
    if pos_inf and neg_inf:
        nan = True
    if c[0] == "inf" and ((c[1] == 0 and neg_inf) or (c[1] == 1 and pos_inf)):
        nan = True
    if nan:
        return CANONICAL_NAN[out.name]
    if pos_inf or neg_inf:
        return _inf_bits(1 if neg_inf else 0, out)
    if c[0] == "inf":
        return c_bits
    exps = [e for e, _ in terms]
    cval = _signed(c)
    if cval != 0:
        exps.append(max(floor_log2(abs(cval)), c_floor))
        terms.append((None, cval))
    if not exps:
        return 0
    q = _pow2(max(exps) - F)
    S = sum((_trunc_to(v, q) for _, v in terms), Fraction(0))
    if S == 0:
        return 0
    sign = 1 if S < 0 else 0
    if acc == "fp32":
        k = max(floor_log2(abs(S)), -126)
        R = abs(_trunc_to(S, _pow2(k - 23)))
        if R == 0:
            return 0
        if R >= _pow2(128):
            return _inf_bits(sign, out)
        return encode_exact(sign, R, out)
    R = round_magnitude(abs(S), out, "rne")
    if R == 0:
        return 0
    if R > out.max_finite:
        return _inf_bits(sign, out)
    return encode_exact(sign, R, out)


def zoo_dot(a_bits, b_bits, c_bits, fmt: str, block_size: int, frac_bits: int, acc: str = "fp32") -> int:
    """Blocks of ``block_size`` chained over the vectors in order from ``c_bits``, the last padded with zeros."""
    a_bits, b_bits = list(a_bits), list(b_bits)
    if len(a_bits) != len(b_bits):
        raise ValueError("a_bits and b_bits differ in length")
    c = int(c_bits)
    for i in range(0, len(a_bits), block_size):
        c = zoo_block(c, _padded(a_bits, i, i + block_size, block_size),
                      _padded(b_bits, i, i + block_size, block_size), fmt, frac_bits, acc)
    return c


# ---------------------------------------------------------------------------------------------
# FP8 operands with an fp16 accumulator (written from docs/zoo.md, "FP8 operands with an fp16
# accumulator": sm_89's blocks, and the sm_90 / sm_100 rewrite into two fp16 HMMA steps)
# ---------------------------------------------------------------------------------------------

_F16 = FORMATS["float16"]


def fp8_block_fp16acc(c16_bits: int, a_codes, b_codes, fmt_a: str, fmt_b: str, frac_bits: int) -> int:
    """One sm_89 block with an fp16 accumulator; c and the result are fp16 bit patterns.

    1. products exact, exponent e(a) + e(b) (FP8 exponents floored at the format's emin);
    2. zero products left out; E = max(product exponents, exponent of c floored at -14 when c != 0);
    3. every term, c included, truncated toward zero to a multiple of 2^(E - F);
    4. exact sum, rounded once to nearest even fp16 (2^16 or more -> signed inf); a zero result is +0.
    Non-finite: NaN operand, inf * 0, opposite infinities, NaN c -> 0x7FFF; else an inf product, then
    an inf c, gives that inf.
    """
    fa, fb = _fp8fmt(fmt_a), _fp8fmt(fmt_b)
    c = decode(c16_bits, _F16)
    nan = c[0] == "nan"
    pos_inf = neg_inf = False
    terms = []
    for ac, bc in zip(a_codes, b_codes):
        av, bv = decode(ac, fa), decode(bc, fb)
        if av[0] == "nan" or bv[0] == "nan":
            nan = True
            continue
        if av[0] == "inf" or bv[0] == "inf":
            other = bv if av[0] == "inf" else av
            if other[0] == "fin" and other[2] == 0:
                nan = True
            elif av[1] ^ bv[1]:
                neg_inf = True
            else:
                pos_inf = True
            continue
        if av[2] == 0 or bv[2] == 0:
            continue
        ea, _ = _fp8_exp_sig(ac, fa)
        eb, _ = _fp8_exp_sig(bc, fb)
        val = av[2] * bv[2]
        terms.append((ea + eb, -val if av[1] ^ bv[1] else val))
    if pos_inf and neg_inf:
        nan = True
    if c[0] == "inf" and ((c[1] == 0 and neg_inf) or (c[1] == 1 and pos_inf)):
        nan = True
    if nan:
        return CANONICAL_NAN["float16"]
    if pos_inf or neg_inf:
        return _inf_bits(1 if neg_inf else 0, _F16)
    if c[0] == "inf":
        return c16_bits
    exps = [e for e, _ in terms]
    cval = _signed(c)
    if cval != 0:
        exps.append(max(floor_log2(abs(cval)), -14))
        terms.append((None, cval))
    if not exps:
        return 0
    q = _pow2(max(exps) - int(frac_bits))
    S = sum((_trunc_to(v, q) for _, v in terms), Fraction(0))
    return _fp16_from_exact(S)


def _fp16_from_exact(S: Fraction) -> int:
    """fp16 bits of an exact value rounded once to nearest even; zero -> +0; beyond the range -> signed inf."""
    if S == 0:
        return 0
    R = round_magnitude(abs(S), _F16, "rne")
    sign = 1 if S < 0 else 0
    if R == 0:
        return 0
    if R > _F16.max_finite:
        return _inf_bits(sign, _F16)
    return encode_exact(sign, R, _F16)


def fp8_dot_fp16acc_blocks(a_codes, b_codes, c16_bits, fmt_a, fmt_b, block_size: int = 16, frac_bits: int = 13) -> int:
    """sm_89: blocks of ``block_size`` in order from c, the last padded with zeros; fp16 bits."""
    a_codes, b_codes = list(a_codes), list(b_codes)
    c = int(c16_bits)
    for i in range(0, len(a_codes), block_size):
        c = fp8_block_fp16acc(c, _padded(a_codes, i, i + block_size, block_size),
                              _padded(b_codes, i, i + block_size, block_size), fmt_a, fmt_b, frac_bits)
    return c


def fp8_to_fp16_bits(code: int, fmt: str) -> int:
    """The fp16 bit pattern of an FP8 code's value (exact: both FP8 formats lie inside fp16); NaN -> 0x7FFF."""
    kind, sign, mag = decode(code, _fp8fmt(fmt))
    if kind == "nan":
        return CANONICAL_NAN["float16"]
    if kind == "inf":
        return _inf_bits(sign, _F16)
    return encode_exact(sign, mag, _F16)


def fp16_add_bits(x_bits: int, y_bits: int) -> int:
    """IEEE fp16 x + y rounded to nearest even: NaN -> 0x7FFF; +inf + -inf -> NaN; inf + finite -> that inf;
    an exact zero sum is +0 unless both are -0; beyond the range -> signed inf."""
    x, y = decode(x_bits, _F16), decode(y_bits, _F16)
    if x[0] == "nan" or y[0] == "nan":
        return CANONICAL_NAN["float16"]
    if x[0] == "inf" and y[0] == "inf":
        return CANONICAL_NAN["float16"] if x[1] != y[1] else _inf_bits(x[1], _F16)
    if x[0] == "inf" or y[0] == "inf":
        return _inf_bits((x if x[0] == "inf" else y)[1], _F16)
    s = _signed(x) + _signed(y)
    if s == 0:
        return 0x8000 if (x[1] == 1 and y[1] == 1 and x[2] == 0 and y[2] == 0) else 0
    return _fp16_from_exact(s)


def fp8_dot_fp16acc_rewrite(a_codes, b_codes, c16_bits, fmt_a, fmt_b, frac_bits: int = 25) -> int:
    """sm_90 / sm_100: per instruction of 32 products (the last padded with zeros), the operands converted to
    fp16; d = +0; d = the fp16 block (``zoo_block``, fp16 accumulator) of the products at positions k with
    k mod 4 in {0, 1}, then of those with k mod 4 in {2, 3}; then c = d + c (fp16, nearest even)."""
    a_codes, b_codes = list(a_codes), list(b_codes)
    if len(a_codes) != len(b_codes):
        raise ValueError("a_codes and b_codes differ in length")
    c = int(c16_bits)
    for i in range(0, len(a_codes), 32):
        a16 = [fp8_to_fp16_bits(x, fmt_a) for x in _padded(a_codes, i, i + 32, 32)]
        b16 = [fp8_to_fp16_bits(x, fmt_b) for x in _padded(b_codes, i, i + 32, 32)]
        d = 0
        for residues in ((0, 1), (2, 3)):
            ks = [k for k in range(32) if k % 4 in residues]
            d = zoo_block(d, [a16[k] for k in ks], [b16[k] for k in ks], "fp16", frac_bits, acc="fp16")
        c = fp16_add_bits(d, c)
    return c


# ---------------------------------------------------------------------------------------------
# Block-scaled kernels (written from the research's recipes, research/blockfp8.md section 6, not from the
# package): a fresh chain per k-tile, the chain result combined with the tile's two fp32 scales
# ---------------------------------------------------------------------------------------------


def block_scaled_output(a_codes, b_codes, sa_bits, sb_bits, *, chain: str, block_size: int, frac_bits: int,
                        k_block: int, combination: str, order: str, fused: bool, start: str, out_dtype: str) -> int:
    """One output of a block-scaled FP8 GEMM: row m of A and row n of B (E4M3 codes), the activation scales of row
    m and the weight scales of column block n // 128 (fp32 bits, one per 128-group of K).

    Per k-tile t of ``k_block`` elements from 0 (the last shorter): ``d`` = one chain from +0 over the tile
    (``chain='fp8'``: :func:`dot` of the codes; ``'fp16'``: the codes converted to fp16, exactly, and
    :func:`zoo_dot`), ``sa``, ``sb`` the scales of group ``t * k_block // 128``; then
    ``combination='scales-first'``: ``x = rn(sa sb)``, ``y = d``; ``'chain-first'``: ``x = rn(d first)``,
    ``y = second`` (``order='row-first'``: first = sa); the step ``acc = rn(x y + acc)`` once (``fused``) or
    ``rn(acc + rn(x y))``, from ``acc = +0`` (``start='plus-zero'``) or with the first product stored
    (``'first-step'``). A NaN code in either row gives the canonical NaN; the result is RNE to ``out_dtype``
    (overflow to infinity), fp32 as is.
    """
    fa = _fp8fmt("e4m3")
    if any(decode(c, fa)[0] == "nan" for c in list(a_codes) + list(b_codes)):
        return CANONICAL_NAN[out_dtype]
    k = len(a_codes)
    acc = None
    for k0 in range(0, k, k_block):
        a, b = list(a_codes[k0:k0 + k_block]), list(b_codes[k0:k0 + k_block])
        if chain == "fp8":
            d = dot(a, b, 0, "e4m3", "e4m3", block_size, frac_bits)
        else:
            d = zoo_dot([fp8_to_fp16_bits(c, "e4m3") for c in a], [fp8_to_fp16_bits(c, "e4m3") for c in b], 0, "fp16",
                        block_size, frac_bits, "fp32")
        sa, sb = sa_bits[k0 // 128], sb_bits[k0 // 128]
        if combination == "scales-first":
            x, y = fp32_mul_bits(sa, sb), d
        else:
            first, second = (sa, sb) if order == "row-first" else (sb, sa)
            x, y = fp32_mul_bits(d, first), second
        if acc is None and start == "first-step":
            acc = fp32_mul_bits(x, y)
            continue
        acc = 0x00000000 if acc is None else acc
        if fused:
            acc = f32_bits_from_value(_fma_exact(f32_value(x), f32_value(y), f32_value(acc)))
        else:
            acc = fp32_add_bits(acc, fp32_mul_bits(x, y))
    acc = 0x00000000 if acc is None else acc
    value = f32_value(acc)
    if value[0] == "nan":
        return CANONICAL_NAN[out_dtype]
    if out_dtype == "float32":
        return acc
    return encode_rne(value, out_dtype, overflow="inf")
