"""The public surface, pinned: which modules are public, and which names each one exports.

A module is public when no component of its dotted path starts with an underscore; every other module is
internal and may change in any release (docs/architecture.md). The public modules are listed here by hand, so
that a module added or renamed without an underscore fails here until it is meant to be public, and each public
module's ``__all__`` is pinned, so that a name added to or dropped from the surface is a decision made in this
file (and in CHANGELOG.md), not a side effect. The whole surface stays small: at most ``MAX_PUBLIC_NAMES``.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import mmaemu

#: The modules users import: every other module of the package has an underscore in its path.
PUBLIC_MODULES = [
    "mmaemu",
    "mmaemu.errors",
    "mmaemu.formats",
    "mmaemu.presets",
    "mmaemu.model",
    "mmaemu.testing",
    "mmaemu.nn",
    "mmaemu.functional",
    "mmaemu.ops",
    "mmaemu.intercept",
    "mmaemu.quantization",
    "mmaemu.platforms",
    "mmaemu.recording",
    "mmaemu.backends",
    "mmaemu.kernels",
]

_ERRORS = {
    "BackendFallbackWarning", "BackendUnavailableError", "ExperimentalPresetWarning", "InferredSplitWarning",
    "MmaemuError", "MmaemuWarning", "RecordingDamagedError", "ReferenceRejectsError", "ReferenceRejectsValueError",
    "SplitKUnknownError", "UnknownNameError", "UnrecordedKernelWarning", "UnsupportedFeatureError",
    "UntrustedCacheError", "UntrustedCacheWarning", "UnvalidatedEnvelopeWarning", "UnverifiedEpilogueWarning",
    "UnverifiedSplitWarning",
}

#: Each public module's ``__all__``, as a set.
PUBLIC_NAMES: dict[str, frozenset[str]] = {name: frozenset(names) for name, names in {
    "mmaemu": _ERRORS | {
        "BLOCK_KERNELS", "BiasOrder", "BlockCallPlan", "CallPlan", "EmulationLog", "Preset", "Profile", "Scheme",
        "SplitDecision", "SplitK", "__version__", "accumulate", "block_scaled_mm", "emulate", "epilogue", "explain",
        "explain_block_scaled", "scaled_mm", "scaled_mm_v2",
    },
    "mmaemu.errors": _ERRORS | {"RecordUnavailableError"},
    "mmaemu.formats": {
        "DecodedFp8", "Fp8Format", "OutFormat", "bits_of", "decode_fp8", "dtype_from_name", "fp8_format_of",
        "from_bits", "out_format_of",
    },
    "mmaemu.presets": {
        "ADA", "B200_MMA_SYNC", "HOPPER", "HOPPER_MMA_SYNC", "Maturity", "Preset", "SM120", "get_preset",
        "instruction_preset", "presets", "zoo_presets",
    },
    "mmaemu.model": {"block_fma", "block_sum_exact_in_fp32", "chain", "dot", "hmma_rewrite"},
    "mmaemu.testing": {"BitwiseDiff", "assert_bitwise_equal", "bitwise_diff"},
    "mmaemu.nn": {"EmulatedFP8Linear"},
    "mmaemu.functional": {"scaled_mm_v2"},
    "mmaemu.ops": {"OP_NAME", "scaled_mm"},
    "mmaemu.intercept": {"FOREIGN_GEMMS", "Fallback", "ForeignGemm"},
    "mmaemu.quantization": {
        "BlockQuantizer", "FP32_MAX", "ScalingRecipe", "current_scale", "dequantize_fp8_blocks", "quantize",
        "quantize_fp8_blocks", "quantize_fp8_groups", "reciprocal_scale", "round_to_tf32", "scale_from_amax",
        "torchao_quantize_",
    },
    "mmaemu.platforms": {
        "Architecture", "Caller", "Problem", "Profile", "ReferenceGpu", "Setting", "SplitDecision", "SplitFamily",
        "SplitSource", "SplitTable", "get_profile", "profiles", "reference_gpu", "reference_gpus", "register_gpu",
        "register_profile", "register_table", "resolve_splitk", "unregister_gpu", "unregister_profile",
    },
    "mmaemu.recording": {
        "Recording", "ReplayReport", "inspect", "profile_from_recording", "record", "register_recording", "replay",
    },
    "mmaemu.backends": {
        "Accumulated", "Backend", "CONCRETE", "EXECUTORS", "Executor", "Support", "auto_order", "register_backend",
        "release_scratch", "resolve_backend", "supports", "unregister_backend",
    },
    "mmaemu.kernels": {"BlockKernelModel", "KernelModel", "block_candidates", "block_model", "candidates", "kernel_model"},
}.items()}

#: The bar of the public surface: the sum of the public modules' ``__all__`` lengths.
MAX_PUBLIC_NAMES = 150


def is_public(module: str) -> bool:
    """No component of the dotted path starts with an underscore."""
    return not any(part.startswith("_") for part in module.split("."))


def package_modules() -> list[str]:
    """Every module and package of mmaemu, by name (packages are imported to be walked; modules are not)."""
    return ["mmaemu", *(info.name for info in pkgutil.walk_packages(mmaemu.__path__, "mmaemu."))]


def unlisted_public(modules: list[str]) -> list[str]:
    """The modules of ``modules`` that are public by their name but not listed in ``PUBLIC_MODULES``."""
    return sorted(m for m in modules if is_public(m) and m not in PUBLIC_MODULES)


def test_every_module_not_listed_is_internal() -> None:
    found = package_modules()
    assert len(found) > 80  # the walk saw the whole package, internal modules included
    assert unlisted_public(found) == [], "give the module an underscore, or list it in PUBLIC_MODULES and pin its names"


def test_every_listed_module_exists_and_is_public() -> None:
    assert set(PUBLIC_MODULES) <= set(package_modules())
    assert all(is_public(m) for m in PUBLIC_MODULES)
    assert set(PUBLIC_NAMES) == set(PUBLIC_MODULES)


def test_the_check_can_fail() -> None:
    """A module without an underscore that is not listed is reported; an internal one is not."""
    assert unlisted_public(["mmaemu.backends._cpu", "mmaemu.platforms.table", "mmaemu.errors"]) == ["mmaemu.platforms.table"]


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_each_public_module_exports_its_pinned_names(module: str) -> None:
    exported = importlib.import_module(module).__all__
    assert len(exported) == len(set(exported)), f"{module}.__all__ lists a name twice"
    assert set(exported) == PUBLIC_NAMES[module], (
        f"{module}.__all__ changed: added {sorted(set(exported) - PUBLIC_NAMES[module])}, "
        f"dropped {sorted(PUBLIC_NAMES[module] - set(exported))}; pin the change here and list it in CHANGELOG.md")


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_name_resolves(module: str) -> None:
    owner = importlib.import_module(module)
    for name in owner.__all__:
        assert hasattr(owner, name), f"{module}.{name} is in __all__ but does not exist"
        assert name == "__version__" or not name.startswith("_"), f"{module}.{name}: a public name has no underscore"


def test_the_public_surface_is_small() -> None:
    total = sum(len(importlib.import_module(m).__all__) for m in PUBLIC_MODULES)
    assert total <= MAX_PUBLIC_NAMES, f"{total} public names; the bar is {MAX_PUBLIC_NAMES}"
