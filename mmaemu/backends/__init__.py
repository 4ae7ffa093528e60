"""Backends: interchangeable executors of the same exact model.

Every backend returns exactly the reference model's bits. ``backend="auto"`` picks, for the operands'
device, the first registered backend that runs there (:func:`mmaemu.backends.auto_order`):
``cpu`` (compiled by numba, a dependency) for CPU tensors; ``triton`` for CUDA tensors when Triton imports
and its self-test (run once per device and process) passed there; ``reference`` otherwise. When a backend
a plain install provides cannot load, or a self-test fails on a device, ``auto`` emits one
:class:`~mmaemu.errors.BackendFallbackWarning` per device saying why. :func:`auto_fallback` says why
``auto`` did not take a faster one.

Each backend is one module with one :class:`~mmaemu.backends.Executor`, registered once
(:func:`register_backend`); this module asks every backend the same questions (available, self-test),
and :func:`accumulators` and :func:`run` (:mod:`mmaemu.backends._dispatch`) alone send what a backend
does not express to the reference backend and apply the Inf and NaN rules.
"""

from __future__ import annotations

from typing import Any

import torch

from .._accumulation import AccumulationPlan
from ..errors import BackendFallbackWarning, BackendUnavailableError, warn_caller
from ..presets import Preset
from . import _dispatch
from ._capabilities import (
    CONCRETE,
    EXECUTORS,
    FALLBACK,
    Backend,
    Support,
    auto_order,
    parse_backend,
    register_backend,
    supports,
    unregister_backend,
)
from ._cpu_scratch import release_scratch
from ._protocol import Accumulated, Executor, device_key

__all__ = [
    "Backend",
    "Executor",
    "Accumulated",
    "register_backend",
    "unregister_backend",
    "auto_order",
    "CONCRETE",
    "EXECUTORS",
    "supports",
    "Support",
    "resolve_backend",
    "release_scratch",
]


def resolve_backend(name: str | Backend, device: torch.device, preset: Preset | None = None) -> Backend:
    """The concrete backend for ``name`` on ``device``: ``auto`` takes the first of
    :func:`~mmaemu.backends.auto_order` that supports the call (and passed its
    self-test, for ``preset``'s kernel variant too when given).

    Raises:
        ValueError: for an unknown name; the message lists the accepted ones.
    """
    chosen = parse_backend(name)
    if chosen is not Backend.AUTO:
        return chosen
    news: tuple[Backend, str] | None = None  # the first backend auto passed over that the user should hear of
    for chosen in auto_order(device.type):
        if chosen is FALLBACK:
            break
        executor = EXECUTORS[chosen]
        support = supports(chosen, None, (), device)
        if not support:
            if executor.install_hint is not None and news is None:  # installed with mmaemu: its absence is news
                news = (chosen, f"is unavailable: {support.reason} ({executor.install_hint})")
            continue
        failure = executor.selftest_failure(device, preset)
        if failure is None:
            break
        news = news or (chosen, failure)
    if news is not None:
        _warn_fallback_once(device, chosen, *news)
    return chosen


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
    failure = EXECUTORS[backend].selftest_failure(device, preset)
    if failure is not None:
        raise BackendUnavailableError(f"backend {backend.value!r} {failure}; {instead}")


_WARNED: set[str] = set()


def _warn_fallback_once(device: torch.device, chosen: Backend, backend: Backend, reason: str) -> None:
    key = device_key(device) if device.type != "cpu" else "cpu"
    if key in _WARNED:
        return
    _WARNED.add(key)
    instead = "the reference backend" if chosen is FALLBACK else f"backend {chosen.value!r}"
    warn_caller(f"backend='auto' falls back to {instead} on {key}: backend {backend.value!r} {reason}",
                BackendFallbackWarning)


def auto_fallback(device: torch.device) -> str | None:
    """Why ``backend="auto"`` runs the (slow) reference backend on ``device``, or None when it does not."""
    preferred = [b for b in auto_order(device.type) if b is not FALLBACK]
    if not preferred:
        return f"no compiled backend for device type {device.type!r}"
    reasons = []
    for candidate in preferred:
        support = supports(candidate, None, (), device)
        if not support.usable:
            reasons.append(f"backend {candidate.value!r}: {support.reason}")
        else:
            failure = EXECUTORS[candidate].selftest_failure(device)
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
