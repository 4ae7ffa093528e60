"""mmaemu.cublaslt: header constants, torch 2.7.1's descriptor, clean failure without cuBLASLt or a GPU.

Everything here runs on a CPU-only machine; the query path is driven through a fake libcublasLt that
records what it is handed (the real heuristic needs the reference GPU).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import sys
from typing import Any

import pytest
import torch

import mmaemu.platforms._cublaslt as lt
from mmaemu.platforms._cublaslt import (
    CublasLt,
    HeuristicQuery,
    HeuristicResult,
    available,
    c_data_type,
    cublaslt_version,
    cuda_data_type,
    find_library,
    reference_platform_matches,
    scaled_mm_descriptor,
)
from mmaemu.errors import BackendUnavailableError

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
MIB = 1 << 20
HAVE_CUDA = torch.cuda.is_available()


def query(m: int = 64, n: int = 5760, k: int = 1920, a: torch.dtype = E4, b: torch.dtype = E4,
          out: torch.dtype = torch.bfloat16, fast: bool = True, ws: int = MIB, **kw: Any) -> HeuristicQuery:
    return HeuristicQuery(m, n, k, a, b, out, fast, ws, **kw)


# -- import and environment ----------------------------------------------------------------------


def test_module_imports_without_loading_anything() -> None:
    for name in lt.__all__:
        assert hasattr(lt, name), name
    code = "import mmaemu.platforms._cublaslt as c; assert c._LOADED == {}, c._LOADED"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_find_library_returns_none_or_a_path() -> None:
    found = find_library()
    assert found is None or (isinstance(found, str) and found)
    if found is None:
        assert cublaslt_version() is None


def test_find_library_honours_the_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lt.ENV_PATH, "/nonexistent/libcublasLt.so.12")
    assert find_library() == "/nonexistent/libcublasLt.so.12"
    with pytest.raises(BackendUnavailableError, match="does not load"):
        CublasLt()


def test_constructor_names_what_is_missing() -> None:
    have_lib = find_library() is not None
    if have_lib and HAVE_CUDA:
        pytest.skip("libcublasLt and a CUDA device are both present")
    with pytest.raises(BackendUnavailableError) as info:
        CublasLt()
    message = str(info.value)
    if not have_lib:
        assert "libcublasLt not found" in message
    if not HAVE_CUDA:
        assert "no CUDA device" in message



def test_the_recorder_without_a_gpu_raises_record_unavailable(tmp_path: Any) -> None:
    """docs/limitations.md: ``record`` on a machine without CUDA or cuBLASLt raises RecordUnavailableError (a
    BackendUnavailableError) before it writes anything."""
    from mmaemu.errors import RecordUnavailableError
    from mmaemu.recording._record import record

    if find_library() is not None and HAVE_CUDA:
        pytest.skip("libcublasLt and a CUDA device are both present: this machine could record")
    out = tmp_path / "recording"
    with pytest.raises(RecordUnavailableError) as info:
        record(out)
    assert isinstance(info.value, BackendUnavailableError) and not out.exists()

def test_available_says_why_not() -> None:
    usable, reason = available()
    assert isinstance(usable, bool) and isinstance(reason, str) and reason
    if find_library() is None or not HAVE_CUDA:
        assert usable is False
        assert ("libcublasLt" in reason) or ("CUDA" in reason)


def test_reference_platform_matches_is_false_off_the_reference_gpu() -> None:
    if not HAVE_CUDA:
        assert reference_platform_matches("NVIDIA H100 PCIe", 114, "12.8.3.14") is False
    assert reference_platform_matches("no such GPU", -1, "0.0.0") is False
    assert reference_platform_matches(None, "x", None) is False  # type: ignore[arg-type]  # never raises


# -- constants against the headers ---------------------------------------------------------------


def test_cuda_data_types_match_library_types_h() -> None:
    # library_types.h (CUDA 12.2.1): CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14,
    # CUDA_R_8F_E4M3 = 28, CUDA_R_8F_E5M2 = 29.
    assert (lt.CUDA_R_32F, lt.CUDA_R_16F, lt.CUDA_R_16BF, lt.CUDA_R_8F_E4M3, lt.CUDA_R_8F_E5M2) == (0, 2, 14, 28, 29)


def test_cublas_api_h_values() -> None:
    # cublas_api.h (CUDA 12.6): CUBLAS_COMPUTE_32F = 68, CUBLAS_OP_N = 0, CUBLAS_OP_T = 1,
    # CUBLAS_STATUS_NOT_SUPPORTED = 15, CUBLAS_STATUS_INVALID_VALUE = 7.
    assert lt.CUBLAS_COMPUTE_32F == 68
    assert (lt.CUBLAS_OP_N, lt.CUBLAS_OP_T) == (0, 1)
    assert lt.CUBLAS_STATUS_NOT_SUPPORTED == 15
    assert lt.CUBLAS_STATUS_NAMES[7] == "CUBLAS_STATUS_INVALID_VALUE"
    assert sorted(lt.CUBLAS_STATUS_NAMES) == [0, 1, 3, 7, 8, 11, 13, 14, 15, 16]


def test_cublaslt_h_values() -> None:
    # cublasLt.h (CUDA 12.6), cross-checked with nvmath-python's cycublasLt.pxd.
    assert (lt.CUBLASLT_MATMUL_DESC_TRANSA, lt.CUBLASLT_MATMUL_DESC_TRANSB) == (3, 4)
    assert (lt.CUBLASLT_MATMUL_DESC_EPILOGUE, lt.CUBLASLT_MATMUL_DESC_BIAS_POINTER) == (7, 8)
    assert (lt.CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, lt.CUBLASLT_MATMUL_DESC_B_SCALE_POINTER) == (17, 18)
    assert lt.CUBLASLT_MATMUL_DESC_D_SCALE_POINTER == 20
    assert (lt.CUBLASLT_MATMUL_DESC_FAST_ACCUM, lt.CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE) == (25, 26)
    assert lt.CUBLASLT_EPILOGUE_BIAS == 4
    assert lt.CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES == 1
    assert (lt.CUBLASLT_ALGO_CONFIG_ID, lt.CUBLASLT_ALGO_CONFIG_TILE_ID, lt.CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
            lt.CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, lt.CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
            lt.CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, lt.CUBLASLT_ALGO_CONFIG_STAGES_ID) == (0, 1, 2, 3, 4, 5, 6)
    assert (lt.CUBLASLT_REDUCTION_SCHEME_NONE, lt.CUBLASLT_REDUCTION_SCHEME_INPLACE,
            lt.CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, lt.CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE) == (0, 1, 2, 4)


def test_struct_layouts_match_cublaslt_h() -> None:
    # cublasLtMatmulAlgo_t { uint64_t data[8]; }; cublasLtMatmulHeuristicResult_t { algo; size_t
    # workspaceSize; cublasStatus_t state; float wavesCount; int reserved[4]; }
    assert ctypes.sizeof(lt._CublasLtMatmulAlgo) == 64
    r = lt._CublasLtMatmulHeuristicResult
    assert ctypes.sizeof(r) == 96
    offsets = {name: getattr(r, name).offset for name in ("algo", "workspaceSize", "state", "wavesCount", "reserved")}
    assert offsets == {"algo": 0, "workspaceSize": 64, "state": 72, "wavesCount": 76, "reserved": 80}


# -- the descriptor -----------------------------------------------------------------------------


def test_cuda_data_type_maps_torch_dtypes() -> None:
    assert cuda_data_type(E4) == 28
    assert cuda_data_type(E5) == 29
    assert cuda_data_type(torch.bfloat16) == 14
    assert cuda_data_type(torch.float16) == 2
    assert cuda_data_type(torch.float32) == 0
    with pytest.raises(ValueError, match="cudaDataType"):
        cuda_data_type(torch.int8)


def test_c_dtype_rule() -> None:
    assert c_data_type(E4) == lt.CUDA_R_16F  # FP8 output, no bias: half
    assert c_data_type(E5) == lt.CUDA_R_16F
    assert c_data_type(torch.bfloat16) == lt.CUDA_R_16BF  # else the output dtype
    assert c_data_type(torch.float32) == lt.CUDA_R_32F
    assert c_data_type(E4, torch.bfloat16) == lt.CUDA_R_16BF  # a bias decides
    assert c_data_type(torch.float32, torch.float16) == lt.CUDA_R_16F


def test_descriptor_is_torch_271_scaled_gemm() -> None:
    q = query(m=64, n=5760, k=1920, a=E4, b=E5, out=torch.bfloat16, fast=True, ws=MIB)
    d = scaled_mm_descriptor(q)
    assert (d.m, d.n, d.k) == (5760, 64, 1920)  # m = N, n = M, k = K
    assert (d.transa, d.transb) == (lt.CUBLAS_OP_T, lt.CUBLAS_OP_N)
    assert (d.a.dtype, d.a.rows, d.a.cols, d.a.ld) == (29, 1920, 5760, 1920)  # A = mat2, k x m, ld K
    assert (d.b.dtype, d.b.rows, d.b.cols, d.b.ld) == (28, 1920, 64, 1920)  # B = mat1, k x n, ld K
    assert (d.c.dtype, d.c.rows, d.c.cols, d.c.ld) == (14, 5760, 64, 5760)
    assert (d.d.dtype, d.d.rows, d.d.cols, d.d.ld) == (14, 5760, 64, 5760)
    assert (d.compute_type, d.scale_type, d.fast_accum) == (68, 0, 1)
    assert d.bias_data_type is None and d.d_scale is False and d.workspace_bytes == MIB


def test_descriptor_fp8_output_and_bias() -> None:
    d = scaled_mm_descriptor(query(out=E4, fast=False))
    assert (d.c.dtype, d.d.dtype, d.fast_accum) == (lt.CUDA_R_16F, lt.CUDA_R_8F_E4M3, 0)
    d = scaled_mm_descriptor(query(out=E4, bias_dtype=torch.bfloat16, scale_result=True))
    assert (d.c.dtype, d.d.dtype, d.bias_data_type, d.d_scale) == (14, 28, 14, True)


@pytest.mark.parametrize("bad", [dict(m=0), dict(k=-1), dict(ws=-1), dict(out=torch.int32), dict(a=torch.int8)])
def test_query_validates(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        query(**bad)


# -- the query path, against a fake libcublasLt ---------------------------------------------------


class FakeLt:
    """Stands in for libcublasLt: records what it is handed, answers as configured."""

    def __init__(self, returned: int = 1, heuristic_status: int = 0, state: int = 0,
                 config: dict[int, int] | None = None) -> None:
        self.returned, self.heuristic_status, self.state = returned, heuristic_status, state
        self.config = config or {0: 51, 1: 20, 2: 2, 3: 1, 4: 0, 5: 3, 6: 21}
        self.live: set[int] = set()
        self.created = 0
        self.desc: dict[int, tuple[Any, int]] = {}
        self.pref: dict[int, tuple[Any, int]] = {}
        self.layouts: list[tuple[int, int, int, int]] = []
        self.compute: tuple[int, int] | None = None
        self.handles_destroyed = 0

    def _new(self, ref: Any) -> int:
        self.created += 1
        ref._obj.value = 0x100 + self.created
        self.live.add(ref._obj.value)
        return 0

    def _drop(self, handle: ctypes.c_void_p) -> int:
        self.live.remove(handle.value)  # type: ignore[arg-type]
        return 0

    def cublasLtGetProperty(self, prop: int, ref: Any) -> int:
        ref._obj.value = (12, 8, 3)[prop]
        return 0

    def cublasLtGetVersion(self) -> int:
        return 120803

    def cublasLtDestroy(self, handle: ctypes.c_void_p) -> int:
        self.handles_destroyed += 1
        return 0

    def cublasLtMatmulDescCreate(self, ref: Any, compute: int, scale: int) -> int:
        self.compute = (compute, scale)
        return self._new(ref)

    def cublasLtMatmulDescSetAttribute(self, desc: ctypes.c_void_p, attr: int, buf: Any, size: int) -> int:
        assert desc.value in self.live
        self.desc[attr] = (buf._obj.value, size)
        return 0

    def cublasLtMatrixLayoutCreate(self, ref: Any, dtype: int, rows: int, cols: int, ld: int) -> int:
        self.layouts.append((dtype, rows, cols, ld))
        return self._new(ref)

    def cublasLtMatmulPreferenceCreate(self, ref: Any) -> int:
        return self._new(ref)

    def cublasLtMatmulPreferenceSetAttribute(self, pref: ctypes.c_void_p, attr: int, buf: Any, size: int) -> int:
        self.pref[attr] = (buf._obj.value, size)
        return 0

    def cublasLtMatmulAlgoGetHeuristic(self, handle: Any, op: Any, a: Any, b: Any, c: Any, d: Any, pref: Any,
                                       count: int, results: Any, returned: Any) -> int:
        assert count == 1
        assert {op.value, a.value, b.value, c.value, d.value, pref.value} <= self.live
        result = results._obj
        result.workspaceSize = 4096
        result.state = self.state
        result.wavesCount = 0.75
        result.algo.data[0] = 0xA160
        returned._obj.value = self.returned
        return self.heuristic_status

    def cublasLtMatmulAlgoConfigGetAttribute(self, algo: Any, attr: int, buf: Any, size: int, written: Any) -> int:
        assert algo._obj.data[0] == 0xA160 and size == 4
        buf._obj.value = self.config[attr]
        written._obj.value = size
        return 0

    cublasLtMatmulDescDestroy = _drop
    cublasLtMatrixLayoutDestroy = _drop
    cublasLtMatmulPreferenceDestroy = _drop


class FakeCublasLt(CublasLt):
    """A CublasLt on a fake library with fake device pointers (no CUDA needed)."""

    def __init__(self, lib: FakeLt) -> None:  # noqa: D107
        self._setup(lib, "fake", 0)

    def _ensure_handle(self) -> None:
        self._handle = ctypes.c_void_p(0xBEEF)
        self._scale_ptrs = (0x1000, 0x2000, 0x3000)

    def _on_device(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def _bias_pointer(self, q: HeuristicQuery) -> tuple[int, torch.Tensor | None]:
        return 0x4000, None


def test_query_passes_torch_descriptor_and_reads_config() -> None:
    fake = FakeLt()
    with FakeCublasLt(fake) as cl:
        assert cl.version == "12.8.3"
        r = cl.query(query(m=64, n=5760, k=1920, a=E4, b=E5, out=torch.bfloat16, fast=True, ws=MIB))
    assert r == HeuristicResult("ok", splitk=2, reduction_scheme=1, custom_option=3, algo_id=51, tile_id=20,
                                stages_id=21, swizzle=0, workspace_size=4096, waves_count=0.75)
    assert r.ok
    assert fake.compute == (68, 0)
    assert fake.desc == {3: (1, 4), 4: (0, 4), 17: (0x1000, 8), 18: (0x2000, 8), 25: (1, 1)}
    assert fake.pref == {1: (MIB, 8)}
    assert fake.layouts == [(29, 1920, 5760, 1920), (28, 1920, 64, 1920), (14, 5760, 64, 5760), (14, 5760, 64, 5760)]
    assert fake.live == set() and fake.created == 6  # every descriptor destroyed
    assert fake.handles_destroyed == 1


def test_query_with_bias_and_result_scale() -> None:
    fake = FakeLt()
    cl = FakeCublasLt(fake)
    cl.query(query(out=E4, fast=False, bias_dtype=torch.bfloat16, scale_result=True))
    assert fake.desc[20] == (0x3000, 8) and fake.desc[8] == (0x4000, 8)
    assert fake.desc[7] == (lt.CUBLASLT_EPILOGUE_BIAS, 4) and fake.desc[26] == (14, 4)
    assert fake.desc[25] == (0, 1)
    assert [layout[0] for layout in fake.layouts] == [28, 28, 14, 28]  # C takes the bias dtype
    assert fake.live == set()


@pytest.mark.parametrize("kw, status", [
    (dict(returned=0), "rejected"),
    (dict(heuristic_status=15), "CUBLAS_STATUS_NOT_SUPPORTED"),
    (dict(state=7), "CUBLAS_STATUS_INVALID_VALUE"),
])
def test_rejections_are_reported_not_raised(kw: dict[str, Any], status: str) -> None:
    fake = FakeLt(**kw)
    r = FakeCublasLt(fake).query(query(out=E5))
    assert r.status == status and not r.ok and r.splitk == 0
    assert fake.live == set()


def test_descriptor_failure_raises_and_still_cleans_up() -> None:
    class Failing(FakeLt):
        def cublasLtMatrixLayoutCreate(self, ref: Any, dtype: int, rows: int, cols: int, ld: int) -> int:
            if len(self.layouts) == 2:
                return 7
            return super().cublasLtMatrixLayoutCreate(ref, dtype, rows, cols, ld)

    fake = Failing()
    expected = "cublasLtMatrixLayoutCreate failed with CUBLAS_STATUS_INVALID_VALUE"
    with pytest.raises(BackendUnavailableError, match=expected):
        FakeCublasLt(fake).query(query())
    assert fake.live == set()


@pytest.mark.skipif(not (HAVE_CUDA and find_library()), reason="needs libcublasLt and a CUDA device")
def test_live_query_on_this_gpu() -> None:  # pragma: no cover - GPU only
    with CublasLt() as cl:
        r = cl.query(query())
        assert r.status == "ok" and r.splitk >= 1
        assert cl.query(query(out=E5, a=E4, b=E4, ws=0)).status in {"ok", "rejected", "CUBLAS_STATUS_NOT_SUPPORTED"}
    assert os.path.exists(cl.path) or not os.path.isabs(cl.path)
