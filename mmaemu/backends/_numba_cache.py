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

[Note: one key for one source] numba names a function's files by its module, qualified name and first line
(``numba/core/caching.py`` in numba 0.68: ``CacheImpl.get_filename_base``, lines 464-470) and keeps them in the
folder its locator names; its own locators name it after a hash of the source folder's full path
(``_CacheLocator.get_suitable_cache_subpath``, lines 143-158) and stamp the index with the source file alone
(``_SourceFileBackedLocatorMixin.get_source_stamp``, lines 185-191). Under that key a checkout and an installed
copy of the same source compile twice, and a stamp of file times recompiles after every reinstall. mmaemu's key
is the kernels' source alone: the folder is ``<mmaemu version>/<digest>``, the digest the sha256 of every module
of the kernels' folder (names and contents; [Note: inlined helpers]), and the index is stamped with the whole
digest (``IndexDataCacheFile._load_index``, lines 611-634, discards an index of another stamp or numba version).
The same source therefore loads the same machine code from any path and after any reinstall; an edit of any
kernel module, or of a module whose helpers a kernel inlines, is another key (the mutation tier's mutants compile
from their own source). numba adds the rest of the key: its version (in the index), Python's (in the file
names), the CPU (``codegen.magic_tuple()`` in ``Cache._index_key``, lines 794-812) and the signature. Every global
a cached kernel reads is defined in that folder (tested), so nothing outside the digest is compiled into the
machine code. The digest is read once per process, when the first kernel module is imported: a module edited
while a process runs counts from the next process on.

[Note: the compile notice] numba says when it compiles: ``Dispatcher.compile`` fires the ``numba:compile``
event after its cache missed (``numba/core/dispatcher.py`` in numba 0.68, lines 899-917; a load returns before
it). A listener prints mmaemu's notice
on stderr then, once per process and kernel module, only for compiles numba starts outside another of
mmaemu's (a kernel compiling its helpers is one compile), naming where the machine code is cached.

Precedence: ``NUMBA_CACHE_DIR`` (numba's own override, for every function) wins: mmaemu's functions are cached
in ``mmaemu/<version>/<digest>`` under it, after the same check (``NUMBA_CACHE_DIR`` is the private root); numba's
other functions are numba's business. ``NUMBA_CACHE_LOCATOR_CLASSES`` (the user's own locator classes, code the
user chose to run) is honoured unchecked. Then this locator.

[Note: numba's locator list] ``numba.core.caching.CacheImpl._locator_classes`` (``_CacheImpl`` before
numba 0.68) is the list numba consults, first match wins. Should a numba release move it, :func:`install`
does nothing and :func:`disk_cache` says False: the kernels compile in memory rather than in numba's
default places, which mmaemu cannot check (tested by ``tests/docs/test_numba_cache.py``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from .._host import user_cache_dir
from .._private import check_private_entries, private_dir
from ..errors import MmaemuWarning, UntrustedCacheError, UntrustedCacheWarning, warn_caller
from .._version import __version__

__all__: list[str] = []

#: The directory of the installed package: functions defined under it use the per-user cache.
_PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: Hex digits of the source digest in the folder's name (the index is stamped with all of it).
_NAME_DIGITS = 16


def cache_dir() -> Path:
    """The directory numba's files for mmaemu go to (``user_cache_dir() / "numba"``)."""
    return user_cache_dir() / "numba"


def _in_package(py_file: str) -> bool:
    try:
        return Path(py_file).resolve().is_relative_to(_PACKAGE_DIR)
    except (OSError, ValueError):
        return False


@functools.lru_cache(maxsize=None)
def source_digest(folder: str) -> str:
    """sha256 (hex) of every module of ``folder``: each ``.py`` file's name, size and bytes, in name order.

    The key of the machine code of the kernels defined there ([Note: one key for one source]); read once per
    process (0.3 ms for the 160 kB of ``mmaemu/backends``).

    Raises:
        OSError: a module cannot be read.
    """
    digest = hashlib.sha256()
    for path in sorted(Path(folder).glob("*.py")):
        data = path.read_bytes()
        digest.update(f"{path.name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _key(py_file: str) -> Path:
    """The folder, under the cache root, of the machine code of the kernels defined in ``py_file``."""
    return Path(__version__) / source_digest(os.path.dirname(os.path.abspath(py_file)))[:_NAME_DIGITS]


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
            """The digest of every module in the function's folder, not of its file alone.

            [Note: inlined helpers] numba stamps cached code with the defining file only, but the
            kernels inline numba functions from sibling modules (``_cpu_steps``, ``_cpu_fp8``): an
            edit of one of those would otherwise load stale machine code (the mutation tier edits
            ``_cpu_steps`` and must see its edit run). Contents, not file times: the
            same source is the same code wherever and whenever it was installed.
            """
            return source_digest(os.path.dirname(os.path.abspath(self._py_file)))

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


#: Per folder numba would read: the resolved folder once it passed, or None (warned once); per kernel module:
#: what :func:`disk_cache` answered.
_folders: dict[str, Path | None] = {}
_on_disk: dict[str, bool] = {}
_folders_lock = threading.Lock()


def _where(py_file: str) -> tuple[Path, Path, str]:
    """(the folder numba reads for the functions of ``py_file``, its private root, the variable that moves it)."""
    chosen = os.environ.get("NUMBA_CACHE_DIR", "").strip()
    if chosen:
        return Path(chosen) / "mmaemu" / _key(py_file), Path(chosen), "NUMBA_CACHE_DIR"
    return cache_dir() / _key(py_file), user_cache_dir(), "MMAEMU_CACHE_DIR"


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
    _listen()
    return answer


def kernel_cache(py_file: str) -> tuple[bool, bool]:
    """(whether numba imports, :func:`disk_cache`) for the kernel module ``py_file``; (False, False) where numba
    does not import or its cache cannot be set up: the module then defines no kernel."""
    try:  # pragma: no cover - exercised where numba is installed (a dependency)
        import numba  # noqa: F401

        return True, disk_cache(py_file)
    except Exception:  # noqa: BLE001
        return False, False


#: The kernel modules whose compile this process announced; the listener registered with numba (at most one).
_announced: set[str] = set()
_listening: list[Any] = []
_notice_lock = threading.Lock()
#: Per thread: how many numba compiles are under way (a kernel compiling its helpers is one compile).
_compiling = threading.local()


def compile_notice(dispatcher: Any) -> str | None:
    """The line to print when numba starts compiling ``dispatcher``'s function after its cache missed
    ([Note: the compile notice]); None for a function outside mmaemu or a module announced before."""
    py_func = getattr(dispatcher, "py_func", None)
    py_file = getattr(getattr(py_func, "__code__", None), "co_filename", "")
    if not py_file or not _in_package(py_file):
        return None
    with _notice_lock:
        if py_file in _announced:
            return None
        _announced.add(py_file)
    what = f"the cpu backend's kernels of {getattr(py_func, '__module__', py_file)}"
    cache_path = getattr(getattr(dispatcher, "_cache", None), "cache_path", None)
    if isinstance(cache_path, str):
        return f"mmaemu: compiling {what} with numba (10 to 60 s); the machine code is then cached in {cache_path}"
    why = "a warning said why" if install() else "this numba's cache locators cannot be extended"
    return f"mmaemu: compiling {what} with numba in memory, in every process (10 to 60 s): no disk cache ({why})"


def _listen() -> None:
    """Print :func:`compile_notice` on stderr at each compile numba starts outside another (registered once; nothing
    where numba has no ``numba:compile`` event)."""
    with _notice_lock:
        if _listening:
            return
        try:
            from numba.core import event
        except Exception:  # noqa: BLE001 - numba absent or reorganised: no notice
            return

        class CompileNotice(event.Listener):
            def on_start(self, ev: Any) -> None:
                depth = getattr(_compiling, "depth", 0)
                _compiling.depth = depth + 1
                if depth:
                    return
                try:
                    line = compile_notice((getattr(ev, "data", None) or {}).get("dispatcher"))
                    if line is not None:
                        print(line, file=sys.stderr, flush=True)
                except Exception:  # noqa: BLE001 - a notice never stops a compile (stderr closed, say)
                    pass

            def on_end(self, ev: Any) -> None:
                _compiling.depth = max(0, getattr(_compiling, "depth", 1) - 1)

        listener = CompileNotice()
        try:
            event.register("numba:compile", listener)
        except Exception:  # noqa: BLE001 - an event kind this numba does not know: no notice
            return
        _listening.append(listener)


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
