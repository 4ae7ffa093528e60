"""``python -m mmaemu bench`` checks bits before timing and writes its figures (a small shape here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmaemu.cli import main


def test_bench_small_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("numba")
    out = tmp_path / "bench.json"
    assert main(["bench", "--shape", "16x64x32", "--repeat", "1", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    row = data["results"][0]
    assert row["shape"] == [16, 64, 32] and row["cpu_s"] > 0 and row["reference_s"] > 0
    assert "reference / cpu" in capsys.readouterr().out
