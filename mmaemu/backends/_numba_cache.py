"""Where numba keeps the cpu backend's compiled machine code: the per-user cache, never the package, and only a
cache no other user can have written.

numba's ``cache=True`` writes its index and object files next to the source, in
``mmaemu/backends/__pycache__``, whenever that directory is writable. Files there are not part of
the installed distribution: ``pip uninstall mmaemu`` leaves them behind, and the directory they keep
alive then imports as an empty namespace package that shadows a later install. So mmaemu points numba
at ``user_cache_dir() / "numba"`` (``MMAEMU_CACHE_DIR`` moves it) for mmaemu's own functions only:
the locator below answers for files inside this package and declines every other function, whose
caching numba decides as usual.

[Note: a cache is code] numba unpickles a function's index (``.nbi``) before it checks that the index is fresh
(``numba/core/caching.py``, ``IndexDataCacheFile._load_index``: ``pickle.load`` of the version, then
``pickle.loads`` of the rest), and unpickling runs whatever the file names. A file another local user planted in
the cache folder would run as this user on the first cpu-backend call. So the kernel modules decorate with
``cache=disk_cache(__file__)``: True only once the folder numba will read, every folder on its way and every file
in it pass :mod:`mmaemu._private` (folders made 0700; this user's, not writable by others). Otherwise
:class:`~mmaemu.errors.UntrustedCacheWarning` says which folder or file is at fault and how to fix it, and the
kernels are compiled in memory (``cache=False``: numba reads and writes no file). The locator then serves the
resolved folder that was checked.

Precedence: ``NUMBA_CACHE_DIR`` (numba's own override, for every function) wins: mmaemu's functions are cached
in the folder numba would use under it, after the same check (``NUMBA_CACHE_DIR`` is the private root); numba's
other functions are numba's business. ``NUMBA_CACHE_LOCATOR_CLASSES`` (the user's own locator classes, code the
user chose to run) is honoured unchecked. Then this locator.

[Note: numba's locator list] ``numba.core.caching.CacheImpl._locator_classes`` (``_CacheImpl`` before
numba 0.68) is the list numba consults, first match wins. Should a numba release move it, :func:`install`
does nothing and :func:`disk_cache` says False: the kernels compile in memory rather than in numba's
default places, which mmaemu cannot check (tested by ``tests/docs/test_numba_cache.py``).
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from .._host import user_cache_dir
from .._private import check_private_entries, private_dir
from ..errors import MmaemuWarning, UntrustedCacheError, UntrustedCacheWarning, warn_caller

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
        """numba's files for a function of mmaemu, in the folder :func:`trusted_folder` checked."""

        def __init__(self, py_func: Any, py_file: str, folder: Path) -> None:
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = str(folder)

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
            if not _in_package(py_file):
                return None
            folder = trusted_folder(py_file)
            if folder is None:
                raise RuntimeError(f"{py_func.__qualname__} in {py_file} asks numba to cache it on disk in a folder "
                                   "that failed its check: mmaemu's kernels decorate with cache=disk_cache(__file__)")
            return cls(py_func, py_file, folder)

    return MmaemuCacheLocator


#: The kernel modules already checked (and, without cached code, announced) in this process.
_checked: set[str] = set()
_checked_lock = threading.Lock()
#: Per folder numba would read: the resolved folder once it passed, or None (warned once); per kernel module:
#: what :func:`disk_cache` answered.
_folders: dict[str, Path | None] = {}
_on_disk: dict[str, bool] = {}
_folders_lock = threading.Lock()


def _subpath(py_file: str) -> str:
    """The folder, under numba's cache root, of the functions defined in ``py_file`` (numba's own name for it)."""
    from numba.core import caching

    return str(caching._CacheLocator.get_suitable_cache_subpath(py_file))


def _where(py_file: str) -> tuple[Path, Path, str]:
    """(the folder numba reads for the functions of ``py_file``, its private root, the variable that moves it)."""
    chosen = os.environ.get("NUMBA_CACHE_DIR", "").strip()
    if chosen:
        return Path(chosen) / _subpath(py_file), Path(chosen), "NUMBA_CACHE_DIR"
    return cache_dir() / _subpath(py_file), user_cache_dir(), "MMAEMU_CACHE_DIR"


def _checked_folder(folder: Path, root: Path, setting: str) -> Path | None:
    """``folder`` resolved once it, the folders on its way and its files passed, and it can be written; else
    None, after a warning saying what is at fault and how to fix it."""
    in_memory = "mmaemu compiles the cpu backend's kernels in memory, in every process (10 to 60 s each)"
    try:
        resolved = private_dir(folder, root=root, setting=setting, create=True)
        check_private_entries(resolved, setting)
        tempfile.TemporaryFile(dir=resolved).close()  # numba writes there: as numba's ensure_cache_path checks
    except UntrustedCacheError as exc:
        warn_caller(f"{in_memory}: numba's cache is not used, because {exc}", UntrustedCacheWarning)
        return None
    except OSError as exc:
        warn_caller(f"{in_memory}: numba's cache folder {folder} cannot be made or written ({exc}); set "
                    f"{setting} to a folder you can write", MmaemuWarning)
        return None
    return resolved


def trusted_folder(py_file: str) -> Path | None:
    """The folder where numba may keep the functions defined in ``py_file`` (resolved, checked once per process:
    [Note: a cache is code]); None where it failed (warned once)."""
    try:
        folder, root, setting = _where(py_file)
    except Exception as exc:  # noqa: BLE001 - no home directory, or numba reorganised: no folder
        with _folders_lock:
            if py_file not in _folders:
                _folders[py_file] = None
                warn_caller(f"mmaemu compiles the cpu backend's kernels in memory, in every process: numba's cache "
                            f"folder cannot be located ({type(exc).__name__}: {exc}); set MMAEMU_CACHE_DIR",
                            MmaemuWarning)
        return None
    with _folders_lock:
        if str(folder) not in _folders:
            _folders[str(folder)] = _checked_folder(folder, root, setting)
        return _folders[str(folder)]


def disk_cache(py_file: str) -> bool:
    """The ``cache=`` of the numba decorators in ``py_file``: whether numba may keep their machine code on disk.

    True under ``NUMBA_CACHE_LOCATOR_CLASSES`` (the user's own locators decide), else only once mmaemu's locator
    is installed and :func:`trusted_folder` passed; False compiles in memory.
    """
    if os.environ.get("NUMBA_CACHE_LOCATOR_CLASSES", "").strip():
        answer = True
    else:
        answer = install() and trusted_folder(py_file) is not None
    _on_disk[py_file] = answer
    return answer


def _compiled_dir(py_file: str) -> Path:
    """Where numba keeps (or will keep) the files of the functions defined in ``py_file``."""
    found = trusted_folder(py_file) if _on_disk.get(py_file) else None
    if found is not None:
        return found
    chosen = os.environ.get("NUMBA_CACHE_DIR", "").strip()
    root = Path(chosen) if chosen else cache_dir()
    try:
        return root / _subpath(py_file)
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
    if _on_disk.get(py_file) is False:
        print(f"mmaemu: compiling {what} with numba in memory, in every process (10 to 60 s): numba's cache "
              "is not used (the warning said why)", file=sys.stderr, flush=True)
        return
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
