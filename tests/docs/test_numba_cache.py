"""numba's compiled code lives in the per-user cache, so uninstalling and reinstalling mmaemu always works.

The defect this guards against: numba's default cache writes into ``mmaemu/backends/__pycache__``;
``pip uninstall mmaemu`` leaves those files, the directory left behind imports as an empty namespace
package, and ``import mmaemu`` then finds no ``scaled_mm`` (a later install is shadowed too).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytest.importorskip("numba")

from mmaemu.backends import cpu, _cpu_zoo, _numba_cache  # noqa: E402

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


def test_the_locator_answers_for_mmaemu_only_and_yields_to_numba_cache_dir(monkeypatch: pytest.MonkeyPatch) -> None:
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
    monkeypatch.setenv("NUMBA_CACHE_DIR", "/nonexistent-numba-cache")
    assert locator.from_function(kernel.py_func, cpu.__file__) is None  # numba's own override wins


def test_first_compile_is_announced_once_and_only_without_cached_code(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("MMAEMU_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_numba_cache, "_checked", set())
    _numba_cache.announce_first_compile(cpu.__file__, "the kernels")
    _numba_cache.announce_first_compile(cpu.__file__, "the kernels")
    err = capsys.readouterr().err
    assert err.count("mmaemu: compiling the kernels with numba") == 1 and str(tmp_path) in err
    folder = _numba_cache._compiled_dir(cpu.__file__)
    folder.mkdir(parents=True)
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
