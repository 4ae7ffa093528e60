"""``python -m mmaemu replay DIR``: check the emulator against a recording and report.

The report (``DIR/replay.json`` and a summary on stdout) says:

- **integrity**: the data files still have the sha256 the manifest recorded;
- **probes**: the verdict of :mod:`mmaemu.probes` (which preset, slow interval and split family fit);
- **calls**: every live call replayed through :func:`mmaemu.scaled_mm` with the preset of the probes' verdict
  (or ``--preset``) and the split the heuristic chose, equal or not, by class (split or unsplit, random
  or adversarial); its inputs are regenerated and checked against their recorded sha256; calls whose
  two GPU runs differed are reported as nondeterministic; a call torch refused must be refused too;
- **heuristics**: every recorded row reproduced by :func:`mmaemu.platform.resolve_splitk` under a
  profile built from the recording, the live calls' decisions equal to the table's, the envelope's
  held-out test, and, when the GPU, SM count and cuBLASLt version are a shipped profile's, the rows equal
  to the shipped table (drift).

Exit status 0 only if everything the recording claims matches: no changed file, every live call equal
and deterministic, every heuristic row reproduced, no drift, and the probes fit a preset. The envelope's
held-out result is reported, not required (a failed envelope ships as unvalidated, as in the seeds).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

from .errors import MmaemuWarning
from .formats import Fp8Format, OutFormat
from .model import Preset, get_preset
from .platform import (
    PROFILES,
    Caller,
    Problem,
    Profile,
    SplitFamily,
    SplitTable,
    scheme_for,
    resolve_splitk,
)
from .probes import ProbeVerdict, verdict_from_recording
from .recording import (
    OUT_NAMES,
    WS_BYTES,
    CallClass,
    CallRecord,
    Recording,
    TableRows,
    call_inputs,
    fp32_scalar,
    inputs_sha256,
    output_bytes,
    output_sha256,
    profile_from_recording,
)

__all__ = ["CallOutcome", "ReplayReport", "main_replay", "replay"]

_OUTS = [OutFormat.FLOAT32, OutFormat.BFLOAT16, OutFormat.FLOAT16, OutFormat.E4M3, OutFormat.E5M2]
_FMTS = [Fp8Format.E4M3, Fp8Format.E5M2]
#: Rows checked one by one through resolve_splitk per workspace (the rest by the vectorised lookup).
RESOLVE_SAMPLE = 2000


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
            "mismatches": [dataclasses.asdict(o) | {"call_class": o.call_class.value} for o in self.outcomes if not o.equal],
        }

    def summary(self) -> str:
        """A human-readable summary."""
        lines = [f"replay of {self.recording} (digest {self.recording_digest[:12]})"]
        lines.append("sections: " + ", ".join(f"{k} {v}" for k, v in self.sections.items()))
        if self.changed_files:
            lines.append(f"CHANGED FILES: {self.changed_files}")
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
    from .call import scaled_mm

    elements = call.m * call.n
    a, b = call_inputs(call.data, call.seed, call.m, call.n, call.k, call.fmt_a, call.fmt_b)
    if inputs_sha256(a, b) != call.input_sha256:
        return CallOutcome(call.id, call.call_class, False, "inputs", None, elements)
    split: Any = 1 if call.S <= 1 else (call.S, scheme_for(profile, call.S, call.custom).value)
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
    profile = profile_from_recording(rec.path, name="replay-heuristics", preset=preset, split_family=family, report={},
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
    for ws_code in np.unique(rows.setting & 3):
        idx = np.nonzero((rows.setting & 3) == ws_code)[0]
        if len(idx) > RESOLVE_SAMPLE:
            idx = idx[np.linspace(0, len(idx) - 1, RESOLVE_SAMPLE).astype(np.int64)]
        variant = dataclasses.replace(profile, workspace_bytes=WS_BYTES[int(ws_code)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MmaemuWarning)
            for i in idx:
                s = int(rows.setting[i])
                problem = Problem(int(rows.m[i]), int(rows.n[i]), int(rows.k[i]), _FMTS[(s >> 7) & 1], _FMTS[(s >> 6) & 1],
                                  _OUTS[(s >> 3) & 7], bool((s >> 2) & 1))
                d = resolve_splitk(variant, problem)
                checked += 1
                resolved += int(d.S == int(rows.S[i]) and d.source == "table")
    out.update(resolved=resolved, resolved_checked=checked)
    if resolved != checked:
        failures.append(f"heuristics: resolve_splitk gave another decision for {checked - resolved} of {checked} rows")
    # live decisions against the table
    live_total = live_equal = 0
    for call in rec.calls:
        if call.S == 0:
            continue
        live_total += 1
        setting = SplitTable.setting(call.fmt_a, call.fmt_b, call.out, call.fast, WS_BYTES.index(call.workspace_bytes))
        row = table.lookup(setting, call.m, call.n, call.k)
        live_equal += int(row is not None and int(table.S[row]) == call.S and int(table.custom[row]) == call.custom)
    out.update(live_decisions=live_total, live_decisions_equal=live_equal)
    if live_equal != live_total:
        failures.append(f"heuristics: {live_total - live_equal} live calls' decisions differ from the table")
    # drift against a shipped table of the same platform
    env = rec.environment
    for shipped in PROFILES.values():
        if shipped.table_id and (shipped.gpu, shipped.sm_count, shipped.cublaslt) == (env.get("gpu"), env.get("sm_count"), env.get("cublaslt")):
            ref = SplitTable.load(shipped.table_id)
            idx = ref.lookup_many(rows.setting, rows.m, rows.n, rows.k)
            common = idx >= 0
            recorded_custom = table.custom[np.maximum(found, 0)]
            differ = int((common & ((ref.S[np.maximum(idx, 0)] != rows.S)
                                    | (ref.custom[np.maximum(idx, 0)] != recorded_custom))).sum())
            out["drift"] = {"table_id": shipped.table_id, "common": int(common.sum()), "differ": differ}
            if differ:
                failures.append(f"heuristics: {differ} rows differ from the shipped table {shipped.table_id} (drift)")
            break
    return out


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
    """
    rec = Recording.open(path)
    failures: list[str] = []
    changed = rec.changed_files()
    if changed:
        failures.append(f"files changed since recording: {changed}")
    verdict: ProbeVerdict = verdict_from_recording(rec)
    if rec.probes() is not None and not verdict.fits:
        failures.append(f"probes: {verdict.summary}")
    chosen: Preset | None = get_preset(preset, warn=False) if preset is not None else verdict.preset
    family = split_family if split_family is not None else verdict.split_family
    if family is None and not any(c.S > 1 for c in rec.calls):
        family = SplitFamily.CONTIGUOUS  # no split call: the family plays no part
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
                scheme = scheme_for(profile, call.S, call.custom).value
                verified.add((call.fast, call.S, scheme, OUT_NAMES[_OUTS.index(call.out)],
                              f"{call.fmt_a.short_name}x{call.fmt_b.short_name}"))
    bad = [o for o in outcomes if not o.equal]
    for reason in sorted({o.reason for o in bad}):
        group = [o for o in bad if o.reason == reason]
        classes = sorted({o.call_class.value for o in group})
        failures.append(f"calls: {len(group)} {reason} ({', '.join(classes)}; ids {[o.id for o in group[:10]]})")
    heuristics: dict[str, Any] = {}
    if rec.has_table():
        heuristics = _heuristics(rec, chosen or get_preset("hopper", warn=False), family or SplitFamily.CONTIGUOUS,
                                 verdict, failures)
    report = ReplayReport(
        recording=str(rec.path), recording_digest=rec.digest, sections=dict(rec.manifest.get("sections", {})),
        changed_files=changed, probes=verdict.to_json() if rec.probes() is not None else {"summary": "not recorded"},
        preset=chosen.name if chosen is not None else None, split_family=family.name.lower() if family else None,
        calls={"total": len(rec.calls), "replayed": len(outcomes), "equal": sum(o.equal for o in outcomes),
               "by_class": {k: v for k, v in by_class.items() if v["total"]}},
        heuristics=heuristics, verified_combos=[list(c) for c in sorted(verified)], failures=failures, outcomes=outcomes,
    )
    if write:
        (rec.path / "replay.json").write_text(json.dumps(report.to_json(), indent=1, sort_keys=True) + "\n")
    return report


def main_replay(path: str, backend: str, preset: str | None, split_family: str | None,
                stream: TextIO | None = None) -> int:
    """The ``replay`` command: print the summary; 0 only if everything matched."""
    stream = stream or sys.stdout
    family = {"contiguous": SplitFamily.CONTIGUOUS, "round-robin": SplitFamily.ROUND_ROBIN, None: None}[split_family]
    try:
        report = replay(path, backend=backend, preset=preset, split_family=family)
    except ValueError as exc:
        stream.write(f"mmaemu replay: {exc}\n")
        return 2
    stream.write(report.summary() + "\n")
    return 0 if report.passed else 1
