"""The command line: ``python -m mmaemu explain`` prints the plan and exits 0 only for a valid call."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mmaemu.cli import main


def test_explain_quickstart_shape(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "64", "5760", "1920", "--out", "bf16", "--fast"]) == 0
    out = capsys.readouterr().out
    assert "runs:       yes" in out and "S = 1, none, from table" in out and "validated:  yes" in out


def test_explain_unknown_split_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "16", "256", "128", "--fast"]) == 1
    assert "SplitKUnknownError" in capsys.readouterr().out


def test_explain_of_a_refused_shape_prints_the_plan_and_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    """Not the error scaled_mm raises (which points back to explain): the plan, each split-K source's
    finding in order, and what to do; exit status 1, no traceback."""
    assert main(["explain", "16", "256", "128", "--fast"]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("mmaemu plan for M x N x K = 16 x 256 x 128")
    assert "runs:       no, SplitKUnknownError: no recorded evidence decides" in out
    assert 'validated:  no: the call is refused (SplitKUnknownError): no source of splitk="auto" decides' in out
    sources = [line.split(":")[0].strip() for line in lines if line.startswith("    ") and line[4] != " "]
    assert sources == ["table", "workspace0", "live-query", "envelope", "inference"]
    assert "K = 128 is outside 1,024 <= K <= 5,135" in out  # why the K-floor rule does not reach it
    assert "to decide:  Nearest shapes" in out and "splitk=1 only if" in out and "python -m mmaemu record" in out
    assert "See what is known" not in out and "Traceback" not in out


def test_explain_of_an_inferred_shape(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Single-token decode (1 x 11008 x 4096): runs, from inference, not validated, the warning listed."""
    assert main(["explain", "1", "11008", "4096"]) == 0
    out = capsys.readouterr().out
    assert "from inference (not verified)" in out and "h100-k-floor" in out
    assert "validated:  no: the split-K decision (S = 1, from inference) is not verified" in out
    assert "warns:      InferredSplitWarning" in out
    monkeypatch.setenv("MMAEMU_SPLITK_STRICT", "1")
    assert main(["explain", "1", "11008", "4096"]) == 1
    out = capsys.readouterr().out
    assert "inference:  off (MMAEMU_SPLITK_STRICT)" in out and "split-K:    undecided" in out


def test_explain_ada_split_and_rejection(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "16", "128", "8192", "--profile", "ada", "--fast"]) == 0
    assert "S = 8, pairwise" in capsys.readouterr().out
    assert main(["explain", "64", "5760", "1920", "--out", "e5m2", "--fast"]) == 1
    assert "CUBLAS_STATUS_NOT_SUPPORTED" in capsys.readouterr().out


def test_python_dash_m_entry_point() -> None:
    done = subprocess.run([sys.executable, "-m", "mmaemu", "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("mmaemu ")
