"""A profile from a recording: its table, its fitted envelope, its probes' verdict, its replay's evidence.

:func:`profile_from_recording` turns a recording directory into a
:class:`~mmaemu.Profile` that ``profile=`` accepts; it is validated only when a
replay of that very recording passed (see its docstring for the full rule).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..platforms._profiles import Caller, Profile, register_profile
from ..platforms._table import WS_BYTES, SplitTable, register_table, setting_statistics
from ..presets import Maturity, Preset, get_preset
from .._split import SplitFamily
from ._attestation import attestation_problem
from ._directory import RecordingDirectory
from ._envelope import TableRows, fit_envelope, heldout_mask, validate_envelope
from ._format import Recording
from ._probes import ProbeVerdict
from ._verdict import verdict_from_recording
from ._records import sha256_bytes

__all__ = ["profile_from_recording", "register_recording", "replay_report"]


def _slug(text: str) -> str:
    return "".join(c for c in text.lower().replace("nvidia", "") if c.isalnum())


#: The largest replay report read back (reports are kilobytes).
_MAX_REPORT_BYTES = 64 << 20


def replay_report(rec: Recording) -> dict[str, Any] | None:
    """The recording's ``replay.json`` (read as untrusted input), or None when absent or not a JSON object."""
    with RecordingDirectory(rec.path) as d:
        data = d.read("replay.json", limit=_MAX_REPORT_BYTES)
    if data is None:
        return None
    try:
        report = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return report if isinstance(report, dict) else None


def _chosen(rec: Recording, rows: TableRows, verdict: ProbeVerdict, preset: Preset | None,
            split_family: SplitFamily | None) -> tuple[Preset, SplitFamily]:
    """The preset and split family: the arguments', else the probes' verdict; a recording without splits
    needs no family (contiguous is taken, it plays no part)."""
    chosen_preset = preset if preset is not None else verdict.preset
    if chosen_preset is None:
        raise ValueError(f"{rec.path}: the probes fit no preset ({verdict.summary}); pass preset= to build a profile anyway")
    family = split_family if split_family is not None else verdict.split_family
    if family is None:
        if bool((rows.S > 1).any()):
            raise ValueError(f"{rec.path}: the probes decide no split family ({verdict.summary}); pass split_family=")
        family = SplitFamily.CONTIGUOUS
    return chosen_preset, family


def _evidence(rec: Recording, proof: _ReplayProof, verdict: ProbeVerdict, preset: Preset | None,
              split_family: SplitFamily | None, env_status: dict[Any, Any], n_rows: int, n_heldout: int) -> dict[str, Any]:
    """``profile.evidence``: what the recording, its replay and its probes proved, and what the caller chose."""
    return {
        "recording": str(rec.path), "recording_digest": rec.digest,
        "sections": dict(rec.manifest.get("sections", {})),
        "replay": proof.status, "live_calls_equal": proof.live_equal, "live_calls": proof.live_total,
        "verified_split_combos": len(proof.verified),
        "probes": verdict.summary, "preset_from": "probes" if preset is None else "argument",
        "split_family_from": "probes" if split_family is None and verdict.split_family is not None else
                             ("argument" if split_family is not None else "no splits recorded"),
        "envelope": env_status, "heuristic_rows": n_rows, "heldout_rows": n_heldout,
        "bias_order": (verdict.bias_order.value if verdict.bias_order is not None and preset is None
                       else "not decided" if verdict.bias_probes else "not recorded"),
        "rowwise_kernel": (verdict.rowwise_kernel if verdict.rowwise_kernel is not None and preset is None
                           else "not decided" if verdict.rowwise_probes else "not recorded"),
    }


def profile_from_recording(directory: str | os.PathLike[str] | Recording, *, name: str | None = None,
                           workspace_bytes: int | None = None, preset: str | Preset | None = None,
                           split_family: SplitFamily | None = None, report: Mapping[str, Any] | None = None,
                           register: bool = False, verdict: ProbeVerdict | None = None) -> Profile:
    """A :class:`~mmaemu.Profile` whose split-K table is a recording's.

    The table holds every recorded heuristic row. Its envelope is fitted on the training rows and
    tested once on the held-out ones (:func:`heldout_mask`). The preset and split family are the probes'
    verdict (or ``preset=`` / ``split_family=``). The profile is ``validated`` only when a replay report
    of this very recording (``replay.json`` in the directory, or ``report=``) passed, the probes fit a
    preset and at least one live call was replayed; otherwise ``experimental``. The report must be
    attested (:mod:`mmaemu.recording._attestation`: written by this user's replay, unedited). "This very recording"
    means these bytes: the report names the digest of the files' content it replayed
    (:attr:`~mmaemu.recording.Recording.digest`), and the files are read and hashed again here,
    so a file edited after the replay (resealed or not) never yields a validated profile.
    ``profile.evidence`` and ``profile.source`` say what was proven.

    Args:
        directory: the recording directory, or a :class:`~mmaemu.recording.Recording` already read.
        name: registry name (default ``"rec-<gpu>-<digest[:8]>"``).
        workspace_bytes: the caller's workspace (default: the recording's torch workspace).
        preset: an FP8 preset (a name or a :class:`~mmaemu.presets.Preset`) to use instead of the probes' verdict.
        split_family: a :class:`~mmaemu.platforms._profiles.SplitFamily` to use instead of the probes' verdict.
        report: a replay report (default: ``replay.json`` in the directory, if present).
        register: also :func:`~mmaemu.platforms.register_profile` it (with its table).
        verdict: the probes' verdict, when already computed (:func:`mmaemu.recording._verdict.verdict_from_recording`).

    Raises:
        RecordingDamagedError: the recording is damaged (a changed, missing, unsealed or malformed file, a
            link or special file in the directory, a mistyped field); the message names the file and field.
        ValueError: no heuristic table, or the probes fit no preset (or no split family while the table
            has splits) and none was passed.
        TypeError: ``split_family``, ``report`` or ``verdict`` of the wrong type.
        KeyError, UnsupportedFeatureError: ``preset`` is not an FP8 preset (:func:`~mmaemu.presets.get_preset`).
    """
    preset = _checked_options(preset, split_family, report, verdict)
    rec = directory if isinstance(directory, Recording) else Recording.open(directory)
    if not rec.has_table():
        raise ValueError(f"{rec.path}: the recording has no heuristic table (its heuristics section did not run)")
    env = rec.environment
    columns = rec.table_columns()
    rows = TableRows.of(columns)
    held = heldout_mask(rows)
    envelope = fit_envelope(rows.select(~held))
    envelope["validation"] = validate_envelope(envelope, rows.select(held))
    if verdict is None:
        verdict = verdict_from_recording(rec)
    chosen_preset, family = _chosen(rec, rows, verdict, preset, split_family)
    ws = int(workspace_bytes if workspace_bytes is not None else env.get("torch_workspace_bytes", 1 << 20))
    if ws == 0 and bool((rows.S[(rows.setting & 3) == WS_BYTES.index(0)] > 1).any()):
        raise ValueError(f"{rec.path}: this GPU split K without a workspace; a workspace-0 profile would be wrong off the table")
    proof = _ReplayProof.of(report if report is not None else replay_report(rec), rec, chosen_preset, family)
    table = _table(rec, columns, envelope, proof)
    validated = proof.passed and proof.live_equal > 0 and preset is None and verdict.preset is not None
    env_status = {ws_: v["status"] for ws_, v in envelope["validation"].items()}
    evidence = _evidence(rec, proof, verdict, preset, split_family, env_status, len(rows), int(held.sum()))
    source = (f"recording {rec.path.name} ({env.get('gpu')}, cuBLASLt {env.get('cublaslt')}, digest {rec.digest[:12]}): "
              f"replay {proof.status}, {proof.live_equal} of {proof.live_total} live calls equal; "
              f"{len(rows):,} heuristic rows; envelope {env_status or 'none'}; probes: {verdict.summary}")
    profile = Profile(
        name=name or f"rec-{_slug(str(env.get('gpu', 'gpu')))}-{rec.digest[:8]}", preset=chosen_preset,
        split_family=family, gpu=str(env.get("gpu", "unknown")), sm_count=int(env.get("sm_count") or 1),
        cublaslt=str(env.get("cublaslt", "unknown")), torch_version=str(env.get("torch", "unknown")),
        caller=Caller.TORCH, workspace_bytes=ws, maturity=Maturity.VALIDATED if validated else Maturity.EXPERIMENTAL,
        table_id=table.table_id, source=source, evidence=evidence,
        bias_order=verdict.bias_order if preset is None else None,
        rowwise_kernel=verdict.rowwise_kernel if preset is None else None,
    )
    if register:
        register_profile(profile, table=table, replace=True)
    else:
        register_table(table, replace=True)
    return profile


def _checked_options(preset: str | Preset | None, split_family: SplitFamily | None, report: object,
                     verdict: object) -> Preset | None:
    """The preset resolved, after checking every option's type (nothing has been read yet)."""
    if split_family is not None and not isinstance(split_family, SplitFamily):
        raise TypeError(f"split_family must be a SplitFamily or None, got {split_family!r}")
    if report is not None and not isinstance(report, Mapping):
        raise TypeError(f"report must be a replay report (a dict, ReplayReport.to_json()) or None, got {type(report).__name__}")
    if verdict is not None and not isinstance(verdict, ProbeVerdict):
        raise TypeError(f"verdict must be a ProbeVerdict or None, got {type(verdict).__name__}")
    return None if preset is None else get_preset(preset, warn=False)  # FP8 presets only; zoo presets are refused


@dataclass(frozen=True)
class _ReplayProof:
    """What a replay report proves for a profile of this recording, preset and split family."""

    status: str
    passed: bool
    live_equal: int
    live_total: int
    verified: list[tuple[Any, ...]]

    @staticmethod
    def of(report: Mapping[str, Any] | None, rec: Recording, preset: Preset, family: SplitFamily) -> _ReplayProof:
        if report is None:
            return _ReplayProof("not run", False, 0, 0, [])
        problem = attestation_problem(report)
        if problem is not None:
            return _ReplayProof(problem, False, 0, 0, [])
        if report.get("recording_digest") != rec.digest:
            return _ReplayProof("for another recording", False, 0, 0, [])
        calls = report.get("calls", {})
        equal, total = int(calls.get("equal", 0)), int(calls.get("total", 0))
        # a replay proves this profile only if it ran with this profile's preset and split family
        if (report.get("preset"), report.get("split_family")) != (preset.name, family.name.lower()):
            return _ReplayProof("under another preset or split family", False, equal, total, [])
        verified = sorted({tuple(c) for c in report.get("verified_combos", [])})
        passed = bool(report.get("passed"))
        return _ReplayProof("passed" if passed else "failed", passed, equal, total, verified)


def _table(rec: Recording, columns: dict[str, Any], envelope: dict[str, Any], proof: _ReplayProof) -> SplitTable:
    """The recording's split-K table, its id bound to the recording's digest and to what it says."""
    env = rec.environment
    # [Note: derived, not trusted] the settings' statistics are recomputed from the sealed columns; the
    # recorded info contributes descriptions only.
    # environment.cublaslt is any string the recording says: only its letters, digits, dots and hyphens enter
    # the id, which must be one printable word (mmaemu.platforms._table.register_table refuses others)
    version = "".join(c for c in str(env.get("cublaslt", "unknown")) if c.isalnum() or c in ".-")
    table_id = f"heur_{_slug(str(env.get('gpu', 'gpu')))}_lt{version}_{rec.digest[:8]}"
    info = {**rec.table_info(), "settings": setting_statistics(columns), "rows": len(columns["key"]),
            "split_rows": int((columns["S"] > 1).sum()), "table_id": table_id, "envelope": envelope,
            "verified_combos": [list(c) for c in proof.verified]}
    info["table_id"] = f"{table_id}{sha256_bytes(json.dumps(info, sort_keys=True, default=str).encode())[:6]}"
    return SplitTable.from_arrays(info["table_id"], info, columns)


def register_recording(directory: str | os.PathLike[str], **options: Any) -> Profile:
    """Build a profile from a recording and register it; returns the profile."""
    return profile_from_recording(directory, register=True, **options)
