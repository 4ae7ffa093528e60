# mypy: ignore-errors
# (Triton kernels are typed by Triton's own ``tl.constexpr`` annotations and Triton ships no type stubs;
# the launcher, :mod:`mmaemu.backends._triton._native`, wraps it in typed functions.)
"""The sm_90 formulation's kernel: the GPU's own FP8 tensor-core instruction (``wgmma``, SASS ``QGMMA``).

Imported lazily by :mod:`mmaemu.backends._triton._launch`. Its bits are the hardware's, not exactly-defined
IEEE steps: the backend runs it only on compute capability 9.0 for the arithmetic the instruction is
(B = 32, F = 13, aligned ``c``, truncation), and only after the self-test found it equal to the
reference there. The interpreter cannot run the instruction (its ``tl.dot`` is a float matmul); the
RZ kernels are its exactly-defined twin.
"""

try:
    import triton
    import triton.language as tl
except ImportError:  # collected (e.g. by pytest --doctest-modules) without triton: define nothing
    triton = None

if triton is not None:
    from ._kernels_common import chain_tile

    # M, N and the grid vary freely between calls: not specialising on them keeps the variants few. K and
    # the row strides are specialised (Triton marks an int divisible by 16 as such), which with the
    # alignment hints on the part bounds is what lets every load be a 16-byte asynchronous copy.
    @triton.jit(do_not_specialize=["M", "N", "tiles", "tiles_n"])
    def chain_gemm_native_kernel(
        a_ptr,  # fp8 [M, stride_a]: a's codes, k in the plan's order (the operand itself when it already is)
        b_ptr,  # fp8 [N, stride_b]
        out_ptr,  # fp32 [P, M, N]: the result of every part
        bounds_ptr,  # int32 [2 P]: part p covers k in [bounds[2 p], bounds[2 p + 1]), multiples of DOT_K and 16
        M,
        N,
        stride_a,  # row stride of a (K, or the padded K)
        stride_b,
        tiles,  # output tiles per part
        tiles_n,
        SLOW: tl.constexpr,  # each DOT_K step of a part is its own chain (slow accumulation); else one chain
        DOT_K: tl.constexpr,  # k per tl.dot: 128, four of the instruction's K = 32 blocks chained
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        """One program per (part, output tile), program id ``part * tiles + tile``.

        Fast accumulation (``SLOW`` False): one chain per part, the accumulator passed from dot to dot from
        +0 (no promotion: Triton's default on sm_90 lets FP8 dots accumulate in the instruction's
        accumulator), so each ``tl.dot`` of K = 128 is four blocks of 32 in k order. Slow accumulation: every
        step of 128 is a chain from +0, added to the part's total in fp32 (round to nearest even), in K
        order, as the reference adds chain results. The last step of a part may be short: its missing k
        load as +0 (zero blocks leave a chain's accumulator unchanged; a short block is the block padded
        with zeros), by a mask in the one loop rather than a tail after it (a tail of synchronous loads and
        a dot took Triton 3.6 to 255 registers, the loop alone to 118). Rows and columns past M and N read
        the last row or column (their outputs are not stored), so the loads need no row masks.

        [Note: offsets] The tile's base is 64-bit (``row0 * stride`` may pass 2**31), the offsets inside a
        tile 32-bit (the launcher checks ``BLOCK_M * stride_a < 2**31``): 64-bit offset tensors cost two
        registers per address, and with them this kernel spills on sm_90 with Triton 3.6 (tools/evidence/gpu_static.py
        reports the registers of every launched variant with each Triton version; tests/tools/test_gpu_static.py
        checks that none spills).
        """
        part, pid_m, pid_n, _, _ = chain_tile(tiles, tiles_n, BLOCK_M, BLOCK_N)
        k_lo = tl.multiple_of(tl.load(bounds_ptr + 2 * part), DOT_K)
        k_hi = tl.multiple_of(tl.load(bounds_ptr + 2 * part + 1), 16)
        row0 = pid_m * BLOCK_M
        col0 = pid_n * BLOCK_N
        ra = tl.minimum(tl.arange(0, BLOCK_M), M - 1 - row0)  # rows past M read row M - 1 (not stored)
        rb = tl.minimum(tl.arange(0, BLOCK_N), N - 1 - col0)
        rk = tl.arange(0, DOT_K)
        a_offs = ra[:, None] * stride_a + rk[None, :]  # int32 inside the tile
        b_offs = rb[None, :] * stride_b + rk[:, None]
        a_tile = a_ptr + row0.to(tl.int64) * stride_a + k_lo
        b_tile = b_ptr + col0.to(tl.int64) * stride_b + k_lo
        total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k in range(k_lo, k_hi, DOT_K):
            # k past the part's end reads +0; k_hi - k is a multiple of 16, so the mask is constant over
            # every 16-byte copy and the loads stay asynchronous
            left = k_hi - k
            a = tl.load(a_tile + a_offs, mask=(rk < left)[None, :], other=0.0)
            b = tl.load(b_tile + b_offs, mask=(rk < left)[:, None], other=0.0)
            if SLOW:
                total = total + tl.dot(a, b)
            else:
                total = tl.dot(a, b, total)
            a_tile += DOT_K
            b_tile += DOT_K
        lm = tl.arange(0, BLOCK_M)
        ln = tl.arange(0, BLOCK_N)
        out_tile = out_ptr + part.to(tl.int64) * M * N + row0.to(tl.int64) * N + col0
        tl.store(out_tile + lm[:, None] * N + ln[None, :], total,
                 mask=(lm < M - row0)[:, None] & (ln < N - col0)[None, :])
