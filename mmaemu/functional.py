"""``torch.nn.functional.scaled_mm`` (``torch._scaled_mm_v2``) on mmaemu: tensor-wise and row-wise scales.

torch >= 2.10's public FP8 GEMM describes each operand's scaling by a recipe (``ScalingType``) and a
scale swizzle (``SwizzleType``). With a tensor-wise recipe on both operands and no swizzle, it is
the same cuBLASLt call as ``torch._scaled_mm`` with one-element scales, and with a row-wise recipe on
both operands the same call with ``[M, 1]`` and ``[1, N]`` scales (torch 2.7.1's CUTLASS row-wise
kernel: :mod:`mmaemu.kernels`, experimental, warned), so :func:`scaled_mm_v2` checks the arguments as
torch 2.13 checks that API (its CUDA path: ``_check_scaled_mm_sizes_v2`` in
``torch/_meta_registrations.py``, messages and exception types included), then returns
:func:`mmaemu.scaled_mm`'s bits for the equivalent call (whose torch 2.7.1 checks also apply). Every
other recipe (the block-wise and MX recipes, NVFP4), a swizzle and a non-default ``contraction_dim``
raise :class:`~mmaemu.errors.UnsupportedFeatureError` naming it.
``scaled_mm_v2`` takes no ``scale_result``: the API has none.

Recipes and swizzles are accepted as torch's enums (``torch.nn.functional.ScalingType``) or their
integer values, singly or as lists, as ``F.scaled_mm`` and the aten op take them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from . import call
from .backends import Backend
from .errors import ReferenceRejectsError, ReferenceRejectsValueError, UnsupportedFeatureError
from .platforms.profiles import Profile
from .split import SplitKSpec

__all__ = ["RECIPES", "SWIZZLES", "scaled_mm_v2", "v1_arguments"]

#: torch.nn.functional.ScalingType's values, by name (torch 2.13).
RECIPES = {0: "TensorWise", 1: "RowWise", 2: "BlockWise1x16", 3: "BlockWise1x32", 4: "BlockWise1x128",
           5: "BlockWise128x128"}
#: torch.nn.functional.SwizzleType's values, by name (torch 2.13).
SWIZZLES = {0: "NO_SWIZZLE", 1: "SWIZZLE_32_4_4"}
_TENSOR_WISE, _ROW_WISE, _NO_SWIZZLE = 0, 1, 0
_FP8_OR_FP4 = tuple(getattr(torch, name) for name in (
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float4_e2m1fn_x2") if hasattr(torch, name))


def _codes(value: Any, names: dict[int, str], what: str) -> list[int]:
    """Recipe or swizzle codes from an enum, an int, or a list of them."""
    items = list(value) if isinstance(value, (list, tuple)) else ([] if value is None else [value])
    codes = []
    for item in items:
        code = getattr(item, "value", item)
        if isinstance(code, bool) or not isinstance(code, int) or code not in names:
            raise TypeError(f"{what} must be torch.nn.functional's enum values or their integers {sorted(names)}, "
                            f"got {item!r}")
        codes.append(int(code))
    return codes


def _scales(value: Any, name: str) -> list[torch.Tensor]:
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items or not all(isinstance(t, torch.Tensor) for t in items):
        raise TypeError(f"{name} must be a tensor or a list of tensors, got {type(value).__name__}")
    return items


def _recipe_name(codes: Sequence[int]) -> str:
    return " + ".join(RECIPES[c] for c in codes) or "no recipe"


def _check_layout(mat_a: torch.Tensor, mat_b: torch.Tensor) -> None:
    """torch 2.13's checks of ``_scaled_mm_v2``'s operands on CUDA, in its order and with its messages."""
    if mat_a.dim() != 2 or mat_b.dim() != 2:
        raise ReferenceRejectsError(f"Inputs must be 2D but got self.dim()={mat_a.dim()} and mat2.dim()={mat_b.dim()}")
    if mat_a.dtype not in _FP8_OR_FP4 or mat_b.dtype not in _FP8_OR_FP4:
        raise ReferenceRejectsError(f"Expected both inputs to be fp8 or fp4 types but got self.dtype={mat_a.dtype} "
                                    f"and mat2.dtype={mat_b.dtype}")

    def zero_dim(t: torch.Tensor) -> bool:
        return t.size(0) == 0 or t.size(1) == 0

    sa, sb = mat_a.stride(), mat_b.stride()
    if not (sa[0] > sa[1] and sa[1] == 1) and not zero_dim(mat_a):
        raise ReferenceRejectsError(f"self must be row_major, got stride {tuple(sa)}")
    if not (sb[0] == 1 and sb[1] > 1) and not zero_dim(mat_b):
        raise ReferenceRejectsError(f"mat2 must be col_major, got stride {tuple(sb)}")
    if mat_a.size(1) % 16:
        raise ReferenceRejectsError(f"Expected self.size(1) to be divisible by 16, but got self.size(1)={mat_a.size(1)}")
    if mat_b.size(0) % 16 or mat_b.size(1) % 16:
        raise ReferenceRejectsError(f"Expected both dimensions of mat2 to be divisible by 16 but got {mat_b.shape}")


def v1_arguments(mat_a: torch.Tensor, mat_b: torch.Tensor, scale_a: Any, scale_recipe_a: Any, scale_b: Any,
                 scale_recipe_b: Any, swizzle_a: Any = None, swizzle_b: Any = None,
                 contraction_dim: Sequence[int] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """The one-element scales of the ``torch._scaled_mm`` call a ``_scaled_mm_v2`` call is.

    Checks in torch 2.13's order: the operands (:func:`_check_layout`), then the recipe pair, then
    the tensor-wise or row-wise scales. Modifies nothing.

    Raises:
        ReferenceRejectsError: what torch 2.13 raises as a ``RuntimeError``, with its message;
            :class:`~mmaemu.errors.ReferenceRejectsValueError` (also a ``ValueError``) for its ``ValueError``s.
        UnsupportedFeatureError: a recipe other than tensor-wise or row-wise on both operands, a swizzle, or a
            ``contraction_dim`` other than ``()`` or ``(1, 0)``, naming it.
        TypeError: recipes, swizzles or scales of the wrong type.
    """
    for name, t in (("mat_a", mat_a), ("mat_b", mat_b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
    recipe_a, recipe_b = (_codes(r, RECIPES, f"scale_recipe_{x}") for r, x in ((scale_recipe_a, "a"), (scale_recipe_b, "b")))
    swz_a, swz_b = (_codes(s, SWIZZLES, f"swizzle_{x}") for s, x in ((swizzle_a, "a"), (swizzle_b, "b")))
    scales_a, scales_b = _scales(scale_a, "scale_a"), _scales(scale_b, "scale_b")
    _check_layout(mat_a, mat_b)
    rowwise = recipe_a == recipe_b == [_ROW_WISE]
    if not rowwise and (recipe_a != [_TENSOR_WISE] or recipe_b != [_TENSOR_WISE]):
        raise UnsupportedFeatureError(
            f"scaling recipes {_recipe_name(recipe_a)} (mat_a) and {_recipe_name(recipe_b)} (mat_b) are not modelled: "
            "mmaemu serves torch.nn.functional.scaled_mm with ScalingType.TensorWise or ScalingType.RowWise on both "
            "operands (the block-wise recipes BlockWise1x128 and BlockWise128x128, the MX recipe BlockWise1x32 and the "
            "NVFP4 recipes BlockWise1x16 are not modelled)"
        )
    for name, codes in (("swizzle_a", swz_a), ("swizzle_b", swz_b)):
        if any(c != _NO_SWIZZLE for c in codes):
            raise UnsupportedFeatureError(f"{name}={' + '.join(SWIZZLES[c] for c in codes)} is not modelled: tensor-wise "
                                          "and row-wise scales take no swizzle (pass None or SwizzleType.NO_SWIZZLE)")
    if tuple(contraction_dim) not in ((), (1, 0)):
        raise UnsupportedFeatureError(f"contraction_dim={list(contraction_dim)} is not modelled: mmaemu serves the "
                                      "default contraction (mat_a's dimension 1 with mat_b's dimension 0)")
    if rowwise:
        return _rowwise_scales(mat_a, mat_b, scales_a[0], scales_b[0])
    for name, scales in (("scale_a", scales_a), ("scale_b", scales_b)):
        if len(scales) != 1 or scales[0].numel() != 1 or scales[0].dtype != torch.float32:
            raise ReferenceRejectsValueError(f"{name} must have 1 Float element")
    return scales_a[0], scales_b[0]


def _rowwise_scales(mat_a: torch.Tensor, mat_b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch 2.13's checks of ``ScalingType.RowWise`` scales (``_check_scaled_mm_sizes_v2``, in its order), then the
    equivalent ``torch._scaled_mm`` scales: ``scale_a`` as given (``[M, 1]``), ``scale_b`` as ``[1, N]`` (a view)."""
    m, n = mat_a.size(0), mat_b.size(1)
    for t in (sa, sb):
        if t.dim() < 2:  # torch indexes size(1) and stride(1) of both
            raise IndexError("Dimension out of range (expected to be in range of [-1, 0], but got 1)")
    if sa.size(0) != m or sa.size(1) != 1:
        raise ReferenceRejectsValueError(f"scale_a must have shape [{m}, 1], got {list(sa.size())}")
    if sa.numel() != m or sa.dtype != torch.float32:
        raise ReferenceRejectsValueError(f"scale_a must have {m} Float elements, got {sa.numel()}")
    if sb.numel() != n or sb.dtype != torch.float32:
        raise ReferenceRejectsValueError(f"scale_b must have {n} Float elements, got {sb.numel()}")
    for name, t in (("scale_a", sa), ("scale_b", sb)):
        if t.stride(1) != 1:
            raise ReferenceRejectsValueError(f"expected {name}.stride(1) to be 1, but got {t.stride(1)}")
    return sa, sb.reshape(1, n)


def scaled_mm_v2(
    mat_a: torch.Tensor,
    mat_b: torch.Tensor,
    scale_a: torch.Tensor | list[torch.Tensor],
    scale_recipe_a: Any,
    scale_b: torch.Tensor | list[torch.Tensor],
    scale_recipe_b: Any,
    swizzle_a: Any = None,
    swizzle_b: Any = None,
    bias: torch.Tensor | None = None,
    output_dtype: torch.dtype | None = torch.bfloat16,
    contraction_dim: Sequence[int] = (),
    use_fast_accum: bool = False,
    *,
    profile: str | Profile | None = None,
    splitk: SplitKSpec = "auto",
    backend: str | Backend = "auto",
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``torch.nn.functional.scaled_mm`` with the bits of the profile's reference GPU (tensor-wise or row-wise scales).

    The arguments are ``F.scaled_mm``'s (``output_dtype`` defaults to bf16 there too; ``None`` means
    ``mat_a``'s dtype, as the aten op); ``profile``, ``splitk`` and ``backend`` are
    :func:`mmaemu.scaled_mm`'s. NaN, Inf and -0 as :func:`mmaemu.scaled_mm`.

    Raises:
        UnsupportedFeatureError: a recipe other than tensor-wise or row-wise on both operands, a swizzle, a
            non-default ``contraction_dim`` (naming it); and what :func:`mmaemu.scaled_mm` raises
            for the equivalent call.
        ReferenceRejectsError: torch 2.13's rejections of this API, then torch 2.7.1's and the
            reference cuBLASLt's of the equivalent ``_scaled_mm`` call.

    Example:
        >>> import torch, mmaemu
        >>> x = torch.full((16, 1024), 2.0).to(torch.float8_e4m3fn)
        >>> w = torch.full((64, 1024), 0.5).to(torch.float8_e4m3fn)
        >>> one = torch.tensor(1.0)
        >>> y = mmaemu.scaled_mm_v2(x, w.t(), one, 0, one, 0, use_fast_accum=True)  # 0: ScalingType.TensorWise
        >>> y.dtype, y[0, 0].item()
        (torch.bfloat16, 1024.0)
    """
    sa, sb = v1_arguments(mat_a, mat_b, scale_a, scale_recipe_a, scale_b, scale_recipe_b, swizzle_a, swizzle_b,
                          contraction_dim)
    return call.scaled_mm(mat_a, mat_b, sa, sb, bias, None, output_dtype, use_fast_accum, profile=profile,
                          splitk=splitk, backend=backend, out=out)
