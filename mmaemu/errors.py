"""Every exception and warning mmaemu raises or emits, in one place.

All exceptions derive from :class:`MmaemuError`; all warnings from :class:`MmaemuWarning`.
A call that the reference platform itself rejects raises :class:`ReferenceRejectsError`,
which also derives from :class:`RuntimeError` so that ``except RuntimeError`` code written
around ``torch._scaled_mm`` keeps working.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

__all__ = [
    "MmaemuError",
    "SplitKUnknownError",
    "UnsupportedFeatureError",
    "ReferenceRejectsError",
    "ReferenceRejectsValueError",
    "BackendUnavailableError",
    "UnknownNameError",
    "RecordingDamagedError",
    "RecordUnavailableError",
    "UntrustedCacheError",
    "MmaemuWarning",
    "BackendFallbackWarning",
    "UnverifiedSplitWarning",
    "UnvalidatedEnvelopeWarning",
    "ExperimentalPresetWarning",
    "UnverifiedEpilogueWarning",
    "InferredSplitWarning",
    "UnrecordedKernelWarning",
    "UntrustedCacheWarning",
]


class MmaemuError(Exception):
    """Base class of every error mmaemu raises on purpose."""


class SplitKUnknownError(MmaemuError):
    """No evidence decides whether (and how) the reference GPU splits K for this call.

    Raised by ``splitk="auto"`` instead of guessing. Pass an explicit ``splitk`` only when
    you know what the reference GPU did for this call.
    """


class UnsupportedFeatureError(MmaemuError):
    """The reference platform runs this call, but mmaemu does not model it (it never approximates)."""


class ReferenceRejectsError(MmaemuError, RuntimeError):
    """torch or the reference platform's cuBLASLt rejects this call; the message is theirs."""


class ReferenceRejectsValueError(ReferenceRejectsError, ValueError):
    """A rejection that torch raises as a ``ValueError`` (``torch._check_value``, as in torch 2.13's
    ``torch.nn.functional.scaled_mm``): also a ``ValueError``."""


class BackendUnavailableError(MmaemuError):
    """The requested backend cannot run here (missing dependency, device, or failed self-test)."""


class UnknownNameError(MmaemuError, ValueError, KeyError):
    """A name that names nothing: an unknown preset, profile, backend or split scheme (the one error of a bad
    lookup). Also a ``ValueError`` and a ``KeyError``; the message lists what is accepted."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class RecordingDamagedError(MmaemuError, ValueError):
    """A recording cannot be trusted: a file is missing, changed, malformed, oversized, or not a regular file.

    The message names the file and, where one is at fault, the field. Also a :class:`ValueError`.
    """


class RecordUnavailableError(BackendUnavailableError):
    """The recorder needs a CUDA GPU with cuBLASLt; this machine lacks one (the message says what)."""


class UntrustedCacheError(MmaemuError, OSError):
    """A per-user folder or file mmaemu reads back (its cache folder, numba's machine code, the replay key) could
    have been written by another user: it or a folder on its way belongs to another user or is writable by
    others. The message names it, its owner and mode, and how to fix it. Also an :class:`OSError`."""


class MmaemuWarning(UserWarning):
    """Base class of every warning mmaemu emits."""


class BackendFallbackWarning(MmaemuWarning):
    """``backend="auto"`` could not use the preferred backend and fell back to another one."""


class UnverifiedSplitWarning(MmaemuWarning):
    """A split-K form that no hardware recording has reproduced (for example an empty part)."""


class UnvalidatedEnvelopeWarning(MmaemuWarning):
    """A split-K decision inferred from an envelope that failed or lacks a held-out test."""


class ExperimentalPresetWarning(MmaemuWarning):
    """An experimental preset or profile is in use: its arithmetic is not validated on GEMMs."""


class UnverifiedEpilogueWarning(MmaemuWarning):
    """An epilogue step no hardware recording has decided (``bias=``: where cuBLASLt adds the bias)."""


class UnrecordedKernelWarning(MmaemuWarning):
    """A kernel whose choices are read from its source and machine code, not recorded on the reference GPU:
    torch 2.7.1's row-wise CUTLASS kernels (:mod:`mmaemu.kernels`: their dispatch, accumulation and epilogue
    order). Every such call warns, unless the profile's recording decided the kernel's choices."""


class InferredSplitWarning(MmaemuWarning):
    """A split-K decision inferred by a rule that every recorded row obeys, not read from a recorded row
    (``source="inference"``, experimental: ``MMAEMU_SPLITK_STRICT=1`` refuses it)."""


class UntrustedCacheWarning(MmaemuWarning):
    """The cpu backend compiles its kernels in memory, in every process, because its numba cache folder could
    have been written by another user (the message says which folder or file, and how to fix it)."""


def warn_caller(message: str, category: type[Warning]) -> None:
    """``warnings.warn(message, category)`` attributed to the user's line: the first frame outside mmaemu
    and torch (a call through ``emulate()``, a module's ``forward`` or the operator passes through both).

    Python's default filter then shows a warning once per user call site, and the location printed is
    the line the user can change, however deep inside mmaemu the warning was decided.
    """
    skipped = tuple(_skipped_prefixes())
    frame: Any = sys._getframe(0)
    level = 1
    while True:  # count frames as warnings.warn does: importlib's own frames are passed over, not counted
        frame = frame.f_back
        while frame is not None and _importlib_internal(frame):
            frame = frame.f_back
        level += 1
        if frame is None or not frame.f_code.co_filename.startswith(skipped):
            break
    warnings.warn(message, category, stacklevel=level)


def _importlib_internal(frame: Any) -> bool:
    """A frame of the import machinery, which ``warnings.warn`` skips without counting it (CPython's
    ``_is_internal_frame`` in Lib/warnings.py and ``is_internal_frame`` in Python/_warnings.c)."""
    filename = frame.f_code.co_filename
    return "importlib" in filename and "_bootstrap" in filename


def _skipped_prefixes() -> list[str]:
    """Folders whose frames a warning is never attributed to: this package's and torch's."""
    folders = [os.path.dirname(os.path.abspath(__file__))]
    torch_module = sys.modules.get("torch")
    torch_file = getattr(torch_module, "__file__", None)
    if torch_file:
        folders.append(os.path.dirname(os.path.abspath(torch_file)))
    return [folder + os.sep for folder in folders]
