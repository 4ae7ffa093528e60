"""torch 2.7.1's dispatch of the sm_90 row-wise kernel: transposition, cluster, swizzle and tile per shape.

[Note: sm_90 dispatch] ``dispatch_fp8_rowwise_kernel_on_cluster_size_and_transpose`` (torch 2.7.1
aten/src/ATen/native/cuda/RowwiseScaledMM.cu) rounds M = ``XQ.size(0)`` and N = ``WQ.size(1)`` (C++
``int``) up to multiples of 64 and takes the first rule that matches (:func:`dispatch`). A transposed
call runs the kernel on ``(WQ.t(), XQ.t(), w_scale.t(), x_scale.t(), out.t())`` (``handle_transposition``):
the kernel's row scale, the first multiply of the epilogue, is then ``scale_b``, and its column scale,
the fused multiply-add's multiplier, ``scale_a``; the bias stays a per-N broadcast. Every immediate of
the rules (0x40, 0xbff, 0xc0, 0xfff, 0x1000000, 0x100000, 0x7ff) and the number of call sites of each
``handle_transposition<cluster, transposed>`` instance were checked in the x86 code of the PyPI
torch-2.7.1+cu126 wheel (host function at 0x2a49b60); the products ``M * N`` are 32-bit ``imul``, so they
wrap at 2**31 (read from the machine code; no call that large was run). The cluster shape and the
swizzle change only the order in which tiles are scheduled, and the tile (64 x 128 or 128 x 128,
``dispatch_fp8_rowwise_kernel_on_tile_size``, which reads the SM count) only which CTA computes an
output: both tiles run the same 64 x 128 x 32 wgmma, the same 128-wide k-tiles, promotion and epilogue
(the machine code of all 64 sm_90a kernels), so none of the three changes a bit. Transposition does:
it swaps the roles of the two scales in the epilogue.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Sm90Dispatch", "dispatch"]

_TILE_N = 128


@dataclass(frozen=True)
class Sm90Dispatch:
    """What the sm_90 dispatch chose for a shape.

    Attributes:
        rule: the rule that matched (1 to 9, in the source's order).
        transposed: the kernel runs on the transposed problem (``scale_b`` multiplies first).
        cluster: the cluster shape ``(m, n)`` (scheduling only).
        swizzle: the tile scheduler's maximum swizzle (scheduling only).
        tile: the CTA tile ``(m, n, k)`` (which CTA computes which output; no effect on the bits).
    """

    rule: int
    transposed: bool
    cluster: tuple[int, int]
    swizzle: int
    tile: tuple[int, int, int]


def _i32(x: int) -> int:
    """``x`` as the C++ ``int`` an ``imul`` leaves (two's complement wrap)."""
    return (x + (1 << 31)) % (1 << 32) - (1 << 31)


def _rule(m: int, n: int) -> tuple[int, bool, tuple[int, int], int]:
    """(rule, transposed, cluster, swizzle) for the rounded sizes ``m``, ``n``, in the source's order."""
    mn = _i32(m * n)
    if m == 64 and n >= 3072:
        return 1, False, (1, 2), 1
    if n == 64 and m >= 3072:
        return 2, True, (1, 2), 1
    if m == 192 and n >= 4096:
        return 3, True, (1, 2), 1
    if n == 192 and m >= 4096:
        return 4, False, (1, 2), 1
    if mn <= 4096 * 4096:
        if m % 256 > 0 and n % 256 == 0:
            return 5, True, (2, 1), 1
        if n % 256 > 0 and m % 256 == 0:
            return 6, False, (2, 1), 1
    if m % 256 > 0 and n % 256 > 0:
        return 7, (m <= n) != (mn <= 1024 * 1024), (2, 1), 1
    if m >= 4096 and n >= 4096:
        return 8, m < n, (2, 1), 8
    cluster = (1, 2) if (m <= n) != (m >= 2048 and n >= 2048) else (2, 1)
    return 9, True, cluster, 1


def dispatch(m: int, n: int, sm_count: int) -> Sm90Dispatch:
    """The sm_90 row-wise dispatch of an ``M x N`` output on a GPU of ``sm_count`` SMs (no SM carve-out).

    Example:
        >>> from mmaemu.platforms._gpus import reference_gpu
        >>> sms = reference_gpu("h100").sm_count
        >>> dispatch(16, 128, sms).transposed, dispatch(16, 256, sms).transposed
        (False, True)
    """
    rounded_m, rounded_n = -(-m // 64) * 64, -(-n // 64) * 64
    rule, transposed, cluster, swizzle = _rule(rounded_m, rounded_n)
    kernel_m, kernel_n = (n, m) if transposed else (m, n)
    blocks = -(-kernel_m // (64 * cluster[0])) * -(-kernel_n // (_TILE_N * cluster[1]))
    small = blocks <= sm_count // (cluster[0] * cluster[1])
    return Sm90Dispatch(rule, transposed, cluster, swizzle, (64 if small else 128, _TILE_N, 128))
