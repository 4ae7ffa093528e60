"""The bias probes: biased ``torch._scaled_mm`` calls that tell the two candidate bias epilogues apart.

Where cuBLASLt's epilogue adds a bias is open ([Note: bias] in :mod:`mmaemu._epilogue`): after the scaled
accumulator was rounded to fp32 (:attr:`~mmaemu.BiasOrder.AFTER_SCALE`), or inside the fused
multiply-add (:attr:`~mmaemu.BiasOrder.FUSED`). The two differ where the bias cancels the
leading bits of ``acc * alpha`` and the bits that the first rounding dropped become the result. Each probe
is one 16 x 16 output, K = 16: row ``i`` of ``a`` holds one value ``v_i`` (the rest zero) and every row of
``b`` a 1, so ``acc[i, j] = v_i``; ``alpha = fp32(scale_a * scale_b)`` has a long significand
(``1 - 2**-24``, ``1 + 2**-23``), so ``acc * alpha`` has bits below fp32's; and column ``j``'s bias is
``-v_j`` rounded to the output type, so the diagonal cancels. Off the diagonal the outputs check the
ordinary epilogue with a bias. The recorder runs them on the GPU (bf16 and fp16 outputs);
:func:`fitting_orders` says which candidate reproduces every output.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .._epilogue import BiasOrder
from ..errors import MmaemuWarning, RecordingDamagedError
from ..formats import OutFormat
from ..platforms._profiles import Profile
from ._records import fp32_bits, fp32_scalar

__all__ = ["BiasProbe", "BiasResult", "bias_document", "bias_probes", "bias_results", "fitting_orders"]

#: The values v_i of the probes' rows: FP8 E4M3 values with 2 to 4 significant bits, magnitudes 2**-3 to 2**8.
_VALUES = (1.5, 1.75, 1.25, 3.0, 2.5, 0.375, 5.0, 7.0, 0.875, 13.0, 1.125, 26.0, 0.1875, 104.0, 208.0, 416.0)
#: (scale_a, scale_b): fp32 values whose product has a long significand.
_SCALES = ((1 - 2.0**-24, 1.0), (1 + 2.0**-23, 1.0), (0.75 + 2.0**-22, 2.0**-3))
_OUTS = (OutFormat.BFLOAT16, OutFormat.FLOAT16)


@dataclass(frozen=True)
class BiasProbe:
    """One biased call: ``torch._scaled_mm(a, b.t(), scale_a, scale_b, bias, out_dtype=out, use_fast_accum=True)``."""

    name: str
    a: torch.Tensor = field(repr=False)
    b: torch.Tensor = field(repr=False)
    bias: torch.Tensor = field(repr=False)
    scale_a_bits: int
    scale_b_bits: int
    out: OutFormat


@dataclass(frozen=True)
class BiasResult:
    """What the GPU returned for a bias probe, and the heuristic's split for its shape."""

    probe: BiasProbe
    output: torch.Tensor = field(repr=False)
    S: int = 1
    custom: int = 0


def bias_probes() -> list[BiasProbe]:
    """The bias probes (fixed: every GPU runs the same calls)."""
    a = torch.zeros(16, 16)
    a[:, 0] = torch.tensor(_VALUES)
    b = torch.zeros(16, 16)
    b[:, 0] = 1.0
    probes = []
    for out in _OUTS:
        for s, (sa, sb) in enumerate(_SCALES):
            alpha = float(np.float32(np.float32(sa) * np.float32(sb)))
            bias = (-torch.tensor(_VALUES, dtype=torch.float64) * alpha).to(out.dtype)
            probes.append(BiasProbe(f"bias-{out.dtype_name}-{s}", a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn),
                                    bias, fp32_bits(sa), fp32_bits(sb), out))
    return probes


def bias_document(results: Sequence[BiasResult]) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """The ``bias_probes`` entries of ``probes.json`` and their arrays for ``probes.npz``."""
    entries: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}
    for r in results:
        p = r.probe
        entries.append({"name": p.name, "out": p.out.dtype_name, "scale_a_bits": p.scale_a_bits,
                        "scale_b_bits": p.scale_b_bits, "S": r.S, "custom": r.custom})
        arrays[f"a_{p.name}"] = p.a.view(torch.uint8).numpy().copy()
        arrays[f"b_{p.name}"] = p.b.view(torch.uint8).numpy().copy()
        arrays[f"bias_{p.name}"] = p.bias.view(torch.int16).numpy().view(np.uint16).copy()
        arrays[f"out_{p.name}"] = r.output.contiguous().view(torch.int16).numpy().view(np.uint16).copy()
    return entries, arrays


def bias_results(doc: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> list[BiasResult]:
    """The bias probes' results back from ``probes.json`` and ``probes.npz``, every field checked.

    Raises:
        RecordingDamagedError: naming the probe and the field.
    """
    entries = doc.get("bias_probes", [])
    if not isinstance(entries, list) or len(entries) > 256:
        raise RecordingDamagedError("probes.json: field 'bias_probes' is not a list of bias probes")
    results = []
    outs = {o.dtype_name: o for o in _OUTS}
    for i, e in enumerate(entries):
        where = f"probes.json: bias probe {i}"
        if not isinstance(e, dict) or not isinstance(e.get("name"), str) or not e["name"].replace("-", "").isalnum():
            raise RecordingDamagedError(f"{where}: not an object with a plain 'name'")
        if e.get("out") not in outs:
            raise RecordingDamagedError(f"{where}: field 'out'={e.get('out')!r} is not one of {sorted(outs)}")
        for key, hi in (("scale_a_bits", 1 << 32), ("scale_b_bits", 1 << 32), ("S", 256), ("custom", 256)):
            value = e.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < hi:
                raise RecordingDamagedError(f"{where}: field {key!r}={value!r} is not an integer in [0, {hi})")
        name = e["name"]
        shapes = {"a": ((16, 16), np.uint8), "b": ((16, 16), np.uint8), "bias": ((16,), np.uint16),
                  "out": ((16, 16), np.uint16)}
        got = {}
        for key, (shape, dtype) in shapes.items():
            arr = arrays.get(f"{key}_{name}")
            if arr is None or arr.shape != shape or arr.dtype != dtype:
                raise RecordingDamagedError(f"{where}: array {key}_{name} is not {np.dtype(dtype)} {shape}")
            got[key] = torch.from_numpy(np.ascontiguousarray(arr).view(np.int16 if dtype == np.uint16 else np.uint8))
        out = outs[e["out"]]
        probe = BiasProbe(name, got["a"].view(torch.float8_e4m3fn), got["b"].view(torch.float8_e4m3fn),
                          got["bias"].view(out.dtype), e["scale_a_bits"], e["scale_b_bits"], out)
        results.append(BiasResult(probe, got["out"].view(out.dtype), e["S"], e["custom"]))
    return results


def _computed(result: BiasResult, profile: Profile) -> torch.Tensor:
    from .._call import scaled_mm

    p = result.probe
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MmaemuWarning)
        return scaled_mm(p.a, p.b.t(), fp32_scalar(p.scale_a_bits), fp32_scalar(p.scale_b_bits), p.bias,
                         out_dtype=p.out.dtype, use_fast_accum=True, profile=profile, splitk=1, backend="reference")


def fitting_orders(results: Sequence[BiasResult], profile: Profile) -> tuple[BiasOrder, ...]:
    """The bias orders that reproduce every unsplit bias probe under ``profile``'s arithmetic (empty: none)."""
    unsplit = [r for r in results if r.S == 1]
    if not unsplit:
        return ()
    fits = []
    for order in BiasOrder:
        trial = dataclasses.replace(profile, bias_order=order)
        if all(torch.equal(_computed(r, trial).view(torch.int16), r.output.view(torch.int16)) for r in unsplit):
            fits.append(order)
    return tuple(fits)
