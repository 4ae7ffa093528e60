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
then sees: for an FP8 GEMM called with subclass arguments the mode steps aside (``NotImplemented``), so
the subclass runs and its inner calls reach the mode. Each intercepted call's arguments are bound by the
operator's schema and served by :func:`mmaemu.scaled_mm` (``_scaled_mm_v2``: by
:func:`mmaemu.functional.scaled_mm_v2`) with the block's ``profile``, ``splitk`` and ``backend``. Every
other operator runs unchanged, on any tensors (fake and functional tensors included). While a call is
served the mode is off (torch pops it), so mmaemu's own arithmetic is not intercepted.

It also sees the third-party FP8 GEMM operators of :data:`FOREIGN_GEMMS` (``mmaemu.intercept.FOREIGN_GEMMS``)
(torchao's ``ao::blockwise_fp8_gemm``, mslk's and FBGEMM's ``f8f8bf16_*``, vLLM's ``cutlass_scaled_mm``,
sgl-kernel's ``fp8_scaled_mm``, ...), matched by qualified name when called with an FP8 tensor, whenever
their library was loaded. torchao's ``ao::blockwise_fp8_gemm`` is served with the block's ``kernel=`` model
(:func:`mmaemu._blockwise.serve_foreign`); every other one raises :class:`~mmaemu.UnsupportedFeatureError`
naming the operator and its library, or runs natively under ``fallback="native"``, counted.

Calls mmaemu cannot serve (block-wise scales, ``_scaled_mm_v2`` recipes other than tensor-wise or
row-wise on both operands, BlockWise1x128 x BlockWise128x128 included unless the block names a
``kernel``, a bias with an FP8 output, inputs requiring grad, the third-party operators other than a
served one with its ``kernel``, an FP8 GEMM on fake, functional or meta tensors or under a tracer: a trace) raise
:class:`~mmaemu.UnsupportedFeatureError`, or with ``fallback="native"`` run natively and are counted in
``log.native``. A bias with a bf16 or fp16 output is served, experimentally, and warns
(:class:`~mmaemu.UnverifiedEpilogueWarning`); so are row-wise scales (torch 2.7.1's CUTLASS kernel,
:mod:`mmaemu.kernels`; :class:`~mmaemu.UnrecordedKernelWarning`). Calls the reference platform rejects raise
:class:`~mmaemu.ReferenceRejectsError` and shapes no evidence decides raise
:class:`~mmaemu.SplitKUnknownError` whatever ``fallback`` says: a native result there would not be
the reference platform's.

Nesting: the innermost block decides each call alone. A call it runs natively goes to torch's kernel past
every outer block (see [Note: the innermost block decides]) and is counted once, in the innermost log.

Compiled code (:mod:`mmaemu._compile`): on torch 2.9 and newer ``torch.compile`` compiles inside the block
(``fullgraph=True`` included); Inductor's graph calls the FP8 GEMMs as dispatcher-visible mirrors of the
aten operators, which the block serves when they run, with the profile of the block that runs them. Code
compiled outside a block recompiles inside it. On older torch (2.7.1) dynamo runs the model eagerly inside
a block, served, and a :class:`~mmaemu.MmaemuWarning` says so. The ``eager`` and ``aot_eager`` backends
run their graphs through the dispatcher. An AOTInductor model (a ``.pt2`` package) runs its kernels in
C++, unseen: calling one inside a block raises :class:`~mmaemu.UnsupportedFeatureError`, or runs it
natively and counts it (``(-1, -1, -1)``) under ``fallback="native"``; an ``ExportedProgram``'s module
runs through the dispatcher and is served.

Not intercepted: GEMMs that never reach the dispatcher as an operator, such as Transformer Engine's (it
calls cuBLASLt from C++: replace its modules with :class:`mmaemu.nn.EmulatedFP8Linear` instead), a
Triton kernel launched from Python without a registered operator, and a ``torch.compile`` backend other
than Inductor, ``eager`` and ``aot_eager`` that runs FP8 GEMMs with kernels of its own.

Threads: torch keeps its stack of dispatch modes per thread, so ``emulate()`` affects only the
thread that entered it; other threads (a data loader, a thread pool started inside the block)
keep calling the native operators. Each thread that needs emulation enters its own
``emulate()``; one ``emulate`` object must not be entered by two threads at once. On exit,
normal or by an exception, the mode is removed and the operators are native again.
"""

from __future__ import annotations

import enum
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch._subclasses.fake_tensor as _fake
import torch._subclasses.functional_tensor as _functional
from torch.utils._python_dispatch import TorchDispatchMode

from . import _compile, _foreign_ops, _blockwise as blockwise, _call as call, functional
from ._foreign_ops import FOREIGN_GEMMS, ForeignGemm
from .backends import Backend
from .errors import UnsupportedFeatureError
from ._options import Options
from .platforms._profiles import Profile
from ._split import SplitKSpec

__all__ = ["FOREIGN_GEMMS", "ForeignGemm", "Fallback"]

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
    """The aten overloads the mode serves (``_scaled_mm_v2`` only where torch has it), and their mirrors
    (:data:`mmaemu._compile.MIRRORS`), served as the aten operator they mirror."""
    table: dict[Any, _Kind] = {}
    for kind, name in ((_Kind.SCALED_MM, "_scaled_mm"), (_Kind.SCALED_MM_V2, "_scaled_mm_v2")):
        try:
            packet = getattr(torch.ops.aten, name)
        except (AttributeError, RuntimeError):
            continue
        for overload in packet.overloads():
            table[getattr(packet, overload)] = kind
    for aten_op, mirror in _compile.MIRRORS.items():  # what a graph compiled inside a block calls
        if aten_op in table:  # served; the grouped GEMM's mirror is a foreign row, refused
            table[mirror] = table[aten_op]
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
        sizes = (a.shape[0], b.shape[1], a.shape[1])
        if all(isinstance(s, int) for s in sizes):  # symbolic sizes (tracing) are not read
            return (int(sizes[0]), int(sizes[1]), int(sizes[2]))
    return (-1, -1, -1)


def _bind(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """An operator call's arguments by the names of its schema (defaults filled in, ``out`` included)."""
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


#: Tensor types that carry no values: a trace (torch.export, make_fx, torch.compile) or FakeTensorMode.
_VALUELESS_TYPES: tuple[type, ...] = tuple(
    t for t in (getattr(_fake, "FakeTensor", None), getattr(_functional, "FunctionalTensor", None)) if t is not None)

_TRACING_MESSAGE = (
    "{op} on fake, functional or meta tensors, or under a tracer (torch.export, make_fx, torch.compile or "
    "FakeTensorMode inside "
    "mmaemu.emulate()) is not served: emulate() computes values, and a traced graph would run torch's native "
    "kernel later. Trace outside emulate() with the GEMMs as torch.ops.mmaemu.scaled_mm (mmaemu.ops.scaled_mm) or "
    "mmaemu.nn.EmulatedFP8Linear, which trace and run emulated; or pass fallback='native' to trace the native "
    "operator (counted in log.native)."
)


_MODE_KEYS = getattr(torch._C, "_TorchDispatchModeKey", None)


def _traced(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a call is being traced rather than computed.

    Its tensors are fake, functional or on the meta device, or a proxy mode records it (``make_fx`` with
    real tensors: torch keeps its tracing modes in slots of their own, run after the user's modes, so the
    block sees the call before the tracer, on real tensors, and its own arithmetic would be traced).
    """
    def check(value: Any) -> bool:
        if isinstance(value, torch.Tensor):
            return isinstance(value, _VALUELESS_TYPES) or value.is_meta
        return isinstance(value, (list, tuple)) and any(check(v) for v in value)
    if _MODE_KEYS is not None and torch._C._get_dispatch_mode(_MODE_KEYS.PROXY) is not None:
        return True
    return any(check(v) for v in args) or any(check(v) for v in kwargs.values())


class _NativeRuns(threading.local):
    """How many natively run calls of an :func:`emulate` block are in progress in this thread.

    [Note: the innermost block decides]
    torch's dispatch-mode stack is per thread; while a mode handles a call it is popped, and a call it makes
    reaches the modes below it, outer ``emulate()`` blocks included. A call the innermost block runs natively
    must reach torch's kernel, not an outer block (which would serve it, refuse it, or count it a second
    time), while the other modes on the stack (a FakeTensorMode, a user's mode) still see it. So the native run
    raises this thread-local count, and every block passes FP8 GEMMs through while it is raised.
    """

    depth = 0


_NATIVE_RUNS = _NativeRuns()


def _target(func: Any) -> _Kind | ForeignGemm | None:
    """What the mode does with an operator: serve it (aten), refuse it (a known foreign GEMM), or run it."""
    kind = _INTERCEPTED.get(func)
    return kind if kind is not None else _foreign_ops.lookup(func)


class _ScaledMmMode(TorchDispatchMode):
    """The dispatch mode behind :class:`emulate` (one per entered block)."""

    def __init__(self, owner: emulate, log: EmulationLog) -> None:
        super().__init__()
        self.owner = owner
        self.log = log
        self._warned_skipped_compile = False

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Let dynamo compile inside the block (torch 2.9+): the compiled graph's FP8 GEMMs are calls of the
        mirrors, which the mode serves when they run (:mod:`mmaemu._compile`)."""
        return True

    def warned_skipped_compile(self) -> bool:
        """Whether the block already said that dynamo ran compiled code eagerly; marks it said."""
        said, self._warned_skipped_compile = self._warned_skipped_compile, True
        return said

    def run_opaque(self, run: Callable[[], Any], what: str) -> Any:
        """A program the block cannot see into (an AOTInductor model): refused, or run natively and counted."""
        return self._native(run, (), {}, (-1, -1, -1), UnsupportedFeatureError(what))

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        target = _target(func)
        if target is None or _NATIVE_RUNS.depth:
            return func(*args, **kwargs)  # every other operator, and a native run of an inner block
        if isinstance(target, ForeignGemm) and not _foreign_ops.has_fp8(args, kwargs):
            return func(*args, **kwargs)  # an INT8 GEMM of an operator that also runs FP8 ones
        bound = _bind(func, args, kwargs)
        shape = _foreign_ops.shape(target, bound) if isinstance(target, ForeignGemm) else _shape(bound)
        if _traced(args, kwargs):
            return self._native(func, args, kwargs, shape, UnsupportedFeatureError(_TRACING_MESSAGE.format(op=func)))
        if _is_subclass(types):
            return NotImplemented  # the subclass runs; the plain-tensor calls it makes come back here
        _compile.warn_skipped_compile(self)
        try:
            result = self._foreign(target, bound) if isinstance(target, ForeignGemm) else self._serve(target, bound)
        except UnsupportedFeatureError as exc:
            return self._native(func, args, kwargs, shape, exc)
        self.log.served[shape] += 1
        return result

    def _foreign(self, row: ForeignGemm, bound: dict[str, Any]) -> Any:
        """A served third-party operator as the block's kernel model computes it (:func:`mmaemu._blockwise.serve_foreign`)."""
        if not row.served:
            raise UnsupportedFeatureError(row.refusal())
        return blockwise.serve_foreign(row.name, bound, kernel=self.owner.kernel, backend=self.owner.backend)

    def _serve(self, kind: _Kind, bound: dict[str, Any]) -> Any:
        owner = self.owner
        options: dict[str, Any] = {"profile": owner.profile, "splitk": owner.splitk, "backend": owner.backend,
                                   "out": bound.get("out")}
        if kind is _Kind.SCALED_MM:
            return call.scaled_mm(bound["self"], bound["mat2"], bound["scale_a"], bound["scale_b"],
                                  bound.get("bias"), bound.get("scale_result"), bound.get("out_dtype"),
                                  bool(bound.get("use_fast_accum", False)), **options)
        return functional.scaled_mm_v2(
            bound["self"], bound["mat2"], bound["scale_a"], bound["recipe_a"], bound["scale_b"],
            bound["recipe_b"], bound.get("swizzle_a"), bound.get("swizzle_b"), bound.get("bias"),
            bound.get("out_dtype"), bound.get("contraction_dim", ()), bool(bound.get("use_fast_accum", False)),
            kernel=owner.kernel, **options)

    def _native(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], shape: Shape,
                exc: UnsupportedFeatureError) -> Any:
        """Raise ``exc``, or under ``fallback="native"`` run torch's operator (past outer blocks) and count it."""
        if self.owner.fallback is not Fallback.NATIVE:
            raise exc
        _NATIVE_RUNS.depth += 1
        try:
            result = func(*args, **kwargs)
        finally:
            _NATIVE_RUNS.depth -= 1
        self.log.native[shape] += 1
        self.log.reasons[str(exc)] += 1
        return result


class emulate:  # noqa: N801 - used like a function: ``with mmaemu.emulate(...) as log``
    """Context manager: every FP8 GEMM call in the block returns the profile's bits.

    ``torch._scaled_mm``, ``torch.nn.functional.scaled_mm`` (tensor-wise and row-wise scales) and the aten
    operators behind them, from any caller, tensor subclasses such as torchao's included
    (:mod:`mmaemu.intercept`). Known third-party FP8 GEMM operators (torchao, mslk, FBGEMM, vLLM,
    sgl-kernel) are not modelled, except torchao's ``ao::blockwise_fp8_gemm`` with ``kernel``: they raise, or
    run natively and are counted. Blocks nest: the
    innermost one decides each call, and counts it once.

    Args:
        profile: reference platform (default: ``MMAEMU_PROFILE`` or ``"hopper"``), resolved when
            the object is made.
        backend: ``"auto"``, ``"reference"`` or ``"cpu"`` (as :func:`mmaemu.scaled_mm`).
        splitk: ``"auto"`` (default: cuBLAS's decision from the profile's evidence;
            :class:`~mmaemu.SplitKUnknownError` for a shape no evidence decides), ``1`` or
            ``(S, scheme)`` for every call of the block.
        fallback: ``"raise"`` (default) or ``"native"``: what to do with calls mmaemu cannot serve
            (see :mod:`mmaemu.intercept`).
        kernel: a block-scaled kernel model's name (:data:`mmaemu.BLOCK_KERNELS`): torchao's
            ``ao::blockwise_fp8_gemm`` and ``F.scaled_mm``'s block-wise recipes are then computed as that kernel
            (:func:`mmaemu.block_scaled_mm`, experimental, warned); without it they raise, naming what to pass.

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
        kernel: str | None = None,
    ) -> None:
        options = Options.parse(profile, splitk, backend)
        self.kernel = None if kernel is None else blockwise.resolve_kernel(kernel, "emulate")
        self.profile = options.profile
        self.splitk: SplitKSpec = options.splitk
        self.backend: Backend = options.backend
        try:
            self.fallback = Fallback(fallback)
        except ValueError:
            raise ValueError(f"fallback={fallback!r}: accepted values are 'raise' and 'native'") from None
        self.log = EmulationLog(self.profile.name)
        self._mode: _ScaledMmMode | None = None
        self._leave: Callable[[], None] | None = None

    def __enter__(self) -> EmulationLog:
        if self._mode is not None:
            raise RuntimeError("this mmaemu.emulate() block is already active; make one object per block")
        self.log = EmulationLog(self.profile.name)
        mode = _ScaledMmMode(self, self.log)
        mode.__enter__()
        try:
            self._leave = _compile.enter(mode)
        except BaseException:
            mode.__exit__(None, None, None)
            raise
        self._mode = mode
        return self.log

    def __exit__(self, *exc_info: object) -> None:
        mode, self._mode = self._mode, None
        leave, self._leave = self._leave, None
        if leave is not None:
            leave()
        if mode is not None:
            mode.__exit__(*exc_info)

    @property
    def active(self) -> bool:
        """Whether the block is running."""
        return self._mode is not None

    def __repr__(self) -> str:
        kernel = "" if self.kernel is None else f", kernel={self.kernel.name!r}"
        return (f"mmaemu.emulate(profile={self.profile.name!r}, backend={self.backend.value!r}, "
                f"splitk={self.splitk!r}, fallback={self.fallback.value!r}{kernel})")
