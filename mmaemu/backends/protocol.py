"""What a backend is: its name, and the one object (:class:`Executor`) through which the dispatcher uses it.

A backend module provides three functions and wraps them in an :class:`Executor`:

- ``available(device)``: ``(usable, reason)``, whether its requirements import and it runs on ``device``;
- ``expresses(preset, dtypes)``: whether its own kernels compute ``preset`` for operands of ``dtypes``
  (an empty tuple: FP8 operands);
- ``accumulate(a, b, preset, plan, **options)``: the fp32 accumulators of a call it expresses, as an
  :class:`Accumulated`.

The backend computes only what it expresses, and may count Inf codes as zeros (it says so in
:attr:`Accumulated.inf_zeroed`). The dispatcher (:mod:`mmaemu.backends._dispatch`) alone sends the
presets a backend does not express to the reference backend, recomputes the outputs that meet an Inf
code, and applies the NaN rule, so a new backend is one module and a row of
:data:`mmaemu.backends.capabilities.EXECUTORS`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple

import torch

from ..accumulation import AccumulationPlan
from ..presets import Preset

__all__ = ["Accumulated", "Backend", "Executor"]


class Backend(enum.Enum):
    """Backend names accepted by ``backend=``."""

    AUTO = "auto"
    REFERENCE = "reference"
    CPU = "cpu"
    TRITON = "triton"


class Accumulated(NamedTuple):
    """A backend's fp32 accumulators ``[M, N]``.

    Attributes:
        values: the accumulators; NaN codes counted as zeros (the dispatcher applies the NaN rule);
            exact zero results are +0.
        inf_zeroed: whether Inf codes were counted as zeros (then the outputs whose row of ``a`` or
            of ``b`` holds one are wrong until the dispatcher recomputes them by the IEEE rules).
    """

    values: torch.Tensor
    inf_zeroed: bool


@dataclass(frozen=True)
class Executor:
    """One backend as the dispatcher sees it: its module's three functions (see the module docstring),
    looked up at each call, so that a replaced function (a test's monkeypatch) takes effect.

    Attributes:
        backend: its name.
        module: the backend's module, with ``available``, ``expresses`` and the function named ``kernel``.
        kernel: the name of the module's ``(a, b, preset, plan, **options) -> Accumulated`` function.
    """

    backend: Backend
    module: ModuleType
    kernel: str = "accumulate"

    def available(self, device: torch.device) -> tuple[bool, str]:
        """(usable, reason): whether the backend runs on ``device`` here."""
        result: tuple[bool, str] = self.module.available(device)
        return result

    def expresses(self, preset: Preset, dtypes: tuple[torch.dtype, ...] = ()) -> bool:
        """Whether the backend's own kernels compute ``preset`` for operands of ``dtypes`` (empty: FP8)."""
        return bool(self.module.expresses(preset, dtypes))

    def accumulate(self, a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan,
                   **options: Any) -> Accumulated:
        """The backend's accumulators for a call it :meth:`expresses`."""
        result: Accumulated = getattr(self.module, self.kernel)(a, b, preset, plan, **options)
        return result

    def __repr__(self) -> str:
        return f"Executor({self.backend.value!r})"
