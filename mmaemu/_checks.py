"""The argument checks of ``torch._scaled_mm`` (torch 2.7.1, CUDA) and the reference platform's rejections.

:func:`check_call` runs them in torch's order and returns a :class:`CheckedCall` or raises:

- :class:`~mmaemu.errors.ReferenceRejectsError` (a ``RuntimeError``) with torch's message for every
  call torch 2.7.1 or the reference cuBLASLt rejects;
- :class:`TypeError` where torch's argument parser raises one;
- :class:`~mmaemu.errors.UnsupportedFeatureError` for calls the reference GPU runs but mmaemu does
  not model (block-wise scales, a bias with an FP8 output, a bias read past its storage
  or from a misaligned pointer ([Note: bias memory]), any input requiring grad in grad mode, empty
  calls included, an ``out=`` layout that torch would silently not write); a bias with a bf16 or fp16
  output passes (experimental: :mod:`mmaemu._epilogue`, [Note: bias]); row-wise scales pass torch's
  row-wise checks (:mod:`mmaemu._rowwise_checks`) and are returned as such (``scaling``): which kernel
  serves them is the caller's decision (:mod:`mmaemu.kernels`);
- :class:`~mmaemu.errors.MmaemuError` when the CPU flushes subnormals (it would change the arithmetic);
- :class:`ValueError` for tensors on the ``meta`` device (they hold no values to compute with);
- :class:`RuntimeError` (not a ``ReferenceRejectsError``) for an ``out`` that shares memory with an
  operand, a scale, ``bias`` or ``scale_result`` (see [Note: out]).

[Note: out] :func:`check_call` never modifies ``out``: it only decides. The caller resizes and writes
``out`` once every check and decision passed, so a refused call leaves ``out`` as it was (shape,
strides and contents). An ``out`` whose written elements (after the resize torch would do) share
memory with anything the call reads (the bias as cuBLASLt reads it, [Note: bias memory]) is refused:
torch 2.7.1 does not check it and the GPU would read operands while overwriting them, so no result
is defined.

The order and messages follow torch 2.7.1's ``_scaled_mm_out_cuda`` (aten/src/ATen/native/cuda/
Blas.cpp) and are checked against the RTX 4060's recorded API grids (``recordings/rtx4060``, kind
``call``: 5,321 calls, each with the exception class the hardware raised).

[Note: layouts] torch 2.7.1 neither copies nor transposes misoriented FP8 operands: mat1 must be
row-major (contiguous, or padded with ``stride(1) == 1``; other non-dense views are cloned) and mat2
column-major (``w.t()``, or padded with ``stride(0) == 1``); anything else raises
``Only multiplication of row-major and column-major matrices is supported by cuBLASLt``.

[Note: alignment] cuBLASLt needs 16-byte aligned FP8 operands: a storage offset or a leading
dimension that is not a multiple of 16 bytes is rejected. Recorded on the RTX 4060: offsets of 1, 2,
4 and 8 bytes and leading dimensions K + 1 are rejected, offsets of 16 and 32 bytes and K + 16 are
accepted. The threshold (16 bytes) is from those recordings and cuBLAS's documentation; the status
cuBLASLt reports for it is unverified (mmaemu reports CUBLAS_STATUS_NOT_SUPPORTED).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

import torch

from .errors import ReferenceRejectsError, UnsupportedFeatureError
from .formats import Fp8Format, OutFormat, out_format_or_none
from ._host import check_cpu_subnormals, refuse_autograd
from ._bias import bias_as_read, cublaslt_bias
from ._out import check_out_overlap, resize_out_like_torch
from ._rowwise_checks import check_rowwise

__all__ = [
    "ScalingType",
    "CheckedCall",
    "check_call",
    "scalar_type_name",
    "OUT_REQUIRES_GRAD_MESSAGE",
    "OUT_INFERENCE_TENSOR_MESSAGE",
    "refuse_autograd_inputs",
]

_SCALAR_TYPE_NAMES = {
    torch.float32: "Float",
    torch.float64: "Double",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.float8_e4m3fn: "Float8_e4m3fn",
    torch.float8_e5m2: "Float8_e5m2",
    torch.int8: "Char",
    torch.uint8: "Byte",
    torch.int16: "Short",
    torch.int32: "Int",
    torch.int64: "Long",
    torch.bool: "Bool",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}
for _name in ("float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"):
    if hasattr(torch, _name):
        _SCALAR_TYPE_NAMES[getattr(torch, _name)] = "Float8_" + _name.split("_", 1)[1]

_FLOAT8 = {d for d, n in _SCALAR_TYPE_NAMES.items() if n.startswith("Float8_")}
_E8M0 = getattr(torch, "float8_e8m0fnu", None)
#: dtypes that torch 2.7.1's ScalarTypeToCudaDataType maps on CUDA (others hit an internal assert).
_CUDA_DATA_TYPES = {
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
    torch.float64, torch.bfloat16, torch.complex64, torch.complex128, torch.float8_e4m3fn, torch.float8_e5m2,
}
#: byte alignment cuBLASLt needs for FP8 operands and leading dimensions (see [Note: alignment]).
ALIGNMENT_BYTES = 16
#: torch's autograd layer for an ``out=`` leaf that requires grad in grad mode (torch 2.13's wording on
#: the CPU; the autograd layer runs before the device's kernel, torch 2.7.1's wording is unverified).
OUT_REQUIRES_GRAD_MESSAGE = (
    "aten::_scaled_mm(): functions with out=... arguments don't support automatic differentiation, but one of "
    "the arguments requires grad."
)
#: torch's message for an inference tensor written outside inference mode (torch writes it first)
OUT_INFERENCE_TENSOR_MESSAGE = (
    "Inplace update to inference tensor outside InferenceMode is not allowed.You can make a clone to get a normal "
    "tensor before doing inplace update.See https://github.com/pytorch/rfcs/pull/17 for more details."
)


def scalar_type_name(dtype: torch.dtype) -> str:
    """torch's C++ ScalarType name of a dtype, as torch's messages print it (``Float8_e4m3fn``)."""
    return _SCALAR_TYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


class ScalingType(enum.Enum):
    """How torch 2.7.1 classifies the scales."""

    TENSOR_WISE = "tensor-wise"
    ROW_WISE = "row-wise"
    BLOCK_WISE = "block-wise"


@dataclass(frozen=True)
class CheckedCall:
    """A call that passed every check, with what the plan needs.

    Attributes:
        m, n, k: the GEMM shape.
        fmt_a, fmt_b: the FP8 formats of mat1 and mat2.
        out_dtype: the result dtype.
        out_format: the output format (None only for an empty call whose dtype no GEMM produces).
        fast: use_fast_accum.
        empty: M, N or K is 0: torch returns early (zeros when K == 0) without running cuBLASLt.
        scaling: tensor-wise (cuBLASLt) or row-wise (torch's CUTLASS kernel, :mod:`mmaemu.kernels`).
    """

    m: int
    n: int
    k: int
    fmt_a: Fp8Format
    fmt_b: Fp8Format
    out_dtype: torch.dtype
    out_format: OutFormat | None
    fast: bool
    empty: bool
    scaling: ScalingType = ScalingType.TENSOR_WISE


def _reject(message: str) -> ReferenceRejectsError:
    return ReferenceRejectsError(message)


def _check_types(
    mat1: object, mat2: object, scale_a: object, scale_b: object, bias: object, scale_result: object,
    out_dtype: object, use_fast_accum: object, out: object,
) -> None:
    """torch's argument parser: TypeError with its wording."""
    tensors = (("input", 1, mat1), ("mat2", 2, mat2), ("scale_a", 3, scale_a), ("scale_b", 4, scale_b))
    for name, pos, value in tensors:
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"_scaled_mm(): argument '{name}' (position {pos}) must be Tensor, not {type(value).__name__}")
    for name, pos, value in (("bias", 5, bias), ("scale_result", 6, scale_result)):
        if value is not None and not isinstance(value, torch.Tensor):
            raise TypeError(f"_scaled_mm(): argument '{name}' (position {pos}) must be Tensor, not {type(value).__name__}")
    if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"_scaled_mm(): argument 'out_dtype' (position 7) must be torch.dtype, not {type(out_dtype).__name__}")
    if not isinstance(use_fast_accum, bool):
        raise TypeError(f"_scaled_mm(): argument 'use_fast_accum' (position 8) must be bool, not {type(use_fast_accum).__name__}")
    if out is not None and not isinstance(out, torch.Tensor):
        raise TypeError(f"_scaled_mm(): argument 'out' must be Tensor, not {type(out).__name__}")


def _check_devices(named: list[tuple[str, torch.Tensor | None]]) -> None:
    first: torch.device | None = None
    for name, t in named:
        if t is None:
            continue
        if first is None:
            first = t.device
        elif t.device != first:
            raise _reject(
                f"Expected all tensors to be on the same device, but found at least two devices, {first} and "
                f"{t.device}! (when checking argument for argument {name} in method wrapper_CUDA___scaled_mm)"
            )


def _scaling_type(scale_a: torch.Tensor, scale_b: torch.Tensor, m: int, n: int, k: int) -> ScalingType:
    if _E8M0 is not None and scale_a.dtype == _E8M0 and scale_b.dtype == _E8M0:
        return ScalingType.BLOCK_WISE
    if scale_a.dtype != torch.float32 or scale_b.dtype != torch.float32:
        raise _reject("Both scale_a and scale_b must be float (fp32) tensors.")
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        return ScalingType.TENSOR_WISE
    if scale_a.dim() != 2 or scale_b.dim() != 2:
        raise _reject(
            "For non-TensorWise scaling, scale tensors must be 2-dimensional, but got "
            f"scale_a.dim()={scale_a.dim()} and scale_b.dim()={scale_b.dim()}"
        )
    if tuple(scale_a.shape) == (m, 1) and tuple(scale_b.shape) == (1, n):
        if not (scale_a.is_contiguous() and scale_b.is_contiguous()):
            raise _reject("Both scale_a and scale_b must be contiguous for RowWise scaling.")
        return ScalingType.ROW_WISE
    raise _reject(
        "Invalid scaling configuration. For TensorWise scaling, both scales should be scalar. "
        f"For RowWise scaling, scale_a should be ({m}, 1) and scale_b should be (1, {n}). "
        f"Got scale_a.size()=({scale_a.size(0)}, {scale_a.size(1)}) and "
        f"scale_b.size()=({scale_b.size(0)}, {scale_b.size(1)})"
    )


def _dense(t: torch.Tensor) -> bool:
    """torch's is_non_overlapping_and_dense for a 2-D tensor."""
    dims = sorted((s, n) for s, n in zip(t.stride(), t.shape) if n != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def _mat1_layout_ok(t: torch.Tensor) -> bool:
    if _dense(t):
        return t.is_contiguous()
    # non-dense: column-major with padding is refused; row-major padding and odd views pass
    return not (t.stride(0) == 1 and t.stride(1) >= max(1, t.size(0)))


def _mat2_layout_ok(t: torch.Tensor) -> bool:
    if _dense(t):
        return not t.is_contiguous()
    return t.stride(0) == 1 and t.stride(1) >= max(1, t.size(0))


def _out_layout_ok(t: torch.Tensor) -> bool:
    if _dense(t):
        return True
    m, n = t.shape
    return (t.stride(0) == 1 and t.stride(1) >= max(1, m)) or (t.stride(1) == 1 and t.stride(0) >= max(1, n))


def _check_not_meta(mat1: torch.Tensor) -> None:
    """Tensors on the ``meta`` device have shapes but no values (runs after the same-device check)."""
    if mat1.device.type == "meta":
        raise ValueError(
            "mmaemu computes values; tensors on the 'meta' device have none. Pass CPU or CUDA tensors; for "
            "the result's shape and dtype alone, call mmaemu.ops.scaled_mm (its fake implementation serves "
            "meta and fake tensors) or torch._scaled_mm outside mmaemu.emulate()"
        )


def _check_shapes(mat1: torch.Tensor, mat2: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                  bias: torch.Tensor | None, scale_result: torch.Tensor | None) -> tuple[int, int, int, ScalingType]:
    """torch 2.7.1's shape checks of the operands, scales and bias, in its order: (M, N, K, the scaling)."""
    if mat1.dim() != 2:
        raise _reject("mat1 must be a matrix")
    if mat2.dim() != 2:
        raise _reject("mat2 must be a matrix")
    m, k = mat1.shape
    k2, n = mat2.shape
    if k != k2:
        raise _reject(f"mat1 and mat2 shapes cannot be multiplied ({m}x{k} and {k2}x{n})")
    scaling = _scaling_type(scale_a, scale_b, m, n, k)
    if scale_result is not None and (scale_result.numel() != 1 or scale_result.dtype != torch.float32):
        raise _reject("scale_result must be a float scalar")
    if bias is not None and bias.numel() != n:
        raise _reject(f"Bias must be size {n} but got {bias.numel()}")
    if k % 16 != 0:
        raise _reject(f"Expected trailing dimension of mat1 to be divisible by 16 but got mat1 shape: ({m}x{k}).")
    if k % 16 != 0 or n % 16 != 0:
        raise _reject(f"mat2 shape ({k}x{n}) must be divisible by 16")
    return m, n, k, scaling


def check_call(
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: torch.Tensor | None,
    scale_result: torch.Tensor | None,
    out_dtype: torch.dtype | None,
    use_fast_accum: bool,
    out: torch.Tensor | None,
    *,
    resize_out: bool = True,
) -> CheckedCall:
    """Every check of ``torch._scaled_mm`` (torch 2.7.1) and of the reference cuBLASLt, in order.

    The checks modify nothing (see [Note: out]). With ``resize_out=True`` (the default), once every
    check passed, ``out`` is resized as torch resizes it, with torch's UserWarning when a non-empty
    ``out`` changes shape; with ``resize_out=False`` neither happens and the caller, which may
    still refuse the call, resizes ``out`` itself (:func:`out_resize_warning` gives the warning).

    Raises:
        TypeError, ReferenceRejectsError, UnsupportedFeatureError, MmaemuError, ValueError,
        RuntimeError: see the module doc.
    """
    _check_types(mat1, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum, out)
    if out is not None and out.requires_grad and out.is_leaf and torch.is_grad_enabled():
        raise _reject(OUT_REQUIRES_GRAD_MESSAGE)  # torch's autograd layer, before the kernel's checks
    if out is not None and out.is_inference() and not torch.is_inference_mode_enabled():
        raise _reject(OUT_INFERENCE_TENSOR_MESSAGE)  # torch raises it too, but after writing out
    _check_devices([("out", out), ("self", mat1), ("mat2", mat2), ("scale_a", scale_a), ("scale_b", scale_b),
                    ("bias", bias), ("scale_result", scale_result)])
    _check_not_meta(mat1)
    m, n, k, scaling = _check_shapes(mat1, mat2, scale_a, scale_b, bias, scale_result)
    result_dtype = out.dtype if out is not None else (out_dtype if out_dtype is not None else mat1.dtype)
    if out is not None and out_dtype is not None and out_dtype != out.dtype:
        raise _reject("out_dtype must match output matrix type")
    _check_operand_dtypes(mat1, mat2, bias, result_dtype)
    out_resized = out is not None and tuple(out.shape) != (m, n)
    read = [("mat1", mat1), ("mat2", mat2), ("scale_a", scale_a), ("scale_b", scale_b),
            ("bias", bias_as_read(bias, n)), ("scale_result", scale_result)]
    check_out_overlap(out, (m, n), read)  # where torch would resize out: before every later refusal
    empty = m == 0 or n == 0 or k == 0
    if empty:  # torch returns early; inputs requiring grad are refused all the same (every entry point)
        refuse_autograd_inputs(mat1, mat2, scale_a, scale_b, bias, scale_result, out)
        if resize_out:
            resize_out_like_torch(out, m, n)
        return _checked(m, n, k, mat1, mat2, result_dtype, use_fast_accum, empty=True)
    if scaling is ScalingType.ROW_WISE:
        return _rowwise(mat1, mat2, scale_a, scale_b, bias, scale_result, out, result_dtype, use_fast_accum, resize_out)
    _refuse_unmodelled_scaling(scaling)
    if not (_mat1_layout_ok(mat1) and _mat2_layout_ok(mat2)):
        raise _reject("Only multiplication of row-major and column-major matrices is supported by cuBLASLt")
    out_fmt = _check_cublaslt(mat1, mat2, bias, result_dtype, m, n, k)
    if bias is not None and out_fmt.fp8 is not None:
        raise UnsupportedFeatureError(
            "bias with an FP8 output is not modelled: where cuBLASLt adds the bias relative to scale_result is not "
            "recorded (bf16 and fp16 outputs take a bias, experimentally)"
        )
    if bias is not None:
        _check_bias_memory(bias, n)
    refuse_autograd_inputs(mat1, mat2, scale_a, scale_b, bias, scale_result, out)
    if mat1.device.type == "cpu":
        check_cpu_subnormals()
    if out is not None and not out_resized and not _out_layout_ok(out):
        raise UnsupportedFeatureError(
            "out= with this layout: torch 2.7.1 would compute into a contiguous copy and leave out unchanged; "
            "pass a dense out (or a row- or column-major padded one), or no out"
        )
    if resize_out:
        resize_out_like_torch(out, m, n)
    return _checked(m, n, k, mat1, mat2, result_dtype, use_fast_accum, empty=False)


def refuse_autograd_inputs(mat1: object, mat2: object, scale_a: object, scale_b: object, bias: object,
                           scale_result: object, out: object = None) -> None:
    """Refuse, with grad mode on, any argument of a ``_scaled_mm`` call that requires grad (every tensor it
    takes: the operands, the scales, ``bias``, ``scale_result``, ``out``): mmaemu is inference-only.

    Raises:
        UnsupportedFeatureError: naming the arguments (:func:`mmaemu._host.refuse_autograd`).
    """
    refuse_autograd(("mat1", mat1), ("mat2", mat2), ("scale_a", scale_a), ("scale_b", scale_b), ("bias", bias),
                    ("scale_result", scale_result), ("out", out))


def _check_bias_memory(bias: torch.Tensor, n: int) -> None:
    """Refuse a bias whose N elements, as cuBLASLt reads them, leave its storage or start misaligned
    ([Note: bias memory])."""
    offset_bytes = bias.storage_offset() * bias.element_size()
    if (bias.storage_offset() + n) * bias.element_size() > bias.untyped_storage().nbytes():
        raise UnsupportedFeatureError(
            f"bias of shape {tuple(bias.shape)} and strides {bias.stride()}: torch 2.7.1 hands cuBLASLt the bias's "
            f"data pointer and cuBLASLt reads {n} elements from the bias's data pointer, which would run beyond the "
            f"{bias.untyped_storage().nbytes()} bytes of its storage (no result is defined); pass "
            "bias.contiguous()"
        )
    if offset_bytes % ALIGNMENT_BYTES:
        raise UnsupportedFeatureError(
            f"bias with a storage offset of {offset_bytes} bytes: its data pointer is not 16-byte aligned, and what "
            "cuBLASLt does with such a bias pointer is not recorded; pass bias.clone()"
        )


def fp8_pair_refusal(a: torch.dtype, b: torch.dtype) -> str | None:
    """torch 2.7.1's refusal of an FP8 operand pair (its message), or None when it accepts the pair:
    two E5M2 matrices are refused."""
    if a == torch.float8_e5m2 and b == torch.float8_e5m2:
        return "Multiplication of two Float8_e5m2 matrices is not supported"
    return None


def has_algorithm(a: torch.dtype, b: torch.dtype, out: torch.dtype) -> bool:
    """Whether the reference cuBLASLt has an algorithm for FP8 operands ``a``, ``b`` into ``out``: not
    for E4M3 x E4M3 into E5M2 (cuBLASLt 12.8.3.14 on the RTX 4060 and the H100 PCIe, seeds 000, 002)."""
    return not (a == torch.float8_e4m3fn and b == torch.float8_e4m3fn and out == torch.float8_e5m2)


def _check_operand_dtypes(mat1: torch.Tensor, mat2: torch.Tensor, bias: torch.Tensor | None,
                          result_dtype: torch.dtype) -> None:
    """torch 2.7.1's FP8 operand and bias dtype checks, in its order."""
    if mat1.dtype not in _FLOAT8:
        raise _reject(f"Expected mat1 to be Float8 matrix got {scalar_type_name(mat1.dtype)}")
    if mat2.dtype not in _FLOAT8:
        raise _reject(f"Expected mat2 to be Float8 matrix got {scalar_type_name(mat2.dtype)}")
    refused = fp8_pair_refusal(mat1.dtype, mat2.dtype)
    if refused is not None:
        raise _reject(refused)
    if bias is None:
        return
    if result_dtype == torch.float32:
        raise _reject("Bias is not supported when out_dtype is set to Float32")
    if bias.dtype not in (torch.bfloat16, torch.float16):
        raise _reject(f"Bias must be either Half or BFloat16, but got {scalar_type_name(bias.dtype)}")
    if result_dtype in (torch.float32, torch.bfloat16) and bias.dtype != torch.bfloat16:
        raise _reject(
            f"Bias must be BFloat16 to compute {scalar_type_name(result_dtype)} output, "
            f"but got {scalar_type_name(bias.dtype)}"
        )
    if result_dtype == torch.float16 and bias.dtype != torch.float16:
        raise _reject(
            f"Bias must be Float16 to compute {scalar_type_name(result_dtype)} output, "
            f"but got {scalar_type_name(bias.dtype)}"
        )


def _rowwise(mat1: torch.Tensor, mat2: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
             bias: torch.Tensor | None, scale_result: torch.Tensor | None, out: torch.Tensor | None,
             result_dtype: torch.dtype, fast: bool, resize_out: bool) -> CheckedCall:
    """The rest of a row-wise call's checks: torch's (:func:`mmaemu._rowwise_checks.check_rowwise`), then mmaemu's."""
    check_rowwise(mat1, mat2, scale_a, scale_b, bias, out, result_dtype)
    refuse_autograd_inputs(mat1, mat2, scale_a, scale_b, bias, scale_result, out)
    if mat1.device.type == "cpu":
        check_cpu_subnormals()
    m, n = int(mat1.shape[0]), int(mat2.shape[1])
    if resize_out:
        resize_out_like_torch(out, m, n)
    checked = _checked(m, n, int(mat1.shape[1]), mat1, mat2, result_dtype, fast, empty=False)
    return dataclasses.replace(checked, scaling=ScalingType.ROW_WISE)


def _refuse_unmodelled_scaling(scaling: ScalingType) -> None:
    """Block-wise (MX, e8m0) scales: not modelled."""
    if scaling is ScalingType.BLOCK_WISE:
        raise UnsupportedFeatureError(
            "block-wise e8m0 scales (the MX recipes: MXFP8 as torchao's MXTensor passes them) are not modelled: no "
            "recording shows what the reference platform computes or refuses for them"
        )


def _check_cublaslt(mat1: torch.Tensor, mat2: torch.Tensor, bias: torch.Tensor | None, result_dtype: torch.dtype,
                    m: int, n: int, k: int) -> OutFormat:
    """The reference cuBLASLt's rejections (data types, algorithms, alignment); the output format."""
    for dtype in (mat2.dtype, mat1.dtype, bias.dtype if bias is not None else None, result_dtype):
        if dtype is not None and dtype not in _CUDA_DATA_TYPES:
            raise _reject(
                f"false INTERNAL ASSERT FAILED at \"aten/src/ATen/cuda/CUDADataType.h\", please report a bug to "
                f"PyTorch. Cannot convert ScalarType {scalar_type_name(dtype)} to cudaDataType."
            )
    out_fmt = out_format_or_none(result_dtype)
    if out_fmt is None:
        raise _reject("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `CUBLAS_STATUS_NOT_SUPPORTED`")
    if not has_algorithm(mat1.dtype, mat2.dtype, result_dtype):
        raise _reject("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `CUBLAS_STATUS_NOT_SUPPORTED`")
    # torch clones a non-dense mat1 that is not padded row-major: the copy is contiguous and aligned
    mat1_cloned = not _dense(mat1) and not (mat1.stride(1) == 1 and mat1.stride(0) >= max(1, k))
    lda, ldb = mat2.stride(1), (k if mat1_cloned else mat1.stride(0))
    operands = (mat2,) if mat1_cloned else (mat1, mat2)
    offsets_ok = all(t.storage_offset() * t.element_size() % ALIGNMENT_BYTES == 0 for t in operands)
    if not offsets_ok or lda % ALIGNMENT_BYTES or ldb % ALIGNMENT_BYTES:
        raise _reject(
            f"CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmul with transpose_mat1 t "
            f"transpose_mat2 n m {n} n {m} k {k} mat1_ld {lda} mat2_ld {ldb} result_ld {n} computeType 68 scaleType 0"
        )
    return out_fmt


def _checked(
    m: int, n: int, k: int, mat1: torch.Tensor, mat2: torch.Tensor, result_dtype: torch.dtype, fast: bool, *, empty: bool
) -> CheckedCall:
    # fnuz inputs only reach here in empty calls, which never run the arithmetic
    fmt_a = Fp8Format.E5M2 if mat1.dtype == torch.float8_e5m2 else Fp8Format.E4M3
    fmt_b = Fp8Format.E5M2 if mat2.dtype == torch.float8_e5m2 else Fp8Format.E4M3
    return CheckedCall(m, n, k, fmt_a, fmt_b, result_dtype, out_format_or_none(result_dtype), fast, empty)
