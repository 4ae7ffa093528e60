"""The block probes: block-scaled GEMMs whose outputs tell a block kernel model's candidates apart.

A block-scaled kernel (:mod:`mmaemu.kernels._block_model`: DeepGEMM, the Triton block-FP8 kernels) is modelled
from its source and compiled code; each choice has candidates (:func:`~mmaemu.kernels.block_candidates`:
the chain length, the combination, the order of the scales, the fusion, the start). The probes (fixed, bf16
outputs, E4M3 operands, shapes every modelled kernel takes: N % 64 == 0, K % 128 == 0) are built so that every
pair of candidates of each model gives a different output somewhere (:func:`block_separation` counts them):

- ``chains`` (K = 384): a product of 256 in the first 32 elements, 64 products of 2**-18 at k = 64..127 and a
  product of -256 at k = 256 + r, scales 1: a chain over 128 elements truncates the small products (the hopper
  and ada blocks keep 13 fraction bits below 256, the H100's fp16 blocks 25), a fresh chain at k = 64 keeps
  their sum 2**-12, and the -256 leaves it: the output is 2**-12 or 0;
- ``zero`` (K = 256): all-zero rows with negative activation or weight scales: the first product is -0, which
  stays -0 when stored and becomes +0 when added to the accumulator's +0;
- ``fusion`` (K = 256): the first k-tile leaves ``-rn(3 q)`` in the accumulator, the second adds 3 x 1 x q with
  ``q`` of 24 significant bits: one fused rounding leaves ``3 q - rn(3 q)``, two roundings (or ``rn(3 q)``
  formed first, the order of a chain-first combination reversed) leave 0;
- ``combination`` (K = 256): the same with the scales ``p`` and ``q`` (24 significant bits each) and a chain
  result of 1: ``rn(p q)`` formed first leaves 0, ``p q`` inside the fused step leaves ``p q - rn(p q)``;
- ``rounding`` (K = 256): the first k-tile leaves ``-rn(rn(p q) 3)``, the second a chain result of 3 with the
  scales ``p`` and ``q``: with two roundings per step, ``rn(rn(p q) 3)``, ``rn(rn(3 p) q)`` and ``rn(rn(3 q) p)``
  (the three orders) differ in their last bits, which the cancellation leaves.

``tools/probes/block_probes.py`` runs them on a GPU with the kernel installed and writes a recording (its
``probes.json`` entry ``block_probes`` and arrays ``bp_*`` in ``probes.npz``); ``python -m mmaemu replay``
reads them back (:func:`block_results`, every field checked) and reports which candidates reproduce every
output (:func:`fitting_block_models`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..errors import MmaemuWarning, RecordingDamagedError
from ..kernels._block_model import BLOCK_MODELS, BlockKernelModel, block_candidates
from ._records import Section

__all__ = ["BLOCK_GRID", "BLOCK_SECTIONS", "BlockProbe", "BlockResult", "block_document", "block_probes",
           "block_results", "block_section", "block_separation", "computed_block", "fitting_block_models"]

#: The grid name of a recording of block probes alone (``tools/probes/block_probes.py``): its environment and probes
#: sections are all a replay requires (no cuBLASLt table, no live call).
BLOCK_GRID = "block-probes"
BLOCK_SECTIONS = (Section.ENVIRONMENT, Section.PROBES)

_M, _N = 4, 64
_SEED = 59
#: The bounds of a recorded block probe (the analysis runs up to 24 candidates on each): outputs, work, count.
_MAX_ELEMENTS = 1 << 14
_MAX_WORK = 1 << 19
_MAX_PROBES = 8


@dataclass(frozen=True)
class BlockProbe:
    """One call: ``block_scaled_mm(a, scale_a, w, scale_w, out_dtype=bf16)`` (``a [M, K]``, ``w [N, K]``, E4M3)."""

    name: str
    a: torch.Tensor = field(repr=False)
    scale_a: torch.Tensor = field(repr=False)
    w: torch.Tensor = field(repr=False)
    scale_w: torch.Tensor = field(repr=False)

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(M, N, K)``."""
        return int(self.a.shape[0]), int(self.w.shape[0]), int(self.a.shape[1])


@dataclass(frozen=True)
class BlockResult:
    """What the GPU returned for a block probe (bf16 ``[M, N]``)."""

    probe: BlockProbe
    output: torch.Tensor = field(repr=False)


def _probe(name: str, a: np.ndarray, sa: np.ndarray, w: np.ndarray, sw: np.ndarray) -> BlockProbe:
    def fp8(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.float8_e4m3fn)

    def fp32(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))

    return BlockProbe(name, fp8(a), fp32(sa), fp8(w), fp32(sw))


def _chains() -> BlockProbe:
    k = 384
    a, w = np.zeros((_M, k)), np.zeros((_N, k))
    for i in range(_M):
        a[i, 3 * i] = 16.0  # the large product, in the first block of 32 (and of 16)
        a[i, 256 + 5 * i] = -16.0
    a[:, 64:128] = 2.0**-9
    w[:, :32] = 16.0
    w[:, 256:288] = 16.0
    w[:, 64:128] = 2.0**-9
    return _probe("chains", a, np.ones((_M, 3)), w, np.ones((1, 3)))


def _zero(rng: np.random.Generator) -> BlockProbe:
    k, n = 256, 2 * _N  # one 128-column scale block
    a = rng.choice([-3.0, -1.5, 0.75, 2.0, 5.0], (_M, k))
    a[: _M // 2] = 0.0  # zero rows: every chain result is +0
    w = rng.choice([-1.0, 0.5, 1.0, 2.0], (n, k))
    sign = np.where(np.arange(_M) % 2, -1.0, 1.0)[:, None]  # a negative row scale makes the zero products -0
    sa = rng.uniform(0.5, 2.0, (_M, 2)) * sign
    return _probe("zero", a, sa, w, np.array([[1.5, 0.75]]))


def _odd24(rng: np.random.Generator, size: int) -> np.ndarray:
    """fp32 values in [1, 2) with 24 significant bits (the last bit set)."""
    return (1.0 + (2 * rng.integers(0, 2**22, size) + 1) * 2.0**-23).astype(np.float32)


def _rn(x: np.ndarray | float) -> np.ndarray:
    """fp32 rounding of float64 values (exact products of fp32 values)."""
    return np.asarray(x, dtype=np.float64).astype(np.float32).astype(np.float64)


def _three_orders(rng: np.random.Generator, q: float, d: float) -> np.ndarray:
    """:data:`_M` scales ``p`` (24 significant bits) for which ``rn(rn(p q) d)``, ``rn(rn(d p) q)`` and
    ``rn(rn(d q) p)`` are three different fp32 values."""
    found: list[float] = []
    while len(found) < _M:
        p = _odd24(rng, 64).astype(np.float64)
        x, y, z = _rn(_rn(p * q) * d), _rn(_rn(d * p) * q), _rn(_rn(d * q) * p)
        found += [float(v) for v in p[(x != y) & (y != z) & (x != z)]]
    return np.asarray(found[:_M], dtype=np.float32)


def _two_steps(name: str, d1: np.ndarray, sa1: np.ndarray, sw1: float, first: np.ndarray | None = None) -> BlockProbe:
    """k-tile 0 (a chain result of 1) leaves ``-first[m]`` in row m's accumulator (its activation scale, the weight
    scale 1; by default ``first = rn(d1 * sa1 * sw1)``, the product rounded once); k-tile 1 (a chain result of
    ``d1[m]``, scales ``sa1[m]`` and ``sw1``) adds the product as the step forms it."""
    k = 256
    a, w = np.zeros((_M, k)), np.zeros((_N, k))
    a[:, 0] = 1.0
    w[:, 0] = 1.0
    a[:, 128] = d1
    w[:, 128] = 1.0
    if first is None:
        first = (d1.astype(np.float64) * sa1.astype(np.float64) * np.float64(sw1)).astype(np.float32)  # one factor 1
    sa = np.stack([-first.astype(np.float32), sa1.astype(np.float32)], axis=1)
    return _probe(name, a, sa, w, np.array([[1.0, sw1]]))


def block_probes() -> list[BlockProbe]:
    """The block probes (fixed: built from a fixed seed)."""
    rng = np.random.default_rng(_SEED)
    q = float(_odd24(rng, 1)[0])
    p = _odd24(rng, _M)
    fusion = _two_steps("fusion", np.array([3.0, 5.0, 7.0, 11.0]), np.ones(_M), q)
    combination = _two_steps("combination", np.ones(_M), p, q)
    r = _three_orders(rng, q, 3.0)
    rounding = _two_steps("rounding", np.full(_M, 3.0), r, q, _rn(_rn(r.astype(np.float64) * q) * 3.0))
    return [_chains(), _zero(rng), fusion, combination, rounding]


def computed_block(probe: BlockProbe, model: BlockKernelModel | str, backend: str = "auto") -> torch.Tensor:
    """:func:`mmaemu.block_scaled_mm` of a probe as ``model`` (a model or candidate), quietly."""
    from .._blockwise import block_scaled_mm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MmaemuWarning)
        return block_scaled_mm(probe.a, probe.scale_a, probe.w, probe.scale_w, kernel=model, backend=backend)


def block_separation(base: str, probes: Sequence[BlockProbe] | None = None) -> dict[tuple[str, str], int]:
    """For every pair of a base model's candidates, how many probe outputs differ (bit patterns)."""
    chosen = list(block_probes() if probes is None else probes)
    models = block_candidates(base)
    outputs = {c.name: [computed_block(p, c).view(torch.int16) for p in chosen] for c in models}
    counts = {}
    for i, x in enumerate(models):
        for y in models[i + 1:]:
            counts[(x.name, y.name)] = sum(int((u != v).sum()) for u, v in zip(outputs[x.name], outputs[y.name]))
    return counts


def fitting_block_models(results: Sequence[BlockResult], base: str) -> tuple[BlockKernelModel, ...]:
    """The base model's candidates that reproduce every probe output (empty: none, or no results)."""
    if not results:
        return ()
    return tuple(c for c in block_candidates(base)
                 if all(torch.equal(computed_block(r.probe, c).view(torch.int16), r.output.view(torch.int16))
                        for r in results))


def block_document(results: Sequence[BlockResult], base: str, runner: str) -> tuple[dict[str, Any],
                                                                                    dict[str, np.ndarray]]:
    """The ``block_probes`` entry of ``probes.json`` (the base model run, the runner, the probes) and its arrays."""
    entries: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}
    for r in results:
        p = r.probe
        m, n, k = p.shape
        entries.append({"name": p.name, "m": m, "n": n, "k": k})
        arrays[f"bp_a_{p.name}"] = p.a.view(torch.uint8).numpy().copy()
        arrays[f"bp_w_{p.name}"] = p.w.view(torch.uint8).numpy().copy()
        arrays[f"bp_sa_{p.name}"] = p.scale_a.view(torch.int32).numpy().view(np.uint32).copy()
        arrays[f"bp_sw_{p.name}"] = p.scale_w.view(torch.int32).numpy().view(np.uint32).copy()
        arrays[f"bp_out_{p.name}"] = r.output.contiguous().view(torch.int16).numpy().view(np.uint16).copy()
    return {"base": base, "runner": runner, "probes": entries}, arrays


def _array(arrays: Mapping[str, np.ndarray], key: str, shape: tuple[int, ...], dtype: type, where: str) -> np.ndarray:
    arr = arrays.get(key)
    if arr is None or arr.shape != shape or arr.dtype != dtype:
        raise RecordingDamagedError(f"{where}: array {key} is not {np.dtype(dtype)} {shape}")
    return np.ascontiguousarray(arr)


def _entry(e: Any, where: str) -> tuple[str, int, int, int]:
    if not isinstance(e, dict) or not isinstance(e.get("name"), str) or not e["name"].replace("-", "").isalnum() \
            or len(e["name"]) > 64:
        raise RecordingDamagedError(f"{where}: not an object with a plain 'name'")
    for key in ("m", "n", "k"):
        value = e.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 12:
            raise RecordingDamagedError(f"{where}: field {key!r}={value!r} is not an integer in [1, 4096]")
    if e["m"] * e["n"] * e["k"] > _MAX_WORK or e["m"] * e["n"] > _MAX_ELEMENTS:
        raise RecordingDamagedError(f"{where}: {e['m']} x {e['n']} x {e['k']} is more work than a block probe may "
                                    f"take ({_MAX_WORK:,} multiply-adds per candidate)")
    if e["n"] % 64 or e["k"] % 128:
        raise RecordingDamagedError(f"{where}: N = {e['n']}, K = {e['k']}: a block probe has N % 64 == 0 and "
                                    "K % 128 == 0")
    return e["name"], e["m"], e["n"], e["k"]


def block_section(doc: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(base model, runner)`` of a recording's block probes, or None when it has none.

    Raises:
        RecordingDamagedError: the entry is malformed or names no base model.
    """
    section = doc.get("block_probes")
    if section is None:
        return None
    if not isinstance(section, dict) or not isinstance(section.get("runner"), str) or len(section["runner"]) > 200:
        raise RecordingDamagedError("probes.json: field 'block_probes' is not an object with a 'runner' string")
    base = section.get("base")
    if not isinstance(base, str) or base not in BLOCK_MODELS:
        raise RecordingDamagedError(f"probes.json: block_probes.base={base!r} names no block kernel model "
                                    f"({sorted(BLOCK_MODELS)})")
    return base, section["runner"]


def block_results(doc: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> list[BlockResult]:
    """The block probes' results back from ``probes.json`` and ``probes.npz``, every field checked.

    Raises:
        RecordingDamagedError: naming the probe and the field.
    """
    if block_section(doc) is None:
        return []
    entries = doc["block_probes"].get("probes")
    if not isinstance(entries, list) or len(entries) > _MAX_PROBES:
        raise RecordingDamagedError(f"probes.json: field 'block_probes.probes' is not a list of at most {_MAX_PROBES} "
                                    "block probes")
    results, names = [], set()
    for i, e in enumerate(entries):
        where = f"probes.json: block probe {i}"
        name, m, n, k = _entry(e, where)
        if name in names:
            raise RecordingDamagedError(f"{where}: name {name!r} repeats an earlier probe's")
        names.add(name)
        groups = k // 128
        a = _array(arrays, f"bp_a_{name}", (m, k), np.uint8, where)
        w = _array(arrays, f"bp_w_{name}", (n, k), np.uint8, where)
        sa = _array(arrays, f"bp_sa_{name}", (m, groups), np.uint32, where)
        sw = _array(arrays, f"bp_sw_{name}", (-(-n // 128), groups), np.uint32, where)
        out = _array(arrays, f"bp_out_{name}", (m, n), np.uint16, where)
        probe = BlockProbe(name, torch.from_numpy(a).view(torch.float8_e4m3fn),
                           torch.from_numpy(sa.view(np.int32)).view(torch.float32),
                           torch.from_numpy(w).view(torch.float8_e4m3fn),
                           torch.from_numpy(sw.view(np.int32)).view(torch.float32))
        results.append(BlockResult(probe, torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)))
    return results
