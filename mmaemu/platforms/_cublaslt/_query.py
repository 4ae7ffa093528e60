"""The heuristic query: a cuBLASLt handle that answers :class:`~mmaemu.platforms._cublaslt.HeuristicQuery`
with the algorithm cuBLASLt picks and its split-K configuration.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import threading
from typing import Any

import torch

from ...errors import BackendUnavailableError
from ._abi import (
    CUBLAS_STATUS_SUCCESS,
    CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
    CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
    CUBLASLT_ALGO_CONFIG_ID,
    CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
    CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
    CUBLASLT_ALGO_CONFIG_STAGES_ID,
    CUBLASLT_ALGO_CONFIG_TILE_ID,
    CUBLASLT_EPILOGUE_BIAS,
    CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
    CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER,
    CUBLASLT_MATMUL_DESC_D_SCALE_POINTER,
    CUBLASLT_MATMUL_DESC_EPILOGUE,
    CUBLASLT_MATMUL_DESC_FAST_ACCUM,
    CUBLASLT_MATMUL_DESC_TRANSA,
    CUBLASLT_MATMUL_DESC_TRANSB,
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
    _CublasLtMatmulAlgo,
    _CublasLtMatmulHeuristicResult,
)
from ._descriptor import (
    HeuristicQuery,
    HeuristicResult,
    _failed,
    _status_name,
    scaled_mm_descriptor,
)
from ._library import _cuda_available, _library_version, _no_cuda_reason, load_for_queries

__all__ = ['CublasLt']


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
            path: the libcublasLt to load; default :func:`~mmaemu.platforms._cublaslt.find_library`.
            device: the CUDA device index; default the current device.

        Raises:
            BackendUnavailableError: no libcublasLt, one that does not load, or no CUDA device (the
                message names each thing missing).
        """
        self._handle: ctypes.c_void_p | None = None
        self._keep: list[torch.Tensor] = []
        self._scale_ptrs: tuple[int, int, int] = (0, 0, 0)
        self._lock = threading.Lock()
        lib, resolved, problems = load_for_queries(path)
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

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CublasLt({self.path!r}, cuBLASLt {self.version}, cuda:{self.device})"
