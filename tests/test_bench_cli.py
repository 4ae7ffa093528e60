"""``python -m mmaemu bench`` checks bits before timing and writes its figures (small shapes here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmaemu import bench
from mmaemu.cli import main


def test_bench_small_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("numba")
    out = tmp_path / "bench.json"
    assert main(["bench", "--shape", "16x512x32", "--repeat", "1", "--configs", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    row = data["results"][0]
    assert row["shape"] == [16, 512, 32] and row["cpu_s"] > 0 and row["reference_s"] > 0
    assert [c["config"] for c in row["configs"]] == [c.label for c in bench.CONFIGS[1:]]
    printed = capsys.readouterr().out
    assert "reference / cpu" in printed and "not timed" not in printed  # K = 512: every config runs


def test_bench_refuses_to_time_unequal_bits(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A backend whose bits differ from the reference's is never timed: exit 1, the reason on stderr."""
    pytest.importorskip("numba")
    from mmaemu.backends import cpu

    real = cpu.accumulate
    monkeypatch.setattr(cpu, "accumulate", lambda *a: real(*a) * 2)
    assert main(["bench", "--shape", "16x32x16", "--repeat", "1"]) == 1
    captured = capsys.readouterr()
    assert "bits differ" in captured.err and "cpu backend" not in captured.out.split("median times:")[-1]


def test_first_call_latency_reports_cold_and_warm() -> None:
    pytest.importorskip("numba")
    latency = bench.first_call_latency()
    assert set(latency) == {"cold_s", "warm_s"}
    assert latency["warm_s"] < latency["cold_s"]  # the second process loads the kernels from disk
