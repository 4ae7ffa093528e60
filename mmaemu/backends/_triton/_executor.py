"""The Triton backend as the dispatcher uses it: the kernels of :mod:`~mmaemu.backends._triton.backend`, on a
device once the self-test of :mod:`~mmaemu.backends._triton._selftest` passed there.
"""

from __future__ import annotations

from typing import Any

import torch

from ..._accumulation import AccumulationPlan
from ...formats import FP8_DTYPES
from ...presets import Preset
from .._protocol import Accumulated, Backend, Executor
from . import _selftest, backend

__all__ = ["EXECUTOR"]


class _Triton(Executor):
    """The backend module's functions, looked up at each call, behind the self-test."""

    def available(self, device: torch.device) -> tuple[bool, str]:
        return backend.available(device)

    def expresses(self, preset: Preset, dtypes: tuple[torch.dtype, ...] = ()) -> bool:
        return backend.expresses(preset, dtypes)

    def accumulate(self, a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan,
                   **options: Any) -> Accumulated:
        """:func:`mmaemu.backends._triton.backend.accumulate`, with its options (``config``, ``launch``,
        ``formulation``)."""
        return backend.accumulate(a, b, preset, plan, **options)

    def selftest_failure(self, device: torch.device, preset: Preset | None = None) -> str | None:
        """Why the kernels may not run on ``device``: the self-test (once per device and process) of the
        shipped presets' variants failed there, or, for ``preset`` (a fitted or registered one), that of its
        variant on its first use; else None."""
        report = _selftest.selftest(device)
        if not report.passed:
            return f"self-test failed on {report.device}: {report.summary()}"
        if preset is not None:
            result = _selftest.selftest_kernel(device, preset)
            if not result.passed:
                return f"self-test failed on {report.device}: kernel {result.kernel} failed: {result.reason}"
        return None


#: The Triton backend as the dispatcher uses it: ``auto``'s choice for CUDA tensors; FP8 operands (the
#: zoo formats go to the reference backend). An optional extra: without Triton, ``auto`` passes it over.
EXECUTOR = _Triton(Backend.TRITON, ("cuda",), frozenset(FP8_DTYPES))
