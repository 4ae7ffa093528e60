"""Third-party FP8 GEMM operators that :func:`mmaemu.emulate` knows by name, and what it does with each.

torchao, mslk (formerly FBGEMM GenAI), FBGEMM, vLLM and sgl-kernel register FP8 GEMMs as operators of
their own (``torch.ops.<namespace>.<name>``), and torch has a grouped one (``aten._scaled_grouped_mm``). They never reach ``aten._scaled_mm``, so without this table
``emulate()`` would let them run natively in silence. :func:`lookup` matches an operator by its qualified
name (``"mslk::f8f8bf16_rowwise"``) when the call reaches the dispatch mode, so a library registered
after ``import mmaemu`` (or never installed) is matched all the same.

mmaemu models the cuBLASLt tensor-wise FP8 GEMM that ``torch._scaled_mm`` runs on the reference
platform, torch's own row-wise CUTLASS kernels (:mod:`mmaemu.kernels`) and the block-scaled kernels
(:mod:`mmaemu.kernels._block_model`). torchao's ``ao::blockwise_fp8_gemm`` is served (``served=True``) as the
block-scaled kernel model ``emulate(kernel=...)`` names (:func:`mmaemu._blockwise.serve_foreign`); without
one it raises, naming what to pass. Every other row is refused with :class:`~mmaemu.UnsupportedFeatureError`
naming it, or with ``fallback="native"`` run natively and counted. A call is intercepted only when one of its tensor
arguments is FP8: vLLM's ``cutlass_scaled_mm`` also runs INT8 GEMMs, which are not FP8 GEMMs and run
unchanged (as ``aten.mm`` does).

[Note: where the names come from]
Each row cites the file that registers the operator: torchao 0.18.0 as installed
(``torchao/kernel/blockwise_quantization.py`` registers ``ao::blockwise_fp8_gemm`` with
``torch.library.custom_op`` when Triton has a GPU; ``torchao/ops.py`` defines the ``torchao::``
C++ operators; ``torchao/prototype/blockwise_fp8_training/kernels.py`` the ``triton_op``s), and in
the public repositories ``meta-pytorch/MSLK`` ``csrc/gemm/gemm_ops.cpp`` (``TORCH_LIBRARY_FRAGMENT(mslk,
m)``), ``pytorch/FBGEMM`` ``fbgemm_gpu/experimental/gen_ai/src/quantize/quantize_defs.cpp``
(``TORCH_LIBRARY_FRAGMENT(fbgemm, m)``), ``vllm-project/vllm`` ``csrc/torch_bindings.cpp`` (namespace
``_C``) and ``vllm/model_executor/layers/quantization/utils/fp8_utils.py`` (``direct_register_custom_op``,
namespace ``vllm``), ``sgl-project/sglang`` ``sgl-kernel/csrc/common_extension.cc``
(``TORCH_LIBRARY_FRAGMENT(sgl_kernel, m)``). torchao 0.18 calls ``torch.ops.mslk.f8f8bf16_rowwise``
for ``PerRow()`` on sm_90+ with mslk installed (``float8_tensor.py``, ``_float8_addmm_impl``) and
``ao::blockwise_fp8_gemm`` for ``PerBlock([1, 128])`` x ``PerBlock([128, 128])``.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["FOREIGN_GEMMS", "ForeignGemm", "Layout", "lookup"]


class Layout(enum.Enum):
    """How the second operand is laid out, for the ``(M, N, K)`` a log counts."""

    NK = "[N, K]"  # a weight as nn.Linear stores it
    KN = "[K, N]"  # the second operand of a matrix product
    OTHER = "batched, grouped, packed, sparse or a convolution"  # logged as (-1, -1, -1)


@dataclass(frozen=True)
class ForeignGemm:
    """One third-party FP8 GEMM operator.

    Attributes:
        name: the qualified operator name, ``namespace::name``.
        library: the library that registers it.
        computes: what it computes (scaling, kernel).
        a: the schema name of the first operand (``""`` where the log cannot name a shape).
        b: the schema name of the second operand.
        layout: the second operand's layout.
        served: whether mmaemu serves it (with a block-scaled kernel model: :mod:`mmaemu._blockwise`).
    """

    name: str
    library: str
    computes: str
    a: str = ""
    b: str = ""
    layout: Layout = Layout.OTHER
    served: bool = False

    def refusal(self) -> str:
        """The message of the :class:`~mmaemu.UnsupportedFeatureError` a call of this operator raises."""
        return (f"torch.ops.{self.name.replace('::', '.')} ({self.library}: {self.computes}) is not modelled: "
                f"mmaemu serves torch._scaled_mm / torch.nn.functional.scaled_mm calls with tensor-wise or row-wise "
                f"scales only. "
                f"{_ADVICE[self.library]} Or pass fallback='native' to run it natively and count it in log.native.")


_TORCH = "torch"
_TORCHAO = "torchao"
_MSLK = "mslk"
_FBGEMM = "FBGEMM GenAI"
_VLLM = "vLLM"
_SGL = "sgl-kernel"

_ADVICE = {
    _TORCH: "Run the groups (mixture-of-experts layers) as separate torch._scaled_mm calls, which are served.",
    _TORCHAO: "For torchao, quantize with Float8DynamicActivationFloat8WeightConfig(granularity=PerTensor()) "
              "and the default kernel preference: torchao then calls torch._scaled_mm, which is served.",
    _MSLK: "For torchao models, quantize with granularity=PerTensor(), or PerRow() with "
           "kernel_preference=KernelPreference.TORCH: torchao then calls torch._scaled_mm, which is served (row-wise "
           "scales experimentally, warned).",
    _FBGEMM: "Call torch._scaled_mm with tensor-wise or row-wise scales instead, or replace the layer with "
             "mmaemu.nn.EmulatedFP8Linear.",
    _VLLM: "Replace the FP8 linear layers with mmaemu.nn.EmulatedFP8Linear (tensor-wise scales).",
    _SGL: "Replace the FP8 linear layers with mmaemu.nn.EmulatedFP8Linear (tensor-wise scales).",
}

_ROW = "FP8 GEMM with row-wise scales, CUTLASS kernel"
_BLOCK = "FP8 GEMM with block-wise scales"
_GROUPED_ROW = "grouped FP8 GEMM with row-wise scales, CUTLASS kernel"


def _rows() -> list[ForeignGemm]:
    grouped = "grouped FP8 GEMM (tensor- or row-wise scales per group), CUTLASS kernel"
    rows = [
        # torch's own FP8 GEMMs that are not aten._scaled_mm(_v2), and their mirrors in code compiled inside a
        # block (mmaemu._compile.MIRRORS): no CPU kernel, so on a CPU they fail in torch; on a GPU they ran
        # natively in silence
        ForeignGemm("aten::_scaled_grouped_mm", _TORCH, grouped),
        ForeignGemm("aten::_scaled_grouped_mm_v2", _TORCH, grouped),
        ForeignGemm("mmaemu::compiled_scaled_grouped_mm", _TORCH, grouped + " (in compiled code)"),
        ForeignGemm("ao::blockwise_fp8_gemm", _TORCHAO,
                    _BLOCK + " (1x128 activations x 128x128 weights), Triton kernel", "a", "b", Layout.NK, served=True),
        ForeignGemm("torchao::blockwise_scaled_mm", _TORCHAO, _BLOCK + " (1x128 / 128x128 recipes), Triton kernel",
                    "a", "b", Layout.KN),
        ForeignGemm("torchao::triton_fp8_gemm_1x128_128x128", _TORCHAO, _BLOCK + " (1x128 x 128x128), Triton kernel",
                    "a", "b", Layout.KN),
        ForeignGemm("torchao::triton_fp8_gemm_1x128_128x1", _TORCHAO, _BLOCK + " (1x128 x 128x1), Triton kernel",
                    "a", "b", Layout.KN),
        ForeignGemm("torchao::mx_fp8_bf16", _TORCHAO, "MXFP8 GEMM (e8m0 scales per 32 elements), CUTLASS kernel",
                    "a", "b", Layout.KN),
        ForeignGemm("torchao::swizzle_scaled_mm", _TORCHAO, "FP8 GEMM on swizzled operands", "mat1", "mat2", Layout.KN),
        ForeignGemm("torchao::rowwise_scaled_linear_sparse_cutlass_f8f8", _TORCHAO,
                    "2:4-sparse FP8 linear with row-wise scales, CUTLASS kernel"),
        ForeignGemm("torchao::float8_linear_cpu", _TORCHAO, "FP8 linear on the CPU (x86 kernel, prepacked weight)"),
    ]
    both = [("f8f8bf16_rowwise", _ROW, True), ("f8f8bf16_rowwise_out", _ROW, True),
            ("f8f8bf16_rowwise_batched", "batched " + _ROW, False),
            ("f8f8bf16_rowwise_grouped", _GROUPED_ROW, False), ("f8f8bf16_rowwise_grouped_cat", _GROUPED_ROW, False),
            ("f8f8bf16_rowwise_grouped_stacked", _GROUPED_ROW, False),
            ("f8f8bf16_rowwise_grouped_dynamic", _GROUPED_ROW, False),
            ("f8f8bf16_blockwise", _BLOCK + ", CUTLASS kernel", True),
            ("f8f8bf16_groupwise", "FP8 GEMM with group-wise scales, CUTLASS kernel", True),
            ("f8f8bf16_groupwise_grouped", "grouped FP8 GEMM with group-wise scales", False),
            ("f8f8bf16_conv", "FP8 convolution with a tensor-wise scale, CUTLASS kernel", False),
            ("f8i4bf16_rowwise", "FP8 x INT4 GEMM with row-wise scales", False),
            ("f8i4bf16_shuffled", "FP8 x INT4 GEMM with row- and group-wise scales", False),
            ("f8i4bf16_shuffled_grouped", "grouped FP8 x INT4 GEMM", False),
            ("mx8mx8bf16_grouped_mm", "grouped MXFP8 GEMM", False),
            ("f8f8f16_rowwise", _ROW + " (ROCm), fp16 output", True),
            ("f8f8bf16_rowwise_preshuffle", _ROW + " (ROCm, preshuffled weight)", False),
            ("f8f8f16_rowwise_preshuffle", _ROW + " (ROCm, preshuffled weight), fp16 output", False),
            ("f8f8bf16_rowwise_grouped_mm", _GROUPED_ROW + " (ROCm)", False)]
    for library in (_MSLK, _FBGEMM):
        namespace = "mslk" if library == _MSLK else "fbgemm"
        for name, computes, plain in both:
            operands = ("XQ", "WQ", Layout.NK) if plain else ()
            rows.append(ForeignGemm(f"{namespace}::{name}", library, computes, *operands))
    tensor_wise = "FP8 GEMM with a tensor-wise scale, CUTLASS kernel (not cuBLASLt: other bits than torch._scaled_mm)"
    rows += [
        ForeignGemm("mslk::f8f8bf16", _MSLK, tensor_wise, "XQ", "WQ", Layout.NK),
        ForeignGemm("mslk::mx8mx4bf16", _MSLK, "MXFP8 x MXFP4 GEMM, CUTLASS kernel"),
        ForeignGemm("mslk::mx8mx4bf16_grouped_mm", _MSLK, "grouped MXFP8 x MXFP4 GEMM"),
        ForeignGemm("fbgemm::f8f8bf16", _FBGEMM, tensor_wise, "XQ", "WQ", Layout.NK),
        ForeignGemm("fbgemm::f8f8bf16_tensorwise", _FBGEMM, tensor_wise, "XQ", "WQ", Layout.NK),
        ForeignGemm("fbgemm::f8f8bf16_lite", _FBGEMM, tensor_wise, "XQ", "WQ", Layout.NK),
        ForeignGemm("fbgemm::f8f8bf16_cublas", _FBGEMM, "FP8 GEMM with tensor-wise scales through cuBLASLt, with "
                    "FBGEMM's own workspace and heuristic query (no recording characterises them)",
                    "A", "B", Layout.NK),
        ForeignGemm("fbgemm::fp8fp8bf16_fast_gemv", _FBGEMM, "FP8 GEMV on CUDA cores", "X", "W", Layout.NK),
        ForeignGemm("_C::cutlass_scaled_mm", _VLLM, "FP8 (or INT8) GEMM with tensor-, row- or column-wise scales, "
                    "or block-wise on sm_90, CUTLASS kernel", "a", "b", Layout.KN),
        ForeignGemm("_C::cutlass_scaled_sparse_mm", _VLLM, "2:4-sparse FP8 (or INT8) GEMM, CUTLASS kernel"),
        ForeignGemm("_C::cutlass_moe_mm", _VLLM, "grouped FP8 GEMM for mixture-of-experts, CUTLASS kernel"),
        ForeignGemm("_C::cutlass_mxfp8_grouped_mm", _VLLM, "grouped MXFP8 GEMM, CUTLASS kernel"),
        ForeignGemm("vllm::w8a8_triton_block_scaled_mm_func", _VLLM, _BLOCK + ", Triton kernel", "qx", "weight",
                    Layout.NK),
        ForeignGemm("vllm::padded_cutlass", _VLLM, _BLOCK + ", CUTLASS kernel", "qx", "weight", Layout.NK),
        ForeignGemm("vllm::fp8_gemm_nt_op", _VLLM, _BLOCK + ", DeepGEMM kernel", "q_input", "weight", Layout.NK),
        ForeignGemm("vllm::flashinfer_fp8_blockscale_gemm", _VLLM, _BLOCK + ", FlashInfer / DeepGEMM kernels",
                    "input", "weight", Layout.NK),
        ForeignGemm("sgl_kernel::fp8_scaled_mm", _SGL, "FP8 GEMM with tensor- or row-wise scales, CUTLASS kernel",
                    "mat_a", "mat_b", Layout.KN),
        ForeignGemm("sgl_kernel::fp8_blockwise_scaled_mm", _SGL, _BLOCK + ", CUTLASS kernel", "mat_a", "mat_b",
                    Layout.KN),
        ForeignGemm("sgl_kernel::fp8_blockwise_scaled_grouped_mm", _SGL, "grouped " + _BLOCK + ", CUTLASS kernel"),
        ForeignGemm("sgl_kernel::bmm_fp8", _SGL, "batched FP8 GEMM through cuBLASLt (FlashInfer), with its own "
                    "workspace and heuristic query"),
    ]
    return rows


#: Every known third-party FP8 GEMM operator, by qualified name.
FOREIGN_GEMMS: dict[str, ForeignGemm] = {row.name: row for row in _rows()}

_FP8 = frozenset(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
                 if hasattr(torch, n))


def lookup(func: Any) -> ForeignGemm | None:
    """The table's row for an operator overload, by its qualified name (``None`` if it is not one)."""
    schema = getattr(func, "_schema", None)
    return FOREIGN_GEMMS.get(schema.name) if schema is not None else None


def has_fp8(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a call has an FP8 tensor among its arguments (lists of tensors included)."""
    def fp8(value: Any) -> bool:
        if isinstance(value, torch.Tensor):
            return value.dtype in _FP8
        return isinstance(value, (list, tuple)) and any(fp8(v) for v in value)
    return any(fp8(v) for v in args) or any(fp8(v) for v in kwargs.values())


def shape(row: ForeignGemm, bound: dict[str, Any]) -> tuple[int, int, int]:
    """``(M, N, K)`` of a call, for the log (``(-1, -1, -1)`` where the operands do not say)."""
    a, b = bound.get(row.a), bound.get(row.b)
    if row.layout is Layout.OTHER or not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return (-1, -1, -1)
    if a.dim() < 1 or b.dim() != 2 or not all(isinstance(s, int) for s in (*a.shape, *b.shape)):
        return (-1, -1, -1)  # symbolic sizes (tracing) are not read: reading them would add guards
    n = b.shape[0] if row.layout is Layout.NK else b.shape[1]
    return (math.prod(a.shape[:-1]), n, a.shape[-1])
