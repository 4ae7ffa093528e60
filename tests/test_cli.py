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


def test_explain_ada_split_and_rejection(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "16", "128", "8192", "--profile", "ada", "--fast"]) == 0
    assert "S = 8, pairwise" in capsys.readouterr().out
    assert main(["explain", "64", "5760", "1920", "--out", "e5m2", "--fast"]) == 1
    assert "CUBLAS_STATUS_NOT_SUPPORTED" in capsys.readouterr().out


def test_python_dash_m_entry_point() -> None:
    done = subprocess.run([sys.executable, "-m", "mmaemu", "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("mmaemu ")
