"""What a backend is: its name (:class:`Backend`) and its contract with the dispatcher (:class:`Executor`).

A backend is one module that defines an :class:`Executor` subclass and one instance of it, and one
registration (:func:`mmaemu.backends.register_backend`; the shipped backends are registered
in :data:`mmaemu.backends._capabilities.SHIPPED`). The executor says:

- its name (:attr:`Executor.backend`), the device types ``backend="auto"`` takes it for
  (:attr:`Executor.auto_devices`), the operand formats its kernels decode (:attr:`Executor.formats`) and,
  for a backend that a plain install provides, what to do when it cannot load
  (:attr:`Executor.install_hint`);
- :meth:`~Executor.available`: whether its requirements import and it runs on a device;
- :meth:`~Executor.expresses`: whether its own kernels compute a preset for operands of some formats;
- :meth:`~Executor.accumulate`: the fp32 accumulators of a call it expresses, as an :class:`Accumulated`;
- :meth:`~Executor.selftest_failure`: whether a self-test keeps its kernels off a device.

A class that leaves out one of these cannot be instantiated (they are abstract), and a field left out
fails the constructor: a backend that breaks the contract fails where it is defined, not when called.

The backend computes only what it expresses, counts NaN codes as zeros, and may count Inf codes as zeros
(it says so in :attr:`Accumulated.inf_zeroed`). The dispatcher (:mod:`mmaemu.backends._dispatch`) alone sends the
presets a backend does not express to the reference backend, recomputes the outputs that meet an Inf
code, and applies the NaN rule; :mod:`mmaemu.backends` alone chooses a backend and asks its self-test.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch

from .._accumulation import AccumulationPlan
from ..formats import FP8_DTYPES, WIDE_DTYPES
from ..presets import Preset

__all__ = ["Accumulated", "Backend", "Executor", "device_key"]

class _Members(type):
    """Lets ``for b in Backend`` list the names ``backend=`` accepts, as an enum lists its members."""

    _members: dict[str, Backend]

    def __iter__(cls) -> Iterator[Backend]:
        return iter(tuple(cls._members.values()))

    def __len__(cls) -> int:
        return len(cls._members)


def _name_of(value: str) -> Backend:
    """The one :class:`Backend` object of ``value`` (unpickling and copying keep a name's identity)."""
    return Backend.named(value)


class Backend(metaclass=_Members):
    """A backend's name, as ``backend=`` takes it: :attr:`AUTO` (chosen per call) or a registered backend's.

    The names form an open set: registering a backend (:func:`mmaemu.backends.register_backend`)
    makes its name a member. As an enum's members, each name is one object (compared by identity, ``is``),
    ``Backend("cpu")`` is :attr:`CPU` (a ``ValueError`` for a name no backend has), ``.value`` is the
    string and ``for b in Backend`` lists :attr:`AUTO` and the registered backends in their order.

    Attributes:
        value: the name, lower case (``"cpu"``).
    """

    __slots__ = ("value",)
    value: str

    _names: ClassVar[dict[str, Backend]] = {}
    _members: ClassVar[dict[str, Backend]] = {}

    #: ``backend="auto"``: per call, the first registered backend that runs the call on its device.
    AUTO: ClassVar[Backend]
    #: The shipped backends' names (:mod:`~mmaemu.backends._reference`, :mod:`~mmaemu.backends._cpu`,
    #: :mod:`mmaemu.backends._triton`).
    REFERENCE: ClassVar[Backend]
    CPU: ClassVar[Backend]
    TRITON: ClassVar[Backend]

    def __new__(cls, value: str | Backend) -> Backend:
        if isinstance(value, Backend):
            return value
        member = cls._members.get(value) if isinstance(value, str) else None
        if member is None:
            raise ValueError(f"{value!r} is not a valid Backend")
        return member

    @classmethod
    def named(cls, value: str) -> Backend:
        """The name ``value`` (one object per name), whether or not a backend of that name is registered.

        A backend's module takes its name from here; registration makes it a member.

        Raises:
            TypeError: ``value`` is not a string.
            ValueError: ``value`` is not one lower-case word (letters, digits, ``_``; a letter first).
        """
        if not isinstance(value, str):
            raise TypeError(f"a backend name must be a string, not {type(value).__name__}")
        name = cls._names.get(value)
        if name is None:
            if not re.fullmatch(r"[a-z][a-z0-9_]*", value):
                raise ValueError(f"a backend name is one lower-case word (letters, digits, '_'), not {value!r}")
            name = object.__new__(cls)
            object.__setattr__(name, "value", value)
            cls._names[value] = name
        return name

    @property
    def name(self) -> str:
        """The name in upper case (``"CPU"``), as an enum member's ``name``."""
        return self.value.upper()

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"a Backend is immutable (cannot set {key!r})")

    def __repr__(self) -> str:
        return f"<Backend.{self.name}: {self.value!r}>"

    def __str__(self) -> str:
        return f"Backend.{self.name}"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return _name_of, (self.value,)

    def __copy__(self) -> Backend:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Backend:
        return self


Backend.AUTO = Backend.named("auto")
Backend._members["auto"] = Backend.AUTO
Backend.REFERENCE = Backend.named("reference")
Backend.CPU = Backend.named("cpu")
Backend.TRITON = Backend.named("triton")


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
class Executor(abc.ABC):
    """One backend as the dispatcher, the capability table and ``backend="auto"`` see it.

    A backend subclasses this, implements the four methods, and registers one instance.

    Raises:
        TypeError: when built, for a field of the wrong kind (``auto`` or a string as the name, device types
            that are not a tuple of words, formats that are not a non-empty frozenset of operand dtypes, a hint
            that is not a string), or for a subclass that leaves out one of the four methods.

    Attributes:
        backend: its name (:meth:`Backend.named`).
        auto_devices: the device types (``"cpu"``, ``"cuda"``) for which ``backend="auto"`` considers it,
            before the reference backend, in the order of registration. It may run on others when named
            (:meth:`available` decides).
        formats: the operand dtypes its kernels decode (FP8, or the zoo's fp16, bf16 and float32 for tf32);
            calls on other formats go to the reference backend whole.
        install_hint: for a backend a plain install of mmaemu provides, what to do when it cannot load
            (``backend="auto"`` then warns once per device, ``BackendFallbackWarning``, with this); None for
            an optional extra, which ``auto`` passes over silently.
    """

    backend: Backend
    auto_devices: tuple[str, ...]
    formats: frozenset[torch.dtype]
    install_hint: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.backend, Backend) or self.backend is Backend.AUTO:
            raise TypeError(f"Executor.backend must be a backend's name (Backend.named('...')), not {self.backend!r}")
        if not isinstance(self.auto_devices, tuple) or not all(
                isinstance(d, str) and re.fullmatch(r"[a-z]+", d) for d in self.auto_devices):
            raise TypeError(f"Executor.auto_devices must be a tuple of device types ('cpu', 'cuda'), not "
                            f"{self.auto_devices!r}")
        accepted = (*FP8_DTYPES, *WIDE_DTYPES)
        if not isinstance(self.formats, frozenset) or not self.formats or not all(d in accepted for d in self.formats):
            raise TypeError(f"Executor.formats must be a non-empty frozenset of {', '.join(map(str, accepted))}, not "
                            f"{self.formats!r}")
        if self.install_hint is not None and not isinstance(self.install_hint, str):
            raise TypeError(f"Executor.install_hint must be a string or None, not {type(self.install_hint).__name__}")

    @abc.abstractmethod
    def available(self, device: torch.device) -> tuple[bool, str]:
        """(usable, reason): whether the backend runs on ``device`` here (reason: what runs it, or why not)."""

    @abc.abstractmethod
    def expresses(self, preset: Preset, dtypes: tuple[torch.dtype, ...] = ()) -> bool:
        """Whether the backend's own kernels compute ``preset`` for operands of ``dtypes`` (empty: FP8); the
        dispatcher sends the other calls to the reference backend whole."""

    @abc.abstractmethod
    def accumulate(self, a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan,
                   **options: Any) -> Accumulated:
        """The fp32 accumulators ``[M, N]`` of ``a [M, K]`` and ``b [N, K]`` for a call it :meth:`expresses`
        (NaN codes counted as zeros; Inf codes too where ``inf_zeroed`` says so; exact zeros +0).

        ``options`` are the backend's own (the Triton backend's ``config``, ``launch``, ``formulation``).
        """

    @abc.abstractmethod
    def selftest_failure(self, device: torch.device, preset: Preset | None = None) -> str | None:
        """Why the backend's kernels may not be used on ``device`` (a self-test failed there; of the kernel
        that runs ``preset`` too, when given), or None. Asked by the dispatcher before it uses the backend on
        a device; runs the self-test on first use and caches its outcome."""

    def __repr__(self) -> str:
        return f"Executor({self.backend.value!r})"


def device_key(device: torch.device) -> str:
    """The key of per-device state (a self-test's outcome, ``auto``'s warnings): ``str(device)``, with a bare
    ``cuda`` resolved to the current CUDA device."""
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    return str(device)
