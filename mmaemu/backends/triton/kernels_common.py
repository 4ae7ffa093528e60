# mypy: ignore-errors
# (Triton kernels are typed by Triton's own ``tl.constexpr`` annotations and Triton ships no type stubs.)
"""Triton helpers shared by the kernels of several formulations: the block exponent of ``c``, one step
of the split-K combination, and the program id of a (chain, tile) grid.

Imported only by the kernel modules (``kernels_convert``, ``kernels_rz``, ``kernels_native``), which the
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
