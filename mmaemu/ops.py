"""``mmaemu::scaled_mm``: :func:`mmaemu.scaled_mm` as a torch.library custom operator.

A custom operator is opaque to ``torch.compile`` and ``torch.export``: the graph holds one call
to ``torch.ops.mmaemu.scaled_mm`` whose shape and dtype come from a registered fake (meta)
implementation, and at run time the call runs :func:`mmaemu.scaled_mm` on real tensors. So a
compiled or exported model gets exactly the bits of eager mode, and ``fullgraph=True`` compiles
without a graph break. :class:`mmaemu.nn.EmulatedFP8Linear` calls the operator.

The operator is registered once, when this module is first imported (``torch.library.custom_op``
exists since torch 2.4); importing it again, or under another module name, reuses the
registration.

Operator schema (torch's ``_scaled_mm`` arguments, then mmaemu's)::

    mmaemu::scaled_mm(Tensor mat1, Tensor mat2, Tensor scale_a, Tensor scale_b, Tensor? bias,
                      Tensor? scale_result, ScalarType? out_dtype, bool use_fast_accum,
                      str profile, str splitk, str backend) -> Tensor

``profile`` is a profile name or ``""`` for the process default (``MMAEMU_PROFILE``, read when
the operator runs); ``splitk`` is ``"auto"``, ``"1"`` or ``"S,scheme"`` (``"4,contiguous"``: the one text
form of a split, :func:`mmaemu._split.splitk_text`).
Call it through :func:`scaled_mm` below, which takes mmaemu's usual arguments.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from . import _call as call
from .backends import Backend, parse_backend
from .errors import ReferenceRejectsError
from ._checks import refuse_autograd_inputs
from .platforms._profiles import Profile, registered_name
from ._split import SplitKSpec, splitk_from_text, splitk_text

__all__ = ["OP_NAME", "scaled_mm"]

#: the qualified name of the operator.
OP_NAME = "mmaemu::scaled_mm"


def _check_arguments(use_fast_accum: object, backend: object) -> Backend:
    """What the operator's schema would coerce or reject with a schema error: TypeError as scaled_mm raises."""
    if not isinstance(use_fast_accum, bool):  # the schema would turn 1 into True
        raise TypeError(
            f"_scaled_mm(): argument 'use_fast_accum' (position 8) must be bool, not {type(use_fast_accum).__name__}"
        )
    return parse_backend(backend)  # type: ignore[arg-type]  # TypeError / ValueError for the wrong kind


# torch.library infers the schema from these annotations (typing.Optional: torch 2.4+ reads it).
def _impl(
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: Optional[torch.Tensor],
    scale_result: Optional[torch.Tensor],
    out_dtype: Optional[torch.dtype],
    use_fast_accum: bool,
    profile: str,
    splitk: str,
    backend: str,
) -> torch.Tensor:
    return call.scaled_mm(
        mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum,
        profile=profile or None, splitk=splitk_from_text(splitk), backend=backend,
    )


def _fake(mat1: torch.Tensor, mat2: torch.Tensor, *args: Any) -> torch.Tensor:
    """Shape and dtype only (``args`` are :func:`_impl`'s others; ``args[4]`` is ``out_dtype``); every other
    check runs with the real tensors."""
    if mat1.dim() != 2:
        raise ReferenceRejectsError("mat1 must be a matrix")
    if mat2.dim() != 2:
        raise ReferenceRejectsError("mat2 must be a matrix")
    out_dtype = args[4]  # after scale_a, scale_b, bias, scale_result
    dtype = out_dtype if out_dtype is not None else mat1.dtype
    return mat1.new_empty((mat1.shape[0], mat2.shape[1]), dtype=dtype)


def _registered() -> bool:
    try:
        torch.ops.mmaemu.scaled_mm  # noqa: B018 - raises AttributeError when absent
    except (AttributeError, RuntimeError):
        return False
    return True


def _register() -> Callable[..., Any]:
    """Register the operator once per process; return the callable to use."""
    if not _registered():
        op = torch.library.custom_op(OP_NAME, mutates_args=())(_impl)
        op.register_fake(_fake)
    return torch.ops.mmaemu.scaled_mm


_OP = _register()


def scaled_mm(
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: torch.Tensor | None = None,
    scale_result: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    use_fast_accum: bool = False,
    *,
    profile: str | Profile | None = None,
    splitk: SplitKSpec = "auto",
    backend: str | Backend = "auto",
) -> torch.Tensor:
    """:func:`mmaemu.scaled_mm` through the ``mmaemu::scaled_mm`` operator (for compile and export).

    Same arguments, defaults, results and exceptions as :func:`mmaemu.scaled_mm`, except that
    there is no ``out=`` (a custom operator that writes into an argument would be a mutation) and
    ``profile=None`` is resolved when the operator runs, not when a graph is traced. Inputs that
    require grad with grad mode on raise :class:`UnsupportedFeatureError` here, before the
    operator, since the operator has no autograd formula. NaN, Inf and -0 behave as in
    :func:`mmaemu.scaled_mm` (NaN codes give the canonical NaN, exact zeros are +0).

    Raises:
        ValueError: an invalid ``splitk``, an unknown profile name (``UnknownNameError``), or a ``Profile``
            object that is not the one registered under its name.
        TypeError: a non-bool ``use_fast_accum`` (the schema would coerce ``1`` to True), a
            ``backend`` or ``profile`` of the wrong type.
        UnsupportedFeatureError: inputs requiring grad in grad mode; and, when the operator runs,
            everything :func:`mmaemu.scaled_mm` raises.

    Example:
        >>> import torch, mmaemu
        >>> from mmaemu import ops
        >>> x = torch.full((16, 1024), 2.0).to(torch.float8_e4m3fn)
        >>> w = torch.full((64, 1024), 0.5).to(torch.float8_e4m3fn)
        >>> one = torch.tensor(1.0)
        >>> y = ops.scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True,
        ...                   profile="hopper-te")
        >>> y.shape, y[0, 0].item()
        (torch.Size([16, 64]), 1024.0)
        >>> torch.ops.mmaemu.scaled_mm.default._schema.name
        'mmaemu::scaled_mm'
    """
    chosen = _check_arguments(use_fast_accum, backend)
    refuse_autograd_inputs(mat1, mat2, scale_a, scale_b, bias, scale_result)
    result: torch.Tensor = _OP(
        mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum,
        "" if profile is None else registered_name(profile), splitk_text(splitk), chosen.value,
    )
    return result
