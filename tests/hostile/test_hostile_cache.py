"""The per-user cache folder is hostile ground when another local user can write to it: numba's machine code
(which numba unpickles) and the replay key (whose secrecy attests a replay report).

Each test names what the code before the third hostile pass did. Tests that need a file owned by another user
make one with ``os.chown`` and run only as root; the mode-based ones run as any user.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import conftest
import pytest
from emulated_device import copy_recording

from mmaemu.presets import Maturity
from mmaemu.recording._profile import profile_from_recording

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


def _planted_index_names() -> tuple[Path, list[str]]:
    """The cache folder (under ``numba/``) of the cpu backend's modules and the index file name of each of their
    numba functions (numba's format: ``module.qualname-firstline.pyXY[abiflags].nbi``)."""
    from mmaemu.backends import _cpu_fp8, _cpu_zoo, _cpu_zoo_vector, _numba_cache, _cpu as cpu

    names = []
    for module in (cpu, _cpu_zoo, _cpu_fp8, _cpu_zoo_vector):
        for value in vars(module).values():
            func = getattr(value, "py_func", None)
            if func is not None:
                stem = Path(inspect.getfile(func)).stem
                names.append(f"{stem}.{func.__qualname__}-{func.__code__.co_firstlineno}"
                             f".py{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}.nbi")
    return _numba_cache._key(cpu.__file__), names


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
    for path in (cache, cache / "numba", folder.parent, folder):
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
    if not conftest.FULL and attack != "world-writable folder":
        # each case compiles the kernels in a fresh process (half a minute on an AVX2 CI runner); CI runs one,
        # the mode and owner rules of every case are unit tests of mmaemu._private (tests/unit/test_private.py)
        pytest.skip("one planted-index case in CI (the others with --full)")
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


# -- the replay key ---------------------------------------------------------------------------------------------------


def _forge(recording: Path, key: bytes) -> None:
    """Rewrite the recording's replay.json attested under ``key`` (HMAC-SHA256 of the sorted JSON without the
    attestation field, as docs/recording.md describes it)."""
    report = json.loads((recording / "replay.json").read_text())
    body = {k: v for k, v in report.items() if k != "attestation"}
    mac = hmac.new(key, json.dumps(body, sort_keys=True).encode(), hashlib.sha256).hexdigest()
    (recording / "replay.json").write_text(json.dumps({**body, "attestation": mac}))


KNOWN_KEY = bytes(range(32))


def _key_in_shared_folder(cache: Path) -> None:
    cache.mkdir(mode=0o777)
    os.chmod(cache, 0o777)
    (cache / "replay.key").write_bytes(KNOWN_KEY)
    os.chmod(cache / "replay.key", 0o600)


def _key_readable_by_others(cache: Path) -> None:
    cache.mkdir(mode=0o700)
    (cache / "replay.key").write_bytes(KNOWN_KEY)
    os.chmod(cache / "replay.key", 0o644)


def _key_of_another_user(cache: Path) -> None:
    cache.mkdir(mode=0o700)
    (cache / "replay.key").write_bytes(KNOWN_KEY)
    os.chmod(cache / "replay.key", 0o600)
    os.chown(cache / "replay.key", OTHER_UID, -1)


def _folder_of_another_user(cache: Path) -> None:
    cache.mkdir(mode=0o755)
    (cache / "replay.key").write_bytes(KNOWN_KEY)
    os.chmod(cache / "replay.key", 0o600)
    os.chown(cache, OTHER_UID, -1)


_KEY_ATTACKS: dict[str, Callable[[Path], None]] = {
    "key in a world-writable folder": _key_in_shared_folder,
    "key readable by others": _key_readable_by_others,
    "key of another user": _key_of_another_user,
    "folder of another user": _folder_of_another_user,
}


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="owners and modes are POSIX")
@pytest.mark.parametrize("attack", sorted(_KEY_ATTACKS))
def test_a_report_forged_with_a_key_others_know_does_not_validate(emulated_recording: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch, attack: str) -> None:
    """Old code: the key was used whoever owned it and whoever could read it, so a report attested with a key
    another user planted (or read) validated the profile."""
    if attack in ("key of another user", "folder of another user") and os.geteuid() != 0:
        pytest.skip("making a file owned by another user needs root")
    os.chmod(tmp_path, 0o700)
    recording = copy_recording(emulated_recording, tmp_path, keep_report=True)
    cache = tmp_path / "cache"
    _KEY_ATTACKS[attack](cache)
    _forge(recording, KNOWN_KEY)
    monkeypatch.setenv("MMAEMU_CACHE_DIR", str(cache))
    profile = profile_from_recording(recording)
    assert profile.maturity is Maturity.EXPERIMENTAL and profile.evidence is not None
    assert profile.evidence["replay"].startswith("not attested"), profile.evidence["replay"]
    assert "replay.key" in profile.evidence["replay"] or str(cache) in profile.evidence["replay"]


def test_the_same_forgery_under_a_private_key_validates(emulated_recording: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The control of the test above: a key file only its owner can read, in a private folder, is used."""
    recording = copy_recording(emulated_recording, tmp_path, keep_report=True)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (cache / "replay.key").write_bytes(KNOWN_KEY)
    os.chmod(cache / "replay.key", 0o600)
    _forge(recording, KNOWN_KEY)
    monkeypatch.setenv("MMAEMU_CACHE_DIR", str(cache))
    assert profile_from_recording(recording).maturity is Maturity.VALIDATED


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_named_pipe_as_the_key_is_refused_without_blocking(tmp_path: Path) -> None:
    """Old code: opening a FIFO planted as replay.key for reading blocked until a writer came (forever)."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    os.mkfifo(cache / "replay.key", 0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(MMAEMU_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    probe = "from mmaemu.recording._attestation import attestation_problem; print(attestation_problem({'attestation': 'x'}))"
    try:
        proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("reading the key blocked on a named pipe")
    assert proc.returncode == 0, proc.stderr
    assert "not a regular file" in proc.stdout, proc.stdout


def test_a_linked_key_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A symbolic link, or a second hard link (a name elsewhere that writes the same file), is not the key."""
    from mmaemu.recording._attestation import attestation_problem

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere.key"
    elsewhere.write_bytes(KNOWN_KEY)
    os.chmod(elsewhere, 0o600)
    monkeypatch.setenv("MMAEMU_CACHE_DIR", str(cache))
    (cache / "replay.key").symlink_to(elsewhere)
    assert "symbolic link" in (attestation_problem({"attestation": "x"}) or "")
    (cache / "replay.key").unlink()
    os.link(elsewhere, cache / "replay.key")
    assert "2 names" in (attestation_problem({"attestation": "x"}) or "")
    shutil.rmtree(cache)


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="owners and modes are POSIX")
def test_replay_refuses_to_attest_with_a_key_others_can_replace(emulated_recording: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Old code: the replay signed its report with whatever replay.key the world-writable folder held."""
    from mmaemu.recording._replay import main_replay

    os.chmod(tmp_path, 0o700)
    recording = copy_recording(emulated_recording, tmp_path, keep_report=True)
    before = (recording / "replay.json").read_bytes()
    cache = tmp_path / "cache"
    _key_in_shared_folder(cache)
    monkeypatch.setenv("MMAEMU_CACHE_DIR", str(cache))
    assert main_replay(str(recording), "auto", None, None, stream=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert f"mmaemu replay: {cache} is writable by others" in err and "MMAEMU_CACHE_DIR" in err, err
    assert (recording / "replay.json").read_bytes() == before
