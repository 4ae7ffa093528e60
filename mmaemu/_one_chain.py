""":func:`mmaemu.accumulate` where one chain of the instruction runs over K from +0 per output: an fp16
accumulator (FP8 or float16 operands), and the fp16, bf16 and tf32 operand formats. No backend kernel runs
these; :func:`mmaemu.model.dot` computes every output, so NaN, Inf and -0 follow its rules. Both warn once per
preset (``ExperimentalPresetWarning``): the instruction's blocks are recorded, a cuBLAS GEMM of them is not.
"""

from __future__ import annotations

import torch

from .errors import ExperimentalPresetWarning, UnsupportedFeatureError, warn_caller
from .formats import FP8_DTYPES, wide_format_of
from .model import dot
from .platforms._profiles import Profile, get_profile
from .presets import Accumulator, Architecture, Preset, instruction_preset
from ._split import SplitK

_ZOO_WARNED: set[str] = set()
_HALF_WARNED: set[str] = set()
#: Rows of ``a`` per :func:`dot` call of an fp16-accumulator GEMM: at most about 2**22 broadcast products.
_HALF_ELEMENTS = 1 << 22


def default_preset(a: torch.Tensor, profile: str | Profile | None) -> str | Preset:
    """The instruction a profile names for ``a``'s format: its preset for FP8, its architecture otherwise."""
    chosen = get_profile(profile).preset
    return chosen if a.dtype in FP8_DTYPES else chosen.name


def accumulate_half(a: torch.Tensor, b: torch.Tensor, accumulator: torch.dtype, preset: str | Preset | None,
                    profile: str | Profile | None, fast: bool, split: SplitK) -> torch.Tensor:
    """:func:`accumulate` with an fp16 accumulator: one chain of the instruction over K from +0 per output.

    [Note: fp16 accumulator] The chain is :func:`mmaemu.model.dot`'s with a float16 ``c``, run for every
    output (``a``'s rows broadcast against ``b``'s), so the GEMM is exactly the chained instruction whose
    blocks the recorded fp16-accumulator vectors validate (``d_fp16acc_bits`` of the FP8 files and of the
    fp16 files that hold them; :func:`mmaemu.model.dot` and docs/zoo.md say which presets model it on what
    evidence). No backend kernel runs it: the reference model
    computes it whatever ``backend`` names (the caller checks that it is usable on the device). A GEMM of cuBLAS
    with an fp16 accumulator is not recorded, so it warns once per preset (``ExperimentalPresetWarning``).
    """
    if not isinstance(accumulator, torch.dtype):
        raise TypeError(f"accumulator must be a torch.dtype (torch.float32 or torch.float16), not {type(accumulator).__name__}")
    if accumulator is not torch.float16:
        raise ValueError(f"accumulator must be torch.float32 or torch.float16, got {accumulator!r}")
    if a.dtype not in FP8_DTYPES and a.dtype != torch.float16:
        raise ValueError(f"an fp16 accumulator takes FP8 or float16 operands, not {a.dtype}: pass accumulator=torch.float32")
    if not fast or split.parts != 1:
        raise UnsupportedFeatureError(
            "an fp16 accumulator is one chain of the instruction over K: pass use_fast_accum=True and splitk=1"
        )
    chosen = default_preset(a, profile) if preset is None else preset
    resolved = instruction_preset(chosen, a.dtype, accumulator=Accumulator.FP16)
    if resolved.name not in _HALF_WARNED:
        _HALF_WARNED.add(resolved.name)
        warn_caller(
            f"accumulate() with an fp16 accumulator on preset {resolved.name!r}: one chain of the recorded "
            "instruction over K, not a recorded GEMM", ExperimentalPresetWarning)
    m, n, k = a.shape[0], b.shape[0], a.shape[1]
    out = torch.zeros((m, n), dtype=torch.float16, device=a.device)
    rows = max(1, _HALF_ELEMENTS // max(1, n * k))
    for m0 in range(0, m, rows):
        chunk = a[m0:m0 + rows]
        out[m0:m0 + rows] = dot(chunk[:, None, :], b[None, :, :], out[m0:m0 + rows], preset=resolved)
    return out


def zoo_preset(a: torch.Tensor, b: torch.Tensor, preset: str | Preset | None, profile: str | Profile | None,
                fast: bool, split: SplitK) -> Preset:
    """The instruction of a zoo-format :func:`accumulate` call (checks the format and what is modelled)."""
    fmt = wide_format_of(a, "a")
    wide_format_of(b, "b")
    if preset is None:
        arch = get_profile(profile).preset.name  # the FP8 profiles name their architecture: hopper, ada
        if arch not in {x.value for x in Architecture}:
            raise UnsupportedFeatureError(
                f"profile's preset {arch!r} names no architecture for {fmt.short_name} operands; pass preset="
            )
        preset = arch
    resolved = instruction_preset(preset, fmt)
    if not fast:
        raise UnsupportedFeatureError(
            f"use_fast_accum=False (a new chain every 128 elements) is how cuBLAS accumulates FP8; for {fmt.short_name} "
            "operands accumulate() computes one chain of the instruction over K: pass use_fast_accum=True"
        )
    if split.parts != 1:
        raise UnsupportedFeatureError(
            f"split-K is not modelled for {fmt.short_name} operands (no GEMM-level recording exists): pass splitk=1"
        )
    if resolved.name not in _ZOO_WARNED:
        _ZOO_WARNED.add(resolved.name)
        warn_caller(
            f"accumulate() with {fmt.short_name} operands on preset {resolved.name!r}: one chain of the recorded "
            "instruction over K, not a recorded GEMM (cuBLAS may split K or order the blocks otherwise)",
            ExperimentalPresetWarning)
    return resolved
