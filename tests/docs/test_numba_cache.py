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
from pathlib import Path

import pytest

pytest.importorskip("numba")

from mmaemu.backends import cpu, _cpu_zoo, _numba_cache  # noqa: E402
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
    # numba's own override wins: mmaemu's functions go where numba would put them, after the same check
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba-cache"))
    found = locator.from_function(kernel.py_func, cpu.__file__)
    assert Path(found.get_cache_path()).parent == (tmp_path / "numba-cache").resolve()
    assert Path(found.get_cache_path()).name == caching._CacheLocator.get_suitable_cache_subpath(cpu.__file__)


def test_first_compile_is_announced_once_and_only_without_cached_code(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("MMAEMU_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_numba_cache, "_checked", set())
    monkeypatch.setitem(_numba_cache._on_disk, cpu.__file__, True)
    monkeypatch.setitem(_numba_cache._on_disk, _cpu_zoo.__file__, True)
    _numba_cache.announce_first_compile(cpu.__file__, "the kernels")
    _numba_cache.announce_first_compile(cpu.__file__, "the kernels")
    err = capsys.readouterr().err
    assert err.count("mmaemu: compiling the kernels with numba") == 1 and str(tmp_path) in err
    folder = _numba_cache._compiled_dir(cpu.__file__)
    assert folder.is_dir() and folder.is_relative_to(tmp_path)  # made (0700) when it was checked
    (folder / "cpu._kernel-1.py311.nbi").write_bytes(b"")
    monkeypatch.setattr(_numba_cache, "_checked", set())
    _numba_cache.announce_first_compile(cpu.__file__, "the kernels")
    assert capsys.readouterr().err == ""
    # the zoo kernels' module shares the folder: the FP8 kernels' index does not silence it, and an
    # earlier check of another module in the same process does not either
    _numba_cache.announce_first_compile(_cpu_zoo.__file__, "the zoo kernels")
    assert "mmaemu: compiling the zoo kernels with numba" in capsys.readouterr().err


def test_the_announcement_looks_at_the_module_whose_kernels_the_call_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from mmaemu.backends import _cpu_fp8, _cpu_zoo_vector
    from mmaemu.presets import HOPPER, zoo_presets

    ampere_fp16 = zoo_presets()[("ampere", "fp16")]
    monkeypatch.delenv("MMAEMU_CPU_PORTABLE", raising=False)
    fp8_module = _cpu_fp8.__file__ if _cpu_fp8.available() else cpu.__file__
    assert cpu.kernel_module(HOPPER, zoo=False) == fp8_module
    assert cpu.kernel_module(ampere_fp16, zoo=True) == _cpu_zoo_vector.__file__
    monkeypatch.setenv("MMAEMU_CPU_PORTABLE", "1")
    assert cpu.kernel_module(HOPPER, zoo=False) == cpu.__file__
    assert cpu.kernel_module(ampere_fp16, zoo=True) == _cpu_zoo.__file__


def _copy_clone(dest: Path) -> None:
    """The repository's files as a clone would have them (tracked and not ignored)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file() and not name.startswith(("evidence/", "docs/img/")):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def test_install_uninstall_reinstall_in_a_fresh_venv(tmp_path: Path) -> None:
    """The README's commands in order, twice, with an uninstall between: each import finds the package.

    The fresh venv sees this environment's torch, numpy and numba through a ``.pth`` path (nothing is
    downloaded) and installs mmaemu itself from a copy of the clone, not in editable mode.
    """
    if shutil.which("git") is None:
        pytest.skip("git is needed to list the clone's files")
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
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
           "--no-build-isolation", str(src)]
    if subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "--version"],
                      capture_output=True).returncode != 0:
        pytest.skip("this pip cannot install into another interpreter (pip >= 22.3 needed)")
    run = {"cwd": tmp_path, "env": env, "capture_output": True, "text": True}
    for attempt in ("first install", "reinstall"):
        subprocess.run(pip, check=True, **run)  # type: ignore[call-overload]
        demo = subprocess.run([str(python), "-m", "mmaemu", "demo"], **run)  # type: ignore[call-overload]
        assert demo.returncode == 0, (attempt, demo.stdout, demo.stderr)
        assert "bf16 outputs that differ between hopper and ada" in demo.stdout
        if attempt == "first install":
            assert "mmaemu: compiling the cpu backend's kernels" in demo.stderr
            again = subprocess.run([str(python), "-m", "mmaemu", "demo"], **run)  # type: ignore[call-overload]
            assert again.returncode == 0 and "compiling" not in again.stderr, again.stderr  # the cache serves it
        assert not list((site / "mmaemu").rglob("*.nb[ic]")), "numba wrote into the installed package"
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "uninstall", "-y", "-q", "mmaemu-bits"],
                       check=True, **run)  # type: ignore[call-overload]
        assert not (site / "mmaemu").exists(), "uninstall left files in site-packages/mmaemu"
        gone = subprocess.run([str(python), "-c", "import mmaemu"], **run)  # type: ignore[call-overload]
        assert "ModuleNotFoundError" in gone.stderr
    assert list((tmp_path / "cache" / "numba").rglob("*.nbi")), "the per-user cache holds the machine code"


# -- a cache is code: numba's folder is used only when no other user can have written it --------------------------


@pytest.fixture
def fresh_decisions(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Decisions forgotten (restored after the test), NUMBA_* unset; a private folder for MMAEMU_CACHE_DIR."""
    monkeypatch.setattr(_numba_cache, "_folders", {})
    monkeypatch.setattr(_numba_cache, "_on_disk", {})
    monkeypatch.setattr(_numba_cache, "_checked", set())
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
    assert folder is not None and folder.parent == (fresh_decisions / "numba").resolve()
    for path in (fresh_decisions, fresh_decisions / "numba", folder):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="owners and modes are POSIX")
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777])
def test_an_open_cache_folder_is_not_used_and_the_warning_says_how_to_fix_it(
    fresh_decisions: Path, capsys: pytest.CaptureFixture[str], mode: int
) -> None:
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
    _numba_cache.announce_first_compile(cpu.__file__, "the kernels")
    assert "compiling the kernels with numba in memory, in every process" in capsys.readouterr().err


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="owners and modes are POSIX")
@pytest.mark.parametrize("mode", [0o666, 0o646])
def test_a_cache_file_others_can_write_disables_the_cache(fresh_decisions: Path, mode: int) -> None:
    folder = fresh_decisions / "numba" / caching_subpath()
    folder.mkdir(parents=True, mode=0o700)
    planted = folder / "cpu._decode_rows-133.py311.nbi"
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
        if "cache=_DISK_CACHE" in text:
            assert "_DISK_CACHE = _numba_cache.disk_cache(__file__)" in text, path


def caching_subpath() -> str:
    from numba.core import caching

    return str(caching._CacheLocator.get_suitable_cache_subpath(cpu.__file__))


def test_no_home_directory_warns_and_compiles_in_memory(fresh_decisions: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(_numba_cache, "cache_dir", no_home)
    with pytest.warns(MmaemuWarning, match="cannot be located .*Could not determine home directory"):
        assert not _numba_cache.disk_cache(cpu.__file__)
