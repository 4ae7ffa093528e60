"""Backends: interchangeable executors of the same exact model.

Every backend returns exactly the reference model's bits. ``backend="auto"`` picks the fastest
available backend for the operands' device: ``cpu`` (compiled by numba) for CPU tensors when numba
imports, ``reference`` otherwise. :func:`auto_fallback` says why ``auto`` did not take a faster one.
"""

from __future__ import annotations

import enum
from typing import Callable

import torch

from ..accumulation import AccumulationPlan
from ..model import Preset
from . import cpu, reference

__all__ = ["Backend", "resolve_backend", "auto_fallback", "accumulator_function"]


class Backend(enum.Enum):
    """Backend names accepted by ``backend=``."""

    AUTO = "auto"
    REFERENCE = "reference"
    CPU = "cpu"


AccumulateFn = Callable[[torch.Tensor, torch.Tensor, Preset, AccumulationPlan], torch.Tensor]


def resolve_backend(name: str | Backend, device: torch.device) -> Backend:
    """The concrete backend for ``name`` on ``device``.

    Raises:
        ValueError: for an unknown name; the message lists the accepted ones.
    """
    if isinstance(name, str):
        try:
            name = Backend(name)
        except ValueError:
            accepted = ", ".join(repr(b.value) for b in Backend)
            raise ValueError(f"backend={name!r} is not a backend; accepted: {accepted}") from None
    if name is Backend.AUTO:
        if device.type == "cpu" and cpu.available()[0]:
            return Backend.CPU
        return Backend.REFERENCE
    return name


def auto_fallback(device: torch.device) -> str | None:
    """Why ``backend="auto"`` runs the (slow) reference backend on ``device``, or None when it does not."""
    if device.type == "cpu":
        usable, reason = cpu.available()
        return None if usable else f"backend 'cpu': {reason}"
    return f"no compiled backend for device type {device.type!r}"


def accumulator_function(backend: Backend) -> AccumulateFn:
    """The accumulate function of a concrete backend."""
    if backend is Backend.REFERENCE:
        return reference.accumulate
    if backend is Backend.CPU:
        return cpu.accumulate
    raise ValueError(f"not a concrete backend: {backend}")
