"""What each backend can run: the registered backends, read by ``backend="auto"``, ``python -m mmaemu info``
and the tests.

A backend is registered once (:func:`register_backend`; the shipped ones are :data:`SHIPPED`), and every
list here is derived from the registered :class:`~mmaemu.backends.Executor` objects: the names
``backend=`` accepts (:func:`parse_backend`), the concrete backends (:data:`CONCRETE`), ``auto``'s order per
device type (:func:`auto_order`) and what each supports (:func:`supports`). ``python -m mmaemu info`` prints
the table on this machine; each backend's module says what it needs and where it runs.

A backend *supports* a call when its requirements are importable, it runs on the operands' device and it
takes their formats. It runs a preset either *natively* (its own kernel) or by delegating the whole call
to the reference backend (formats its kernels do not decode, presets they do not express: same bits,
reference speed). Whether a backend's self-test passed on a device is not a capability: the dispatcher
(:mod:`mmaemu.backends`) asks it (:meth:`~mmaemu.backends.Executor.selftest_failure`) before it
uses the backend there.

Every backend computes fp32 accumulators. The fp16 accumulator (FP8 or fp16 operands) is
:func:`mmaemu.model.dot`'s alone, in torch on any device; a preset whose fp32 accumulator no
recording decides (``hopper_mma_sync``) is supported by no backend (:func:`supports` says why, and the
reference backend raises ``UnsupportedFeatureError``), rather than approximated.
"""

from __future__ import annotations

from collections.abc import Iterable, KeysView
from dataclasses import dataclass

import torch

from ..errors import UnknownNameError
from ..formats import FP8_DTYPES, WIDE_DTYPES, Fp8Format, WideFormat
from ..presets import Accumulator, Preset
from . import _cpu as cpu, _reference as reference
from ._protocol import Backend, Executor
from ._triton import _executor as triton_executor

__all__ = [
    "CONCRETE",
    "EXECUTORS",
    "FALLBACK",
    "SHIPPED",
    "Backend",
    "Support",
    "auto_order",
    "native",
    "parse_backend",
    "register_backend",
    "supports",
    "unregister_backend",
]

#: The backends mmaemu ships, registered on import in this order (``auto``'s preference, where two serve one
#: device type). A new backend is its module and one entry here (or a :func:`register_backend` call).
SHIPPED: tuple[Executor, ...] = (reference.EXECUTOR, cpu.EXECUTOR, triton_executor.EXECUTOR)
#: The backend that runs every call on every device: the model itself, which the others delegate to and
#: ``auto`` falls back to.
FALLBACK: Backend = Backend.REFERENCE

#: Each registered backend's executor, in the order of registration.
EXECUTORS: dict[Backend, Executor] = {}
#: The registered backends (``auto`` chooses one of them): a live view of :data:`EXECUTORS`.
CONCRETE: KeysView[Backend] = EXECUTORS.keys()


def register_backend(executor: Executor) -> None:
    """Register a backend: ``backend="<its name>"`` runs it, ``auto`` considers it for its
    :attr:`~mmaemu.backends.Executor.auto_devices` (after those registered before it), and
    :func:`supports`, ``python -m mmaemu info`` and the tests' differential suite list it.

    Raises:
        TypeError: ``executor`` is not an :class:`~mmaemu.backends.Executor`.
        ValueError: a backend of that name is registered already (:func:`unregister_backend` it first).
    """
    if not isinstance(executor, Executor):
        raise TypeError(f"register_backend takes an Executor (mmaemu.backends._protocol), not {type(executor).__name__}")
    name = executor.backend
    if name in EXECUTORS:
        raise ValueError(f"a backend named {name.value!r} is registered already: unregister_backend({name.value!r}) "
                         "first, or give the new one another name")
    EXECUTORS[name] = executor
    Backend._members[name.value] = name


def unregister_backend(backend: str | Backend) -> Executor:
    """Remove a registered backend (not a shipped one); returns its executor.

    Raises:
        TypeError: ``backend`` is neither a string nor a :class:`Backend`.
        UnknownNameError: no backend of that name is registered (a ``ValueError``).
        ValueError: ``backend`` is ``auto`` or a shipped backend (they stay registered).
    """
    chosen = parse_backend(backend)
    if chosen is Backend.AUTO or any(e.backend is chosen for e in SHIPPED):
        raise ValueError(f"backend {chosen.value!r} ships with mmaemu and stays registered")
    del Backend._members[chosen.value]
    return EXECUTORS.pop(chosen)


for _shipped in SHIPPED:
    register_backend(_shipped)
del _shipped


def auto_order(device_type: str) -> tuple[Backend, ...]:
    """``auto``'s preference on a device type: the registered backends that name it in their
    :attr:`~mmaemu.backends.Executor.auto_devices`, in the order of registration, then
    :data:`FALLBACK`. The first that supports a call (and passed its self-test) wins."""
    return (*(b for b, e in EXECUTORS.items() if b is not FALLBACK and device_type in e.auto_devices), FALLBACK)


def parse_backend(name: str | Backend) -> Backend:
    """The :class:`Backend` a name stands for (the one parser of ``backend=`` values).

    Raises:
        TypeError: ``name`` is neither a string nor a :class:`Backend`.
        UnknownNameError: for a name no registered backend has (a ``ValueError``); the message lists the
            accepted ones.
    """
    accepted = ", ".join(repr(b.value) for b in Backend)
    if isinstance(name, Backend):
        if name is Backend.AUTO or name in EXECUTORS:
            return name
        name = name.value
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

    Each backend owns the fact (its executor's ``expresses``); this table only gathers it.
    """
    executor = EXECUTORS.get(backend)
    return executor is not None and executor.expresses(preset, dtypes)


_FORMAT_NAMES = {f.dtype: f.short_name for f in (*Fp8Format, *WideFormat)}


def supports(backend: Backend | str, preset: Preset | None, dtypes: Iterable[torch.dtype],
             device: torch.device | str) -> Support:
    """Whether ``backend`` can run a call of ``preset`` on operands of ``dtypes`` on ``device``.

    Does not run a self-test (the dispatcher does, before first use on a device).
    With ``preset=None`` only the backend, formats and device are asked about (``native`` is then
    whether the backend is usable and decodes the formats).

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
    executor = EXECUTORS.get(chosen)
    if executor is None:
        return Support(chosen, False, False, "'auto' is not a concrete backend")
    usable, reason = executor.available(where)
    undecoded = sorted({_FORMAT_NAMES[d] for d in dtypes if d not in executor.formats})
    is_native = usable and not undecoded and (preset is None or executor.expresses(preset, dtypes))
    if usable and undecoded:
        reason = f"{reason}; its kernels do not decode {', '.join(undecoded)}: such calls are delegated to the " \
                 "reference backend"
    elif usable and not is_native and preset is not None:
        reason = f"{reason}; preset {preset.name!r} is delegated to the reference backend"
    return Support(chosen, usable, is_native, reason)
