"""Backends: interchangeable executors of the same exact model.

Every backend returns exactly the reference model's bits. ``backend="auto"`` picks the fastest
available backend for the operands' device (:mod:`mmaemu.backends.capabilities`): ``cpu`` (compiled by
numba, a dependency) for CPU tensors; ``triton`` for CUDA tensors when Triton imports and its self-test
(run once per device and process) passed there; ``reference`` otherwise. When numba cannot load, or the
self-test fails on a device, ``auto`` emits one :class:`~mmaemu.errors.BackendFallbackWarning` per device
saying why. :func:`auto_fallback` says why ``auto`` did not take a faster one.

Each backend is one module with one :class:`~mmaemu.backends.protocol.Executor` (``available``,
``expresses``, ``accumulate``); :func:`accumulators` and :func:`run` (:mod:`mmaemu.backends._dispatch`)
alone send what a backend does not express to the reference backend and apply the Inf and NaN rules.
"""

from __future__ import annotations

from typing import Any

import torch

from ..accumulation import AccumulationPlan
from ..errors import BackendFallbackWarning, BackendUnavailableError, warn_caller
from ..presets import Preset
from . import _dispatch
from .capabilities import (
    AUTO_ORDER,
    CONCRETE,
    CORE,
    EXECUTORS,
    Backend,
    Support,
    parse_backend,
    supports,
)
from .protocol import Accumulated, Executor
from .triton import _selftest as triton_selftest

__all__ = [
    "Backend",
    "Support",
    "CONCRETE",
    "parse_backend",
    "supports",
    "resolve_backend",
    "require",
    "auto_fallback",
    "accumulators",
    "run",
    "Accumulated",
    "Executor",
    "EXECUTORS",
]


def _selftest_failure(backend: Backend, device: torch.device, preset: Preset | None = None) -> str | None:
    """Why ``backend``'s kernels may not be used on ``device`` (its self-test failed there), or None.

    The Triton kernels run their self-test once per device and process before first use there (CUDA
    devices, and the CPU under Triton's interpreter): the shipped presets' variants first, then the
    variant of ``preset`` (a fitted or registered one) on its first use.
    """
    if backend is not Backend.TRITON:
        return None
    report = triton_selftest.selftest(device)
    if not report.passed:
        return f"self-test failed on {report.device}: {report.summary()}"
    if preset is not None:
        result = triton_selftest.selftest_kernel(device, preset)
        if not result.passed:
            return f"self-test failed on {report.device}: kernel {result.kernel} failed: {result.reason}"
    return None


def resolve_backend(name: str | Backend, device: torch.device, preset: Preset | None = None) -> Backend:
    """The concrete backend for ``name`` on ``device``: ``auto`` takes the first of
    :data:`~mmaemu.backends.capabilities.AUTO_ORDER` that supports the call (and passed its
    self-test, for ``preset``'s kernel variant too when given).

    Raises:
        ValueError: for an unknown name; the message lists the accepted ones.
    """
    chosen = parse_backend(name)
    if chosen is not Backend.AUTO:
        return chosen
    for candidate in AUTO_ORDER.get(device.type, (Backend.REFERENCE,)):
        if candidate is Backend.REFERENCE:
            return candidate
        support = supports(candidate, None, (), device)
        if not support:
            if candidate in CORE:  # installed with mmaemu, so its absence is news
                _warn_fallback_once(candidate, device, f"is unavailable: {support.reason} (numba is a dependency of "
                                                       "mmaemu: pip install numba, or reinstall mmaemu)")
            continue
        failure = _selftest_failure(candidate, device, preset)
        if failure is None:
            return candidate
        _warn_fallback_once(candidate, device, failure)
    return Backend.REFERENCE


def require(backend: Backend, device: torch.device, preset: Preset | None) -> None:
    """Check that a backend named explicitly can run on ``device`` (self-test included; of ``preset``'s
    kernel variant too when given).

    Raises:
        BackendUnavailableError: it cannot; the message says why and what to pass instead.
    """
    instead = "pass backend='auto' (it picks a backend that runs here) or backend='reference'"
    support = supports(backend, preset, (), device)
    if not support.usable:
        raise BackendUnavailableError(f"backend {backend.value!r} is unavailable: {support.reason}; {instead}")
    failure = _selftest_failure(backend, device, preset)
    if failure is not None:
        raise BackendUnavailableError(f"backend {backend.value!r} {failure}; {instead}")


_WARNED: set[str] = set()


def _warn_fallback_once(backend: Backend, device: torch.device, reason: str) -> None:
    key = triton_selftest.device_key(device) if device.type != "cpu" else "cpu"
    if key in _WARNED:
        return
    _WARNED.add(key)
    warn_caller(
        f"backend='auto' falls back to the reference backend on {key}: backend {backend.value!r} {reason}",
        BackendFallbackWarning)


def auto_fallback(device: torch.device) -> str | None:
    """Why ``backend="auto"`` runs the (slow) reference backend on ``device``, or None when it does not."""
    preferred = [b for b in AUTO_ORDER.get(device.type, ()) if b is not Backend.REFERENCE]
    if not preferred:
        return f"no compiled backend for device type {device.type!r}"
    reasons = []
    for candidate in preferred:
        support = supports(candidate, None, (), device)
        if not support.usable:
            reasons.append(f"backend {candidate.value!r}: {support.reason}")
        else:
            failure = _selftest_failure(candidate, device)
            if failure is None:
                return None
            reasons.append(f"backend {candidate.value!r}: {failure}")
    return "; ".join(reasons)



def _executor(backend: Backend) -> Executor:
    executor = EXECUTORS.get(backend)
    if executor is None:
        raise ValueError(f"not a concrete backend: {backend}; pass one of {', '.join(b.value for b in CONCRETE)}")
    return executor


def accumulators(backend: Backend, a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan,
                 **options: Any) -> torch.Tensor:
    """fp32 accumulators ``[M, N]`` of a concrete ``backend``, delegation and the Inf rule applied (NaN
    codes count as zeros): :func:`mmaemu.backends._dispatch.accumulators`.

    Raises:
        ValueError: ``backend`` is not a concrete backend.
    """
    return _dispatch.accumulators(_executor(backend), a, b, preset, plan, **options)


def run(backend: Backend, a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan) -> torch.Tensor:
    """:func:`accumulators` with the NaN rule: what a call's epilogue takes
    (:func:`mmaemu.backends._dispatch.run`).

    Raises:
        ValueError: ``backend`` is not a concrete backend.
    """
    return _dispatch.run(_executor(backend), a, b, preset, plan)
