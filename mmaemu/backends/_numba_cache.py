"""Where numba keeps the cpu backend's compiled machine code: the per-user cache, never the package.

numba's ``cache=True`` writes its index and object files next to the source, in
``mmaemu/backends/__pycache__``, whenever that directory is writable. Files there are not part of
the installed distribution: ``pip uninstall mmaemu`` leaves them behind, and the directory they keep
alive then imports as an empty namespace package that shadows a later install. So mmaemu points numba
at ``user_cache_dir() / "numba"`` (``MMAEMU_CACHE_DIR`` moves it) for mmaemu's own functions only:
the locator below answers for files inside this package and declines every other function, whose
caching numba decides as usual.

Precedence: ``NUMBA_CACHE_DIR`` (numba's own override, for every function) and
``NUMBA_CACHE_LOCATOR_CLASSES`` win; then this locator; numba's defaults last (used only when the
per-user directory cannot be created or written).

[Note: numba's locator list] ``numba.core.caching.CacheImpl._locator_classes`` (``_CacheImpl`` before
numba 0.68) is the list numba consults, first match wins. Should a numba release move
it, :func:`install` does nothing and numba caches in its default place, which is the behaviour
before this module existed (a warning-free degradation, tested by ``tests/docs/test_numba_cache.py``).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

from .._host import user_cache_dir

__all__: list[str] = []

#: The directory of the installed package: functions defined under it use the per-user cache.
_PACKAGE_DIR = Path(__file__).resolve().parents[1]


def cache_dir() -> Path:
    """The directory numba's files for mmaemu go to (``user_cache_dir() / "numba"``)."""
    return user_cache_dir() / "numba"


def _in_package(py_file: str) -> bool:
    try:
        return Path(py_file).resolve().is_relative_to(_PACKAGE_DIR)
    except (OSError, ValueError):
        return False


def _locator_class() -> type | None:
    try:
        from numba.core import caching
    except Exception:  # noqa: BLE001 - numba absent or reorganised: nothing to install
        return None
    base = getattr(caching, "_CacheLocator", None)
    mixin = getattr(caching, "_SourceFileBackedLocatorMixin", None)
    if base is None or mixin is None:
        return None

    class MmaemuCacheLocator(mixin, base):  # type: ignore[misc, valid-type]
        """numba's files for a function of mmaemu, under :func:`cache_dir`."""

        def __init__(self, py_func: Any, py_file: str) -> None:
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = str(cache_dir() / self.get_suitable_cache_subpath(py_file))

        def get_cache_path(self) -> str:
            return self._cache_path

        def get_source_stamp(self) -> Any:
            """(latest mtime, total size) of every module in the function's folder, not of its file alone.

            [Note: inlined helpers] numba stamps cached code with the defining file only, but the
            kernels inline numba functions from sibling modules (``_cpu_steps``, ``_cpu_fp8``): an
            edit of one of those would otherwise load the old machine code. Found by the mutation
            sample of 2026-12-03, where a mutant of ``_cpu_steps.block_max`` survived on stale code.
            """
            stats = [f.stat() for f in Path(self._py_file).parent.glob("*.py")]
            return max(s.st_mtime for s in stats), sum(s.st_size for s in stats)

        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            if os.environ.get("NUMBA_CACHE_DIR") or not _in_package(py_file):
                return None
            return super().from_function(py_func, py_file)

    return MmaemuCacheLocator


#: The kernel modules already checked (and, without cached code, announced) in this process.
_checked: set[str] = set()
_checked_lock = threading.Lock()


def _compiled_dir(py_file: str) -> Path:
    """Where numba keeps (or will keep) the files of the functions defined in ``py_file``."""
    chosen = os.environ.get("NUMBA_CACHE_DIR", "").strip()
    root = Path(chosen) if chosen else cache_dir()
    try:
        from numba.core import caching

        return root / caching._CacheLocator.get_suitable_cache_subpath(py_file)
    except Exception:  # noqa: BLE001 - numba reorganised: no cached files are found, so it announces
        return root / "unknown"


def announce_first_compile(py_file: str, what: str) -> None:
    """Say on stderr that numba is about to compile ``what``, the kernels defined in ``py_file``, when its
    cache holds no index of a function of that module (their first call, once per machine).

    Each module is checked once per process (the first call that runs its kernels); an index of
    another module's kernels in the same folder does not count. Callers name the module whose
    kernels the call runs: the AVX-512 FP8 kernel's, the portable one's, the zoo's vector kernel's
    or its loop kernels' (:func:`mmaemu.backends.cpu.kernel_module`).
    """
    with _checked_lock:
        if py_file in _checked:
            return
        _checked.add(py_file)
    folder = _compiled_dir(py_file)
    try:
        cached = folder.is_dir() and any(folder.glob(f"{Path(py_file).stem}.*.nbi"))
    except OSError:
        cached = False
    if not cached:
        print(f"mmaemu: compiling {what} with numba, once per machine (10 to 60 s; the machine code is "
              f"then cached in {folder.parent})", file=sys.stderr, flush=True)


def install() -> bool:
    """Put mmaemu's locator first in numba's list (once); whether it is there now."""
    try:
        from numba.core import caching
    except Exception:  # noqa: BLE001
        return False
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    classes = getattr(impl, "_locator_classes", None)
    if not isinstance(classes, list):
        return False
    if any(getattr(c, "__name__", "") == "MmaemuCacheLocator" for c in classes):
        return True
    locator = _locator_class()
    if locator is None:
        return False
    classes.insert(0, locator)
    return True
