"""mmaemu: the bits of an NVIDIA GPU's FP8 tensor-core GEMMs, computed anywhere.

``mmaemu.scaled_mm`` takes the arguments of ``torch._scaled_mm`` and returns what torch returns
on a reference platform (an H100 PCIe by default, or an RTX 4060), bit for bit.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from typing import TYPE_CHECKING, Any

from . import model, ops, testing
from ._blockwise import BLOCK_KERNELS, block_scaled_mm
from ._call import accumulate, scaled_mm
from ._epilogue import BiasOrder, epilogue
from .errors import warn_caller as _warn_caller
from .errors import (
    BackendFallbackWarning,
    BackendUnavailableError,
    ExperimentalPresetWarning,
    InferredSplitWarning,
    MmaemuError,
    MmaemuWarning,
    RecordingDamagedError,
    ReferenceRejectsError,
    ReferenceRejectsValueError,
    SplitKUnknownError,
    UnknownNameError,
    UnrecordedKernelWarning,
    UnsupportedFeatureError,
    UntrustedCacheError,
    UntrustedCacheWarning,
    UnvalidatedEnvelopeWarning,
    UnverifiedEpilogueWarning,
    UnverifiedSplitWarning,
)
from .functional import scaled_mm_v2
from .intercept import EmulationLog, emulate
from ._plan import BlockCallPlan, CallPlan, explain, explain_block_scaled
from .platforms._profiles import Profile
from .platforms._splitk import SplitDecision
from .presets import Preset
from ._split import Scheme, SplitK
from ._version import DISTRIBUTION, FOREIGN_DISTRIBUTION, __version__

if TYPE_CHECKING:
    from . import nn, quantization, recording

#: The names of the top level. The public modules (``mmaemu.errors``, ``mmaemu.formats``, ``mmaemu.presets``,
#: ``mmaemu.model``, ``mmaemu.testing``, ``mmaemu.nn``, ``mmaemu.functional``, ``mmaemu.ops``, ``mmaemu.intercept``,
#: ``mmaemu.quantization``, ``mmaemu.platforms``, ``mmaemu.recording``, ``mmaemu.backends``, ``mmaemu.kernels``) have
#: their own ``__all__``; every other module has an underscore in its path and is internal
#: (``tests/unit/test_public_api.py`` pins both).
__all__ = [
    "scaled_mm",
    "scaled_mm_v2",
    "block_scaled_mm",
    "explain_block_scaled",
    "BlockCallPlan",
    "BLOCK_KERNELS",
    "accumulate",
    "epilogue",
    "BiasOrder",
    "explain",
    "CallPlan",
    "Preset",
    "Profile",
    "SplitDecision",
    "SplitK",
    "Scheme",
    "MmaemuError",
    "SplitKUnknownError",
    "UnknownNameError",
    "UnsupportedFeatureError",
    "ReferenceRejectsError",
    "ReferenceRejectsValueError",
    "BackendUnavailableError",
    "RecordingDamagedError",
    "UntrustedCacheError",
    "MmaemuWarning",
    "BackendFallbackWarning",
    "UnverifiedSplitWarning",
    "InferredSplitWarning",
    "UnverifiedEpilogueWarning",
    "UnrecordedKernelWarning",
    "UnvalidatedEnvelopeWarning",
    "ExperimentalPresetWarning",
    "UntrustedCacheWarning",
    "__version__",
    "emulate",
    "EmulationLog",
]

#: submodules imported on first use, so that ``import mmaemu`` stays light. ``ops`` is imported eagerly:
#: it registers the ``mmaemu::scaled_mm`` operator, which a program exported with it needs in a fresh
#: process (about 30 ms on top of torch's import).
_LAZY_SUBMODULES = ("nn", "quantization", "recording")


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _warn_if_foreign_install() -> None:
    """Warn when another distribution that installs an ``mmaemu`` package is installed beside this one
    ([Note: the distribution name] in :mod:`mmaemu._version`)."""
    try:
        other = importlib.metadata.distribution(FOREIGN_DISTRIBUTION)
        where = os.path.abspath(str(other.locate_file("")))
    except importlib.metadata.PackageNotFoundError:
        return
    except Exception:  # noqa: BLE001 - unreadable metadata: nothing to say
        return
    _warn_caller(
        f"the distribution {FOREIGN_DISTRIBUTION!r} {other.version} is installed in {where}: it is either "
        f"PyPI's project of that name (a different code base) or an old install of this one under its old "
        f"name, and it installs its own 'mmaemu' package over this one's files. Run: pip uninstall "
        f"{FOREIGN_DISTRIBUTION}, then reinstall this project (pip install --force-reinstall . from its "
        f"checkout, whose distribution is {DISTRIBUTION!r})",
        MmaemuWarning)


_warn_if_foreign_install()
