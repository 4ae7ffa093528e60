# mypy: ignore-errors
# (Triton kernels are typed by Triton's own ``tl.constexpr`` annotations and Triton ships no type stubs.)
"""Triton helpers shared by the kernels of several formulations: the block exponent of ``c``, the walk
over the split parts (each part's chains, one step of the combination), the output tile of a program
id, and its masked store.

Imported only by the kernel modules (``_kernels_convert``, ``_kernels_rz``, ``_kernels_native``), which the
launchers import lazily: Triton decides at decoration time whether a kernel is compiled for the GPU or
run by its CPU interpreter (``TRITON_INTERPRET=1``).
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
    def exponent_of(c):
        """E of the accumulator entering a block: its exponent when nonzero, else far below every
        product's (so it never sets E)."""
        c_bits = c.to(tl.int32, bitcast=True)
        e_c = tl.maximum(((c_bits >> 23) & 0xFF) - 127, -126)
        return tl.where((c_bits & 0x7FFFFFFF) != 0, e_c, 4 * ZERO_EXP)

    @triton.jit
    def combine(q, role, part_total, held, total):
        """One step of the split scheme's combination (accumulation.flat_combination), fp32 RNE: role 0
        joins the total, 1 is held, 2 is added to the held one and the pair joins. Returns (held, total)."""
        addend = tl.where(role == 2, held + part_total, part_total)
        held = tl.where(role == 1, part_total, held)
        total = tl.where(role == 1, total, tl.where(q == 0, addend, total + addend))
        return held, total

    @triton.jit
    def output_tile(tiles_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """Program id -> the rows and the columns of its output tile (one grid axis holds every tile,
        row-major, ``tiles_n`` tiles along N)."""
        pid = tl.program_id(0)
        rm = (pid // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = (pid % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        return rm, rn

    @triton.jit
    def sum_parts(chain_fn: tl.constexpr, operands, chain_ptr, part_ptr, order_ptr, role_ptr, n_parts, rm, rn,
                  BLOCK: tl.constexpr, FRAC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  VARIANT: tl.constexpr, ONE_CHAIN: tl.constexpr):
        """The split scheme over one output tile, the one walk of every formulation that sums in the
        kernel: the q-th part the plan takes (``order_ptr``) sums its chains ``[part[p], part[p + 1])``
        in K order from +0, each chain ``chain_fn(operands, k_start, k_stop, rm, rn, BLOCK, FRAC,
        BLOCK_M, BLOCK_N, VARIANT)`` from c = +0 over ``[chain[c], chain[c + 1])``; the part results
        join by :func:`combine` with their roles. ``ONE_CHAIN`` (one part of one chain): the chain's
        result, no combination state. fp32 round to nearest even throughout."""
        total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        held = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for q in range(n_parts):
            part = tl.load(order_ptr + q)
            role = tl.load(role_ptr + q)
            part_total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for ch in range(tl.load(part_ptr + part), tl.load(part_ptr + part + 1)):
                c = chain_fn(operands, tl.load(chain_ptr + ch), tl.load(chain_ptr + ch + 1), rm, rn, BLOCK, FRAC,
                             BLOCK_M, BLOCK_N, VARIANT)
                if ONE_CHAIN:
                    total = c
                else:
                    part_total = part_total + c  # fp32 RNE: chain results in K order, from +0
            if not ONE_CHAIN:
                held, total = combine(q, role, part_total, held, total)
        return total

    @triton.jit
    def store_tile(out_ptr, total, rm, rn, M, N):
        """``out[rm, rn] = total`` for the rows below M and the columns below N (row-major, N columns)."""
        offs = rm.to(tl.int64)[:, None] * N + rn[None, :]
        tl.store(out_ptr + offs, total, mask=(rm < M)[:, None] & (rn < N)[None, :])

    @triton.jit
    def chain_tile(tiles, tiles_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """Program id ``g * tiles + tile`` (one program per chain, or part, and output tile) -> (g, the
        tile's row index, its column index, its rows, its columns)."""
        pid = tl.program_id(0)
        tile = pid % tiles
        pid_m = tile // tiles_n
        pid_n = tile % tiles_n
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        return pid // tiles, pid_m, pid_n, rm, rn
