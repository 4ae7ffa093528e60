"""Reference platforms: profiles, split-K tables, split-K decisions and the cuBLASLt query.

The public names are this package's ``__all__``; its modules (internal) are:

- :mod:`~mmaemu.platforms._gpus`: :class:`ReferenceGpu`, one record per reference GPU, and the registry
  (:func:`reference_gpu`, :func:`reference_gpus`);
- :mod:`~mmaemu.platforms._profiles`: :class:`Profile` (a GPU, its cuBLASLt and its caller), built from a GPU's
  record, and the registry (:func:`get_profile`, :func:`profiles`, :func:`register_gpu`, :func:`register_profile`);
- :mod:`~mmaemu.platforms._table`: the binary split-K table, the one reader and writer of its encoding
  (:class:`SplitTable`, :class:`Setting`, :func:`register_table`);
- :mod:`~mmaemu.platforms._splitk`: :func:`resolve_splitk`, cuBLAS's split-K decision from evidence;
- :mod:`~mmaemu.platforms._inference`: the inference rules every recorded row obeys, and their check;
- :mod:`~mmaemu.platforms._cublaslt`: cuBLASLt's heuristic, queried through ctypes on a CUDA machine.
"""

from __future__ import annotations

from .._split import SplitFamily
from ._gpus import Architecture, ReferenceGpu, reference_gpu, reference_gpus
from ._profiles import (Caller, Profile, get_profile, profiles, register_gpu, register_profile, unregister_gpu,
                        unregister_profile)
from ._splitk import Problem, SplitDecision, SplitSource, resolve_splitk
from ._table import Setting, SplitTable, register_table

__all__ = [
    "Profile",
    "Caller",
    "get_profile",
    "profiles",
    "register_profile",
    "unregister_profile",
    "ReferenceGpu",
    "Architecture",
    "SplitFamily",
    "reference_gpu",
    "reference_gpus",
    "register_gpu",
    "unregister_gpu",
    "SplitTable",
    "Setting",
    "register_table",
    "Problem",
    "SplitDecision",
    "SplitSource",
    "resolve_splitk",
]
