"""The reference GPUs: one frozen record per GPU, and the one registry of them.

A reference GPU is a GPU, with the cuBLASLt and torch it ran, on which mmaemu's evidence was recorded
(:class:`ReferenceGpu`): its name, architecture and SM count, the split family of its cuBLAS, the tensor-core
preset, the split-K table recorded on it and where that evidence is. Every fact of a reference GPU is read
from its record: the profiles (:func:`mmaemu.platforms._profiles.profiles_of`), the split-K decisions and
their messages (:mod:`mmaemu.platforms._splitk`), the inference rules bound to its table
(:mod:`mmaemu.platforms._inference`), the pinned sha256 of the shipped tables
(:data:`mmaemu.platforms._table.SHIPPED_TABLES`) and the row-wise kernels' refusals.

Adding a shipped GPU is one record in :data:`GPUS` and its table's two files in ``mmaemu/data/splitk``
(``tools/evidence/convert_splitk.py`` writes them and prints their sha256 for ``table_sha256``); at run time,
:func:`mmaemu.platforms.register_gpu` takes a record and its table. An unknown key is an
:class:`~mmaemu.errors.UnknownNameError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from .._enums import TextEnum
from ..errors import UnknownNameError
from ..presets import ADA, HOPPER, Maturity, Preset
from .._split import SplitFamily

__all__ = [
    "Architecture",
    "GPUS",
    "ReferenceGpu",
    "USER_GPUS",
    "gpu_of",
    "reference_gpu",
    "reference_gpus",
]


class Architecture(TextEnum):
    """A GPU architecture, as ``sm_<major><minor>`` of its CUDA compute capability."""

    SM89 = "sm_89"
    SM90 = "sm_90"

    @property
    def capability(self) -> tuple[int, int]:
        """The compute capability ``(major, minor)``, as ``torch.cuda.get_device_capability`` gives it."""
        digits = self.value.removeprefix("sm_")
        return int(digits[:-1]), int(digits[-1])


@dataclass(frozen=True)
class ReferenceGpu:
    """A reference GPU: every fact mmaemu knows of it, and where the evidence is.

    Attributes:
        key: its registry key (``"h100"``).
        name: the GPU's name as ``torch.cuda.get_device_name`` prints it (a live cuBLASLt query runs only on
            a GPU of this name, SM count and cuBLASLt version).
        architecture: its architecture.
        sm_count: its SM count.
        cublaslt: the cuBLASLt version the evidence was recorded with.
        torch_version: the torch version the evidence was recorded with.
        split_family: how its cuBLAS splits K (:class:`~mmaemu.platforms.SplitFamily`).
        preset: its tensor cores' arithmetic.
        profile: the name of its profile through ``torch._scaled_mm``; its Transformer Engine and zero-workspace
            profiles add ``-te`` and ``-ws0`` (:func:`mmaemu.platforms._profiles.profiles_of`).
        table_id: the split-K table recorded on it (None: no table).
        table_sha256: for a shipped GPU, the sha256 of its table's ``.npz`` and ``.json`` in
            ``mmaemu/data/splitk`` (:meth:`mmaemu.platforms.SplitTable.load` refuses other bytes); None for
            a GPU registered at run time, whose table is registered with it.
        source: where the evidence comes from.
        maturity: validated, or experimental (its profiles warn when used).
    """

    key: str
    name: str
    architecture: Architecture
    sm_count: int
    cublaslt: str
    torch_version: str
    split_family: SplitFamily
    preset: Preset
    profile: str
    table_id: str | None
    table_sha256: tuple[str, str] | None
    source: str
    maturity: Maturity = Maturity.VALIDATED

    def __post_init__(self) -> None:
        for field_name in ("key", "name", "profile"):
            value = getattr(self, field_name)
            if not isinstance(value, str) or not value or not value.isprintable():
                raise ValueError(f"reference GPU {self.key!r}: {field_name} must be a non-empty printable string")
        if not isinstance(self.sm_count, int) or isinstance(self.sm_count, bool) or self.sm_count <= 0:
            raise ValueError(f"reference GPU {self.key!r}: sm_count must be a positive int, not {self.sm_count!r}")
        for field_name, kind in (("architecture", Architecture), ("split_family", SplitFamily), ("preset", Preset),
                                 ("maturity", Maturity)):
            if not isinstance(getattr(self, field_name), kind):
                raise TypeError(f"reference GPU {self.key!r}: {field_name} must be a {kind.__name__}")
        if self.table_id is not None and not self.table_id.startswith("heur_"):
            raise ValueError(f"reference GPU {self.key!r}: {self.table_id!r} is not a split-K table id")
        if self.table_sha256 is not None and self.table_id is None:
            raise ValueError(f"reference GPU {self.key!r}: table_sha256 pins a table, but table_id names none")


# [Note: the reference GPUs] The H100 PCIe's facts are the H100 probe's and split-K sweep's (seeds 000, 002,
# 004: 114 SMs, cuBLASLt 12.8.3.14, torch 2.7.1; the table's info records the same GPU, SM count, capability
# and cuBLASLt); the RTX 4060's are recordings/rtx4060's and its table's (24 SMs, capability 8.9). The split
# families are [Note: split families] (mmaemu/_split.py), the presets [Note] blocks of mmaemu/presets.py. The
# sha256 are those of the files tools/evidence/convert_splitk.py writes from recordings/splitk (the conversion is
# byte for byte reproducible: ``tools/evidence/convert_splitk.py --check``); ``.gitattributes`` marks them -text.
_SHIPPED = (
    ReferenceGpu(
        key="h100", name="NVIDIA H100 PCIe", architecture=Architecture.SM90, sm_count=114, cublaslt="12.8.3.14",
        torch_version="2.7.1", split_family=SplitFamily.CONTIGUOUS, preset=HOPPER, profile="hopper",
        table_id="heur_h100pcie_lt12.8.3.14",
        table_sha256=("5b4c25103b77865e385ffcda4be62218ab061a693812b32749dcb04c5151dd63",
                      "b5dbc043e346dda1b5a72dfdf771f12c436ed571b8a112a085ccc03a9447766f"),
        source="specified: H100 PCIe probe (1,423 live calls) and split-K sweep (2,744 live jobs); recordings/splitk",
    ),
    ReferenceGpu(
        key="rtx4060", name="NVIDIA GeForce RTX 4060", architecture=Architecture.SM89, sm_count=24,
        cublaslt="12.8.3.14", torch_version="2.7.1", split_family=SplitFamily.ROUND_ROBIN, preset=ADA,
        profile="ada", table_id="heur_rtx4060_lt12.8.3.14",
        table_sha256=("ba0be27749726e2f0eb08a414a1668b841ece2698314e5257b2367a1339902af",
                      "1bffd0111e6f171aa4d74cc4ea5a930ddda8131904a55d89a5268eba0ceb7a05"),
        source="recordings/rtx4060 (7,070 RTX 4060 outputs and calls); recordings/splitk",
    ),
)

#: The shipped reference GPUs by key, in registry order.
GPUS: Mapping[str, ReferenceGpu] = MappingProxyType({gpu.key: gpu for gpu in _SHIPPED})

#: Reference GPUs registered at run time (:func:`mmaemu.platforms.register_gpu`).
USER_GPUS: dict[str, ReferenceGpu] = {}


def reference_gpus() -> list[ReferenceGpu]:
    """Every registered reference GPU: the shipped ones first, then those registered at run time."""
    return [*GPUS.values(), *USER_GPUS.values()]


def reference_gpu(key: str) -> ReferenceGpu:
    """The reference GPU registered under ``key``.

    Raises:
        UnknownNameError: no GPU is registered under ``key`` (a ``ValueError`` and a ``KeyError``); the message
            lists the known keys.
        TypeError: ``key`` is not a string.
    """
    if not isinstance(key, str):
        raise TypeError(f"a reference GPU's key is a string, not {type(key).__name__}")
    found = GPUS.get(key) or USER_GPUS.get(key)
    if found is None:
        known = ", ".join(repr(k) for k in [*GPUS, *USER_GPUS])
        raise UnknownNameError(f"{key!r} is not a reference GPU; the registered GPUs are {known} (add one with "
                               "mmaemu.platforms._profiles.register_gpu)")
    return found


def gpu_of(name: object, sm_count: object, cublaslt: object) -> ReferenceGpu | None:
    """The registered reference GPU of this name, SM count and cuBLASLt version (a recording's environment),
    or None."""
    return next((g for g in reference_gpus() if (g.name, g.sm_count, g.cublaslt) == (name, sm_count, cublaslt)),
                None)
