"""torch 2.7.1's ``_scaled_mm`` descriptor for cuBLASLt, as data: no library, no device (see
:mod:`mmaemu.platforms._cublaslt` for the descriptor torch builds).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._abi import (
    CUBLAS_COMPUTE_32F,
    CUBLAS_OP_N,
    CUBLAS_OP_T,
    CUBLAS_STATUS_NAMES,
    CUDA_R_8F_E4M3,
    CUDA_R_8F_E5M2,
    CUDA_R_16BF,
    CUDA_R_16F,
    CUDA_R_32F,
)

__all__ = ['cuda_data_type', 'c_data_type', 'HeuristicQuery', 'HeuristicResult', 'MatrixLayout', 'LtDescriptor', 'scaled_mm_descriptor']


# --------------------------------------------------------------------------------------------------
# Pure descriptor logic (no library, no device)
# --------------------------------------------------------------------------------------------------

# torch's ScalarTypeToCudaDataType [torch] for the dtypes _scaled_mm takes or returns on CUDA.
_CUDA_DATA_TYPES: dict[torch.dtype, int] = {
    torch.float32: CUDA_R_32F,
    torch.float16: CUDA_R_16F,
    torch.bfloat16: CUDA_R_16BF,
    torch.float8_e4m3fn: CUDA_R_8F_E4M3,
    torch.float8_e5m2: CUDA_R_8F_E5M2,
}
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def cuda_data_type(dtype: torch.dtype) -> int:
    """The ``cudaDataType_t`` torch passes to cuBLASLt for a tensor of this dtype.

    Args:
        dtype: a torch dtype among float32, float16, bfloat16, float8_e4m3fn and float8_e5m2.

    Returns:
        The ``cudaDataType_t`` value from ``library_types.h``.

    Raises:
        ValueError: for a dtype torch's ``_scaled_mm`` does not hand to cuBLASLt on CUDA.

    Example:
        >>> cuda_data_type(torch.float8_e4m3fn), cuda_data_type(torch.bfloat16)
        (28, 14)
    """
    try:
        return _CUDA_DATA_TYPES[dtype]
    except KeyError:
        known = ", ".join(str(d) for d in _CUDA_DATA_TYPES)
        raise ValueError(f"{dtype} has no cudaDataType in torch 2.7.1's scaled_gemm; accepted: {known}") from None


def c_data_type(out_dtype: torch.dtype, bias_dtype: torch.dtype | None = None) -> int:
    """The C matrix's ``cudaDataType_t`` in torch 2.7.1's ``_scaled_mm`` descriptor.

    ``Blas.cpp``: ``bias ? bias->scalar_type() : isFloat8Type(out_dtype_) ? Half : out_dtype_``.

    Args:
        out_dtype: the output dtype.
        bias_dtype: the bias dtype, or None without a bias.

    Returns:
        The bias dtype's type with a bias; else ``CUDA_R_16F`` for an FP8 output, else the output's.

    Example:
        >>> c_data_type(torch.float8_e4m3fn), c_data_type(torch.float8_e4m3fn, torch.bfloat16)
        (2, 14)
    """
    if bias_dtype is not None:
        return cuda_data_type(bias_dtype)
    return CUDA_R_16F if out_dtype in _FP8 else cuda_data_type(out_dtype)


@dataclass(frozen=True)
class HeuristicQuery:
    """One ``torch._scaled_mm`` call as torch 2.7.1 describes it to cuBLASLt.

    Attributes:
        m: torch's M (rows of mat1 and of the output).
        n: torch's N (columns of mat2 and of the output).
        k: torch's K (the reduction length).
        dtype_a: mat1's dtype (float8_e4m3fn or float8_e5m2).
        dtype_b: mat2's dtype.
        out_dtype: the output dtype (float32, bfloat16, float16, float8_e4m3fn or float8_e5m2).
        use_fast_accum: ``use_fast_accum`` of the call (``CUBLASLT_MATMUL_DESC_FAST_ACCUM``).
        workspace_bytes: the caller's cuBLASLt workspace (``CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES``).
        bias_dtype: the bias dtype, or None without a bias.
        scale_result: whether the call passes ``scale_result`` (sets ``D_SCALE_POINTER``, as torch does
            whenever it is given).
    """

    m: int
    n: int
    k: int
    dtype_a: torch.dtype
    dtype_b: torch.dtype
    out_dtype: torch.dtype
    use_fast_accum: bool
    workspace_bytes: int
    bias_dtype: torch.dtype | None = None
    scale_result: bool = False

    def __post_init__(self) -> None:
        for name in ("m", "n", "k"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"HeuristicQuery.{name} must be a positive int, got {value!r}")
        if not isinstance(self.workspace_bytes, int) or self.workspace_bytes < 0:
            raise ValueError(f"HeuristicQuery.workspace_bytes must be an int >= 0, got {self.workspace_bytes!r}")
        for name in ("dtype_a", "dtype_b", "out_dtype"):
            cuda_data_type(getattr(self, name))
        if self.bias_dtype is not None:
            cuda_data_type(self.bias_dtype)


@dataclass(frozen=True)
class HeuristicResult:
    """What cuBLASLt's heuristic picked for a :class:`HeuristicQuery`.

    Attributes:
        status: ``"ok"``; ``"rejected"`` when the heuristic returned no algorithm (torch then raises
            ``CUBLAS_STATUS_NOT_SUPPORTED``); or the ``cublasStatus_t`` name the heuristic call or the
            result's ``state`` returned (torch raises on those too).
        splitk: ``CUBLASLT_ALGO_CONFIG_SPLITK_NUM`` (1: K not split); 0 unless ``status == "ok"``.
        reduction_scheme: ``CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME`` (``cublasLtReductionScheme_t``).
        custom_option: ``CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION``.
        algo_id: ``CUBLASLT_ALGO_CONFIG_ID``.
        tile_id: ``CUBLASLT_ALGO_CONFIG_TILE_ID`` (``cublasLtMatmulTile_t``).
        stages_id: ``CUBLASLT_ALGO_CONFIG_STAGES_ID`` (``cublasLtMatmulStages_t``).
        swizzle: ``CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING``.
        workspace_size: the result's ``workspaceSize`` in bytes.
        waves_count: the result's ``wavesCount``.
    """

    status: str
    splitk: int
    reduction_scheme: int
    custom_option: int
    algo_id: int
    tile_id: int
    stages_id: int
    swizzle: int
    workspace_size: int
    waves_count: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether the heuristic returned an algorithm (torch would run the call)."""
        return self.status == "ok"


def _failed(status: str) -> HeuristicResult:
    return HeuristicResult(status, 0, 0, 0, 0, 0, 0, 0, 0)


@dataclass(frozen=True)
class MatrixLayout:
    """Arguments of one ``cublasLtMatrixLayoutCreate(type, rows, cols, ld)`` (column-major order)."""

    dtype: int
    rows: int
    cols: int
    ld: int


@dataclass(frozen=True)
class LtDescriptor:
    """Every number torch 2.7.1's ``scaled_gemm`` hands to cuBLASLt for one call.

    Attributes:
        m: cuBLAS m (torch's N).
        n: cuBLAS n (torch's M).
        k: cuBLAS k (torch's K).
        transa: ``CUBLASLT_MATMUL_DESC_TRANSA`` (``CUBLAS_OP_T``).
        transb: ``CUBLASLT_MATMUL_DESC_TRANSB`` (``CUBLAS_OP_N``).
        a: layout of A (mat2).
        b: layout of B (mat1).
        c: layout of C.
        d: layout of D (the output).
        compute_type: ``CUBLAS_COMPUTE_32F``.
        scale_type: ``CUDA_R_32F``.
        fast_accum: ``CUBLASLT_MATMUL_DESC_FAST_ACCUM`` (0 or 1).
        bias_data_type: ``CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE`` with a bias (then the epilogue is
            ``CUBLASLT_EPILOGUE_BIAS``), else None (attributes left unset).
        d_scale: whether ``CUBLASLT_MATMUL_DESC_D_SCALE_POINTER`` is set.
        workspace_bytes: ``CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES``.
    """

    m: int
    n: int
    k: int
    transa: int
    transb: int
    a: MatrixLayout
    b: MatrixLayout
    c: MatrixLayout
    d: MatrixLayout
    compute_type: int
    scale_type: int
    fast_accum: int
    bias_data_type: int | None
    d_scale: bool
    workspace_bytes: int


def scaled_mm_descriptor(q: HeuristicQuery) -> LtDescriptor:
    """The cuBLASLt descriptor of a ``torch._scaled_mm`` call in torch 2.7.1 (pure; no library needed).

    Args:
        q: the call.

    Returns:
        The numbers :meth:`CublasLt.query` passes to cuBLASLt.
    """
    m, n, k = q.n, q.m, q.k  # cublasCommonArgs: a row-major result transposes the problem [torch]
    return LtDescriptor(
        m=m,
        n=n,
        k=k,
        transa=CUBLAS_OP_T,
        transb=CUBLAS_OP_N,
        # CuBlasLtMatrixLayout(type(mat2), m, k, lda=K, t=true) -> Create(type, k, m, K)
        a=MatrixLayout(cuda_data_type(q.dtype_b), k, m, q.k),
        # CuBlasLtMatrixLayout(type(mat1), k, n, ldb=K) -> Create(type, k, n, K)
        b=MatrixLayout(cuda_data_type(q.dtype_a), k, n, q.k),
        c=MatrixLayout(c_data_type(q.out_dtype, q.bias_dtype), m, n, q.n),
        d=MatrixLayout(cuda_data_type(q.out_dtype), m, n, q.n),
        compute_type=CUBLAS_COMPUTE_32F,
        scale_type=CUDA_R_32F,
        fast_accum=1 if q.use_fast_accum else 0,
        bias_data_type=None if q.bias_dtype is None else cuda_data_type(q.bias_dtype),
        d_scale=bool(q.scale_result),
        workspace_bytes=q.workspace_bytes,
    )


def _status_name(status: int) -> str:
    return CUBLAS_STATUS_NAMES.get(int(status), f"CUBLAS_STATUS_{int(status)}")
