# mypy: ignore-errors
# (Triton kernels are typed by Triton's own ``tl.constexpr`` annotations and Triton ships no type stubs;
# the launcher, :mod:`mmaemu.backends._triton._rz`, wraps them in typed functions.)
"""The second exactly-defined formulation's kernels: round-toward-zero fmas into accumulators held in
one binade, no conversion and no masks (:func:`chain_gemm_rz_kernel`, one program per tile walking
every chain and part; :func:`chains_rz_kernel`, one program per chain and tile).

Imported lazily by :mod:`mmaemu.backends._triton._launch`. Every operation is exactly defined (see
:func:`chain_gemm_rz_kernel`), and no kernel here calls ``tl.dot``: the host GPU's tensor-core
rounding never enters.
"""

try:
    import triton
    import triton.language as tl
except ImportError:  # collected (e.g. by pytest --doctest-modules) without triton: define nothing
    triton = None

if triton is not None:
    from ._kernels_common import E_MAX, E_MIN, chain_tile, exponent_of, output_tile, store_tile, sum_parts

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
    def _add_term(ap, an, bp, bn, acc_all, acc_neg, u, inv_u, NATIVE_RZ: tl.constexpr):
        """One k of a block: ``|a| |b|`` into ``acc_all``, and ``|a-| |b+|`` then ``|a+| |b-|`` (the negative
        products' magnitudes) into ``acc_neg``, each by :func:`_fma_rz`. ``ap``, ``an`` are the rows' positive
        and negative parts, ``bp``, ``bn`` the columns'. Written out in one function, not three calls: Triton's
        interpreter pays for every nested jit call (about a third of its time here), the compiler inlines both
        alike."""
        if NATIVE_RZ:
            acc_all = _libdevice.fma_rz((ap + an)[:, None], (bp + bn)[None, :], acc_all)
            acc_neg = _libdevice.fma_rz(an[:, None], bp[None, :], acc_neg)
            acc_neg = _libdevice.fma_rz(ap[:, None], bn[None, :], acc_neg)
        else:  # _fma_rz's twin
            acc_all = acc_all + tl.floor((ap + an)[:, None] * (bp + bn)[None, :] * inv_u) * u
            acc_neg = acc_neg + tl.floor(an[:, None] * bp[None, :] * inv_u) * u
            acc_neg = acc_neg + tl.floor(ap[:, None] * bn[None, :] * inv_u) * u
        return acc_all, acc_neg

    @triton.jit
    def _rz_chain(operands, k_start, k_stop, rm, rn, BLOCK: tl.constexpr, FRAC: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NATIVE_RZ: tl.constexpr):
        """One chain of the second formulation over the padded k range ``[k_start, k_stop)`` for the
        output rows ``rm`` and columns ``rn``, from c = +0: its fp32 result (see chain_gemm_rz_kernel).
        ``operands`` is ``(ap_ptr, an_ptr, ea_ptr, bp_ptr, bn_ptr, eb_ptr, MP, NP)``."""
        ap_ptr, an_ptr, ea_ptr, bp_ptr, bn_ptr, eb_ptr, MP, NP = operands
        keep = ~((1 << (23 - FRAC)) - 1)
        one = tl.full([BLOCK_M, BLOCK_N], 1.0, dtype=tl.float32)
        c = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for b0 in range(k_start, k_stop, BLOCK):
            e_max = exponent_of(c)
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
                acc_all, acc_neg = _add_term(ap, an, bp, bn, acc_all, acc_neg, u, inv_u, NATIVE_RZ)
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
        BLOCK: tl.constexpr, FRAC: tl.constexpr,  # the preset's block of products and fraction bits
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,  # the output tile
        NATIVE_RZ: tl.constexpr,
        ONE_CHAIN: tl.constexpr,  # one part of one chain (fast accumulation, no split): no combination state
    ):
        """The second formulation: no fp32 -> int32 conversion, no masks in the loops.

        Per block: the exponent pass gives E; then every term goes into one of two accumulators held
        in the binade [2**23 u, 2**24 u), u = 2**(E - F), where a round-toward-zero fma adds it
        truncated to a multiple of u: ``U`` takes |a| |b| of every term, ``N`` those of the negative
        terms (|a-| |b+| and |a+| |b-|), so the block sum, each term truncated toward zero, is
        ``(U - C) - 2 (N - C)``, exact in fp32. ``c`` enters both the same way (its magnitude into U,
        and into N when negative). Valid while (B + 1) 2**(F + 2) <= 2**22 (rz.rz_expresses).
        """
        rm, rn = output_tile(tiles_n, BLOCK_M, BLOCK_N)
        total = sum_parts(_rz_chain, (ap_ptr, an_ptr, ea_ptr, bp_ptr, bn_ptr, eb_ptr, MP, NP), chain_ptr, part_ptr,
                          order_ptr, role_ptr, n_parts, rm, rn, BLOCK, FRAC, BLOCK_M, BLOCK_N, NATIVE_RZ, ONE_CHAIN)
        store_tile(out_ptr, total, rm, rn, M, N)

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
        BLOCK: tl.constexpr, FRAC: tl.constexpr,  # the preset's block of products and fraction bits
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,  # the output tile
        NATIVE_RZ: tl.constexpr,
    ):
        """Parallelism for few outputs: one program per (chain, output tile), program id
        ``chain * tiles + tile``. Each writes its chain's result; the launcher then adds the chain
        results of every part in K order and combines the parts in the plan's order, with the same
        fp32 additions (round to nearest even) as chain_gemm_rz_kernel, so the bits are the same."""
        ch, pid_m, pid_n, rm, rn = chain_tile(tiles, tiles_n, BLOCK_M, BLOCK_N)
        k_start = tl.load(chain_ptr + ch)
        k_stop = tl.load(chain_ptr + ch + 1)
        c = _rz_chain((ap_ptr, an_ptr, ea_ptr, bp_ptr, bn_ptr, eb_ptr, MP, NP), k_start, k_stop, rm, rn,
                      BLOCK, FRAC, BLOCK_M, BLOCK_N, NATIVE_RZ)
        # a 64-bit base per chain and tile, 32-bit offsets inside it (the launcher checks BLOCK_M NP < 2**31):
        # 64-bit offsets spilled 16 bytes with ada's 64 x 64 / 2-warp tile on sm_86 and sm_89 (Triton 3.6)
        out_tile = out_ptr + tl.cast(ch, tl.int64) * MP * NP + (pid_m * BLOCK_M).to(tl.int64) * NP + pid_n * BLOCK_N
        lm = tl.arange(0, BLOCK_M)
        ln = tl.arange(0, BLOCK_N)
        tl.store(out_tile + lm[:, None] * NP + ln[None, :], c)
