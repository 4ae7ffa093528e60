"""The inputs of a recording's live calls, regenerated from a seed.

Inputs are not stored in a recording: :func:`call_inputs` regenerates them from the call's seed (FP8
codes from numpy's PCG64 raw stream, which is stable across numpy versions) and the record keeps
their sha256 (:func:`inputs_sha256`), which a replay checks before it computes anything.
"""

from __future__ import annotations

import numpy as np
import torch

from ..formats import Fp8Format
from ._records import DataKind, output_bytes, sha256_bytes

__all__ = ["call_inputs", "inputs_sha256"]


def _raw_bytes(seed: int, count: int) -> np.ndarray:
    """``count`` bytes of PCG64's raw stream for ``seed`` (stable across numpy versions)."""
    words = np.random.Generator(np.random.PCG64(seed)).bit_generator.random_raw((count + 7) // 8)
    return np.asarray(words, dtype="<u8").view(np.uint8)[:count]


def _banded_codes(raw: np.ndarray, fmt: Fp8Format) -> np.ndarray:
    """Finite FP8 codes from raw bytes: random sign and mantissa, exponent in a band of 8 binades."""
    raw = raw.astype(np.uint8)
    sign = raw & 0x80
    if fmt is Fp8Format.E4M3:  # exponent field 4..11: magnitudes 2**-3 .. 2**4 * 1.875
        return (sign | ((4 + ((raw >> 3) & 7)) << 3) | (raw & 7)).astype(np.uint8)
    return (sign | ((11 + ((raw >> 2) & 7)) << 2) | (raw & 3)).astype(np.uint8)  # 2**-4 .. 2**3 * 1.75


def _adversarial_codes(raw: np.ndarray, rows: int, k: int, fmt: Fp8Format) -> np.ndarray:
    """Cancellation and alignment: per row, a large +x/-x pair, many tiny values and one mid value.

    Tiny terms survive or vanish depending on which block, chain (128), split part and addition order
    meets them, so these rows discriminate the accumulation structure; a random permutation per row
    moves the pattern through K.
    """
    codes = np.zeros((rows, k), np.uint8)
    if fmt is Fp8Format.E4M3:
        big, tiny_lo, mid = 0x70, 0x08, 0x38  # 128, 2**-6 (times 1 to 1.375), 1.0
    else:
        big, tiny_lo, mid = 0x5C, 0x14, 0x3C  # 256, 2**-10, 1.0
    perm_raw = raw.reshape(rows, k).astype(np.int64)
    for r in range(rows):
        order = np.argsort(perm_raw[r] * 1024 + np.arange(k), kind="stable")
        row = np.full(k, 0, np.uint8)
        tiny = (tiny_lo + (raw[r * k:(r + 1) * k] & 3)).astype(np.uint8)
        row[:] = tiny | (raw[r * k:(r + 1) * k] & 0x80)
        row[order[0]] = big
        row[order[1 % k]] = big | 0x80
        row[order[2 % k]] = mid
        codes[r] = row
    return codes


def call_inputs(data: DataKind, seed: int, m: int, n: int, k: int, fmt_a: Fp8Format,
                fmt_b: Fp8Format) -> tuple[torch.Tensor, torch.Tensor]:
    """The inputs of a live call: ``a [M, K]`` and ``b [N, K]`` FP8 tensors, from ``seed`` only.

    ``torch._scaled_mm(a, b.t(), ...)`` is the call (``b.t()`` is column-major, as torch requires).
    """
    raw_a = _raw_bytes(seed, m * k)
    raw_b = _raw_bytes(seed + (1 << 40), n * k)
    if data is DataKind.RANDOM:
        a_codes = _banded_codes(raw_a, fmt_a).reshape(m, k)
        b_codes = _banded_codes(raw_b, fmt_b).reshape(n, k)
    else:
        a_codes = _adversarial_codes(raw_a, m, k, fmt_a)
        b_codes = _banded_codes(raw_b, fmt_b).reshape(n, k)
    a = torch.from_numpy(a_codes.copy()).view(fmt_a.dtype)
    b = torch.from_numpy(b_codes.copy()).view(fmt_b.dtype)
    return a, b


def inputs_sha256(a: torch.Tensor, b: torch.Tensor) -> str:
    """sha256 of ``a``'s then ``b``'s codes."""
    return sha256_bytes(output_bytes(a) + output_bytes(b))
