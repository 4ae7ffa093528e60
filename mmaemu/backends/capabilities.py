"""What each backend can run: one table, read by ``backend="auto"``, ``python -m mmaemu info`` and the tests.

A backend *supports* a call when its requirements are importable, it runs on the operands' device and it
takes their formats. It runs a preset either *natively* (its own compiled kernel) or by delegating the
whole call to the reference backend (presets its kernel does not express: same bits, reference speed).
Whether the Triton kernels passed their self-test on a device is not a capability: the dispatcher
(:mod:`mmaemu.backends`) checks it, once per device and process, before it uses them there.

=========  =======================================  ===============================  ====================
backend    devices                                  presets run natively             requires
=========  =======================================  ===============================  ====================
reference  any device torch computes on (not meta)  all, every format                torch
cpu        cpu                                      truncating, aligned, exact fp32  numba
                                                    (FP8); the zoo presets (fp16,
                                                    bf16, tf32)
triton     cuda (cpu under ``TRITON_INTERPRET=1``)  truncating, aligned, exact fp32  triton
                                                    (FP8 only; the zoo formats go
                                                    to the reference backend)
=========  =======================================  ===============================  ====================

Every backend computes fp32 accumulators. The fp16 accumulator (FP8 or fp16 operands) is
:func:`mmaemu.model.dot`'s alone, in torch on any device; a preset whose fp32 accumulator no
recording decides (``hopper_mma_sync``) is supported by no backend (:func:`supports` says why, and the
reference backend raises ``UnsupportedFeatureError``), rather than approximated.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from ..errors import UnknownNameError
from ..formats import FP8_DTYPES, WIDE_DTYPES
from ..presets import Accumulator, Preset
from . import cpu, reference
from .protocol import Backend, Executor
from .triton import backend as triton_backend

__all__ = ["AUTO_ORDER", "CONCRETE", "CORE", "EXECUTORS", "Backend", "Support", "native", "parse_backend", "supports"]

#: Each concrete backend's :class:`~mmaemu.backends.protocol.Executor` (its module's ``EXECUTOR``).
EXECUTORS: dict[Backend, Executor] = {e.backend: e for e in (reference.EXECUTOR, cpu.EXECUTOR, triton_backend.EXECUTOR)}

#: The backends that compute (``auto`` chooses one of them).
CONCRETE: tuple[Backend, ...] = (Backend.REFERENCE, Backend.CPU, Backend.TRITON)
#: ``auto``'s preference per device type: the first that supports the call wins.
AUTO_ORDER: dict[str, tuple[Backend, ...]] = {
    "cpu": (Backend.CPU, Backend.REFERENCE),
    "cuda": (Backend.TRITON, Backend.REFERENCE),
}
#: Backends that a plain install of mmaemu provides (numba is a core dependency): when ``auto`` cannot
#: use one, it says so once per device with a BackendFallbackWarning. Triton is an extra: without it
#: ``auto`` falls back silently.
CORE: frozenset[Backend] = frozenset({Backend.REFERENCE, Backend.CPU})


def parse_backend(name: str | Backend) -> Backend:
    """The :class:`Backend` a name stands for (the one parser of ``backend=`` values).

    Raises:
        TypeError: ``name`` is neither a string nor a :class:`Backend`.
        UnknownNameError: for an unknown name (a ``ValueError``); the message lists the accepted ones.
    """
    if isinstance(name, Backend):
        return name
    accepted = ", ".join(repr(b.value) for b in Backend)
    if not isinstance(name, str):
        raise TypeError(f"backend must be a string, not {type(name).__name__}: pass one of {accepted}")
    try:
        return Backend(name)
    except ValueError:
        raise UnknownNameError(f"backend={name!r} is not a backend; accepted: {accepted}") from None


@dataclass(frozen=True)
class Support:
    """Whether a backend supports a call, and how.

    Attributes:
        backend: the backend asked about.
        usable: whether it can run the call here.
        native: whether its own kernel computes the preset (False: it delegates to the reference backend).
        reason: why not, or what runs it (library versions, interpreter).
    """

    backend: Backend
    usable: bool
    native: bool
    reason: str

    def __bool__(self) -> bool:
        return self.usable


def native(backend: Backend, preset: Preset, dtypes: tuple[torch.dtype, ...] = ()) -> bool:
    """Whether ``backend``'s own kernel computes ``preset`` for operands of ``dtypes`` (empty: FP8; else
    the dispatcher sends the call to the reference backend).

    Each backend module owns the fact (its executor's ``expresses``); this table only gathers it.
    """
    executor = EXECUTORS.get(backend)
    return executor is not None and executor.expresses(preset, dtypes)


def _requirement(backend: Backend, device: torch.device) -> tuple[bool, str]:
    executor = EXECUTORS.get(backend)
    if executor is None:
        return False, "'auto' is not a concrete backend"
    return executor.available(device)


def supports(backend: Backend | str, preset: Preset | None, dtypes: Iterable[torch.dtype],
             device: torch.device | str) -> Support:
    """Whether ``backend`` can run a call of ``preset`` on operands of ``dtypes`` on ``device``.

    Does not run the Triton self-test (the dispatcher does, before first use on a device).
    With ``preset=None`` only the backend, formats and device are asked about (``native`` is then
    whether the backend is usable).

    Raises:
        ValueError: ``backend`` is not a backend name, or ``device`` is not a torch device.
        TypeError: ``backend`` is neither a string nor a :class:`Backend`.
    """
    chosen = parse_backend(backend)
    try:
        where = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise ValueError(f"device={device!r} is not a torch device ({str(exc).splitlines()[0]})") from None
    dtypes = tuple(dtypes)
    bad = [d for d in dtypes if d not in FP8_DTYPES and d not in WIDE_DTYPES]
    if bad:
        return Support(chosen, False, False, f"operands must be FP8 (float8_e4m3fn or float8_e5m2), or fp16, bf16 or "
                                             f"tf32 (float32) for the zoo presets, not {bad[0]}")
    if preset is not None and Accumulator.FP32 in preset.unmodelled:
        return Support(chosen, False, False, f"preset {preset.name!r} does not model the fp32 accumulator (no recording "
                                             "decides it); every backend computes fp32 accumulators")
    usable, reason = _requirement(chosen, where)
    zoo = any(d in WIDE_DTYPES for d in dtypes)
    if zoo and chosen is Backend.TRITON:
        return Support(chosen, usable, False, f"{reason}; the zoo formats (fp16, bf16, tf32) are delegated to the "
                                              "reference backend")
    if zoo and chosen is Backend.CPU:
        is_native = usable and (preset is None or native(chosen, preset, dtypes))
        return Support(chosen, usable, is_native, reason)
    is_native = usable and (preset is None or native(chosen, preset, dtypes))
    if usable and not is_native and preset is not None:
        reason = f"{reason}; preset {preset.name!r} is delegated to the reference backend"
    return Support(chosen, usable, is_native, reason)
