"""``torch.nn.functional.scaled_mm`` (``torch._scaled_mm_v2``) on mmaemu: tensor-wise and row-wise scales.

torch >= 2.10's public FP8 GEMM describes each operand's scaling by a recipe (``ScalingType``) and a
scale swizzle (``SwizzleType``). With a tensor-wise recipe on both operands and no swizzle, it is
the same cuBLASLt call as ``torch._scaled_mm`` with one-element scales, and with a row-wise recipe on
both operands the same call with ``[M, 1]`` and ``[1, N]`` scales (torch 2.7.1's CUTLASS row-wise
kernel: :mod:`mmaemu.kernels`, experimental, warned), so :func:`scaled_mm_v2` checks the arguments as
torch 2.13 checks that API, then returns :func:`mmaemu.scaled_mm`'s bits for the equivalent call (whose
torch 2.7.1 checks also apply). BlockWise1x128 x BlockWise128x128 (DeepSeek-V3's recipe) is computed as a
named block-scaled kernel model when ``kernel=`` names one ([Note: the block-wise recipe]). torch's checks come first, "not modelled" after: the operands as
``_check_scaled_mm_sizes_v2`` (``torch/_meta_registrations.py``) checks them on its CUDA path; the
recipe pair and scales as the CUDA kernel does (:func:`_check_recipes`). A pair torch accepts but mmaemu
does not model (the other block-wise recipes, MX, NVFP4; BlockWise1x128 x BlockWise128x128 without ``kernel=``),
a swizzle and a non-default ``contraction_dim`` raise :class:`~mmaemu.errors.UnsupportedFeatureError` naming it. ``scaled_mm_v2`` takes no
``scale_result``: the API has none.

Recipes and swizzles are accepted as torch's enums (``torch.nn.functional.ScalingType``) or their
integer values, singly or as lists, as ``F.scaled_mm`` and the aten op take them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from . import _call as call
from ._blockwise import block_scaled_mm, resolve_kernel
from .backends import Backend
from ._checks import scalar_type_name
from .errors import (
    ReferenceRejectsError,
    ReferenceRejectsValueError,
    UnrecordedKernelWarning,
    UnsupportedFeatureError,
    warn_caller,
)
from .platforms._profiles import Profile
from ._split import SplitKSpec

__all__ = ["scaled_mm_v2"]

#: torch.nn.functional.ScalingType's values, by name (torch 2.13).
RECIPES = {0: "TensorWise", 1: "RowWise", 2: "BlockWise1x16", 3: "BlockWise1x32", 4: "BlockWise1x128",
           5: "BlockWise128x128"}
#: torch.nn.functional.SwizzleType's values, by name (torch 2.13).
SWIZZLES = {0: "NO_SWIZZLE", 1: "SWIZZLE_32_4_4"}
_TENSOR_WISE, _NO_SWIZZLE = 0, 0
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
    if not all(isinstance(t, torch.Tensor) for t in items):
        raise TypeError(f"{name} must be a tensor or a list of tensors, got {type(value).__name__}")
    if not items:  # no recipe accepts it (torch's CPU kernel: "Invalid scaling configuration", a ValueError)
        raise ValueError(f"{name} is an empty list: pass its scale tensor (one fp32 tensor for the tensor-wise and "
                         "row-wise recipes)")
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


_ROW_WISE, _BLOCK_1X16, _BLOCK_1X32, _BLOCK_1X128, _BLOCK_128X128 = 1, 2, 3, 4, 5
_E4M3 = torch.float8_e4m3fn
_FP4 = getattr(torch, "float4_e2m1fn_x2", None)
_E8M0 = getattr(torch, "float8_e8m0fnu", None)
#: c10's ``isFloat8Type``
_FLOAT8 = tuple(getattr(torch, name) for name in (
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu") if hasattr(torch, name))

#: [Note: torch 2.13's scaled_mm_v2 kernel table]
#: The CUDA kernel of ``_scaled_mm_v2`` (``_scaled_mm_cuda_v2_out``, ``aten/src/ATen/native/cuda/ScaledBlas.cpp``)
#: walks ``scale_kernel_dispatch`` in this order and takes the first entry whose acceptance function
#: (``check_*_recipe``, ``aten/src/ATen/native/ScaledBlasUtils.cpp``) holds; none: ``TORCH_CHECK_VALUE(false,
#: "Invalid scaling configuration...")``, a ``ValueError``. Each acceptance function looks at the operand
#: dtypes, the number of scales and recipes (one each, two for NVFP4) and the scales' dtypes only; shapes
#: are checked afterwards by the chosen implementation. Entries: (name, operand dtypes, recipes of each
#: operand, scale dtypes of each operand). The CPU kernel of torch 2.13 has the tensor-wise and row-wise
#: entries, the same checks and the same message for them (tests/integration/test_functional.py compares).
_KERNEL_TABLE: tuple[tuple[str, tuple[Any, ...], tuple[int, ...], tuple[Any, ...]], ...] = (
    ("tensorwise_tensorwise", _FLOAT8, (_TENSOR_WISE,), (torch.float32,)),
    ("rowwise_rowwise", _FLOAT8, (_ROW_WISE,), (torch.float32,)),
    ("block_1x128_128x128", (_E4M3,), (_BLOCK_1X128, _BLOCK_128X128), (torch.float32,)),
    ("block_128x128_1x128", (_E4M3,), (_BLOCK_128X128, _BLOCK_1X128), (torch.float32,)),
    ("block_1x128_1x128", (_E4M3,), (_BLOCK_1X128, _BLOCK_1X128), (torch.float32,)),
    ("nvfp4_nvfp4", (_FP4,), (_BLOCK_1X16, _TENSOR_WISE), (_E4M3, torch.float32)),
    ("nvfp4_nvfp4_single_scale", (_FP4,), (_BLOCK_1X16,), (_E4M3,)),
    ("mxfp8_mxfp8", (_E4M3,), (_BLOCK_1X32,), (_E8M0,)),
    ("mxfp4_mxfp4", (_FP4,), (_BLOCK_1X32,), (_E8M0,)),
)


def _accepts(entry: tuple[str, tuple[Any, ...], tuple[int, ...], tuple[Any, ...]], mat_a: torch.Tensor,
             mat_b: torch.Tensor, recipes: tuple[list[int], list[int]],
             scales: tuple[list[torch.Tensor], list[torch.Tensor]]) -> bool:
    name, dtypes, pair, scale_dtypes = entry
    if mat_a.dtype not in dtypes or mat_b.dtype not in dtypes:
        return False
    if name.startswith("block_"):  # DeepSeek recipes: one per operand, a different one each
        wanted = ([pair[0]], [pair[1]])
        return all(r == w and len(s) == 1 and s[0].dtype == torch.float32
                   for r, w, s in zip(recipes, wanted, scales))
    return all(r == list(pair) and len(s) == len(pair) and all(t.dtype == d for t, d in zip(s, scale_dtypes))
               for r, s in zip(recipes, scales))


def _sizes(values: Sequence[int]) -> str:
    """c10's printing of an ``IntArrayRef``: ``[16, 1]``, ``[]``."""
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def _c10_name(dtype: torch.dtype) -> str:
    return "Float4_e2m1fn_x2" if dtype == _FP4 else scalar_type_name(dtype)


def _invalid_configuration(mat_a: torch.Tensor, mat_b: torch.Tensor, scale_a: torch.Tensor,
                           scale_b: torch.Tensor) -> str:
    """torch 2.13's CUDA message for a recipe pair no kernel takes (``_scaled_mm_cuda_v2_out``)."""
    (a0, a1), (b0, b1) = mat_a.shape, mat_b.shape

    def cdiv(x: int, y: int) -> int:
        return -(-x // y)

    def up(x: int, y: int) -> int:
        return cdiv(x, y) * y

    return (
        "Invalid scaling configuration.\n"
        "- For TensorWise scaling, a and b should be float8, scales should be float and singletons.\n"
        f"- For RowWise scaling, a and b should be float8, scales should be float, scale_a should be ({a0}, 1) and "
        f"scale_b should be (1, {b1}), and both should be contiguous.\n"
        f"- For BlockWise 1x128 scaling, a and b should be float8, scales should be float, scale_a should be ({a0}, "
        f"{cdiv(a1, 128)}) and scale_b should be ({cdiv(b0, 128)}, {b1}), and both should be outer-dim-major.\n"
        f"- For BlockWise 128x128 scaling, a and b should be float8, scales should be float, scale_a should be "
        f"({cdiv(a0, 128)}, {cdiv(a1, 128)}) and scale_b should be ({cdiv(b0, 128)}, {cdiv(b1, 128)}), and both "
        "should be near-inner-dim-major (with 16-byte aligned strides).\n"
        "- For Blockwise 1x32 scaling, a and b should be float8, scales should be float8_e8m0fnu, scale_a should "
        f"have {up(a0, 128) * up(cdiv(a1, 32), 4)} elements and scale_b should have "
        f"{up(b1, 128) * up(cdiv(b0, 32), 4)} elements, and both should be contiguous.\n"
        "- For Blockwise 1x16 scaling, a and b should be float4 (packed 2x), scales should be float8_e4m3fn, "
        f"scale_a should have {up(a0, 128) * up(cdiv(a1 * 2, 16), 4)} elements and scale_b should have "
        f"{up(b1, 128) * up(cdiv(b0 * 2, 16), 4)} elements, and both should be contiguous.\n"
        f"Got mat_a.dtype()={_c10_name(mat_a.dtype)}, scale_a[0].dtype()={_c10_name(scale_a.dtype)}, "
        f"scale_a[0].size()={_sizes(scale_a.shape)}, scale_a[0].stride()={_sizes(scale_a.stride())}, "
        f"mat_b.dtype()={_c10_name(mat_b.dtype)}, scale_b[0].dtype()={_c10_name(scale_b.dtype)}, "
        f"scale_b[0].size()={_sizes(scale_b.shape)} and scale_b[0].stride()={_sizes(scale_b.stride())}"
    )


def _check_row_wise(mat_a: torch.Tensor, mat_b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> None:
    """torch 2.13's ``_scaled_rowwise_rowwise`` checks, in its order (``size``/``stride`` of a missing
    dimension raise torch's own ``IndexError``, as there)."""
    m, n = mat_a.size(0), mat_b.size(1)
    if not (scale_a.size(0) == m and scale_a.size(1) == 1):
        raise ReferenceRejectsValueError(f"scale_a must have shape [{m}, 1], got [{_sizes(scale_a.shape)}]")
    if scale_a.numel() != m or scale_a.dtype != torch.float32:
        raise ReferenceRejectsValueError(f"scale_a must have {m} Float elements, got {scale_a.numel()}")
    if scale_b.numel() != n or scale_b.dtype != torch.float32:
        raise ReferenceRejectsValueError(f"scale_b must have {n} Float elements, got {scale_b.numel()}")
    if not (scale_a.stride(1) == 1 or scale_a.size(1) == 1):
        raise ReferenceRejectsValueError(f"expected scale_a.stride(1) to be 1, but got {scale_a.stride(1)}")
    if scale_b.stride(1) != 1:
        raise ReferenceRejectsValueError(f"expected scale_b.stride(1) to be 1, but got {scale_b.stride(1)}")


def _check_recipes(mat_a: torch.Tensor, mat_b: torch.Tensor, scales_a: list[torch.Tensor], recipe_a: list[int],
                  scales_b: list[torch.Tensor], recipe_b: list[int]) -> str:
    """The kernel torch 2.13 picks for a recipe pair on CUDA, after its checks of the pair and the scales.

    See [Note: torch 2.13's scaled_mm_v2 kernel table]. The tensor-wise and row-wise kernels' own scale
    checks follow (``_scaled_tensorwise_tensorwise``, ``_scaled_rowwise_rowwise``); the block-wise, MX and
    NVFP4 kernels' shape checks are not repeated (those recipes are not modelled: a native run makes them).
    Modifies nothing. NaN, Inf and -0 in the scales are not looked at.

    Returns:
        The kernel table's name of the implementation (``"tensorwise_tensorwise"``, ...).

    Raises:
        ReferenceRejectsValueError: what torch raises as a ``ValueError``, with its message.
        IndexError: torch's own, where its check reads a dimension a scale lacks.
    """
    recipes, scales = (recipe_a, recipe_b), (scales_a, scales_b)
    chosen = next((entry[0] for entry in _KERNEL_TABLE if _accepts(entry, mat_a, mat_b, recipes, scales)), None)
    if chosen is None:
        raise ReferenceRejectsValueError(_invalid_configuration(mat_a, mat_b, scales_a[0], scales_b[0]))
    if chosen == "tensorwise_tensorwise":
        for name, scale in (("scale_a", scales_a[0]), ("scale_b", scales_b[0])):
            if scale.numel() != 1 or scale.dtype != torch.float32:
                raise ReferenceRejectsValueError(f"{name} must have 1 Float element")
    elif chosen == "rowwise_rowwise":
        _check_row_wise(mat_a, mat_b, scales_a[0], scales_b[0])
    return chosen


def _parsed(mat_a: torch.Tensor, mat_b: torch.Tensor, scale_a: Any, scale_recipe_a: Any, scale_b: Any,
            scale_recipe_b: Any, swizzle_a: Any, swizzle_b: Any, contraction_dim: Sequence[int],
            ) -> tuple[str, list[int], list[int], list[torch.Tensor], list[torch.Tensor]]:
    """torch 2.13's checks in its order (the operands, then the recipe pair and its scales), then the swizzles and
    ``contraction_dim`` mmaemu does not model: ``(kernel table name, recipe_a, recipe_b, scales_a, scales_b)``."""
    for name, t in (("mat_a", mat_a), ("mat_b", mat_b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
    recipe_a, recipe_b = (_codes(r, RECIPES, f"scale_recipe_{x}") for r, x in ((scale_recipe_a, "a"), (scale_recipe_b, "b")))
    swz_a, swz_b = (_codes(s, SWIZZLES, f"swizzle_{x}") for s, x in ((swizzle_a, "a"), (swizzle_b, "b")))
    scales_a, scales_b = _scales(scale_a, "scale_a"), _scales(scale_b, "scale_b")
    _check_layout(mat_a, mat_b)
    chosen = _check_recipes(mat_a, mat_b, scales_a, recipe_a, scales_b, recipe_b)
    served = chosen in ("tensorwise_tensorwise", "rowwise_rowwise", "block_1x128_128x128")
    if served:
        for name, codes in (("swizzle_a", swz_a), ("swizzle_b", swz_b)):
            if any(c != _NO_SWIZZLE for c in codes):
                raise UnsupportedFeatureError(f"{name}={' + '.join(SWIZZLES[c] for c in codes)} is not modelled: "
                                              "these recipes take no swizzle (pass None or SwizzleType.NO_SWIZZLE)")
        if tuple(contraction_dim) not in ((), (1, 0)):
            raise UnsupportedFeatureError(f"contraction_dim={list(contraction_dim)} is not modelled: mmaemu serves the "
                                          "default contraction (mat_a's dimension 1 with mat_b's dimension 0)")
    return chosen, recipe_a, recipe_b, scales_a, scales_b


def v1_arguments(mat_a: torch.Tensor, mat_b: torch.Tensor, scale_a: Any, scale_recipe_a: Any, scale_b: Any,
                 scale_recipe_b: Any, swizzle_a: Any = None, swizzle_b: Any = None,
                 contraction_dim: Sequence[int] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """The one-element scales of the ``torch._scaled_mm`` call a ``_scaled_mm_v2`` call is.

    Checks in torch 2.13's order: the operands (:func:`_check_layout`), then the recipe pair and its scales
    (:func:`_check_recipes`); then what mmaemu does not model. Modifies nothing. Row-wise scales become
    ``scale_a`` as given (``[M, 1]``) and ``scale_b`` as ``[1, N]`` (a view of its N elements).

    Raises:
        ReferenceRejectsError: what torch 2.13 raises as a ``RuntimeError``, with its message;
            :class:`~mmaemu.errors.ReferenceRejectsValueError` (also a ``ValueError``) for its ``ValueError``s.
        UnsupportedFeatureError: a recipe pair torch accepts other than tensor-wise or row-wise on both operands
            (BlockWise1x128 x BlockWise128x128 is :func:`scaled_mm_v2`'s with ``kernel=``), a swizzle, or a
            ``contraction_dim`` other than ``()`` or ``(1, 0)``, naming it.
        IndexError: torch's own, where its row-wise check reads a dimension a scale lacks.
        TypeError: recipes, swizzles or scales of the wrong type.
        ValueError: an empty list of scales.
    """
    chosen, recipe_a, recipe_b, scales_a, scales_b = _parsed(mat_a, mat_b, scale_a, scale_recipe_a, scale_b,
                                                             scale_recipe_b, swizzle_a, swizzle_b, contraction_dim)
    if chosen == "rowwise_rowwise":
        return scales_a[0], scales_b[0].reshape(1, mat_b.size(1))
    if chosen == "tensorwise_tensorwise":
        return scales_a[0], scales_b[0]
    block = " (BlockWise1x128 x BlockWise128x128 is computed as a named block kernel model with kernel=)" \
        if chosen == "block_1x128_128x128" else ""
    raise UnsupportedFeatureError(
        f"scaling recipes {_recipe_name(recipe_a)} (mat_a) and {_recipe_name(recipe_b)} (mat_b) are not modelled: "
        "mmaemu serves torch.nn.functional.scaled_mm with ScalingType.TensorWise or ScalingType.RowWise on both "
        f"operands{block} (the other block-wise recipes, the MX recipe BlockWise1x32 and the NVFP4 recipes "
        "BlockWise1x16 are not modelled)"
    )


def _block_scales(mat_a: torch.Tensor, mat_b: torch.Tensor, sa: torch.Tensor,
                  sb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """BlockWise1x128 x BlockWise128x128's scales checked as torch 2.13 checks them (its meta registration,
    ``torch/_meta_registrations.py``, ``is_1x128_128x128``: ``scale_a [M, K / 128]`` with strides ``(1, M)``,
    ``scale_b [L4, N / 128]`` with strides ``(1, L4)``, ``L4 = round_up(K / 128, 4)``), and returned as
    :func:`mmaemu.block_scaled_mm` takes them: ``[M, K / 128]`` and the ``[N / 128, K / 128]`` weight scales."""
    m, k, n = mat_a.size(0), mat_a.size(1), mat_b.size(1)
    if k % 128 or n % 128:
        raise UnsupportedFeatureError(
            f"BlockWise1x128 x BlockWise128x128 with K = {k}, N = {n}: partial 128-blocks are not modelled (torch 2.13's "
            "meta and CUDA checks of this recipe differ there: K // 128 against ceil(K / 128))")
    kb, nb = k // 128, n // 128
    l4 = -(-kb // 4) * 4
    a_ok = tuple(sa.shape) == (m, kb) and sa.stride(0) == 1 and (sa.stride(1) == m or (kb == 1 and sa.stride(1) == 1))
    b_ok = tuple(sb.shape) == (l4, nb) and sb.stride(0) == 1 and (sb.stride(1) == l4 or (nb == 1 and sb.stride(1) == 1))
    if not (a_ok and b_ok):
        raise ReferenceRejectsError(
            f"For 1x128 x 128x128 blockwise scaling, L4 = {l4}, scale a must have shape [{m}, {kb}] (got: "
            f"{list(sa.shape)}) and stride [1, {m}] (got: {list(sa.stride())}), scale b must have shape [{l4}, {nb}] "
            f"(got: {list(sb.shape)}) and stride [1, {l4}] (got: {list(sb.stride())})")
    return sa.contiguous(), sb[:kb].t().contiguous()


def _block_recipe(mat_a: torch.Tensor, mat_b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                  bias: torch.Tensor | None, output_dtype: torch.dtype | None, use_fast_accum: bool, kernel: Any,
                  backend: str | Backend, out: torch.Tensor | None) -> torch.Tensor:
    """BlockWise1x128 x BlockWise128x128 computed as the named block kernel model (torch runs cuBLASLt's
    block-scaled kernel there, which is not modelled: [Note: the block-wise recipe])."""
    sa, sw = _block_scales(mat_a, mat_b, scale_a, scale_b)
    if kernel is None:
        raise UnsupportedFeatureError(
            "ScalingType.BlockWise1x128 x BlockWise128x128: torch runs it in cuBLASLt's block-scaled kernel, which is "
            "closed source and not modelled. To compute it as a block-scaled GPU kernel would (DeepGEMM, the Triton "
            "block kernels), pass kernel=... (mmaemu.emulate(kernel=...)), one of mmaemu.BLOCK_KERNELS")
    model = resolve_kernel(kernel, "scaled_mm_v2")
    for refused, why in ((bias is not None, "a bias"), (use_fast_accum, "use_fast_accum=True"), (out is not None, "out=")):
        if refused:
            raise UnsupportedFeatureError(f"BlockWise1x128 x BlockWise128x128 with {why}: the block kernel models take "
                                          "none (pass it without)")
    warn_caller(f"ScalingType.BlockWise1x128 x BlockWise128x128 runs in cuBLASLt on the GPU, which is not modelled: "
                f"computed as {model.name} computes the same operands, not as torch would", UnrecordedKernelWarning)
    return block_scaled_mm(mat_a, sa, mat_b.t(), sw, kernel=model, out_dtype=output_dtype or mat_a.dtype,
                           backend=backend)


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
    kernel: Any = None,
) -> torch.Tensor:
    """``torch.nn.functional.scaled_mm`` with the bits of the profile's reference GPU (tensor-wise or row-wise scales),
    or of a named block-scaled kernel (``kernel=``, BlockWise1x128 x BlockWise128x128).

    The arguments are ``F.scaled_mm``'s (``output_dtype`` defaults to bf16 there too; ``None`` means
    ``mat_a``'s dtype, as the aten op); ``profile``, ``splitk`` and ``backend`` are
    :func:`mmaemu.scaled_mm`'s. NaN, Inf and -0 as :func:`mmaemu.scaled_mm`. ``kernel``: a block-scaled kernel
    model (:data:`mmaemu.BLOCK_KERNELS`): the recipe pair BlockWise1x128 (``mat_a``) x BlockWise128x128 (``mat_b``),
    which torch runs in cuBLASLt's block-scaled kernel (not modelled), is then computed as that kernel computes the
    same operands (:func:`mmaemu.block_scaled_mm`; experimental, warned: [Note: the block-wise recipe]).

    [Note: the block-wise recipe] torch 2.13 sends BlockWise1x128 x BlockWise128x128 to ``_scaled_gemm``, cuBLASLt's
    block-scaled GEMM (``aten/src/ATen/native/cuda/ScaledBlas.cpp``, ``_scaled_block1x128_block128x128``), whose
    arithmetic is closed source and unrecorded: without ``kernel`` the call raises. With it, the scales are
    checked as torch's meta registration checks them (``scale_a [M, K/128]`` M-major, ``scale_b
    [round_up(K/128, 4), N/128]``; the checkpoints' ``weight_scale_inv`` is ``scale_b[:K/128].t()``) and the
    named kernel's bits are returned: what DeepGEMM or a Triton block kernel returns for these operands, not what
    torch's own call returns on the GPU.

    Raises:
        UnsupportedFeatureError: a recipe other than tensor-wise or row-wise on both operands or the block-wise pair
            with ``kernel``, a swizzle, a non-default ``contraction_dim`` (naming it); with the block-wise pair a
            bias, ``use_fast_accum=True``, ``out=`` or partial 128-blocks; and what :func:`mmaemu.scaled_mm` (or
            :func:`mmaemu.block_scaled_mm`) raises for the equivalent call.
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
    chosen, _, _, scales_a, scales_b = _parsed(mat_a, mat_b, scale_a, scale_recipe_a, scale_b, scale_recipe_b, swizzle_a,
                                               swizzle_b, contraction_dim)
    if chosen == "block_1x128_128x128":
        return _block_recipe(mat_a, mat_b, scales_a[0], scales_b[0], bias, output_dtype, use_fast_accum, kernel, backend,
                             out)
    sa, sb = v1_arguments(mat_a, mat_b, scale_a, scale_recipe_a, scale_b, scale_recipe_b, swizzle_a, swizzle_b,
                          contraction_dim)
    return call.scaled_mm(mat_a, mat_b, sa, sb, bias, None, output_dtype, use_fast_accum, profile=profile,
                          splitk=splitk, backend=backend, out=out)
