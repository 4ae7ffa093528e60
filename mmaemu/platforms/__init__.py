"""Reference platforms: profiles, split-K tables, split-K decisions and the cuBLASLt query.

- :mod:`~mmaemu.platforms.gpus`: :class:`ReferenceGpu`, one record per reference GPU, and the registry
  (:func:`reference_gpu`);
- :mod:`~mmaemu.platforms.profiles`: :class:`Profile` (a GPU, its cuBLASLt and its caller), built from a GPU's
  record, and the registry (:func:`get_profile`, :func:`register_gpu`);
- :mod:`~mmaemu.platforms.table`: the binary split-K table, the one reader and writer of its encoding;
- :mod:`~mmaemu.platforms.splitk`: :func:`resolve_splitk`, cuBLAS's split-K decision from evidence;
- :mod:`~mmaemu.platforms.inference`: the inference rules every recorded row obeys, and their check;
- :mod:`~mmaemu.platforms.cublaslt`: cuBLASLt's heuristic, queried through ctypes on a CUDA machine.
"""

from __future__ import annotations

# ``profiles`` is a submodule here (the function is ``profiles.profiles``): re-exporting the function under
# the same name would hide the module.
from .gpus import Architecture, ReferenceGpu, reference_gpu
from .profiles import (PROFILES, Caller, Profile, SplitFamily, get_profile, register_gpu, register_profile, unregister_gpu,
                       unregister_profile)
from .splitk import Problem, SplitDecision, SplitSource, resolve_splitk
from .table import Setting, SplitTable

__all__ = [
    "PROFILES",
    "Architecture",
    "Caller",
    "Problem",
    "Profile",
    "ReferenceGpu",
    "Setting",
    "SplitDecision",
    "SplitFamily",
    "SplitSource",
    "SplitTable",
    "get_profile",
    "reference_gpu",
    "register_gpu",
    "register_profile",
    "resolve_splitk",
    "unregister_gpu",
    "unregister_profile",
]
