"""``torch.compile`` and AOTInductor inside :func:`mmaemu.emulate`: compiled FP8 GEMMs stay visible to the block.

A dispatch mode sees the operators the dispatcher runs. Code that Inductor compiles runs its own kernels for
what it fuses, and for ``aten._scaled_mm`` it may call torch's kernel past the dispatcher (AOTInductor's C
shim ``aoti_torch_cuda__scaled_mm_out``) or a Triton template of its own (``max_autotune``). This module
keeps every FP8 GEMM of a graph compiled inside a block a dispatcher call, so the block serves it at run
time like an eager call, and refuses what it cannot see.

[Note: compiled code under emulate()]
Evidence, torch 2.13 as installed: ``torch/_dynamo/convert_frame.py`` (``CatchErrorsWrapper.__call__``)
skips every frame while a dispatch mode whose ``ignore_compile_internals()`` is False is on the stack, so a
compiled model ran eagerly and ``fullgraph=True`` raised "found no compiled frames"; a mode whose
``ignore_compile_internals()`` is True (pytorch/pytorch#161648, torch 2.9) is switched off while dynamo
compiles (``_disable_current_modes()`` around the backend, same file) and sees the compiled artifact's
dispatcher calls when it runs (``TorchDispatchMode.ignore_compile_internals`` in
``torch/utils/_python_dispatch.py``). The block's mode says True where torch has the method. Then:

1. Rewrite. :data:`MIRRORS` holds one operator per aten FP8 GEMM, ``mmaemu::compiled_scaled_mm`` and
   ``mmaemu::compiled_scaled_mm_v2``, with aten's schema and a kernel that calls aten's operator (torch's
   native kernel, outside a block). While a block is active, Inductor's ``post_grad_custom_pre_pass``
   holds :func:`rewrite`, which turns every ``aten._scaled_mm`` / ``_scaled_mm_v2`` node into its mirror
   before Inductor's own passes and lowerings (``torch/_inductor/fx_passes/post_grad.py``,
   ``post_grad_passes``; ``torch/_inductor/kernel/mm.py``, ``tuned_scaled_mm``). Inductor calls a custom
   operator through the dispatcher (the Python wrapper calls ``torch.ops.mmaemu...``, the C++ wrapper
   the proxy executor), so the block sees the mirror's call at run time and serves it with its own
   profile, splitk and backend: nothing of the block is baked into the graph, a second block with another
   profile gets that profile's bits from the same compiled code, and the code run outside a block is
   torch's kernel. The mirrors carry ``Tag.cudagraph_unsafe`` where torch has it: a CUDA graph would
   replay one block's emulation in every later call. The pass's ``uuid()`` keys Inductor's caches.
2. Guard. Dynamo's tensor guards mask the mode's dispatch keys for such a mode (``LocalState`` in
   ``torch/csrc/dynamo/guards.h``), so code compiled outside a block (without the rewrite) would be
   reused inside it. The block also pushes :class:`_BlockGuard`, a torch function mode that changes
   nothing, because dynamo guards the torch function mode stack by type (``TORCH_FUNCTION_STATE``,
   ``make_torch_function_mode_stack_guard`` in ``torch/_dynamo/guards.py``): code compiled outside a
   block recompiles inside it, and code compiled inside is not reused outside.

torch without the method (2.7.1: ``convert_frame.py`` checks ``is_in_torch_dispatch_mode
(include_infra_modes=False)`` and calls the backend with the modes on): dynamo skips every frame in a
block and the model runs eagerly, served, ``fullgraph=True`` included, in silence. :func:`warn_skipped_compile`
says so: dynamo's frame callback is set while a compiled function runs, and None inside
``torch.compiler.disable``. It is read as dynamo's ``_fn`` reads it (``prior = set_eval_frame(None)``, then
restored): torch 2.7.1's ``get_eval_frame_callback`` returns it without a new reference, and calling it in
a block crashed the process (a segmentation fault on the second block, observed).

An AOTInductor model (``torch._inductor.aoti_load_package``, a ``.pt2`` package) runs its kernels in C++;
its FP8 GEMMs call the native kernel through AOTInductor's C shim, which no dispatch mode sees
(checked: a CPU package's ``aoti_torch_cpu__scaled_mm_out`` ran natively inside a block, 0 calls logged).
The runners' Python entry points (``torch._C._aoti``: ``AOTIModelPackageLoader.run`` / ``boxed_run``, which
``AOTICompiledModel`` calls, and ``AOTIModelContainerRunner<Device>.run``, which ``torch._export.aot_load``
calls) are wrapped when mmaemu is imported (a method already bound before would escape), to ask the
innermost block of the thread first: it refuses, or under ``fallback="native"`` runs the model and counts it.
Outside a block they run as before.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from pathlib import Path
from typing import Any, Callable, Protocol

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from .errors import MmaemuWarning, UnsupportedFeatureError, warn_caller

__all__: list[str] = []

_ATEN_GEMMS = ("_scaled_mm", "_scaled_mm_v2", "_scaled_grouped_mm")  # the grouped one's mirror is refused


def _compiles_under_mode() -> bool:
    """Whether dynamo compiles inside a dispatch mode that asks it to (see the module's Note)."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    return (hasattr(TorchDispatchMode, "ignore_compile_internals")
            and hasattr(guards, "set_is_in_mode_without_ignore_compile_internals"))


#: Whether this torch compiles a model inside a block (torch 2.9 and newer); else dynamo runs it eagerly.
COMPILES_UNDER_MODE = _compiles_under_mode()

#: The torch.library.Library of the mirrors, kept alive (its registrations die with it), also across a reload.
_LIBRARY: Any = globals().get("_LIBRARY")


def _mirror_name(aten_name: str) -> str:
    return "compiled" + aten_name  # compiled_scaled_mm, compiled_scaled_mm_v2


def _define_mirrors() -> dict[Any, Any]:
    """Register the mirrors once per process; return ``{aten .default overload: mirror overload}``."""
    global _LIBRARY
    mirrors: dict[Any, Any] = {}
    for name in _ATEN_GEMMS:
        aten_op = getattr(getattr(torch.ops.aten, name, None), "default", None)
        if aten_op is None:
            continue  # _scaled_mm_v2 arrived after torch 2.7
        mirror = _mirror_name(name)
        if not hasattr(torch.ops.mmaemu, mirror):
            if _LIBRARY is None:
                _LIBRARY = torch.library.Library("mmaemu", "FRAGMENT")  # noqa: TOR901 - kept in a global
            schema = str(aten_op._schema).replace(f"aten::{name}", mirror, 1)
            unsafe = getattr(torch.Tag, "cudagraph_unsafe", None)
            _LIBRARY.define(schema, tags=(unsafe,) if unsafe is not None else ())
            kernel = functools.partial(_native, aten_op)
            _LIBRARY.impl(mirror, kernel, "CompositeExplicitAutograd")
            torch.library.register_fake(f"mmaemu::{mirror}", kernel, lib=_LIBRARY)
        mirrors[aten_op] = getattr(torch.ops.mmaemu, mirror).default
    return mirrors


def _native(aten_op: Any, *args: Any, **kwargs: Any) -> Any:
    """A mirror's kernel and fake: aten's operator (torch's kernel on real tensors, its meta on fake ones)."""
    return aten_op(*args, **kwargs)


#: ``{aten._scaled_mm.default: mmaemu::compiled_scaled_mm.default, ...}``: what :func:`rewrite` puts in a graph.
MIRRORS: dict[Any, Any] = _define_mirrors()


def rewrite(graph: torch.fx.Graph) -> None:
    """Turn the aten FP8 GEMM nodes of a post-grad graph into their mirrors (in place).

    Raises:
        UnsupportedFeatureError: an FP8 GEMM overload with no mirror (``.out``, which functionalization
            removes before this pass): Inductor would compile a call the block cannot see.
    """
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        mirror = MIRRORS.get(node.target)
        if mirror is not None:
            node.target = mirror
            continue
        schema = getattr(node.target, "_schema", None)
        if schema is not None and schema.name in {f"aten::{name}" for name in _ATEN_GEMMS}:
            raise UnsupportedFeatureError(
                f"{node.target} in a graph compiled inside mmaemu.emulate() has no dispatcher-visible "
                "form: compile it outside the block with the GEMM as torch.ops.mmaemu.scaled_mm "
                "(mmaemu.ops.scaled_mm), or call the model uncompiled inside the block")


class _BlockGuard(TorchFunctionMode):
    """A torch function mode that changes nothing: dynamo guards on its presence (see the module's Note)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


class Block(Protocol):
    """What an active block offers this module (``mmaemu.intercept``'s mode)."""

    def run_opaque(self, run: Callable[[], Any], what: str) -> Any:
        """Refuse ``run`` (a program the block cannot see into), or under ``fallback="native"`` run it, counted."""

    def warned_skipped_compile(self) -> bool:
        """Whether this block already said that dynamo ran compiled code eagerly; marks it said."""


class _Blocks(threading.local):
    """The blocks active in this thread, innermost last."""

    def __init__(self) -> None:
        self.stack: list[Block] = []


_BLOCKS = _Blocks()
_LOCK = threading.Lock()
_INSTALLED: list[Any] = []  # [value set in the config, value it replaced] while blocks are active
_ACTIVE = 0  # blocks active in the process, all threads


def enter(block: Block) -> Callable[[], None]:
    """Set up compilation for a block that is being entered; return what undoes it (call it on exit)."""
    global _ACTIVE
    guard: _BlockGuard | None = None
    if COMPILES_UNDER_MODE:
        with _LOCK:
            if _ACTIVE == 0:
                _install_pass()
            _ACTIVE += 1
        guard = _BlockGuard()
        guard.__enter__()
    _BLOCKS.stack.append(block)

    def leave() -> None:
        global _ACTIVE
        if block in _BLOCKS.stack:
            _BLOCKS.stack.remove(block)
        if guard is None:
            return
        guard.__exit__(None, None, None)
        with _LOCK:
            _ACTIVE -= 1
            if _ACTIVE == 0:
                _uninstall_pass()
    return leave


@functools.lru_cache(maxsize=1)
def _rewrite_pass() -> Any:
    """:func:`rewrite` as an Inductor ``CustomGraphPass`` (made on first use: Inductor's import takes seconds)."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class RewritePass(CustomGraphPass):
        def __call__(self, graph: torch.fx.Graph) -> None:
            rewrite(graph)

        def uuid(self) -> bytes:
            return hashlib.sha256(Path(__file__).read_bytes() + torch.__version__.encode()).digest()

    return RewritePass()


def _install_pass() -> None:
    """Put the rewrite first in ``post_grad_custom_pre_pass``, keeping a pass the user set there."""
    from torch._inductor import config
    from torch._inductor import custom_graph_pass

    ours, theirs = _rewrite_pass(), config.post_grad_custom_pre_pass
    if theirs is None:
        chosen: Any = ours
    elif hasattr(custom_graph_pass, "get_custom_graph_passes"):  # Inductor runs each pass of a sequence
        chosen = (ours, *(theirs if isinstance(theirs, (list, tuple)) else (theirs,)))
    else:
        raise UnsupportedFeatureError(
            "torch.compile inside mmaemu.emulate() needs torch._inductor.config.post_grad_custom_pre_pass, which "
            "holds another pass and takes one only in this torch: clear it for the block, or call the model "
            "uncompiled inside the block")
    config.post_grad_custom_pre_pass = chosen
    _INSTALLED[:] = [chosen, theirs]


def _uninstall_pass() -> None:
    from torch._inductor import config

    if _INSTALLED and config.post_grad_custom_pre_pass is _INSTALLED[0]:
        config.post_grad_custom_pre_pass = _INSTALLED[1]
    _INSTALLED.clear()


_AOTI_MESSAGE = (
    "an AOTInductor-compiled model (a .pt2 package loaded with torch._inductor.aoti_load_package, or a library "
    "loaded with torch._export.aot_load) is called "
    "inside mmaemu.emulate(): it runs its kernels in C++, where no dispatch mode sees an FP8 GEMM, so its FP8 "
    "GEMMs would run natively. Run the program as an ExportedProgram inside the block instead "
    "(torch.export.load(path).module(), served), compile the package from a model whose FP8 GEMMs are "
    "torch.ops.mmaemu.scaled_mm (mmaemu.nn.EmulatedFP8Linear) and call it outside the block, or pass "
    "fallback='native' to run it natively (counted in log.native)")

#: The Python entry points of AOTInductor's C++ runners (``torch._C._aoti``): ``AOTIModelPackageLoader``
#: (``aoti_load_package``'s ``AOTICompiledModel`` calls ``boxed_run``) and ``AOTIModelContainerRunner<Device>``
#: (``torch._export.aot_load`` calls ``run``).
_AOTI_METHODS = ("run", "boxed_run")


def _aoti_classes() -> list[type]:
    aoti = getattr(torch._C, "_aoti", None)
    names = [n for n in dir(aoti) if n == "AOTIModelPackageLoader" or n.startswith("AOTIModelContainerRunner")]
    return [getattr(aoti, n) for n in names]


def _wrap_aoti() -> None:
    """Wrap the AOTInductor runners' ``run`` and ``boxed_run`` once per process, at import (see the module's Note)."""
    for cls in _aoti_classes():
        for name in _AOTI_METHODS:
            method = cls.__dict__.get(name)  # its own, not a base class's (wrapped there)
            if method is not None and not getattr(method, "_mmaemu_wrapped", False):
                setattr(cls, name, _refusing(method))


def _refusing(run: Callable[..., Any]) -> Callable[..., Any]:
    """``run`` asking the innermost block of the thread first (outside any block: ``run`` itself)."""
    @functools.wraps(run)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _BLOCKS.stack:
            return run(self, *args, **kwargs)
        return _BLOCKS.stack[-1].run_opaque(lambda: run(self, *args, **kwargs), _AOTI_MESSAGE)
    wrapped._mmaemu_wrapped = True  # type: ignore[attr-defined]
    return wrapped


_wrap_aoti()


def warn_skipped_compile(block: Block) -> None:
    """On a torch that cannot compile inside a block, say once per block that a compiled function ran eagerly."""
    if COMPILES_UNDER_MODE:
        return
    try:
        from torch._C._dynamo.eval_frame import set_eval_frame
    except ImportError:  # a torch without dynamo compiles nothing
        return
    callback = set_eval_frame(None)  # dynamo's own way to read it (eval_frame.py, _fn): see the module's Note
    set_eval_frame(callback)
    if callback in (None, False) or block.warned_skipped_compile():
        return
    warn_caller(
        f"mmaemu.emulate(): a torch.compile'd function calls an FP8 GEMM inside the block, and torch "
        f"{torch.__version__} cannot compile inside a dispatch mode (TorchDispatchMode.ignore_compile_internals "
        "arrived in torch 2.9): dynamo runs it eagerly, fullgraph=True included. Its FP8 GEMMs are served; its "
        "other operators run eager mode's kernels, not the compiled ones. Use torch 2.9 or newer to compile "
        "inside the block.", MmaemuWarning)
