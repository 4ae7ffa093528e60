"""The numbers of cuBLASLt's C API that the heuristic query passes: enums, attributes, structures.

Each value is cited beside it; the sources are listed in :mod:`mmaemu.platforms._cublaslt`.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ['CUDA_R_32F', 'CUDA_R_16F', 'CUDA_R_16BF', 'CUDA_R_8F_E4M3', 'CUDA_R_8F_E5M2', 'CUBLAS_COMPUTE_32F', 'CUBLAS_OP_N', 'CUBLAS_OP_T', 'CUBLAS_STATUS_SUCCESS', 'CUBLAS_STATUS_NOT_SUPPORTED', 'CUBLAS_STATUS_NAMES', 'CUBLASLT_MATMUL_DESC_TRANSA', 'CUBLASLT_MATMUL_DESC_TRANSB', 'CUBLASLT_MATMUL_DESC_EPILOGUE', 'CUBLASLT_MATMUL_DESC_BIAS_POINTER', 'CUBLASLT_MATMUL_DESC_A_SCALE_POINTER', 'CUBLASLT_MATMUL_DESC_B_SCALE_POINTER', 'CUBLASLT_MATMUL_DESC_D_SCALE_POINTER', 'CUBLASLT_MATMUL_DESC_FAST_ACCUM', 'CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE', 'CUBLASLT_EPILOGUE_BIAS', 'CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES', 'CUBLASLT_ALGO_CONFIG_ID', 'CUBLASLT_ALGO_CONFIG_TILE_ID', 'CUBLASLT_ALGO_CONFIG_SPLITK_NUM', 'CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME', 'CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING', 'CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION', 'CUBLASLT_ALGO_CONFIG_STAGES_ID', 'CUBLASLT_REDUCTION_SCHEME_NONE', 'CUBLASLT_REDUCTION_SCHEME_INPLACE', 'CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE', 'CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE']


# --------------------------------------------------------------------------------------------------
# cudaDataType_t -- [types.h] CUDA 12.2.1 library_types.h:
#   CUDA_R_16F = 2, CUDA_R_16BF = 14, CUDA_R_32F = 0, CUDA_R_8F_E4M3 = 28, CUDA_R_8F_E5M2 = 29.
# --------------------------------------------------------------------------------------------------
CUDA_R_32F = 0
CUDA_R_16F = 2
CUDA_R_16BF = 14
CUDA_R_8F_E4M3 = 28
CUDA_R_8F_E5M2 = 29

# --------------------------------------------------------------------------------------------------
# [api.h] cublas_api.h (cross-checked: [nvmath-blas] cycublas.pxd)
# --------------------------------------------------------------------------------------------------
#: cublasComputeType_t: CUBLAS_COMPUTE_32F = 68 ("float - default").
CUBLAS_COMPUTE_32F = 68
#: cublasOperation_t: CUBLAS_OP_N = 0, CUBLAS_OP_T = 1.
CUBLAS_OP_N = 0
CUBLAS_OP_T = 1
#: cublasStatus_t.
CUBLAS_STATUS_SUCCESS = 0
CUBLAS_STATUS_NOT_SUPPORTED = 15
#: Every cublasStatus_t of cuBLAS 12.x, by value ([api.h]: 0, 1, 3, 7, 8, 11, 13, 14, 15, 16).
CUBLAS_STATUS_NAMES: dict[int, str] = {
    0: "CUBLAS_STATUS_SUCCESS",
    1: "CUBLAS_STATUS_NOT_INITIALIZED",
    3: "CUBLAS_STATUS_ALLOC_FAILED",
    7: "CUBLAS_STATUS_INVALID_VALUE",
    8: "CUBLAS_STATUS_ARCH_MISMATCH",
    11: "CUBLAS_STATUS_MAPPING_ERROR",
    13: "CUBLAS_STATUS_EXECUTION_FAILED",
    14: "CUBLAS_STATUS_INTERNAL_ERROR",
    15: "CUBLAS_STATUS_NOT_SUPPORTED",
    16: "CUBLAS_STATUS_LICENSE_ERROR",
}

# --------------------------------------------------------------------------------------------------
# cublasLtMatmulDescAttributes_t -- [lt.h] (cross-checked: [nvmath] cycublasLt.pxd). The comment is
# the C type the header gives, which fixes the byte size passed to cublasLtMatmulDescSetAttribute.
# --------------------------------------------------------------------------------------------------
CUBLASLT_MATMUL_DESC_TRANSA = 3  # int32_t (cublasOperation_t)
CUBLASLT_MATMUL_DESC_TRANSB = 4  # int32_t (cublasOperation_t)
CUBLASLT_MATMUL_DESC_EPILOGUE = 7  # uint32_t (cublasLtEpilogue_t)
CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8  # const void*
CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17  # const void*
CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18  # const void*
CUBLASLT_MATMUL_DESC_D_SCALE_POINTER = 20  # const void*
CUBLASLT_MATMUL_DESC_FAST_ACCUM = 25  # int8_t
CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26  # int32_t (cudaDataType)
#: cublasLtEpilogue_t [lt.h]: CUBLASLT_EPILOGUE_BIAS = 4.
CUBLASLT_EPILOGUE_BIAS = 4

# cublasLtMatmulPreferenceAttributes_t -- [lt.h] (cross-checked: [nvmath]).
CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1  # uint64_t

# cublasLtMatmulAlgoConfigAttributes_t -- [lt.h] (cross-checked: [nvmath]). All 4 bytes.
CUBLASLT_ALGO_CONFIG_ID = 0  # int32_t
CUBLASLT_ALGO_CONFIG_TILE_ID = 1  # uint32_t (cublasLtMatmulTile_t)
CUBLASLT_ALGO_CONFIG_SPLITK_NUM = 2  # int32_t, default 1
CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME = 3  # uint32_t (cublasLtReductionScheme_t)
CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING = 4  # uint32_t
CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION = 5  # uint32_t
CUBLASLT_ALGO_CONFIG_STAGES_ID = 6  # uint32_t (cublasLtMatmulStages_t)

# cublasLtReductionScheme_t -- [lt.h] (cross-checked: [nvmath]).
CUBLASLT_REDUCTION_SCHEME_NONE = 0
CUBLASLT_REDUCTION_SCHEME_INPLACE = 1
CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2
CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE = 4

# libraryPropertyType [types.h]: MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL (0, 1, 2).
_MAJOR_VERSION, _MINOR_VERSION, _PATCH_LEVEL = 0, 1, 2


class _CublasLtMatmulAlgo(ctypes.Structure):
    """``cublasLtMatmulAlgo_t`` [lt.h]: ``typedef struct { uint64_t data[8]; }`` (64 bytes)."""

    _fields_ = [("data", ctypes.c_uint64 * 8)]


class _CublasLtMatmulHeuristicResult(ctypes.Structure):
    """``cublasLtMatmulHeuristicResult_t`` [lt.h] (same in [nvmath]): 96 bytes on LP64 and LLP64.

    ``algo`` (64 bytes), ``size_t workspaceSize``, ``cublasStatus_t state`` (a C enum, 4 bytes),
    ``float wavesCount``, ``int reserved[4]``.
    """

    _fields_ = [
        ("algo", _CublasLtMatmulAlgo),
        ("workspaceSize", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("wavesCount", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]
