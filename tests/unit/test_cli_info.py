"""``python -m mmaemu info`` reports versions, the device, profiles and backends."""

from __future__ import annotations

import pytest

from mmaemu._cli import main


def test_info(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and "hopper-te" in out and "b200-mma-sync-experimental" in out
    # one line per backend and device, from the capability table; auto's choice for CPU tensors marked
    assert "reference  cpu   available" in out
    lines = [line for line in out.splitlines() if line.startswith("  ") and " cpu " in line[:20]]
    assert [line.split()[0] for line in lines if line.split()[0] in ("reference", "cpu", "triton")] == [
        "reference", "cpu", "triton"]
    assert sum("backend='auto' takes it" in line for line in lines) == 1


def test_info_lines_fit_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    """Every line of ``info`` fits 100 columns (the cuBLASLt line was 400 characters): long items wrap."""
    assert main(["info"]) == 0
    long = [line for line in capsys.readouterr().out.splitlines() if len(line) > 100]
    assert not long, long
