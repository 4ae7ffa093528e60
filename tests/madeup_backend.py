"""A made-up backend: what adding a backend takes, one module (this one) and one registration.

``mmaemu.backends.register_backend(madeup_backend.EXECUTOR)`` is the registration (docs/architecture.md,
"Where to change what": a backend); nothing else in mmaemu or its tests names this backend. It is the
reference backend's arithmetic behind the contract of :class:`mmaemu.backends._protocol.Executor`, with the
liberties the contract allows a fast backend, so that the dispatcher's rules show on it: it decodes FP8
operands only (the zoo formats are delegated), expresses the truncating presets only (the others are
delegated), counts Inf codes as zeros (the dispatcher recomputes those outputs; NaN codes are zeros in
the reference backend already, and the dispatcher applies the NaN rule), and has a self-test whose outcome
a test sets (:data:`SELFTEST_FAILURE`).
"""

from __future__ import annotations

from typing import Any

import torch

from mmaemu._accumulation import AccumulationPlan
from mmaemu.backends import _reference as reference
from mmaemu.backends._protocol import Accumulated, Backend, Executor
from mmaemu.formats import FP8_DTYPES, fp8_inf_rows
from mmaemu.presets import Preset, Rounding

#: The made-up backend's name.
NAME = Backend.named("madeup")
#: What its self-test says on every device: None (passed), or why it failed (a test sets it).
SELFTEST_FAILURE: str | None = None


def _inf_as_zero(x: torch.Tensor) -> torch.Tensor:
    """FP8 codes with the Inf codes (E5M2 0x7C, 0xFC) replaced by +0."""
    if x.dtype != torch.float8_e5m2:
        return x
    codes = x.view(torch.uint8)
    return torch.where((codes & 0x7F) == 0x7C, torch.zeros_like(codes), codes).view(x.dtype)


class MadeUp(Executor):
    """The reference backend's arithmetic on CPU tensors, as a new backend."""

    def available(self, device: torch.device) -> tuple[bool, str]:
        if device.type != "cpu":
            return False, f"the made-up backend runs on CPU tensors only, not {device.type!r} tensors"
        return True, "made up: the reference backend's arithmetic"

    def expresses(self, preset: Preset, dtypes: tuple[torch.dtype, ...] = ()) -> bool:
        return preset.rounding is Rounding.TRUNCATE

    def accumulate(self, a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan,
                   **options: Any) -> Accumulated:
        assert a.dtype in FP8_DTYPES and b.dtype in FP8_DTYPES and self.expresses(preset), "delegated by the dispatcher"
        met_inf = bool(fp8_inf_rows(a).any() or fp8_inf_rows(b).any())
        return Accumulated(reference.accumulate(_inf_as_zero(a), _inf_as_zero(b), preset, plan), met_inf)

    def selftest_failure(self, device: torch.device, preset: Preset | None = None) -> str | None:
        return SELFTEST_FAILURE


#: The made-up backend: ``auto`` considers it for CPU tensors (after the backends registered before it);
#: an optional extra (no install hint).
EXECUTOR = MadeUp(NAME, ("cpu",), frozenset(FP8_DTYPES))
