"""Replay reports that only this machine's replay can have written.

``replay.json`` lies inside the recording, and a recording comes from elsewhere: anyone can write a
report that says "passed" next to files that never replayed. A report therefore carries an
``attestation``, an HMAC-SHA256 of its content under a key that this user's mmaemu made once and keeps
outside every recording (``user_cache_dir() / "replay.key"``, mode 0600).
:func:`~mmaemu.recording.profile_from_recording` validates a profile only on a report whose
attestation checks: one written by ``python -m mmaemu replay`` for this user, unedited. A report
copied from another machine, or edited, is reported as not attested (replay the recording here).
Deleting the key only costs a replay.

The key attests only while no one else knows it: it is used only when it and the folders that lead to it pass
:mod:`mmaemu._private` (this user's, a regular file with one name, not readable or writable by group or others;
the folders this user's or root's, not writable by others). Otherwise every report is "not attested" with the
reason, and a replay refuses to write a report (:class:`~mmaemu.errors.UntrustedCacheError`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._host import user_cache_dir
from .._private import create_private_file, private_dir, read_private_file
from ..errors import UntrustedCacheError

__all__ = ["attest", "attestation_problem"]

_FIELD = "attestation"


def _key_path(create: bool) -> Path:
    """``replay.key`` in the per-user folder, resolved once that folder is private (made where missing)."""
    folder = private_dir(user_cache_dir(), root=user_cache_dir(), setting="MMAEMU_CACHE_DIR", create=create)
    return folder / "replay.key"


def _key(create: bool) -> bytes | None:
    """The key; None where there is none (or, with ``create``, where it was made meanwhile and is not whole yet).

    Raises:
        UntrustedCacheError: the key or its folder could have been written or read by another user.
        OSError: the folder or the key cannot be made or read.
    """
    try:
        path = _key_path(create)
    except FileNotFoundError:
        return None
    key = read_private_file(path, 64)
    if key is None and create:
        key = secrets.token_bytes(32)
        try:
            create_private_file(path, key)
        except FileExistsError:  # another process made it first
            return _key(create=False)
    return key if key is not None and len(key) == 32 else None


def _mac(report: Mapping[str, Any], key: bytes) -> str:
    body = {k: v for k, v in report.items() if k != _FIELD}
    return hmac.new(key, json.dumps(body, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def attest(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with its attestation (the key is made on first use).

    Raises:
        UntrustedCacheError: the key or its folder could have been written or read by another user.
        OSError: the key cannot be made or read (the cache directory is not writable).
    """
    key = _key(create=True)
    if key is None:
        raise OSError(f"{user_cache_dir() / 'replay.key'} is not a 32-byte key file: remove it and replay again")
    return {**report, _FIELD: _mac(report, key)}


def attestation_problem(report: Mapping[str, Any]) -> str | None:
    """None when ``report`` was written by this user's replay and not edited since; else why it is not attested."""
    not_here = "not attested (written elsewhere or edited): replay the recording on this machine"
    claimed = report.get(_FIELD)
    try:
        key = _key(create=False)
    except UntrustedCacheError as exc:
        return f"not attested: the replay key cannot be trusted: {exc}"
    except OSError as exc:
        return f"not attested: the replay key cannot be read ({exc})"
    if isinstance(claimed, str) and key is not None and hmac.compare_digest(claimed, _mac(report, key)):
        return None
    return not_here
