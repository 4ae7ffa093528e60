"""Finding and loading libcublasLt (only when asked), its version, and whether this machine is a
reference platform.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.metadata
import importlib.util
import os
import sys
import threading
from typing import Any

import torch

from ...errors import BackendUnavailableError
from ._abi import (
    _MAJOR_VERSION,
    _MINOR_VERSION,
    _PATCH_LEVEL,
    CUBLAS_STATUS_SUCCESS,
    _CublasLtMatmulAlgo,
    _CublasLtMatmulHeuristicResult,
)

__all__ = ['ENV_PATH', 'find_library', 'cublaslt_version', 'reference_platform_matches', 'available']


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


#: ``cublasLtMatmulDescSetAttribute`` and ``cublasLtMatmulPreferenceSetAttribute``: (object, attribute, buffer, size).
_SET_ATTRIBUTE: tuple[Any, list[Any]] = (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t])

_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "cublasLtCreate": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p)]),
    "cublasLtDestroy": (ctypes.c_int, [ctypes.c_void_p]),
    "cublasLtGetVersion": (ctypes.c_size_t, []),
    "cublasLtGetProperty": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]),
    "cublasLtMatmulDescCreate": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]),
    "cublasLtMatmulDescDestroy": (ctypes.c_int, [ctypes.c_void_p]),
    "cublasLtMatmulDescSetAttribute": _SET_ATTRIBUTE,
    "cublasLtMatrixLayoutCreate": (
        ctypes.c_int,
        [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64],
    ),
    "cublasLtMatrixLayoutDestroy": (ctypes.c_int, [ctypes.c_void_p]),
    "cublasLtMatmulPreferenceCreate": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p)]),
    "cublasLtMatmulPreferenceDestroy": (ctypes.c_int, [ctypes.c_void_p]),
    "cublasLtMatmulPreferenceSetAttribute": _SET_ATTRIBUTE,
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


def load_for_queries(path: str | None = None) -> tuple[Any, str | None, list[str]]:
    """Load libcublasLt for heuristic queries: ``(library or None, its path, what is missing)``.

    The one rule for what a query needs: a libcublasLt (``path``, default :func:`find_library`) that loads,
    and a CUDA device. Each thing missing is one entry of the list (empty when queries can run).
    """
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
    return lib, resolved, problems


def available() -> tuple[bool, str]:
    """Whether cuBLASLt heuristic queries can run here, and why (for ``python -m mmaemu info``).

    Returns:
        ``(True, "cuBLASLt <version> (<path>); cuda:0 <name>, <n> SMs")`` or ``(False, <what is missing>)``.
        Never raises.
    """
    try:
        _, path, problems = load_for_queries()
        if problems:
            return False, "; ".join(problems)
        props = torch.cuda.get_device_properties(0)
        return True, f"cuBLASLt {cublaslt_version()} ({path}); cuda:0 {props.name}, {props.multi_processor_count} SMs"
    except Exception as exc:  # noqa: BLE001
        return False, f"cuBLASLt check failed: {type(exc).__name__}: {exc}"
