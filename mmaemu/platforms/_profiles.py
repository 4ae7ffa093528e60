"""Reference platforms (profiles) and their registry.

A profile is a reference platform: a GPU with its SM count, cuBLASLt and torch versions, the
caller (torch or Transformer Engine) with its cuBLAS workspace, the tensor-core preset, the split-K
family of its cuBLAS and the id of the split-K table recorded on it (:mod:`mmaemu.platforms._table`).
A reference GPU's profiles are built from its record (:mod:`mmaemu.platforms._gpus`) by :func:`profiles_of`:
the shipped profiles are :data:`PROFILES`; :func:`register_gpu` adds a GPU and its profiles at run time,
:func:`register_profile` a user profile (e.g. built from a recording by
:func:`mmaemu.recording.profile_from_recording`); :func:`get_profile` is the one resolver of a
``profile=`` argument.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from typing import Any

from .._epilogue import BiasOrder
from ..errors import ExperimentalPresetWarning, UnknownNameError, warn_caller
from ..presets import B200_MMA_SYNC, Maturity, Preset
from .._split import Scheme, SplitFamily
from ._gpus import GPUS, USER_GPUS, ReferenceGpu
from ._table import USER_TABLES, WS_BYTES, SplitTable, check_user_table, register_table, table_known

__all__ = [
    "MIB",
    "SplitFamily",
    "Caller",
    "Profile",
    "PROFILES",
    "DEFAULT_PROFILE",
    "USER_PROFILES",
    "profiles",
    "profiles_of",
    "register_gpu",
    "unregister_gpu",
    "get_profile",
    "default_profile_name",
    "registered_name",
    "register_profile",
    "unregister_profile",
]

MIB = 1 << 20


class Caller(enum.Enum):
    """Who calls cuBLASLt on the reference platform."""

    TORCH = "torch._scaled_mm (torch 2.7.1)"
    TRANSFORMER_ENGINE = "Transformer Engine 2.3"


@dataclass(frozen=True)
class Profile:
    """A reference platform.

    Attributes:
        name: registry name.
        preset: the tensor-core arithmetic.
        split_family: how its cuBLAS splits K.
        gpu: the reference GPU (as ``torch.cuda.get_device_name`` prints it).
        sm_count: its SM count.
        cublaslt: cuBLASLt version.
        torch_version: torch version of the recordings.
        caller: torch._scaled_mm or Transformer Engine.
        workspace_bytes: the caller's cuBLAS workspace.
        maturity: validated or experimental (experimental profiles warn when used).
        table_id: the split-K table recorded on this platform (None: no table).
        source: where these numbers come from.
        evidence: for a profile built from a recording (:func:`mmaemu.recording.profile_from_recording`), what its replay proved.
        bias_order: where this platform's epilogue adds a bias, when a recording's bias probes decided it;
            None (every shipped profile): not recorded, so a biased call runs the default candidate
            (:class:`~mmaemu.BiasOrder`) with an :class:`~mmaemu.errors.UnverifiedEpilogueWarning`.
        rowwise_kernel: the name of the row-wise kernel model (:func:`mmaemu.kernels.kernel_model`) a
            recording's row-wise probes decided; None (every shipped profile): not recorded, so a row-wise call
            runs the architecture's model from the source (:func:`mmaemu.kernels._model.rowwise_model_for`) with
            an :class:`~mmaemu.errors.UnrecordedKernelWarning`.
    """

    name: str
    preset: Preset
    split_family: SplitFamily
    gpu: str
    sm_count: int
    cublaslt: str
    torch_version: str
    caller: Caller
    workspace_bytes: int
    maturity: Maturity
    table_id: str | None
    source: str
    evidence: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    bias_order: BiasOrder | None = None
    rowwise_kernel: str | None = None

    def __post_init__(self) -> None:
        if self.sm_count <= 0:
            raise ValueError(f"profile {self.name}: sm_count must be positive")
        if self.workspace_bytes not in WS_BYTES:
            raise ValueError(f"profile {self.name}: workspace {self.workspace_bytes} is not a recorded setting")
        if self.table_id is not None and not self.table_id.startswith("heur_"):
            raise ValueError(f"profile {self.name}: {self.table_id!r} is not a split-K table id")

    @property
    def schemes(self) -> tuple[Scheme, ...]:
        """The split schemes this platform's cuBLAS uses (its split family's)."""
        return self.split_family.schemes

    @property
    def transformer_engine(self) -> bool:
        """Whether the caller is Transformer Engine (its split decisions are experimental)."""
        return self.caller is Caller.TRANSFORMER_ENGINE

    def __repr__(self) -> str:
        ws = f"{self.workspace_bytes // MIB} MiB" if self.workspace_bytes else "no"
        return (
            f"Profile({self.name!r}: {self.gpu}, {self.sm_count} SMs, cuBLASLt {self.cublaslt}, via "
            f"{self.caller.value}, {ws} workspace, preset {self.preset.name!r}, {self.maturity.value})"
        )


# [Note: the callers' workspaces] torch 2.7.1's ``_scaled_mm`` gives cuBLASLt a 1 MiB workspace
# (``CUBLASLT_WORKSPACE_SIZE``, in KiB, overrides it); Transformer Engine 2.3 gives 32 MiB on compute
# capability 9.0 and above, else 4 MiB (TE's ``get_cublas_workspace_size_bytes``,
# transformer_engine/pytorch/module/base.py). Seeds 000 state both for the two reference GPUs: "torch._scaled_mm
# (1 MiB workspace)", the H100 PCIe with "TE's workspace 32 MiB", the RTX 4060 with "TE's workspace 4 MiB".
# The zero-workspace profiles stand for ``CUBLASLT_WORKSPACE_SIZE=0``.
#: torch's cuBLASLt workspace ([Note: the callers' workspaces]).
TORCH_WORKSPACE = 1 * MIB


def te_workspace(gpu: ReferenceGpu) -> int:
    """Transformer Engine's cuBLASLt workspace on ``gpu`` ([Note: the callers' workspaces])."""
    return 32 * MIB if gpu.architecture.capability >= (9, 0) else 4 * MIB


def _profile(name: str, gpu: ReferenceGpu, caller: Caller, workspace: int, maturity: Maturity,
             table: bool = True) -> Profile:
    return Profile(
        name=name, preset=gpu.preset, split_family=gpu.split_family, gpu=gpu.name, sm_count=gpu.sm_count,
        cublaslt=gpu.cublaslt, torch_version=gpu.torch_version, caller=caller, workspace_bytes=workspace,
        maturity=maturity, table_id=gpu.table_id if table else None, source=gpu.source,
    )


def profiles_of(gpu: ReferenceGpu) -> tuple[Profile, Profile, Profile]:
    """A reference GPU's three profiles, every fact read from its record: ``<profile>`` (``torch._scaled_mm``),
    ``<profile>-te`` (Transformer Engine) and ``<profile>-ws0`` (no workspace)."""
    return (_profile(gpu.profile, gpu, Caller.TORCH, TORCH_WORKSPACE, gpu.maturity),
            _profile(f"{gpu.profile}-te", gpu, Caller.TRANSFORMER_ENGINE, te_workspace(gpu), gpu.maturity),
            _profile(f"{gpu.profile}-ws0", gpu, Caller.TORCH, 0, gpu.maturity))


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        *(p for gpu in GPUS.values() for p in profiles_of(gpu)),
        _profile("hopper-experimental", GPUS["h100"], Caller.TORCH, TORCH_WORKSPACE, Maturity.EXPERIMENTAL,
                 table=False),
        Profile(
            name="b200-mma-sync-experimental",
            preset=B200_MMA_SYNC,
            split_family=SplitFamily.CONTIGUOUS,
            gpu="none: fitted to B200 mma.sync vectors, not to a GPU's cuBLAS",
            sm_count=148,
            cublaslt="none",
            torch_version="none",
            caller=Caller.TORCH,
            workspace_bytes=TORCH_WORKSPACE,
            maturity=Maturity.EXPERIMENTAL,
            table_id=None,
            source="hw-vectors/b200_e4m3.npz (instruction level only; MATLAB tensor-core toolbox)",
        ),
    )
}

DEFAULT_PROFILE = "hopper"

#: Profiles registered at run time (:func:`register_profile`), e.g. built from a recording.
USER_PROFILES: dict[str, Profile] = {}


def registered_name(profile: str | Profile) -> str:
    """The name ``profile`` is registered under: the operator's schema and a module's state carry names,
    so a :class:`Profile` object must be the one registered under its name (built in, or by
    :func:`register_profile`); another object under a known name would compute that profile's bits.

    Raises:
        UnknownNameError: an unknown name (a ``ValueError`` and a ``KeyError``).
        ValueError: a Profile object that is not the one registered under its name.
        TypeError: neither a string nor a Profile.
    """
    found = get_profile(profile, warn=False)
    if isinstance(profile, Profile):
        registered = PROFILES.get(profile.name, USER_PROFILES.get(profile.name))
        if registered is not profile:
            raise ValueError(
                f"profile {profile.name!r} is not the profile registered under that name; register it with "
                "mmaemu.platforms.register_profile(profile) and pass it (or its name) again"
            )
    return found.name


def register_profile(profile: Profile, *, table: SplitTable | None = None, replace: bool = False) -> Profile:
    """Register a user profile (and its table) so that ``profile="<name>"`` and ``MMAEMU_PROFILE`` find it.

    A user profile may use a shipped table (its ``table_id`` names it, no ``table`` passed), but never
    replace one: ``table`` is registered as :func:`~mmaemu.platforms.register_table` does, which
    refuses a shipped table's id. Nothing is registered when it raises.

    Raises:
        TypeError: ``profile`` is not a :class:`Profile`, or ``table`` not a
            :class:`~mmaemu.platforms.SplitTable`.
        ValueError: the name is a shipped profile's, or already registered and ``replace`` is false;
            ``table`` is not the one the profile names (its ``table_id``), or has a shipped table's id
            (:func:`~mmaemu.platforms._table.check_user_table`); or, without ``table``, the profile's
            ``table_id`` names no shipped or registered table.
    """
    if not isinstance(profile, Profile):
        raise TypeError(f"profile must be a Profile, not {type(profile).__name__}")
    if profile.name in PROFILES:
        raise ValueError(f"profile {profile.name!r} is a shipped profile's name; give your profile another name")
    if profile.name in USER_PROFILES and not replace:
        raise ValueError(f"profile {profile.name!r} is already registered (pass replace=True)")
    if table is not None:
        check_user_table(table, replace=replace)
        if table.table_id != profile.table_id:
            raise ValueError(f"profile {profile.name!r} names split-K table {profile.table_id!r}, not the table "
                             f"{table.table_id!r} passed with it; pass its own table, or set its table_id")
        register_table(table, replace=replace)
    elif profile.table_id is not None and not table_known(profile.table_id):
        raise ValueError(f"profile {profile.name!r} names split-K table {profile.table_id!r}, which is neither shipped "
                         "nor registered; pass it as register_profile(profile, table=...)")
    USER_PROFILES[profile.name] = profile
    return profile


def unregister_profile(name: str) -> None:
    """Remove a user profile and its table (no-op for unknown names)."""
    profile = USER_PROFILES.pop(name, None)
    if profile is not None and profile.table_id is not None:
        if not any(p.table_id == profile.table_id for p in USER_PROFILES.values()):
            USER_TABLES.pop(profile.table_id, None)


def register_gpu(gpu: ReferenceGpu, *, table: SplitTable | None = None, replace: bool = False) -> tuple[Profile, ...]:
    """Register a reference GPU at run time, with its split-K table: its three profiles (:func:`profiles_of`)
    become ``profile=`` names and :func:`~mmaemu.platforms.reference_gpu` finds its record.

    A shipped GPU is one record in :data:`mmaemu.platforms._gpus.GPUS` and its table's files; this is the same
    record, registered in this process. Nothing is registered when it raises.

    Returns:
        Its profiles, as registered.

    Raises:
        TypeError: ``gpu`` is not a :class:`~mmaemu.platforms.ReferenceGpu`, or ``table`` not a
            :class:`~mmaemu.platforms.SplitTable`.
        ValueError: its key is a shipped GPU's, or already registered and ``replace`` is false; it pins
            ``table_sha256`` (only shipped files are pinned: pass the table); a profile name of it is a shipped
            profile's, or already registered and ``replace`` is false; or as :func:`register_profile` for its
            table.
    """
    if not isinstance(gpu, ReferenceGpu):
        raise TypeError(f"gpu must be a ReferenceGpu, not {type(gpu).__name__}")
    if gpu.key in GPUS or (gpu.key in USER_GPUS and not replace):
        what = "a shipped GPU's key" if gpu.key in GPUS else "already registered (pass replace=True)"
        raise ValueError(f"reference GPU key {gpu.key!r} is {what}; give the GPU another key")
    if gpu.table_sha256 is not None:
        raise ValueError(f"reference GPU {gpu.key!r} pins table_sha256, which only a shipped GPU's files have; "
                         "set it to None and pass the table as register_gpu(gpu, table=...)")
    made = profiles_of(gpu)
    taken = [p.name for p in made if p.name in PROFILES or (p.name in USER_PROFILES and not replace)]
    if taken:
        raise ValueError(f"reference GPU {gpu.key!r}: its profile names {taken} are taken (a shipped profile's, or "
                         "registered: pass replace=True); give it another profile name")
    register_profile(made[0], table=table, replace=replace)  # checks and registers the table first
    for p in made[1:]:
        register_profile(p, replace=replace)
    USER_GPUS[gpu.key] = gpu
    return made


def unregister_gpu(key: str) -> None:
    """Remove a reference GPU registered at run time, its profiles and its table (no-op for other keys)."""
    gpu = USER_GPUS.pop(key, None)
    if gpu is not None:
        for p in profiles_of(gpu):
            if USER_PROFILES.get(p.name) == p:
                unregister_profile(p.name)


def profiles() -> list[Profile]:
    """All registered profiles, in registry order (shipped first, then user profiles)."""
    return [*PROFILES.values(), *USER_PROFILES.values()]


def default_profile_name() -> str:
    """``MMAEMU_PROFILE`` if set and not blank (surrounding whitespace ignored), else ``"hopper"``."""
    return os.environ.get("MMAEMU_PROFILE", "").strip() or DEFAULT_PROFILE


def get_profile(profile: str | Profile | None, *, warn: bool = True) -> Profile:
    """Resolve a profile name (None: the process default). Experimental profiles warn.

    Raises:
        UnknownNameError: for an unknown name (a ``ValueError`` and a ``KeyError``), listing the known
            profiles (naming ``MMAEMU_PROFILE`` when the name came from it).
        TypeError: ``profile`` is not a string, a :class:`Profile` or None.
    """
    if isinstance(profile, Profile):
        found = profile
    elif profile is not None and not isinstance(profile, str):
        raise TypeError(
            f"profile must be a profile name (str), a Profile or None, not {type(profile).__name__}"
        )
    else:
        name = default_profile_name() if profile is None else profile
        source = f"MMAEMU_PROFILE={name!r} (the default profile)" if profile is None else f"profile={name!r}"
        try:
            found = PROFILES[name] if name in PROFILES else USER_PROFILES[name]
        except KeyError:
            known = ", ".join(repr(p) for p in [*PROFILES, *USER_PROFILES])
            fix = "; set it to one of them, or unset it for 'hopper'" if profile is None else ""
            raise UnknownNameError(f"{source} is not a profile; accepted: {known}{fix}") from None
    if warn and found.maturity is Maturity.EXPERIMENTAL:
        reason = ("its recording's replay did not prove every claim (see profile.evidence)" if found.evidence is not None
                  else "no reference platform's recordings back its split-K decisions")
        warn_caller(
            f"profile {found.name!r} is experimental: {reason}"
            + (" and its preset is fitted to instruction-level vectors only" if found.preset is B200_MMA_SYNC else ""),
            ExperimentalPresetWarning)
    return found
