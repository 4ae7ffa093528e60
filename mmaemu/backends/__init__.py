"""Backends: interchangeable executors of the same exact model.

Every backend returns exactly the reference model's bits. ``backend="auto"`` picks the fastest
available backend for the operands' device: ``cpu`` (compiled by numba) for CPU tensors when numba
imports; ``triton`` for CUDA tensors when Triton imports and its self-test (run once per device and
process) passed there; ``reference`` otherwise. When the self-test fails on a device, ``auto``
emits one :class:`~mmaemu.errors.BackendFallbackWarning` per device naming the failed kernel and
the reason. :func:`auto_fallback` says why ``auto`` did not take a faster one.
"""

from __future__ import annotations

import enum
import warnings
from typing import Callable

import torch

from ..accumulation import AccumulationPlan
from ..errors import BackendFallbackWarning
from ..model import Preset
from . import cpu, reference, triton_backend

__all__ = ["Backend", "parse_backend", "resolve_backend", "auto_fallback", "accumulator_function"]


class Backend(enum.Enum):
    """Backend names accepted by ``backend=``."""

    AUTO = "auto"
    REFERENCE = "reference"
    CPU = "cpu"
    TRITON = "triton"


AccumulateFn = Callable[[torch.Tensor, torch.Tensor, Preset, AccumulationPlan], torch.Tensor]


def parse_backend(name: str | Backend) -> Backend:
    """The :class:`Backend` a name stands for (the one parser of backend names).

    Raises:
        ValueError: for an unknown name; the message lists the accepted ones.
    """
    if isinstance(name, Backend):
        return name
    try:
        return Backend(name)
    except ValueError:
        accepted = ", ".join(repr(b.value) for b in Backend)
        raise ValueError(f"backend={name!r} is not a backend; accepted: {accepted}") from None


def resolve_backend(name: str | Backend, device: torch.device) -> Backend:
    """The concrete backend for ``name`` on ``device``.

    Raises:
        ValueError: for an unknown name; the message lists the accepted ones.
    """
    name = parse_backend(name)
    if name is Backend.AUTO:
        if device.type == "cpu" and cpu.available()[0]:
            return Backend.CPU
        if device.type == "cuda":
            usable, reason, failed = _triton_status(device)
            if usable:
                return Backend.TRITON
            if failed:
                _warn_fallback_once(device, reason)
        return Backend.REFERENCE
    return name


def _triton_status(device: torch.device) -> tuple[bool, str, bool]:
    """(usable, reason, self-test failed) of the triton backend on a CUDA device; runs the self-test once."""
    usable, reason = triton_backend.available(device)
    if not usable:
        return False, reason, False
    from .triton_selftest import selftest  # noqa: PLC0415 - imported when a CUDA device asks

    report = selftest(device)
    if report.passed:
        return True, reason, False
    return False, f"self-test failed on {report.device}: {report.summary()}", True


_WARNED: set[str] = set()


def _warn_fallback_once(device: torch.device, reason: str) -> None:
    from .triton_selftest import device_key  # noqa: PLC0415

    key = device_key(device)
    if key in _WARNED:
        return
    _WARNED.add(key)
    warnings.warn(
        f"backend='auto' falls back to the reference backend on {key}: backend 'triton' {reason}",
        BackendFallbackWarning,
        stacklevel=4,
    )


def auto_fallback(device: torch.device) -> str | None:
    """Why ``backend="auto"`` runs the (slow) reference backend on ``device``, or None when it does not."""
    if device.type == "cpu":
        usable, reason = cpu.available()
        return None if usable else f"backend 'cpu': {reason}"
    if device.type == "cuda":
        usable, reason, _ = _triton_status(device)
        return None if usable else f"backend 'triton': {reason}"
    return f"no compiled backend for device type {device.type!r}"


def accumulator_function(backend: Backend) -> AccumulateFn:
    """The accumulate function of a concrete backend."""
    if backend is Backend.REFERENCE:
        return reference.accumulate
    if backend is Backend.CPU:
        return cpu.accumulate
    if backend is Backend.TRITON:
        return triton_backend.accumulate
    raise ValueError(f"not a concrete backend: {backend}")
