# mypy: ignore-errors
# (Triton kernels are typed by Triton's own ``tl.constexpr`` annotations and Triton ships no type stubs;
# the launcher, :mod:`mmaemu.backends._triton._convert`, wraps them in typed functions.)
"""The first exactly-defined formulation's kernel: truncation by the fp32 -> int32 conversion.

Imported lazily by :mod:`mmaemu.backends._triton._launch` (Triton decides at decoration time whether a
kernel is compiled for the GPU or run by its CPU interpreter, ``TRITON_INTERPRET=1``).

Every operation is exactly defined, so every GPU returns the same bits:

- products ``a*b`` of decoded FP8 values are fp32 multiplies of numbers with at most 4
  significant bits each: exact;
- the scale ``2**(F - E)`` and unit ``2**(E - F)`` are built as fp32 bit patterns (E clamped
  to [-100, 100], so both are normal numbers) and multiplying by them is exact, apart from
  values that fall below 2**-126, which are below 1 and truncate to 0 either way (so a GPU that
  flushes subnormals gives the same result);
- truncation toward zero is the fp32 -> int32 conversion (round toward zero, PTX ``cvt.rzi``);
- the truncated terms (integers below 2**(F + 2)) and the block sum are added as int32: exact
  and associative, so the reduction order cannot matter;
- normalising to F + 1 significant bits is an int -> fp32 conversion (exact below 2**24) and a
  mask of the fp32 significand; an integer zero converts to +0, so an exact zero result is +0;
- the fp32 additions of chain results and split parts are IEEE round-to-nearest-even, in the
  plan's order. Their operands are block results ``s * 2**(E - F)`` whose multiply is exact, so
  even if the compiler contracted a multiply and an add into an FMA the bits would not change;
  the launcher also passes ``enable_fp_fusion=False``.

It never calls ``tl.dot``: tensor-core rounding of the host GPU never enters.
"""

try:
    import triton
    import triton.language as tl
except ImportError:  # collected (e.g. by pytest --doctest-modules) without triton: define nothing
    triton = None

if triton is not None:
    from ._kernels_common import E_MAX, E_MIN, ZERO_EXP, exponent_of, output_tile, store_tile, sum_parts

    @triton.jit
    def _convert_chain(operands, k_start, k_stop, rm, rn, BLOCK: tl.constexpr, FRAC: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, UNUSED: tl.constexpr):
        """One chain of the first formulation over the permuted k range ``[k_start, k_stop)`` for the
        output rows ``rm`` and columns ``rn``, from c = +0: its fp32 result. ``operands`` is
        ``(va_ptr, ea_ptr, vb_ptr, eb_ptr, M, N)`` of :func:`chain_gemm_kernel`."""
        va_ptr, ea_ptr, vb_ptr, eb_ptr, M, N = operands
        mask_m = rm < M
        mask_n = rn < N
        zero_m = tl.zeros([BLOCK_M], dtype=tl.int32)  # k broadcast to a vector (a vector mask per load)
        zero_n = tl.zeros([BLOCK_N], dtype=tl.int32)
        # F fraction bits of an fp32 significand (toward zero, sign-magnitude)
        keep = ~((1 << (23 - FRAC)) - 1)
        c = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for b0 in range(k_start, k_stop, BLOCK):
            # E: the largest exponent of the nonzero products and of c (when c != 0)
            e_max = exponent_of(c)
            # a loop, not tl.static_range: unrolled, the hoisted loads spill registers
            for kk in range(BLOCK):
                k = b0 + kk
                k64 = k.to(tl.int64)  # offsets in int64: K * M may exceed 2**31
                ea = tl.load(ea_ptr + k64 * M + rm, mask=mask_m & (zero_m + k < k_stop), other=ZERO_EXP).to(tl.int32)
                eb = tl.load(eb_ptr + k64 * N + rn, mask=mask_n & (zero_n + k < k_stop), other=ZERO_EXP).to(tl.int32)
                e_max = tl.maximum(e_max, ea[:, None] + eb[None, :])
            e_max = tl.minimum(tl.maximum(e_max, E_MIN), E_MAX)
            scale = ((FRAC - e_max + 127) << 23).to(tl.float32, bitcast=True)  # 2**(F - E)
            # every term on the grid 2**(E - F), truncated toward zero, summed exactly as int32
            acc = (c * scale).to(tl.int32)
            for kk in range(BLOCK):
                k = b0 + kk
                k64 = k.to(tl.int64)
                va = tl.load(va_ptr + k64 * M + rm, mask=mask_m & (zero_m + k < k_stop), other=0.0)
                vb = tl.load(vb_ptr + k64 * N + rn, mask=mask_n & (zero_n + k < k_stop), other=0.0)
                acc += ((va[:, None] * vb[None, :]) * scale).to(tl.int32)
            # normalise: truncate to F + 1 significant bits, back to the scale of E
            kept = (acc.to(tl.float32).to(tl.int32, bitcast=True) & keep).to(tl.float32, bitcast=True)
            unit = ((e_max - FRAC + 127) << 23).to(tl.float32, bitcast=True)  # 2**(E - F)
            c = kept * unit
        return c

    @triton.jit(do_not_specialize=["M", "n_parts", "tiles_n"])
    def chain_gemm_kernel(
        va_ptr,  # fp32 [KP, M]: values of a, k-major, k in the plan's order
        ea_ptr,  # int8 [KP, M]: exponents of a (ZERO_EXP for zero codes)
        vb_ptr,  # fp32 [KP, N]
        eb_ptr,  # int8 [KP, N]
        out_ptr,  # fp32 [M, N]
        chain_ptr,  # int32 [n_chains + 1]: chain c covers [chain[c], chain[c + 1]) of the permuted k
        part_ptr,  # int32 [n_parts + 1]: part p owns chains [part[p], part[p + 1])
        order_ptr,  # int32 [n_parts]: the order in which part results are taken
        role_ptr,  # int32 [n_parts]: 0 joins the total, 1 held, 2 added to the held one, the pair sum joins
        M,
        N,
        n_parts,
        tiles_n,  # output tiles along N: the one grid axis holds every tile, row-major
        BLOCK: tl.constexpr, FRAC: tl.constexpr,  # the preset's block of products and fraction bits
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,  # the output tile
    ):
        rm, rn = output_tile(tiles_n, BLOCK_M, BLOCK_N)
        total = sum_parts(_convert_chain, (va_ptr, ea_ptr, vb_ptr, eb_ptr, M, N), chain_ptr, part_ptr, order_ptr,
                          role_ptr, n_parts, rm, rn, BLOCK, FRAC, BLOCK_M, BLOCK_N, False, False)
        store_tile(out_ptr, total, rm, rn, M, N)
