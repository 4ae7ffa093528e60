"""numba's compiled code lives in the per-user cache, so uninstalling and reinstalling mmaemu always works, and
only in a cache folder that no other user can have written (numba runs what its cache files say).

The defect this guards against: numba's default cache writes into ``mmaemu/backends/__pycache__``;
``pip uninstall mmaemu`` leaves those files, the directory left behind imports as an empty namespace
package, and ``import mmaemu`` then finds no ``scaled_mm`` (a later install is shadowed too).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import types
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("numba")

import numpy as np  # noqa: E402

import mmaemu  # noqa: E402
from mmaemu.backends import _cpu as cpu, _cpu_zoo, _numba_cache  # noqa: E402
from mmaemu.errors import MmaemuWarning, UntrustedCacheWarning  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mmaemu"


def _dispatchers() -> list[object]:
    """The numba dispatchers of the cpu backend that cache to disk (``cache=True``)."""
    return [v for module in (cpu, _cpu_zoo) for v in vars(module).values()
            if hasattr(v, "py_func") and hasattr(getattr(v, "_cache", None), "_cache_path")]


def test_every_cached_kernel_of_the_cpu_backend_is_cached_outside_the_package() -> None:
    kernels = _dispatchers()
    assert len(kernels) >= 4
    for kernel in kernels:
        path = Path(kernel._cache._cache_path)  # type: ignore[attr-defined]
        if os.environ.get("NUMBA_CACHE_DIR"):
            assert path.is_relative_to(Path(os.environ["NUMBA_CACHE_DIR"]))
        else:
            assert path.is_relative_to(_numba_cache.cache_dir()), path
        assert not path.resolve().is_relative_to(PACKAGE.resolve()), path


def test_the_locator_answers_for_mmaemu_only_and_follows_numba_cache_dir(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    assert _numba_cache.install()  # idempotent: already installed by the cpu backend
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # type: ignore[attr-defined]
    locator = impl._locator_classes[0]
    assert locator.__name__ == "MmaemuCacheLocator"
    assert sum(c.__name__ == "MmaemuCacheLocator" for c in impl._locator_classes) == 1
    kernel = _dispatchers()[0]
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    assert locator.from_function(kernel.py_func, __file__) is None  # not a file of the package
    assert locator.from_function(kernel.py_func, cpu.__file__) is not None
    # numba's own override wins: mmaemu's functions go under it (in mmaemu/<version>/<digest>), after the same check
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba-cache"))
    found = locator.from_function(kernel.py_func, cpu.__file__)
    key = _numba_cache._key(cpu.__file__)
    assert Path(found.get_cache_path()) == (tmp_path / "numba-cache").resolve() / "mmaemu" / key
    # the index is stamped with the whole digest of the kernels' folder (the folder's name holds a prefix)
    stamp = found.get_source_stamp()
    assert stamp == _numba_cache.source_digest(str(PACKAGE / "backends")) and len(stamp) == 64
    assert stamp.startswith(key.name)


def _fresh_transpose(cache: bool) -> Any:
    """A new numba dispatcher of one of the cpu backend's functions (no compiled code of its own yet)."""
    import numba

    return numba.njit(cache=cache)(cpu._transpose_codes.py_func)


def test_a_compile_is_announced_once_and_a_load_is_not(fresh_decisions: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The notice comes from numba's ``numba:compile`` event, which fires only when numba compiles (its cache
    missed): an empty cache announces, a second compile of the module in the process does not, a load does not."""
    src, dst = np.arange(6, dtype=np.uint8).reshape(2, 3), np.zeros((3, 2), dtype=np.uint8)
    _fresh_transpose(True)(src, dst)
    err = capsys.readouterr().err
    folder = _numba_cache.trusted_folder(cpu.__file__)
    assert folder is not None and folder.is_relative_to(fresh_decisions.resolve())
    assert err.count("mmaemu: compiling the cpu backend's kernels of mmaemu.backends._cpu with numba") == 1, err
    assert f"cached in {folder}\n" in err
    assert dst.tolist() == [[0, 3], [1, 4], [2, 5]]
    compiled = sorted(p.name for p in folder.iterdir())
    assert any(name.endswith(".nbc") for name in compiled)
    _fresh_transpose(False)(src, dst)  # numba compiles again (no cache): this process announced the module already
    assert capsys.readouterr().err == ""
    _numba_cache._announced.clear()
    _fresh_transpose(True)(src, dst)  # loads what the first one saved: no notice, no file written
    assert capsys.readouterr().err == "" and sorted(p.name for p in folder.iterdir()) == compiled
    _fresh_transpose(False)(src, dst)  # compiled in memory: announced as such
    assert "kernels of mmaemu.backends._cpu with numba in memory, in every process" in capsys.readouterr().err


def test_an_index_of_another_source_compiles_and_says_so(fresh_decisions: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """An index is there but stamped with another digest (a source whose digest shares the folder's prefix): numba
    discards it and compiles, and the notice says so (the old notice only looked for an index file)."""
    import pickle

    src, dst = np.arange(6, dtype=np.uint8).reshape(2, 3), np.zeros((3, 2), dtype=np.uint8)
    _fresh_transpose(True)(src, dst)
    folder = _numba_cache.trusted_folder(cpu.__file__)
    assert folder is not None
    (index,) = folder.glob("_cpu._transpose_codes-*.nbi")
    with open(index, "rb") as f:
        version = pickle.load(f)
        stamp, overloads = pickle.loads(f.read())
    with open(index, "wb") as f:
        pickle.dump(version, f)
        f.write(pickle.dumps((stamp[:_numba_cache._NAME_DIGITS] + "0" * 48, overloads)))
    capsys.readouterr()
    _numba_cache._announced.clear()
    again = _fresh_transpose(True)
    again(src, dst)
    assert sum(again.stats.cache_misses.values()) == 1 and not again.stats.cache_hits
    assert "mmaemu: compiling the cpu backend's kernels of mmaemu.backends._cpu" in capsys.readouterr().err


def test_only_mmaemu_compiles_are_announced(capsys: pytest.CaptureFixture[str]) -> None:
    import numba

    @numba.njit
    def not_mmaemu(x: int) -> int:
        return x + 1

    assert not_mmaemu(1) == 2
    assert _numba_cache.compile_notice(not_mmaemu) is None and capsys.readouterr().err == ""


def test_the_key_is_the_source_not_its_path_or_file_times(tmp_path: Path) -> None:
    """[Note: one key for one source]: two copies of the kernels' folder, at two paths with other file times, have
    one key (folder and source stamp); a one-byte edit of a helper module is another key."""
    copies = [tmp_path / "one" / "backends", tmp_path / "two" / "site-packages" / "mmaemu" / "backends"]
    for i, copy in enumerate(copies):
        copy.mkdir(parents=True)
        for module in (PACKAGE / "backends").glob("*.py"):
            shutil.copyfile(module, copy / module.name)
            os.utime(copy / module.name, (1_000_000 * (i + 1), 1_000_000 * (i + 1)))
    keys = {_numba_cache._key(str(copy / "_cpu.py")) for copy in copies}
    assert keys == {_numba_cache._key(cpu.__file__)}
    digests = {_numba_cache.source_digest(str(copy)) for copy in copies}  # the source stamp
    assert digests == {_numba_cache.source_digest(str(PACKAGE / "backends"))}
    (key,) = keys
    assert key.parts[0] == mmaemu.__version__
    edited = tmp_path / "edited" / "backends"
    shutil.copytree(copies[0], edited)
    steps = edited / "_cpu_steps.py"
    steps.write_bytes(steps.read_bytes().replace(b"def block_max", b"def block_max ", 1))
    assert _numba_cache._key(str(edited / "_cpu.py")) != key
    assert _numba_cache.source_digest(str(edited)) != _numba_cache.source_digest(str(copies[0]))


def test_every_global_a_cached_kernel_reads_is_defined_in_the_digested_folder() -> None:
    """numba compiles a kernel's globals into its machine code as constants: a value defined outside
    ``mmaemu/backends`` would be stale after an edit of its module, which the key does not cover."""
    from mmaemu.backends import _cpu_fp8, _cpu_scratch, _cpu_simd, _cpu_steps, _cpu_zoo_vector

    modules = (cpu, _cpu_fp8, _cpu_zoo, _cpu_zoo_vector, _cpu_steps, _cpu_simd, _cpu_scratch)
    numba_functions = [v for m in modules for v in vars(m).values() if hasattr(v, "py_func")]
    assert len(numba_functions) >= 20
    outside = []
    for function in numba_functions:
        codes = [function.py_func.__code__]
        while codes:
            code = codes.pop()
            codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
            for name in code.co_names:
                if name in function.py_func.__globals__ and _outside_backends(name, function.py_func.__globals__[name]):
                    outside.append((function.py_func.__qualname__, name))
    assert not outside, outside


def _outside_backends(name: str, value: object) -> bool:
    """Whether the global ``name`` (``value``) comes from a module of mmaemu outside ``mmaemu/backends``."""
    if isinstance(value, types.ModuleType):
        module = value.__name__
    elif callable(value):
        module = getattr(value, "__module__", None) or ""
    else:  # a value: where its name is assigned
        return not _assigned_in_backends(name)
    return module.split(".")[0] == "mmaemu" and not module.startswith("mmaemu.backends")


def _assigned_in_backends(name: str) -> bool:
    """Whether a module of ``mmaemu/backends`` assigns ``name`` at its top level (not merely imports it)."""
    import ast

    for path in (PACKAGE / "backends").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            for target in targets:
                names = target.elts if isinstance(target, ast.Tuple) else [target]
                if any(isinstance(t, ast.Name) and t.id == name for t in names):
                    return True
    return False


def _copy_clone(dest: Path) -> None:
    """The repository's files as a clone would have them (tracked and not ignored)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file() and not name.startswith(("evidence/", "docs/img/")):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


#: The first line of the notice mmaemu prints when numba compiles its kernels.
NOTICE = "mmaemu: compiling"


def _numba_files(cache: Path) -> dict[str, tuple[int, int]]:
    """numba's index and machine-code files under ``cache``: name -> (mtime in ns, size). numba writes a
    compiled function's ``.nbc`` and rewrites its ``.nbi`` (a new file, replaced into place) only when it compiles."""
    return {str(p.relative_to(cache)): (p.stat().st_mtime_ns, p.stat().st_size) for p in cache.rglob("*.nb[ic]")}


def _quickstart() -> str:
    """The README's quickstart (its first Python block), as a script that first says which mmaemu it imports."""
    text = (ROOT / "README.md").read_text()
    block = text[text.index("## Quickstart"):].split("```python\n", 1)[1].split("```", 1)[0]
    return "import sys, mmaemu; print('mmaemu from', mmaemu.__file__, file=sys.stderr)\n" + block


#: ``python -m mmaemu demo``, first saying which mmaemu it imports.
DEMO = ("import runpy, sys, mmaemu; print('mmaemu from', mmaemu.__file__, file=sys.stderr); "
        "sys.argv = ['mmaemu', 'demo']; runpy.run_module('mmaemu', run_name='__main__')")


def test_install_uninstall_reinstall_in_a_fresh_venv(tmp_path: Path) -> None:
    """The README's commands, an uninstall and a reinstall: each import finds the package, and numba compiles
    the kernels once for all of it.

    The demo runs from the clone (``PYTHONPATH``), the README's quickstart from the installed copy, the demo
    again after ``pip uninstall`` and a reinstall of the same wheel: only the first run compiles (the notice,
    and numba's files: no ``.nbc`` or ``.nbi`` written after it). The fresh venv sees this environment's torch,
    numpy and numba through a ``.pth`` path (nothing is downloaded); mmaemu is built into a wheel once.
    """
    if shutil.which("git") is None:
        pytest.skip("git is needed to list the clone's files")
    if subprocess.run([sys.executable, "-m", "pip", "--python", sys.executable, "--version"],
                      capture_output=True).returncode != 0:
        pytest.skip("this pip cannot install into another interpreter (pip >= 22.3 needed)")
    src = tmp_path / "clone"
    _copy_clone(src)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "PYTHON"))}
    env["MMAEMU_CACHE_DIR"] = str(tmp_path / "cache")
    cache = tmp_path / "cache" / "numba"
    run = {"cwd": tmp_path, "env": env, "capture_output": True, "text": True}
    pip = [sys.executable, "-m", "pip", "-q", "--python", str(python)]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, **run)  # type: ignore[call-overload]
    wheel = str(next((tmp_path / "dist").glob("mmaemu_bits-*.whl")))

    def python_run(script: str, *, checkout: bool) -> subprocess.CompletedProcess[str]:
        where = {**run, "env": {**env, "PYTHONPATH": str(src)}, "cwd": src} if checkout else run
        done = subprocess.run([str(python), "-c", script], **where)  # type: ignore[call-overload]
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert f"mmaemu from {src if checkout else site}" in done.stderr, done.stderr
        return done

    subprocess.run([*pip, "install", "--no-deps", wheel], check=True, **run)  # type: ignore[call-overload]
    demo = python_run(DEMO, checkout=True)
    assert "bf16 outputs that differ between hopper and ada" in demo.stdout
    assert NOTICE in demo.stderr  # an empty cache: numba compiles, and says so
    compiled = _numba_files(cache)
    assert any(name.endswith(".nbc") for name in compiled)
    quickstart = python_run(_quickstart(), checkout=False)  # another path to the same source: loads
    assert NOTICE not in quickstart.stderr and _numba_files(cache) == compiled, quickstart.stderr
    uninstall(site, python, pip, run)
    subprocess.run([*pip, "install", "--no-deps", wheel], check=True, **run)  # type: ignore[call-overload]
    again = python_run(DEMO, checkout=False)  # the same version reinstalled (new files, new times): loads
    assert "bf16 outputs that differ between hopper and ada" in again.stdout
    assert NOTICE not in again.stderr and _numba_files(cache) == compiled, again.stderr
    uninstall(site, python, pip, run)


def uninstall(site: Path, python: Path, pip: list[str], run: dict[str, Any]) -> None:
    """``pip uninstall mmaemu-bits`` removes the package completely: numba wrote nothing into it."""
    assert not list((site / "mmaemu").rglob("*.nb[ic]")), "numba wrote into the installed package"
    subprocess.run([*pip, "uninstall", "-y", "mmaemu-bits"], check=True, **run)
    assert not (site / "mmaemu").exists(), "uninstall left files in site-packages/mmaemu"
    gone = subprocess.run([str(python), "-c", "import mmaemu"], **run)
    assert "ModuleNotFoundError" in gone.stderr


# -- a cache is code: numba's folder is used only when no other user can have written it --------------------------


@pytest.fixture
def fresh_decisions(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Decisions forgotten (restored after the test), NUMBA_* unset; a private folder for MMAEMU_CACHE_DIR."""
    monkeypatch.setattr(_numba_cache, "_folders", {})
    monkeypatch.setattr(_numba_cache, "_on_disk", {})
    monkeypatch.setattr(_numba_cache, "_announced", set())
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.delenv("NUMBA_CACHE_LOCATOR_CLASSES", raising=False)
    os.chmod(tmp_path, 0o700)
    monkeypatch.setenv("MMAEMU_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_private_folder_is_made_0700_and_used(fresh_decisions: Path) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _numba_cache.disk_cache(cpu.__file__)
    folder = _numba_cache.trusted_folder(cpu.__file__)
    assert folder is not None and folder == (fresh_decisions / "numba").resolve() / _numba_cache._key(cpu.__file__)
    for path in (fresh_decisions, fresh_decisions / "numba", folder.parent, folder):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="owners and modes are POSIX")
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777])
def test_an_open_cache_folder_is_not_used_and_the_warning_says_how_to_fix_it(fresh_decisions: Path, mode: int,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from mmaemu import _private

    # the folder's group is not this user's private group ([Note: user private groups]; as root, group root is)
    monkeypatch.setattr(_private, "_private_group", lambda gid: False)
    fresh_decisions.mkdir()
    os.chmod(fresh_decisions, mode)
    with pytest.warns(UntrustedCacheWarning, match=rf"in memory.*{fresh_decisions} is writable by .*mode {mode:04o}.*"
                                                   rf"chmod go-w '{fresh_decisions}'.*MMAEMU_CACHE_DIR"):
        assert not _numba_cache.disk_cache(cpu.__file__)
    assert not (fresh_decisions / "numba").exists()  # nothing made inside it
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per folder
        assert not _numba_cache.disk_cache(_cpu_zoo.__file__)
    notice = _numba_cache.compile_notice(_fresh_transpose(False))
    assert notice is not None and "with numba in memory, in every process" in notice and "a warning said why" in notice


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="owners and modes are POSIX")
@pytest.mark.parametrize("mode", [0o666, 0o646])
def test_a_cache_file_others_can_write_disables_the_cache(fresh_decisions: Path, mode: int) -> None:
    folder = fresh_decisions / "numba" / caching_subpath()
    folder.mkdir(parents=True, mode=0o700)
    planted = folder / "_cpu._decode_rows-133.py311.nbi"
    planted.write_bytes(b"")
    os.chmod(planted, mode)
    with pytest.warns(UntrustedCacheWarning, match=rf"{planted} is writable by others"):
        assert not _numba_cache.disk_cache(cpu.__file__)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another user needs root")
def test_a_cache_folder_of_another_user_disables_the_cache(fresh_decisions: Path) -> None:
    folder = fresh_decisions / "numba" / caching_subpath()
    folder.mkdir(parents=True, mode=0o700)
    os.chown(folder, 65534, -1)
    with pytest.warns(UntrustedCacheWarning, match=rf"{folder} belongs to another user"):
        assert not _numba_cache.disk_cache(cpu.__file__)


def test_numba_cache_dir_is_checked_the_same_way(fresh_decisions: Path, monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    shared = tmp_path / "numba-shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(shared))
    with pytest.warns(UntrustedCacheWarning, match=r"is writable by others.*set NUMBA_CACHE_DIR to a folder"):
        assert not _numba_cache.disk_cache(cpu.__file__)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba-mine"))
    assert _numba_cache.disk_cache(cpu.__file__)


def test_without_the_locator_or_with_the_users_locators(fresh_decisions: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """numba reorganised (the locator cannot be installed): in memory, never numba's unchecked default places.
    NUMBA_CACHE_LOCATOR_CLASSES (code the user chose to run) decides where numba caches, unchecked."""
    monkeypatch.setattr(_numba_cache, "install", lambda: False)
    assert not _numba_cache.disk_cache(cpu.__file__)
    monkeypatch.setenv("NUMBA_CACHE_LOCATOR_CLASSES", "UserWideCacheLocator")
    assert _numba_cache.disk_cache(cpu.__file__)


def test_every_kernel_decorator_asks_disk_cache() -> None:
    """A literal cache=True would let numba read a folder nobody checked."""
    for path in (PACKAGE / "backends").glob("*.py"):
        text = path.read_text()
        assert "cache=True)" not in text, path
        if "cache=_DISK_CACHE" in text:  # disk_cache, directly or through kernel_cache (which returns its answer)
            assert ("_DISK_CACHE = _numba_cache.disk_cache(__file__)" in text
                    or "_DISK_CACHE = _numba_cache.kernel_cache(__file__)" in text), path


def caching_subpath() -> Path:
    return _numba_cache._key(cpu.__file__)


def test_no_home_directory_warns_and_compiles_in_memory(fresh_decisions: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(_numba_cache, "cache_dir", no_home)
    with pytest.warns(MmaemuWarning, match="cannot be located .*Could not determine home directory"):
        assert not _numba_cache.disk_cache(cpu.__file__)
