"""The row-wise probes: row-wise ``torch._scaled_mm`` calls whose outputs tell the row-wise kernel's candidates apart.

A row-wise call runs torch 2.7.1's CUTLASS kernel (:mod:`mmaemu.kernels`), whose choices are read from
its source; each choice has candidates (:func:`mmaemu.kernels.candidates`: the order of the two
scales, one rounding or two for the second multiply and the bias, what is added without a bias, the
slow accumulation's chains, and on sm_89 stream-K's division of K). The probes (fixed: every GPU runs the
same calls, bf16 outputs) are built so that every pair of candidates of each kernel gives a different
output somewhere (:func:`separation` counts them):

- ``order-*`` (16 x 128 and 16 x 256: the sm_90 dispatch runs the first untransposed, the second
  transposed; K = 32, fast): ``acc[m, n] = v_m``; the column scales are chosen so that
  ``v_m * scale_a[m] * scale_b[n]`` lies within about 2**-24 of a bf16 value ``T``, and the bias is
  ``-T``, so the result is what the fp32 roundings of the epilogue left: the order of the scales and
  the number of roundings show in its bits;
- ``zero-bias`` (no bias): all-zero rows with negative scales: an exact zero product is -0, and +0 once
  the epilogue adds the null bias;
- ``chains-slow`` and ``chains-fast`` (16 x 16, K = 1040): every row holds 256 at one position and
  2**-7 every 8 elements; the small products after the large one in its chain are truncated away, those
  before it keep a multiple of four (the accumulator is truncated to 2**-5 when the large one arrives),
  the others survive, and the bias -256 leaves their sum (at most 130 * 2**-7, exact in bf16): the output
  counts the survivors, which depend on where every chain (promotion interval, staged groups, the
  partial k-tile, stream-K's peers) begins.

The recorder runs them on the GPU (:mod:`mmaemu.recording._record`); :func:`fitting_kernels` says which
candidates reproduce every output.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..errors import MmaemuWarning, RecordingDamagedError
from ..kernels._model import KernelModel, candidates
from ..platforms._profiles import Profile

__all__ = ["RowwiseProbe", "RowwiseResult", "fitting_kernels", "rowwise_document", "rowwise_probes",
           "rowwise_results", "separation"]

#: The values v_m of the order probes' rows: E4M3 values of 2 to 4 significant bits.
_VALUES = (1.5, 1.75, 1.25, 3.0, 2.5, 0.375, 5.0, 7.0, 0.875, 13.0, 1.125, 26.0, 0.1875, 104.0, 208.0, 416.0)
_SEED = 47
_CHAIN_K = 1040  # K % 64 == 16: a partial k-tile on sm_89
_BIG, _SMALL = 256.0, 2.0**-7
#: (name, M, N, K, fast, kind)
_SHAPES = (("order-16x128", 16, 128, 32, True, "order"), ("order-16x256", 16, 256, 32, True, "order"),
           ("zero-bias", 16, 128, 32, True, "zero"), ("chains-slow", 16, 16, _CHAIN_K, False, "chains"),
           ("chains-fast", 16, 16, _CHAIN_K, True, "chains"))
#: The bounds of a recorded row-wise probe (the analysis runs each of 48 candidates on each): outputs, work, count.
_MAX_ELEMENTS = 1 << 16
_MAX_WORK = 1 << 20
_MAX_PROBES = 8


@dataclass(frozen=True)
class RowwiseProbe:
    """One call: ``torch._scaled_mm(a, b.t(), scale_a[:, None], scale_b[None, :], bias, out_dtype=bf16, use_fast_accum=fast)``."""

    name: str
    a: torch.Tensor = field(repr=False)
    b: torch.Tensor = field(repr=False)
    scale_a: torch.Tensor = field(repr=False)
    scale_b: torch.Tensor = field(repr=False)
    bias: torch.Tensor | None = field(repr=False)
    fast: bool

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(M, N, K)``."""
        return int(self.a.shape[0]), int(self.b.shape[0]), int(self.a.shape[1])


@dataclass(frozen=True)
class RowwiseResult:
    """What the GPU returned for a row-wise probe (bf16 ``[M, N]``)."""

    probe: RowwiseProbe
    output: torch.Tensor = field(repr=False)


def _fp32(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))


def _order_probe(name: str, m: int, n: int, k: int, rng: np.random.Generator) -> RowwiseProbe:
    a = torch.zeros(m, k)
    a[:, 0] = torch.tensor(_VALUES[:m])
    b = torch.zeros(n, k)
    b[:, 0] = 1.0
    sa = (rng.uniform(0.5, 1.0, m).astype(np.float32) + np.float32(2.0**-23)).astype(np.float32)
    row = np.arange(n) % m  # the row whose output each column's bias cancels
    t = (np.asarray(_VALUES[:m], np.float64) * sa.astype(np.float64)).astype(np.float32)[row]
    target = torch.from_numpy(rng.uniform(0.5, 2.0, n)).to(torch.bfloat16).to(torch.float64).numpy()
    sb = (target / t.astype(np.float64)).astype(np.float32)
    bias = torch.from_numpy(-target).to(torch.bfloat16)
    return RowwiseProbe(name, a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn), _fp32(sa), _fp32(sb), bias, True)


def _zero_probe(name: str, m: int, n: int, k: int, rng: np.random.Generator) -> RowwiseProbe:
    a = torch.from_numpy(rng.choice([-3.0, -1.5, 0.75, 2.0, 5.0], (m, k)).astype(np.float32))
    a[: m // 2] = 0.0  # zero rows: acc = +0, an exact zero product
    sa = rng.uniform(0.5, 2.0, m).astype(np.float32) * np.where(np.arange(m) % 2, -1, 1).astype(np.float32)
    sb = rng.uniform(0.5, 2.0, n).astype(np.float32) * np.where(np.arange(n) % 3 == 0, -1, 1).astype(np.float32)
    b = torch.from_numpy(rng.choice([-1.0, 0.5, 1.0, 2.0], (n, k)).astype(np.float32))
    return RowwiseProbe(name, a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn), _fp32(sa), _fp32(sb), None, True)


def _chains_probe(name: str, m: int, n: int, k: int, fast: bool, rng: np.random.Generator) -> RowwiseProbe:
    a = torch.zeros(m, k)
    a[:, ::8] = _SMALL
    bigs = rng.choice(np.arange(0, k, 8), m, replace=False)
    a[torch.arange(m), torch.from_numpy(bigs)] = _BIG
    b = torch.ones(n, k)
    bias = torch.full((n,), -_BIG, dtype=torch.bfloat16)
    ones_a, ones_b = np.ones(m, np.float32), np.ones(n, np.float32)
    return RowwiseProbe(name, a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn), _fp32(ones_a), _fp32(ones_b),
                        bias, fast)


def rowwise_probes() -> list[RowwiseProbe]:
    """The row-wise probes (fixed: built from a fixed seed)."""
    rng = np.random.default_rng(_SEED)
    probes = []
    for name, m, n, k, fast, kind in _SHAPES:
        if kind == "order":
            probes.append(_order_probe(name, m, n, k, rng))
        elif kind == "zero":
            probes.append(_zero_probe(name, m, n, k, rng))
        else:
            probes.append(_chains_probe(name, m, n, k, fast, rng))
    return probes


def computed(probe: RowwiseProbe, profile: Profile, model: KernelModel | None = None) -> torch.Tensor:
    """``mmaemu.scaled_mm`` of a probe under ``profile`` (with ``model`` as its row-wise kernel), quietly."""
    from .._call import scaled_mm

    prof = profile if model is None else dataclasses.replace(profile, rowwise_kernel=model.name)
    m, n, _ = probe.shape
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MmaemuWarning)
        return scaled_mm(probe.a, probe.b.t(), probe.scale_a.reshape(m, 1), probe.scale_b.reshape(1, n), probe.bias,
                         out_dtype=torch.bfloat16, use_fast_accum=probe.fast, profile=prof)


def separation(profile: Profile, probes: Sequence[RowwiseProbe] | None = None) -> dict[tuple[str, str], int]:
    """For every pair of the profile's row-wise candidates, how many probe outputs differ (bit patterns)."""
    chosen = list(rowwise_probes() if probes is None else probes)
    models = candidates(_base(profile))
    outputs = {c.name: [computed(p, profile, c).view(torch.int16) for p in chosen] for c in models}
    counts = {}
    for i, x in enumerate(models):
        for y in models[i + 1:]:
            counts[(x.name, y.name)] = sum(int((u != v).sum()) for u, v in zip(outputs[x.name], outputs[y.name]))
    return counts


def _base(profile: Profile) -> str:
    from ..kernels._model import rowwise_model_for

    model = rowwise_model_for(profile.preset, None)
    if model is None:
        raise ValueError(f"profile {profile.name!r}: no row-wise kernel model for preset {profile.preset.name!r}")
    return model.name


def fitting_kernels(results: Sequence[RowwiseResult], profile: Profile) -> tuple[KernelModel, ...]:
    """The profile's row-wise candidates that reproduce every probe output (empty: none, or no results)."""
    if not results:
        return ()
    return tuple(c for c in candidates(_base(profile))
                 if all(torch.equal(computed(r.probe, profile, c).view(torch.int16), r.output.view(torch.int16))
                        for r in results))


def rowwise_document(results: Sequence[RowwiseResult]) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """The ``rowwise_probes`` entries of ``probes.json`` and their arrays for ``probes.npz``."""
    entries: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}
    for r in results:
        p = r.probe
        m, n, k = p.shape
        entries.append({"name": p.name, "m": m, "n": n, "k": k, "fast": p.fast, "bias": p.bias is not None})
        arrays[f"rw_a_{p.name}"] = p.a.view(torch.uint8).numpy().copy()
        arrays[f"rw_b_{p.name}"] = p.b.view(torch.uint8).numpy().copy()
        arrays[f"rw_sa_{p.name}"] = p.scale_a.view(torch.int32).numpy().view(np.uint32).copy()
        arrays[f"rw_sb_{p.name}"] = p.scale_b.view(torch.int32).numpy().view(np.uint32).copy()
        if p.bias is not None:
            arrays[f"rw_bias_{p.name}"] = p.bias.view(torch.int16).numpy().view(np.uint16).copy()
        arrays[f"rw_out_{p.name}"] = r.output.contiguous().view(torch.int16).numpy().view(np.uint16).copy()
    return entries, arrays


def _array(arrays: Mapping[str, np.ndarray], key: str, shape: tuple[int, ...], dtype: type, where: str) -> np.ndarray:
    arr = arrays.get(key)
    if arr is None or arr.shape != shape or arr.dtype != dtype:
        raise RecordingDamagedError(f"{where}: array {key} is not {np.dtype(dtype)} {shape}")
    return np.ascontiguousarray(arr)


def _entry(e: Any, where: str) -> tuple[str, int, int, int, bool, bool]:
    if not isinstance(e, dict) or not isinstance(e.get("name"), str) or not e["name"].replace("-", "").isalnum() \
            or len(e["name"]) > 64:
        raise RecordingDamagedError(f"{where}: not an object with a plain 'name'")
    for key in ("m", "n", "k"):
        value = e.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 12:
            raise RecordingDamagedError(f"{where}: field {key!r}={value!r} is not an integer in [1, 4096]")
    if e["m"] * e["n"] * e["k"] > _MAX_WORK or e["m"] * e["n"] > _MAX_ELEMENTS:
        raise RecordingDamagedError(f"{where}: {e['m']} x {e['n']} x {e['k']} is more work than a row-wise probe may "
                                    f"take ({_MAX_WORK:,} multiply-adds per candidate)")
    for key in ("fast", "bias"):
        if not isinstance(e.get(key), bool):
            raise RecordingDamagedError(f"{where}: field {key!r}={e.get(key)!r} is not true or false")
    return e["name"], e["m"], e["n"], e["k"], e["fast"], e["bias"]


def rowwise_results(doc: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> list[RowwiseResult]:
    """The row-wise probes' results back from ``probes.json`` and ``probes.npz``, every field checked.

    Raises:
        RecordingDamagedError: naming the probe and the field.
    """
    entries = doc.get("rowwise_probes", [])
    if not isinstance(entries, list) or len(entries) > _MAX_PROBES:
        raise RecordingDamagedError(f"probes.json: field 'rowwise_probes' is not a list of at most {_MAX_PROBES} "
                                    "row-wise probes")
    results, names = [], set()
    for i, e in enumerate(entries):
        where = f"probes.json: row-wise probe {i}"
        name, m, n, k, fast, biased = _entry(e, where)
        if name in names:
            raise RecordingDamagedError(f"{where}: name {name!r} repeats an earlier probe's")
        names.add(name)
        a = _array(arrays, f"rw_a_{name}", (m, k), np.uint8, where)
        b = _array(arrays, f"rw_b_{name}", (n, k), np.uint8, where)
        sa = _array(arrays, f"rw_sa_{name}", (m,), np.uint32, where)
        sb = _array(arrays, f"rw_sb_{name}", (n,), np.uint32, where)
        bias = _array(arrays, f"rw_bias_{name}", (n,), np.uint16, where) if biased else None
        out = _array(arrays, f"rw_out_{name}", (m, n), np.uint16, where)
        probe = RowwiseProbe(name, torch.from_numpy(a).view(torch.float8_e4m3fn),
                             torch.from_numpy(b).view(torch.float8_e4m3fn),
                             torch.from_numpy(sa.view(np.int32)).view(torch.float32),
                             torch.from_numpy(sb.view(np.int32)).view(torch.float32),
                             None if bias is None else torch.from_numpy(bias.view(np.int16)).view(torch.bfloat16), fast)
        results.append(RowwiseResult(probe, torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)))
    return results
