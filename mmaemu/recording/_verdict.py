"""A recording's probes read back and analysed: ``probes.json`` and ``probes.npz``, and the verdict.

:func:`probe_document` writes the probe results a recorder measured; :func:`results_from_document`
reads them back, checking every field (a recording is untrusted input); :func:`verdict_from_recording`
analyses them (:func:`mmaemu.recording._probes.analyse`, and the bias probes of
:mod:`mmaemu.recording._bias`), cached per process by the files' sha256 and the recorded compute
capability. On an sm_120 GPU the verdict says whether the probes confirm the experimental ``sm120``
preset (:func:`sm120_note`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..errors import RecordingDamagedError
from ..formats import Fp8Format
from ..platforms._profiles import get_profile
from ..presets import B200_MMA_SYNC, SM120
from ._bias import BiasResult, bias_results, fitting_orders
from ._blockwise import BlockResult, block_results, block_section, fitting_block_models
from ._rowwise import RowwiseResult, fitting_kernels, rowwise_results
from ._format import Recording
from ._probes import (
    PROBES_FORMAT,
    ProbeInput,
    ProbeResult,
    ProbeStage,
    ProbeVerdict,
    analyse,
    one_thread,
)

__all__ = ["probe_document", "results_from_document", "sm120_note", "verdict_from_recording", "with_block", "with_rowwise",
           "with_sm120_note"]


def probe_document(results: Sequence[ProbeResult], errors: Mapping[str, str] | None = None,
                   extra: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``probes.json`` and the arrays of ``probes.npz`` for probe results."""
    doc: dict[str, Any] = {"format": PROBES_FORMAT, "probes": [], "errors": dict(errors or {}), **dict(extra or {})}
    arrays: dict[str, np.ndarray] = {}
    for r in results:
        rows, cols = r.output.shape
        m, n, k = r.probe.shape
        doc["probes"].append({"name": r.probe.name, "stage": r.probe.stage.value, "m": m, "n": n, "k": k,
                              "fast": r.probe.fast, "fmt_a": str(r.probe.a.dtype).replace("torch.", ""),
                              "fmt_b": str(r.probe.b.dtype).replace("torch.", ""), "S": r.S, "custom": r.custom,
                              "compared": [rows, cols]})
        arrays[f"a_{r.probe.name}"] = r.probe.a[:rows].view(torch.uint8).numpy().copy()
        arrays[f"b_{r.probe.name}"] = r.probe.b[:cols].view(torch.uint8).numpy().copy()
        arrays[f"out_{r.probe.name}"] = r.output.contiguous().view(torch.int32).numpy().view(np.uint32).copy()
    return doc, arrays




def results_from_document(doc: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> list[ProbeResult]:
    """Probe results back from ``probes.json`` and ``probes.npz`` (inputs cut to the compared corner).

    Both come from a recording, untrusted: every field and array is checked before it is used.

    Raises:
        RecordingDamagedError: naming the probe and the field (a missing or mistyped field, an unknown
            stage or format, S or customOption outside a byte, an array of another shape or dtype).
    """
    probes = doc.get("probes", [])
    if not isinstance(probes, list) or len(probes) > _MAX_PROBES:
        raise RecordingDamagedError(f"probes.json: field 'probes' is not a list of at most {_MAX_PROBES} probes")
    results = []
    names: set[str] = set()
    for i, p in enumerate(probes):
        try:
            result = _probe_result(p, arrays)
            if p["name"] in names:
                raise ValueError(f"field 'name'={p['name']!r} repeats an earlier probe's")
            names.add(p["name"])
        except (ValueError, KeyError, TypeError) as exc:
            raise RecordingDamagedError(f"probes.json: probe {i}: {exc}") from None
        if result is not None:
            results.append(result)
    return results


#: The most probes a recording holds, and the most multiply-adds one probe's analysis may cost per
#: candidate (rows x columns x K): the recorder's arithmetic and slow probes are 2**18, its split probes'
#: compared corners 16 x 16 with K up to 2**20.
_MAX_PROBES = 64
_PROBE_COST = {"arithmetic": 1 << 20, "slow-interval": 1 << 20, "split": 1 << 28}


_PROBE_INTS = {"m": (1, 1 << 21), "n": (1, 1 << 21), "k": (1, 1 << 21), "S": (1, 256), "custom": (0, 256)}
_FP8_NAMES = {str(f.dtype).replace("torch.", ""): f.dtype for f in Fp8Format}


def _probe_result(p: Any, arrays: Mapping[str, np.ndarray]) -> ProbeResult | None:
    """One probe's result (None when the GPU returned no output for it); ValueError naming the field."""
    if not isinstance(p, dict):
        raise ValueError("not a JSON object")
    name = p.get("name")
    if not isinstance(name, str) or not name or len(name) > 128 or not all(c.isalnum() or c in "_-." for c in name):
        raise ValueError(f"field 'name'={name!r} is not a plain name")
    for key, (lo, hi) in _PROBE_INTS.items():
        value = p.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value < hi:
            raise ValueError(f"field {key!r}={value!r} is not an integer in [{lo}, {hi})")
    if not isinstance(p.get("fast"), bool):
        raise ValueError(f"field 'fast'={p.get('fast')!r} is not true or false")
    stages = [s.value for s in ProbeStage]
    if p.get("stage") not in stages:
        raise ValueError(f"field 'stage'={p.get('stage')!r} is not one of {stages}")
    stage = ProbeStage(p["stage"])
    dtypes = []
    for key in ("fmt_a", "fmt_b"):
        if p.get(key) not in _FP8_NAMES:
            raise ValueError(f"field {key!r}={p.get(key)!r} is not one of {sorted(_FP8_NAMES)}")
        dtypes.append(_FP8_NAMES[p[key]])
    if f"out_{name}" not in arrays:
        return None
    a, b, out = (np.ascontiguousarray(arrays.get(f"{x}_{name}")) for x in ("a", "b", "out"))
    rows, cols, k = out.shape[0] if out.ndim == 2 else -1, out.shape[1] if out.ndim == 2 else -1, p["k"]
    for what, arr, shape, dtype in (("a", a, (rows, k), np.uint8), ("b", b, (cols, k), np.uint8),
                                    ("out", out, (rows, cols), np.uint32)):
        if arr.shape != shape or arr.dtype != dtype or not 0 < rows <= p["m"] or not 0 < cols <= p["n"]:
            raise ValueError(f"array {what}_{name} is {arr.dtype} {arr.shape}, not {np.dtype(dtype)} {shape} (within "
                             f"m = {p['m']}, n = {p['n']})")
    if rows * cols * k > _PROBE_COST[stage.value]:
        raise ValueError(f"{rows} x {cols} outputs of K = {k}: more work than a {stage.value} probe may take "
                         f"({_PROBE_COST[stage.value]:,} multiply-adds per candidate)")
    if p.get("compared") != [rows, cols]:
        raise ValueError(f"field 'compared'={p.get('compared')!r} is not the output's shape [{rows}, {cols}]")
    ta = torch.from_numpy(a).view(dtypes[0])
    tb = torch.from_numpy(b).view(dtypes[1])
    t_out = torch.from_numpy(out.view(np.int32)).view(torch.float32)
    return ProbeResult(ProbeInput(name, stage, ta, tb, p["fast"]), t_out, p["S"], p["custom"])


_VERDICTS: dict[tuple[str, str, str], ProbeVerdict] = {}


def verdict_from_recording(rec: Recording) -> ProbeVerdict:
    """The probes' verdict for a recording (no probes: a verdict that fits nothing).

    The verdict is a function of ``probes.json``, ``probes.npz`` and the recorded compute capability
    (:func:`sm120_note`) only; it is cached per process by the files' sha256 and the capability.
    """
    capability = rec.environment.get("capability")
    key = (rec.files.get("probes.json", ""), rec.files.get("probes.npz", ""), repr(capability))
    cached = _VERDICTS.get(key)
    if cached is not None:
        return cached
    doc = rec.probes()
    results = results_from_document(doc, rec.probe_arrays()) if doc is not None else []
    verdict = analyse(results)
    biased = bias_results(doc, rec.probe_arrays()) if doc is not None else []
    if biased:
        verdict = _with_bias(verdict, biased)
    rowwise = rowwise_results(doc, rec.probe_arrays()) if doc is not None else []
    if rowwise:
        verdict = with_rowwise(verdict, rowwise, rec.environment.get("sm_count"))
    block = block_results(doc, rec.probe_arrays()) if doc is not None else []
    if block and doc is not None:
        section = block_section(doc)
        assert section is not None
        verdict = with_block(verdict, block, section[0], standard=bool(results))
    verdict = with_sm120_note(verdict, capability)
    _VERDICTS[key] = verdict
    return verdict


def with_sm120_note(verdict: ProbeVerdict, capability: object) -> ProbeVerdict:
    """The verdict with :func:`sm120_note`'s note (if any) for a recorded capability (``[major, minor]``)."""
    note = sm120_note(verdict, tuple(capability) if isinstance(capability, list) else None)
    if note is None:
        return verdict
    return dataclasses.replace(verdict, notes=(*verdict.notes, note), summary=f"{verdict.summary}; {note}")


def sm120_note(verdict: ProbeVerdict, capability: tuple[int, ...] | None) -> str | None:
    """What the arithmetic probes say of the experimental ``sm120`` preset, or None when they say nothing.

    On a GPU of compute capability 12.x (sm_120: RTX 50-series, RTX PRO 6000) the probes confirm
    ``sm120`` (the paper's B200 model fits, alone among the candidates) or contradict it (naming what
    fits instead, ``b200_mma_sync`` among them). Elsewhere the note appears only when ``sm120``'s
    arithmetic is the one that fits, to say that the GPU is not an sm_120 one.

    Args:
        verdict: the probes' verdict.
        capability: the recorded ``[major, minor]``, or None when not recorded.
    """
    fitting = [c.preset().name for c in verdict.fitting]
    if capability is None or len(capability) != 2 or capability[0] != 12:
        if verdict.preset is SM120:
            where = f"compute capability {capability[0]}.{capability[1]}" if capability and len(capability) == 2 \
                else "an unrecorded compute capability"
            return f"sm120's arithmetic (the paper's B200 model) fits a GPU of {where}, not an sm_120 one"
        return None
    if not verdict.fitting:
        return "sm_120 GPU: the arithmetic probes are undetermined or fit no candidate; sm120 is not confirmed"
    if fitting == [SM120.name]:
        return "sm_120 GPU: the arithmetic probes confirm preset 'sm120' (the B200 model of arXiv:2512.07004)"
    others = ", ".join(fitting)
    also = " (b200_mma_sync's structure fits: the HMMA rewrite)" if B200_MMA_SYNC.name in fitting else ""
    verb = "do not decide" if SM120.name in fitting else "contradict"
    return f"sm_120 GPU: the arithmetic probes {verb} preset 'sm120': {others} fit{also}"


def _with_bias(verdict: ProbeVerdict, biased: Sequence[BiasResult]) -> ProbeVerdict:
    """The verdict with the bias probes' answer (which bias orders fit, under the verdict's preset)."""
    if verdict.preset is None:
        return dataclasses.replace(verdict, bias_probes=len(biased), summary=verdict.summary + "; bias probes not "
                                   "analysed (no preset)")
    profile = dataclasses.replace(get_profile("hopper", warn=False), name="bias-probes", preset=verdict.preset,
                                  table_id=None, maturity=verdict.preset.maturity)
    with one_thread():
        orders = fitting_orders(biased, profile)
    said = ", ".join(o.value for o in orders) if orders else "none"
    return dataclasses.replace(verdict, bias_probes=len(biased), bias_orders=orders, fits=verdict.fits and bool(orders),
                               summary=f"{verdict.summary}; bias order {said}")


def with_rowwise(verdict: ProbeVerdict, results: Sequence[RowwiseResult], sm_count: object) -> ProbeVerdict:
    """The verdict with the row-wise probes' answer: which candidates of the verdict's preset's row-wise kernel
    reproduce every probe (the kernel of the recorded GPU's architecture, with its recorded SM count)."""
    if verdict.preset is None:
        return dataclasses.replace(verdict, rowwise_probes=len(results),
                                   summary=verdict.summary + "; row-wise probes not analysed (no preset)")
    sms = sm_count if isinstance(sm_count, int) and not isinstance(sm_count, bool) and 0 < sm_count < 1 << 16 else 1
    profile = dataclasses.replace(get_profile("hopper", warn=False), name="rowwise-probes", preset=verdict.preset,
                                  table_id=None, maturity=verdict.preset.maturity, sm_count=sms)
    try:
        with one_thread():
            names = tuple(c.name for c in fitting_kernels(results, profile))
    except ValueError as exc:  # no row-wise kernel model for this preset
        return dataclasses.replace(verdict, rowwise_probes=len(results), summary=f"{verdict.summary}; row-wise: {exc}")
    said = names[0] if len(names) == 1 else (f"{len(names)} candidates fit" if names else "no candidate fits")
    return dataclasses.replace(verdict, rowwise_probes=len(results), rowwise_kernels=names,
                               fits=verdict.fits and bool(names), summary=f"{verdict.summary}; row-wise kernel {said}")


def with_block(verdict: ProbeVerdict, results: Sequence[BlockResult], base: str, standard: bool) -> ProbeVerdict:
    """The verdict with the block probes' answer: which candidates of ``base`` (the block kernel model whose kernel
    ran them) reproduce every block probe. A recording of block probes alone (``standard`` False: no arithmetic
    probe) fits when exactly one candidate does; otherwise that is required on top of the arithmetic verdict."""
    with one_thread():
        names = tuple(c.name for c in fitting_block_models(results, base))
    said = names[0] if len(names) == 1 else (f"{len(names)} candidates fit" if names else "no candidate fits")
    head = verdict.summary if standard else "block probes only"
    fits = (verdict.fits or not standard) and len(names) == 1
    return dataclasses.replace(verdict, block_probes=len(results), block_base=base, block_kernels=names, fits=fits,
                               summary=f"{head}; block kernel {said}")

