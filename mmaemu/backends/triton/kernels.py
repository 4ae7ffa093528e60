# mypy: ignore-errors
# (Triton kernels are typed by Triton's own ``tl.constexpr`` annotations and Triton ships no type
# stubs; everything this module exports is wrapped by typed functions in triton_backend.py.)
"""The Triton kernels of the ``triton`` backend: one tensor-core chain schedule per output tile.

Two exactly-defined formulations of the same arithmetic: :func:`chain_gemm_rz_kernel` (the default
where it applies, see its docstring: round-toward-zero fmas, no conversion, no masks; and
:func:`chains_rz_kernel`, one program per chain and tile) and :func:`chain_gemm_kernel` (the first:
truncation by the fp32 -> int32 conversion), described here. A third, :func:`chain_gemm_native_kernel`,
is the sm_90 GPU's own FP8 instruction, used only where that instruction is the preset (see its
docstring).

Imported lazily by :mod:`mmaemu.backends.triton_backend` (Triton decides at decoration time
whether a kernel is compiled for the GPU or run by its CPU interpreter, ``TRITON_INTERPRET=1``).

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

The exactly-defined kernels never call ``tl.dot``: tensor-core rounding of the host GPU never enters.
"""

try:
    import triton
    import triton.language as tl
except ImportError:  # collected (e.g. by pytest --doctest-modules) without triton: define nothing
    triton = None

if triton is not None:
    #: int8 exponent of zero (and NaN/Inf) codes: two of them, or one plus any real exponent (<= 15),
    #: stay far below every real product exponent (>= -28) and every reachable accumulator exponent.
    ZERO_EXP = tl.constexpr(-100)
    #: E is clamped into [E_MIN, E_MAX] so that 2**(F - E) and 2**(E - F) are normal fp32 numbers.
    E_MIN = tl.constexpr(-100)
    E_MAX = tl.constexpr(100)

    @triton.jit
    def _exponent_of(c):
        """E of the accumulator entering a block: its exponent when nonzero, else far below every
        product's (so it never sets E)."""
        c_bits = c.to(tl.int32, bitcast=True)
        e_c = tl.maximum(((c_bits >> 23) & 0xFF) - 127, -126)
        return tl.where((c_bits & 0x7FFFFFFF) != 0, e_c, 4 * ZERO_EXP)

    @triton.jit
    def _combine(q, role, part_total, held, total):
        """One step of the split scheme's combination (accumulation.flat_combination), fp32 RNE: role 0
        joins the total, 1 is held, 2 is added to the held one and the pair joins. Returns (held, total)."""
        addend = tl.where(role == 2, held + part_total, part_total)
        held = tl.where(role == 1, part_total, held)
        total = tl.where(role == 1, total, tl.where(q == 0, addend, total + addend))
        return held, total

    # M, n_parts and tiles_n vary freely between calls: not specialising on them keeps the variants few.
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
        BLOCK: tl.constexpr,
        FRAC: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        pid = tl.program_id(0)
        pid_m = pid // tiles_n
        pid_n = pid % tiles_n
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_m = rm < M
        mask_n = rn < N
        zero_m = tl.zeros([BLOCK_M], dtype=tl.int32)  # k broadcast to a vector (a vector mask per load)
        zero_n = tl.zeros([BLOCK_N], dtype=tl.int32)
        # F fraction bits of an fp32 significand (toward zero, sign-magnitude)
        keep = ~((1 << (23 - FRAC)) - 1)
        total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        held = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for q in range(0, n_parts):
            part = tl.load(order_ptr + q)
            role = tl.load(role_ptr + q)
            first_chain = tl.load(part_ptr + part)
            last_chain = tl.load(part_ptr + part + 1)
            part_total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for ch in range(first_chain, last_chain):
                k_start = tl.load(chain_ptr + ch)
                k_stop = tl.load(chain_ptr + ch + 1)
                c = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                for b0 in range(k_start, k_stop, BLOCK):
                    # E: the largest exponent of the nonzero products and of c (when c != 0)
                    e_max = _exponent_of(c)
                    # a loop, not tl.static_range: unrolled, the hoisted loads spill registers
                    for kk in range(0, BLOCK):
                        k = b0 + kk
                        k64 = k.to(tl.int64)  # offsets in int64: K * M may exceed 2**31
                        ea = tl.load(ea_ptr + k64 * M + rm, mask=mask_m & (zero_m + k < k_stop), other=ZERO_EXP).to(tl.int32)
                        eb = tl.load(eb_ptr + k64 * N + rn, mask=mask_n & (zero_n + k < k_stop), other=ZERO_EXP).to(tl.int32)
                        e_max = tl.maximum(e_max, ea[:, None] + eb[None, :])
                    e_max = tl.minimum(tl.maximum(e_max, E_MIN), E_MAX)
                    scale = ((FRAC - e_max + 127) << 23).to(tl.float32, bitcast=True)  # 2**(F - E)
                    # every term on the grid 2**(E - F), truncated toward zero, summed exactly as int32
                    acc = (c * scale).to(tl.int32)
                    for kk in range(0, BLOCK):
                        k = b0 + kk
                        k64 = k.to(tl.int64)
                        va = tl.load(va_ptr + k64 * M + rm, mask=mask_m & (zero_m + k < k_stop), other=0.0)
                        vb = tl.load(vb_ptr + k64 * N + rn, mask=mask_n & (zero_n + k < k_stop), other=0.0)
                        acc += ((va[:, None] * vb[None, :]) * scale).to(tl.int32)
                    # normalise: truncate to F + 1 significant bits, back to the scale of E
                    kept = (acc.to(tl.float32).to(tl.int32, bitcast=True) & keep).to(tl.float32, bitcast=True)
                    unit = ((e_max - FRAC + 127) << 23).to(tl.float32, bitcast=True)  # 2**(E - F)
                    c = kept * unit
                part_total = part_total + c  # fp32 RNE: chain results in K order, from +0
            held, total = _combine(q, role, part_total, held, total)
        offs = rm.to(tl.int64)[:, None] * N + rn[None, :]
        tl.store(out_ptr + offs, total, mask=mask_m[:, None] & mask_n[None, :])

    try:  # the device library's round-toward-zero fma (CUDA); the interpreter runs the twin instead
        from triton.language.extra import libdevice as _libdevice
    except ImportError:  # pragma: no cover - older Triton
        _libdevice = None

    @triton.jit
    def _fma_rz(x, y, d, u, inv_u, NATIVE_RZ: tl.constexpr):
        """``round_toward_zero(x * y + d)`` for ``x * y >= 0`` and ``d`` in ``[2**23 u, 2**24 u)``: ``d``
        plus ``x * y`` truncated to a multiple of ``u`` (ulp(d) = u, so this is exactly fma.rz). The
        twin (``NATIVE_RZ`` False, the interpreter's) computes the same value from exact steps:
        ``x * y`` (at most 8 significant bits), the power-of-two scale, floor, and a sum that lands on
        the grid of ``d``'s binade."""
        if NATIVE_RZ:
            return _libdevice.fma_rz(x, y, d)
        else:
            return d + tl.floor(x * y * inv_u) * u

    @triton.jit
    def _rz_chain(ap_ptr, an_ptr, ea_ptr, bp_ptr, bn_ptr, eb_ptr, k_start, k_stop, rm, rn, MP, NP,
                  BLOCK: tl.constexpr, FRAC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  NATIVE_RZ: tl.constexpr):
        """One chain of the second formulation over the padded k range ``[k_start, k_stop)`` for the
        output rows ``rm`` and columns ``rn``, from c = +0: its fp32 result (see chain_gemm_rz_kernel)."""
        keep = ~((1 << (23 - FRAC)) - 1)
        one = tl.full([BLOCK_M, BLOCK_N], 1.0, dtype=tl.float32)
        c = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for b0 in range(k_start, k_stop, BLOCK):
            e_max = _exponent_of(c)
            a_e = ea_ptr + tl.cast(b0, tl.int64) * MP + rm
            b_e = eb_ptr + tl.cast(b0, tl.int64) * NP + rn
            for kk in tl.range(0, BLOCK, loop_unroll_factor=1):  # one k per iteration
                ea = tl.load(a_e)
                eb = tl.load(b_e)
                e_max = tl.maximum(e_max, ea[:, None] + eb[None, :])
                a_e += MP
                b_e += NP
            e_max = tl.minimum(tl.maximum(e_max, E_MIN), E_MAX)
            big = (((23 + e_max - FRAC + 127) << 23) | (1 << 22)).to(tl.float32, bitcast=True)  # 1.5 2**23 u
            u = ((e_max - FRAC + 127) << 23).to(tl.float32, bitcast=True)
            inv_u = ((FRAC - e_max + 127) << 23).to(tl.float32, bitcast=True)
            acc_all = _fma_rz(tl.abs(c), one, big, u, inv_u, NATIVE_RZ)
            acc_neg = tl.where(c < 0, acc_all, big)  # c, e_max and big are dead from here
            a_off = tl.cast(b0, tl.int64) * MP + rm
            b_off = tl.cast(b0, tl.int64) * NP + rn
            for kk in tl.range(0, BLOCK, loop_unroll_factor=1):
                ap = tl.load(ap_ptr + a_off)
                an = tl.load(an_ptr + a_off)
                bp = tl.load(bp_ptr + b_off)
                bn = tl.load(bn_ptr + b_off)
                acc_all = _fma_rz((ap + an)[:, None], (bp + bn)[None, :], acc_all, u, inv_u, NATIVE_RZ)
                acc_neg = _fma_rz(an[:, None], bp[None, :], acc_neg, u, inv_u, NATIVE_RZ)
                acc_neg = _fma_rz(ap[:, None], bn[None, :], acc_neg, u, inv_u, NATIVE_RZ)
                a_off += MP
                b_off += NP
            # big from acc_all's binade (ulp u), not kept live through the loop; then the block sum
            # (acc_all - big) - 2 (acc_neg - big), exact: multiples of u below 2**23 u
            big = ((acc_all.to(tl.int32, bitcast=True) & 0x7F800000) | (1 << 22)).to(tl.float32, bitcast=True)
            s = (acc_all - big) - 2.0 * (acc_neg - big)
            c = (s.to(tl.int32, bitcast=True) & keep).to(tl.float32, bitcast=True)  # F + 1 bits
        return c

    @triton.jit(do_not_specialize=["M", "N", "MP", "NP", "n_parts", "tiles_n"])
    def chain_gemm_rz_kernel(
        ap_ptr,  # fp32 [KP, MP]: max(a, 0), k-major, k in the plan's order, each chain padded to BLOCK
        an_ptr,  # fp32 [KP, MP]: max(-a, 0)
        ea_ptr,  # int32 [KP, MP]: exponents of a (ZERO_EXP for zero codes and padding)
        bp_ptr,  # fp32 [KP, NP]
        bn_ptr,  # fp32 [KP, NP]
        eb_ptr,  # int32 [KP, NP]
        out_ptr,  # fp32 [M, N]
        chain_ptr,  # int32 [n_chains + 1]: chain c covers [chain[c], chain[c + 1]) of the padded k
        part_ptr,  # int32 [n_parts + 1]
        order_ptr,  # int32 [n_parts]
        role_ptr,  # int32 [n_parts]
        M,
        N,
        MP,  # M padded to BLOCK_M (the row stride of the a arrays)
        NP,  # N padded to BLOCK_N
        n_parts,
        tiles_n,
        BLOCK: tl.constexpr,
        FRAC: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        NATIVE_RZ: tl.constexpr,
        ONE_CHAIN: tl.constexpr,  # one part of one chain (fast accumulation, no split): no combination state
    ):
        """The second formulation: no fp32 -> int32 conversion, no masks in the loops.

        Per block: the exponent pass gives E; then every term goes into one of two accumulators held
        in the binade [2**23 u, 2**24 u), u = 2**(E - F), where a round-toward-zero fma adds it
        truncated to a multiple of u: ``U`` takes |a| |b| of every term, ``N`` those of the negative
        terms (|a-| |b+| and |a+| |b-|), so the block sum, each term truncated toward zero, is
        ``(U - C) - 2 (N - C)``, exact in fp32. ``c`` enters both the same way (its magnitude into U,
        and into N when negative). Valid while (B + 1) 2**(F + 2) <= 2**22 (backend.rz_expresses).
        """
        pid = tl.program_id(0)
        pid_m = pid // tiles_n
        pid_n = pid % tiles_n
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        held = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for q in range(0, n_parts):
            part = tl.load(order_ptr + q)
            role = tl.load(role_ptr + q)
            first_chain = tl.load(part_ptr + part)
            last_chain = tl.load(part_ptr + part + 1)
            part_total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for ch in range(first_chain, last_chain):
                k_start = tl.load(chain_ptr + ch)
                k_stop = tl.load(chain_ptr + ch + 1)
                c = _rz_chain(ap_ptr, an_ptr, ea_ptr, bp_ptr, bn_ptr, eb_ptr, k_start, k_stop, rm, rn, MP, NP,
                              BLOCK, FRAC, BLOCK_M, BLOCK_N, NATIVE_RZ)
                if ONE_CHAIN:
                    total = c
                else:
                    part_total = part_total + c  # fp32 RNE: chain results in K order, from +0
            if not ONE_CHAIN:
                held, total = _combine(q, role, part_total, held, total)
        offs = rm.to(tl.int64)[:, None] * N + rn[None, :]
        tl.store(out_ptr + offs, total, mask=(rm < M)[:, None] & (rn < N)[None, :])

    @triton.jit
    def _chain_tile(tiles, tiles_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """Program id ``g * tiles + tile`` (one program per chain and output tile) -> (g, the tile's row
        index, its column index, its rows, its columns)."""
        pid = tl.program_id(0)
        tile = pid % tiles
        pid_m = tile // tiles_n
        pid_n = tile % tiles_n
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        return pid // tiles, pid_m, pid_n, rm, rn

    @triton.jit(do_not_specialize=["MP", "NP", "tiles", "tiles_n"])
    def chains_rz_kernel(
        ap_ptr,  # as chain_gemm_rz_kernel
        an_ptr,
        ea_ptr,
        bp_ptr,
        bn_ptr,
        eb_ptr,
        out_ptr,  # fp32 [n_chains, MP, NP]: every chain's result, for every (padded) output
        chain_ptr,  # int32 [n_chains + 1]
        MP,
        NP,
        tiles,  # output tiles (MP / BLOCK_M) * (NP / BLOCK_N)
        tiles_n,
        BLOCK: tl.constexpr,
        FRAC: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        NATIVE_RZ: tl.constexpr,
    ):
        """Parallelism for few outputs: one program per (chain, output tile), program id
        ``chain * tiles + tile``. Each writes its chain's result; the launcher then adds the chain
        results of every part in K order and combines the parts in the plan's order, with the same
        fp32 additions (round to nearest even) as chain_gemm_rz_kernel, so the bits are the same."""
        ch, _, _, rm, rn = _chain_tile(tiles, tiles_n, BLOCK_M, BLOCK_N)
        k_start = tl.load(chain_ptr + ch)
        k_stop = tl.load(chain_ptr + ch + 1)
        c = _rz_chain(ap_ptr, an_ptr, ea_ptr, bp_ptr, bn_ptr, eb_ptr, k_start, k_stop, rm, rn, MP, NP,
                      BLOCK, FRAC, BLOCK_M, BLOCK_N, NATIVE_RZ)
        offs = tl.cast(ch, tl.int64) * MP * NP + rm.to(tl.int64)[:, None] * NP + rn[None, :]
        tl.store(out_ptr + offs, c)

    @triton.jit(do_not_specialize=["M", "N", "chain0", "tiles", "tiles_n"])
    def chain_gemm_native_kernel(
        a_ptr,  # fp8 [MP, KP]: codes of a (NaN and Inf codes as +0), k in the plan's order, chains padded to DOT_K
        b_ptr,  # fp8 [NP, KP]
        out_ptr,  # fp32 [G, M, N]: the results of chains chain0 .. chain0 + G - 1
        chain_ptr,  # int32 [n_chains + 1]: chain c covers [chain[c], chain[c + 1]) of the padded k
        chain0,
        M,
        N,
        KP,  # padded K: the row stride of a and b
        tiles,  # output tiles per chain
        tiles_n,
        DOT_K: tl.constexpr,  # k per tl.dot: the instruction's K (32 for FP8 on sm_90)
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        """The sm_90 formulation: the GPU's own FP8 tensor-core instruction, one ``tl.dot`` of K = B per
        block, each chain's accumulator passed from block to block from +0 (no promotion: Triton's default
        on sm_90 lets FP8 dots accumulate in the instruction's accumulator). One program per (chain,
        output tile), program id ``(chain - chain0) * tiles + tile``, holding one accumulator (no
        combination state: no spills); the launcher adds the chain results per part in K order and
        combines the parts in the plan's order in fp32, as for chains_rz_kernel. Its bits are the
        hardware's, not exactly-defined IEEE steps: the backend uses it only on sm_90 for the arithmetic
        the instruction is (B = 32, F = 13, aligned c, truncation), and only after the self-test found it
        equal to the reference there; the interpreter cannot run it (its tl.dot is a float matmul), the
        RZ kernels are its twin."""
        g, pid_m, pid_n, rm, rn = _chain_tile(tiles, tiles_n, BLOCK_M, BLOCK_N)
        rk = tl.arange(0, DOT_K)
        a_offs = tl.arange(0, BLOCK_M)[:, None] * KP + rk[None, :]
        b_offs = tl.arange(0, BLOCK_N)[None, :] * KP + rk[:, None]
        k_start = tl.load(chain_ptr + chain0 + g)
        k_stop = tl.load(chain_ptr + chain0 + g + 1)
        # a 64-bit base per tile and chain, 32-bit offsets inside the tile (BLOCK_M KP < 2**31)
        a_base = a_ptr + (pid_m * BLOCK_M).to(tl.int64) * KP + k_start
        b_base = b_ptr + (pid_n * BLOCK_N).to(tl.int64) * KP + k_start
        c = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for _ in range(k_start, k_stop, DOT_K):
            c = tl.dot(tl.load(a_base + a_offs), tl.load(b_base + b_offs), c)
            a_base += DOT_K
            b_base += DOT_K
        offs = g.to(tl.int64) * M * N + rm.to(tl.int64)[:, None] * N + rn[None, :]
        tl.store(out_ptr + offs, c, mask=(rm < M)[:, None] & (rn < N)[None, :])
