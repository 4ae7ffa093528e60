"""``mmaemu.emulate()``: run every ``torch._scaled_mm`` call of a block through mmaemu.

::

    with mmaemu.emulate(profile="hopper") as log:
        y = model(x)          # each torch._scaled_mm inside returns the H100 PCIe's bits
    print(log)                # how many calls were emulated, by (M, N, K)

Mechanism: a ``torch.utils._python_dispatch.TorchDispatchMode``. It sees every call of the aten
operators ``_scaled_mm`` and ``_scaled_mm_v2`` (``.default`` and ``.out``) that the dispatcher runs
while the block is active, whoever makes it: ``torch._scaled_mm`` and ``torch.nn.functional.scaled_mm``
called from Python, in a function, a module or a library, C++ code that calls the operator, and tensor
subclasses. A subclass's ``__torch_function__`` (torchao's ``Float8Tensor``) or ``__torch_dispatch__``
(torchao's training tensor) unwraps its data and calls the operator on plain tensors, which the mode
then sees: for any operator called with subclass arguments the mode steps aside (``NotImplemented``), so
the subclass runs and its inner calls reach the mode. Each intercepted call's arguments are bound by the
operator's schema and served by :func:`mmaemu.scaled_mm` (``_scaled_mm_v2``: by
:func:`mmaemu.functional.scaled_mm_v2`) with the block's ``profile``, ``splitk`` and ``backend``. Every
other operator runs unchanged. While a call is served the mode is off (torch pops it), so mmaemu's own
arithmetic is not intercepted.

Calls mmaemu cannot serve (block-wise scales, ``_scaled_mm_v2`` recipes other than tensor-wise or
row-wise on both operands, a bias with an FP8 output, inputs requiring grad) raise
:class:`~mmaemu.UnsupportedFeatureError`, or with ``fallback="native"`` run natively and are counted in
``log.native``. A bias with a bf16 or fp16 output is served, experimentally, and warns
(:class:`~mmaemu.UnverifiedEpilogueWarning`); so are row-wise scales (torch 2.7.1's CUTLASS kernel,
:mod:`mmaemu.kernels`; :class:`~mmaemu.UnrecordedKernelWarning`). Calls the reference platform rejects raise
:class:`~mmaemu.ReferenceRejectsError` and shapes no evidence decides raise
:class:`~mmaemu.SplitKUnknownError` whatever ``fallback`` says: a native result there would not be
the reference platform's.

Not intercepted: GEMMs that never reach these operators, such as Transformer Engine's (it calls
cuBLASLt from C++: replace its modules with :class:`mmaemu.nn.EmulatedFP8Linear` instead), and code
compiled by ``torch.compile`` (its kernels do not go through the Python dispatcher: use
:class:`~mmaemu.nn.EmulatedFP8Linear` or :func:`mmaemu.ops.scaled_mm` there).

Threads: torch keeps its stack of dispatch modes per thread, so ``emulate()`` affects only the
thread that entered it; other threads (a data loader, a thread pool started inside the block)
keep calling the native operators. Each thread that needs emulation enters its own
``emulate()``; one ``emulate`` object must not be entered by two threads at once. On exit,
normal or by an exception, the mode is removed and the operators are native again.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import call, functional
from .backends import Backend
from .errors import UnsupportedFeatureError
from .options import Options
from .platforms.profiles import Profile
from .split import SplitKSpec

__all__ = ["emulate", "EmulationLog", "Fallback", "Shape"]

#: ``(M, N, K)`` of a call.
Shape = tuple[int, int, int]

class Fallback(enum.Enum):
    """What :func:`emulate` does with a call mmaemu cannot serve."""

    RAISE = "raise"  # raise UnsupportedFeatureError (the default)
    NATIVE = "native"  # run torch's own kernel, and count the call in EmulationLog.native


class _Kind(enum.Enum):
    SCALED_MM = "torch._scaled_mm"
    SCALED_MM_V2 = "torch._scaled_mm_v2"


def _intercepted() -> dict[Any, _Kind]:
    """The aten overloads the mode serves (``_scaled_mm_v2`` only where torch has it)."""
    table: dict[Any, _Kind] = {}
    for kind, name in ((_Kind.SCALED_MM, "_scaled_mm"), (_Kind.SCALED_MM_V2, "_scaled_mm_v2")):
        try:
            packet = getattr(torch.ops.aten, name)
        except (AttributeError, RuntimeError):
            continue
        for overload in packet.overloads():
            table[getattr(packet, overload)] = kind
    return table


_INTERCEPTED = _intercepted()


@dataclass
class EmulationLog:
    """What an :func:`emulate` block did, filled in as it runs.

    Attributes:
        profile: the reference platform the calls were emulated for.
        served: emulated calls, counted by ``(M, N, K)``.
        native: calls run natively under ``fallback="native"``, counted by ``(M, N, K)``
            (``(-1, -1, -1)`` when the arguments are not two matrices).
        reasons: why each natively run call could not be served, counted by message.
    """

    profile: str
    served: Counter[Shape] = field(default_factory=Counter)
    native: Counter[Shape] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)

    @property
    def served_calls(self) -> int:
        """Number of emulated calls."""
        return sum(self.served.values())

    @property
    def native_calls(self) -> int:
        """Number of calls run natively."""
        return sum(self.native.values())

    def __str__(self) -> str:
        lines = [f"mmaemu.emulate(profile={self.profile!r}): {self.served_calls} calls emulated, "
                 f"{self.native_calls} run natively"]
        for label, counts in (("emulated", self.served), ("native", self.native)):
            for (m, n, k), count in sorted(counts.items()):
                lines.append(f"  {label:8s} M={m} N={n} K={k}: {count}")
        for reason, count in self.reasons.most_common():
            lines.append(f"  native because ({count}x): {reason}")
        return "\n".join(lines)


def _shape(args: dict[str, Any]) -> Shape:
    a, b = args.get("self"), args.get("mat2")
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == 2 and b.dim() == 2:
        return (int(a.shape[0]), int(b.shape[1]), int(a.shape[1]))
    return (-1, -1, -1)


def _bind(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """An aten call's arguments by the names of its schema (defaults filled in, ``out`` included)."""
    bound: dict[str, Any] = {}
    for i, arg in enumerate(func._schema.arguments):
        if i < len(args):
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
    return bound


def _is_subclass(types: Any) -> bool:
    return any(t is not torch.Tensor and t is not torch.nn.Parameter for t in types)


class _ScaledMmMode(TorchDispatchMode):
    """The dispatch mode behind :class:`emulate` (one per entered block)."""

    def __init__(self, owner: emulate, log: EmulationLog) -> None:
        super().__init__()
        self.owner = owner
        self.log = log

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if _is_subclass(types):
            return NotImplemented  # the subclass runs; the plain-tensor calls it makes come back here
        kind = _INTERCEPTED.get(func)
        if kind is None:
            return func(*args, **kwargs)
        bound = _bind(func, args, kwargs)
        shape = _shape(bound)
        owner = self.owner
        options: dict[str, Any] = {"profile": owner.profile, "splitk": owner.splitk, "backend": owner.backend,
                                   "out": bound.get("out")}
        try:
            if kind is _Kind.SCALED_MM:
                result = call.scaled_mm(bound["self"], bound["mat2"], bound["scale_a"], bound["scale_b"],
                                        bound.get("bias"), bound.get("scale_result"), bound.get("out_dtype"),
                                        bool(bound.get("use_fast_accum", False)), **options)
            else:
                result = functional.scaled_mm_v2(
                    bound["self"], bound["mat2"], bound["scale_a"], bound["recipe_a"], bound["scale_b"],
                    bound["recipe_b"], bound.get("swizzle_a"), bound.get("swizzle_b"), bound.get("bias"),
                    bound.get("out_dtype"), bound.get("contraction_dim", ()), bool(bound.get("use_fast_accum", False)),
                    **options)
        except UnsupportedFeatureError as exc:
            return self._native(func, args, kwargs, shape, exc)
        self.log.served[shape] += 1
        return result

    def _native(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], shape: Shape,
                exc: UnsupportedFeatureError) -> Any:
        if self.owner.fallback is not Fallback.NATIVE:
            raise exc
        result = func(*args, **kwargs)
        self.log.native[shape] += 1
        self.log.reasons[str(exc)] += 1
        return result


class emulate:  # noqa: N801 - used like a function: ``with mmaemu.emulate(...) as log``
    """Context manager: every FP8 GEMM call in the block returns the profile's bits.

    ``torch._scaled_mm``, ``torch.nn.functional.scaled_mm`` (tensor-wise and row-wise scales) and the aten
    operators behind them, from any caller, tensor subclasses such as torchao's included
    (:mod:`mmaemu.intercept`).

    Args:
        profile: reference platform (default: ``MMAEMU_PROFILE`` or ``"hopper"``), resolved when
            the object is made.
        backend: ``"auto"``, ``"reference"`` or ``"cpu"`` (as :func:`mmaemu.scaled_mm`).
        splitk: ``"auto"`` (default: cuBLAS's decision from the profile's evidence;
            :class:`~mmaemu.SplitKUnknownError` for a shape no evidence decides), ``1`` or
            ``(S, scheme)`` for every call of the block.
        fallback: ``"raise"`` (default) or ``"native"``: what to do with calls mmaemu cannot serve
            (see :mod:`mmaemu.intercept`).

    ``with emulate(...) as log`` binds an :class:`EmulationLog`, complete once the block exits
    (also ``self.log``). The object can be entered again after it exits, with a fresh log.
    Arguments keep torch's semantics (defaults ``use_fast_accum=False``, ``out_dtype`` = the input
    dtype, ``out=``), results the semantics of :func:`mmaemu.scaled_mm` (NaN codes give the
    canonical NaN, exact zeros are +0). Only the entering thread is affected (see
    :mod:`mmaemu.intercept`).

    Raises:
        ValueError: an invalid profile, backend, splitk or fallback (at construction).
        TypeError: a profile or backend of the wrong type (at construction).

    Example:
        >>> import torch, mmaemu
        >>> x = torch.full((16, 1024), 2.0).to(torch.float8_e4m3fn)
        >>> w = torch.full((64, 1024), 0.5).to(torch.float8_e4m3fn)
        >>> one = torch.tensor(1.0)
        >>> with mmaemu.emulate(profile="hopper") as log:
        ...     y = torch._scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True)
        >>> y[0, 0].item(), dict(log.served)
        (1024.0, {(16, 64, 1024): 1})
    """

    def __init__(
        self,
        profile: str | Profile | None = None,
        *,
        backend: str | Backend = "auto",
        splitk: SplitKSpec = "auto",
        fallback: str | Fallback = Fallback.RAISE,
    ) -> None:
        options = Options.parse(profile, splitk, backend)
        self.profile = options.profile
        self.splitk: SplitKSpec = options.splitk
        self.backend: Backend = options.backend
        try:
            self.fallback = Fallback(fallback)
        except ValueError:
            raise ValueError(f"fallback={fallback!r}: accepted values are 'raise' and 'native'") from None
        self.log = EmulationLog(self.profile.name)
        self._mode: _ScaledMmMode | None = None

    def __enter__(self) -> EmulationLog:
        if self._mode is not None:
            raise RuntimeError("this mmaemu.emulate() block is already active; make one object per block")
        self.log = EmulationLog(self.profile.name)
        self._mode = _ScaledMmMode(self, self.log)
        self._mode.__enter__()
        return self.log

    def __exit__(self, *exc_info: object) -> None:
        mode, self._mode = self._mode, None
        if mode is not None:
            mode.__exit__(*exc_info)

    @property
    def active(self) -> bool:
        """Whether the block is running."""
        return self._mode is not None

    def __repr__(self) -> str:
        return (f"mmaemu.emulate(profile={self.profile.name!r}, backend={self.backend.value!r}, "
                f"splitk={self.splitk!r}, fallback={self.fallback.value!r})")
