"""The platform arguments every entry point takes, parsed once: ``profile``, ``splitk`` and ``backend``.

``scaled_mm`` and ``explain`` (:mod:`mmaemu._call`), ``emulate()`` (:mod:`mmaemu.intercept`) and
:class:`~mmaemu.nn.EmulatedFP8Linear` parse the three with :meth:`Options.parse`, so each is checked by
one rule and in one order; the operator (:mod:`mmaemu.ops`) and the modules carry the profile by its
name, :func:`~mmaemu.platforms._profiles.registered_name`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .backends import Backend, parse_backend
from .platforms._profiles import Profile, get_profile
from ._split import SplitK, SplitKSpec, parse_splitk

__all__ = ["Options"]


@dataclass(frozen=True)
class Options:
    """``profile``, ``splitk`` and ``backend`` of a call, each normalised.

    Attributes:
        profile: the reference platform (the process default, ``MMAEMU_PROFILE``, when None was passed).
        splitk: ``"auto"`` or the explicit split.
        backend: the requested backend (``Backend.AUTO`` is resolved per call: it depends on the device).
    """

    profile: Profile
    splitk: SplitK | Literal["auto"]
    backend: Backend

    @classmethod
    def parse(cls, profile: str | Profile | None = None, splitk: SplitKSpec = "auto",
              backend: str | Backend = "auto", *, warn: bool = True) -> Options:
        """Normalise the three arguments, in this order (the first invalid one raises).

        Args:
            profile: a profile name, a registered :class:`~mmaemu.Profile`, or None
                (the default: ``MMAEMU_PROFILE``, else ``"hopper"``).
            splitk: ``"auto"`` (the reference GPU's decision, from evidence), ``1``, ``(S, scheme)`` or a
                :class:`~mmaemu.SplitK`.
            backend: a backend name or :class:`~mmaemu.backends.Backend`: ``"auto"`` (per call, the
                fastest available for the operands' device: ``"cpu"`` for CPU tensors when numba imports,
                ``"triton"`` for CUDA tensors once its self-test passed on that device, else
                ``"reference"``), ``"reference"`` (torch, any device), ``"cpu"`` (compiled, CPU tensors)
                or ``"triton"`` (CUDA tensors; CPU tensors under ``TRITON_INTERPRET=1``). All return the
                same bits.
            warn: whether an experimental profile warns (``ExperimentalPresetWarning``).

        Raises:
            UnknownNameError: an unknown profile, backend or split-scheme name (a ``ValueError`` and a
                ``KeyError``), listing the accepted names.
            TypeError: a profile or backend of the wrong type.
            ValueError: any other invalid ``splitk``, listing the accepted forms.
        """
        return cls(get_profile(profile, warn=warn), parse_splitk(splitk), parse_backend(backend))
