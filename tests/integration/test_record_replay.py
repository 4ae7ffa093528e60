"""PLUMBING tests of record -> recording -> replay -> profile_from_recording, on a CPU.

The recordings here are built by the recorder itself, driven by ``EmulatedDevice`` (tests/emulated_device.py):
its heuristic is a synthetic rule and its "GPU outputs" are mmaemu's own. These tests show that the format,
the replay's comparisons and exit rule, and the profile built from a recording are consistent; they are not
evidence about any GPU. No GPU run was made for them.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from emulated_device import TINY_GRID, EmulatedDevice, copy_recording

import mmaemu
from mmaemu.platforms._splitk import SplitSource
from mmaemu import _cli as cli
from mmaemu.formats import Fp8Format, OutFormat
from mmaemu.presets import Maturity
from mmaemu.platforms._profiles import USER_PROFILES, get_profile, register_profile, unregister_profile
from mmaemu.platforms._splitk import Problem, resolve_splitk
from mmaemu.platforms._table import SplitTable
from mmaemu.recording._budget import Budget
from mmaemu.recording._record import Recorder, record
from mmaemu.recording._format import Recording, inspect
from mmaemu.recording._writer import reseal
from mmaemu.recording._records import CallClass, CallRecord, Part, Section, SectionStatus
from mmaemu.recording._envelope import TableRows
from mmaemu.recording._profile import profile_from_recording
from mmaemu.recording._replay import main_replay, replay

E4 = Fp8Format.E4M3


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def recorded(emulated_recording: Path) -> Path:
    return emulated_recording


def _copy(src: Path, tmp_path: Path) -> Path:
    return copy_recording(src, tmp_path, keep_report=False)


def test_recording_format(recorded: Path) -> None:
    """Plumbing: the manifest, the table in SplitTable's format, the calls and the probes read back."""
    rec = Recording.open(recorded)
    assert rec.manifest["format"] == "mmaemu-recording" and rec.manifest["format_version"] == 1
    assert all(rec.section(s) is SectionStatus.COMPLETE for s in Section)
    assert inspect(recorded).changed == [] and inspect(recorded).damaged == {}
    assert set(rec.manifest["files"]) == {"heuristics.npz", "heuristics.json", "calls.jsonl", "calls.npz",
                                          "probes.json", "probes.npz"}
    table = SplitTable.from_files(recorded / "heuristics.npz", recorded / "heuristics.json")
    columns = rec.table_columns()
    assert {"key", "setting_start", "S", "custom", "reduction", "workspace", "part"} <= set(columns)
    rows = TableRows.of(columns)
    assert len(rows) == table.info["rows"] and int((rows.S > 1).sum()) == table.info["split_rows"]
    assert {int(p) for p in np.unique(rows.part)} == {int(Part.GRID), int(Part.HELDOUT), int(Part.MODEL), int(Part.LIVE)}
    assert {"fmt_a": "e4m3", "fmt_b": "e4m3", "out": "float8_e5m2"} not in table.info["rejects"]  # not in this grid
    # every class of live call, each run twice, some stored in full
    classes = {c.call_class for c in rec.calls}
    assert classes == set(CallClass)
    assert all(len(c.outputs) == 2 and c.deterministic for c in rec.calls)
    assert any(c.k % 128 for c in rec.calls)
    stored = [c for c in rec.calls if c.stored]
    assert stored and rec.stored_output(stored[0]) is not None
    assert CallRecord.from_json(json.loads(json.dumps(rec.calls[0].to_json()))) == rec.calls[0]
    probes = rec.probes()
    assert probes is not None and probes["verdict_at_recording"]["preset"] == "hopper"


def test_replay_passes_and_reports_by_class(recorded: Path) -> None:
    """Plumbing: an emulator-made recording replays with exit status 0, every class equal."""
    report = json.loads((recorded / "replay.json").read_text())
    assert report["passed"] and report["failures"] == []
    calls = report["calls"]
    assert calls["equal"] == calls["total"] > 0
    assert set(calls["by_class"]) == {c.value for c in CallClass}
    h = report["heuristics"]
    assert h["reproduced"] == h["rows"] and h["resolved"] == h["resolved_checked"] > 0
    assert h["live_decisions_equal"] == h["live_decisions"] == calls["total"]
    assert report["probes"]["preset"] == "hopper" and report["split_family"] == "contiguous"
    assert any(c[1] > 1 for c in report["verified_combos"])


def test_replay_cli_exit_status(recorded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["replay", str(recorded), "--backend", "cpu"]) == 0
    assert "PASSED" in capsys.readouterr().out


def test_one_flipped_output_bit_fails_by_class(recorded: Path, tmp_path: Path) -> None:
    """Plumbing: a recording whose stored output (and its sha256) claims one other bit fails the replay,
    which names the call's class; the integrity check alone would not catch it (the files are resealed)."""
    path = _copy(recorded, tmp_path)
    rec = Recording.open(path)
    victim = next(c for c in rec.calls if c.stored and c.S > 1)
    with np.load(path / "calls.npz") as data:
        arrays = {k: np.array(data[k]) for k in data.files}
    bits = arrays[f"out{victim.id}"]
    bits.reshape(-1)[3] ^= 1
    np.savez_compressed(path / "calls.npz", **arrays)
    new_sha = __import__("hashlib").sha256(bits.astype(bits.dtype.newbyteorder("<")).tobytes()).hexdigest()
    lines = (path / "calls.jsonl").read_text().splitlines()
    d = json.loads(lines[victim.id])
    d["outputs"] = [new_sha, new_sha]
    lines[victim.id] = json.dumps(d, sort_keys=True)
    (path / "calls.jsonl").write_text("\n".join(lines) + "\n")
    reseal(path)
    report = replay(path, backend="cpu")
    assert not report.passed
    bad = [o for o in report.outcomes if not o.equal]
    assert [(o.id, o.reason, o.differing) for o in bad] == [(victim.id, "differs", 1)]
    assert any(victim.call_class.value in f and "differs" in f for f in report.failures)
    assert main_replay(str(path), "cpu", None, None) == 1


def test_changed_file_and_nondeterminism_fail(recorded: Path, tmp_path: Path) -> None:
    """Plumbing: an edited data file (not resealed) and a call whose two runs differed both fail; a changed
    file is not trusted, so nothing is replayed from the recording until it is resealed."""
    path = _copy(recorded, tmp_path)
    lines = (path / "calls.jsonl").read_text().splitlines()
    d = json.loads(lines[0])
    d["outputs"] = [d["outputs"][0], "0" * 64]
    lines[0] = json.dumps(d, sort_keys=True)
    (path / "calls.jsonl").write_text("\n".join(lines) + "\n")
    report = replay(path, write=False)
    assert any("files changed" in f for f in report.failures)
    assert report.damaged.keys() == {"calls.jsonl"} and report.outcomes == []
    reseal(path)
    report = replay(path, write=False)
    assert [f for f in report.failures if "files changed" in f] == []
    assert [o.reason for o in report.outcomes if not o.equal] == ["nondeterministic"]


def test_profile_from_recording(recorded: Path) -> None:
    """Plumbing: the recorded profile's resolve_splitk reproduces the recorded rows, runs calls, and its
    maturity reflects the replay (validated after a passing replay of this very recording)."""
    profile = profile_from_recording(recorded, name="emulated-hopper")
    assert profile.maturity is Maturity.VALIDATED
    assert profile.preset is mmaemu.presets.HOPPER and profile.evidence is not None
    assert profile.evidence["replay"] == "passed" and profile.evidence["live_calls_equal"] > 0
    assert profile.workspace_bytes == 1 << 20 and profile.table_id is not None
    rows = TableRows.of(Recording.open(recorded).table_columns())
    ws1 = (rows.setting & 3) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # split combinations replayed on the 'GPU' do not warn
        for i in np.nonzero(ws1)[0][:: max(1, int(ws1.sum()) // 150)]:
            s = int(rows.setting[i])
            problem = Problem(int(rows.m[i]), int(rows.n[i]), int(rows.k[i]), (E4, Fp8Format.E5M2)[(s >> 7) & 1],
                              (E4, Fp8Format.E5M2)[(s >> 6) & 1],
                              [OutFormat.FLOAT32, OutFormat.BFLOAT16, OutFormat.FLOAT16, OutFormat.E4M3, OutFormat.E5M2][(s >> 3) & 7],
                              bool((s >> 2) & 1))
            d = resolve_splitk(profile, problem)
            if (d.parts, d.source) != (int(rows.S[i]), SplitSource.TABLE):
                raise AssertionError((i, d))
    # off the table, above the fitted bound, inside the M and N the grid reached (TINY_GRID: M 16 and 64, N up
    # to 4 x 8,192 / 16 = 2,048): the envelope (validated on the held-out rows) decides S = 1
    assert profile.evidence["envelope"]["1048576"] == "validated"
    envelope = SplitTable.load(profile.table_id).info["envelope"]
    bound = next(b for b in envelope["bounds"] if (b["ws"], b["out"], b["fast"], b["fmt_a"], b["fmt_b"])
                 == (1 << 20, "float32", True, "e4m3", "e4m3"))["B"][envelope["K_grid"].index(4096)]
    n = -(-(bound // 64 + 1) // 16) * 16
    assert n <= 2048
    d = resolve_splitk(profile, Problem(64, n, 4096, E4, E4, OutFormat.FLOAT32, True))
    assert (d.parts, d.source, d.verified, d.extrapolated) == (1, SplitSource.ENVELOPE, True, False)
    # beyond the N the recording reached: still S = 1, but extrapolated, not verified, and it warns (issue 46)
    with pytest.warns(mmaemu.UnvalidatedEnvelopeWarning, match="N = 4,096 is outside the 16 <= N <= 2,048"):
        d = resolve_splitk(profile, Problem(bound // 4096 + 1, 4096, 4096, E4, E4, OutFormat.FLOAT32, True))
    assert (d.parts, d.source, d.verified, d.extrapolated) == (1, SplitSource.ENVELOPE, False, True)
    # a registered user profile is found by name, and scaled_mm runs under it with splitk="auto"
    register_profile(profile)
    try:
        assert get_profile("emulated-hopper") is profile
        a = torch.ones(16, 4096).to(torch.float8_e4m3fn)
        b = torch.ones(256, 4096).to(torch.float8_e4m3fn)
        one = torch.tensor(1.0)
        plan = mmaemu.explain(a, b.t(), one, one, out_dtype=torch.float32, use_fast_accum=True, profile="emulated-hopper")
        assert plan.split is not None and (plan.split.parts, plan.split.source) == (2, SplitSource.TABLE)
        out = mmaemu.scaled_mm(a, b.t(), one, one, out_dtype=torch.float32, use_fast_accum=True, profile="emulated-hopper")
        assert torch.equal(out, torch.full((16, 256), 4096.0))
    finally:
        unregister_profile("emulated-hopper")
    assert "emulated-hopper" not in USER_PROFILES


def test_profile_without_a_replay_is_experimental(recorded: Path, tmp_path: Path) -> None:
    path = _copy(recorded, tmp_path)
    profile = profile_from_recording(path)
    assert profile.maturity is Maturity.EXPERIMENTAL and profile.evidence is not None
    assert profile.evidence["replay"] == "not run" and "replay not run" in profile.source
    with pytest.warns(mmaemu.UnverifiedSplitWarning):  # no replayed split call backs this profile's splits
        resolve_splitk(profile, Problem(16, 256, 4096, E4, E4, OutFormat.FLOAT32, True))


def test_record_without_cuda_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    assert cli.main(["record", "--out", str(tmp_path / "r"), "--budget-minutes", "1"]) == 2
    err = capsys.readouterr().err
    assert "needs an NVIDIA GPU" in err and "torch.cuda.is_available() is False" in err
    assert not (tmp_path / "r").exists()


class _Clock:
    """A fake clock: each reading advances ten seconds."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 10.0
        return self.t


def test_budget_stops_cleanly_and_the_partial_recording_replays(tmp_path: Path) -> None:
    """Plumbing: a budget that runs out mid-sweep leaves a readable recording with the sections marked."""
    budget = Budget(3.0, clock=_Clock())  # 180 fake seconds: the sweep stops after 10 readings (640 queries)
    path = Recorder(EmulatedDevice("hopper"), tmp_path / "partial", grid=TINY_GRID, budget=budget).run()
    rec = Recording.open(path)
    assert rec.section(Section.HEURISTICS) is SectionStatus.PARTIAL
    assert rec.section(Section.ENVIRONMENT) is SectionStatus.COMPLETE
    assert rec.manifest["budget"]["stopped"] and rec.has_table()
    assert inspect(path).changed == []
    report = replay(path, preset="hopper", split_family=mmaemu.platforms._profiles.SplitFamily.CONTIGUOUS, write=False)
    assert not [f for f in report.failures if not f.startswith(("probes", "recording incomplete"))], report.failures
    assert not report.passed and "section heuristics is partial (stopped by the time budget)" in report.incomplete


def test_recording_directory_must_be_new(recorded: Path) -> None:
    with pytest.raises(FileExistsError):
        record(recorded, budget_minutes=1, grid=TINY_GRID, device=EmulatedDevice(), progress=None)


def test_the_bias_probes_decide_the_bias_order(recorded: Path, tmp_path: Path) -> None:
    """Plumbing: the recorder's bias probes tell the two candidate epilogues apart. The emulated GPU of
    the shared recording computes 'after-scale'; one recorded here computes 'fused'; each verdict names its own, the
    profile built from it carries it, and its biased calls no longer warn as unverified."""
    from mmaemu._epilogue import BiasOrder
    from mmaemu.recording._verdict import verdict_from_recording

    after = verdict_from_recording(Recording.open(recorded))
    assert after.bias_probes == 6 and after.bias_orders == (BiasOrder.AFTER_SCALE,) and after.fits
    path = tmp_path / "fused"
    record(path, budget_minutes=30, grid=TINY_GRID, device=EmulatedDevice("hopper", bias_order=BiasOrder.FUSED),
           progress=None)
    report = replay(path)
    assert report.passed, report.summary()
    assert "bias order fused" in report.probes["summary"]
    profile = profile_from_recording(path, name="emulated-fused")
    assert profile.bias_order is BiasOrder.FUSED and profile.evidence is not None
    assert profile.evidence["bias_order"] == "fused"
    assert profile_from_recording(recorded, name="emulated-after").bias_order is BiasOrder.AFTER_SCALE


def test_the_rowwise_probes_decide_the_rowwise_kernel(recorded: Path) -> None:
    """Plumbing: the recorder's row-wise probes name the row-wise kernel candidate the (emulated) GPU computes: the
    shared recording's emulated H100 runs the source's model, which its verdict and its profile name; that profile's
    row-wise calls no longer warn as unrecorded."""
    from mmaemu.recording._verdict import verdict_from_recording

    verdict = verdict_from_recording(Recording.open(recorded))
    assert verdict.rowwise_probes == 5 and verdict.rowwise_kernels == ("cutlass-rowwise-sm90",) and verdict.fits
    assert "row-wise kernel cutlass-rowwise-sm90" in verdict.summary
    profile = profile_from_recording(recorded, name="emulated-rowwise")
    assert profile.rowwise_kernel == "cutlass-rowwise-sm90" and profile.evidence is not None
    assert profile.evidence["rowwise_kernel"] == "cutlass-rowwise-sm90"
    a = torch.ones(16, 32).to(torch.float8_e4m3fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", mmaemu.UnrecordedKernelWarning)
        plan = mmaemu.explain(a, a.t(), torch.ones(16, 1), torch.ones(1, 16), out_dtype=torch.bfloat16, profile=profile)
        mmaemu.scaled_mm(a, a.t(), torch.ones(16, 1), torch.ones(1, 16), out_dtype=torch.bfloat16, profile=profile)
    assert plan.kernel is not None and plan.kernel.decided and not plan.warnings


@pytest.mark.parametrize("base,kernel", [
    ("hopper", "cutlass-rowwise-sm90/order=row-first/promotion=256"),
    ("ada", "cutlass-rowwise-sm89/fusion=separate/accumulation=staged-residue-last"),
])
def test_an_emulated_gpu_of_another_rowwise_kind_is_recognised(base: str, kernel: str, tmp_path: Path) -> None:
    """Plumbing: an emulated GPU computing another row-wise candidate (sm_90 or sm_89) is recorded, replayed and
    recognised: its verdict, replay and profile name that candidate and no other."""
    path = tmp_path / "rowwise"
    record(path, budget_minutes=30, grid=TINY_GRID, device=EmulatedDevice(base, rowwise_kernel=kernel), progress=None)
    report = replay(path)
    assert report.passed, report.summary()
    assert report.probes["rowwise_kernels"] == [kernel]
    assert profile_from_recording(path, name=f"emulated-{base}-rowwise").rowwise_kernel == kernel
