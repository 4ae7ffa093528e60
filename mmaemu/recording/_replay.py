"""``python -m mmaemu replay DIR``: check the emulator against a recording and report.

The report (``DIR/replay.json`` and a summary on stdout) says:

- **integrity**: the data files still have the sha256 the manifest recorded;
- **probes**: the verdict of :mod:`mmaemu.recording._probes` (which preset, slow interval and split family fit);
- **calls**: every live call replayed through :func:`mmaemu.scaled_mm` with the preset of the probes' verdict
  (or ``--preset``) and the split the heuristic chose, equal or not, by class (split or unsplit, random
  or adversarial); its inputs are regenerated and checked against their recorded sha256; calls whose
  two GPU runs differed are reported as nondeterministic; a call torch refused must be refused too;
- **heuristics**: every recorded row reproduced by :func:`mmaemu.platforms.resolve_splitk` under a
  profile built from the recording, the live calls' decisions equal to the table's, the envelope's
  held-out test, and, when the GPU, SM count and cuBLASLt version are a registered reference GPU's
  (:func:`mmaemu.platforms._gpus.gpu_of`), the rows equal to that GPU's table (drift).

Before anything else, the arguments are checked (an unknown or unusable ``backend``, an unknown
``preset``: :class:`ValueError`, nothing read or written). The recording is then read by the one
strict reader, :func:`mmaemu.recording.inspect`, as untrusted input: a link, a special file or
a damaged manifest in the directory is a :class:`~mmaemu.errors.RecordingDamagedError` (nothing
written); a data file that changed since it was sealed, is unsealed, oversized, or does not parse
(truncated, corrupt, a mistyped field, a call declaring a shape past the memory budget) is reported by
name and field, and the replay stops there. A recording must also be complete: every section
``complete`` (not ``partial``, ``pending`` or ``skipped``), its files in the manifest, at least one
heuristic row and one live call. The report is written attested
(:mod:`mmaemu.recording._attestation`), so that only this machine's replay validates a profile.

Exit status 0 only if everything the recording claims matches: a complete recording, no changed or
damaged file, every live call equal and deterministic, every heuristic row reproduced, no drift, and the
probes fit a preset; 1 when something replayed and did not match; 2 when nothing could be replayed
(a refused argument, a damaged recording). The envelope's held-out result is reported, not required (a
failed envelope ships as unvalidated, as in the seeds).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from ..backends import Backend, parse_backend, supports
from ..errors import MmaemuError, MmaemuWarning
from ..platforms._gpus import gpu_of
from ..platforms._profiles import Caller, Profile
from ..platforms._splitk import Problem, SplitSource, resolve_splitk
from ..platforms._table import Setting, SplitTable
from ..presets import Preset, get_preset
from .._split import SplitFamily
from ._attestation import attest
from ._blockwise import BLOCK_GRID, BLOCK_SECTIONS
from ._directory import RecordingDirectory
from ._envelope import TableRows
from ._format import SECTION_FILES, Inspection, Recording, inspect
from ._inputs import call_inputs, inputs_sha256
from ._probes import ProbeVerdict
from ._verdict import verdict_from_recording
from ._profile import profile_from_recording
from ._records import CallClass, CallRecord, Section, SectionStatus, fp32_scalar, output_bytes, output_sha256

__all__ = ["CallOutcome", "ReplayReport", "main_replay", "replay"]

#: Rows checked one by one through resolve_splitk per workspace (the rest by the vectorised lookup).
RESOLVE_SAMPLE = 2000


#: What analysing a recording's probes raises for a malformed probes file.
_ANALYSIS_ERRORS = (ValueError, KeyError, TypeError, IndexError)


@dataclass(frozen=True)
class CallOutcome:
    """One live call's replay.

    Attributes:
        id: the call's id.
        call_class: its class.
        equal: the emulator's bits equal the GPU's (and the GPU's two runs agreed).
        reason: ``"equal"``, ``"differs"``, ``"nondeterministic"``, ``"inputs"`` (regenerated inputs differ
            from the recorded ones), ``"error"`` (one side raised, the other did not) or ``"both raised"``.
        differing: differing elements, when the full output was stored.
        elements: the output's elements.
    """

    id: int
    call_class: CallClass
    equal: bool
    reason: str
    differing: int | None
    elements: int


@dataclass
class ReplayReport:
    """A replay's findings (see the module docstring); ``passed`` decides the exit status."""

    recording: str
    recording_digest: str
    sections: dict[str, str]
    changed_files: list[str]
    probes: dict[str, Any]
    preset: str | None
    split_family: str | None
    calls: dict[str, Any]
    heuristics: dict[str, Any]
    verified_combos: list[list[Any]]
    failures: list[str]
    outcomes: list[CallOutcome] = field(default_factory=list, repr=False)
    incomplete: list[str] = field(default_factory=list)
    damaged: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """True when everything the recording claims matches."""
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        """The report as JSON (``replay.json``)."""
        return {
            "format": "mmaemu-replay/1", "recording": self.recording, "recording_digest": self.recording_digest,
            "passed": self.passed, "sections": self.sections, "changed_files": self.changed_files,
            "probes": self.probes, "preset": self.preset, "split_family": self.split_family, "calls": self.calls,
            "heuristics": self.heuristics, "verified_combos": self.verified_combos, "failures": self.failures,
            "incomplete": self.incomplete, "damaged": self.damaged,
            "mismatches": [dataclasses.asdict(o) | {"call_class": o.call_class.value} for o in self.outcomes if not o.equal],
        }

    def summary(self) -> str:
        """A human-readable summary."""
        lines = [f"replay of {self.recording} (digest {self.recording_digest[:12]})"]
        lines.append("sections: " + ", ".join(f"{k} {v}" for k, v in self.sections.items()))
        if self.changed_files:
            lines.append(f"CHANGED FILES: {self.changed_files}")
        for name, why in self.damaged.items():
            lines.append(f"DAMAGED FILE {name}: {why}")
        for what in self.incomplete:
            lines.append(f"INCOMPLETE: {what}")
        lines.append(f"probes: {self.probes.get('summary', 'not recorded')}")
        c = self.calls
        lines.append(f"live calls: {c.get('equal', 0)} of {c.get('total', 0)} equal (preset {self.preset}, "
                     f"split family {self.split_family})")
        for cls, v in c.get("by_class", {}).items():
            lines.append(f"  {cls:22s} {v['equal']:5d} of {v['total']:5d} equal")
        h = self.heuristics
        if h:
            lines.append(f"heuristic rows: {h.get('rows', 0):,}; reproduced by resolve_splitk: "
                         f"{h.get('reproduced', 0):,} (lookup) and {h.get('resolved', 0):,} of {h.get('resolved_checked', 0):,} "
                         f"(one by one); live decisions equal to the table: {h.get('live_decisions_equal', 0)} of "
                         f"{h.get('live_decisions', 0)}")
            for ws, v in h.get("envelope", {}).items():
                lines.append(f"  envelope at workspace {int(ws) >> 20} MiB: {v['status']} ({v['tested']:,} held-out rows "
                             f"above the bound, {v['split_above_bound']} split)")
            if "drift" in h:
                d = h["drift"]
                lines.append(f"  drift against {d['table_id']}: {d['differ']} of {d['common']} common rows differ")
        lines.append("PASSED: everything the recording claims matches" if self.passed else "FAILED: " + "; ".join(self.failures))
        return "\n".join(lines)


def _replay_profile(rec: Recording, preset: Preset, family: SplitFamily) -> Profile:
    env = rec.environment
    return Profile(name="replay", preset=preset, split_family=family, gpu=str(env.get("gpu", "unknown")),
                   sm_count=max(1, int(env.get("sm_count", 1) or 1)), cublaslt=str(env.get("cublaslt", "unknown")),
                   torch_version=str(env.get("torch", "unknown")), caller=Caller.TORCH,
                   workspace_bytes=int(env.get("torch_workspace_bytes", 1 << 20)), maturity=preset.maturity,
                   table_id=None, source="replay")


def _replay_call(call: CallRecord, rec: Recording, profile: Profile, backend: str) -> CallOutcome:
    from .._call import scaled_mm

    elements = call.m * call.n
    a, b = call_inputs(call.data, call.seed, call.m, call.n, call.k, call.fmt_a, call.fmt_b)
    if inputs_sha256(a, b) != call.input_sha256:
        return CallOutcome(call.id, call.call_class, False, "inputs", None, elements)
    split: Any = 1 if call.S <= 1 else (call.S, profile.split_family.scheme_for(call.S, call.custom))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MmaemuWarning)
            out = scaled_mm(a, b.t(), fp32_scalar(call.scale_a_bits), fp32_scalar(call.scale_b_bits),
                            scale_result=None if call.scale_result_bits is None else fp32_scalar(call.scale_result_bits),
                            out_dtype=call.out.dtype, use_fast_accum=call.fast, profile=profile, splitk=split,
                            backend=backend)
    except Exception as exc:  # noqa: BLE001 - compared with what the GPU did
        if call.error is not None:
            return CallOutcome(call.id, call.call_class, True, "both raised", None, elements)
        return CallOutcome(call.id, call.call_class, False, f"error: emulator raised {type(exc).__name__}", None, elements)
    if call.error is not None:
        return CallOutcome(call.id, call.call_class, False, "error: the GPU raised, the emulator did not", None, elements)
    if not call.deterministic:
        return CallOutcome(call.id, call.call_class, False, "nondeterministic", None, elements)
    equal = output_sha256(out) == call.outputs[0]
    differing = None
    stored = rec.stored_output(call)
    if stored is not None:
        ours = np.frombuffer(output_bytes(out), dtype=stored.dtype.newbyteorder("<")).reshape(stored.shape)
        differing = int((ours != stored).sum())
    return CallOutcome(call.id, call.call_class, equal, "equal" if equal else "differs", differing, elements)


def _heuristics(rec: Recording, preset: Preset, family: SplitFamily, verdict: ProbeVerdict,
                failures: list[str]) -> dict[str, Any]:
    """Rows reproduced by resolve_splitk, live decisions, envelope, drift."""
    columns = rec.table_columns()
    rows = TableRows.of(columns)
    profile = profile_from_recording(rec, name="replay-heuristics", preset=preset, split_family=family, report={},
                                     verdict=verdict)
    assert profile.table_id is not None
    table = SplitTable.load(profile.table_id)
    envelope = table.info["envelope"]
    found = table.lookup_many(rows.setting, rows.m, rows.n, rows.k)
    reproduced = int(((found >= 0) & (table.S[np.maximum(found, 0)] == rows.S)).sum())
    out: dict[str, Any] = {"rows": len(rows), "reproduced": reproduced, "envelope": envelope["validation"],
                           "envelope_fit_rows": envelope.get("fit_rows", 0)}
    if reproduced != len(rows):
        failures.append(f"heuristics: {len(rows) - reproduced} recorded rows not reproduced by the table lookup")
    # one by one through resolve_splitk, a deterministic sample per workspace
    resolved = checked = 0
    workspaces = np.asarray([Setting.from_code(code).workspace_bytes for code in rows.setting], np.int64)
    for ws in np.unique(workspaces):
        idx = np.nonzero(workspaces == ws)[0]
        if len(idx) > RESOLVE_SAMPLE:
            idx = idx[np.linspace(0, len(idx) - 1, RESOLVE_SAMPLE).astype(np.int64)]
        variant = dataclasses.replace(profile, workspace_bytes=int(ws))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MmaemuWarning)
            for i in idx:
                s = Setting.from_code(int(rows.setting[i]))
                problem = Problem(int(rows.m[i]), int(rows.n[i]), int(rows.k[i]), s.fmt_a, s.fmt_b, s.out, s.fast)
                d = resolve_splitk(variant, problem)
                checked += 1
                resolved += int(d.parts == int(rows.S[i]) and d.source is SplitSource.TABLE)
    out.update(resolved=resolved, resolved_checked=checked)
    if resolved != checked:
        failures.append(f"heuristics: resolve_splitk gave another decision for {checked - resolved} of {checked} rows")
    # live decisions against the table
    live_total = live_equal = 0
    for call in rec.calls:
        if call.S == 0:
            continue
        live_total += 1
        setting = Setting(call.fmt_a, call.fmt_b, call.out, call.fast, call.workspace_bytes)
        row = table.lookup(setting.code, call.m, call.n, call.k)
        live_equal += int(row is not None and int(table.S[row]) == call.S and int(table.custom[row]) == call.custom)
    out.update(live_decisions=live_total, live_decisions_equal=live_equal)
    if live_equal != live_total:
        failures.append(f"heuristics: {live_total - live_equal} live calls' decisions differ from the table")
    # drift against the table of the registered reference GPU of the same platform
    env = rec.environment
    reference = gpu_of(env.get("gpu"), env.get("sm_count"), env.get("cublaslt"))
    if reference is not None and reference.table_id is not None:
        ref = SplitTable.load(reference.table_id)
        idx = ref.lookup_many(rows.setting, rows.m, rows.n, rows.k)
        common = idx >= 0
        recorded_custom = table.custom[np.maximum(found, 0)]
        differ = int((common & ((ref.S[np.maximum(idx, 0)] != rows.S)
                                | (ref.custom[np.maximum(idx, 0)] != recorded_custom))).sum())
        out["drift"] = {"table_id": reference.table_id, "common": int(common.sum()), "differ": differ}
        if differ:
            failures.append(f"heuristics: {differ} rows differ from the {reference.name}'s table {reference.table_id} "
                            "(drift)")
    return out


def _checked_arguments(backend: str, preset: str | Preset | None,
                       split_family: SplitFamily | None) -> Preset | None:
    """The preset, after checking every argument (nothing has been read yet).

    Raises:
        ValueError: an unknown backend or one that cannot run on this machine's CPU, an unknown preset,
            or a split family that is not a :class:`SplitFamily`.
    """
    chosen = parse_backend(backend)
    if chosen is not Backend.AUTO:
        support = supports(chosen, None, (), "cpu")  # the replay computes on CPU tensors
        if not support:
            raise ValueError(f"backend={chosen.value!r} cannot run here ({support.reason}); the replay computes on "
                             "CPU tensors: pass backend 'reference' or 'auto'")
    if split_family is not None and not isinstance(split_family, SplitFamily):
        raise ValueError(f"split_family={split_family!r} is not a SplitFamily")
    if preset is None:
        return None
    try:
        return get_preset(preset, warn=False)
    except (KeyError, ValueError, TypeError, MmaemuError) as exc:
        raise ValueError(f"preset={preset!r}: {exc.args[0] if exc.args else exc}") from None


_STATUS_HINT = {"pending": "never ran", "partial": "stopped by the time budget", "skipped": "skipped"}


def _incomplete(rec: Recording) -> list[str]:
    """What a complete recording has and this one lacks."""
    missing: list[str] = []
    sections = rec.manifest.get("sections", {})
    files = rec.manifest.get("files", {})
    required = BLOCK_SECTIONS if rec.manifest.get("grid", {}).get("name") == BLOCK_GRID else tuple(Section)
    for section in required:
        status = sections.get(section.value, SectionStatus.PENDING.value)
        if status != SectionStatus.COMPLETE.value:
            missing.append(f"section {section.value} is {status} ({_STATUS_HINT.get(status, status)})")
            continue
        absent = [name for name in SECTION_FILES[section] if name not in files]
        if absent:
            missing.append(f"section {section.value} is complete but the manifest has no {', '.join(absent)}")
        elif section is Section.HEURISTICS and not len(rec.table_columns()["key"]):
            missing.append("the heuristic table has no row")
        elif section is Section.CALLS and not rec.calls:
            missing.append("no live call was recorded")
    return missing


def _write_report(root: Path, report: ReplayReport) -> None:
    """Write ``replay.json``, attested (:mod:`mmaemu.recording._attestation`), whole or not at all: a new file
    renamed over the entry (never written through a link planted there)."""
    data = (json.dumps(attest(report.to_json()), indent=1, sort_keys=True) + "\n").encode()
    try:
        with RecordingDirectory(root) as d:
            d.write("replay.json", data)
    except OSError as exc:
        raise OSError(f"{root / 'replay.json'} cannot be written ({exc.strerror or exc}): the replay's report "
                      "was not saved") from exc


def _stopped(found: Inspection, problems: dict[str, str], failures: list[str]) -> ReplayReport:
    """The report of a replay that stopped at a damaged file: nothing was replayed."""
    failures.append("recording damaged: " + "; ".join(f"{k}: {v}" for k, v in problems.items())
                    + ": nothing was replayed; copy the recording again from the machine that recorded it")
    return ReplayReport(
        recording=str(found.path), recording_digest=found.digest, sections=dict(found.manifest.get("sections", {})),
        changed_files=found.changed, probes={"summary": "not analysed"}, preset=None, split_family=None,
        calls={"total": 0, "replayed": 0, "equal": 0, "by_class": {}}, heuristics={}, verified_combos=[],
        failures=failures, damaged=problems,
    )


def _replay_calls(rec: Recording, chosen: Preset | None, family: SplitFamily | None, backend: str,
                  failures: list[str]) -> tuple[list[CallOutcome], dict[str, dict[str, int]], set[tuple[bool, int, str, str, str]]]:
    """Every recorded call replayed under ``chosen`` and ``family`` (none when either is unknown): the
    outcomes, the totals per call class, and the split settings the equal calls verify. Appends to
    ``failures`` one line per reason of inequality."""
    outcomes: list[CallOutcome] = []
    by_class: dict[str, dict[str, int]] = {c.value: {"total": 0, "equal": 0} for c in CallClass}
    verified: set[tuple[bool, int, str, str, str]] = set()
    if rec.calls and (chosen is None or family is None):
        failures.append("calls: not replayed: " + ("no preset fits the probes (pass --preset)" if chosen is None
                                                   else "no split family fits the probes (pass --split-family)"))
    elif rec.calls:
        assert chosen is not None and family is not None
        profile = _replay_profile(rec, chosen, family)
        for call in rec.calls:
            o = _replay_call(call, rec, profile, backend)
            outcomes.append(o)
            by_class[o.call_class.value]["total"] += 1
            by_class[o.call_class.value]["equal"] += int(o.equal)
            if o.equal and call.S > 1 and call.error is None:
                setting = Setting(call.fmt_a, call.fmt_b, call.out, call.fast, call.workspace_bytes)
                verified.add(setting.combo(call.S, profile.split_family.scheme_for(call.S, call.custom)))
    bad = [o for o in outcomes if not o.equal]
    for reason in sorted({o.reason for o in bad}):
        group = [o for o in bad if o.reason == reason]
        classes = sorted({o.call_class.value for o in group})
        failures.append(f"calls: {len(group)} {reason} ({', '.join(classes)}; ids {[o.id for o in group[:10]]})")
    return outcomes, by_class, verified


def replay(path: str | os.PathLike[str], *, backend: str = "auto", preset: str | Preset | None = None,
           split_family: SplitFamily | None = None, write: bool = True) -> ReplayReport:
    """Replay a recording through the emulator (see the module docstring).

    Args:
        path: the recording directory.
        backend: the emulator backend for the live calls.
        preset: use this preset instead of the probes' verdict.
        split_family: use this split family instead of the probes' verdict.
        write: write ``replay.json`` into the recording directory.

    Returns:
        The report; ``report.passed`` is the exit rule.

    Raises:
        ValueError: a refused argument (see :func:`_checked_arguments`), a directory that is not writable
            while ``write``, or (:class:`RecordingDamagedError`) no readable recording manifest; nothing
            is written then.
    """
    chosen_preset = _checked_arguments(backend, preset, split_family)
    root = Path(path)
    found = inspect(root)
    if write and not os.access(root, os.W_OK):
        raise ValueError(f"{root} is not writable: the replay writes replay.json there; copy the recording "
                         "somewhere writable (or call replay(..., write=False))")
    failures: list[str] = []
    if found.changed:
        failures.append(f"files changed since recording: {found.changed}")
    rec = found.recording
    if rec is None:
        report = _stopped(found, found.damaged, failures)
        if write:
            _write_report(root, report)
        return report
    incomplete = _incomplete(rec)
    if incomplete:
        failures.append("recording incomplete: " + "; ".join(incomplete) + ": record again ('python -m mmaemu "
                        "record', with a larger --budget-minutes if the budget stopped it)")
    try:
        verdict: ProbeVerdict = verdict_from_recording(rec)
    except _ANALYSIS_ERRORS as exc:
        report = _stopped(found, {"probes.json": f"the probes cannot be analysed ({exc})"}, failures)
        if write:
            _write_report(root, report)
        return report
    if rec.probes() is not None and not verdict.fits:
        failures.append(f"probes: {verdict.summary}")
    chosen: Preset | None = chosen_preset if chosen_preset is not None else verdict.preset
    family = split_family if split_family is not None else verdict.split_family
    if family is None and not any(c.S > 1 for c in rec.calls):
        family = SplitFamily.CONTIGUOUS  # no split call: the family plays no part
    outcomes, by_class, verified = _replay_calls(rec, chosen, family, backend, failures)
    heuristics: dict[str, Any] = {}
    if rec.has_table():
        heuristics = _heuristics(rec, chosen or get_preset("hopper", warn=False), family or SplitFamily.CONTIGUOUS,
                                 verdict, failures)
    report = ReplayReport(
        recording=str(rec.path), recording_digest=rec.digest, sections=dict(rec.manifest.get("sections", {})),
        changed_files=found.changed, probes=verdict.to_json() if rec.probes() is not None else {"summary": "not recorded"},
        preset=chosen.name if chosen is not None else None, split_family=family.name.lower() if family else None,
        calls={"total": len(rec.calls), "replayed": len(outcomes), "equal": sum(o.equal for o in outcomes),
               "by_class": {k: v for k, v in by_class.items() if v["total"]}},
        heuristics=heuristics, verified_combos=[list(c) for c in sorted(verified)], failures=failures, outcomes=outcomes,
        incomplete=incomplete,
    )
    if write:
        _write_report(root, report)
    return report


def main_replay(path: str, backend: str, preset: str | None, split_family: str | None,
                stream: TextIO | None = None) -> int:
    """The ``replay`` command: print the summary; 0 only if everything matched, 1 when something did not,
    2 when the replay could not run: a refused argument or an unreadable recording (nothing written
    then), or damaged data files (the report, written, names them)."""
    stream = stream or sys.stdout
    families = {f.value: f for f in SplitFamily}
    if split_family is not None and split_family not in families:
        sys.stderr.write(f"mmaemu replay: split family {split_family!r} is not one of {sorted(families)}\n")
        return 2
    family = None if split_family is None else families[split_family]
    try:
        report = replay(path, backend=backend, preset=preset, split_family=family)
    except ValueError as exc:
        sys.stderr.write(f"mmaemu replay: {exc}\n")
        return 2
    except OSError as exc:
        sys.stderr.write(f"mmaemu replay: {exc}\n")
        return 2
    stream.write(report.summary() + "\n")
    if report.damaged:
        return 2
    return 0 if report.passed else 1
