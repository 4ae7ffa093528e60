"""cuBLASLt's heuristic for torch 2.7.1's ``torch._scaled_mm`` descriptor, through ctypes.

This module asks ``cublasLtMatmulAlgoGetHeuristic`` which algorithm it picks for an FP8 GEMM described
exactly as torch 2.7.1 describes it (``aten/src/ATen/cuda/CUDABlas.cpp``, ``scaled_gemm``), and reads that
algorithm's split-K configuration with ``cublasLtMatmulAlgoConfigGetAttribute``. No kernel is launched.
It serves two purposes:

* the ``live-query`` source of :mod:`mmaemu.platforms._splitk`: on the reference GPU itself, a shape that no recorded
  table decides is asked of the local cuBLASLt;
* recording split-K tables on any NVIDIA GPU.

Importing the module loads nothing: libcublasLt is located and loaded only when :func:`find_library`,
:func:`cublaslt_version`, :func:`available` or :class:`CublasLt` is called, and a missing library or CUDA
device raises :class:`~mmaemu.errors.BackendUnavailableError` naming what is missing.

The descriptor (torch 2.7.1, for ``mat1 [M, K] @ mat2 [K, N] -> out [M, N]``, mat1 row-major, mat2
column-major, out row-major; torch's ``cublasCommonArgs`` transposes the problem because the result is
row-major):

* cuBLAS sizes ``m = N``, ``n = M``, ``k = K``; ``transa = T``, ``transb = N``;
* A is mat2: ``cublasLtMatrixLayoutCreate(dtype(mat2), rows=K, cols=N, ld=K)`` (torch's
  ``CuBlasLtMatrixLayout(type, m, k, ld, t=true)`` swaps rows and cols for a transposed operand);
* B is mat1: ``(dtype(mat1), rows=K, cols=M, ld=K)``;
* C: ``(bias dtype if bias else (CUDA_R_16F if the output is FP8 else the output dtype), N, M, ld=N)``
  (``Blas.cpp``: ``bias ? bias->scalar_type() : isFloat8Type(out_dtype_) ? Half : out_dtype_``);
* D: ``(dtype(out), N, M, ld=N)``;
* ``cublasLtMatmulDescCreate(CUBLAS_COMPUTE_32F, CUDA_R_32F)``; attributes ``TRANSA``, ``TRANSB``
  (``cublasOperation_t``, 4 bytes), ``A_SCALE_POINTER`` and ``B_SCALE_POINTER`` (``const void*``),
  ``D_SCALE_POINTER`` only when a result scale is passed, ``FAST_ACCUM`` (``int8_t``); with a bias also
  ``BIAS_POINTER``, ``EPILOGUE = CUBLASLT_EPILOGUE_BIAS`` (4 bytes) and ``BIAS_DATA_TYPE`` (4 bytes);
* preference ``CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES`` = the caller's workspace (``size_t``, 8 bytes);
* ``requestedAlgoCount = 1``; ``returnedResults == 0`` is torch's ``CUBLAS_STATUS_NOT_SUPPORTED``.

Scale and bias pointers: torch always passes device pointers to fp32 scales, and cuBLASLt documents that
routines that do not dereference a pointer (the heuristic among them) may still depend on its value (for
its alignment). A :class:`CublasLt` therefore allocates, once, three separate one-element fp32 CUDA tensors
(A, B and D scales, each its own caching-allocator block, as torch's scale tensors are) and, for a query
with a bias, a CUDA bias vector of N elements of the bias dtype; their addresses go into the descriptor.
Nothing reads or writes them. Without CUDA no query runs at all, so nothing is ever left unset.

Sources of every number (cited again beside each constant):

* ``[lt.h]`` CUDA 12.6 ``include/cublasLt.h`` (stored copy: github.com/zspace/system.cuda-12.6);
  cross-checked against ``[nvmath]`` NVIDIA nvmath-python ``nvmath/bindings/cycublasLt.pxd`` ("generated
  across versions from 11.0.3 to 12.8.0").
* ``[api.h]`` CUDA 12.6 ``include/cublas_api.h`` (same copy; ``CUBLAS_VER`` 12.6.4); cross-checked against
  ``[nvmath-blas]`` nvmath-python ``nvmath/bindings/cycublas.pxd``.
* ``[types.h]`` CUDA 12.2.1 ``include/library_types.h`` (stored copy in github.com/iree-org/iree,
  ``build_tools/third_party/cuda/12.2.1/linux-x86_64/include``); the same values appear in a newer
  ``library_types.h`` (with ``CUDA_R_8F_UE8M0 = 30`` ...) and in several public bindings.
* ``[torch]`` pytorch ``aten/src/ATen/cuda/CUDABlas.cpp`` (``scaled_gemm``, ``CuBlasLtMatrixLayout``) and
  ``aten/src/ATen/native/cuda/Blas.cpp`` (``_scaled_mm_out_cuda``).
"""

from __future__ import annotations

from ._abi import *  # noqa: F403
from ._abi import _CublasLtMatmulAlgo, _CublasLtMatmulHeuristicResult  # noqa: F401
from ._descriptor import *  # noqa: F403
from ._library import *  # noqa: F403
from ._library import _LOADED, ENV_PATH  # noqa: F401
from ._query import CublasLt

__all__ = [
    # cudaDataType_t [types.h]
    "CUDA_R_32F",
    "CUDA_R_16F",
    "CUDA_R_16BF",
    "CUDA_R_8F_E4M3",
    "CUDA_R_8F_E5M2",
    # cublasComputeType_t, cublasOperation_t, cublasStatus_t [api.h]
    "CUBLAS_COMPUTE_32F",
    "CUBLAS_OP_N",
    "CUBLAS_OP_T",
    "CUBLAS_STATUS_SUCCESS",
    "CUBLAS_STATUS_NOT_SUPPORTED",
    "CUBLAS_STATUS_NAMES",
    # cublasLtMatmulDescAttributes_t [lt.h]
    "CUBLASLT_MATMUL_DESC_TRANSA",
    "CUBLASLT_MATMUL_DESC_TRANSB",
    "CUBLASLT_MATMUL_DESC_EPILOGUE",
    "CUBLASLT_MATMUL_DESC_BIAS_POINTER",
    "CUBLASLT_MATMUL_DESC_A_SCALE_POINTER",
    "CUBLASLT_MATMUL_DESC_B_SCALE_POINTER",
    "CUBLASLT_MATMUL_DESC_D_SCALE_POINTER",
    "CUBLASLT_MATMUL_DESC_FAST_ACCUM",
    "CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE",
    "CUBLASLT_EPILOGUE_BIAS",
    # cublasLtMatmulPreferenceAttributes_t [lt.h]
    "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES",
    # cublasLtMatmulAlgoConfigAttributes_t [lt.h]
    "CUBLASLT_ALGO_CONFIG_ID",
    "CUBLASLT_ALGO_CONFIG_TILE_ID",
    "CUBLASLT_ALGO_CONFIG_SPLITK_NUM",
    "CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME",
    "CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING",
    "CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION",
    "CUBLASLT_ALGO_CONFIG_STAGES_ID",
    # cublasLtReductionScheme_t [lt.h]
    "CUBLASLT_REDUCTION_SCHEME_NONE",
    "CUBLASLT_REDUCTION_SCHEME_INPLACE",
    "CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE",
    "CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE",
    # API
    "cuda_data_type",
    "c_data_type",
    "MatrixLayout",
    "LtDescriptor",
    "scaled_mm_descriptor",
    "find_library",
    "cublaslt_version",
    "HeuristicQuery",
    "HeuristicResult",
    "CublasLt",
    "reference_platform_matches",
    "available",
]
