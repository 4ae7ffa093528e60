"""The per-user cache folder is hostile ground when another local user can write to it: numba's machine code
(which numba unpickles).

Each test names what the code before the third hostile pass did. Tests that need a file owned by another user
make one with ``os.chown`` and run only as root; the mode-based ones run as any user.
"""

from __future__ import annotations

import inspect
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

numba = pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parents[2]
#: A uid that is not this process's (``nobody``), for files planted "by another user" (root only).
OTHER_UID = 65534

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _Plant:
    """A pickle that, when loaded, creates the marker file (what a planted cache index could do instead)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return exec, (f"open({self.marker!r}, 'w').close()",)


def _planted_index_names() -> tuple[str, list[str]]:
    """numba's cache folder name for the cpu backend's modules and the index file name of each of their
    numba functions (numba's format: ``module.qualname-firstline.pyXY[abiflags].nbi``)."""
    from numba.core import caching

    from mmaemu.backends import _cpu_fp8, _cpu_zoo, _cpu_zoo_vector, cpu

    names = []
    for module in (cpu, _cpu_zoo, _cpu_fp8, _cpu_zoo_vector):
        for value in vars(module).values():
            func = getattr(value, "py_func", None)
            if func is not None:
                stem = Path(inspect.getfile(func)).stem
                names.append(f"{stem}.{func.__qualname__}-{func.__code__.co_firstlineno}"
                             f".py{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}.nbi")
    return caching._CacheLocator.get_suitable_cache_subpath(cpu.__file__), names


_FIRST_CALL = """
import torch, mmaemu
a = torch.ones(16, 32).to(torch.float8_e4m3fn)
one = torch.tensor(1.0)
out = mmaemu.scaled_mm(a, a.t(), one, one, out_dtype=torch.float32, backend="cpu", splitk=1)
print("values", sorted(set(out.flatten().tolist())))
"""


def _plant(cache: Path, marker: Path, mode: int, uid: int | None) -> Path:
    """numba's folder under ``cache`` holding a planted index for every function of the cpu backend."""
    subpath, names = _planted_index_names()
    folder = cache / "numba" / subpath
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_bytes(pickle.dumps(_Plant(marker), protocol=2))
        os.chmod(folder / name, mode)
        if uid is not None:
            os.chown(folder / name, uid, -1)
    return folder


def _world_writable(tmp_path: Path, marker: Path) -> Path:
    cache = tmp_path / "shared"
    folder = _plant(cache, marker, 0o666, OTHER_UID if os.geteuid() == 0 else None)
    for path in (cache, cache / "numba", folder):
        os.chmod(path, 0o777)
        if os.geteuid() == 0:
            os.chown(path, OTHER_UID, -1)
    return cache


def _file_writable_by_others(tmp_path: Path, marker: Path) -> Path:
    cache = tmp_path / "mine"
    _plant(cache, marker, 0o666, None)
    return cache


def _file_of_another_user(tmp_path: Path, marker: Path) -> Path:
    cache = tmp_path / "mine"
    _plant(cache, marker, 0o644, OTHER_UID)
    return cache


_ATTACKS: dict[str, Callable[[Path, Path], Path]] = {
    "world-writable folder": _world_writable,
    "index writable by others": _file_writable_by_others,
    "index of another user": _file_of_another_user,
}


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="owners and modes are POSIX")
@pytest.mark.parametrize("attack", sorted(_ATTACKS))
def test_a_planted_numba_index_is_never_loaded(tmp_path: Path, attack: str) -> None:
    """Old code: numba unpickled the planted index on the first cpu-backend call (the marker file appeared).

    End to end: a fresh process makes one cpu-backend call with ``MMAEMU_CACHE_DIR`` at the planted folder.
    It must compile in memory, warn with the folder or file at fault, and return the right bits."""
    if attack == "index of another user" and os.geteuid() != 0:
        pytest.skip("making a file owned by another user needs root")
    os.chmod(tmp_path, 0o700)
    marker = tmp_path / "planted-code-ran"
    cache = _ATTACKS[attack](tmp_path, marker)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "PYTHON"))}
    env.update(MMAEMU_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert not marker.exists(), f"numba loaded a planted index ({attack})"
    assert proc.returncode == 0, proc.stderr
    assert "values [32.0]" in proc.stdout  # 32 products of 1 x 1, exact in fp32
    assert "UntrustedCacheWarning" in proc.stderr and "compiles the cpu backend's kernels in memory" in proc.stderr
    assert str(cache) in proc.stderr, proc.stderr
