"""Hostile input to the command line and the replay: every bad value is a usage error or a clean message
with a non-zero exit status, never a traceback and never a pass; a refused call changes nothing.

The recordings here come from ``tests/emulated_device.py`` (plumbing, as in ``test_record_replay.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from emulated_device import copy_recording

from mmaemu import _bench as bench, _cli as cli
from mmaemu.errors import RecordingDamagedError
from mmaemu.recording import _replay as replay_module
from mmaemu.recording._attestation import attest
from mmaemu.recording._record import main_record
from mmaemu.recording._replay import main_replay, replay
from mmaemu.recording._writer import RecordingWriter, reseal
from mmaemu._split import Scheme, SplitK

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def recorded(emulated_recording: Path) -> Path:
    return emulated_recording


def _copy(src: Path, tmp_path: Path) -> Path:
    return copy_recording(src, tmp_path, keep_report=True)


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI in-process; it must exit 2 through argparse, with the reason on stderr."""
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2, argv
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err, err
    return err


# -- 1. empty, partial, damaged recordings; arguments checked before anything is read or written ------------


def test_a_manifest_alone_does_not_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Old code: exit 0 ('PASSED') for a directory holding nothing but a manifest."""
    path = tmp_path / "empty"
    path.mkdir()
    (path / "manifest.json").write_text(json.dumps({"format": "mmaemu-recording", "format_version": 1}))
    assert cli.main(["replay", str(path)]) == 1
    out = capsys.readouterr().out
    assert "PASSED" not in out and "recording incomplete" in out
    assert "section heuristics is pending" in out and "section calls is pending" in out


def test_a_recording_killed_at_the_start_does_not_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    RecordingWriter(tmp_path / "r", environment={}, grid={}, budget={}).close()
    assert cli.main(["replay", str(tmp_path / "r")]) == 1
    assert "recording incomplete" in capsys.readouterr().out


def test_sections_claimed_complete_without_their_files_do_not_pass(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "claims"
    path.mkdir()
    sections = {s: "complete" for s in ("environment", "heuristics", "probes", "calls")}
    (path / "manifest.json").write_text(json.dumps({"format": "mmaemu-recording", "format_version": 1,
                                                    "sections": sections, "files": {}}))
    assert cli.main(["replay", str(path)]) == 1
    out = capsys.readouterr().out
    assert "section heuristics is complete but the manifest has no heuristics.npz, heuristics.json" in out


def test_a_complete_recording_without_calls_does_not_pass(recorded: Path, tmp_path: Path) -> None:
    path = _copy(recorded, tmp_path)
    (path / "calls.jsonl").write_text("")
    reseal(path)
    report = replay(path, write=False)
    assert not report.passed and "no live call was recorded" in report.incomplete


@pytest.mark.parametrize("option", [["--backend", "bogus"], ["--preset", "garbage"]])
def test_bad_replay_options_change_nothing(recorded: Path, tmp_path: Path, option: list[str],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Old code: --backend bogus replayed every call into an error and overwrote the passing replay.json
    (demoting the profile built from it); --preset garbage raised a KeyError traceback."""
    path = _copy(recorded, tmp_path)
    before = (path / "replay.json").read_bytes()
    _usage_error(["replay", str(path), *option], capsys)
    with pytest.raises(ValueError, match=option[0].lstrip("-")):
        replay(path, **{option[0].lstrip("-"): option[1]})  # type: ignore[arg-type]
    assert main_replay(str(path), *(("bogus", None) if option[0] == "--backend" else ("auto", "garbage")), None) == 2
    assert (path / "replay.json").read_bytes() == before


def test_an_unusable_backend_is_refused_before_reading(recorded: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from mmaemu.backends import _cpu as cpu

    path = _copy(recorded, tmp_path)
    before = (path / "replay.json").read_bytes()
    monkeypatch.setattr(cpu, "available", lambda device=None: (False, "numba is not installed"))
    with pytest.raises(ValueError, match="backend='cpu' cannot run here"):
        replay(path, backend="cpu")
    assert (path / "replay.json").read_bytes() == before


@pytest.mark.parametrize("name", ["heuristics.npz", "heuristics.json", "calls.jsonl", "calls.npz", "probes.json",
                                  "probes.npz"])
@pytest.mark.parametrize("resealed", [False, True])
def test_truncated_files_are_reported_by_name(recorded: Path, tmp_path: Path, name: str, resealed: bool,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Old code: a truncated npz raised BadZipFile / EOFError from deep inside the replay (a traceback); a
    resealed truncated calls.jsonl silently dropped the calls after the torn line. A damaged recording is exit 2
    (nothing could be replayed), with the report naming the file."""
    path = _copy(recorded, tmp_path)
    data = (path / name).read_bytes()
    cut = len(data) // 2
    if name == "calls.jsonl":  # tear a line in the middle of the file
        lines = data.splitlines(keepends=True)
        cut = sum(len(line) for line in lines[: len(lines) // 2]) + len(lines[len(lines) // 2]) // 2
    (path / name).write_bytes(data[:cut])
    if resealed:
        reseal(path)
    assert main_replay(str(path), "auto", None, None) == 2
    out = capsys.readouterr().out
    assert "FAILED" in out and f"DAMAGED FILE {name}" in out
    assert ("does not parse" if resealed else "changed since recording") in out
    report = json.loads((path / "replay.json").read_text())
    assert not report["passed"] and name in report["damaged"]


def test_a_wrongly_typed_call_record_is_reported(recorded: Path, tmp_path: Path) -> None:
    path = _copy(recorded, tmp_path)
    lines = (path / "calls.jsonl").read_text().splitlines()
    d = json.loads(lines[1])
    d["m"] = "16"
    lines[1] = json.dumps(d)
    (path / "calls.jsonl").write_text("\n".join(lines) + "\n")
    reseal(path)
    report = replay(path, write=False)
    assert not report.passed and "line 2" in report.damaged["calls.jsonl"] and report.outcomes == []


def test_an_unsealed_data_file_is_reported(recorded: Path, tmp_path: Path) -> None:
    path = _copy(recorded, tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["files"]["calls.npz"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    report = replay(path, write=False)
    assert not report.passed and "not sealed" in report.damaged["calls.npz"]


@pytest.mark.parametrize("content", [b"{\"format\": ", b"\xff\xfe\x00garbage", b"[1, 2]",
                                     b'{"format": "mmaemu-recording", "format_version": 1, "files": []}',
                                     b'{"format": "mmaemu-recording", "format_version": 1, "files": {"../x": "0"}}'])
def test_a_damaged_manifest_is_a_clean_error(recorded: Path, tmp_path: Path, content: bytes,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy(recorded, tmp_path)
    before = (path / "replay.json").read_bytes()
    (path / "manifest.json").write_bytes(content)
    with pytest.raises(RecordingDamagedError):
        replay(path)
    assert cli.main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mmaemu replay: ") and "manifest.json" in err
    assert (path / "replay.json").read_bytes() == before


def test_replay_of_a_file_or_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("x")
    assert "is not a directory" in _usage_error(["replay", str(tmp_path / "f")], capsys)
    assert "does not exist" in _usage_error(["replay", str(tmp_path / "none")], capsys)
    assert main_replay(str(tmp_path / "f"), "auto", None, None) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main_replay(str(tmp_path), "auto", None, None) == 2  # a directory without a manifest
    assert "no manifest.json" in capsys.readouterr().err


def test_an_interrupted_replay_writes_nothing(recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy(recorded, tmp_path)
    before = (path / "replay.json").read_bytes()

    def interrupt(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(replay_module, "_replay_call", interrupt)
    assert cli.main(["replay", str(path)]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert (path / "replay.json").read_bytes() == before
    assert sorted(p.name for p in path.iterdir()) == sorted(p.name for p in recorded.iterdir())


# -- 2. every option's value is checked by argparse ------------------------------------------------------------


_BAD = [
    ["explain", "-1", "5", "5"],
    ["explain", "18446744073709551616", "16", "16"],  # old code: a TypeError traceback (exit 1)
    ["explain", "16", "16", str(1 << 31)],
    ["explain", "a", "5", "5"],
    ["explain", "1.5", "5", "5"],
    ["explain", "16", "16", "16", "--fmt", "e4m3"],
    ["explain", "16", "16", "16", "--fmt", "e4m3,e9m9"],
    ["explain", "16", "16", "16", "--splitk", "x"],
    ["explain", "16", "16", "16", "--splitk", "0"],
    ["explain", "16", "16", "16", "--splitk", "4"],
    ["explain", "16", "16", "16", "--splitk", "4,sideways"],
    ["explain", "16", "16", "16", "--splitk", "1,2,3"],
    ["explain", "16", "16", "16", "--profile", "garbage"],
    ["explain", "16", "16", "16", "--out", "int8"],
    ["bench", "--shape", "axbxc"],
    ["bench", "--shape", "16x64"],
    ["bench", "--shape", "0x64x16"],
    ["bench", "--shape", "-16x64x16"],
    ["bench", "--shape", "16x0x16"],
    ["bench", "--shape", "16x16x0"],
    ["bench", "--shape", "16x16x-16"],
    ["bench", "--shape", "1.5x16x16"],
    ["bench", "--shape", "16x16x1e3"],
    ["bench", "--shape", "nanx16x16"],
    ["bench", "--shape", "16x16x16x16"],
    ["bench", "--shape", ""],
    ["bench", "--shape", "x"],
    ["bench", "--shape", "16xx16"],
    ["bench", "--shape", "\uff11\uff16x16x16"],  # full-width digits, which int() takes
    ["bench", "--shape", "16x16x1_6"],  # int() takes underscores too
    ["bench", "--shape", "16x16x0x10"],
    ["bench", "--shape", f"{1 << 31}x16x16"],
    ["bench", "--shape", "16x16x" + "9" * 5000],  # beyond int()'s digit limit
    ["bench", "--shape", "1000000x1000000x1000000"],  # old code: a RuntimeError traceback from the allocation
    ["bench", "--shape", "16x16x16", "--shape", "1000000x1000000x1000000"],
    ["explain", "1000000", "1000000", "1000000"],  # old code: a meta-tensor ValueError plan, exit 1
    ["explain", str(1 << 22), str(1 << 22), str(1 << 22)],
    ["explain", "\uff11\uff16", "16", "16"],
    ["explain", "1_6", "16", "16"],
    ["explain", "16", "16", "9" * 5000],
    ["explain", "16", "16", "16e3"],
    ["explain", "0x10", "16", "16"],
    ["explain", "16", "", "16"],
    ["bench", "--profile", "garbage"],
    ["bench", "--preset", "garbage"],
    ["bench", "--repeat", "0"],
    ["bench", "--repeat", "two"],
    ["bench", "--json", "/nonexistent-dir/x.json"],
    ["bench", "--json", "{tmp}/full"],
    ["bench", "--json", "{tmp}/" + "x" * 300 + "/y.json"],  # ENAMETOOLONG from the path check itself
    ["bench", "--no-native=yes"],
    ["selftest", "--device", "nonsense"],
    ["record", "--out", "{tmp}/r", "--budget-minutes", "-1"],
    ["record", "--out", "{tmp}/r", "--budget-minutes", "0"],
    ["record", "--out", "{tmp}/r", "--budget-minutes", "nan"],
    ["record", "--out", "{tmp}/r", "--budget-minutes", "inf"],
    ["record", "--out", "{tmp}/r", "--budget-minutes", "x"],
    ["record", "--out", "{tmp}/r", "--torch-workspace", "12345"],
    ["record", "--out", "{tmp}/r", "--torch-workspace", "-1"],
    ["record", "--out", "{tmp}/r", "--grid", "huge"],
    ["record", "--out", "{tmp}/full"],
    ["record", "--out", "{tmp}/file"],
    ["record", "--out", "{tmp}/file/sub"],
    ["replay", "{tmp}/full", "--split-family", "diagonal"],
    ["replay", ""],
]


@pytest.mark.parametrize("argv", _BAD, ids=[" ".join(a) for a in _BAD])
def test_bad_option_values_are_usage_errors(argv: list[str], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Old code: tracebacks (ValueError, KeyError, RuntimeError) or, for record, a run that starts."""
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "file").write_text("x")
    _usage_error([a.replace("{tmp}", str(tmp_path)) for a in argv], capsys)
    assert not (tmp_path / "r").exists()


def test_a_closed_pipe_ends_quietly() -> None:
    """Old code: ``explain ... | head`` ended in a BrokenPipeError traceback."""
    script = f"{sys.executable} -m mmaemu explain 64 5760 1920 --fast | true; echo ${{PIPESTATUS[0]}}"  # true reads nothing
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.stdout.strip() == "141"


def test_usage_error_from_the_shell() -> None:
    done = subprocess.run([sys.executable, "-m", "mmaemu", "bench", "--shape", "axbxc"], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "MxNxK" in done.stderr


def test_good_option_values_still_parse() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["explain", "0", "16", "16", "--splitk", "4, pairwise", "--fmt", "E5M2,e4m3"])
    assert (args.M, args.splitk, args.fmt) == (0, SplitK(4, Scheme.PAIRWISE), (torch.float8_e5m2, torch.float8_e4m3fn))
    assert parser.parse_args(["explain", "1", "1", "1", "--splitk", "1"]).splitk == SplitK(1, Scheme.NONE)
    assert parser.parse_args(["explain", "1", "1", "1", "--splitk", "auto"]).splitk == "auto"
    args = parser.parse_args(["bench", "--shape", "16X64x32", "--shape", " 1 x 1 x 1 ", "--repeat", "2"])
    assert args.shape == [(16, 64, 32), (1, 1, 1)] and args.repeat == 2  # (M, N, K), as written
    args = parser.parse_args(["record", "--out", "new-dir", "--torch-workspace", str(4 << 20), "--budget-minutes", "0.5"])
    assert (args.torch_workspace, args.budget_minutes) == (4 << 20, 0.5)


def test_record_refuses_a_used_directory_before_asking_the_gpu(recorded: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Old code: without a GPU, a non-empty --out was reported as 'needs an NVIDIA GPU'; with a file as
    --out, NotADirectoryError was a traceback."""
    (tmp_path / "file").write_text("x")
    for out, message in ((str(recorded), "is not empty"), (str(tmp_path / "file"), "is not a directory")):
        assert main_record(out, 1.0, "quick", None) == 2
        assert message in capsys.readouterr().err
    assert main_record(str(tmp_path / "r"), 1.0, "quick", 12345) == 2
    assert "not one of the recorded workspaces" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_record_with_a_bad_workspace_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CUBLASLT_WORKSPACE_SIZE", "3")  # KiB: not a recorded workspace
    assert cli.main(["record", "--out", str(tmp_path / "r")]) == 2
    assert "CUBLASLT_WORKSPACE_SIZE" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


# -- 3. explain reports the backend a real call would use -------------------------------------------------------


def test_explain_reports_the_backend_of_a_cpu_call(capsys: pytest.CaptureFixture[str]) -> None:
    """Old code: meta tensors, so the plan always said backend='reference'."""
    pytest.importorskip("numba")
    assert cli.main(["explain", "64", "5760", "1920", "--fast"]) == 0
    out = capsys.readouterr().out
    assert "backend:    cpu" in out and "fallback" not in out


@pytest.mark.parametrize("argv", [["explain", "1000000", "1000000", "1000000"],
                                  ["bench", "--shape", "1000000x1000000x1000000"]])
def test_a_shape_this_machine_cannot_hold_is_refused_before_anything_is_allocated(
        argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The usage error comes from the sizes alone: nothing is allocated, not even reserved, first.

    Old code: explain reserved CPU operands, then planned meta tensors (a ValueError plan, exit 1); bench
    reserved them and ended in the allocator's RuntimeError (a traceback, exit 1).
    """
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("an operand was allocated")

    for name in ("empty", "empty_strided", "zeros", "randn"):
        monkeypatch.setattr(torch, name, refuse)
    err = _usage_error(argv, capsys)
    assert "memory" in err and "meta" not in err


def test_shape_errors_say_what_is_wrong(capsys: pytest.CaptureFixture[str]) -> None:
    assert "not an integer" in _usage_error(["bench", "--shape", "16x16x1.5"], capsys)
    assert "at least 1" in _usage_error(["bench", "--shape", "16x0x16"], capsys)
    assert "at most 2,147,483,647" in _usage_error(["bench", "--shape", f"16x16x{1 << 40}"], capsys)
    assert "at most 2,147,483,647" in _usage_error(["bench", "--shape", "16x16x" + "9" * 5000], capsys)
    assert "at most 2,147,483,647" in _usage_error(["explain", "16", "16", "9" * 5000], capsys)
    assert "MxNxK" in _usage_error(["bench", "--shape", "16x16"], capsys)
    err = _usage_error(["explain", "1000000", "1000000", "1000000"], capsys)
    assert err.startswith("usage: python -m mmaemu explain") and "1000000 x 1000000 x 1000000" in err
    err = _usage_error(["bench", "--shape", "1000000x1000000x1000000"], capsys)
    assert err.startswith("usage: python -m mmaemu bench") and "argument --shape" in err


# -- 4. bench --profile; the module docstring ----------------------------------------------------------------------


def test_bench_takes_a_profile(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[dict[str, object]] = []
    monkeypatch.setattr(bench, "main_bench", lambda shapes, **kw: seen.append({"shapes": shapes, **kw}) or 0)
    assert cli.main(["bench", "--profile", "ada", "--shape", "16x32x64"]) == 0
    assert seen[-1]["profile"] == "ada" and seen[-1]["shapes"] == [(16, 32, 64)]
    help_text = cli.build_parser()._subparsers._group_actions[0].choices["bench"].format_help()  # type: ignore[union-attr]
    assert "--profile" in help_text and "--preset" not in help_text


def test_the_cli_docstring_lists_every_command() -> None:
    commands = cli.build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert set(commands) == {"demo", "explain", "bench", "info", "selftest", "record", "replay"}
    assert cli.__doc__ is not None
    for name in commands:
        assert f"``{name}" in cli.__doc__, name


def test_a_replay_under_another_preset_does_not_validate_the_profile(recorded: Path, tmp_path: Path) -> None:
    """Old code: a passing replay with --preset X validated a profile built with the probes' preset Y."""
    from mmaemu.presets import Maturity
    from mmaemu.recording._profile import profile_from_recording

    path = _copy(recorded, tmp_path)
    report = json.loads((path / "replay.json").read_text())
    assert profile_from_recording(path).maturity is Maturity.VALIDATED
    report["preset"] = "ada"  # what `replay --preset ada` writes when every call matches under ada too
    (path / "replay.json").write_text(json.dumps(attest(report)))  # as this machine's replay would attest it
    profile = profile_from_recording(path)
    assert profile.maturity is Maturity.EXPERIMENTAL and profile.evidence is not None
    assert profile.evidence["replay"] == "under another preset or split family"
