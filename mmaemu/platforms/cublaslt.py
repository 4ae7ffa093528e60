"""cuBLASLt's heuristic for torch 2.7.1's ``torch._scaled_mm`` descriptor, through ctypes.

This module asks ``cublasLtMatmulAlgoGetHeuristic`` which algorithm it picks for an FP8 GEMM described
exactly as torch 2.7.1 describes it (``aten/src/ATen/cuda/CUDABlas.cpp``, ``scaled_gemm``), and reads that
algorithm's split-K configuration with ``cublasLtMatmulAlgoConfigGetAttribute``. No kernel is launched.
It serves two purposes:

* the ``live-query`` source of :mod:`mmaemu.platforms.splitk`: on the reference GPU itself, a shape that no recorded
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

import contextlib
import ctypes
import ctypes.util
import glob
import importlib.metadata
import importlib.util
import os
import sys
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import torch

from ..errors import BackendUnavailableError

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


# --------------------------------------------------------------------------------------------------
# Finding and loading the library (only when asked)
# --------------------------------------------------------------------------------------------------

#: Environment variable naming a libcublasLt to use before any search.
ENV_PATH = "MMAEMU_CUBLASLT"

if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    _NAMES = ("cublasLt64_12.dll", "cublasLt64_13.dll", "cublasLt64_11.dll")
    _GLOBS = ("cublasLt64_*.dll",)
    _SUBDIRS = ("bin", "lib")
else:
    _NAMES = ("libcublasLt.so.12", "libcublasLt.so.13", "libcublasLt.so.11", "libcublasLt.so")
    _GLOBS = ("libcublasLt.so.*", "libcublasLt.so")
    _SUBDIRS = ("lib",)

_WHEELS = ("nvidia-cublas-cu12", "nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu11")

_LOCK = threading.Lock()
_LOADED: dict[str, ctypes.CDLL] = {}


def _package_dirs(module: str) -> list[str]:
    """Directories of an installed package, without importing the package itself."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError, AttributeError):
        return []
    if spec is None:
        return []
    locations = list(spec.submodule_search_locations or [])
    if not locations and spec.origin:
        locations = [os.path.dirname(spec.origin)]
    return locations


def _match(directory: str) -> str | None:
    """The libcublasLt in a directory, preferring the names in ``_NAMES`` order."""
    for name in _NAMES:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    for pattern in _GLOBS:
        hits = sorted(glob.glob(os.path.join(directory, pattern)))
        if hits:
            return hits[0]
    return None


def _already_mapped() -> str | None:
    """The libcublasLt this process has mapped already (Linux), which is the one torch uses."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.split(None, 5)
                if len(fields) == 6:
                    path = fields[5].strip()
                    if os.path.basename(path).startswith("libcublasLt.so") and os.path.isfile(path):
                        return path
    except OSError:
        pass
    return None


def find_library() -> str | None:
    """Locate libcublasLt without raising.

    Order: ``$MMAEMU_CUBLASLT``; the one this process has already loaded (Linux: torch's own); the
    ``nvidia.cublas`` wheel torch depends on (``nvidia/cublas/lib/libcublasLt.so.12``); a copy bundled in
    ``torch/lib``; ``ctypes.util.find_library("cublasLt")``; ``$CUDA_HOME``/``$CUDA_PATH``/
    ``/usr/local/cuda``; last, the loader's own search for ``libcublasLt.so.12``, ``libcublasLt.so``
    (``cublasLt64_12.dll`` on Windows), which loads the library if it succeeds.

    Returns:
        A path (or a loader name) that loads, or None.
    """
    try:
        override = os.environ.get(ENV_PATH)
        if override:
            return override
        mapped = _already_mapped()
        if mapped:
            return mapped
        directories: list[str] = []
        for base in _package_dirs("nvidia.cublas"):
            directories += [os.path.join(base, sub) for sub in _SUBDIRS]
        directories += [os.path.join(os.path.dirname(torch.__file__), "lib")]
        for directory in directories:
            hit = _match(directory)
            if hit:
                return hit
        found = ctypes.util.find_library("cublasLt")
        if found:
            return found
        roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
        for root in roots:
            if root:
                for sub in ("lib64", "lib", "bin", os.path.join("targets", "x86_64-linux", "lib")):
                    hit = _match(os.path.join(root, sub))
                    if hit:
                        return hit
        for name in _NAMES:
            try:
                ctypes.CDLL(name)
            except OSError:
                continue
            return name
    except Exception:  # noqa: BLE001 - a search never raises
        return None
    return None


_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "cublasLtCreate": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p)]),
    "cublasLtDestroy": (ctypes.c_int, [ctypes.c_void_p]),
    "cublasLtGetVersion": (ctypes.c_size_t, []),
    "cublasLtGetProperty": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]),
    "cublasLtMatmulDescCreate": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]),
    "cublasLtMatmulDescDestroy": (ctypes.c_int, [ctypes.c_void_p]),
    "cublasLtMatmulDescSetAttribute": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t],
    ),
    "cublasLtMatrixLayoutCreate": (
        ctypes.c_int,
        [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64],
    ),
    "cublasLtMatrixLayoutDestroy": (ctypes.c_int, [ctypes.c_void_p]),
    "cublasLtMatmulPreferenceCreate": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p)]),
    "cublasLtMatmulPreferenceDestroy": (ctypes.c_int, [ctypes.c_void_p]),
    "cublasLtMatmulPreferenceSetAttribute": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t],
    ),
    "cublasLtMatmulAlgoGetHeuristic": (
        ctypes.c_int,
        [ctypes.c_void_p] * 7
        + [ctypes.c_int, ctypes.POINTER(_CublasLtMatmulHeuristicResult), ctypes.POINTER(ctypes.c_int)],
    ),
    "cublasLtMatmulAlgoConfigGetAttribute": (
        ctypes.c_int,
        [
            ctypes.POINTER(_CublasLtMatmulAlgo),
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_size_t),
        ],
    ),
}


def _load(path: str) -> ctypes.CDLL:
    """Load (once per path) and declare the functions this module calls.

    Raises:
        OSError: the library does not load.
        BackendUnavailableError: it loads but lacks a function (a cuBLASLt older than FP8 support).
    """
    with _LOCK:
        lib = _LOADED.get(path)
        if lib is not None:
            return lib
        lib = ctypes.CDLL(path)
        for name, (restype, argtypes) in _SIGNATURES.items():
            try:
                function = getattr(lib, name)
            except AttributeError:
                raise BackendUnavailableError(f"{path} has no {name}: not a usable cuBLASLt 12.x library") from None
            function.restype = restype
            function.argtypes = argtypes
        _LOADED[path] = lib
        return lib


def _library_version(lib: Any) -> str | None:
    """``major.minor.patch`` from ``cublasLtGetProperty``, else decoded from ``cublasLtGetVersion``."""
    try:
        parts = []
        for prop in (_MAJOR_VERSION, _MINOR_VERSION, _PATCH_LEVEL):
            value = ctypes.c_int(0)
            if lib.cublasLtGetProperty(prop, ctypes.byref(value)) != CUBLAS_STATUS_SUCCESS:
                raise OSError("cublasLtGetProperty failed")
            parts.append(value.value)
        return ".".join(str(p) for p in parts)
    except Exception:  # noqa: BLE001
        pass
    try:
        v = int(lib.cublasLtGetVersion())  # major * 10000 + minor * 100 + patch, as CUBLAS_VERSION [api.h]
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}" if v > 0 else None
    except Exception:  # noqa: BLE001
        return None


def _wheel_version() -> str | None:
    for dist in _WHEELS:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        except Exception:  # noqa: BLE001
            return None
    return None


def cublaslt_version() -> str | None:
    """The cuBLASLt version, e.g. ``"12.8.3.14"``, or None when no libcublasLt is found.

    The ``nvidia-cublas-cu12`` wheel's version (four parts) is preferred when the library found reports
    the same major.minor.patch (or cannot be asked); otherwise the library's own ``major.minor.patch``
    (``cublasLtGetProperty``, else ``cublasLtGetVersion``). Never raises.

    Returns:
        The version string, or None.
    """
    try:
        path = find_library()
        if path is None:
            return None
        try:
            from_library = _library_version(_load(path))
        except Exception:  # noqa: BLE001
            from_library = None
        wheel = _wheel_version()
        if wheel is not None and (from_library is None or wheel.split(".")[:3] == from_library.split(".")):
            return wheel
        return from_library
    except Exception:  # noqa: BLE001
        return None


def _cuda_available() -> bool:
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False


def _no_cuda_reason() -> str:
    build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
    return f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}, {build})"


def _no_library_reason() -> str:
    return (
        f"libcublasLt not found (looked at ${ENV_PATH}, the process's loaded libraries, the nvidia-cublas-cu12 "
        f"wheel, torch/lib, ctypes.util.find_library('cublasLt'), $CUDA_HOME, $CUDA_PATH, /usr/local/cuda and "
        f"the loader path for {', '.join(_NAMES)})"
    )


# --------------------------------------------------------------------------------------------------
# The heuristic query
# --------------------------------------------------------------------------------------------------


class CublasLt:
    """A cuBLASLt handle that answers :class:`HeuristicQuery` with the heuristic's choice.

    Example (on a machine with a GPU)::

        with CublasLt() as lt:
            r = lt.query(HeuristicQuery(64, 5760, 1920, torch.float8_e4m3fn, torch.float8_e4m3fn,
                                        torch.bfloat16, True, 1 << 20))
            r.splitk, r.custom_option

    Attributes:
        path: the libcublasLt loaded.
        device: the CUDA device index queried (its SM count steers the heuristic).
        version: the library's ``major.minor.patch``, if it reports one.
    """

    path: str
    device: int
    version: str | None

    def __init__(self, path: str | None = None, device: int | None = None) -> None:
        """Load libcublasLt and check for a CUDA device; the handle is created at the first query.

        Args:
            path: the libcublasLt to load; default :func:`find_library`.
            device: the CUDA device index; default the current device.

        Raises:
            BackendUnavailableError: no libcublasLt, one that does not load, or no CUDA device (the
                message names each thing missing).
        """
        self._handle: ctypes.c_void_p | None = None
        self._keep: list[torch.Tensor] = []
        self._scale_ptrs: tuple[int, int, int] = (0, 0, 0)
        self._lock = threading.Lock()
        problems: list[str] = []
        lib: Any = None
        resolved = path if path is not None else find_library()
        if resolved is None:
            problems.append(_no_library_reason())
        else:
            try:
                lib = _load(resolved)
            except BackendUnavailableError as exc:
                problems.append(str(exc))
            except OSError as exc:
                problems.append(f"libcublasLt at {resolved} does not load: {exc}")
        if not _cuda_available():
            problems.append(_no_cuda_reason())
        if problems:
            raise BackendUnavailableError("cuBLASLt heuristic queries are unavailable here: " + "; ".join(problems))
        self._setup(lib, str(resolved), torch.cuda.current_device() if device is None else int(device))

    def _setup(self, lib: Any, path: str, device: int) -> None:
        self._lib = lib
        self.path = path
        self.device = device
        self.version = _library_version(lib)
        self._handle = None
        self._keep = []
        self._scale_ptrs = (0, 0, 0)
        self._lock = threading.Lock()

    # -- device resources -------------------------------------------------------------------------

    def _ensure_handle(self) -> None:
        """Create the handle and the scale buffers (once), on this object's device."""
        if self._handle is not None:
            return
        if not _cuda_available():
            raise BackendUnavailableError(_no_cuda_reason())
        with self._on_device():
            # Three separate fp32 scalars (A, B, D scales), as torch's scale tensors are; allocating them
            # also makes the device's primary context current, which cublasLtCreate needs.
            scales = [torch.ones(1, dtype=torch.float32, device=f"cuda:{self.device}") for _ in range(3)]
            handle = ctypes.c_void_p()
            self._check("cublasLtCreate", self._lib.cublasLtCreate(ctypes.byref(handle)))
        self._keep = scales
        self._scale_ptrs = (scales[0].data_ptr(), scales[1].data_ptr(), scales[2].data_ptr())
        self._handle = handle

    def _on_device(self) -> contextlib.AbstractContextManager[Any]:
        """Make this object's device current (cuBLASLt works on the calling thread's device)."""
        return torch.cuda.device(self.device)

    def _bias_pointer(self, q: HeuristicQuery) -> tuple[int, torch.Tensor | None]:
        """A device bias vector (N elements of the bias dtype) for a query with a bias."""
        assert q.bias_dtype is not None
        bias = torch.zeros(q.n, dtype=q.bias_dtype, device=f"cuda:{self.device}")
        return bias.data_ptr(), bias

    # -- calls --------------------------------------------------------------------------------------

    @staticmethod
    def _check(function: str, status: int) -> None:
        if status != CUBLAS_STATUS_SUCCESS:
            raise BackendUnavailableError(f"{function} failed with {_status_name(status)}")

    def _set(self, function: str, descriptor: ctypes.c_void_p, attr: int, value: Any) -> None:
        set_attribute = getattr(self._lib, function)
        self._check(f"{function}({attr})", set_attribute(descriptor, attr, ctypes.byref(value), ctypes.sizeof(value)))

    def _config(self, algo: _CublasLtMatmulAlgo, attr: int, ctype: Any) -> int:
        value = ctype(0)
        written = ctypes.c_size_t(0)
        status = self._lib.cublasLtMatmulAlgoConfigGetAttribute(
            ctypes.byref(algo), attr, ctypes.byref(value), ctypes.sizeof(value), ctypes.byref(written)
        )
        self._check(f"cublasLtMatmulAlgoConfigGetAttribute({attr})", status)
        return int(value.value)

    def query(self, q: HeuristicQuery) -> HeuristicResult:
        """Ask the heuristic what torch 2.7.1 would run for this call, and read its configuration.

        Args:
            q: the call.

        Returns:
            The heuristic's first algorithm and its split-K configuration; ``status`` is ``"rejected"``
            when no algorithm is returned, or a ``cublasStatus_t`` name when the heuristic call fails.

        Raises:
            BackendUnavailableError: CUDA is gone, or creating or configuring a descriptor failed.
        """
        d = scaled_mm_descriptor(q)
        with self._lock:
            self._ensure_handle()
            keep_bias: torch.Tensor | None = None
            lib = self._lib
            op = ctypes.c_void_p()
            layouts = [ctypes.c_void_p() for _ in range(4)]
            pref = ctypes.c_void_p()
            try:
                status = lib.cublasLtMatmulDescCreate(ctypes.byref(op), d.compute_type, d.scale_type)
                self._check("cublasLtMatmulDescCreate", status)
                desc = "cublasLtMatmulDescSetAttribute"
                self._set(desc, op, CUBLASLT_MATMUL_DESC_TRANSA, ctypes.c_int32(d.transa))
                self._set(desc, op, CUBLASLT_MATMUL_DESC_TRANSB, ctypes.c_int32(d.transb))
                self._set(desc, op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, ctypes.c_void_p(self._scale_ptrs[0]))
                self._set(desc, op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, ctypes.c_void_p(self._scale_ptrs[1]))
                if d.d_scale:
                    self._set(desc, op, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, ctypes.c_void_p(self._scale_ptrs[2]))
                self._set(desc, op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, ctypes.c_int8(d.fast_accum))
                if d.bias_data_type is not None:
                    bias_ptr, keep_bias = self._bias_pointer(q)
                    self._set(desc, op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, ctypes.c_void_p(bias_ptr))
                    self._set(desc, op, CUBLASLT_MATMUL_DESC_EPILOGUE, ctypes.c_uint32(CUBLASLT_EPILOGUE_BIAS))
                    self._set(desc, op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, ctypes.c_int32(d.bias_data_type))
                for handle, layout in zip(layouts, (d.a, d.b, d.c, d.d)):
                    status = lib.cublasLtMatrixLayoutCreate(
                        ctypes.byref(handle), layout.dtype, layout.rows, layout.cols, layout.ld
                    )
                    self._check("cublasLtMatrixLayoutCreate", status)
                self._check("cublasLtMatmulPreferenceCreate", lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)))
                self._set("cublasLtMatmulPreferenceSetAttribute", pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                          ctypes.c_uint64(d.workspace_bytes))
                result = _CublasLtMatmulHeuristicResult()
                returned = ctypes.c_int(0)
                with self._on_device():
                    status = lib.cublasLtMatmulAlgoGetHeuristic(
                        self._handle, op, layouts[0], layouts[1], layouts[2], layouts[3], pref, 1,
                        ctypes.byref(result), ctypes.byref(returned),
                    )
                if status != CUBLAS_STATUS_SUCCESS:
                    return _failed(_status_name(status))
                if returned.value == 0:
                    return _failed("rejected")
                if result.state != CUBLAS_STATUS_SUCCESS:
                    return _failed(_status_name(result.state))
                algo = result.algo
                return HeuristicResult(
                    status="ok",
                    splitk=self._config(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, ctypes.c_int32),
                    reduction_scheme=self._config(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, ctypes.c_uint32),
                    custom_option=self._config(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, ctypes.c_uint32),
                    algo_id=self._config(algo, CUBLASLT_ALGO_CONFIG_ID, ctypes.c_int32),
                    tile_id=self._config(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, ctypes.c_uint32),
                    stages_id=self._config(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, ctypes.c_uint32),
                    swizzle=self._config(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, ctypes.c_uint32),
                    workspace_size=int(result.workspaceSize),
                    waves_count=float(result.wavesCount),
                )
            finally:
                if pref.value:
                    lib.cublasLtMatmulPreferenceDestroy(pref)
                for handle in reversed(layouts):
                    if handle.value:
                        lib.cublasLtMatrixLayoutDestroy(handle)
                if op.value:
                    lib.cublasLtMatmulDescDestroy(op)
                del keep_bias

    def close(self) -> None:
        """Destroy the handle and free the scale buffers (idempotent)."""
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is not None and handle.value:
                self._lib.cublasLtDestroy(handle)
            self._keep = []
            self._scale_ptrs = (0, 0, 0)

    def __enter__(self) -> CublasLt:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CublasLt({self.path!r}, cuBLASLt {self.version}, cuda:{self.device})"


# --------------------------------------------------------------------------------------------------
# Platform checks
# --------------------------------------------------------------------------------------------------


def reference_platform_matches(gpu: str, sm_count: int, cublaslt: str) -> bool:
    """Whether this machine is the reference platform (device 0 and the cuBLASLt torch would use).

    Args:
        gpu: the reference GPU's name, e.g. ``"NVIDIA H100 PCIe"``.
        sm_count: its SM count.
        cublaslt: its cuBLASLt version, e.g. ``"12.8.3.14"``.

    Returns:
        True only if CUDA is available, device 0's name and ``multi_processor_count`` match, and
        :func:`cublaslt_version` equals ``cublaslt``. Never raises.
    """
    try:
        if not _cuda_available():
            return False
        props = torch.cuda.get_device_properties(0)
        if props.name != gpu or int(props.multi_processor_count) != int(sm_count):
            return False
        return cublaslt_version() == cublaslt
    except Exception:  # noqa: BLE001
        return False


def available() -> tuple[bool, str]:
    """Whether cuBLASLt heuristic queries can run here, and why (for ``python -m mmaemu info``).

    Returns:
        ``(True, "cuBLASLt <version> (<path>); cuda:0 <name>, <n> SMs")`` or ``(False, <what is missing>)``.
        Never raises.
    """
    try:
        problems: list[str] = []
        path = find_library()
        if path is None:
            problems.append(_no_library_reason())
        else:
            try:
                _load(path)
            except BackendUnavailableError as exc:
                problems.append(str(exc))
            except OSError as exc:
                problems.append(f"libcublasLt at {path} does not load: {exc}")
        if not _cuda_available():
            problems.append(_no_cuda_reason())
        if problems:
            return False, "; ".join(problems)
        props = torch.cuda.get_device_properties(0)
        return True, f"cuBLASLt {cublaslt_version()} ({path}); cuda:0 {props.name}, {props.multi_processor_count} SMs"
    except Exception as exc:  # noqa: BLE001
        return False, f"cuBLASLt check failed: {type(exc).__name__}: {exc}"
