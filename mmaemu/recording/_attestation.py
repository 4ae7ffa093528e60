"""Replay reports that only this machine's replay can have written.

``replay.json`` lies inside the recording, and a recording comes from elsewhere: anyone can write a
report that says "passed" next to files that never replayed. A report therefore carries an
``attestation``, an HMAC-SHA256 of its content under a key that this user's mmaemu made once and keeps
outside every recording (``user_cache_dir() / "replay.key"``, mode 0600).
:func:`~mmaemu.recording.profile.profile_from_recording` validates a profile only on a report whose
attestation checks: one written by ``python -m mmaemu replay`` for this user, unedited. A report
copied from another machine, or edited, is reported as not attested (replay the recording here).
Deleting the key only costs a replay.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Mapping
from typing import Any

from .._host import user_cache_dir

__all__ = ["attest", "attested"]

_FIELD = "attestation"


def _key(create: bool) -> bytes | None:
    path = user_cache_dir() / "replay.key"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        if not create:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_bytes(32)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:  # another process made it first
            return _key(create=False)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key)
        return key
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        key = fh.read(64)
    return key if len(key) == 32 else None


def _mac(report: Mapping[str, Any], key: bytes) -> str:
    body = {k: v for k, v in report.items() if k != _FIELD}
    return hmac.new(key, json.dumps(body, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def attest(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with its attestation (the key is made on first use).

    Raises:
        OSError: the key cannot be made or read (the cache directory is not writable).
    """
    key = _key(create=True)
    if key is None:
        raise OSError(f"{user_cache_dir() / 'replay.key'} is not a 32-byte key file: remove it and replay again")
    return {**report, _FIELD: _mac(report, key)}


def attested(report: Mapping[str, Any]) -> bool:
    """Whether ``report`` was written by this user's replay and not edited since."""
    claimed = report.get(_FIELD)
    key = _key(create=False)
    return isinstance(claimed, str) and key is not None and hmac.compare_digest(claimed, _mac(report, key))
