"""mmaemu: the bits of an NVIDIA GPU's FP8 tensor-core GEMMs, computed anywhere.

``mmaemu.scaled_mm`` takes the arguments of ``torch._scaled_mm`` and returns what torch returns
on a reference platform (an H100 PCIe by default, or an RTX 4060), bit for bit.
"""

from __future__ import annotations

from . import model, testing
from .accumulation import Scheme, SplitK
from .call import CallPlan, accumulate, explain, scaled_mm
from .epilogue import epilogue
from .errors import (
    BackendFallbackWarning,
    BackendUnavailableError,
    ExperimentalPresetWarning,
    MmaemuError,
    MmaemuWarning,
    ReferenceRejectsError,
    SplitKUnknownError,
    UnsupportedFeatureError,
    UnvalidatedEnvelopeWarning,
    UnverifiedSplitWarning,
)
from .model import Preset
from .platform import Profile, SplitDecision

__version__ = "0.1.0.dev0"

__all__ = [
    "scaled_mm",
    "accumulate",
    "epilogue",
    "explain",
    "CallPlan",
    "model",
    "testing",
    "Preset",
    "Profile",
    "SplitDecision",
    "SplitK",
    "Scheme",
    "MmaemuError",
    "SplitKUnknownError",
    "UnsupportedFeatureError",
    "ReferenceRejectsError",
    "BackendUnavailableError",
    "MmaemuWarning",
    "BackendFallbackWarning",
    "UnverifiedSplitWarning",
    "UnvalidatedEnvelopeWarning",
    "ExperimentalPresetWarning",
    "__version__",
]
